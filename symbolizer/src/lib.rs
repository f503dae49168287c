//! # symbolizer — binaries and counters to sample profiles
#![deny(missing_docs)]

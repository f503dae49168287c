//! # exporter — sample profiles to bytes
#![deny(missing_docs)]

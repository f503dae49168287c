//! # exporter — sample profiles to bytes
//!
//! Stage four: one writer (and where needed reader) per format in [`format`]: LLVM text and
//! extbinary sample profiles, and llvm-profgen's unsymbolized profile (mergeable counters).
#![deny(missing_docs)]

pub mod format;

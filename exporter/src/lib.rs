//! # exporter — sample profiles to bytes
//!
//! Stage four: one writer (and where needed reader) per format in [`format`]: LLVM text and
//! extbinary sample profiles, llvm-profgen's unsymbolized profile (mergeable counters),
//! pprof, MemProf YAML and flame graphs. Pure file formats: no network, no runtime; the
//! daemon's HTTP side is the `service` crate.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod format;

//! # exporter — sample profiles to bytes
//!
//! Stage four: one writer (and where needed reader) per format in [`format`]: LLVM text and
//! extbinary sample profiles, and llvm-profgen's unsymbolized profile (mergeable counters);
//! and the daemon's HTTP side: [`http`] (the API), [`metrics`] (Prometheus families),
//! [`store`] (the read model over the state directory).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod format;
pub mod http;
pub mod metrics;
pub mod profile_quality;
pub mod sampling_guidance;
pub mod store;

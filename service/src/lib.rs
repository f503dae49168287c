//! # service — the daemon's read side
//!
//! What `pgo-agent run` serves: [`http`] (the API: profiles by build id in every format of
//! the `exporter` crate, heap profiles, `/metrics`), [`store`] (the read model over the state
//! directory and the workers' live snapshots), [`metrics`] (the Prometheus families), and the
//! per-profile verdicts it reports: [`profile_quality`] and [`sampling_guidance`].
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod http;
pub mod loaded_binaries;
pub mod metrics;
pub mod profile_quality;
pub mod sampling_guidance;
pub mod store;

//! The profile verifier: is a sample profile still good for a binary? In the spirit of
//! LLVM's profile verification (the sample loader's stale-profile detection and
//! llvm-profgen's density warning), four checks, one file each:
//!
//! * [`stale`]: probe-based functions whose `!CFGChecksum` differs from the binary's
//!   `.pseudo_probe_desc` (the compiler drops such a function's profile);
//! * [`dropped`]: functions with samples in the raw counters that the profile lacks;
//! * [`consistency`]: per function, its total, entry and call-site counts agree with its
//!   block counts (flow conservation, exact for what llvm-profgen writes);
//! * [`density`]: llvm-profgen's profile density is below its threshold (too few samples
//!   for the hot functions).
//!
//! [`verify`] runs them all; reading the profile and the samples is the caller's job (the
//! readers live in the exporter, the sample pipeline in the daemon).

pub mod consistency;
pub mod density;
pub mod dropped;
pub mod stale;

use unwinder::CounterSet;

use crate::binary::ProfiledBinary;
use crate::profile::SampleProfile;

pub use consistency::{ConsistencyIssue, ConsistencyReport, IssueKind};
pub use density::{DensityReport, DENSITY_CUTOFF_HOT, DENSITY_THRESHOLD};
pub use dropped::{DroppedFunction, DroppedReport};
pub use stale::{stale_sample_share, StaleFunction, StaleReport};

/// Thresholds of the checks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VerifyOptions {
    /// Relative tolerance of the consistency comparisons: `a` and `b` agree when
    /// `|a − b| ≤ tolerance · max(a, b)`.
    pub tolerance: f64,
    /// The density below which the density check fails (llvm-profgen's
    /// `--profile-density-threshold`).
    pub density_threshold: f64,
    /// Per-million share of the samples the density is taken over (llvm-profgen's
    /// `--profile-density-cutoff-hot`).
    pub density_cutoff_hot: u32,
    /// A function needs at least this many raw samples to count as dropped.
    pub min_dropped_samples: u64,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            tolerance: 0.01,
            density_threshold: DENSITY_THRESHOLD,
            density_cutoff_hot: DENSITY_CUTOFF_HOT,
            min_dropped_samples: 1,
        }
    }
}

/// The result of every check.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifyReport {
    /// Checksum comparison against `.pseudo_probe_desc`.
    pub stale: StaleReport,
    /// Sampled functions missing from the profile (`None`: no samples given).
    pub dropped: Option<DroppedReport>,
    /// Flow conservation per function.
    pub consistency: ConsistencyReport,
    /// Profile density.
    pub density: DensityReport,
}

impl VerifyReport {
    /// Number of stale functions (for quality metrics).
    pub fn stale_count(&self) -> usize {
        self.stale.stale.len()
    }

    /// Number of dropped functions (0 when no samples were given).
    pub fn dropped_count(&self) -> usize {
        self.dropped.as_ref().map_or(0, |d| d.dropped.len())
    }

    /// True when every check passed.
    pub fn passed(&self) -> bool {
        self.stale.passed()
            && self.dropped.as_ref().is_none_or(DroppedReport::passed)
            && self.consistency.passed()
            && self.density.passed()
    }
}

/// Runs every check of `profile` against `binary` (and `counters`, the raw samples of the
/// run the profile came from, when given).
pub fn verify(
    profile: &SampleProfile,
    binary: &ProfiledBinary,
    counters: Option<&CounterSet>,
    options: &VerifyOptions,
) -> VerifyReport {
    VerifyReport {
        stale: {
            let mut st = stale::check_stale(profile, |name| {
                binary
                    .probe_desc(crate::guid::function_guid(name))
                    .map(|d| d.hash)
            });
            st.binary_without_probes = st.checked > 0 && !binary.has_pseudo_probes();
            st
        },
        dropped: counters.map(|c| {
            let sampled = dropped::sampled_functions(binary, c);
            dropped::check_dropped(profile, &sampled, options.min_dropped_samples)
        }),
        consistency: consistency::check_consistency(profile, options.tolerance),
        density: {
            let mut d = density::check_density(
                profile,
                options.density_cutoff_hot,
                options.density_threshold,
            );
            // The samples, when given, tell it exactly: a profile whose calls were all
            // inlined (pre-inlined LBR) has no call targets either.
            if let Some(c) = counters {
                d.stack_samples_only = density::counters_without_branches(c);
            }
            d
        },
    }
}

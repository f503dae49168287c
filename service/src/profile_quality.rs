//! Profile-quality figures exported as gauges: llvm-profgen's profile density and the
//! taken-branches-to-text-bytes ratio.
//!
//! **Density** (llvm-profgen 19 `ProfileGeneratorBase::calculateDensity`): for each
//! top-level profile, the sum of its body sample counts including nested inlinees, divided
//! by its number of body entries including nested inlinees (for probe profiles the probe
//! count stands in for the size); profiles without body entries are skipped. Sorted by
//! density descending (ties: fewer samples first), densities are taken while the
//! accumulated samples are below `cutoff_hot / 1e6` of the total; the result is the last
//! density taken (0 for an empty profile). llvm-profgen warns below 50
//! (`--profile-density-threshold`); `--profile-density-cutoff-hot` defaults to 990000.

use symbolizer::ProfiledBinary;
use unwinder::CounterSet;

/// The density and its default cutoff live with the profile verifier
/// (`symbolizer::verify::density`), which also fails a profile below the threshold.
pub use symbolizer::verify::density::{profile_density, DENSITY_CUTOFF_HOT};

/// The verifier's stale and dropped function counts of `profile` against `binary` (and
/// the raw `counters`, when given) as `(stale, dropped)`: figures for quality metrics
/// (`symbolizer::verify`).
pub fn stale_and_dropped(
    profile: &symbolizer::profile::SampleProfile,
    binary: &ProfiledBinary,
    counters: Option<&CounterSet>,
) -> (usize, usize) {
    let report = symbolizer::verify::verify(
        profile,
        binary,
        counters,
        &symbolizer::verify::VerifyOptions::default(),
    );
    (report.stale_count(), report.dropped_count())
}

/// `branches` taken branches per byte of function code in `binary` (0 when the binary has
/// no functions).
pub fn taken_branches_per_text_byte(branches: u64, binary: &ProfiledBinary) -> f64 {
    let text: u64 = binary
        .functions()
        .flat_map(|f| f.ranges.iter())
        .map(|&(s, e)| e.saturating_sub(s))
        .sum();
    if text == 0 {
        0.0
    } else {
        branches as f64 / text as f64
    }
}

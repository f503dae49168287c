//! Profile density: are there enough samples on the hot functions?
//!
//! **Density** (llvm-profgen 19 `ProfileGeneratorBase::calculateDensity`): for each
//! top-level profile, the sum of its body sample counts including nested inlinees, divided
//! by its number of body entries including nested inlinees (for probe profiles the probe
//! count stands in for the size); profiles without body entries are skipped. Sorted by
//! density descending (ties: fewer samples first), densities are taken while the
//! accumulated samples are below `cutoff_hot / 1e6` of the total; the result is the last
//! density taken (0 for an empty profile). llvm-profgen warns below
//! [`DENSITY_THRESHOLD`] (`--profile-density-threshold`); `--profile-density-cutoff-hot`
//! defaults to [`DENSITY_CUTOFF_HOT`], the summary's hot cutoff.
//!
//! The check fails when the density is below the threshold: the hot functions, those that
//! make up 99% of the samples, have on average fewer samples per block than that. The
//! report also gives the summary's hot count threshold (the smallest count among the
//! counts making up 99% of the total), the count clang calls hot.

use crate::profile::{FunctionSamples, ProfileSummary, SampleProfile};

/// llvm-profgen's default `--profile-density-cutoff-hot`.
pub const DENSITY_CUTOFF_HOT: u32 = 990_000;

/// llvm-profgen's default `--profile-density-threshold`.
pub const DENSITY_THRESHOLD: f64 = 50.0;

/// The density check's result.
#[derive(Clone, Debug, PartialEq)]
pub struct DensityReport {
    /// The profile density (see the module docs).
    pub density: f64,
    /// The threshold it was compared with.
    pub threshold: f64,
    /// The summary's hot count threshold.
    pub hot_count_threshold: u64,
    /// The profile has body samples but no call target anywhere: it was made from samples
    /// without branch stack (cpu-clock call stacks counted by leading IP; their head
    /// samples, if any, come from entry probes).
    pub stack_samples_only: bool,
}

impl DensityReport {
    /// True when the density reaches the threshold.
    pub fn passed(&self) -> bool {
        self.density >= self.threshold
    }

    /// How many times the samples (at the same rate: the sampling time) the density needs
    /// to reach the threshold, as llvm-profgen estimates it (`threshold / density`);
    /// `None` when it passed or the profile is empty.
    pub fn more_samples_factor(&self) -> Option<f64> {
        (!self.passed() && self.density > 0.0).then(|| self.threshold / self.density)
    }
}

/// Whether a function (with its inlinees) has call targets.
fn has_branch_counts(f: &FunctionSamples) -> bool {
    f.body.values().any(|b| !b.call_targets.is_empty())
        || f.callsites
            .values()
            .flat_map(|callees| callees.values())
            .any(has_branch_counts)
}

/// [`DensityReport::stack_samples_only`] of `profile`.
pub fn stack_samples_only(profile: &SampleProfile) -> bool {
    let mut any_body = false;
    for f in profile.profiles.values() {
        if has_branch_counts(f) {
            return false;
        }
        let (mut samples, mut size) = (0, 0);
        body_samples_and_size(f, &mut samples, &mut size);
        any_body |= samples > 0;
    }
    any_body
}

fn body_samples_and_size(f: &FunctionSamples, samples: &mut u64, size: &mut u64) {
    *size += f.body.len() as u64;
    for b in f.body.values() {
        *samples = samples.saturating_add(b.count);
    }
    for callees in f.callsites.values() {
        for callee in callees.values() {
            body_samples_and_size(callee, samples, size);
        }
    }
}

/// The profile density of `profile` (see the module docs).
pub fn profile_density(profile: &SampleProfile, cutoff_hot: u32) -> f64 {
    let mut list: Vec<(f64, u64)> = Vec::new();
    let mut total = 0u64;
    for f in profile.profiles.values() {
        let (mut samples, mut size) = (0u64, 0u64);
        body_samples_and_size(f, &mut samples, &mut size);
        if size == 0 {
            continue;
        }
        total = total.saturating_add(samples);
        list.push((samples as f64 / size as f64, samples));
    }
    list.sort_by(|a, b| {
        b.0.partial_cmp(&a.0)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.1.cmp(&b.1))
    });
    // llvm-profgen compares with `Total * (float)Cutoff / 1000000` (float, then double).
    let limit = total as f64 * f64::from(cutoff_hot as f32) / 1_000_000.0;
    let (mut accumulated, mut density) = (0u64, 0.0);
    for (d, s) in list {
        if (accumulated as f64) >= limit {
            break;
        }
        accumulated = accumulated.saturating_add(s);
        density = d;
    }
    density
}

/// Computes the density of `profile` over `cutoff_hot` and compares it with `threshold`.
pub fn check_density(profile: &SampleProfile, cutoff_hot: u32, threshold: f64) -> DensityReport {
    DensityReport {
        density: profile_density(profile, cutoff_hot),
        threshold,
        hot_count_threshold: ProfileSummary::compute(profile).hot_count_threshold(),
        stack_samples_only: stack_samples_only(profile),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{LineLocation, SampleContext};

    fn func(name: &str, counts: &[u64]) -> FunctionSamples {
        let mut f = FunctionSamples::new(SampleContext::from_name(name));
        for (i, &c) in counts.iter().enumerate() {
            f.body
                .entry(LineLocation::new(i as u32 + 1, 0))
                .or_default()
                .count = c;
        }
        f
    }

    fn three_functions() -> SampleProfile {
        let mut p = SampleProfile::default();
        // hot: 3000 / 3 = 1000; warm: 40 / 2 = 20; cold: 1 / 1 = 1.
        for f in [
            func("hot", &[1000, 1000, 1000]),
            func("warm", &[20, 20]),
            func("cold", &[1]),
        ] {
            p.profiles.insert(f.context.clone(), f);
        }
        p
    }

    #[test]
    fn stack_samples_only_and_the_shortfall() {
        let mut p = three_functions();
        let r = check_density(&p, DENSITY_CUTOFF_HOT, DENSITY_THRESHOLD);
        assert!(r.stack_samples_only);
        // Density 20 against 50: 2.5× the samples.
        assert_eq!(r.more_samples_factor(), Some(2.5));
        // A call target anywhere (here in an inlinee) means branch samples.
        let mut callee = func("callee", &[5]);
        callee
            .body
            .get_mut(&LineLocation::new(1, 0))
            .unwrap()
            .call_targets
            .insert("x".into(), 5);
        let hot = p.profiles.values_mut().next().unwrap();
        hot.callsites
            .entry(LineLocation::new(1, 0))
            .or_default()
            .insert("callee".into(), callee);
        assert!(!stack_samples_only(&p));
        assert!(!stack_samples_only(&SampleProfile::default()));
        let r = check_density(&three_functions(), DENSITY_CUTOFF_HOT, 10.0);
        assert_eq!(r.more_samples_factor(), None);
    }

    #[test]
    fn density_follows_llvm_profgen() {
        let p = three_functions();
        // Total 3041; 99% = 3010.59: hot (3000) is below, warm brings 3040 ≥ limit → 20.
        assert_eq!(profile_density(&p, DENSITY_CUTOFF_HOT), 20.0);
        // A 50% cutoff stops after hot.
        assert_eq!(profile_density(&p, 500_000), 1000.0);
        assert_eq!(
            profile_density(&SampleProfile::default(), DENSITY_CUTOFF_HOT),
            0.0
        );
    }

    #[test]
    fn check_fails_below_the_threshold() {
        let p = three_functions();
        let r = check_density(&p, DENSITY_CUTOFF_HOT, DENSITY_THRESHOLD);
        // Counts 1000 ×3, 20 ×2, 1: 99% of 3041 is 3010.59, reached with the 20s.
        assert_eq!(
            (r.density, r.hot_count_threshold, r.passed()),
            (20.0, 20, false)
        );
        assert!(check_density(&p, DENSITY_CUTOFF_HOT, 20.0).passed());
    }
}

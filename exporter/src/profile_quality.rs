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

use symbolizer::profile::{FunctionSamples, SampleProfile};
use symbolizer::ProfiledBinary;
use unwinder::CounterSet;

/// llvm-profgen's default `--profile-density-cutoff-hot`.
pub const DENSITY_CUTOFF_HOT: u32 = 990_000;

fn body_samples_and_size(f: &FunctionSamples, samples: &mut u64, size: &mut u64) {
    *size += f.body.len() as u64;
    for b in f.body.values() {
        *samples += b.count;
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
        total += samples;
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
        accumulated += s;
        density = d;
    }
    density
}

/// Taken branches counted in `counters` per byte of function code in `binary` (0 when
/// the binary has no functions).
pub fn taken_branches_per_text_byte(counters: &CounterSet, binary: &ProfiledBinary) -> f64 {
    let branches: u64 = counters
        .contexts
        .values()
        .flat_map(|c| c.branches.values())
        .sum();
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

#[cfg(test)]
mod tests {
    use super::*;
    use symbolizer::profile::{LineLocation, SampleContext};

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

    #[test]
    fn density_follows_llvm_profgen() {
        let mut p = SampleProfile::default();
        // hot: 3000 / 3 = 1000; warm: 40 / 2 = 20; cold: 1 / 1 = 1.
        for f in [
            func("hot", &[1000, 1000, 1000]),
            func("warm", &[20, 20]),
            func("cold", &[1]),
        ] {
            p.profiles.insert(f.context.clone(), f);
        }
        // Total 3041; 99% = 3010.59: hot (3000) is below, warm brings 3040 ≥ limit → 20.
        assert_eq!(profile_density(&p, DENSITY_CUTOFF_HOT), 20.0);
        // A 50% cutoff stops after hot.
        assert_eq!(profile_density(&p, 500_000), 1000.0);
        assert_eq!(
            profile_density(&SampleProfile::default(), DENSITY_CUTOFF_HOT),
            0.0
        );
    }
}

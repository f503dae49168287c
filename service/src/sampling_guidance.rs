//! How long to keep sampling: a profile's density against llvm-profgen's threshold, and
//! the sampling time still needed at the rate the binary is sampled at.
//!
//! The density (see [`crate::profile_quality`]) is a sample count per body entry of the
//! hottest functions: it grows in proportion to the samples. A profile of density `d` made
//! of samples taken over `t` seconds reaches the threshold `D` (llvm-profgen's 50) after
//! about `t · D / d` seconds of sampling at the same rate, i.e. `t · (D / d − 1)` more.
//! `t` is the time the aggregate's samples stand for at the current rate
//! `r = counted / sampled_secs` (samples counted per second since the daemon started
//! sampling the binary): `t = samples / r`.

use serde::Serialize;

/// llvm-profgen 19's `--profile-density-threshold` default: below it, it warns that the
/// profile would optimize better with more samples.
pub use symbolizer::verify::DENSITY_THRESHOLD;

/// Whether a profile has samples enough.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DensityVerdict {
    /// At or above the threshold.
    Enough,
    /// Below the threshold: the profile is usable (clang applies it), and more samples make
    /// it better.
    MoreSamplesNeeded,
    /// No body samples at all.
    Empty,
}

/// A profile's density, its verdict, and the sampling time it still needs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct DensityGuidance {
    /// llvm-profgen's density of the profile.
    pub density: f64,
    /// The threshold it is compared with ([`DENSITY_THRESHOLD`]).
    pub threshold: f64,
    /// The verdict.
    pub verdict: DensityVerdict,
    /// Samples counted per second while the binary was sampled (`None`: not known, e.g. an
    /// aggregate restored and not sampled since).
    pub sample_rate_hz: Option<f64>,
    /// Seconds of sampling the profile's samples stand for at that rate (`t`).
    pub sampled_secs: Option<f64>,
    /// Seconds of sampling at that rate the threshold needs in all (`t · threshold /
    /// density`).
    pub needed_secs: Option<f64>,
    /// Seconds of sampling still needed (`needed_secs − sampled_secs`; 0 when enough).
    pub more_secs: Option<f64>,
}

/// The guidance for a profile of `density` made of `samples` samples, the binary's
/// samples having been counted at `counted` over `sampled_secs` seconds.
pub fn density_guidance(
    density: f64,
    samples: u64,
    counted: u64,
    sampled_secs: u64,
) -> DensityGuidance {
    let verdict = if density <= 0.0 {
        DensityVerdict::Empty
    } else if density >= DENSITY_THRESHOLD {
        DensityVerdict::Enough
    } else {
        DensityVerdict::MoreSamplesNeeded
    };
    let rate = (counted > 0 && sampled_secs > 0).then(|| counted as f64 / sampled_secs as f64);
    let t = rate.map(|r| samples as f64 / r);
    let needed = t.filter(|_| density > 0.0).map(|t| {
        if verdict == DensityVerdict::Enough {
            t
        } else {
            t * DENSITY_THRESHOLD / density
        }
    });
    DensityGuidance {
        density,
        threshold: DENSITY_THRESHOLD,
        verdict,
        sample_rate_hz: rate,
        sampled_secs: t,
        needed_secs: needed,
        more_secs: needed.zip(t).map(|(n, t)| (n - t).max(0.0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_needed_scales_with_the_density_shortfall() {
        // 999 Hz for 60 s, density 1.25: 40× the samples, 2400 s in all, 2340 s more.
        let g = density_guidance(1.25, 59_940, 59_940, 60);
        assert_eq!(g.verdict, DensityVerdict::MoreSamplesNeeded);
        assert_eq!(g.sample_rate_hz, Some(999.0));
        assert_eq!(g.sampled_secs, Some(60.0));
        assert_eq!(g.needed_secs, Some(2400.0));
        assert_eq!(g.more_secs, Some(2340.0));
        // Restored samples count at the current rate: 10 s of this run at 100/s, 3000
        // samples in the windows stand for 30 s; density 10 → 150 s in all.
        let g = density_guidance(10.0, 3000, 1000, 10);
        assert_eq!(
            (g.sampled_secs, g.needed_secs, g.more_secs),
            (Some(30.0), Some(150.0), Some(120.0))
        );
    }

    #[test]
    fn enough_empty_and_unknown_rate() {
        let g = density_guidance(80.0, 1000, 1000, 10);
        assert_eq!(g.verdict, DensityVerdict::Enough);
        assert_eq!(g.more_secs, Some(0.0));
        let g = density_guidance(0.0, 0, 0, 0);
        assert_eq!(g.verdict, DensityVerdict::Empty);
        assert_eq!((g.needed_secs, g.more_secs), (None, None));
        // Not sampled in this run: the verdict, without times.
        let g = density_guidance(5.0, 500, 0, 0);
        assert_eq!(g.verdict, DensityVerdict::MoreSamplesNeeded);
        assert_eq!((g.sample_rate_hz, g.more_secs), (None, None));
    }
}

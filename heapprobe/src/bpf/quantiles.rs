//! The exponential draws of the in-kernel sampler, precomputed: BPF has no floating point
//! and no logarithm, so the program picks one of [`QUANTILES`] integers with
//! `bpf_get_prandom_u32() & (QUANTILES − 1)`.
//!
//! Entry `k` is the mean of Exp(mean `I`) over its `k`-th probability stratum: with `U`
//! uniform on `(k/N, (k+1)/N]` and the draw `−ln(U)·I`, the conditional mean is
//! `N·I·(F((k+1)/N) − F(k/N))` with `F(u) = u − u·ln u` (an antiderivative of `−ln u`,
//! `F(0) = 0`). The strata are equally likely, so the table's mean is exactly `I` (up to
//! integer rounding): the long-run rate of samples per byte is `1/I` as with exact
//! exponential draws, and the estimate of a context of allocations small next to `I`
//! (weight ≈ `I/s`) stays unbiased. Entry 0 is the tail's mean, `I·(1 + ln N)`
//! (≈ 9.3 `I` for N = 4096).

/// Table entries (a power of two, indexed by the low bits of a random u32).
pub const QUANTILES: usize = 4096;

/// The table for mean interval `interval` bytes, largest draw first.
pub fn exponential_quantiles(interval: u64) -> Vec<u64> {
    let n = QUANTILES as f64;
    let f = |u: f64| if u <= 0.0 { 0.0 } else { u - u * u.ln() };
    (0..QUANTILES)
        .map(|k| {
            let (lo, hi) = (k as f64 / n, (k + 1) as f64 / n);
            let mean = n * (f(hi) - f(lo)) * interval as f64;
            // Non-negative; saturates at u64::MAX for absurd intervals (the `as` cast).
            mean.round() as u64
        })
        .collect()
}

/// The long-run probability that an allocation of `size` bytes is sampled when the
/// countdowns are drawn from `table` (mean `interval`): the chance that a renewal point of
/// the stationary process with gaps drawn from the table falls in a stretch of `size`
/// bytes, `P(R < s) = E[min(G, s)] / E[G]` (forward recurrence time `R`, gap `G`). With
/// exact exponential gaps this is `1 − exp(−s/I)`, what the weight inverts.
pub fn sampling_probability(table: &[u64], size: u64, interval: u64) -> f64 {
    if table.is_empty() || interval == 0 {
        return 1.0;
    }
    let sum: f64 = table.iter().map(|&q| q.min(size) as f64).sum();
    (sum / table.len() as f64 / interval as f64).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_probabilities_stay_within_a_tenth_of_a_percent_of_the_exponential_law() {
        let i = 512 * 1024u64;
        let t = exponential_quantiles(i);
        for s in [1, 64, 4000, 8000, i / 2, i, 2 * i, 4 * i, 8 * i] {
            let exact = -(-(s as f64) / i as f64).exp_m1();
            let ours = sampling_probability(&t, s, i);
            let rel = ours / exact - 1.0;
            assert!(rel.abs() < 1e-3, "size {s}: {ours} vs {exact} ({rel:+e})");
        }
        assert_eq!(sampling_probability(&t, 20 * i, i), 1.0);
    }

    #[test]
    fn table_mean_is_the_interval_and_tail_is_one_plus_ln_n() {
        let i = 512 * 1024u64;
        let t = exponential_quantiles(i);
        assert_eq!(t.len(), 4096);
        let mean = t.iter().map(|&v| v as f64).sum::<f64>() / t.len() as f64;
        // Rounding moves each entry by at most 0.5.
        assert!((mean - i as f64).abs() <= 0.5, "mean {mean}");
        // k = 0: N·F(1/N)·I = (1 + ln N)·I = 9.317766166719343·I.
        assert_eq!(t[0], (9.317_766_166_719_343 * i as f64).round() as u64);
        // k = N−1: N·(1 − F(1 − 1/N))·I = (1 + (N−1)·ln(1 − 1/N))·I ≈ I/(2N).
        let last = 1.0 + 4095.0 * (1.0f64 - 1.0 / 4096.0).ln();
        assert_eq!(t[4095], (last * i as f64).round() as u64);
        assert_eq!(t[4095], 64); // ≈ 524288 / 8192
        assert!(t.windows(2).all(|w| w[0] >= w[1]), "decreasing");
        // The median stratum (k = N/2) sits near ln 2 · I.
        assert!((t[2048] as f64 / i as f64 - std::f64::consts::LN_2).abs() < 1e-3);
        assert!(exponential_quantiles(0).iter().all(|&v| v == 0));
    }
}

//! Profile quality against ground truth: the weighted relative block-count delta of a
//! pseudo-probe sample profile, compared with the exact block counts of the same run (the
//! software LBR recorder's [`BinaryTruth`]).
//!
//! # Blocks
//!
//! A *block* is a pair (function, block-probe index): [`BlockKey`]. The compared set is the
//! block probes of the binary's `.pseudo_probe` section (kind [`ProbeKind::Block`]); call
//! probes share the index space but are call sites, not blocks, and are left out.
//!
//! **Truth count** `t_b`: the sum, over every copy of the block's probe in the binary, of the
//! execution count of the instruction at the copy's address (the probe's address is the
//! first instruction emitted after it; a copy whose address never ran counts 0). Copies come
//! from inlining, and from unrolling and vectorisation, which leave one copy per source
//! iteration; those often sit at one address (clang 19 at -O2 puts the 8 copies of each
//! probe of a fully unrolled 8-iteration loop at the loop's single straight-line block), and
//! each copy there still stands for one execution of the source block, so copies at a shared
//! address are all counted ([`TruthBlocks::same_address_copies`] says how many there were).
//! Several *different* blocks at one address (a block that became empty shares its
//! successor's first instruction) each get that instruction's count: that is all any
//! sample-based profile can observe, and llvm-profgen assigns it the same way (every probe
//! at an address gets the address's count). A probe the compiler optimised away has no
//! record in `.pseudo_probe`, so its block is not in the compared set (profile entries at its
//! index count as unmatched). Probes whose GUID has no `.pseudo_probe_desc` record (no name)
//! are skipped.
//!
//! **Profile count** `p_b`: the sum of the body samples at line offset = probe index (all
//! probe discriminators) over every [`FunctionSamples`] named `function` in the profile:
//! every top-level profile whatever its calling context, and every nested inlined callee at
//! any depth. This is the context-less merge of LLVM's `ProfileConverter::flattenProfile`
//! (CS contexts summed per leaf function, nested inlinees merged into their function's base
//! profile), applied to body counts. The inline path is deliberately not part of the key:
//! a CS context does not tell calling frames from inline frames, so the coarsest common
//! key, the function, is the one flat and CS profiles of both tools can be compared on.
//! Body entries at indices that are not block probes of the binary (call sites, probes of
//! functions outside the binary) are reported as [`QualityReport::unmatched_profile_total`].
//!
//! # Metric
//!
//! The CSSPGO RFC (llvm-dev, 2020) judges profile quality by comparing block counts with an
//! instrumentation profile of the same run; its exact formula is not in the material at
//! hand, so this module uses the definition below (issue 3's acceptance text names it the
//! weighted relative block-count delta). Samples and executions differ by an unknown scale
//! (the sampling period, LBR depth), so the profile is first normalised to the truth's total
//! over the compared blocks `B`:
//!
//! ```text
//! T = Σ_{b∈B} t_b,   P = Σ_{b∈B} p_b,   p̂_b = p_b · T / P   (p̂_b = 0 when P = 0)
//! delta = Σ_{b∈B} |p̂_b − t_b| / T  =  Σ_b (t_b / T) · |p̂_b − t_b| / t_b
//! ```
//!
//! i.e. each block's relative error weighted by its share of the executed blocks (a block
//! the profile gives counts but that never ran adds `p̂_b / T`). 0 is a perfect profile, 2
//! the worst (disjoint support); an empty profile scores 1. With both sides normalised to
//! distributions it equals `2 · (1 − overlap)` for the block overlap `Σ_b min(p̂_b, t_b) / T`
//! that `llvm-profdata overlap` style comparisons report.
//!
//! The same formula per function, with the profile normalised to that function's own truth
//! total, gives [`FunctionQuality::delta`]: the shape of the function's block distribution,
//! free of how hot the profile thinks the function is.
//! [`QualityReport::function_weighted_delta`] averages those weighted by `T_F / T`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use collector::ground_truth::{parse_hex, BinaryTruth};

use crate::binary::ProfiledBinary;
use crate::probe::ProbeKind;
use crate::profile::{FunctionSamples, SampleProfile};

/// A block: a function (probe-descriptor name) and a block-probe index in it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockKey {
    /// Function name as `.pseudo_probe_desc` and probe profiles spell it.
    pub func: String,
    /// Probe index (1 = entry block).
    pub probe_index: u32,
}

impl BlockKey {
    /// A key from its parts.
    pub fn new(func: impl Into<String>, probe_index: u32) -> BlockKey {
        BlockKey {
            func: func.into(),
            probe_index,
        }
    }
}

/// Counts per block.
pub type BlockCounts = BTreeMap<BlockKey, u64>;

/// Errors of the quality computation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QualityError {
    /// A ground-truth address is not `0x`-prefixed hex.
    #[error("ground truth of {binary}: invalid instruction address {text:?}")]
    InvalidAddress {
        /// The truth's binary path.
        binary: String,
        /// The address text.
        text: String,
    },
    /// The binary has no pseudo probes: block counts need them.
    #[error("{binary}: no pseudo probes; the block-count metric needs a probe-based binary")]
    NoProbes {
        /// The binary's name.
        binary: String,
    },
    /// No compared block executed: the metric divides by the truth total.
    #[error("no block probe of the compared binary was executed")]
    EmptyTruth,
}

/// One block-probe copy: what [`truth_block_counts_from`] needs of a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeSite<'a> {
    /// Function name of the probe (empty when its GUID has no descriptor).
    pub func: &'a str,
    /// Probe index.
    pub probe_index: u32,
    /// Address the probe is attached to (link-time).
    pub address: u64,
}

/// Truth block counts with what was merged or skipped on the way.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TruthBlocks {
    /// `t_b` for every block probe of the binary (0 when never executed).
    pub counts: BlockCounts,
    /// Block-probe copies read.
    pub probe_copies: usize,
    /// Copies at an address another copy of the same block also has (each is counted).
    pub same_address_copies: usize,
    /// Addresses carrying block probes of two or more different blocks.
    pub shared_addresses: usize,
    /// Copies skipped because their function has no name.
    pub unnamed_copies: usize,
}

/// Parses the truth's instruction counts (`"0x1130": 12345`) into a map by address.
pub fn instruction_counts(truth: &BinaryTruth) -> Result<HashMap<u64, u64>, QualityError> {
    truth
        .instructions
        .iter()
        .map(|(text, &count)| {
            parse_hex(text)
                .map(|addr| (addr, count))
                .ok_or_else(|| QualityError::InvalidAddress {
                    binary: truth.path.clone(),
                    text: text.clone(),
                })
        })
        .collect()
}

/// Truth block counts of every block probe of `binary`, from per-instruction execution
/// counts in the binary's link-time addresses (see the module docs for the rules).
pub fn truth_block_counts(
    binary: &ProfiledBinary,
    executions: &HashMap<u64, u64>,
) -> Result<TruthBlocks, QualityError> {
    if !binary.has_pseudo_probes() {
        return Err(QualityError::NoProbes {
            binary: binary.name().to_string(),
        });
    }
    let probes = binary.probes();
    let sites = probes
        .iter()
        .filter(|p| p.kind == ProbeKind::Block)
        .map(|p| ProbeSite {
            func: binary.probe_desc(p.guid).map_or("", |d| d.name.as_str()),
            probe_index: p.index,
            address: p.address,
        });
    Ok(truth_block_counts_from(sites, executions))
}

/// [`truth_block_counts`] over explicit block-probe copies.
pub fn truth_block_counts_from<'a>(
    sites: impl IntoIterator<Item = ProbeSite<'a>>,
    executions: &HashMap<u64, u64>,
) -> TruthBlocks {
    let mut out = TruthBlocks::default();
    let mut seen: BTreeSet<(BlockKey, u64)> = BTreeSet::new();
    let mut blocks_at: HashMap<u64, BTreeSet<BlockKey>> = HashMap::new();
    for site in sites {
        out.probe_copies += 1;
        if site.func.is_empty() {
            out.unnamed_copies += 1;
            continue;
        }
        let key = BlockKey::new(site.func, site.probe_index);
        blocks_at
            .entry(site.address)
            .or_default()
            .insert(key.clone());
        if !seen.insert((key.clone(), site.address)) {
            out.same_address_copies += 1;
        }
        let executed = executions.get(&site.address).copied().unwrap_or(0);
        let count = out.counts.entry(key).or_default();
        *count = count.saturating_add(executed);
    }
    out.shared_addresses = blocks_at.values().filter(|keys| keys.len() > 1).count();
    out
}

/// Context-less profile block counts: body samples per (function, probe index), summed over
/// all contexts, nested inlinees and probe discriminators (module docs).
pub fn profile_block_counts(profile: &SampleProfile) -> BlockCounts {
    fn add(fs: &FunctionSamples, out: &mut BlockCounts) {
        for (loc, sample) in &fs.body {
            let e = out
                .entry(BlockKey::new(fs.name(), loc.line_offset))
                .or_default();
            *e = e.saturating_add(sample.count);
        }
        for callees in fs.callsites.values() {
            for callee in callees.values() {
                add(callee, out);
            }
        }
    }
    let mut out = BlockCounts::new();
    for fs in profile.profiles.values() {
        add(fs, &mut out);
    }
    out
}

/// The metric for one function.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionQuality {
    /// Function name.
    pub func: String,
    /// Block probes of the function.
    pub blocks: usize,
    /// `T_F`: truth total over the function's blocks.
    pub truth_total: u64,
    /// `P_F`: profile total over the function's blocks.
    pub profile_total: u64,
    /// Delta with the profile normalised to `T_F`; `None` when `T_F = 0` (the function
    /// never ran, yet the profile has samples for it).
    pub delta: Option<f64>,
}

/// The metric for a whole profile.
#[derive(Clone, Debug, PartialEq)]
pub struct QualityReport {
    /// Weighted relative block-count delta over all compared blocks (profile normalised to
    /// the truth's total).
    pub delta: f64,
    /// `Σ_F (T_F / T) · delta_F` over functions that ran: the block-distribution error
    /// within functions alone.
    pub function_weighted_delta: f64,
    /// Compared blocks (block probes of functions that ran or have profile samples).
    pub blocks: usize,
    /// `T`.
    pub truth_total: u64,
    /// `P`.
    pub profile_total: u64,
    /// Profile body samples at keys that are not block probes of the binary.
    pub unmatched_profile_total: u64,
    /// Per function, for functions that ran or have profile samples, by name.
    pub functions: Vec<FunctionQuality>,
}

/// `Σ |p·scale − t| / Σ t` over `pairs` of (truth, profile), with scale = Σt / Σp.
fn normalised_delta(pairs: &[(u64, u64)]) -> Option<f64> {
    let t_sum: f64 = pairs.iter().map(|&(t, _)| t as f64).sum();
    let p_sum: f64 = pairs.iter().map(|&(_, p)| p as f64).sum();
    if t_sum == 0.0 {
        return None;
    }
    let scale = if p_sum > 0.0 { t_sum / p_sum } else { 0.0 };
    let abs: f64 = pairs
        .iter()
        .map(|&(t, p)| (p as f64 * scale - t as f64).abs())
        .sum();
    Some(abs / t_sum)
}

/// Compares profile block counts with truth block counts (module docs). The compared blocks
/// are the truth's keys of every function whose truth or profile total is non-zero.
pub fn compare(truth: &BlockCounts, profile: &BlockCounts) -> Result<QualityReport, QualityError> {
    let mut per_func: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    for (key, &t) in truth {
        let p = profile.get(key).copied().unwrap_or(0);
        per_func.entry(&key.func).or_default().push((t, p));
    }
    let unmatched_profile_total = profile
        .iter()
        .filter(|(k, _)| !truth.contains_key(*k))
        .fold(0u64, |a, (_, &c)| a.saturating_add(c));

    let mut all: Vec<(u64, u64)> = Vec::new();
    let mut functions = Vec::new();
    for (func, pairs) in per_func {
        let truth_total = pairs.iter().fold(0u64, |a, &(t, _)| a.saturating_add(t));
        let profile_total = pairs.iter().fold(0u64, |a, &(_, p)| a.saturating_add(p));
        if truth_total == 0 && profile_total == 0 {
            continue;
        }
        all.extend_from_slice(&pairs);
        functions.push(FunctionQuality {
            func: func.to_string(),
            blocks: pairs.len(),
            truth_total,
            profile_total,
            delta: normalised_delta(&pairs),
        });
    }
    let delta = normalised_delta(&all).ok_or(QualityError::EmptyTruth)?;
    let truth_total = all.iter().fold(0u64, |a, &(t, _)| a.saturating_add(t));
    let function_weighted_delta = functions
        .iter()
        .filter_map(|f| f.delta.map(|d| d * f.truth_total as f64))
        .sum::<f64>()
        / truth_total as f64;
    Ok(QualityReport {
        delta,
        function_weighted_delta,
        blocks: all.len(),
        truth_total,
        profile_total: all.iter().fold(0u64, |a, &(_, p)| a.saturating_add(p)),
        unmatched_profile_total,
        functions,
    })
}

/// The whole computation: truth of `binary` from the recorder's `truth`, blocks of
/// `profile`, and their comparison.
pub fn block_count_quality(
    binary: &ProfiledBinary,
    truth: &BinaryTruth,
    profile: &SampleProfile,
) -> Result<QualityReport, QualityError> {
    let executions = instruction_counts(truth)?;
    let truth_blocks = truth_block_counts(binary, &executions)?;
    compare(&truth_blocks.counts, &profile_block_counts(profile))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{ContextFrame, LineLocation, SampleContext};

    fn counts(entries: &[(&str, u32, u64)]) -> BlockCounts {
        entries
            .iter()
            .map(|&(f, i, c)| (BlockKey::new(f, i), c))
            .collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn hand_computed_delta() {
        // f: truth 60/30/10, profile 5/3/2 (×10 = 50/30/20); g: truth 100, profile 10.
        let truth = counts(&[
            ("f", 1, 60),
            ("f", 2, 30),
            ("f", 3, 10),
            ("g", 1, 100),
            ("h", 1, 0),
        ]);
        let profile = counts(&[
            ("f", 1, 5),
            ("f", 2, 3),
            ("f", 3, 2),
            ("g", 1, 10),
            ("g", 9, 4),
        ]);
        let r = compare(&truth, &profile).unwrap();
        // T = 200, P = 20, scale 10: |50−60| + |30−30| + |20−10| + |100−100| = 20 → 0.1.
        assert!(close(r.delta, 0.1), "{r:?}");
        assert_eq!((r.truth_total, r.profile_total, r.blocks), (200, 20, 4));
        // g:9 is not a block of the truth (a call probe, say); h never ran nor was sampled.
        assert_eq!(r.unmatched_profile_total, 4);
        assert_eq!(r.functions.len(), 2);
        let f = &r.functions[0];
        assert_eq!(
            (f.func.as_str(), f.blocks, f.truth_total, f.profile_total),
            ("f", 3, 100, 10)
        );
        assert!(close(f.delta.unwrap(), 0.2));
        assert!(close(r.functions[1].delta.unwrap(), 0.0));
        // (100 · 0.2 + 100 · 0) / 200.
        assert!(close(r.function_weighted_delta, 0.1));
    }

    #[test]
    fn global_normalisation_sees_misattributed_hotness() {
        // Same shape within each function, but the profile puts 3/4 of the samples in g.
        let truth = counts(&[("f", 1, 50), ("g", 1, 50)]);
        let profile = counts(&[("f", 1, 1), ("g", 1, 3)]);
        let r = compare(&truth, &profile).unwrap();
        // scale 25: |25−50| + |75−50| = 50 → 0.5; per function each is exact.
        assert!(close(r.delta, 0.5));
        assert!(close(r.function_weighted_delta, 0.0));
    }

    #[test]
    fn unexecuted_sampled_blocks_and_empty_profiles() {
        let truth = counts(&[("f", 1, 10), ("f", 2, 0), ("z", 1, 0)]);
        // A block that never ran but has samples adds p̂/T; z has samples and no truth.
        let r = compare(&truth, &counts(&[("f", 1, 1), ("f", 2, 1), ("z", 1, 2)])).unwrap();
        // scale 10/4: |2.5−10| + |2.5−0| + |5−0| = 15 → 1.5.
        assert!(close(r.delta, 1.5));
        assert_eq!(r.functions[1].delta, None);
        assert!(close(r.function_weighted_delta, 1.0));
        let empty = compare(&truth, &BlockCounts::new()).unwrap();
        assert!(close(empty.delta, 1.0));
        assert_eq!(
            compare(&counts(&[("f", 1, 0)]), &BlockCounts::new()),
            Err(QualityError::EmptyTruth)
        );
    }

    #[test]
    fn truth_sums_every_copy_and_shares_addresses() {
        let exec = HashMap::from([(0x10, 7), (0x20, 5), (0x30, 2)]);
        let site = |func, probe_index, address| ProbeSite {
            func,
            probe_index,
            address,
        };
        let t = truth_block_counts_from(
            [
                site("f", 1, 0x10),
                // Inlined copy of f:1 elsewhere: adds.
                site("f", 1, 0x20),
                // A second copy at 0x20 (an unrolled iteration): adds too.
                site("f", 1, 0x20),
                // f:2 emptied onto f:1's instruction: same count, shared address.
                site("f", 2, 0x10),
                // Never executed.
                site("f", 3, 0x40),
                site("", 1, 0x30),
            ],
            &exec,
        );
        assert_eq!(t.counts, counts(&[("f", 1, 17), ("f", 2, 7), ("f", 3, 0)]));
        assert_eq!(
            (
                t.probe_copies,
                t.same_address_copies,
                t.shared_addresses,
                t.unnamed_copies
            ),
            (6, 1, 1, 1)
        );
    }

    #[test]
    fn profile_counts_merge_contexts_inlinees_and_discriminators() {
        let mut p = SampleProfile {
            is_cs: true,
            is_probe_based: true,
            ..SampleProfile::default()
        };
        for site in [1, 2] {
            let ctx = SampleContext::from_frames(vec![
                ContextFrame::new("main", LineLocation::new(site, 0)),
                ContextFrame::new("foo", LineLocation::default()),
            ]);
            p.profile_mut(&ctx)
                .add_body_samples(LineLocation::new(3, 0), 4);
        }
        let main = p.profile_mut(&SampleContext::from_name("main"));
        main.add_body_samples(LineLocation::new(1, 0), 9);
        let foo = main.callee_mut(LineLocation::new(2, 0), "foo");
        foo.add_body_samples(LineLocation::new(3, 1), 2);
        foo.callee_mut(LineLocation::new(5, 0), "bar")
            .add_body_samples(LineLocation::new(1, 0), 6);
        assert_eq!(
            profile_block_counts(&p),
            counts(&[("bar", 1, 6), ("foo", 3, 10), ("main", 1, 9)])
        );
    }

    #[test]
    fn invalid_truth_address_is_an_error() {
        let truth = BinaryTruth {
            path: "/p/prog".into(),
            instructions: BTreeMap::from([("0x10".to_string(), 3), ("zz".to_string(), 1)]),
            ..BinaryTruth::default()
        };
        assert_eq!(
            instruction_counts(&truth),
            Err(QualityError::InvalidAddress {
                binary: "/p/prog".into(),
                text: "zz".into()
            })
        );
    }
}

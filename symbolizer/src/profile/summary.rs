//! [`ProfileSummary`]: the detailed profile summary clang uses for hot/cold thresholds
//! (LLVM's `SampleProfileSummaryBuilder`).

use std::collections::BTreeMap;

use super::context::CONTEXT_DUPLICATED_INTO_BASE;
use super::function_samples::FunctionSamples;
use super::location::LineLocation;
use super::sample_profile::SampleProfile;

/// `ProfileSummaryBuilder::DefaultCutoffs`, per million.
pub const DEFAULT_CUTOFFS: [u32; 16] = [
    10000, 100000, 200000, 300000, 400000, 500000, 600000, 700000, 800000, 900000, 950000, 990000,
    999000, 999900, 999990, 999999,
];

/// The cutoff whose minimum count is the hot threshold (`--profile-summary-cutoff-hot`).
pub const HOT_CUTOFF: u32 = 990000;
/// The cutoff whose minimum count is the cold threshold (`--profile-summary-cutoff-cold`).
pub const COLD_CUTOFF: u32 = 999999;

/// How the hot and cold count thresholds come from a summary: the minimum count at a
/// cutoff (`--profile-summary-cutoff-hot/-cold`, per million) unless a count is given
/// (`--profile-summary-hot-count/-cold-count`), as LLVM's `getHotCountThreshold` and
/// `getColdCountThreshold`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThresholdRule {
    /// The hot cutoff, per million (at most the last of [`DEFAULT_CUTOFFS`]).
    pub cutoff_hot: u32,
    /// The cold cutoff, per million (at most the last of [`DEFAULT_CUTOFFS`]).
    pub cutoff_cold: u32,
    /// A hot count threshold that overrides the cutoff's.
    pub hot_count: Option<u64>,
    /// A cold count threshold that overrides the cutoff's.
    pub cold_count: Option<u64>,
}

impl Default for ThresholdRule {
    fn default() -> ThresholdRule {
        ThresholdRule {
            cutoff_hot: HOT_CUTOFF,
            cutoff_cold: COLD_CUTOFF,
            hot_count: None,
            cold_count: None,
        }
    }
}

impl ThresholdRule {
    /// The hot count threshold of `summary`.
    pub fn hot(&self, summary: &ProfileSummary) -> u64 {
        self.hot_count.unwrap_or_else(|| {
            summary
                .entry_for(self.cutoff_hot)
                .map_or(0, |e| e.min_count)
        })
    }

    /// The cold count threshold of `summary`.
    pub fn cold(&self, summary: &ProfileSummary) -> u64 {
        self.cold_count.unwrap_or_else(|| {
            summary
                .entry_for(self.cutoff_cold)
                .map_or(0, |e| e.min_count)
        })
    }
}

/// One detailed-summary entry: counts ≥ `min_count` (`num_counts` of them) make up
/// `cutoff` per million of the total.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SummaryEntry {
    /// Cutoff, per million.
    pub cutoff: u32,
    /// Smallest count included to reach the cutoff.
    pub min_count: u64,
    /// Number of counts included.
    pub num_counts: u64,
}

/// A sample-profile summary (`ProfileSummary` of kind PSK_Sample).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ProfileSummary {
    /// Sum of all body counts.
    pub total_count: u64,
    /// Largest body count.
    pub max_count: u64,
    /// Largest head count of a top-level profile.
    pub max_function_count: u64,
    /// Number of body counts.
    pub num_counts: u64,
    /// Number of top-level profiles.
    pub num_functions: u64,
    /// One entry per cutoff, ascending.
    pub detailed: Vec<SummaryEntry>,
}

/// Accumulates counts like `SampleProfileSummaryBuilder::addRecord`.
#[derive(Default)]
struct Builder {
    summary: ProfileSummary,
    /// Count → frequency.
    frequencies: BTreeMap<u64, u64>,
}

impl Builder {
    fn add_record(&mut self, fs: &FunctionSamples, is_callsite: bool) {
        if !is_callsite {
            self.add_function(fs.head);
        } else if fs.attributes & CONTEXT_DUPLICATED_INTO_BASE != 0 {
            return;
        }
        for b in fs.body.values() {
            self.add_count(b.count);
        }
        for callees in fs.callsites.values() {
            for c in callees.values() {
                self.add_record(c, true);
            }
        }
    }

    /// A top-level profile with `head` samples on entry.
    fn add_function(&mut self, head: u64) {
        self.summary.num_functions += 1;
        self.summary.max_function_count = self.summary.max_function_count.max(head);
    }

    /// A body count.
    fn add_count(&mut self, c: u64) {
        self.summary.total_count = self.summary.total_count.wrapping_add(c);
        self.summary.max_count = self.summary.max_count.max(c);
        self.summary.num_counts += 1;
        *self.frequencies.entry(c).or_default() += 1;
    }

    /// The records of [`SampleProfile::context_less`] (each function's contexts merged),
    /// without making that profile when no context has inlined callees (a CS profile
    /// before nesting): only one function's merged counts are held at a time.
    fn add_context_less(&mut self, profile: &SampleProfile) {
        if profile.profiles.values().any(|fs| !fs.callsites.is_empty()) {
            for fs in profile.context_less().values() {
                self.add_record(fs, false);
            }
            return;
        }
        let mut by_name: Vec<&FunctionSamples> = profile.profiles.values().collect();
        // Stable: each function's contexts stay in map order, the order of the merge.
        by_name.sort_by(|a, b| a.name().cmp(b.name()));
        let mut body: BTreeMap<LineLocation, u64> = BTreeMap::new();
        for contexts in by_name.chunk_by(|a, b| a.name() == b.name()) {
            // `FunctionSamples::merge` into a new profile of the name: the first nonzero
            // checksum is the function's, a context with another one is left out.
            let (mut checksum, mut head) = (0, 0u64);
            body.clear();
            for fs in contexts {
                if checksum == 0 {
                    checksum = fs.checksum;
                } else if checksum != fs.checksum {
                    continue;
                }
                head = head.saturating_add(fs.head);
                for (loc, b) in &fs.body {
                    let e = body.entry(*loc).or_default();
                    *e = e.saturating_add(b.count);
                }
            }
            self.add_function(head);
            for &c in body.values() {
                self.add_count(c);
            }
        }
    }

    /// `ProfileSummaryBuilder::computeDetailedSummary`.
    fn finish(mut self, cutoffs: &[u32]) -> ProfileSummary {
        let mut cutoffs = cutoffs.to_vec();
        cutoffs.sort_unstable();
        let total = self.summary.total_count;
        let mut iter = self.frequencies.iter().rev();
        let (mut sum, mut seen, mut count) = (0u64, 0u64, 0u64);
        for cutoff in cutoffs {
            let desired = (u128::from(total) * u128::from(cutoff) / 1_000_000) as u64;
            while sum < desired {
                let Some((c, f)) = iter.next() else { break };
                count = *c;
                sum = sum.wrapping_add(c.wrapping_mul(*f));
                seen += f;
            }
            self.summary.detailed.push(SummaryEntry {
                cutoff,
                min_count: count,
                num_counts: seen,
            });
        }
        self.summary
    }
}

impl ProfileSummary {
    /// The summary of `profile` with the default cutoffs, computed as the writers do
    /// (`SampleProfileWriter::computeSummary`): for a CS profile over the context-less
    /// merge (the default of `--profile-summary-contextless` for CS), else over the
    /// top-level profiles with their inlined callees.
    pub fn compute(profile: &SampleProfile) -> ProfileSummary {
        ProfileSummary::compute_with(profile, None)
    }

    /// [`ProfileSummary::compute`] with `--profile-summary-contextless` given: `true` merges
    /// the contexts of a CS profile (LLVM's default for CS; other profiles are keyed by
    /// function already), `false` counts each context's profile on its own.
    pub fn compute_with(profile: &SampleProfile, contextless: Option<bool>) -> ProfileSummary {
        let mut b = Builder::default();
        if profile.is_cs && contextless.unwrap_or(true) {
            b.add_context_less(profile);
        } else {
            for fs in profile.profiles.values() {
                b.add_record(fs, false);
            }
        }
        b.finish(&DEFAULT_CUTOFFS)
    }

    /// The entry for `cutoff` (`getEntryForPercentile`: the first entry ≥ cutoff).
    pub fn entry_for(&self, cutoff: u32) -> Option<&SummaryEntry> {
        self.detailed.iter().find(|e| e.cutoff >= cutoff)
    }

    /// Hot count threshold with the default rule (min count at the 990000 cutoff).
    pub fn hot_count_threshold(&self) -> u64 {
        ThresholdRule::default().hot(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{ContextFrame, SampleContext};

    /// A CS profile's contexts of `f` (two, one with another checksum), `g` and `h`.
    fn cs_profile() -> SampleProfile {
        let mut p = SampleProfile {
            is_cs: true,
            ..SampleProfile::default()
        };
        let ctx = |frames: &[(&str, u32)]| {
            SampleContext::from_frames(
                frames
                    .iter()
                    .map(|&(f, l)| ContextFrame::new(f, LineLocation::new(l, 0)))
                    .collect(),
            )
        };
        for (frames, checksum, head, body) in [
            (&[("main", 1), ("f", 0)][..], 0, 3, &[(1, 10), (2, 4)][..]),
            (&[("f", 0)][..], 0xf, 2, &[(1, 5), (3, 0)][..]),
            (&[("g", 2), ("f", 0)][..], 0xf, 1, &[(2, 7)][..]),
            (&[("main", 2), ("f", 0)][..], 0xe, 50, &[(9, 90)][..]),
            (&[("main", 3), ("g", 0)][..], 0, 8, &[(1, 20), (1, 0)][..]),
            (&[("h", 0)][..], 0, 0, &[][..]),
        ] {
            let f = p.profile_mut(&ctx(frames));
            f.checksum = checksum;
            f.head = head;
            for &(line, n) in body {
                f.add_body_samples(LineLocation::new(line, 0), n);
            }
        }
        p
    }

    #[test]
    fn context_less_counts_are_those_of_the_merged_profile() {
        let mut p = cs_profile();
        let merged = |p: &SampleProfile| {
            let mut b = Builder::default();
            for fs in p.context_less().values() {
                b.add_record(fs, false);
            }
            b.finish(&DEFAULT_CUTOFFS)
        };
        let s = ProfileSummary::compute(&p);
        assert_eq!(s, merged(&p));
        // In map order f's contexts are `f` (checksum 0xf: the function's), `g:2 @ f`, then
        // `main:1 @ f` (0) and `main:2 @ f` (0xe), which merging leaves out: f has head 3,
        // counts 5, 7 and 0; g: head 8, count 20; h: nothing.
        assert_eq!(
            (
                s.total_count,
                s.num_counts,
                s.num_functions,
                s.max_function_count
            ),
            (32, 4, 3, 8)
        );
        // With inlined callees the merged profile itself is made: the same figures.
        p.profile_mut(&SampleContext::from_name("h"))
            .callee_mut(LineLocation::new(4, 0), "k")
            .add_body_samples(LineLocation::new(1, 0), 6);
        assert_eq!(ProfileSummary::compute(&p), merged(&p));
        assert_eq!(ProfileSummary::compute(&p).total_count, 38);
    }

    #[test]
    fn detailed_summary_walks_counts_descending() {
        // Counts 100, 10, 10, 0 (total 120), one nested count 5 → total 125.
        let mut p = SampleProfile::default();
        let f = p.profile_mut(&SampleContext::from_name("f"));
        f.head = 7;
        f.add_body_samples(LineLocation::new(1, 0), 100);
        f.add_body_samples(LineLocation::new(2, 0), 10);
        f.add_body_samples(LineLocation::new(3, 0), 10);
        f.add_body_samples(LineLocation::new(4, 0), 0);
        f.callee_mut(LineLocation::new(5, 0), "g")
            .add_body_samples(LineLocation::new(1, 0), 5);
        let s = ProfileSummary::compute(&p);
        assert_eq!(
            (
                s.total_count,
                s.max_count,
                s.max_function_count,
                s.num_counts,
                s.num_functions
            ),
            (125, 100, 7, 5, 1)
        );
        assert_eq!(s.detailed.len(), 16);
        // 1% of 125 = 1 → 100 reached with one count.
        assert_eq!(
            s.detailed[0],
            SummaryEntry {
                cutoff: 10000,
                min_count: 100,
                num_counts: 1
            }
        );
        // 80% = 100 → still the first count.
        assert_eq!(
            s.detailed[8],
            SummaryEntry {
                cutoff: 800000,
                min_count: 100,
                num_counts: 1
            }
        );
        // 90% = 112 → needs both 10s (freq 2): 120.
        assert_eq!(
            s.detailed[9],
            SummaryEntry {
                cutoff: 900000,
                min_count: 10,
                num_counts: 3
            }
        );
        // 99% = 123 → needs the 5.
        assert_eq!(
            s.detailed[11],
            SummaryEntry {
                cutoff: 990000,
                min_count: 5,
                num_counts: 4
            }
        );
        // 99.9999% = 124 (integer division) → still 5; the 0 is never needed.
        assert_eq!(
            s.detailed[15],
            SummaryEntry {
                cutoff: 999999,
                min_count: 5,
                num_counts: 4
            }
        );
        assert_eq!(s.hot_count_threshold(), 5);
    }

    #[test]
    fn empty_profile_has_zero_entries() {
        let s = ProfileSummary::compute(&SampleProfile::default());
        assert_eq!(
            s.detailed[0],
            SummaryEntry {
                cutoff: 10000,
                min_count: 0,
                num_counts: 0
            }
        );
        assert_eq!(s.num_functions, 0);
    }
}

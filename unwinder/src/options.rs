//! [`UnwindOptions`] and [`PerfContent`]: what the caller decides about a conversion.

use std::collections::BTreeSet;

use collector::{PerfEvent, SideBandEvent};

/// What the samples of an input carry, decided once per input the way llvm-profgen's
/// `checkPerfScriptType` does: the first sample with a branch stack tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PerfContent {
    /// LBR-only samples: flat (non-CS) counters.
    Lbr,
    /// Hybrid samples (frame-pointer call stack + LBR): context-sensitive counters, unless
    /// [`UnwindOptions::ignore_stack_samples`].
    LbrStack,
}

impl PerfContent {
    /// Detects the content from events in input order: the first sample with a branch
    /// stack is hybrid when it also has a call stack (llvm-profgen counts the stack lines
    /// before the first LBR line). `None` when no sample has a branch stack.
    ///
    /// As in llvm-profgen 19's `isLBRSample`, a hybrid sample's branch line is only
    /// recognised with at least two entries (its second token must be `0x…/…`; fixed after
    /// 19 by llvm-project PR 211182), so a hybrid sample with a single entry does not
    /// decide and detection goes on.
    pub fn detect<'a>(events: impl IntoIterator<Item = &'a PerfEvent>) -> Option<PerfContent> {
        events.into_iter().find_map(|event| match event {
            PerfEvent::Sample(s) if s.callchain.is_empty() && !s.lbr.is_empty() => {
                Some(PerfContent::Lbr)
            }
            PerfEvent::Sample(s) if !s.callchain.is_empty() && s.lbr.len() >= 2 => {
                Some(PerfContent::LbrStack)
            }
            _ => None,
        })
    }
}

/// The options of llvm-profgen 19 that shape the unsymbolized counters.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct UnwindOptions {
    /// `--ignore-stack-samples`: hybrid samples are counted as LBR-only samples (flat
    /// counters). Samples whose stack llvm-profgen rejects are still dropped.
    pub ignore_stack_samples: bool,
    /// `--pid`: only MMAP2 events of this process place the binary. As with llvm-profgen's
    /// `--perfscript` input, samples themselves are not filtered by pid.
    pub pid: Option<u32>,
    /// `--csprof-max-context-depth` (`None` = -1, unlimited): probe contexts keep at most
    /// this many callee-side frames.
    pub max_context_depth: Option<usize>,
    /// `--csprof-max-unsymbolized-context-depth` (`None` = -1, unlimited); the smaller of
    /// the two depths applies to probe contexts.
    pub max_unsymbolized_context_depth: Option<usize>,
    /// `--compress-recursion` (`None` = -1, unlimited; `Some(0)` = off): the longest
    /// repeated call-site sequence removed from probe contexts.
    pub compress_recursion: Option<u32>,
    /// The input's content; `None` detects it from the first sample with a branch stack
    /// ([`PerfContent::detect`]).
    pub content: Option<PerfContent>,
    /// Only samples of these processes are used (`None`: all). llvm-profgen's perf.data
    /// path runs `perf script --pid` with the processes that mapped the binary (see
    /// [`processes_mapping`]); its perf script path does not filter samples.
    pub sample_pids: Option<BTreeSet<u32>>,
    /// `--leading-ip-only`: an LBR-only sample with a leading IP is counted as the one-address
    /// range of that IP (its branch stack ignored, a non-code IP dropping it); flat counting
    /// takes only a first entry whose source is its target, and no branch.
    pub leading_ip_only: bool,
    /// `--sample-period=N` when given (`LBRPerfReader::parseSample`): the count of each
    /// LBR-only sample is multiplied by N and, unless [`Self::leading_ip_only`], divided
    /// (integer division) by its branch count less one when it has more than one branch
    /// (after external-to-external branches are dropped). Hybrid samples are not scaled.
    pub sample_period: Option<u64>,
    /// `--show-detailed-warning`: the invalid ranges are kept in
    /// [`crate::UnwindStats::range_details`] for their warnings.
    pub detailed_warnings: bool,
    /// Threads a flush unwinds the aggregated samples on (0 or 1: the caller's thread
    /// only). `convert` uses every core; the daemon's workers are already one per core.
    pub unwind_threads: usize,
    /// Repair the call chain of samples whose leaf is in a prologue or epilogue from their
    /// user registers and stack words ([`crate::stack_repair`]) instead of dropping them.
    /// Off (the default) is llvm-profgen's behaviour; samples without registers (perf
    /// script input) always get it.
    pub stack_repair: bool,
}

/// The processes with an MMAP2 event of the binary named `binary_name` (basename match),
/// restricted to `pid` when given: what llvm-profgen's `convertPerfDataToTrace` collects in
/// its first `perf script` pass (empty: "No relevant mmap event is found in perf data.").
pub fn processes_mapping<'a>(
    events: impl IntoIterator<Item = &'a PerfEvent>,
    binary_name: &str,
    pid: Option<u32>,
) -> BTreeSet<u32> {
    events
        .into_iter()
        .filter_map(|e| match e {
            PerfEvent::SideBand(SideBandEvent::Mmap2(m)) => Some(m),
            _ => None,
        })
        .filter(|m| m.filename.rsplit('/').next() == Some(binary_name))
        .filter_map(|m| u32::try_from(m.pid).ok())
        .filter(|p| pid.is_none_or(|want| want == *p))
        .collect()
}

impl UnwindOptions {
    /// True when the call chains of samples carrying `content` are repaired from their
    /// registers ([`Self::stack_repair`]; hybrid samples only).
    pub fn repairs_stacks(&self, content: PerfContent) -> bool {
        content == PerfContent::LbrStack && self.stack_repair
    }

    /// True when samples of different processes must be told apart when tallied
    /// ([`crate::SampleTally`]): a process filter applies to the samples
    /// ([`Self::sample_pids`]) or to the mappings that place the binary ([`Self::pid`]).
    pub fn tallies_by_process(&self) -> bool {
        self.sample_pids.is_some() || self.pid.is_some()
    }

    /// The depth probe contexts are trimmed to: the minimum of the two depth limits.
    pub fn probe_context_depth(&self) -> Option<usize> {
        match (self.max_context_depth, self.max_unsymbolized_context_depth) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use collector::{LbrEntry, Sample};

    fn sample(callchain: Vec<u64>, lbr: usize) -> PerfEvent {
        PerfEvent::Sample(Sample {
            callchain,
            lbr: vec![LbrEntry::default(); lbr],
            count: 1,
            ..Sample::default()
        })
    }

    #[test]
    fn detect_uses_first_sample_with_lbr() {
        let events = [
            sample(vec![0x10], 0),
            sample(vec![], 2),
            sample(vec![0x10], 2),
        ];
        assert_eq!(PerfContent::detect(&events), Some(PerfContent::Lbr));
        let events = [sample(vec![], 0), sample(vec![0x10, 0x20], 2)];
        assert_eq!(PerfContent::detect(&events), Some(PerfContent::LbrStack));
        // A one-entry hybrid branch line is not recognised by llvm-profgen 19.
        let events = [sample(vec![0x10], 1), sample(vec![], 1)];
        assert_eq!(PerfContent::detect(&events), Some(PerfContent::Lbr));
        assert_eq!(PerfContent::detect(&[sample(vec![1], 0)]), None);
    }

    #[test]
    fn processes_mapping_matches_basename_and_pid() {
        let mmap = |pid: i32, path: &str| {
            PerfEvent::SideBand(SideBandEvent::Mmap2(collector::Mmap2Event {
                pid,
                filename: path.into(),
                ..Default::default()
            }))
        };
        let events = [
            mmap(3, "/a/prog"),
            mmap(4, "/lib/libc.so.6"),
            mmap(5, "prog"),
            mmap(-1, "prog"),
            mmap(6, "/x/prog2"),
        ];
        assert_eq!(
            processes_mapping(&events, "prog", None),
            BTreeSet::from([3, 5])
        );
        assert_eq!(
            processes_mapping(&events, "prog", Some(5)),
            BTreeSet::from([5])
        );
        assert!(processes_mapping(&events, "prog", Some(4)).is_empty());
    }

    #[test]
    fn probe_depth_is_the_minimum() {
        let mut o = UnwindOptions::default();
        assert_eq!(o.probe_context_depth(), None);
        o.max_context_depth = Some(5);
        assert_eq!(o.probe_context_depth(), Some(5));
        o.max_unsymbolized_context_depth = Some(3);
        assert_eq!(o.probe_context_depth(), Some(3));
        o.max_context_depth = None;
        assert_eq!(o.probe_context_depth(), Some(3));
    }
}

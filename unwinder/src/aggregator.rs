//! [`Aggregator`]: the stage loop. Events go in, in input order (MMAP2 events rebase the
//! samples that follow them, as llvm-profgen reads them in file order); identical prepared
//! samples are aggregated with a repeat count; [`Aggregator::flush`] turns them into
//! counters (LBR-only counting or virtual unwinding). [`unwind_samples`] is the one-shot
//! form `convert` uses; the live daemon feeds batches and flushes periodically.

use std::collections::HashMap;

use collector::{Mmap2Event, PerfEvent, Sample, SideBandEvent};

use crate::fx_hash::FxBuildHasher;
use crate::lbr_counter::count_lbr_sample;
use crate::sample_prep::{extract_call_stack_into, extract_lbr_stack_into, PerfSample, StackNotes};
use crate::virtual_unwind::{KeyShape, VirtualUnwinder};
use crate::{
    BinaryLoadInfo, BinaryPlacement, CodeLayout, CounterKind, CounterSet, PerfContent, UnwindError,
    UnwindOptions, UnwindStats,
};

/// Prepares and aggregates samples of one binary, then produces counters.
pub struct Aggregator<'a> {
    layout: &'a dyn CodeLayout,
    placement: BinaryPlacement,
    options: UnwindOptions,
    content: PerfContent,
    samples: HashMap<PerfSample, u64, FxBuildHasher>,
    /// The sample being prepared: reused, so a repeat of an aggregated sample allocates
    /// nothing (only a new distinct sample is cloned into the map).
    scratch: PerfSample,
    stats: UnwindStats,
    sample_index: u64,
}

impl<'a> Aggregator<'a> {
    /// An aggregator for the binary described by `layout` and `load`, whose input carries
    /// `content`.
    pub fn new(
        layout: &'a dyn CodeLayout,
        load: BinaryLoadInfo,
        content: PerfContent,
        options: UnwindOptions,
    ) -> Result<Aggregator<'a>, UnwindError> {
        Ok(Aggregator {
            layout,
            placement: BinaryPlacement::new(load, options.pid)?,
            options,
            content,
            samples: HashMap::default(),
            scratch: PerfSample::default(),
            stats: UnwindStats::default(),
            sample_index: 0,
        })
    }

    /// What the produced counters' keys mean: context-sensitive for hybrid input (probe or
    /// line keys after the binary), flat for LBR-only input or `--ignore-stack-samples`.
    pub fn kind(&self) -> CounterKind {
        if self.content == PerfContent::Lbr || self.options.ignore_stack_samples {
            CounterKind::Flat
        } else if self.layout.has_pseudo_probes() {
            CounterKind::ProbeContext
        } else {
            CounterKind::LineContext
        }
    }

    /// The binary's placement (current base).
    pub fn placement(&self) -> &BinaryPlacement {
        &self.placement
    }

    /// The statistics so far.
    pub fn stats(&self) -> &UnwindStats {
        &self.stats
    }

    /// Number of distinct aggregated samples waiting for [`Aggregator::flush`].
    pub fn pending(&self) -> usize {
        self.samples.len()
    }

    /// Feeds one event: MMAP2 events move the binary, samples are prepared and
    /// aggregated, other side-band events are ignored (as llvm-profgen ignores them).
    pub fn feed(&mut self, event: &PerfEvent) -> Result<(), UnwindError> {
        match event {
            PerfEvent::Sample(s) => self.feed_sample(s),
            PerfEvent::SideBand(SideBandEvent::Mmap2(m)) => self.feed_mmap(m),
            PerfEvent::SideBand(_) => Ok(()),
        }
    }

    /// Applies an MMAP2 event to the placement.
    pub fn feed_mmap(&mut self, event: &Mmap2Event) -> Result<(), UnwindError> {
        self.placement.observe(event).map(|_| ())
    }

    /// Prepares one sample with the current placement and aggregates it
    /// (`HybridPerfReader::parseSample` / `LBRPerfReader::parseSample`).
    pub fn feed_sample(&mut self, sample: &Sample) -> Result<(), UnwindError> {
        if let Some(pids) = &self.options.sample_pids {
            if !pids.contains(&sample.pid) {
                self.stats.filtered_by_pid += 1;
                return Ok(());
            }
        }
        let index = self.sample_index;
        self.sample_index += 1;
        self.stats.samples_seen += 1;
        // perf script prints an empty line before a sample with a call chain, which
        // llvm-profgen's reader counts as a sample too (see UnwindStats::total_samples).
        self.stats.total_samples += if sample.callchain.is_empty() { 1 } else { 2 };
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = self.prepare(sample, index, &mut scratch);
        if let Ok(true) = result {
            match self.samples.get_mut(&scratch) {
                Some(n) => *n = n.wrapping_add(sample.count),
                None => {
                    self.samples.insert(scratch.clone(), sample.count);
                }
            }
        }
        self.scratch = scratch;
        result.map(|_| ())
    }

    /// Prepares `sample` into `out`; `Ok(false)` when it is dropped (and counted).
    fn prepare(
        &mut self,
        sample: &Sample,
        index: u64,
        out: &mut PerfSample,
    ) -> Result<bool, UnwindError> {
        out.call_stack.clear();
        if self.content == PerfContent::LbrStack {
            let mut notes = StackNotes::default();
            let stack = extract_call_stack_into(
                &sample.callchain,
                &self.placement,
                self.layout,
                &mut notes,
                &mut out.call_stack,
            );
            if notes.leaf_external {
                self.stats.leaf_external_frames += 1;
            }
            if let Some(a) = notes.invalid_return_address {
                self.stats.invalid_return_addresses.insert(a);
            }
            if stack.is_err() {
                self.stats.dropped_stack_samples += 1;
                return Ok(false);
            }
            self.warn_if_missing_mmap();
            if sample.lbr.is_empty() {
                return Err(UnwindError::HybridSampleWithoutLbr {
                    sample_index: index,
                });
            }
        }
        extract_lbr_stack_into(&sample.lbr, &self.placement, self.layout, &mut out.lbr);
        if out.lbr.is_empty() {
            self.stats.dropped_empty_lbr_samples += 1;
            return Ok(false);
        }
        if self.content == PerfContent::Lbr {
            self.warn_if_missing_mmap();
        } else if self.options.ignore_stack_samples {
            out.call_stack.clear();
        } else {
            // "Canonicalize stack leaf to avoid 'random' IP from leaf frame skew LBR ranges".
            out.call_stack[0] = out.lbr[0].target;
        }
        // Counts wrap like llvm-profgen's uint64_t (a hostile pre-aggregated count must not
        // panic): see `feed_sample`.
        Ok(true)
    }

    fn warn_if_missing_mmap(&mut self) {
        if !self.placement.is_loaded_by_mmap() && self.stats.missing_mmap_warning.is_none() {
            let load = self.placement.load();
            self.stats.missing_mmap_warning = Some(format!(
                "No relevant mmap event is matched for {}, will use preferred address ({:#x}) as the base loading address!",
                load.name, load.preferred_base
            ));
        }
    }

    /// Turns the aggregated samples into counters and forgets them (placement and
    /// statistics stay). Flushes merge: the sum of the sets of several flushes equals one
    /// flush of all the samples.
    pub fn flush(&mut self) -> CounterSet {
        let kind = self.kind();
        let mut counters = CounterSet::new(kind);
        let samples = std::mem::take(&mut self.samples);
        self.stats.aggregated_samples += samples.len() as u64;
        for (sample, &count) in &samples {
            self.check_ranges(sample, count);
        }
        match kind {
            CounterKind::Flat => {
                let c = counters.context_mut(&[]);
                for (sample, &count) in &samples {
                    count_lbr_sample(sample, count, self.layout, c);
                }
            }
            CounterKind::ProbeContext | CounterKind::LineContext => {
                let shape = KeyShape {
                    probes: kind == CounterKind::ProbeContext,
                    compress_recursion: self.options.compress_recursion,
                    depth: self.options.probe_context_depth(),
                };
                let mut unwinder = VirtualUnwinder::new(self.layout, shape);
                for (sample, &count) in &samples {
                    unwinder.unwind(sample, count, &mut counters, &mut self.stats);
                }
                self.stats.contexts += counters.contexts.len() as u64;
            }
        }
        counters
    }

    /// `warnInvalidRange` over one aggregated sample: every pair of consecutive entries is
    /// a range `[target_i, source_{i-1}]` (whatever its validity).
    fn check_ranges(&mut self, sample: &PerfSample, count: u64) {
        let checks = self.layout.range_checks();
        self.stats.range_checks_done |= checks.is_some();
        let is_code = crate::code_layout::code_test(self.layout);
        for pair in sample.lbr.windows(2) {
            let (start, end) = (pair[1].target, pair[0].source);
            self.stats.total_range_samples = self.stats.total_range_samples.wrapping_add(count);
            let Some(checks) = checks else { continue };
            let (start_code, end_code) = (is_code(start), is_code(end));
            if !start_code && !end_code {
                continue;
            }
            if !start_code || !checks.is_transfer(end) {
                self.stats.ranges_not_on_boundary =
                    self.stats.ranges_not_on_boundary.wrapping_add(count);
            }
            let Some((_, func_end)) = checks.function_range(start) else {
                self.stats.ranges_outside_functions =
                    self.stats.ranges_outside_functions.wrapping_add(count);
                continue;
            };
            if end >= func_end {
                self.stats.ranges_crossing_functions =
                    self.stats.ranges_crossing_functions.wrapping_add(count);
            }
            if start_code && end_code && !self.layout.is_valid_fall_through_range(start, end) {
                self.stats.bogus_ranges = self.stats.bogus_ranges.wrapping_add(count);
            }
        }
    }

    /// Flushes and returns the counters with the final statistics.
    pub fn finish(mut self) -> (CounterSet, UnwindStats) {
        let counters = self.flush();
        (counters, self.stats)
    }
}

/// Converts a whole input: feeds every event in order, then flushes once. When
/// `options.content` is `None`, events are buffered until the first sample with a branch
/// stack tells the content ([`PerfContent::detect`]).
pub fn unwind_samples(
    events: impl IntoIterator<Item = PerfEvent>,
    layout: &dyn CodeLayout,
    load: &BinaryLoadInfo,
    options: &UnwindOptions,
) -> Result<(CounterSet, UnwindStats), UnwindError> {
    let mut events = events.into_iter();
    let mut buffered = Vec::new();
    let content = match options.content {
        Some(c) => c,
        None => loop {
            let Some(event) = events.next() else {
                return Err(UnwindError::NoLbrSamples);
            };
            let detected = PerfContent::detect(std::iter::once(&event));
            buffered.push(event);
            if let Some(c) = detected {
                break c;
            }
        },
    };
    let mut agg = Aggregator::new(layout, load.clone(), content, options.clone())?;
    for event in buffered.iter() {
        agg.feed(event)?;
    }
    for event in events {
        agg.feed(&event)?;
    }
    Ok(agg.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{FakeLayout, Inst};
    use crate::EXTERNAL_ADDR;
    use collector::LbrEntry;

    /// main: 0x1000 push; 0x1001 mov; 0x1004 call foo; 0x1009 jcc; 0x100b ret
    /// foo:  0x1010 push; 0x1011 mov; 0x1014 nop; 0x1015 jcc; 0x1017 pop; 0x1018 ret
    fn layout(probes: bool) -> FakeLayout {
        use Inst::*;
        FakeLayout::new(
            &[
                (0x1000, Other),
                (0x1001, Other),
                (0x1004, Call),
                (0x1009, CondBranch),
                (0x100b, Return),
                (0x1010, Other),
                (0x1011, Other),
                (0x1014, Other),
                (0x1015, CondBranch),
                (0x1017, Other),
                (0x1018, Return),
            ],
            &[0x1000, 0x1010],
        )
        .with_probes(probes)
    }

    fn load() -> BinaryLoadInfo {
        BinaryLoadInfo {
            name: "prog".into(),
            preferred_base: 0x1000,
            text_segment_offsets: vec![0x1000],
            preferred_text_segment_addresses: vec![0x1000],
        }
    }

    fn mmap(addr: u64) -> PerfEvent {
        PerfEvent::SideBand(SideBandEvent::Mmap2(Mmap2Event {
            pid: 5,
            addr,
            pgoff: 0x1000,
            prot: 5,
            filename: "/bin/prog".into(),
            ..Mmap2Event::default()
        }))
    }

    /// foo's loop body sampled at 0x1014 + `base` − 0x1000, called from main.
    fn sample(base: u64, callchain: bool, count: u64) -> PerfEvent {
        let a = |x: u64| x - 0x1000 + base;
        PerfEvent::Sample(Sample {
            pid: 5,
            tid: 5,
            ip: a(0x1014),
            callchain: if callchain {
                vec![a(0x1014), a(0x1009)]
            } else {
                vec![]
            },
            lbr: vec![
                LbrEntry {
                    from: a(0x1015),
                    to: a(0x1010),
                    flags: 0,
                },
                LbrEntry {
                    from: a(0x1004),
                    to: a(0x1010),
                    flags: 0,
                },
                LbrEntry {
                    from: 0x7fff_0000,
                    to: a(0x1000),
                    flags: 0,
                },
            ],
            count,
            ..Sample::default()
        })
    }

    #[test]
    fn flat_counts_rebased_in_input_order() {
        let l = layout(false);
        // One sample at the preferred base (before any mmap), two after the rebase.
        let events = vec![
            sample(0x1000, false, 1),
            mmap(0x5000),
            sample(0x5000, false, 2),
        ];
        let (c, s) = unwind_samples(events, &l, &load(), &UnwindOptions::default()).unwrap();
        assert_eq!(c.kind, CounterKind::Flat);
        let cc = &c.contexts[&vec![]];
        assert_eq!(
            cc.ranges.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>(),
            vec![((0x1000, 0x1004), 3), ((0x1010, 0x1015), 3)]
        );
        assert_eq!(
            cc.branches
                .iter()
                .map(|(k, v)| (*k, *v))
                .collect::<Vec<_>>(),
            vec![
                ((EXTERNAL_ADDR, 0x1000), 3),
                ((0x1004, 0x1010), 3),
                ((0x1015, 0x1010), 3)
            ]
        );
        assert_eq!(s.total_samples, 2);
        assert_eq!(s.samples_seen, 2);
        assert_eq!(s.aggregated_samples, 1);
        assert_eq!(s.total_range_samples, 6);
        assert!(s.missing_mmap_warning.as_deref().unwrap().starts_with(
            "No relevant mmap event is matched for prog, will use preferred address (0x1000)"
        ));
    }

    #[test]
    fn hybrid_probe_contexts_and_ignore_stack() {
        let l = layout(true);
        let events = vec![
            mmap(0x5000),
            sample(0x5000, true, 1),
            sample(0x5000, true, 1),
        ];
        let (c, s) =
            unwind_samples(events.clone(), &l, &load(), &UnwindOptions::default()).unwrap();
        assert_eq!(c.kind, CounterKind::ProbeContext);
        assert_eq!((s.samples_seen, s.total_samples), (2, 4));
        assert_eq!(s.aggregated_samples, 1);
        assert!(s.missing_mmap_warning.is_none());
        // foo's loop under main's call site; main's range and the external call at [].
        let foo = &c.contexts[&vec![0x1004]];
        assert_eq!(
            foo.ranges.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>(),
            vec![((0x1010, 0x1015), 2)]
        );
        assert_eq!(
            foo.branches
                .iter()
                .map(|(k, v)| (*k, *v))
                .collect::<Vec<_>>(),
            vec![((0x1015, 0x1010), 2)]
        );
        let main = &c.contexts[&vec![]];
        assert_eq!(
            main.ranges
                .iter()
                .map(|(k, v)| (*k, *v))
                .collect::<Vec<_>>(),
            vec![((0x1000, 0x1004), 2)]
        );
        assert_eq!(
            main.branches
                .iter()
                .map(|(k, v)| (*k, *v))
                .collect::<Vec<_>>(),
            vec![((EXTERNAL_ADDR, 0x1000), 2), ((0x1004, 0x1010), 2)]
        );
        assert_eq!(s.total_branches, 3);

        let ignore = UnwindOptions {
            ignore_stack_samples: true,
            ..UnwindOptions::default()
        };
        let (flat, _) = unwind_samples(events, &l, &load(), &ignore).unwrap();
        assert_eq!(flat.kind, CounterKind::Flat);
        assert_eq!(flat.contexts.len(), 1);
        assert_eq!(flat.contexts[&vec![]].ranges.len(), 2);
    }

    #[test]
    fn hybrid_drops_broken_stacks_and_rejects_missing_lbr() {
        let l = layout(true);
        let mut agg =
            Aggregator::new(&l, load(), PerfContent::LbrStack, UnwindOptions::default()).unwrap();
        // Leaf in foo's prolog: dropped.
        agg.feed_sample(&Sample {
            callchain: vec![0x1010, 0x1009],
            lbr: vec![LbrEntry {
                from: 0x1004,
                to: 0x1010,
                flags: 0,
            }],
            count: 1,
            ..Sample::default()
        })
        .unwrap();
        // Only external frames collapsed to one, no LBR entry left after ext→ext drop.
        agg.feed_sample(&Sample {
            callchain: vec![0x99],
            lbr: vec![LbrEntry {
                from: 0x98,
                to: 0x99,
                flags: 0,
            }],
            count: 1,
            ..Sample::default()
        })
        .unwrap();
        assert_eq!(agg.pending(), 0);
        assert_eq!(agg.stats().dropped_stack_samples, 1);
        assert_eq!(agg.stats().dropped_empty_lbr_samples, 1);
        assert_eq!(agg.stats().leaf_external_frames, 1);
        let err = agg.feed_sample(&Sample {
            callchain: vec![0x1014, 0x1009],
            count: 1,
            ..Sample::default()
        });
        assert_eq!(
            err,
            Err(UnwindError::HybridSampleWithoutLbr { sample_index: 2 })
        );
    }

    #[test]
    fn flushes_merge_to_one_conversion() {
        let l = layout(true);
        let events = vec![
            mmap(0x5000),
            sample(0x5000, true, 1),
            sample(0x5000, true, 4),
        ];
        let (all, _) =
            unwind_samples(events.clone(), &l, &load(), &UnwindOptions::default()).unwrap();
        let mut agg =
            Aggregator::new(&l, load(), PerfContent::LbrStack, UnwindOptions::default()).unwrap();
        agg.feed(&events[0]).unwrap();
        agg.feed(&events[1]).unwrap();
        let mut merged = agg.flush();
        agg.feed(&events[2]).unwrap();
        merged.merge(&agg.flush());
        assert_eq!(merged, all);
    }

    #[test]
    fn invalid_range_checks() {
        // Functions main [0x1000, 0x100c), foo [0x1010, 0x1019); 0x100c..0x1010 is padding.
        let l = layout(false).with_function_ranges(&[(0x1000, 0x100c), (0x1010, 0x1019)]);
        let lbr = |pairs: &[(u64, u64)]| -> Vec<LbrEntry> {
            pairs
                .iter()
                .map(|&(from, to)| LbrEntry { from, to, flags: 0 })
                .collect()
        };
        let events = vec![
            // Ranges: [0x1010, 0x1015] fine; [0x1000, 0x1004] fine.
            PerfEvent::Sample(Sample {
                lbr: lbr(&[(0x1015, 0x1010), (0x1004, 0x1010), (0x1009, 0x1000)]),
                count: 2,
                ..Sample::default()
            }),
            // [0x1000, 0x1014]: ends on a non-branch and crosses main's end and the call;
            // [0x1017, 0x1009]: backwards (bogus) — its start is foo's, end before foo.
            PerfEvent::Sample(Sample {
                lbr: lbr(&[(0x1014, 0x1010), (0x1009, 0x1000), (0x1015, 0x1017)]),
                count: 1,
                ..Sample::default()
            }),
        ];
        let (_, s) = unwind_samples(events, &l, &load(), &UnwindOptions::default()).unwrap();
        assert!(s.range_checks_done);
        assert_eq!(s.total_range_samples, 6);
        assert_eq!(s.ranges_not_on_boundary, 1);
        assert_eq!(s.ranges_outside_functions, 0);
        assert_eq!(s.ranges_crossing_functions, 1);
        assert_eq!(s.bogus_ranges, 2);
        assert_eq!(
            s.warnings(false)[1..],
            [
                "16.67%(1/6) of samples are from ranges that are not on instruction boundary.",
                "16.67%(1/6) of samples are from ranges that do cross function boundaries.",
                "33.33%(2/6) of samples are from ranges that have range start after or too far from range end acrossing the unconditinal jmp.",
            ]
        );
    }

    #[test]
    fn sample_pid_filter() {
        let l = layout(false);
        let mut other = sample(0x5000, false, 1);
        if let PerfEvent::Sample(s) = &mut other {
            s.pid = 6;
        }
        let events = vec![mmap(0x5000), sample(0x5000, false, 1), other];
        let pids = crate::processes_mapping(&events, "prog", None);
        let options = UnwindOptions {
            sample_pids: Some(pids),
            ..UnwindOptions::default()
        };
        let (c, s) = unwind_samples(events, &l, &load(), &options).unwrap();
        assert_eq!((s.samples_seen, s.filtered_by_pid), (1, 1));
        assert_eq!(c.contexts[&vec![]].branches[&(0x1004, 0x1010)], 1);
    }

    #[test]
    fn huge_counts_wrap_instead_of_panicking() {
        let l = layout(true);
        let events = vec![sample(0x1000, true, u64::MAX), sample(0x1000, true, 2)];
        let (c, s) = unwind_samples(events, &l, &load(), &UnwindOptions::default()).unwrap();
        assert_eq!(s.aggregated_samples, 1);
        assert_eq!(c.contexts[&vec![0x1004]].ranges[&(0x1010, 0x1015)], 1);
        assert_eq!(s.total_range_samples, 2);
    }

    #[test]
    fn no_lbr_is_an_error() {
        let l = layout(true);
        let events = vec![mmap(0x5000)];
        assert_eq!(
            unwind_samples(events, &l, &load(), &UnwindOptions::default()).err(),
            Some(UnwindError::NoLbrSamples)
        );
    }
}

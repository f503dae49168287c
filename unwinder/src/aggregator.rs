//! [`Aggregator`]: the stage loop. Events go in, in input order (MMAP2 events rebase the
//! samples that follow them, as llvm-profgen reads them in file order); identical prepared
//! samples are aggregated with a repeat count; [`Aggregator::flush`] turns them into
//! counters (LBR-only counting or virtual unwinding). [`unwind_samples`] is the one-shot
//! form `convert` uses; the live daemon feeds batches and flushes periodically.

use std::collections::HashMap;
use std::sync::Mutex;

use collector::threads::on_threads;
use collector::{Mmap2Event, PerfEvent, Sample, SideBandEvent};

use crate::counted_samples::CountedSamples;
use crate::counter_table::CounterTable;
use crate::kept_counting::KeptCounting;
use crate::lbr_counter::{count_lbr_sample, count_leading_ip_sample};
use crate::pending_counters::add_or_push;
use crate::sample_prep::{
    extract_lbr_stack_into, extract_repaired_call_stack_into, PerfSample, StackNotes,
};
use crate::sample_tally::SampleTally;
use crate::stack_repair::{leaf_repair, StackRepair};
use crate::summing_cache::SummingCache;
use crate::virtual_unwind::{KeyShape, VirtualUnwinder};
use crate::{
    BinaryLoadInfo, BinaryPlacement, CodeLayout, CounterKind, CounterSet, PerfContent, UnwindError,
    UnwindOptions, UnwindStats,
};
use rustc_hash::FxBuildHasher;

/// Most threads a flush unwinds on.
const MAX_UNWIND_THREADS: usize = 16;
/// Most samples [`unwind_repeated_samples`] holds before preparing them.
const MAX_SAMPLE_BATCH: usize = 8192;
/// Distinct samples a thread unwinds at a time.
const UNWIND_PART: usize = 1024;
/// Fewest distinct samples worth a thread of their own.
const MIN_SAMPLES_PER_THREAD: usize = 512;

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
    /// Set by [`Aggregator::counting_as_fed`]: samples are counted as they are prepared.
    as_fed: Option<CountingAsFed<'a>>,
}

/// An [`Aggregator`]'s counting as samples are prepared: per-thread counters, idle between
/// batches, and the distinct samples counted.
struct CountingAsFed<'a> {
    counters: Vec<PartCounter<'a>>,
    counted: CountedSamples,
    /// The fingerprint's buffer of the one-thread path.
    scratch: Vec<u64>,
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
        let placement = BinaryPlacement::new(load, options.pid)?;
        Ok(Aggregator::with_placement(
            layout, placement, content, options,
        ))
    }

    /// An aggregator whose binary is already placed by `placement` (the MMAP2 events seen
    /// so far): what [`Aggregator::new`] and a [`Aggregator::feed_mmap`] of each of them
    /// give.
    pub fn with_placement(
        layout: &'a dyn CodeLayout,
        placement: BinaryPlacement,
        content: PerfContent,
        options: UnwindOptions,
    ) -> Aggregator<'a> {
        Aggregator {
            layout,
            placement,
            options,
            content,
            samples: HashMap::default(),
            scratch: PerfSample::default(),
            stats: UnwindStats::default(),
            sample_index: 0,
            as_fed: None,
        }
    }

    /// This aggregator, counting each sample as it is prepared instead of aggregating it:
    /// for an input read once (`convert`), whose prepared samples would otherwise all be
    /// held until the flush. It holds 16 bytes per distinct prepared sample
    /// ([`CountedSamples`]) and per-thread counters. Counters and statistics are what
    /// aggregating then flushing gives: counters are sums over samples, and what
    /// llvm-profgen counts once per distinct sample is counted for its first occurrence
    /// (once over all flushes: the statistics are those of one flush of every sample fed).
    pub fn counting_as_fed(mut self) -> Aggregator<'a> {
        self.as_fed = Some(CountingAsFed {
            counters: Vec::new(),
            counted: CountedSamples::new(),
            scratch: Vec::new(),
        });
        self
    }

    /// Threads worth preparing `len` samples on: the options' threads, at least
    /// [`MIN_SAMPLES_PER_THREAD`] samples each.
    fn threads_for(&self, len: usize) -> usize {
        self.options
            .unwind_threads
            .clamp(1, MAX_UNWIND_THREADS)
            .min(len.div_ceil(MIN_SAMPLES_PER_THREAD))
            .max(1)
    }

    /// The kind, key shape and options of counting.
    fn count_setup(&self) -> (CounterKind, KeyShape, CountOptions) {
        let kind = self.kind();
        let shape = KeyShape {
            probes: kind == CounterKind::ProbeContext,
            compress_recursion: self.options.compress_recursion,
            depth: self.options.probe_context_depth(),
            address_form: false,
        };
        let options = CountOptions {
            leading_ip: self.options.leading_ip_only,
            range_details: self.options.detailed_warnings,
            range_checks: true,
        };
        (kind, shape, options)
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

    /// Makes room for `n` more distinct samples (a caller that knows its batch spares
    /// the map's growth, which hashes every sample again).
    fn reserve(&mut self, n: usize) {
        self.samples.reserve(n);
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
        self.feed_sample_repeated(sample, 1)
    }

    /// [`Aggregator::feed_sample`] for `occurrences` samples identical to `sample` whose
    /// counts sum to `sample.count` (a reader that aggregated identical sample texts):
    /// the counters and every per-sample statistic are what feeding each occurrence
    /// would give, since preparing a sample depends only on it and the placement.
    pub fn feed_sample_repeated(
        &mut self,
        sample: &Sample,
        occurrences: u64,
    ) -> Result<(), UnwindError> {
        self.feed_occurrences(sample, occurrences, sample.count)
    }

    /// Consecutive samples (no side-band event between them) of one batch, each distinct
    /// one prepared once: samples that prepare to the same sample ([`SampleTally`]) are
    /// fed as one with their occurrences and the sum of their counts. Counters and
    /// statistics are what [`Aggregator::feed_sample`] on each would give; an error names
    /// the sample index it would have had in this order of first occurrences.
    pub fn feed_batch(&mut self, samples: &[Sample]) -> Result<(), UnwindError> {
        if samples.len() < 2 {
            for s in samples {
                self.feed_sample(s)?;
            }
            return Ok(());
        }
        // Where processes mapped the binary apart, the same address in two of them is
        // different code: their samples are told apart.
        let by_process = self.options.tallies_by_process() || self.placement.bases_differ();
        let mut tally = SampleTally::with_capacity(by_process, samples.len());
        let repair = self.options.repairs_stacks(self.content);
        tally.add_all_placed(samples, |_| true, repair, &self.placement, self.layout);
        self.feed_tally(&tally)
    }

    /// Feeds the distinct samples of `tally`, each with its occurrences and summed count
    /// (as [`Aggregator::feed_batch`] feeds a batch's), in order of first occurrence.
    pub fn feed_tally(&mut self, tally: &SampleTally) -> Result<(), UnwindError> {
        self.reserve(tally.len());
        self.feed_tally_entries(tally, |_, _, e| Err(e))
    }

    /// Feeds the entries of `tally` in order; an entry whose preparation fails goes to
    /// `on_error` (with its occurrences), which stops the feeding by returning the error.
    fn feed_tally_entries(
        &mut self,
        tally: &SampleTally,
        mut on_error: impl FnMut(&mut Self, u64, UnwindError) -> Result<(), UnwindError>,
    ) -> Result<(), UnwindError> {
        let mut sample = Sample::default();
        for e in tally.entries() {
            tally.sample_into(e, &mut sample);
            if let Err(err) = self.feed_occurrences(&sample, e.occurrences, e.count) {
                on_error(self, e.occurrences, err)?;
            }
        }
        Ok(())
    }

    /// Feeds `occurrences` samples identical to `sample` whose counts sum to `count`.
    fn feed_occurrences(
        &mut self,
        sample: &Sample,
        occurrences: u64,
        count: u64,
    ) -> Result<(), UnwindError> {
        if let Some(pids) = &self.options.sample_pids {
            if !pids.contains(&sample.pid) {
                self.stats.filtered_by_pid += occurrences;
                return Ok(());
            }
        }
        let index = self.sample_index;
        self.sample_index += occurrences;
        let setup = self.count_setup();
        let mut scratch = std::mem::take(&mut self.scratch);
        let scope = PrepareScope::new(self.layout, &self.placement, self.content, &self.options);
        let result = prepare_sample(
            &scope,
            sample,
            occurrences,
            index,
            &mut scratch,
            &mut self.stats,
        );
        if let (Ok(true), Some(as_fed)) = (&result, &mut self.as_fed) {
            let count = scope.count(&scratch, occurrences, count);
            let first = as_fed
                .counted
                .first_occurrence(&scratch, &mut as_fed.scratch);
            if first {
                self.stats.aggregated_samples += 1;
            }
            if as_fed.counters.is_empty() {
                let (kind, shape, options) = setup;
                as_fed
                    .counters
                    .push(PartCounter::new(self.layout, kind, shape, options));
            }
            as_fed.counters[0].add_one(&scratch, count, first);
        } else if let Ok(true) = result {
            let count = scope.count(&scratch, occurrences, count);
            match self.samples.get_mut(&scratch) {
                Some(n) => *n = n.wrapping_add(count),
                None => {
                    self.samples.insert(scratch.clone(), count);
                }
            }
        }
        self.scratch = scratch;
        result.map(|_| ())
    }

    /// [`Aggregator::feed_sample_repeated`] over consecutive samples (no side-band event
    /// between them), prepared on [`UnwindOptions::unwind_threads`] threads when there are
    /// enough of them ([`Aggregator::feed_parallel`], which gives the same counters and
    /// statistics). An error's sample index counts occurrences on one thread and
    /// samples of the slice on several: the same when each stands for one, as
    /// [`unwind_samples`]' do.
    pub fn feed_samples_repeated(&mut self, samples: &[(Sample, u64)]) -> Result<(), UnwindError> {
        let threads = self.options.unwind_threads.clamp(1, MAX_UNWIND_THREADS);
        if threads == 1 || samples.len() < MIN_SAMPLES_PER_THREAD * 2 {
            for (sample, occurrences) in samples {
                self.feed_sample_repeated(sample, *occurrences)?;
            }
            return Ok(());
        }
        self.feed_parallel(samples.len(), |i, _: &mut (), out| {
            let (sample, occurrences) = &samples[i];
            out.clone_from(sample);
            Some(*occurrences)
        })?;
        Ok(())
    }

    /// Feeds `len` consecutive samples (no side-band event between them) that `read`
    /// makes on [`UnwindOptions::unwind_threads`] threads: `read(i, state, out)` writes
    /// sample `i` into `out` (its count the sum of the counts of the samples it stands
    /// for) and returns how many samples it stands for, or `None` when there is no sample
    /// `i`. Each thread, with a `state` of its own, takes parts of consecutive samples
    /// as it finishes the previous one, reads and prepares them and keeps only prepared
    /// samples; the parts are aggregated in order, so counters and statistics are what
    /// [`Aggregator::feed_sample_repeated`] on each would give (stopping at the first
    /// error in index order). Returns the threads' states (one per thread, in no
    /// particular order). An error names the sample's index among the `len` samples
    /// (after the samples fed before).
    pub fn feed_parallel<T: Default + Send>(
        &mut self,
        len: usize,
        read: impl Fn(usize, &mut T, &mut Sample) -> Option<u64> + Sync,
    ) -> Result<Vec<T>, UnwindError> {
        if self.as_fed.is_some() {
            return self.count_parallel(len, read);
        }
        let threads = self.threads_for(len);
        let scope = PrepareScope::new(self.layout, &self.placement, self.content, &self.options);
        let reading = PartReading {
            scope: &scope,
            pids: self.options.sample_pids.as_ref(),
            first_index: self.sample_index,
            len,
        };
        // Parts of UNWIND_PART samples, taken by the threads as they finish one (a fixed
        // share each left one thread idle while the other finished a slower share); their
        // results are aggregated in order.
        let parts = len.div_ceil(UNWIND_PART);
        let results: Vec<Mutex<Option<PreparedPart>>> =
            (0..parts).map(|_| Mutex::new(None)).collect();
        // The parts are aggregated in order while the threads work: a thread that has
        // stored its part and gets the sink aggregates the parts ready from the next one
        // on. A part stored while another thread holds the sink waits for a later drain,
        // at the latest the one after the threads. Room for every sample at once (an
        // upper bound: some are dropped; `scope` borrows `self`, so the field itself).
        self.samples.reserve(len);
        let sink = Mutex::new(InOrder::new(&mut self.samples, &mut self.stats));
        type State<T> = (T, Sample, PerfSample);
        let new_state = || (T::default(), Sample::default(), PerfSample::default());
        let each = |(state, sample, out): &mut State<T>, k: usize| {
            let mut stats = UnwindStats::default();
            let mut kept = Vec::with_capacity(UNWIND_PART);
            let error = reading.prepare(
                k,
                |i, s| read(i, state, s),
                sample,
                out,
                &mut stats,
                |out, count| kept.push((out.clone(), count)),
            );
            *results[k].lock().unwrap_or_else(|e| e.into_inner()) = Some((kept, stats, error));
            if let Ok(mut sink) = sink.try_lock() {
                sink.drain(&results);
            }
        };
        let states: Vec<T> = on_parts(threads, parts, new_state, each)
            .into_iter()
            .map(|(state, _, _)| state)
            .collect();
        let mut sink = sink.into_inner().unwrap_or_else(|e| e.into_inner());
        sink.drain(&results);
        debug_assert!(sink.error.is_some() || sink.next == parts);
        self.sample_index += len as u64;
        sink.finish()?;
        Ok(states)
    }

    /// [`Aggregator::feed_parallel`] counting as fed: each thread reads, prepares and
    /// counts the samples of the parts it takes with a counter of its own (kept for the
    /// next batch). The statistics of preparing are added whatever the order; an error
    /// is the one of the lowest sample index.
    fn count_parallel<T: Default + Send>(
        &mut self,
        len: usize,
        read: impl Fn(usize, &mut T, &mut Sample) -> Option<u64> + Sync,
    ) -> Result<Vec<T>, UnwindError> {
        let threads = self.threads_for(len);
        let (kind, shape, options) = self.count_setup();
        let layout = self.layout;
        let Some(as_fed) = self.as_fed.as_mut() else {
            unreachable!("count_parallel is called when counting as fed");
        };
        let scope = PrepareScope::new(layout, &self.placement, self.content, &self.options);
        let reading = PartReading {
            scope: &scope,
            pids: self.options.sample_pids.as_ref(),
            first_index: self.sample_index,
            len,
        };
        let parts = len.div_ceil(UNWIND_PART);
        let idle = Mutex::new(std::mem::take(&mut as_fed.counters));
        let counted = &as_fed.counted;
        // The statistics of preparing, and the first error (by part) with its part.
        let outcome: Mutex<(UnwindStats, Option<(usize, UnwindError)>)> =
            Mutex::new((UnwindStats::default(), None));
        type State<'c, T> = (T, Sample, PerfSample, Vec<u64>, PartCounter<'c>);
        let new_state = || {
            let counter = idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop()
                .unwrap_or_else(|| PartCounter::new(layout, kind, shape, options));
            (
                T::default(),
                Sample::default(),
                PerfSample::default(),
                Vec::new(),
                counter,
            )
        };
        let each = |(state, sample, out, bytes, counter): &mut State<'a, T>, k: usize| {
            let mut stats = UnwindStats::default();
            let mut firsts = 0;
            let error = reading.prepare(
                k,
                |i, s| read(i, state, s),
                sample,
                out,
                &mut stats,
                |out, count| {
                    let first = counted.first_occurrence(out, bytes);
                    firsts += u64::from(first);
                    counter.add_one(out, count, first);
                },
            );
            stats.aggregated_samples += firsts;
            let mut outcome = outcome.lock().unwrap_or_else(|e| e.into_inner());
            outcome.0.merge(&stats);
            if let Some(e) = error {
                if outcome.1.as_ref().is_none_or(|(j, _)| k < *j) {
                    outcome.1 = Some((k, e));
                }
            }
        };
        let states = on_parts(threads, parts, new_state, each);
        let mut counters = idle.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::with_capacity(states.len());
        for (state, _, _, _, counter) in states {
            counters.push(counter);
            out.push(state);
        }
        as_fed.counters = counters;
        self.sample_index += len as u64;
        let (stats, error) = outcome.into_inner().unwrap_or_else(|e| e.into_inner());
        self.stats.merge(&stats);
        match error {
            Some((_, e)) => Err(e),
            None => Ok(out),
        }
    }

    /// Turns the aggregated samples into counters and forgets them (placement and
    /// statistics stay). Flushes merge: the sum of the sets of several flushes equals one
    /// flush of all the samples.
    pub fn flush(&mut self) -> CounterSet {
        if let Some(as_fed) = &mut self.as_fed {
            return flush_counted(
                std::mem::take(&mut as_fed.counters),
                self.layout,
                self.count_setup(),
                &mut self.stats,
            );
        }
        let (kind, shape, leading_ip) = self.count_setup();
        let samples = std::mem::take(&mut self.samples);
        self.stats.aggregated_samples += samples.len() as u64;
        let layout = self.layout;
        let threads = self.options.unwind_threads.clamp(1, MAX_UNWIND_THREADS);
        let counters = if threads == 1 || samples.len() < MIN_SAMPLES_PER_THREAD * 2 {
            let samples: Vec<(PerfSample, u64)> = samples.into_iter().collect();
            count_part(layout, kind, shape, leading_ip, &samples, &mut self.stats)
                .into_counter_set()
        } else {
            // Counters are sums and every statistic a sum or a set union, so the samples
            // may be counted in parts and the parts merged. Small parts, taken by the
            // threads as they finish the previous one, keep every thread busy to the end.
            // A thread frees the samples of the parts it counted: they were allocated on
            // the threads that prepared them, and freeing them all here would serialise a
            // large share of the work (docs/performance.md).
            let mut rest = samples.into_iter();
            let parts: Vec<Mutex<Vec<(PerfSample, u64)>>> = std::iter::from_fn(|| {
                let part: Vec<_> = rest.by_ref().take(UNWIND_PART).collect();
                (!part.is_empty()).then(|| Mutex::new(part))
            })
            .collect();
            let counters = on_parts(
                threads,
                parts.len(),
                || PartCounter::new(layout, kind, shape, leading_ip),
                |counter, k| {
                    let part =
                        std::mem::take(&mut *parts[k].lock().unwrap_or_else(|e| e.into_inner()));
                    counter.add(&part);
                },
            );
            merge_part_counters(counters, kind, &mut self.stats).into_counter_set()
        };
        if kind != CounterKind::Flat {
            self.stats.contexts += counters.contexts.len() as u64;
        }
        counters
    }

    /// Flushes and returns the counters with the final statistics.
    pub fn finish(mut self) -> (CounterSet, UnwindStats) {
        let counters = self.flush();
        self.note_kernel_mapping();
        (counters, self.stats)
    }

    /// Counts the distinct samples of `tally` for a caller that counts samples of this
    /// binary (this layout) again and again: counting goes on from what `kept` keeps of
    /// the previous tallies (the unwinder's frame trie and layout answers, the counter
    /// table's interned contexts) and leaves there what the next may go on from. Context
    /// counters stay in the kept table, summed over tallies until
    /// [`KeptCounting::take_counters`] gives them (`None` here): a live binary's feeds of
    /// a few thousand samples each then skip building and merging a counter set per feed.
    /// Flat counters are given back (`Some`).
    ///
    /// Each distinct sample is counted as it is prepared, not copied into the aggregator's
    /// map to be unwound at a flush: a live feed's tally of samples as distinct as
    /// hardware's is mostly distinct, and the copies were most of what the map cost. What
    /// llvm-profgen counts once per distinct prepared sample is counted for its first
    /// occurrence in the tally ([`CountedSamples`]), so counters and statistics are what
    /// [`Aggregator::feed_tally`] and [`Aggregator::finish`] give, but for
    /// [`UnwindStats::contexts`], which counts no context of counters left in `kept`, and
    /// the range checks: of those, context-sensitive counting here counts only
    /// [`UnwindStats::bogus_ranges`] (the one the daemon reports), as the unwinder replays
    /// each range, instead of tallying every range of every sample. A
    /// hybrid sample without branches (where `feed_tally` stops) is counted as dropped for
    /// its empty branch stack, and the others still are counted.
    pub fn count_tally_kept(
        mut self,
        tally: &SampleTally,
        kept: &mut KeptCounting,
    ) -> (Option<CounterSet>, UnwindStats) {
        let (kind, shape, options) = self.count_setup();
        if kind == CounterKind::Flat {
            // Flat counters are not kept: counted as fed, given back as a set.
            let mut agg = self.counting_as_fed();
            agg.feed_tally_dropping_errors(tally);
            let (counters, stats) = agg.finish();
            return (Some(counters), stats);
        }
        // The daemon reports only the bogus ranges of a live binary: counted as replayed,
        // without a tally of every range.
        let options = CountOptions {
            range_checks: false,
            ..options
        };
        self.as_fed = Some(CountingAsFed {
            counters: vec![kept_part_counter(self.layout, kind, shape, options, kept)],
            counted: CountedSamples::new(),
            scratch: Vec::new(),
        });
        self.feed_tally_dropping_errors(tally);
        if let Some(counter) = self.as_fed.take().and_then(|mut a| a.counters.pop()) {
            leave_kept(counter, &mut self.stats, kept);
        }
        self.note_kernel_mapping();
        (None, self.stats)
    }

    /// [`Aggregator::feed_tally`], an entry whose preparation fails counted as dropped for
    /// its empty branch stack (the only error preparing a held sample can give).
    fn feed_tally_dropping_errors(&mut self, tally: &SampleTally) {
        let fed = self.feed_tally_entries(tally, |agg, occurrences, _| {
            agg.stats.dropped_empty_lbr_samples += occurrences;
            Ok(())
        });
        debug_assert!(fed.is_ok(), "no error stops this feeding");
    }

    /// [`UnwindStats::kernel_not_mapped`]: a kernel placed by no MMAP2 event.
    fn note_kernel_mapping(&mut self) {
        self.stats.kernel_not_mapped =
            self.placement.load().kernel && !self.placement.is_loaded_by_mmap();
    }
}

/// Samples prepared on one thread (each with its count), their statistics, and the error
/// that stopped the thread.
type PreparedPart = (Vec<(PerfSample, u64)>, UnwindStats, Option<UnwindError>);

/// Prepared parts aggregated in order into an aggregator's samples and statistics, up to
/// the first error.
struct InOrder<'s> {
    samples: &'s mut HashMap<PerfSample, u64, FxBuildHasher>,
    stats: &'s mut UnwindStats,
    /// The index of the next part.
    next: usize,
    error: Option<UnwindError>,
}

impl<'s> InOrder<'s> {
    fn new(
        samples: &'s mut HashMap<PerfSample, u64, FxBuildHasher>,
        stats: &'s mut UnwindStats,
    ) -> InOrder<'s> {
        InOrder {
            samples,
            stats,
            next: 0,
            error: None,
        }
    }

    /// Aggregates the parts of `results` that are ready from the next one on (taking them
    /// out), until one is not or one had an error.
    fn drain(&mut self, results: &[Mutex<Option<PreparedPart>>]) {
        while self.error.is_none() {
            let Some(slot) = results.get(self.next) else {
                return;
            };
            let Some(part) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() else {
                return;
            };
            self.add(part);
        }
    }

    /// Aggregates the next part: its statistics and samples, then its error.
    fn add(&mut self, (kept, stats, error): PreparedPart) {
        self.next += 1;
        self.stats.merge(&stats);
        let mut kept = kept.into_iter().peekable();
        while let Some((sample, count)) = kept.next() {
            // Prepared on another thread: hashing and comparing them waited on memory.
            if let Some((next, _)) = kept.peek() {
                next.prefetch();
            }
            let n = self.samples.entry(sample).or_insert(0);
            *n = n.wrapping_add(count);
        }
        self.error = error;
    }

    /// The first error, if a part had one.
    fn finish(self) -> Result<(), UnwindError> {
        self.error.map_or(Ok(()), Err)
    }
}

/// Runs `each(state, k)` for every part `k` in `0..parts` on `threads` threads (see
/// [`collector::threads::on_threads`]): each thread makes its `state` with `new_state` and takes the next part
/// as it finishes one, so that every thread stays busy to the end. Returns the states.
fn on_parts<S: Send>(
    threads: usize,
    parts: usize,
    new_state: impl Fn() -> S + Sync,
    each: impl Fn(&mut S, usize) + Sync,
) -> Vec<S> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (next, new_state, each) = (&next, &new_state, &each);
    on_threads((0..threads).map(|_| {
        move || {
            let mut state = new_state();
            loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if k >= parts {
                    return state;
                }
                each(&mut state, k);
            }
        }
    }))
}

/// What preparing a sample reads from its [`Aggregator`] (shared by preparing threads).
struct PrepareScope<'a> {
    layout: &'a dyn CodeLayout,
    placement: &'a BinaryPlacement,
    content: PerfContent,
    ignore_stack_samples: bool,
    leading_ip_only: bool,
    sample_period: Option<u64>,
    stack_repair: bool,
}

impl<'a> PrepareScope<'a> {
    fn new(
        layout: &'a dyn CodeLayout,
        placement: &'a BinaryPlacement,
        content: PerfContent,
        options: &UnwindOptions,
    ) -> PrepareScope<'a> {
        PrepareScope {
            layout,
            placement,
            content,
            ignore_stack_samples: options.ignore_stack_samples,
            leading_ip_only: options.leading_ip_only,
            sample_period: options.sample_period,
            stack_repair: options.stack_repair,
        }
    }

    /// The aggregated count of a prepared sample (`prepared`) standing for `occurrences`
    /// samples whose counts sum to `count`: `count`, or with `--sample-period` on LBR-only
    /// input each occurrence's count scaled as `LBRPerfReader::parseSample` scales it
    /// (times the period, divided by the branches less one; wrapping like its
    /// `uint64_t`). Occurrences are taken to have equal counts (`count / occurrences`
    /// each), which they have unless identical samples carry different count lines.
    fn count(&self, prepared: &PerfSample, occurrences: u64, count: u64) -> u64 {
        let Some(period) = self.sample_period else {
            return count;
        };
        if self.content != PerfContent::Lbr || occurrences == 0 {
            return count;
        }
        let branches = prepared.lbr.len() as u64;
        let scale = |c: u64| {
            let c = c.wrapping_mul(period);
            if !self.leading_ip_only && branches > 1 {
                c / (branches - 1)
            } else {
                c
            }
        };
        let each = count / occurrences;
        scale(each)
            .wrapping_mul(occurrences)
            .wrapping_add(scale(count - each * occurrences))
    }
}

/// A batch of `len` consecutive samples read in parts of [`UNWIND_PART`] by threads.
struct PartReading<'s, 'a> {
    scope: &'s PrepareScope<'a>,
    pids: Option<&'s std::collections::BTreeSet<u32>>,
    /// The index of the batch's first sample among all.
    first_index: u64,
    len: usize,
}

impl PartReading<'_, '_> {
    /// Reads the samples of part `k` with `read` (into `sample`; `None` when there is no
    /// such sample), skips those of other processes, prepares each into `out` and hands
    /// it to `kept` with its aggregated count, adding to `stats`; stops at the first error
    /// and returns it.
    fn prepare(
        &self,
        k: usize,
        mut read: impl FnMut(usize, &mut Sample) -> Option<u64>,
        sample: &mut Sample,
        out: &mut PerfSample,
        stats: &mut UnwindStats,
        mut kept: impl FnMut(&PerfSample, u64),
    ) -> Option<UnwindError> {
        for i in k * UNWIND_PART..self.len.min((k + 1) * UNWIND_PART) {
            let Some(occurrences) = read(i, sample) else {
                continue;
            };
            if self.pids.is_some_and(|p| !p.contains(&sample.pid)) {
                stats.filtered_by_pid += occurrences;
                continue;
            }
            let index = self.first_index + i as u64;
            match prepare_sample(self.scope, sample, occurrences, index, out, stats) {
                Ok(true) => kept(out, self.scope.count(out, occurrences, sample.count)),
                Ok(false) => {}
                Err(e) => return Some(e),
            }
        }
        None
    }
}

/// Counts `sample` (standing for `occurrences` samples) and prepares it into `out`;
/// `Ok(false)` when it is dropped (and counted in `stats`).
fn prepare_sample(
    scope: &PrepareScope<'_>,
    sample: &Sample,
    occurrences: u64,
    index: u64,
    out: &mut PerfSample,
    stats: &mut UnwindStats,
) -> Result<bool, UnwindError> {
    stats.samples_seen += occurrences;
    // perf script prints an empty line before a sample with a call chain, which
    // llvm-profgen's reader counts as a sample too (see UnwindStats::total_samples).
    stats.total_samples += occurrences * if sample.callchain.is_empty() { 1 } else { 2 };
    out.call_stack.clear();
    let rebase = scope.placement.rebase_for(sample.pid);
    if scope.content == PerfContent::LbrStack {
        let mut notes = StackNotes::default();
        let repair = match sample.callchain.first() {
            Some(&leaf) if scope.stack_repair => {
                leaf_repair(leaf, sample.user_stack.as_ref(), rebase, scope.layout)
            }
            _ => StackRepair::Unavailable,
        };
        let stack = extract_repaired_call_stack_into(
            &sample.callchain,
            repair,
            rebase,
            scope.layout,
            &mut notes,
            &mut out.call_stack,
        );
        match (repair, stack.is_ok()) {
            (StackRepair::Unrepairable, _) => stats.unrepairable_stacks += occurrences,
            (StackRepair::InsertCaller(_), true) => stats.repaired_stacks += occurrences,
            _ => {}
        }
        if notes.leaf_external {
            stats.leaf_external_frames += occurrences;
        }
        if let Some(a) = notes.invalid_return_address {
            stats.invalid_return_addresses.insert(a);
        }
        if stack.is_err() {
            stats.dropped_stack_samples += occurrences;
            return Ok(false);
        }
        warn_if_missing_mmap(scope.placement, stats);
        if sample.lbr.is_empty() {
            return Err(UnwindError::HybridSampleWithoutLbr {
                sample_index: index,
            });
        }
    }
    if scope.leading_ip_only && scope.content == PerfContent::Lbr && sample.ip != 0 {
        // `--leading-ip-only` (`extractLBRStack`): the sample IP as a half entry, the
        // branch stack ignored. (An LBR-only line without a leading IP reads as IP 0.)
        let ip = rebase.canonical(sample.ip);
        out.lbr.clear();
        if crate::code_layout::code_test(scope.layout)(ip) {
            out.lbr.push(crate::sample_prep::Branch {
                source: ip,
                target: ip,
            });
        }
    } else {
        extract_lbr_stack_into(&sample.lbr, rebase, scope.layout, &mut out.lbr);
    }
    if out.lbr.is_empty() {
        stats.dropped_empty_lbr_samples += occurrences;
        return Ok(false);
    }
    if scope.content == PerfContent::Lbr {
        warn_if_missing_mmap(scope.placement, stats);
    } else if scope.ignore_stack_samples {
        out.call_stack.clear();
    } else {
        // "Canonicalize stack leaf to avoid 'random' IP from leaf frame skew LBR ranges".
        out.call_stack[0] = out.lbr[0].target;
    }
    // Counts wrap like llvm-profgen's uint64_t (a hostile pre-aggregated count must not
    // panic): see `Aggregator::feed_sample_repeated`.
    Ok(true)
}

fn warn_if_missing_mmap(placement: &BinaryPlacement, stats: &mut UnwindStats) {
    if !placement.is_loaded_by_mmap() && stats.missing_mmap_warning.is_none() {
        let load = placement.load();
        stats.missing_mmap_warning = Some(format!(
            "No relevant mmap event is matched for {}, will use preferred address ({:#x}) as the base loading address!",
            load.name, load.preferred_base
        ));
    }
}

/// The counters of an aggregator counting as fed: its threads' `counters` merged (one
/// made when there are none: an empty flat set still has its context), their statistics
/// added to `stats` with the contexts produced.
fn flush_counted<'a>(
    mut counters: Vec<PartCounter<'a>>,
    layout: &'a dyn CodeLayout,
    (kind, shape, options): (CounterKind, KeyShape, CountOptions),
    stats: &mut UnwindStats,
) -> CounterSet {
    if counters.is_empty() {
        counters.push(PartCounter::new(layout, kind, shape, options));
    }
    let counters = merge_part_counters(counters, kind, stats).into_counter_set();
    if kind != CounterKind::Flat {
        stats.contexts += counters.contexts.len() as u64;
    }
    counters
}

/// The threads' `counters` finished ([`PartCounter::finish`]) and merged into one table,
/// their statistics added to `stats`.
fn merge_part_counters(
    counters: Vec<PartCounter<'_>>,
    kind: CounterKind,
    stats: &mut UnwindStats,
) -> CounterTable {
    let mut total = CounterTable::new(kind);
    for (table, part_stats) in counters.into_iter().map(PartCounter::finish) {
        if total.is_empty() {
            total = table;
        } else {
            total.merge(table);
        }
        stats.merge(&part_stats);
    }
    total
}

/// Counters of some aggregated samples: `warnInvalidRange`'s checks, then LBR-only
/// counting or virtual unwinding, with their statistics added to `stats`.
fn count_part(
    layout: &dyn CodeLayout,
    kind: CounterKind,
    shape: KeyShape,
    leading_ip: CountOptions,
    samples: &[(PerfSample, u64)],
    stats: &mut UnwindStats,
) -> CounterTable {
    let mut counter = PartCounter::new(layout, kind, shape, leading_ip);
    counter.add(samples);
    let (table, part_stats) = counter.finish();
    stats.merge(&part_stats);
    table
}

/// A counter going on from the table and unwinder `kept` holds (taken out of it: give
/// them back with [`leave_kept`]), or new ones when it holds none of this kind and shape.
fn kept_part_counter<'a>(
    layout: &'a dyn CodeLayout,
    kind: CounterKind,
    shape: KeyShape,
    options: CountOptions,
    kept: &mut KeptCounting,
) -> PartCounter<'a> {
    let table = kept
        .table
        .take()
        .filter(|t| t.kind() == kind)
        .unwrap_or_else(|| CounterTable::new(kind));
    // A kept line table of a binary without inline frames counts by address
    // (`crate::address_form`): `KeptCounting::take_counters` expands it.
    let shape = KeyShape {
        address_form: kind == CounterKind::LineContext && !layout.has_inline_frames(),
        ..shape
    };
    let unwinder = match kept.unwinder.take() {
        Some(k) if k.shape() == shape => VirtualUnwinder::resume(layout, k),
        _ => VirtualUnwinder::new(layout, shape),
    };
    PartCounter::with(layout, kind, table, unwinder, options)
}

/// Leaves the table and unwinder of `counter` in `kept` (its counters stay in the table),
/// its statistics added to `stats`.
fn leave_kept(counter: PartCounter<'_>, stats: &mut UnwindStats, kept: &mut KeptCounting) {
    let (table, part_stats, unwinder) = counter.finish_keeping();
    stats.merge(&part_stats);
    kept.unwinder = Some(unwinder.suspend());
    kept.table = Some(table);
}

/// One thread's counting of parts of the aggregated samples: its counters, its ranges to
/// check, and its unwinder (whose layout cache stays warm from part to part).
struct PartCounter<'a> {
    layout: &'a dyn CodeLayout,
    table: CounterTable,
    /// The one context of flat counting.
    flat: Option<crate::counter_table::ContextId>,
    ranges: RangeTally,
    unwinder: VirtualUnwinder<'a>,
    stats: UnwindStats,
    /// `--leading-ip-only`, `--show-detailed-warning`.
    options: CountOptions,
}

/// Options of counting aggregated samples.
#[derive(Clone, Copy)]
struct CountOptions {
    /// `--leading-ip-only`: flat counting and range checks take a sample's first entry
    /// as an IP.
    leading_ip: bool,
    /// Every range is tallied for `warnInvalidRange`'s checks. Without it (a live binary's
    /// held samples: the daemon reports only bogus ranges), context-sensitive counting
    /// counts only the bogus ranges, as the unwinder replays them
    /// ([`VirtualUnwinder::take_bogus_ranges`]), and the other range statistics stay 0.
    range_checks: bool,
    /// Keep each invalid range for `--show-detailed-warning`.
    range_details: bool,
}

impl<'a> PartCounter<'a> {
    fn new(
        layout: &'a dyn CodeLayout,
        kind: CounterKind,
        shape: KeyShape,
        options: CountOptions,
    ) -> PartCounter<'a> {
        PartCounter::with(
            layout,
            kind,
            CounterTable::new(kind),
            VirtualUnwinder::new(layout, shape),
            options,
        )
    }

    /// Counting into `table` with `unwinder`.
    fn with(
        layout: &'a dyn CodeLayout,
        kind: CounterKind,
        mut table: CounterTable,
        unwinder: VirtualUnwinder<'a>,
        options: CountOptions,
    ) -> PartCounter<'a> {
        PartCounter {
            layout,
            // The one flat context exists even when nothing is counted in it.
            flat: (kind == CounterKind::Flat).then(|| table.context(&[])),
            table,
            ranges: RangeTally::default(),
            unwinder,
            stats: UnwindStats::default(),
            options,
        }
    }

    fn add(&mut self, samples: &[(PerfSample, u64)]) {
        for (i, (sample, count)) in samples.iter().enumerate() {
            if let Some((next, _)) = samples.get(i + 1) {
                next.prefetch();
            }
            self.add_one(sample, *count, true);
        }
    }

    /// Counts `sample` with `count`. What llvm-profgen counts once per distinct sample
    /// (unwinding's statistics) is counted only when it is the `first` occurrence; its
    /// ranges, like its counters, add up whatever the occurrence.
    fn add_one(&mut self, sample: &PerfSample, count: u64, first: bool) {
        // Without the tally, the unwinder counts the bogus ranges (below).
        let tallied = self.options.range_checks || self.flat.is_some();
        if tallied && self.options.leading_ip {
            self.ranges.add_leading_ip(sample, count);
        } else if tallied {
            self.ranges.add(sample, count);
        }
        if let Some(flat) = self.flat {
            if self.options.leading_ip {
                count_leading_ip_sample(sample, count, self.layout, &mut self.table, flat)
            } else {
                count_lbr_sample(sample, count, self.layout, &mut self.table, flat)
            }
        } else if first {
            self.unwinder
                .unwind(sample, count, &mut self.table, &mut self.stats);
        } else {
            // A repeat's unwinding statistics are its first occurrence's (its untracked
            // call sites too: the same sample truncates the same contexts).
            let mut repeat = UnwindStats::default();
            self.unwinder
                .unwind(sample, count, &mut self.table, &mut repeat);
        }
        if !tallied {
            let bogus = self.unwinder.take_bogus_ranges();
            self.stats.bogus_ranges = self.stats.bogus_ranges.wrapping_add(bogus);
        }
    }

    /// The counters, and the statistics with the range checks.
    fn finish(self) -> (CounterTable, UnwindStats) {
        let (table, stats, _) = self.finish_keeping();
        (table, stats)
    }

    /// [`PartCounter::finish`], and the unwinder.
    fn finish_keeping(mut self) -> (CounterTable, UnwindStats, VirtualUnwinder<'a>) {
        self.ranges
            .check(self.layout, self.options, &mut self.stats);
        (self.table, self.stats, self.unwinder)
    }
}

/// The sampled ranges `warnInvalidRange` checks, summed per distinct range (the checks
/// depend only on the range): every pair of consecutive entries of an aggregated sample is
/// a range `[target_i, source_{i-1}]`, whatever its validity.
#[derive(Default)]
struct RangeTally {
    ranges: HashMap<(u64, u64), u64, FxBuildHasher>,
    /// Additions on their way to `ranges`.
    sums: SummingCache<(u64, u64)>,
    any_sample: bool,
    /// One sample's ranges, a loop's repeats summed ([`add_or_push`]) before the map.
    pending: Vec<((u64, u64), u64)>,
}

impl RangeTally {
    fn add(&mut self, sample: &PerfSample, count: u64) {
        self.any_sample = true;
        // A loop repeats the same one or two ranges: summed first, each goes into the map
        // once per sample rather than once per iteration.
        self.pending.clear();
        for pair in sample.lbr.windows(2) {
            add_or_push(&mut self.pending, (pair[1].target, pair[0].source), count);
        }
        for &((start, end), count) in &self.pending {
            self.sums.add((start, end), count, &mut self.ranges);
        }
    }

    /// `--leading-ip-only`: a sample's range is its first entry's one address, when that
    /// entry is an IP (source = target, not external).
    fn add_leading_ip(&mut self, sample: &PerfSample, count: u64) {
        self.any_sample = true;
        if let Some(first) = sample.lbr.first() {
            if first.source == first.target && first.source != crate::EXTERNAL_ADDR {
                self.sums
                    .add((first.source, first.source), count, &mut self.ranges);
            }
        }
    }

    /// `warnInvalidRange`'s checks of every range, added to `stats` (sampled IPs, with
    /// `leading_ip`, need not end at a branch).
    fn check(mut self, layout: &dyn CodeLayout, options: CountOptions, stats: &mut UnwindStats) {
        let mut detail = |start: u64, end: u64, msg: &'static str| {
            if options.range_details {
                stats.range_details.push((start, end, msg));
            }
        };
        if !self.any_sample {
            return;
        }
        self.sums.flush_into(&mut self.ranges);
        let checks = layout.range_checks();
        stats.range_checks_done |= checks.is_some();
        let is_code = crate::code_layout::code_test(layout);
        for ((start, end), count) in self.ranges {
            stats.total_range_samples = stats.total_range_samples.wrapping_add(count);
            let Some(checks) = checks else { continue };
            let (start_code, end_code) = (is_code(start), is_code(end));
            if !start_code && !end_code {
                continue;
            }
            if !options.leading_ip && (!start_code || !checks.is_transfer(end)) {
                stats.ranges_not_on_boundary = stats.ranges_not_on_boundary.wrapping_add(count);
                detail(start, end, crate::stats::RANGE_NOT_ON_BOUNDARY);
            }
            let Some((_, func_end)) = checks.function_range(start) else {
                stats.ranges_outside_functions = stats.ranges_outside_functions.wrapping_add(count);
                detail(start, end, crate::stats::RANGE_OUTSIDE_FUNCTIONS);
                continue;
            };
            if end >= func_end {
                stats.ranges_crossing_functions =
                    stats.ranges_crossing_functions.wrapping_add(count);
                detail(start, end, crate::stats::RANGE_CROSSING_FUNCTIONS);
            }
            if start_code && end_code && !layout.is_valid_fall_through_range(start, end) {
                stats.bogus_ranges = stats.bogus_ranges.wrapping_add(count);
                detail(start, end, crate::stats::RANGE_BOGUS);
            }
        }
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
    unwind_repeated_samples(events.into_iter().map(|e| (e, 1)), layout, load, options)
}

/// [`unwind_samples`] over events paired with how many identical events each stands for
/// (see [`Aggregator::feed_sample_repeated`]; side-band events come with 1).
pub fn unwind_repeated_samples(
    events: impl IntoIterator<Item = (PerfEvent, u64)>,
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
            let detected = PerfContent::detect(std::iter::once(&event.0));
            buffered.push(event);
            if let Some(c) = detected {
                break c;
            }
        },
    };
    let mut agg =
        Aggregator::new(layout, load.clone(), content, options.clone())?.counting_as_fed();
    // Consecutive samples go in batches (prepared on threads when options ask for them).
    let mut batch: Vec<(Sample, u64)> = Vec::new();
    for (event, occurrences) in buffered.into_iter().chain(events) {
        match event {
            PerfEvent::Sample(sample) => {
                batch.push((sample, occurrences));
                if batch.len() == MAX_SAMPLE_BATCH {
                    agg.feed_samples_repeated(&batch)?;
                    batch.clear();
                }
            }
            other => {
                agg.feed_samples_repeated(&batch)?;
                batch.clear();
                agg.feed(&other)?;
            }
        }
    }
    agg.feed_samples_repeated(&batch)?;
    Ok(agg.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::FakeLayout;
    use crate::EXTERNAL_ADDR;
    use collector::LbrEntry;

    /// A counter map's entries in order.
    fn pairs(m: &std::collections::BTreeMap<(u64, u64), u64>) -> Vec<((u64, u64), u64)> {
        m.iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// [`crate::test_support::main_calls_foo`], with probes or not.
    fn layout(probes: bool) -> FakeLayout {
        crate::test_support::main_calls_foo().with_probes(probes)
    }

    fn load() -> BinaryLoadInfo {
        crate::test_support::main_calls_foo_load()
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
            pairs(&cc.branches),
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
        eprintln!("{c:?}");
        let foo = &c.contexts[&vec![0x1004]];
        assert_eq!(
            foo.ranges.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>(),
            vec![((0x1010, 0x1015), 2)]
        );
        assert_eq!(pairs(&foo.branches), vec![((0x1015, 0x1010), 2)]);
        let main = &c.contexts[&vec![]];
        assert_eq!(pairs(&main.ranges), vec![((0x1000, 0x1004), 2)]);
        assert_eq!(
            pairs(&main.branches),
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

    /// [`layout`] with probes, foo's entry (0x1010) decoded as before `push rbp`: the
    /// return address at `[sp]`.
    fn layout_with_foo_entry() -> FakeLayout {
        layout(true).with_frame_setups(&[(
            0x1010,
            crate::FrameSetup::CallerFrame {
                return_address_offset: 0,
            },
        )])
    }

    /// A hybrid sample at foo's entry (0x1010) right after main's call, whose chain goes
    /// on to main's caller outside the binary; registers with `word` at `[sp]` (none
    /// without a word).
    fn at_foo_entry(sp: u64, word: Option<u64>) -> Sample {
        Sample {
            ip: 0x1010,
            callchain: vec![0x1010, 0x99],
            lbr: vec![
                LbrEntry {
                    from: 0x1004,
                    to: 0x1010,
                    flags: 0,
                },
                LbrEntry {
                    from: 0x98,
                    to: 0x1000,
                    flags: 0,
                },
            ],
            count: 1,
            user_stack: word.map(|w| collector::UserStack {
                ip: 0x1010,
                sp,
                bp: 0x7ffd_0100,
                words: [w, 0x7ffd_0100],
                len: 2,
            }),
            ..Sample::default()
        }
    }

    #[test]
    fn hybrid_leaf_at_a_function_entry_is_repaired_from_registers() {
        let l = layout_with_foo_entry();
        // Sampled at foo's entry right after main's call: the chain skips main's call site
        // (the return address 0x1009 is at [sp]) and goes on to main's caller, outside.
        let entry = at_foo_entry(0x7ffd_0000, Some(0x1009));
        let events = vec![PerfEvent::Sample(entry)];
        let (_, dropped) =
            unwind_samples(events.clone(), &l, &load(), &UnwindOptions::default()).unwrap();
        assert_eq!(
            (dropped.dropped_stack_samples, dropped.repaired_stacks),
            (1, 0)
        );
        let on = UnwindOptions {
            stack_repair: true,
            ..UnwindOptions::default()
        };
        let (c, s) = unwind_samples(events, &l, &load(), &on).unwrap();
        assert_eq!(
            (
                s.dropped_stack_samples,
                s.repaired_stacks,
                s.unrepairable_stacks
            ),
            (0, 1, 0)
        );
        // The newest branch is main's call into foo: main's range up to the call, the
        // call and the external entry into main are counted in the root context, with the
        // call matched to the repaired frame (no mismatched call).
        assert_eq!(c.contexts.len(), 1);
        let main = &c.contexts[&vec![]];
        assert_eq!(pairs(&main.ranges), vec![((0x1000, 0x1004), 1)]);
        assert_eq!(
            pairs(&main.branches),
            vec![((EXTERNAL_ADDR, 0x1000), 1), ((0x1004, 0x1010), 1)]
        );
        assert_eq!(
            (s.mismatched_prolog_epilog_branches, s.bogus_traces),
            (0, 0)
        );
    }

    /// A batch tells apart samples whose registers repair them differently (a word at
    /// `[sp]` that is no return address, no registers) and only those: its counters and
    /// statistics are those of feeding each sample on its own.
    #[test]
    fn a_batch_repairs_each_sample_as_its_registers_say() {
        let l = layout_with_foo_entry();
        let batch = [
            at_foo_entry(0x7ffd_0000, Some(0x1009)),
            at_foo_entry(0x7ffd_0040, Some(0x1009)),
            at_foo_entry(0x7ffd_0000, Some(0x1014)),
            at_foo_entry(0x7ffd_0000, None),
        ];
        let on = UnwindOptions {
            stack_repair: true,
            ..UnwindOptions::default()
        };
        let mut batched = Aggregator::new(&l, load(), PerfContent::LbrStack, on.clone()).unwrap();
        batched.feed_batch(&batch).unwrap();
        let (batched, batched_stats) = batched.finish();
        let mut single = Aggregator::new(&l, load(), PerfContent::LbrStack, on).unwrap();
        for s in &batch {
            single.feed_sample(s).unwrap();
        }
        let (single, single_stats) = single.finish();
        assert_eq!(batched, single);
        assert_eq!(batched_stats, single_stats);
        assert_eq!(
            (
                batched_stats.repaired_stacks,
                batched_stats.unrepairable_stacks,
                batched_stats.dropped_stack_samples
            ),
            (2, 1, 2)
        );
        let main = &batched.contexts[&vec![]];
        assert_eq!(pairs(&main.ranges), vec![((0x1000, 0x1004), 2)]);
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

    /// Tallies counted one after another with the same kept counting give what each
    /// aggregated and finished afresh gives, for probe and line contexts, whatever came
    /// before.
    #[test]
    fn tallies_counted_with_kept_counting_count_like_finishing_afresh() {
        for probes in [true, false] {
            // With function ranges: the range checks apply.
            let l = layout(probes).with_function_ranges(&[(0x1000, 0x1010), (0x1010, 0x1019)]);
            let mut kept = KeptCounting::default();
            let batches = [
                loop_sample_structs(3),
                loop_sample_structs(5),
                loop_sample_structs(1),
                bogus_range_sample_structs(),
                loop_sample_structs(5),
            ];
            for (k, batch) in batches.iter().enumerate() {
                let mut fresh = mapped_aggregator(&l, 1);
                fresh.feed_batch(batch).unwrap();
                let expected = fresh.finish();
                let warm = mapped_aggregator(&l, 1);
                let mut tally = SampleTally::with_capacity(false, batch.len());
                tally.add_all_placed(batch, |_| true, false, &warm.placement, &l);
                let (left, mut stats) = warm.count_tally_kept(&tally, &mut kept);
                assert!(left.is_none(), "counted into the kept table");
                let got = kept.take_counters(&l);
                assert!(!got.contexts.is_empty());
                assert_eq!(got, expected.0, "probes {probes}, batch {k}");
                // The contexts of counters left in the kept table are counted by who takes
                // them; of the range checks, only the bogus ranges are counted.
                stats.contexts += got.contexts.len() as u64;
                let mut expected_stats = expected.1;
                assert!(expected_stats.total_range_samples > 0);
                expected_stats.total_range_samples = 0;
                expected_stats.ranges_not_on_boundary = 0;
                expected_stats.ranges_outside_functions = 0;
                expected_stats.ranges_crossing_functions = 0;
                expected_stats.range_checks_done = false;
                assert_eq!(format!("{:?}", stats), format!("{:?}", expected_stats));
                if k == 3 {
                    // Both samples' backwards range, each over its two occurrences; the
                    // second's is counted though its prepared sample repeats the first's.
                    assert_eq!(stats.bogus_ranges, 2 + 3 + 4 + 5);
                    assert_eq!(stats.aggregated_samples, 1);
                }
                assert!(kept.unwinder.is_some() && kept.table.is_some());
            }
        }
    }

    #[test]
    fn a_repeated_sample_counts_as_its_occurrences() {
        let l = layout(true);
        let one_by_one = vec![
            mmap(0x5000),
            sample(0x5000, true, 2),
            sample(0x5000, true, 2),
            sample(0x5000, true, 2),
        ];
        let expected = unwind_samples(one_by_one, &l, &load(), &UnwindOptions::default()).unwrap();
        let repeated = vec![(mmap(0x5000), 1), (sample(0x5000, true, 6), 3)];
        let got =
            unwind_repeated_samples(repeated, &l, &load(), &UnwindOptions::default()).unwrap();
        assert_eq!(got, expected);
        assert_eq!((got.1.samples_seen, got.1.total_samples), (3, 6));
    }

    /// An aggregator over `l` on `threads` threads, with the binary mapped at 0x5000.
    fn mapped_aggregator(l: &FakeLayout, threads: usize) -> Aggregator<'_> {
        let options = UnwindOptions {
            unwind_threads: threads,
            ..UnwindOptions::default()
        };
        let mut agg = Aggregator::new(l, load(), PerfContent::LbrStack, options).unwrap();
        let PerfEvent::SideBand(SideBandEvent::Mmap2(m)) = mmap(0x5000) else {
            unreachable!()
        };
        agg.feed_mmap(&m).unwrap();
        agg
    }

    /// [`loop_samples`] as samples.
    fn loop_sample_structs(n: u64) -> Vec<Sample> {
        loop_samples(n)
            .into_iter()
            .map(|e| match e {
                PerfEvent::Sample(s) => s,
                _ => unreachable!(),
            })
            .collect()
    }

    /// Two samples whose older range (0x1017 back to 0x1015, in foo) is no fall-through,
    /// each twice (counts 2 and 3, then 4 and 5); they differ in their leaf only, which
    /// preparing replaces with the newest branch target: one prepared sample.
    fn bogus_range_sample_structs() -> Vec<Sample> {
        let a = |x: u64| x - 0x1000 + 0x5000;
        let lbr = vec![
            LbrEntry {
                from: a(0x1015),
                to: a(0x1010),
                flags: 0,
            },
            LbrEntry {
                from: a(0x1009),
                to: a(0x1017),
                flags: 0,
            },
        ];
        let sample = |leaf: u64, count: u64| Sample {
            pid: 5,
            ip: a(leaf),
            callchain: vec![a(leaf), a(0x1009)],
            lbr: lbr.clone(),
            count,
            ..Sample::default()
        };
        vec![
            sample(0x1014, 2),
            sample(0x1004, 4),
            sample(0x1014, 3),
            sample(0x1004, 5),
        ]
    }

    /// Samples of foo's loop taken `n` times, each a distinct aggregated sample.
    fn loop_samples(n: u64) -> Vec<PerfEvent> {
        let a = |x: u64| x - 0x1000 + 0x5000;
        (1..=n)
            .map(|iterations| {
                let mut lbr = vec![
                    LbrEntry {
                        from: a(0x1015),
                        to: a(0x1010),
                        flags: 0,
                    };
                    iterations as usize
                ];
                lbr.push(LbrEntry {
                    from: a(0x1004),
                    to: a(0x1010),
                    flags: 0,
                });
                PerfEvent::Sample(Sample {
                    pid: 5,
                    ip: a(0x1014),
                    callchain: vec![a(0x1014), a(0x1009)],
                    lbr,
                    count: iterations,
                    ..Sample::default()
                })
            })
            .collect()
    }

    #[test]
    fn a_batch_prepares_each_distinct_sample_once_and_counts_like_one_by_one() {
        let l = layout(true);
        let as_sample = |e: PerfEvent| match e {
            PerfEvent::Sample(s) => s,
            _ => unreachable!(),
        };
        let distinct: Vec<Sample> = loop_samples(5).into_iter().map(as_sample).collect();
        // Repeats in any order; one differing only in its branch flags and time (the
        // same prepared sample), one only in its pid (another process), one with an
        // external leaf (counted as often as it occurs).
        let mut batch = Vec::new();
        for k in [0usize, 3, 0, 4, 3, 3, 1, 2, 0] {
            batch.push(distinct[k].clone());
        }
        let mut flagged = distinct[4].clone();
        flagged.lbr[0].flags = 0x35;
        flagged.time = 99;
        batch.push(flagged);
        let mut other = distinct[1].clone();
        other.pid = 6;
        batch.push(other);
        let mut external = distinct[2].clone();
        external.callchain[0] = 0x7fff_0000;
        batch.push(external.clone());
        batch.push(external);

        let options = UnwindOptions::default();
        let feed = |by_batch: bool| {
            let mut agg =
                Aggregator::new(&l, load(), PerfContent::LbrStack, options.clone()).unwrap();
            let PerfEvent::SideBand(SideBandEvent::Mmap2(m)) = mmap(0x5000) else {
                unreachable!()
            };
            agg.feed_mmap(&m).unwrap();
            if by_batch {
                agg.feed_batch(&batch).unwrap();
            } else {
                for s in &batch {
                    agg.feed_sample(s).unwrap();
                }
            }
            agg.finish()
        };
        let (one_by_one, batched) = (feed(false), feed(true));
        assert_eq!(batched, one_by_one);
        assert_eq!(batched.1.samples_seen, batch.len() as u64);
        assert_eq!(batched.1.leaf_external_frames, 2);
        // The five loop samples: the flagged one, the other process's and the external
        // leaf's (the leaf is replaced by the newest branch target) are repeats of
        // theirs once prepared.
        assert_eq!(batched.1.aggregated_samples, 5);
    }

    #[test]
    fn unwinding_on_threads_gives_the_same_counters_and_statistics() {
        let l = layout(true);
        let mut events = vec![mmap(0x5000)];
        events.extend(loop_samples(MIN_SAMPLES_PER_THREAD as u64 * 3));
        let serial =
            unwind_samples(events.clone(), &l, &load(), &UnwindOptions::default()).unwrap();
        let threaded = UnwindOptions {
            unwind_threads: 3,
            ..UnwindOptions::default()
        };
        let parallel = unwind_samples(events, &l, &load(), &threaded).unwrap();
        assert_eq!(parallel, serial);
        let loop_range = serial.0.contexts[&vec![0x1004]].ranges[&(0x1010, 0x1015)];
        // Sample k (count k) has k ranges through the loop body: k - 1 between its loop
        // branches and one from the call: Σ k².
        let n = MIN_SAMPLES_PER_THREAD as u64 * 3;
        assert_eq!(loop_range, (1..=n).map(|k| k * k).sum::<u64>());

        // With a pid filter, every fourth sample from another process: filtered on the
        // threads as on one.
        let mut events = vec![mmap(0x5000)];
        events.extend(loop_samples(n).into_iter().enumerate().map(|(i, mut e)| {
            if let (0, PerfEvent::Sample(s)) = (i % 4, &mut e) {
                s.pid = 9;
            }
            e
        }));
        let filtered = UnwindOptions {
            sample_pids: Some([5].into()),
            ..UnwindOptions::default()
        };
        let serial = unwind_samples(events.clone(), &l, &load(), &filtered).unwrap();
        let threaded = UnwindOptions {
            unwind_threads: 3,
            ..filtered
        };
        let parallel = unwind_samples(events, &l, &load(), &threaded).unwrap();
        assert_eq!(parallel, serial);
        assert_eq!(serial.1.filtered_by_pid, n.div_ceil(4));
        assert_eq!(serial.1.samples_seen, n - n.div_ceil(4));
    }

    #[test]
    fn feeding_in_parallel_counts_like_one_by_one_with_the_threads_states() {
        let l = layout(true);
        // Many parts (the last one short), aggregated while others are being prepared.
        let samples = loop_sample_structs(UNWIND_PART as u64 * 4 + 7);
        // Sample k stands for k occurrences; every seventh is "dropped by the reader".
        let occurrences = |i: usize| (i % 7 != 3).then_some(i as u64 + 1);
        let feed = |threads: usize, parallel: bool| {
            let mut agg = mapped_aggregator(&l, threads);
            let mut read_per_thread = Vec::new();
            if parallel {
                let states = agg
                    .feed_parallel(samples.len(), |i, read: &mut usize, out| {
                        *read += 1;
                        *out = samples[i].clone();
                        occurrences(i)
                    })
                    .unwrap();
                read_per_thread = states;
            } else {
                for (i, s) in samples.iter().enumerate() {
                    if let Some(n) = occurrences(i) {
                        agg.feed_sample_repeated(s, n).unwrap();
                    }
                }
            }
            (agg.finish(), read_per_thread)
        };
        let (one_by_one, _) = feed(1, false);
        for threads in [1, 2, 3] {
            let (parallel, read) = feed(threads, true);
            assert_eq!(parallel, one_by_one, "{threads} threads");
            assert_eq!(read.len(), threads);
            assert_eq!(read.iter().sum::<usize>(), samples.len());
        }
        let n = samples.len() as u64;
        let dropped: u64 = (0..n).filter(|i| i % 7 == 3).map(|i| i + 1).sum();
        assert_eq!(one_by_one.1.samples_seen, n * (n + 1) / 2 - dropped);
    }

    /// Counting as fed gives the counters and statistics of aggregating then flushing, on
    /// one thread or several, fed one by one or in parallel, with repeats of a prepared
    /// sample that arrive as other samples (they differ only in the call chain's leaf,
    /// which preparing replaces) and later, and an error names the lowest sample index.
    #[test]
    fn counting_as_fed_counts_like_aggregating_then_flushing() {
        let distinct = loop_sample_structs(UNWIND_PART as u64 + 40);
        let mut samples = distinct.clone();
        for (i, s) in distinct.iter().enumerate().step_by(3) {
            let mut repeat = s.clone();
            repeat.callchain[0] += 1 + i as u64 % 2;
            repeat.count = 7;
            samples.push(repeat);
        }
        // Repeats within the first batch too.
        samples.swap(5, distinct.len() + 1);
        let half = samples.len() / 2;
        for ignore_stack_samples in [false, true] {
            for probes in [true, false] {
                let l = layout(probes);
                for threads in [1, 2, 3] {
                    let options = UnwindOptions {
                        unwind_threads: threads,
                        ignore_stack_samples,
                        ..UnwindOptions::default()
                    };
                    let new = || {
                        let mut agg =
                            Aggregator::new(&l, load(), PerfContent::LbrStack, options.clone())
                                .unwrap();
                        let PerfEvent::SideBand(SideBandEvent::Mmap2(m)) = mmap(0x5000) else {
                            unreachable!()
                        };
                        agg.feed_mmap(&m).unwrap();
                        agg
                    };
                    let mut held = new();
                    held.feed_batch(&samples).unwrap();
                    let held = held.finish();
                    let mut as_fed = new().counting_as_fed();
                    for s in &samples[..half] {
                        as_fed.feed_sample(s).unwrap();
                    }
                    as_fed
                        .feed_parallel(samples.len() - half, |i, _: &mut (), out| {
                            out.clone_from(&samples[half + i]);
                            Some(1)
                        })
                        .unwrap();
                    let got = as_fed.finish();
                    let what =
                        format!("ignore {ignore_stack_samples} probes {probes} threads {threads}");
                    assert_eq!(got.0, held.0, "{what}");
                    assert_eq!(got.1, held.1, "{what}");
                    assert_eq!(got.1.aggregated_samples, distinct.len() as u64, "{what}");
                    if !ignore_stack_samples {
                        // Every loop sample has its own branch count, counted once.
                        let branches: u64 = distinct.iter().map(|s| s.lbr.len() as u64).sum();
                        assert_eq!(got.1.total_branches, branches, "{what}");
                    }

                    // Flushed in two halves: the counters sum to the one flush's.
                    let mut as_fed = new().counting_as_fed();
                    as_fed.feed_batch(&samples[..half]).unwrap();
                    let mut merged = as_fed.flush();
                    as_fed.feed_batch(&samples[half..]).unwrap();
                    merged.merge(&as_fed.flush());
                    assert_eq!(merged, held.0, "{what}");
                    assert_eq!(as_fed.stats().total_branches, held.1.total_branches);

                    // An error: the lowest sample index, whichever thread met it first.
                    let mut as_fed = new().counting_as_fed();
                    feed_with_lbr_less_samples(&mut as_fed, &distinct, &what);
                }
            }
        }
    }

    /// The range tally sums loops in a sample before its map: the sums equal counting
    /// every pair of consecutive entries one by one.
    #[test]
    fn range_tally_counts_every_pair_of_entries() {
        let br = |source, target| crate::sample_prep::Branch { source, target };
        // A two-branch loop, a third branch, the loop again, a one-branch loop.
        let lbr = [
            (1, 2),
            (3, 4),
            (1, 2),
            (3, 4),
            (1, 2),
            (5, 6),
            (1, 2),
            (3, 4),
            (7, 8),
            (7, 8),
            (7, 8),
        ]
        .map(|(s, t)| br(s, t))
        .to_vec();
        let samples = [
            (
                PerfSample {
                    call_stack: vec![],
                    lbr: lbr.clone(),
                },
                3,
            ),
            (
                PerfSample {
                    call_stack: vec![],
                    lbr: lbr[..2].to_vec(),
                },
                u64::MAX,
            ),
            (
                PerfSample {
                    call_stack: vec![],
                    lbr: lbr[..1].to_vec(),
                },
                1,
            ),
        ];
        let mut tally = RangeTally::default();
        let mut naive: HashMap<(u64, u64), u64> = HashMap::new();
        for (sample, count) in &samples {
            tally.add(sample, *count);
            for pair in sample.lbr.windows(2) {
                let n = naive.entry((pair[1].target, pair[0].source)).or_insert(0);
                *n = n.wrapping_add(*count);
            }
        }
        assert!(tally.any_sample);
        tally.sums.flush_into(&mut tally.ranges);
        let got: HashMap<(u64, u64), u64> = tally.ranges.into_iter().collect();
        assert_eq!(got, naive);
        assert_eq!(
            got[&(4, 1)],
            8,
            "3 loop turns of 3, plus u64::MAX: wraps like the counters"
        );
        assert_eq!(got[&(8, 7)], 3 * 2);
    }

    /// The samples [`feed_with_lbr_less_samples`] feeds without their LBR: one in the
    /// second part, one in the third.
    const LBR_LESS_AT: [usize; 2] = [UNWIND_PART + 5, 2 * UNWIND_PART + 1];

    /// Feeds `agg` three parts of `good` samples in turn, those at [`LBR_LESS_AT`] with
    /// their LBR cleared, and checks that the feed fails on the first of them (the lowest
    /// index, whichever thread met it first).
    fn feed_with_lbr_less_samples(agg: &mut Aggregator, good: &[Sample], what: &str) {
        let err = agg.feed_parallel(3 * UNWIND_PART, |i, _: &mut (), out| {
            out.clone_from(&good[i % good.len()]);
            if LBR_LESS_AT.contains(&i) {
                out.lbr.clear();
            }
            Some(1)
        });
        assert_eq!(
            err.unwrap_err(),
            UnwindError::HybridSampleWithoutLbr {
                sample_index: LBR_LESS_AT[0] as u64
            },
            "{what}"
        );
    }

    /// An error in a later part stops the feed there, whichever thread prepared that part
    /// first, and names the sample's index among all.
    #[test]
    fn feeding_in_parallel_stops_at_the_first_error_in_index_order() {
        let l = layout(true);
        let good = loop_sample_structs(4);
        for threads in [1, 2, 3] {
            let mut agg = mapped_aggregator(&l, threads);
            feed_with_lbr_less_samples(&mut agg, &good, &format!("{threads} threads"));
            // The samples up to the failing one are seen, none after it.
            assert_eq!(
                agg.stats().samples_seen,
                LBR_LESS_AT[0] as u64 + 1,
                "{threads} threads"
            );
        }
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

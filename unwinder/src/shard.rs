//! [`BinaryShard`]: the live aggregate of one binary (one build id), owned by exactly one
//! worker thread, so the hot path takes no lock.
//!
//! Samples arrive per process, with that process's mappings of the binary: the placement
//! is rebuilt from those MMAP2 events for each group (processes of the same binary load it
//! at different bases), exactly as llvm-profgen rebases on each MMAP2 event it reads.
//!
//! * Branch-stack samples are held from group to group, tallied (each distinct sample
//!   once, with its occurrences: [`crate::held_samples`]), and counted through the
//!   [`Aggregator`] (the code `convert` runs) when a group comes from a process that maps
//!   the binary elsewhere, falls in another window, or the held samples pass their bound;
//!   the counters are summed in the counter table the shard keeps, and reach their window
//!   when the shard is settled ([`BinaryShard::settle`]: before every read of the windows,
//!   when the next group falls in another window, when the table holds too much; held
//!   samples are counted first). Flushes merge, so the sum equals one conversion of all
//!   the samples.
//! * cpu-clock samples are counted by [`count_leading_ip`].
//!
//! Limits: at most `max_samples_per_window` samples per window (the rest are counted as
//! over budget and dropped).

use std::sync::Arc;

use collector::{Mmap2Event, Sample};

use crate::held_samples::HeldSamples;
use crate::leading_ip::{count_leading_ip, leading_ip_kind, LeadingIpOutcome};
use crate::sample_tally::SampleTally;
use crate::window::{WindowSettings, WindowedCounters};
use crate::{
    Aggregator, BinaryLoadInfo, BinaryPlacement, CodeLayout, CounterKind, CounterSet, KeptCounting,
    PerfContent, UnwindError, UnwindOptions, UnwindStats,
};

/// What the shard's samples carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardInput {
    /// LBR (+ call stack when `Lbr(PerfContent::LbrStack)`): the virtual unwinder.
    Lbr(PerfContent),
    /// No branch stack: leading IP + call stack (`has_callchain` false: flat).
    LeadingIp {
        /// Samples carry call chains.
        has_callchain: bool,
    },
}

/// Counters of what the shard did with its samples.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardStats {
    /// Samples offered.
    pub offered: u64,
    /// Samples counted.
    pub counted: u64,
    /// Leading-IP samples whose IP was not an instruction of the binary.
    pub not_code: u64,
    /// Samples whose stack was rejected (or LBR samples dropped by the unwinder).
    pub bad_stack: u64,
    /// Samples refused by the per-window sample budget.
    pub over_budget: u64,
    /// Samples whose call chain missed the leaf's caller and got it back from their
    /// registers ([`UnwindOptions::stack_repair`]); counted.
    pub repaired_stacks: u64,
    /// Samples whose call chain missed the leaf's caller and could not be repaired; also
    /// in `bad_stack`.
    pub unrepairable_stacks: u64,
    /// The unwinder's statistics (LBR mode).
    pub unwind: UnwindStats,
}

/// The reasons [`ShardStats::errors_by_reason`] reports, in its order: a bounded label set
/// for metrics.
pub const UNWIND_ERROR_REASONS: [&str; 9] = [
    "ip_not_code",
    "bad_stack",
    "dropped_stack_sample",
    "dropped_empty_lbr",
    "bogus_trace",
    "leaf_external_frame",
    "mismatched_external_call",
    "mismatched_prolog_epilog_call",
    "bogus_range",
];

/// The outcomes [`ShardStats::stack_repairs`] reports, in its order: a bounded label set
/// for metrics.
pub const STACK_REPAIR_OUTCOMES: [&str; 2] = ["repaired", "unrepairable"];

impl ShardStats {
    /// Samples taken in a prologue or epilogue, by repair outcome
    /// ([`STACK_REPAIR_OUTCOMES`]), since the shard was made.
    pub fn stack_repairs(&self) -> [(&'static str, u64); 2] {
        [
            (STACK_REPAIR_OUTCOMES[0], self.repaired_stacks),
            (STACK_REPAIR_OUTCOMES[1], self.unrepairable_stacks),
        ]
    }

    /// Samples (or, for the range reasons, range samples) the shard could not use fully,
    /// by reason ([`UNWIND_ERROR_REASONS`]); each is a count since the shard was made.
    pub fn errors_by_reason(&self) -> [(&'static str, u64); 9] {
        let u = &self.unwind;
        let counts = [
            self.not_code,
            self.bad_stack,
            u.dropped_stack_samples,
            u.dropped_empty_lbr_samples,
            u.bogus_traces,
            u.leaf_external_frames,
            u.mismatched_ext_call_branches,
            u.mismatched_prolog_epilog_branches,
            u.bogus_ranges,
        ];
        let mut out = [("", 0u64); 9];
        for (i, (r, c)) in UNWIND_ERROR_REASONS.iter().zip(counts).enumerate() {
            out[i] = (r, c);
        }
        out
    }
}

/// The live aggregate of one binary.
pub struct BinaryShard {
    layout: Arc<dyn CodeLayout + Send + Sync>,
    load: BinaryLoadInfo,
    input: ShardInput,
    options: UnwindOptions,
    windows: WindowedCounters,
    max_samples_per_window: Option<u64>,
    stats: ShardStats,
    /// What counting keeps from one feed to the next, the counters not yet settled
    /// included.
    kept: KeptCounting,
    /// The window start and number of the samples whose counters are in `kept`'s table,
    /// not yet in a window.
    unsettled: Option<(u64, u64)>,
    /// LBR samples fed and not yet counted.
    held: Option<HeldSamples>,
}

impl BinaryShard {
    /// A shard for the binary described by `layout` and `load`.
    pub fn new(
        layout: Arc<dyn CodeLayout + Send + Sync>,
        load: BinaryLoadInfo,
        input: ShardInput,
        options: UnwindOptions,
        windows: WindowSettings,
        max_samples_per_window: Option<u64>,
    ) -> Result<BinaryShard, UnwindError> {
        // Validates the load description once.
        BinaryPlacement::new(load.clone(), None)?;
        let kind = match input {
            ShardInput::LeadingIp { has_callchain } => {
                leading_ip_kind(&*layout, &options, has_callchain)
            }
            ShardInput::Lbr(content) => {
                if content == PerfContent::Lbr || options.ignore_stack_samples {
                    CounterKind::Flat
                } else if layout.has_pseudo_probes() {
                    CounterKind::ProbeContext
                } else {
                    CounterKind::LineContext
                }
            }
        };
        Ok(BinaryShard {
            layout,
            load,
            input,
            options,
            windows: WindowedCounters::new(kind, windows),
            max_samples_per_window,
            stats: ShardStats::default(),
            kept: KeptCounting::default(),
            unsettled: None,
            held: None,
        })
    }

    /// What the counters' keys mean.
    pub fn kind(&self) -> CounterKind {
        self.windows.kind()
    }

    /// The statistics so far.
    pub fn stats(&self) -> &ShardStats {
        &self.stats
    }

    /// The windows as last settled ([`BinaryShard::settle`]): a reader settles first.
    pub fn windows(&self) -> &WindowedCounters {
        &self.windows
    }

    /// The windows, mutable: restoring persisted windows, evicting contexts (settled
    /// first).
    pub fn windows_mut(&mut self) -> &mut WindowedCounters {
        self.settle();
        &mut self.windows
    }

    /// Counts the held samples and adds the counters counted since the last settling to
    /// their window, with their samples: the windows then hold everything fed.
    pub fn settle(&mut self) {
        self.count_held();
        self.settle_counters();
    }

    /// Adds the counters in the kept table to their window.
    fn settle_counters(&mut self) {
        if let Some((start, samples)) = self.unsettled.take() {
            let counters = self.kept.take_counters(&*self.layout);
            self.stats.unwind.contexts += counters.contexts.len() as u64;
            self.windows.add(start, &counters, samples);
        }
    }

    /// A rough size in bytes of the counters held, settled or not (for the memory
    /// budget).
    pub fn approx_bytes(&self) -> usize {
        self.windows.approx_bytes()
            + self.kept.approx_counter_bytes()
            + self.held.as_ref().map_or(0, |h| h.tally.approx_bytes())
    }

    /// Takes over the windows and statistics of `old`, a shard of the same binary
    /// described by another layout (loaded again once its debug file arrived): this
    /// shard counts on where `old` stopped. `Err(old)`, unchanged, when the two count
    /// different kinds of counters.
    pub fn adopt(&mut self, mut old: BinaryShard) -> Result<(), Box<BinaryShard>> {
        if old.kind() != self.kind() {
            return Err(Box::new(old));
        }
        // This shard's own unsettled counters stay in its table and settle into the
        // adopted windows.
        old.settle();
        self.windows = old.windows;
        self.stats = old.stats;
        Ok(())
    }

    /// Every retained window merged, and the samples they hold (as last settled).
    pub fn snapshot(&self) -> (CounterSet, u64) {
        self.windows.merged()
    }

    /// Drops windows past retention (settled first).
    pub fn expire(&mut self, now_secs: u64) {
        self.settle();
        self.windows.expire(now_secs);
    }

    /// Feeds the samples of one process, whose mappings of this binary are `mappings`
    /// (MMAP2 events, any order), at time `now_secs`. LBR samples are held
    /// ([`crate::held_samples`]) and counted when the shard is settled, when a feed comes
    /// from a process that maps the binary elsewhere or falls in another window, or past
    /// the bound; the statistics of counting ([`ShardStats::counted`] and the reasons
    /// samples were not) are those of the samples counted so far.
    pub fn feed(
        &mut self,
        mappings: &[Mmap2Event],
        samples: &[Sample],
        now_secs: u64,
    ) -> Result<(), UnwindError> {
        self.stats.offered += samples.len() as u64;
        let window = self.windows.window_start(now_secs);
        if self.unsettled.is_some_and(|(start, _)| start != window)
            || self.held.as_ref().is_some_and(|h| h.window != window)
        {
            self.settle();
        }
        let mut samples = samples;
        if let Some(max) = self.max_samples_per_window {
            let unsettled = self.unsettled.map_or(0, |(_, n)| n);
            let held_samples = self.held.as_ref().map_or(0, |h| h.tally.occurrences());
            let held = self.windows.samples_in_window(now_secs) + unsettled + held_samples;
            let room = max.saturating_sub(held) as usize;
            if samples.len() > room {
                self.stats.over_budget += (samples.len() - room) as u64;
                samples = &samples[..room];
            }
        }
        if samples.is_empty() {
            return Ok(());
        }
        let mut sorted: Vec<&Mmap2Event> = mappings.iter().collect();
        sorted.sort_by_key(|m| m.pgoff);
        match self.input {
            ShardInput::Lbr(content) => self.hold(content, &sorted, samples, window),
            ShardInput::LeadingIp { .. } => {
                let mut placement = BinaryPlacement::new(self.load.clone(), None)?;
                for m in sorted {
                    let _ = placement.observe(m);
                }
                let mut counters = CounterSet::new(self.windows.kind());
                let mut n = 0;
                for s in samples {
                    match count_leading_ip(
                        s,
                        &placement,
                        &*self.layout,
                        &self.options,
                        &mut counters,
                    ) {
                        LeadingIpOutcome::Counted => n += 1,
                        LeadingIpOutcome::Repaired => {
                            n += 1;
                            self.stats.repaired_stacks += 1;
                        }
                        LeadingIpOutcome::NotCode => self.stats.not_code += 1,
                        LeadingIpOutcome::BadStack => self.stats.bad_stack += 1,
                        LeadingIpOutcome::Unrepairable => {
                            self.stats.bad_stack += 1;
                            self.stats.unrepairable_stacks += 1;
                        }
                    }
                }
                self.stats.counted += n;
                self.windows.add(now_secs, &counters, n);
                Ok(())
            }
        }
    }

    /// Holds LBR samples of one process whose mappings are `sorted` (by file offset), in
    /// `window`: the held samples of other mappings are counted first.
    fn hold(
        &mut self,
        content: PerfContent,
        sorted: &[&Mmap2Event],
        samples: &[Sample],
        window: u64,
    ) -> Result<(), UnwindError> {
        let by_process = self.options.tallies_by_process();
        if self
            .held
            .as_ref()
            .is_some_and(|h| !h.placed_alike(sorted, by_process))
        {
            self.count_held();
        }
        let held = match &mut self.held {
            Some(held) => held,
            None => {
                let mut placement = BinaryPlacement::new(self.load.clone(), self.options.pid)?;
                for m in sorted {
                    // A mapping inconsistent with the others is ignored, as a broken
                    // MMAP2 stream would be.
                    let _ = placement.observe(m);
                }
                // Room for the words of the samples held up to their bound, and of a
                // feed of new samples past it (the bound is checked after each feed).
                self.held.insert(HeldSamples {
                    window,
                    mappings: sorted.iter().map(|&m| m.clone()).collect(),
                    placement,
                    tally: SampleTally::with_capacity(
                        by_process,
                        crate::held_samples::HELD_ENTRY_ROOM,
                    )
                    .with_word_room(crate::held_samples::MAX_HELD_BYTES / 8 + (1 << 16)),
                })
            }
        };
        let repair = self.options.repairs_stacks(content);
        let stats = &mut self.stats;
        let keep = |s: &Sample| {
            if content == PerfContent::LbrStack && s.lbr.is_empty() {
                // A hybrid sample without its branch stack: nothing to unwind.
                stats.bad_stack += 1;
                stats.unwind.dropped_empty_lbr_samples += 1;
                return false;
            }
            true
        };
        held.tally
            .add_all_placed(samples, keep, repair, &held.placement, &*self.layout);
        if held.is_full() {
            self.count_held();
        }
        Ok(())
    }

    /// Counts the held samples: into the kept counter table (settled later), or into
    /// their window when the aggregator hands the counters back.
    fn count_held(&mut self) {
        let Some(held) = self.held.take() else {
            return;
        };
        let ShardInput::Lbr(content) = self.input else {
            return;
        };
        if held.tally.is_empty() {
            return;
        }
        let samples = held.tally.occurrences();
        let agg = Aggregator::with_placement(
            &*self.layout,
            held.placement,
            content,
            self.options.clone(),
        );
        let (counters, stats) = agg.count_tally_kept(&held.tally, &mut self.kept);
        let dropped = stats.dropped_stack_samples + stats.dropped_empty_lbr_samples;
        self.stats.bad_stack += dropped;
        self.stats.repaired_stacks += stats.repaired_stacks;
        self.stats.unrepairable_stacks += stats.unrepairable_stacks;
        self.stats.unwind.merge(&stats);
        let counted = samples - dropped.min(samples);
        self.stats.counted += counted;
        match counters {
            Some(counters) => self.windows.add(held.window, &counters, counted),
            None => {
                self.unsettled.get_or_insert((held.window, 0)).1 += counted;
                if self.kept.holds_too_much() {
                    self.settle_counters();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{fake_load as load, FakeLayout, Inst};

    fn layout() -> Arc<dyn CodeLayout + Send + Sync> {
        Arc::new(
            FakeLayout::new(
                &[
                    (0x1000, Inst::Other),
                    (0x1001, Inst::Other),
                    (0x1004, Inst::Call),
                    (0x1009, Inst::Other),
                    (0x100d, Inst::Return),
                ],
                &[0x1000],
            )
            .with_probes(true),
        )
    }

    fn mmap(pid: i32, addr: u64) -> Mmap2Event {
        Mmap2Event {
            pid,
            addr,
            pgoff: 0,
            prot: 5,
            filename: "/bin/p".into(),
            ..Default::default()
        }
    }

    #[test]
    fn two_processes_at_different_bases_land_on_the_same_address() {
        let mut s = BinaryShard::new(
            layout(),
            load(),
            ShardInput::LeadingIp {
                has_callchain: false,
            },
            UnwindOptions::default(),
            WindowSettings::default(),
            Some(3),
        )
        .unwrap();
        let at = |ip| Sample {
            ip,
            count: 1,
            ..Sample::default()
        };
        s.feed(&[mmap(1, 0x5000)], &[at(0x5004), at(0x5009)], 0)
            .unwrap();
        s.feed(&[mmap(2, 0x9000)], &[at(0x9004), at(0x9777)], 1)
            .unwrap();
        let (c, n) = s.snapshot();
        assert_eq!(n, 3);
        assert_eq!(c.contexts[&vec![]].ranges[&(0x1004, 0x1004)], 2);
        assert_eq!(c.contexts[&vec![]].ranges[&(0x1009, 0x1009)], 1);
        // The budget of 3 per window let one sample of the second group through (0x9004);
        // the second was refused.
        assert_eq!(
            (s.stats().offered, s.stats().over_budget, s.stats().not_code),
            (4, 1, 0)
        );
    }

    #[test]
    fn adopted_counts_go_on_in_the_new_shard_and_another_kind_is_refused() {
        let shard = |layout, has_callchain| {
            BinaryShard::new(
                layout,
                load(),
                ShardInput::LeadingIp { has_callchain },
                UnwindOptions::default(),
                WindowSettings::default(),
                None,
            )
            .unwrap()
        };
        let at = |ip| Sample {
            ip,
            count: 1,
            ..Sample::default()
        };
        let mut old = shard(layout(), false);
        old.feed(&[mmap(1, 0x5000)], &[at(0x5004), at(0x5777)], 0)
            .unwrap();
        let mut fresh = shard(layout(), false);
        fresh.adopt(old).map_err(|_| "same kind").unwrap();
        fresh
            .feed(&[mmap(1, 0x5000)], &[at(0x5004), at(0x5009)], 1)
            .unwrap();
        let (c, n) = fresh.snapshot();
        assert_eq!(n, 3);
        assert_eq!(c.contexts[&vec![]].ranges[&(0x1004, 0x1004)], 2);
        assert_eq!(c.contexts[&vec![]].ranges[&(0x1009, 0x1009)], 1);
        assert_eq!((fresh.stats().offered, fresh.stats().not_code), (4, 1));

        // A line-table layout counts line contexts, not probe contexts: refused, and
        // handed back with its counts.
        let line_layout: Arc<dyn CodeLayout + Send + Sync> = Arc::new(FakeLayout::new(
            &[(0x1000, Inst::Other), (0x1004, Inst::Other)],
            &[0x1000],
        ));
        let mut line = shard(line_layout, true);
        let probe = shard(layout(), true);
        assert_ne!(line.kind(), probe.kind());
        let refused = line.adopt(fresh).expect_err("another kind");
        assert_eq!(refused.snapshot().1, 3);
        assert!(line.adopt(probe).is_err());
    }

    /// One conversion of `main_calls_foo`'s hybrid samples, each group placed by the
    /// mapping before it.
    fn converted(layout: &dyn CodeLayout, groups: &[(&Mmap2Event, &[Sample])]) -> CounterSet {
        use crate::test_support::main_calls_foo_load;
        let mut agg = Aggregator::new(
            layout,
            main_calls_foo_load(),
            PerfContent::LbrStack,
            UnwindOptions::default(),
        )
        .unwrap();
        for (map, samples) in groups {
            agg.feed_mmap(map).unwrap();
            agg.feed_batch(samples).unwrap();
        }
        agg.finish().0
    }

    /// LBR groups leave their counters unsettled until the windows are read, the next
    /// group falls in another window, or the windows expire; settled, each window holds
    /// what one conversion of its samples gives, and the per-window budget counts the
    /// unsettled samples.
    #[test]
    fn lbr_counters_settle_into_their_windows() {
        use crate::test_support::{main_calls_foo, main_calls_foo_load};
        use collector::LbrEntry;
        let layout: Arc<dyn CodeLayout + Send + Sync> =
            Arc::new(main_calls_foo().with_probes(true));
        let map = Mmap2Event {
            pid: 5,
            addr: 0x5000,
            pgoff: 0x1000,
            prot: 5,
            filename: "/bin/prog".into(),
            ..Default::default()
        };
        // foo's loop taken `n` times, called from main: a distinct sample per `n`.
        let a = |x: u64| x - 0x1000 + 0x5000;
        let looped = |n: usize| {
            let taken = LbrEntry {
                from: a(0x1015),
                to: a(0x1010),
                flags: 0,
            };
            let mut lbr = vec![taken; n];
            lbr.push(LbrEntry {
                from: a(0x1004),
                to: a(0x1010),
                flags: 0,
            });
            Sample {
                pid: 5,
                ip: a(0x1014),
                callchain: vec![a(0x1014), a(0x1009)],
                lbr,
                count: 1,
                ..Sample::default()
            }
        };
        let converted = |samples: &[Sample]| converted(&*layout, &[(&map, samples)]);
        let mut shard = BinaryShard::new(
            layout.clone(),
            main_calls_foo_load(),
            ShardInput::Lbr(PerfContent::LbrStack),
            UnwindOptions::default(),
            WindowSettings {
                window_secs: 10,
                retained_windows: 3,
            },
            Some(5),
        )
        .unwrap();
        let maps = std::slice::from_ref(&map);
        let first: Vec<Sample> = (1..=3).map(looped).collect();
        let second: Vec<Sample> = (2..=4).map(looped).collect();
        shard.feed(maps, &first, 1).unwrap();
        // Two of the second group's three fit the window's budget of five.
        shard.feed(maps, &second, 2).unwrap();
        assert!(shard
            .held
            .as_ref()
            .is_some_and(|h| h.tally.occurrences() == 5));
        // The repeats of the second group were held with the first's: three distinct.
        assert_eq!(shard.held.as_ref().map(|h| h.tally.len()), Some(3));
        assert_eq!(shard.windows().windows().count(), 0);
        assert_eq!(shard.stats().over_budget, 1);
        // The next window's group settles the first window's counters.
        let third: Vec<Sample> = (5..=6).map(looped).collect();
        shard.feed(maps, &third, 12).unwrap();
        let settled: Vec<(u64, u64)> = shard
            .windows()
            .windows()
            .map(|w| (w.start_secs, w.samples))
            .collect();
        assert_eq!(settled, vec![(0, 5)]);
        let in_first = [first, second[..2].to_vec()].concat();
        assert_eq!(
            shard.windows().windows().next().unwrap().counters,
            converted(&in_first)
        );
        shard.settle();
        assert!(shard.unsettled.is_none() && shard.held.is_none());
        let windows: Vec<&crate::window::Window> = shard.windows().windows().collect();
        assert_eq!((windows[1].start_secs, windows[1].samples), (10, 2));
        assert_eq!(windows[1].counters, converted(&third));
        assert_eq!(shard.snapshot().0, converted(&[in_first, third].concat()));
        // Expiring settles first: a group fed, then the windows expired, keeps its counts.
        shard.feed(maps, &[looped(7)], 13).unwrap();
        assert!(shard.held.is_some());
        shard.expire(25);
        assert!(shard.unsettled.is_none() && shard.held.is_none());
        assert_eq!(shard.windows().samples(), 8);
    }

    /// LBR samples repeated over feeds are held and counted once with their occurrences;
    /// a feed from a process that maps the binary elsewhere counts the held ones first;
    /// the counters equal one conversion of every sample, each placed by its process's
    /// mappings. A hybrid sample without branches is counted as dropped, not lost.
    #[test]
    fn held_samples_count_once_across_feeds_and_placements() {
        for probes in [true, false] {
            held_samples_count_once(probes);
        }
    }

    /// [`held_samples_count_once_across_feeds_and_placements`] with probe contexts, or
    /// line contexts of a layout without inline frames (counted by address, expanded when
    /// settled).
    fn held_samples_count_once(probes: bool) {
        use crate::test_support::{main_calls_foo, main_calls_foo_load};
        use collector::LbrEntry;
        let layout: Arc<dyn CodeLayout + Send + Sync> =
            Arc::new(main_calls_foo().with_probes(probes));
        let map = |pid: i32, addr: u64| Mmap2Event {
            pid,
            addr,
            pgoff: 0x1000,
            prot: 5,
            filename: "/bin/prog".into(),
            ..Default::default()
        };
        let looped = |pid: u32, base: u64, n: usize| {
            let a = |x: u64| x - 0x1000 + base;
            let taken = LbrEntry {
                from: a(0x1015),
                to: a(0x1010),
                flags: n as u64 * 16,
            };
            let mut lbr = vec![taken; n % 3 + 1];
            lbr.push(LbrEntry {
                from: a(0x1004),
                to: a(0x1010),
                flags: 0,
            });
            Sample {
                pid,
                ip: a(0x1014),
                callchain: vec![a(0x1014), a(0x1009)],
                lbr,
                count: 1,
                ..Sample::default()
            }
        };
        let (map5, map6) = (map(5, 0x5000), map(6, 0x9000));
        let feeds: Vec<Vec<Sample>> = (0..4)
            .map(|k| (0..6).map(|n| looped(5, 0x5000, n + k)).collect())
            .collect();
        let mut shard = BinaryShard::new(
            layout.clone(),
            main_calls_foo_load(),
            ShardInput::Lbr(PerfContent::LbrStack),
            UnwindOptions::default(),
            WindowSettings::default(),
            None,
        )
        .unwrap();
        for feed in &feeds {
            shard.feed(std::slice::from_ref(&map5), feed, 1).unwrap();
        }
        assert_eq!(shard.held.as_ref().map(|h| h.tally.len()), Some(3));
        assert_eq!(shard.stats().counted, 0);
        let other: Vec<Sample> = (0..5).map(|n| looped(6, 0x9000, n)).collect();
        let mut no_branches = looped(6, 0x9000, 0);
        no_branches.lbr.clear();
        let with_dropped = [other.clone(), vec![no_branches]].concat();
        shard
            .feed(std::slice::from_ref(&map6), &with_dropped, 2)
            .unwrap();
        // pid 5's 24 samples were counted, as three distinct ones.
        assert_eq!(shard.stats().counted, 24);
        assert_eq!(shard.stats().unwind.aggregated_samples, 3);
        assert_eq!(shard.stats().bad_stack, 1);
        assert_eq!(shard.stats().unwind.dropped_empty_lbr_samples, 1);
        shard.settle();
        assert_eq!(shard.stats().counted, 29);
        let all = converted(&*layout, &[(&map5, &feeds.concat()), (&map6, &other)]);
        assert_eq!(shard.kind() == CounterKind::LineContext, !probes);
        assert_eq!(shard.snapshot(), (all, 29), "probes {probes}");
    }

    #[test]
    fn errors_by_reason_names_each_counter() {
        let mut s = ShardStats {
            not_code: 3,
            bad_stack: 4,
            ..ShardStats::default()
        };
        s.unwind.bogus_traces = 5;
        s.unwind.bogus_ranges = 7;
        let e = s.errors_by_reason();
        assert_eq!(e[0], ("ip_not_code", 3));
        assert_eq!(e[1], ("bad_stack", 4));
        assert_eq!(e[4], ("bogus_trace", 5));
        assert_eq!(e[8], ("bogus_range", 7));
        assert_eq!(e.iter().map(|(_, c)| c).sum::<u64>(), 19);
    }
}

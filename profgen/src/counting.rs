//! Counting samples: LBR samples unwound into range and branch counters (from a perf
//! script's tally of distinct samples or a stream of perf.data events), stack samples
//! counted by leading IP, and the warnings and notes of the count.

use std::path::Path;

use collector::perf_data::PerfDataError;
use collector::perf_script::{
    PerfScriptError, PerfScriptStats, ScriptPiece, ScriptTally, ScriptText, StackOnlyReader,
};
use collector::PerfEvent;
use symbolizer::generate::cs::expand_line_context;
use symbolizer::profile::SampleContext;
use symbolizer::ProfiledBinary;
use unwinder::{
    Aggregator, BinaryLoadInfo, CodeLayout, CounterKind, CounterSet, PerfContent, UnwindOptions,
};

use crate::samples::print_mmap_event;
use crate::ConvertError;

/// Distinct sample texts parsed, prepared and aggregated at a time.
const FEED_BATCH: usize = 1 << 16;

/// The counters of a perf script's samples, with what unwinding counted and what reading and
/// parsing skipped.
pub(crate) type ScriptCounters = (CounterSet, unwinder::UnwindStats, PerfScriptStats);

/// Unwinds the distinct samples of the tallies of a perf script's parts, in input order
/// ([`collector::perf_script::tally_script_parts`]): each part's samples are parsed, prepared
/// and aggregated on the threads of `options` (what [`unwinder::unwind_repeated_samples`]
/// does with the samples in order, without holding them parsed), then the part is dropped
/// and the next one read. The first error of the script's reading is the one reported
/// (after an unwinding error too, the rest of the script is read for one), as when the
/// script was read whole first; an unwinding error names `path`.
pub(crate) fn unwind_tallies(
    mut parts: impl Iterator<Item = Result<ScriptTally, PerfScriptError>>,
    layout: &dyn CodeLayout,
    load: &BinaryLoadInfo,
    options: &UnwindOptions,
    show_mmap_events: bool,
    path: &Path,
) -> Result<ScriptCounters, ConvertError> {
    match unwind_parts(&mut parts, layout, load, options, show_mmap_events) {
        Ok(counted) => Ok(counted),
        Err(PartsStop::Read(e)) => Err(e.into()),
        Err(PartsStop::Unwind(source)) => match parts.find_map(Result::err) {
            Some(e) => Err(e.into()),
            None => Err(ConvertError::Unwind {
                path: path.to_path_buf(),
                source,
            }),
        },
    }
}

/// Why [`unwind_parts`] stopped.
enum PartsStop {
    Read(PerfScriptError),
    Unwind(unwinder::UnwindError),
}

impl From<unwinder::UnwindError> for PartsStop {
    fn from(e: unwinder::UnwindError) -> PartsStop {
        PartsStop::Unwind(e)
    }
}

/// [`unwind_tallies`] up to the first error.
///
/// The parts are held until one tells the samples' content (the first sample with a branch
/// stack, when `options` does not say): the aggregator needs it from the first sample on.
/// The aggregator counts each sample as it is prepared
/// ([`Aggregator::counting_as_fed`]), so a part is dropped once fed: what is held is one
/// part's samples, the counters, and a fingerprint per distinct prepared sample.
fn unwind_parts(
    parts: &mut impl Iterator<Item = Result<ScriptTally, PerfScriptError>>,
    layout: &dyn CodeLayout,
    load: &BinaryLoadInfo,
    options: &UnwindOptions,
    show_mmap_events: bool,
) -> Result<ScriptCounters, PartsStop> {
    // What reading skipped, then what parsing each distinct text drops (times its
    // occurrences).
    let mut script_stats = PerfScriptStats::default();
    let mut waiting: Vec<ScriptTally> = Vec::new();
    let mut agg = None;
    for part in parts {
        let tally = part.map_err(PartsStop::Read)?;
        script_stats.add(&tally.stats);
        waiting.push(tally);
        if agg.is_none() {
            match options.content.or_else(|| content_of(&waiting)) {
                Some(content) => {
                    agg = Some(
                        Aggregator::new(layout, load.clone(), content, options.clone())?
                            .counting_as_fed(),
                    )
                }
                None => continue,
            }
        }
        if let Some(agg) = &mut agg {
            for tally in waiting.drain(..) {
                feed_tally(agg, &tally, show_mmap_events, &mut script_stats)?;
            }
        }
    }
    let agg = agg.ok_or(unwinder::UnwindError::NoLbrSamples)?;
    let (counters, stats) = agg.finish();
    Ok((counters, stats, script_stats))
}

/// What the first sample with a branch stack of `tallies` tells of their content (it is
/// parsed here once more below).
fn content_of(tallies: &[ScriptTally]) -> Option<PerfContent> {
    tallies.iter().find_map(|tally| {
        tally.pieces.iter().find_map(|piece| {
            let ScriptPiece::Texts(texts) = piece else {
                return None;
            };
            let mut stats = PerfScriptStats::default();
            (0..texts.len()).find_map(|i| {
                let t = texts.sample(i, &mut stats)?;
                PerfContent::detect(std::iter::once(&PerfEvent::Sample(t.sample)))
            })
        })
    })
}

/// Feeds the pieces of `tally` to `agg`, in order: MMAP events (shown with
/// `show_mmap_events`), and each distinct sample parsed, prepared and aggregated on the
/// aggregator's threads; what parsing drops is added to `script_stats`.
fn feed_tally(
    agg: &mut Aggregator<'_>,
    tally: &ScriptTally,
    show_mmap_events: bool,
    script_stats: &mut PerfScriptStats,
) -> Result<(), unwinder::UnwindError> {
    for piece in &tally.pieces {
        match piece {
            ScriptPiece::Mmap(m) => {
                if show_mmap_events {
                    print_mmap_event(m);
                }
                agg.feed_mmap(m)?
            }
            ScriptPiece::Texts(texts) => {
                // In batches: the threads hold their prepared samples until the batch is
                // aggregated.
                for start in (0..texts.len()).step_by(FEED_BATCH) {
                    let len = FEED_BATCH.min(texts.len() - start);
                    let states =
                        agg.feed_parallel(len, |i, stats: &mut PerfScriptStats, out| {
                            texts.sample_into(start + i, stats, out)
                        })?;
                    for stats in &states {
                        script_stats.add(stats);
                    }
                }
            }
        }
    }
    Ok(())
}

/// Feeds `events` through the unwinder, stopping at the first read error (which names the
/// input and the offset or line).
pub(crate) fn unwind(
    events: impl Iterator<Item = Result<PerfEvent, PerfDataError>>,
    binary: &ProfiledBinary,
    load: &BinaryLoadInfo,
    options: &UnwindOptions,
    path: &Path,
) -> Result<(CounterSet, unwinder::UnwindStats), ConvertError> {
    let mut read_error = None;
    let events = events.map_while(|e| match e {
        Ok(event) => Some(event),
        Err(err) => {
            read_error = Some(err);
            None
        }
    });
    let result = unwinder::unwind_samples(events, binary, load, options);
    if let Some(err) = read_error {
        return Err(ConvertError::ReadSamples {
            path: path.to_path_buf(),
            source: err,
        });
    }
    result.map_err(|source| ConvertError::Unwind {
        path: path.to_path_buf(),
        source,
    })
}

/// The counters of stack-only samples (no branch stack) of the perf.data at `path`: each
/// sample of a process in `options.sample_pids` counted by [`count_leading_ips`].
pub(crate) fn leading_ip_counters(
    path: &Path,
    binary: &ProfiledBinary,
    load: &BinaryLoadInfo,
    options: &UnwindOptions,
) -> Result<CounterSet, ConvertError> {
    let events = || -> Result<_, ConvertError> {
        let mut reader =
            collector::perf_data::PerfDataReader::open(path).map_err(ConvertError::PerfData)?;
        Ok(std::iter::from_fn(move || {
            reader
                .next_event()
                .map_err(ConvertError::PerfData)
                .transpose()
        }))
    };
    count_leading_ips(path, events, binary, load, options)
}

/// The counters of a stack-only perf script ([`PerfScriptType::StackOnly`]) at `path`:
/// its samples, with the addresses perf printed as file offsets mapped back
/// ([`StackOnlyReader`]), counted by [`count_leading_ips`].
pub(crate) fn stack_only_script_counters(
    path: &Path,
    text: &ScriptText,
    binary: &ProfiledBinary,
    load: &BinaryLoadInfo,
    options: &UnwindOptions,
) -> Result<CounterSet, ConvertError> {
    let events = || -> Result<_, ConvertError> {
        Ok(StackOnlyReader::new(text.bytes(), text.name())?.map(|e| e.map_err(ConvertError::from)))
    };
    let counters = count_leading_ips(path, events, binary, load, options);
    let any_file_named = text
        .bytes()
        .split(|&b| b == b'\n')
        .filter_map(collector::perf_script::parse_stack_line)
        .any(|l| l.dso.is_some());
    if counters.is_err() && !any_file_named {
        return counters.map_err(|e| ConvertError::UnnamedStackFiles(Box::new(e)));
    }
    counters
}

/// Counts stack samples (no branch stack) by leading IP, each of a process in
/// `options.sample_pids` (all when unset) at its IP with its call chain as context, through
/// [`unwinder::leading_ip::count_leading_ip`], the daemon's cpu-clock path. `events` gives
/// the input's events from the start (called twice: the first sample tells whether the
/// samples have call chains). llvm-profgen 19 reads no such input (its `--leading-ip-only`
/// makes a flat profile, from LBR samples).
pub(crate) fn count_leading_ips<I: Iterator<Item = Result<PerfEvent, ConvertError>>>(
    path: &Path,
    events: impl Fn() -> Result<I, ConvertError>,
    binary: &ProfiledBinary,
    load: &BinaryLoadInfo,
    options: &UnwindOptions,
) -> Result<CounterSet, ConvertError> {
    use unwinder::leading_ip::{count_leading_ip, leading_ip_kind, LeadingIpOutcome};
    // The kind follows the samples: with call chains, contexts; else flat.
    let mut has_callchain = false;
    for event in events()? {
        if let PerfEvent::Sample(s) = event? {
            has_callchain = !s.callchain.is_empty();
            break;
        }
    }
    let mut counters = CounterSet::new(leading_ip_kind(binary, options, has_callchain));
    let mut placement = unwinder::BinaryPlacement::new(load.clone(), options.pid)?;
    let (mut counted, mut not_code, mut bad_stack) = (0u64, 0u64, 0u64);
    let (mut repaired, mut unrepairable) = (0u64, 0u64);
    for event in events()? {
        match event? {
            PerfEvent::SideBand(collector::SideBandEvent::Mmap2(m)) => {
                placement
                    .observe(&m)
                    .map_err(|source| ConvertError::Unwind {
                        path: path.to_path_buf(),
                        source,
                    })?;
            }
            PerfEvent::Sample(s) => {
                if options
                    .sample_pids
                    .as_ref()
                    .is_some_and(|p| !p.contains(&s.pid))
                {
                    continue;
                }
                let n = s.count.max(1);
                match count_leading_ip(&s, &placement, binary, options, &mut counters) {
                    LeadingIpOutcome::Counted => counted += n,
                    LeadingIpOutcome::Repaired => {
                        counted += n;
                        repaired += n;
                    }
                    LeadingIpOutcome::NotCode => not_code += n,
                    LeadingIpOutcome::BadStack => bad_stack += n,
                    LeadingIpOutcome::Unrepairable => {
                        bad_stack += n;
                        unrepairable += n;
                    }
                }
            }
            _ => {}
        }
    }
    if counted == 0 {
        return Err(ConvertError::NoLeadingIpSample {
            path: path.to_path_buf(),
            samples: not_code + bad_stack,
            binary_name: load.name.clone(),
        });
    }
    if not_code + bad_stack > 0 {
        eprintln!(
            "warning: {}: {} of {} samples counted by leading IP ({not_code} not in the \
             binary's code, {bad_stack} with a rejected call stack)",
            path.display(),
            counted,
            counted + not_code + bad_stack
        );
    }
    if let Some(line) = stack_repair_summary(repaired, unrepairable) {
        eprintln!("{line}");
    }
    Ok(counters)
}

/// The counters with their warnings printed (line contexts counted as llvm-profgen counts
/// them), and, with `script_input`, the notes of figures llvm-profgen 19 prints otherwise
/// for the same text (for a perf.data they do not hold: llvm-profgen reads it through
/// `perf script`, whose samples can differ from the file's).
pub(crate) fn finish_counters(
    binary: &ProfiledBinary,
    counters: CounterSet,
    mut stats: unwinder::UnwindStats,
    options: &crate::ConvertOptions,
    script_input: bool,
) -> Result<CounterSet, crate::ConvertError> {
    let (opts, detailed) = (&options.generate, options.show_detailed_warning);
    if stats.kernel_not_mapped {
        // llvm-profgen 19: the mmap warning of the first sample, then this error.
        if let Some(warning) = &stats.missing_mmap_warning {
            eprintln!("warning: {warning}");
        }
        return Err(crate::ConvertError::KernelNotMapped);
    }
    if counters.kind == CounterKind::LineContext {
        // llvm-profgen counts line contexts after symbolization (`StringBasedCtxKey`).
        let symbolized: std::collections::HashSet<String> = counters
            .contexts
            .keys()
            .map(|key| {
                let (frames, _) = expand_line_context(binary, key, opts);
                SampleContext { frames }.to_string()
            })
            .collect();
        stats.contexts = symbolized.len() as u64;
    }
    for warning in stats.warnings_detailed(counters.kind != CounterKind::Flat, detailed) {
        eprintln!("warning: {warning}");
    }
    if let Some(line) = stack_repair_summary(stats.repaired_stacks, stats.unrepairable_stacks) {
        eprintln!("{line}");
    }
    if script_input {
        for note in stats.notes() {
            eprintln!("note: {note}");
        }
    }
    Ok(counters)
}

/// The summary line of the prologue/epilogue repair (`None` when no sample needed one).
fn stack_repair_summary(repaired: u64, unrepairable: u64) -> Option<String> {
    (repaired + unrepairable > 0).then(|| {
        format!(
            "stack repair: {repaired} samples taken in a prologue or epilogue counted with \
             the caller their frame-pointer chain missed, {unrepairable} unrepairable (dropped)"
        )
    })
}

#[cfg(test)]
mod tests {
    use collector::perf_script::{tally_script_parts, PerfScriptReader};
    use unwinder::test_support::FakeLayout;

    use super::*;

    /// main calls foo ([`unwinder::test_support::main_calls_foo`]).
    fn layout() -> FakeLayout {
        unwinder::test_support::main_calls_foo()
    }

    fn load() -> BinaryLoadInfo {
        unwinder::test_support::main_calls_foo_load()
    }

    /// A hybrid script of three pieces, the binary mapped at 0x5000, then at 0x9000, then at
    /// 0x5000 again, each with samples of foo's loop called from main (three distinct
    /// ones, repeated) at the piece's base; a dropped sample first.
    fn script() -> String {
        let mut s = String::from("\t zz\n 0x1/0x2/P/-/-/0\n\n");
        for (base, n) in [(0x5000u64, 40), (0x9000, 25), (0x5000, 31)] {
            s += &format!(
                "PERF_RECORD_MMAP2 5/5: [{base:#x}(0x1000) @ 0x1000 fe:00 1 0]: r-xp /bin/prog\n"
            );
            let a = |x: u64| x - 0x1000 + base;
            let samples = [
                format!(
                    "\t {:x}\n\t {:x}\n {:#x}/{:#x}/P/-/-/0  {:#x}/{:#x}/P/-/-/0 \n\n",
                    a(0x1014),
                    a(0x1009),
                    a(0x1015),
                    a(0x1010),
                    a(0x1004),
                    a(0x1010)
                ),
                format!(
                    "\t {:x}\n\t {:x}\n {:#x}/{:#x}/M/-/-/3 \n\n",
                    a(0x1014),
                    a(0x1009),
                    a(0x1015),
                    a(0x1010)
                ),
                format!(
                    "\t {:x}\n\t {:x}\n {:#x}/{:#x}/P/-/-/0 \n\n",
                    a(0x1009),
                    a(0x1009),
                    a(0x1004),
                    a(0x1010)
                ),
            ];
            for i in 0..n {
                s += &samples[i % 3];
                if i % 4 == 0 {
                    s += &samples[0];
                }
            }
        }
        s
    }

    /// Unwound a few samples a part, with the samples repeated across the parts' cuts and
    /// the MMAP events in the parts they fall in, a script counts as read whole and as
    /// its samples unwound one by one in input order: the same counters, statistics and
    /// reading statistics.
    #[test]
    fn parts_unwind_to_the_counters_of_the_whole_script() {
        let text = script();
        let (layout, load) = (layout(), load());
        let options = UnwindOptions::default();
        let mut reader = PerfScriptReader::new(text.as_bytes(), "t").unwrap();
        let events = std::iter::from_fn(|| reader.next_event().unwrap());
        let (want, want_stats) =
            unwinder::unwind_samples(events.collect::<Vec<_>>(), &layout, &load, &options).unwrap();
        let want_script_stats = *reader.stats();
        assert_eq!(want_script_stats.dropped_samples, 1);
        assert_eq!(want.kind, CounterKind::LineContext);
        // foo's loop branch, in main's call at 0x1004, once per sample 0 (24, 16 and 19
        // in the three pieces, each at its base, counted at the preferred one) and sample
        // 1 (13, 8 and 10); the call from main once per sample 0; sample 2 (a leaf in a
        // prologue) dropped.
        let branch = |context: &[u64], from_to| want.contexts[context].branches[&from_to];
        assert_eq!(branch(&[0x1004, 0x1015], (0x1015, 0x1010)), 59 + 31);
        assert_eq!(branch(&[0x1004], (0x1004, 0x1010)), 24 + 16 + 19);
        assert_eq!(want_stats.dropped_stack_samples, 13 + 8 + 10);
        let script = ScriptText::from_bytes("t", text.into_bytes());
        for part_bytes in [usize::MAX, 1000, 1] {
            let parts = tally_script_parts(&script, 2, part_bytes, &|_| {}).unwrap();
            let (got, stats, script_stats) =
                unwind_tallies(parts, &layout, &load, &options, false, Path::new("t")).unwrap();
            assert_eq!(got, want, "{part_bytes} bytes a part");
            assert_eq!(stats, want_stats, "{part_bytes} bytes a part");
            assert_eq!(script_stats, want_script_stats, "{part_bytes} bytes a part");
        }
    }
}

//! Counting samples: LBR samples unwound into range and branch counters (from a perf
//! script's tally of distinct samples or a stream of perf.data events), stack samples
//! counted by leading IP, and the warnings and notes of the count.

use std::path::Path;

use collector::perf_data::PerfDataError;
use collector::perf_script::{
    parse_tallied_into, parse_tallied_one, EntryTokenCache, PerfScriptStats, ScriptPiece,
    ScriptTally, ScriptText, StackOnlyReader,
};
use collector::PerfEvent;
use symbolizer::generate::cs::expand_line_context;
use symbolizer::profile::SampleContext;
use symbolizer::ProfiledBinary;
use unwinder::{Aggregator, BinaryLoadInfo, CounterKind, CounterSet, PerfContent, UnwindOptions};

use crate::samples::print_mmap_event;
use crate::ConvertError;

/// Distinct sample texts parsed, prepared and aggregated at a time.
const FEED_BATCH: usize = 1 << 16;

/// Unwinds the distinct samples of a perf script's tally: each is parsed, prepared and
/// aggregated on the threads of `options` (what [`unwinder::unwind_repeated_samples`] does
/// with the tally's samples in order, without holding them parsed).
///
/// The tally is not freed: both callers of [`crate::read_counters`] (`convert`, `verify`) exit
/// soon after, and the exit returns the memory at once where freeing the texts and tables
/// piece by piece took milliseconds (on a thread of its own, it delayed the exit: both
/// took the memory-map lock).
pub(crate) fn unwind_tally(
    tally: ScriptTally<'_>,
    binary: &ProfiledBinary,
    load: &BinaryLoadInfo,
    options: &UnwindOptions,
    show_mmap_events: bool,
) -> Result<(CounterSet, unwinder::UnwindStats, PerfScriptStats), unwinder::UnwindError> {
    let tally = std::mem::ManuallyDrop::new(tally);
    let script_type = tally.script_type;
    // What reading skipped, then what parsing each distinct text drops (times its
    // occurrences).
    let mut script_stats = tally.stats;
    let content = match options.content {
        Some(c) => Some(c),
        // The first samples with a branch stack tell (parsed here once more below).
        None => tally.pieces.iter().find_map(|piece| {
            let ScriptPiece::Texts(texts) = piece else {
                return None;
            };
            let (mut tokens, mut stats) = (EntryTokenCache::new(), PerfScriptStats::default());
            (0..texts.len()).find_map(|i| {
                let t = parse_tallied_one(texts, i, script_type, &mut tokens, &mut stats)?;
                PerfContent::detect(std::iter::once(&PerfEvent::Sample(t.sample)))
            })
        }),
    };
    let content = content.ok_or(unwinder::UnwindError::NoLbrSamples)?;
    let mut agg = Aggregator::new(binary, load.clone(), content, options.clone())?;
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
                    type State = (EntryTokenCache, PerfScriptStats);
                    let states =
                        agg.feed_parallel(len, |i, (tokens, stats): &mut State, out| {
                            parse_tallied_into(texts, start + i, script_type, tokens, stats, out)
                        })?;
                    for (_, stats) in &states {
                        script_stats.add(stats);
                    }
                }
            }
        }
    }
    let (counters, stats) = agg.finish();
    Ok((counters, stats, script_stats))
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
                placement.observe(&m)?;
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
/// them).
pub(crate) fn finish_counters(
    binary: &ProfiledBinary,
    counters: CounterSet,
    mut stats: unwinder::UnwindStats,
    options: &crate::ConvertOptions,
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
    for note in stats.notes() {
        eprintln!("note: {note}");
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

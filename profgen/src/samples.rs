//! Reading the input into counters: a perf script (LBR-only, hybrid or stack-only), a
//! perf.data file, or an unsymbolized profile.

use std::collections::BTreeSet;
use std::path::Path;

use collector::perf_data::PerfDataReader;
use collector::perf_script::{
    event_filter, tally_script_parts, PerfScriptType, ScriptText, TALLY_HELD_BYTES,
};
use collector::PerfEvent;
use exporter::format::unsymbolized::read_unsymbolized;
use symbolizer::ProfiledBinary;
use unwinder::{Aggregator, CounterSet, PerfContent, UnwindOptions};

use crate::counting::{
    finish_counters, leading_ip_counters, stack_only_script_counters, unwind, unwind_tallies,
};
use crate::event_batches::EventBatches;
use crate::options::{convert_threads, ConvertOptions, Input};
use crate::progress::Progress;
use crate::ConvertError;

/// Reads the input into counters: unsymbolized profiles directly, sample inputs through
/// the unwinder, with the binary from `binary`, called once: after a perf script is read
/// (its reading does not need the binary), before anything else. When the input cannot be
/// read, the binary's error, if it has one, is the one reported (as when the binary was
/// loaded first).
pub(crate) fn read_counters_while_loading<'b>(
    options: &ConvertOptions,
    binary: impl FnOnce() -> Result<&'b ProfiledBinary, ConvertError>,
) -> Result<CounterSet, ConvertError> {
    match &options.input {
        Some(Input::PerfScript(path)) => counters_of_script(options, path, binary),
        Some(Input::Unsymbolized(path)) => {
            let binary = binary()?;
            counters_of_unsymbolized(options, path, binary)
        }
        Some(Input::PerfData(path)) => {
            let binary = binary()?;
            counters_of_perf_data(options, path, binary)
        }
        Some(Input::SampleProfile(_)) | None => {
            binary()?;
            Err(ConvertError::NoInput)
        }
    }
}

/// The counters of the unsymbolized profile at `path`.
fn counters_of_unsymbolized(
    options: &ConvertOptions,
    path: &Path,
    binary: &ProfiledBinary,
) -> Result<CounterSet, ConvertError> {
    let text = read_text(path)?;
    let base = options.address_base.of(binary);
    let profile = read_unsymbolized(&text, base).map_err(|source| ConvertError::Unsymbolized {
        path: path.to_path_buf(),
        source,
    })?;
    profile
        .to_counter_set_for(base, binary.has_pseudo_probes())
        .ok_or_else(|| ConvertError::LineContextsAsCounters {
            path: path.to_path_buf(),
        })
}

/// The text of the file at `path`.
pub(crate) fn read_text(path: &Path) -> Result<String, ConvertError> {
    std::fs::read_to_string(path).map_err(|source| ConvertError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The counters of the perf.data at `path`.
fn counters_of_perf_data(
    options: &ConvertOptions,
    path: &Path,
    binary: &ProfiledBinary,
) -> Result<CounterSet, ConvertError> {
    let load = options.load_info(binary);
    let unwind_options = options.unwind_options();
    let filter = &options.perf_events;
    // llvm-profgen's perf.data path first collects the processes that mapped the
    // binary and then only reads their samples (`perf script --pid`).
    // The kernel's samples come from every process: no such pass (llvm-profgen's
    // `convertPerfDataToTrace` skips it for `--kernel`).
    let pids = if load.kernel {
        None
    } else {
        Some(mapping_processes(
            path,
            &load.name,
            unwind_options.pid,
            options.show_mmap_events,
        )?)
    };
    let unwind_options = UnwindOptions {
        sample_pids: pids,
        ..unwind_options.clone()
    };
    let reader = open_perf_data(path, filter)?;
    warn_of_another_build(path, &reader, binary, &load.name);
    let event = reader.event();
    if !filter.is_empty() && (event.callchain || !event.branch_stack) {
        // Stack-only samples would otherwise read as "every sample filtered out".
        return Err(ConvertError::EventFilterOnPerfData {
            path: path.to_path_buf(),
        });
    }
    let progress = Progress::for_events(path);
    let mut count = 0u64;
    // Both cores: this thread reads records, the caller's prepares, aggregates and
    // unwinds.
    let result = std::thread::scope(|scope| {
        let show_mmap = options
            .show_mmap_events
            .then_some(&unwind_options.sample_pids);
        let (progress, count) = (&progress, &mut count);
        let events = EventBatches::spawn(scope, reader, move |r: &mut PerfDataReader| {
            *count += 1;
            progress.events_read(*count);
            let event = r.next_event();
            if let (Some(pids), Ok(Some(PerfEvent::SideBand(collector::SideBandEvent::Mmap2(m))))) =
                (show_mmap, &event)
            {
                // The second `perf script` pass of llvm-profgen reads the events of
                // the mapping processes only (`--pid`).
                if pids
                    .as_ref()
                    .is_none_or(|p| u32::try_from(m.pid).is_ok_and(|pid| p.contains(&pid)))
                {
                    print_mmap_event(m);
                }
            }
            event
        });
        unwind(events, binary, &load, &unwind_options, path)
    });
    progress.finish();
    let (counters, stats) = match result {
        Err(ConvertError::Unwind {
            source: unwinder::UnwindError::NoLbrSamples,
            ..
        }) => {
            if !filter.is_empty() {
                // Every sample filtered out: an empty profile, as llvm-profgen 19.
                eprintln!("warning: No samples in perf script!");
                return Ok(CounterSet::new(unwinder::CounterKind::Flat));
            }
            // No branch stack (cpu-clock, cycles, ... with or without -g): counted by
            // leading IP, as the daemon counts such samples live.
            return leading_ip_counters(path, binary, &load, &unwind_options);
        }
        result => result?,
    };
    finish_counters(binary, counters, stats, options, false)
}

/// Warns when the recording at `path` names build ids for files called `name` (the
/// binary's file name, which places it) and none of them is `binary`'s: the samples are
/// of another build of the program, and counting them against this one makes a profile
/// of the wrong code (llvm-profgen 19 does not check).
fn warn_of_another_build(
    path: &Path,
    reader: &PerfDataReader,
    binary: &ProfiledBinary,
    name: &str,
) {
    let Some(ours) = binary.build_id() else {
        return;
    };
    let recorded: BTreeSet<String> = reader
        .build_ids()
        .iter()
        .filter(|e| e.filename.rsplit('/').next() == Some(name))
        .map(|e| e.build_id.to_hex())
        .collect();
    let ours_hex = ours.to_hex();
    // perf writes a build id shorter than 20 bytes padded with zeros.
    let same = |r: &String| {
        r.strip_prefix(ours_hex.as_str())
            .is_some_and(|pad| pad.bytes().all(|b| b == b'0'))
    };
    if !recorded.is_empty() && !recorded.iter().any(same) {
        eprintln!(
            "warning: {}: the recording's build id of {name} is {}, the binary's is {}: \
             the samples are of another build, and the profile will not fit this one",
            path.display(),
            recorded.into_iter().collect::<Vec<_>>().join(", "),
            ours_hex
        );
    }
}

/// Opens the perf.data at `path`, keeping only the samples of the events in `filter`
/// (`--perf-event`) when it names any.
fn open_perf_data(path: &Path, filter: &[String]) -> Result<PerfDataReader, ConvertError> {
    let mut reader = PerfDataReader::open(path).map_err(ConvertError::PerfData)?;
    if !filter.is_empty() {
        reader.keep_samples_of_events(filter);
    }
    Ok(reader)
}

/// The counters of the perf script at `path`, read before `binary` is asked for.
fn counters_of_script<'b>(
    options: &ConvertOptions,
    path: &Path,
    binary: impl FnOnce() -> Result<&'b ProfiledBinary, ConvertError>,
) -> Result<CounterSet, ConvertError> {
    let progress = Progress::for_file(path);
    let mut text = match ScriptText::open(path) {
        Ok(text) => text,
        Err(e) => {
            binary()?;
            return Err(e.into());
        }
    };
    let script_type = PerfScriptType::of(text.bytes(), text.name());
    let filter = &options.perf_events;
    if let Ok(PerfScriptType::LbrOnly) = script_type {
        let any_sample;
        (text, any_sample) = filter_script_events(text, filter);
        if !any_sample {
            progress.finish();
            return counters_without_samples(options, &text, binary()?);
        }
    } else if !filter.is_empty() {
        binary()?;
        return Err(ConvertError::EventFilterOnScript {
            path: path.to_path_buf(),
        });
    }
    if matches!(script_type, Ok(PerfScriptType::StackOnly)) {
        progress.finish();
        let binary = binary()?;
        return stack_only_script_counters(
            path,
            &text,
            binary,
            &options.load_info(binary),
            &options.unwind_options(),
        );
    }
    // Each distinct sample text of a part is parsed once; a part's tally holds compact
    // copies of its distinct samples, or where they are in the text, until they are
    // unwound. The first part is read while the binary loads.
    let read = |n| progress.bytes_read(n);
    let parts = tally_script_parts(&text, convert_threads(), TALLY_HELD_BYTES, &read);
    let (first, parts) = match parts.map(|mut parts| (parts.next(), parts)) {
        Ok((Some(Ok(first)), parts)) => (first, parts),
        Ok((Some(Err(e)), _)) | Err(e) => {
            progress.finish();
            binary()?;
            return Err(e.into());
        }
        Ok((None, _)) => unreachable!("a script has a first part"),
    };
    let binary = binary()?;
    let load = options.load_info(binary);
    let unwind_options = options.unwind_options();
    let parts = std::iter::once(Ok(first)).chain(parts);
    let show_mmap = options.show_mmap_events;
    let unwound = unwind_tallies(parts, binary, &load, &unwind_options, show_mmap, path);
    progress.finish();
    // The text is given back on a thread of its own (unmapping hundreds of megabytes
    // takes a while), while the profile is made (on one core).
    let _ = std::thread::Builder::new().spawn(move || text.release());
    let (counters, stats, script_stats) = unwound?;
    for warning in script_stats.warnings() {
        eprintln!("warning: {}: {warning}", path.display());
    }
    finish_counters(binary, counters, stats, options, true)
}

/// `--perf-event` on the LBR-only script `text`: llvm-profgen's per-line event warnings
/// printed, the samples of other events dropped. The text is read once more only when a
/// filter is given or its first sample names its event.
/// Also tells whether any sample is left.
fn filter_script_events(text: ScriptText, filter: &[String]) -> (ScriptText, bool) {
    if filter.is_empty() && !event_filter::has_event_names(text.bytes()) {
        return (text, true);
    }
    let outcome = event_filter::filter_events(text.bytes(), filter);
    for warning in &outcome.warnings {
        eprintln!("warning: {warning}");
    }
    let any_sample = outcome.kept_samples > 0;
    match outcome.kept {
        Some(kept) => (ScriptText::from_bytes(text.name(), kept), any_sample),
        None => (text, any_sample),
    }
}

/// The (empty) counters of an LBR-only script whose every sample `--perf-event` dropped:
/// its MMAP lines placed (and shown with `--show-mmap-events`), no sample, as llvm-profgen
/// 19 writes an empty profile for it.
fn counters_without_samples(
    options: &ConvertOptions,
    text: &ScriptText,
    binary: &ProfiledBinary,
) -> Result<CounterSet, ConvertError> {
    let unwind_options = options.unwind_options();
    let mut agg = Aggregator::new(
        binary,
        options.load_info(binary),
        PerfContent::Lbr,
        unwind_options,
    )?;
    for line in text.bytes().split(|&b| b == b'\n') {
        if collector::perf_script::reader::is_mmap_event(line) {
            if let Some(m) = collector::perf_script::reader::parse_mmap_line(line) {
                if options.show_mmap_events {
                    print_mmap_event(&m);
                }
                agg.feed_mmap(&m)?;
            }
        }
    }
    let (counters, stats) = agg.finish();
    finish_counters(binary, counters, stats, options, true)
}

/// The processes with an MMAP2 event of the binary (restricted to `pid`), from a first
/// pass over the perf.data: what llvm-profgen's `convertPerfDataToTrace` collects.
fn mapping_processes(
    path: &Path,
    binary_name: &str,
    pid: Option<u32>,
    show_mmap_events: bool,
) -> Result<BTreeSet<u32>, ConvertError> {
    let mut reader = PerfDataReader::open(path).map_err(ConvertError::PerfData)?;
    let mut pids = BTreeSet::new();
    while let Some(event) = reader.next_event().map_err(ConvertError::PerfData)? {
        if let (true, PerfEvent::SideBand(collector::SideBandEvent::Mmap2(m))) =
            (show_mmap_events, &event)
        {
            print_mmap_event(m);
        }
        pids.extend(unwinder::options::processes_mapping(
            std::iter::once(&event),
            binary_name,
            pid,
        ));
    }
    if pids.is_empty() {
        return Err(ConvertError::NoMappingProcess {
            path: path.to_path_buf(),
            binary_name: binary_name.to_string(),
            pid,
        });
    }
    Ok(pids)
}

/// `--show-mmap-events`: one mmap event of the input, as llvm-profgen 19 prints each mmap
/// line it parses.
pub(crate) fn print_mmap_event(m: &collector::Mmap2Event) {
    println!("Mmap: Binary {} loaded at {:#x}: ", m.filename, m.addr);
}

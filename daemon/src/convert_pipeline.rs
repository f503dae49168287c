//! The `convert` pipeline: input reader → unwinder → symbolizer → format writer.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{bail, Context};
use collector::perf_data::PerfDataReader;
use collector::perf_script::{
    event_filter, parse_tallied_into, parse_tallied_one, tally_script, EntryTokenCache,
    PerfScriptStats, PerfScriptType, ScriptPiece, ScriptTally, ScriptText, StackOnlyReader,
};
use collector::PerfEvent;
use exporter::format::unsymbolized::{line_context_name, read_unsymbolized, write_unsymbolized};
use symbolizer::binary::ProfiledBinary;
use symbolizer::generate::cs::expand_line_context;
use symbolizer::generate::{generate_profile, GenerateOptions};
use symbolizer::profile::SampleContext;
use unwinder::{Aggregator, BinaryLoadInfo, CounterKind, CounterSet, PerfContent, UnwindOptions};

use crate::convert::{ConvertArgs, OutputFormat};
use crate::phase_timer::PhaseTimer;
use crate::progress::Progress;

/// Converts the input named in `args` into the requested output; with `--time-profgen`,
/// prints the time of each phase on stderr at the end.
pub fn convert(args: &ConvertArgs) -> anyhow::Result<()> {
    let timer = PhaseTimer::new(args.time_profgen);
    let result = convert_timed(args, &timer);
    timer.print_report();
    result
}

/// [`convert`], each phase timed by `timer`.
fn convert_timed(args: &ConvertArgs, timer: &PhaseTimer) -> anyhow::Result<()> {
    if let Some(path) = &args.llvm_sample_profile {
        return convert_sample_profile(args, path, timer);
    }
    if let Some(path) = &args.unsymbolized_profile {
        if convert_line_contexts(args, path, timer)? {
            return Ok(());
        }
    }
    // The binary is loaded on a thread of its own while a perf script is read: reading it
    // does not need the binary, and loading it (decoding, DWARF, probes) left one core idle
    // for its first milliseconds.
    let loaded = std::sync::OnceLock::new();
    let counters = std::thread::scope(|scope| {
        let loading = scope
            .spawn(|| timer.time("Load binary", || args.load_binary(!args.skip_symbolization)));
        timer.time("Read and unwind samples", || {
            read_counters_while_loading(args, || {
                let binary = loading
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
                Ok(loaded.get_or_init(|| binary))
            })
        })
    })?;
    let binary = loaded.get().expect("read_counters got the binary");
    let address_base = args.address_base(binary);
    let mut out = BufWriter::new(
        File::create(&args.output)
            .with_context(|| format!("creating {}", args.output.display()))?,
    );
    if args.skip_symbolization {
        let gen_opts = args.generate_options();
        let line_context = |key: &[u64]| line_context_name(binary, key, address_base, &gen_opts);
        timer
            .time("Write unsymbolized profile", || {
                write_unsymbolized(&mut out, &counters, address_base, Some(&line_context))
            })
            .with_context(|| format!("writing {}", args.output.display()))?;
    } else {
        if args.show_pseudo_probe {
            let mut stdout = std::io::stdout().lock();
            symbolizer::listing::write_probe_descs(binary, &mut stdout)
                .and_then(|()| stdout.flush())
                .context("writing the pseudo probe descriptions")?;
        }
        let profile = timer.time("Generate profile", || {
            generate_profile(binary, &counters, &args.generate_options())
        });
        show_density(args, &profile);
        timer.time("Write profile", || {
            write_profile(args, binary, &profile, &mut out)
        })?;
        // `convert` is the process's last work: the process's exit returns the memory at
        // once, where dropping would free every map node one by one first.
        std::mem::forget(profile);
    }
    out.flush()
        .with_context(|| format!("writing {}", args.output.display()))?;
    std::mem::forget(counters);
    std::mem::forget(loaded);
    Ok(())
}

/// `--show-disassembly-only`: prints the listing of `--binary` on stdout (llvm-profgen 19
/// reads no samples and writes no profile then).
pub fn print_listing(args: &ConvertArgs) -> anyhow::Result<()> {
    let binary = args.load_binary(true)?;
    let elf = std::fs::read(&args.binary)
        .with_context(|| format!("reading {}", args.binary.display()))?;
    let options = symbolizer::listing::ListingOptions {
        functions: args.disassemble_functions.clone(),
        source_locations: args.show_source_locations,
        canonical_names: args.show_canonical_fname,
        pseudo_probes: args.show_pseudo_probe,
    };
    let mut stdout = BufWriter::new(std::io::stdout().lock());
    symbolizer::listing::write_listing(
        &binary,
        &args.binary.display().to_string(),
        &elf,
        &options,
        &mut stdout,
    )?;
    Ok(())
}

/// Writes `profile` in the format `args` ask for, with the profile symbol list of `binary`
/// in an extbinary profile when `--populate-profile-symbol-list` is given.
fn write_profile(
    args: &ConvertArgs,
    binary: &ProfiledBinary,
    profile: &symbolizer::profile::SampleProfile,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let written = match args.format {
        OutputFormat::Text => {
            if args.use_md5 {
                eprintln!("warning: -use-md5 is ignored. Specify --format=extbinary to enable it");
            }
            exporter::format::llvm_text::write(profile, out)
        }
        OutputFormat::Extbinary => {
            let symbols = args
                .populate_profile_symbol_list
                .then(|| profile_symbol_list(binary));
            let options = exporter::format::extbinary::WriteOptions {
                symbol_list: symbols.as_ref(),
                use_md5: args.use_md5,
            };
            exporter::format::extbinary::write_with(profile, &options, out)
        }
    };
    written.with_context(|| format!("writing {}", args.output.display()))
}

/// llvm-profgen 19's `populateSymbolListFromDWARF`: the DWARF name of the function of
/// every function range.
fn profile_symbol_list(binary: &ProfiledBinary) -> std::collections::BTreeSet<String> {
    let functions = binary.function_table().functions();
    binary
        .function_table()
        .ranges()
        .iter()
        .filter_map(|r| functions.get(r.func_index).map(|f| f.name.clone()))
        .collect()
}

/// llvm-profgen 19's density report of the generated profile (`calculateAndShowDensity`):
/// a warning when it is empty or below `--profile-density-threshold`, the figure on stdout
/// with `--show-density`.
fn show_density(args: &ConvertArgs, profile: &symbolizer::profile::SampleProfile) {
    let density =
        symbolizer::verify::density::profile_density(profile, args.profile_density_cutoff_hot);
    if density == 0.0 {
        eprintln!(
            "warning: The output profile is empty or the --profile-density-cutoff-hot option \
             is set too low. Please check your command."
        );
    } else if density < args.profile_density_threshold {
        eprintln!(
            "warning: Sample PGO is estimated to optimize better with {:.1}x more samples. \
             Please consider increasing sampling rate or profiling for longer duration to get \
             more samples.",
            args.profile_density_threshold / density
        );
    }
    if args.show_density {
        println!(
            "Functions with density >= {density:.1} account for {:.2}% total sample counts.",
            f64::from(args.profile_density_cutoff_hot) / 10_000.0
        );
    }
}

/// `--llvm-sample-profile`: an LLVM sample profile post-processed again for the binary, as
/// llvm-profgen 19's `ProfileGenerator` does for a flat or nested input (the summary's
/// cold threshold for `--trim-cold-profile`, the ambiguous-profile filter, the density
/// report), then written as asked. Flat context-sensitive input (`[main:1 @ foo]`
/// contexts), which llvm-profgen 19 runs through its CS pre-inliner again, is refused.
fn convert_sample_profile(
    args: &ConvertArgs,
    path: &Path,
    timer: &PhaseTimer,
) -> anyhow::Result<()> {
    let mut profile = timer.time("Read sample profile", || crate::verify::read_profile(path))?;
    if profile.is_cs {
        bail!(
            "{}: a flat context-sensitive profile (`[main:1 @ foo]` contexts); \
             re-post-processing one (pre-inliner, nested conversion) with \
             --llvm-sample-profile is not implemented by `pgo-agent convert` yet; give a \
             nested or flat profile, or convert the samples again",
            path.display()
        );
    }
    let binary = timer.time("Load binary", || args.load_binary(true))?;
    // `ProfileGeneratorBase::create` takes the FS-discriminator mode from the binary.
    profile.is_fs = binary.uses_fs_discriminator();
    timer.time("Generate profile", || {
        symbolizer::generate::post::post_process_flat(&mut profile, &args.generate_options())
    });
    show_density(args, &profile);
    let mut out = BufWriter::new(
        File::create(&args.output)
            .with_context(|| format!("creating {}", args.output.display()))?,
    );
    timer.time("Write profile", || {
        write_profile(args, &binary, &profile, &mut out)
    })?;
    out.flush()
        .with_context(|| format!("writing {}", args.output.display()))
}

/// Converts an unsymbolized profile whose contexts are symbolized line contexts (`main:7 @
/// quick`: a binary without pseudo probes) as llvm-profgen 19 does: the contexts are
/// taken as they are, the ranges and branches symbolized with the binary. `false` (nothing
/// done) for any other unsymbolized profile.
fn convert_line_contexts(
    args: &ConvertArgs,
    path: &Path,
    timer: &PhaseTimer,
) -> anyhow::Result<bool> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    // Line contexts carry no addresses: read with base 0 to see what the file holds.
    let profile = read_unsymbolized(&text, 0)
        .with_context(|| format!("reading unsymbolized profile {}", path.display()))?;
    if profile.line_contexts().is_none() {
        return Ok(false);
    }
    let binary = timer.time("Load binary", || args.load_binary(!args.skip_symbolization))?;
    let base = args.address_base(&binary);
    let profile = read_unsymbolized(&text, base)
        .with_context(|| format!("reading unsymbolized profile {}", path.display()))?;
    let contexts = profile
        .line_contexts()
        .expect("line contexts, as read above");
    let mut out = BufWriter::new(
        File::create(&args.output)
            .with_context(|| format!("creating {}", args.output.display()))?,
    );
    if args.skip_symbolization {
        profile
            .write(&mut out, base)
            .with_context(|| format!("writing {}", args.output.display()))?;
    } else {
        let profile = timer.time("Generate profile", || {
            symbolizer::generate::generate_line_profile_of_contexts(
                &binary,
                &contexts,
                &args.generate_options(),
            )
        });
        show_density(args, &profile);
        timer.time("Write profile", || {
            write_profile(args, &binary, &profile, &mut out)
        })?;
    }
    out.flush()
        .with_context(|| format!("writing {}", args.output.display()))?;
    Ok(true)
}

/// Reads the input into counters: unsymbolized profiles directly, sample inputs through
/// the unwinder. Also `verify`'s reader of raw samples.
pub fn read_counters(args: &ConvertArgs, binary: &ProfiledBinary) -> anyhow::Result<CounterSet> {
    read_counters_while_loading(args, || Ok(binary))
}

/// [`read_counters`] with the binary from `binary`, called once: after a perf script is
/// read (its reading does not need the binary), before anything else. When the input
/// cannot be read, the binary's error, if it has one, is the one reported (as when the
/// binary was loaded first).
fn read_counters_while_loading<'b>(
    args: &ConvertArgs,
    binary: impl FnOnce() -> anyhow::Result<&'b ProfiledBinary>,
) -> anyhow::Result<CounterSet> {
    if let Some(path) = &args.perfscript {
        return counters_of_script(args, path, binary);
    }
    let binary = binary()?;
    if let Some(path) = &args.unsymbolized_profile {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let base = args.address_base(binary);
        let profile = read_unsymbolized(&text, base)
            .with_context(|| format!("reading unsymbolized profile {}", path.display()))?;
        let Some(counters) = profile.to_counter_set_for(base, binary.has_pseudo_probes()) else {
            bail!(
                "{}: contexts are symbolized line contexts (`main:1 @ foo`); converting those \
                 back to address counters is not supported yet",
                path.display()
            );
        };
        return Ok(counters);
    }
    let load = load_info(args, binary);
    let options = unwind_options(args);
    let (counters, stats) = if let Some(path) = &args.perfdata {
        let filter = args.event_filter();
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
                options.pid,
                args.show_mmap_events,
            )?)
        };
        let options = UnwindOptions {
            sample_pids: pids,
            ..options.clone()
        };
        let reader = open_perf_data(path, &filter)?;
        let event = reader.event();
        if !filter.is_empty() && (event.callchain || !event.branch_stack) {
            // Stack-only samples would otherwise read as "every sample filtered out".
            bail!(
                "{}: --perf-event filters LBR-only samples (`perf record -b` without `-g`); \
                 these samples have call stacks or no branch stack",
                path.display()
            );
        }
        let progress = Progress::for_events(path);
        let mut count = 0u64;
        // Both cores: this thread reads records, the caller's prepares, aggregates and
        // unwinds.
        let result = std::thread::scope(|scope| {
            let show_mmap = args.show_mmap_events.then_some(&options.sample_pids);
            let (progress, count) = (&progress, &mut count);
            let events = EventBatches::spawn(scope, reader, move |r: &mut PerfDataReader| {
                *count += 1;
                progress.events_read(*count);
                let event = r.next_event();
                if let (
                    Some(pids),
                    Ok(Some(PerfEvent::SideBand(collector::SideBandEvent::Mmap2(m)))),
                ) = (show_mmap, &event)
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
            unwind(events, binary, &load, &options, path)
        });
        progress.finish();
        match result {
            Err(e)
                if matches!(
                    e.downcast_ref::<unwinder::UnwindError>(),
                    Some(unwinder::UnwindError::NoLbrSamples)
                ) =>
            {
                if !filter.is_empty() {
                    // Every sample filtered out: an empty profile, as llvm-profgen 19.
                    eprintln!("warning: No samples in perf script!");
                    return Ok(CounterSet::new(unwinder::CounterKind::Flat));
                }
                // No branch stack (cpu-clock, cycles, ... with or without -g): counted by
                // leading IP, as the daemon counts such samples live.
                return leading_ip_counters(path, binary, &load, &options);
            }
            result => result?,
        }
    } else {
        bail!(
            "no input: give --perfscript, --perfdata, --unsymbolized-profile or \
             --llvm-sample-profile"
        );
    };
    finish_counters(
        binary,
        counters,
        stats,
        &args.generate_options(),
        args.show_detailed_warning,
    )
}

/// Opens the perf.data at `path`, keeping only the samples of the events in `filter`
/// (`--perf-event`) when it names any.
fn open_perf_data(path: &Path, filter: &[String]) -> anyhow::Result<PerfDataReader> {
    let mut reader = PerfDataReader::open(path).context("reading perf.data")?;
    if !filter.is_empty() {
        reader.keep_samples_of_events(filter);
    }
    Ok(reader)
}

/// The counters of stack-only samples (no branch stack) of the perf.data at `path`: each
/// sample of a process in `options.sample_pids` counted by [`count_leading_ips`].
fn leading_ip_counters(
    path: &Path,
    binary: &ProfiledBinary,
    load: &BinaryLoadInfo,
    options: &UnwindOptions,
) -> anyhow::Result<CounterSet> {
    let events = || -> anyhow::Result<_> {
        let mut reader = PerfDataReader::open(path).context("reading perf.data")?;
        Ok(std::iter::from_fn(move || {
            reader.next_event().context("reading perf.data").transpose()
        }))
    };
    count_leading_ips(path, events, binary, load, options)
}

/// The counters of a stack-only perf script ([`PerfScriptType::StackOnly`]) at `path`:
/// its samples, with the addresses perf printed as file offsets mapped back
/// ([`StackOnlyReader`]), counted by [`count_leading_ips`].
fn stack_only_script_counters(
    path: &Path,
    text: &ScriptText,
    binary: &ProfiledBinary,
    load: &BinaryLoadInfo,
    options: &UnwindOptions,
) -> anyhow::Result<CounterSet> {
    let events =
        || -> anyhow::Result<_> {
            Ok(StackOnlyReader::new(text.bytes(), text.name())?
                .map(|e| e.map_err(anyhow::Error::from)))
        };
    let counters = count_leading_ips(path, events, binary, load, options);
    let any_file_named = text
        .bytes()
        .split(|&b| b == b'\n')
        .filter_map(collector::perf_script::parse_stack_line)
        .any(|l| l.dso.is_some());
    if counters.is_err() && !any_file_named {
        return counters.context(
            "no stack line names its file: perf prints call-chain addresses as offsets in \
             their file, so convert needs the file named (`perf script -F ip,dso \
             --show-mmap-events`)",
        );
    }
    counters
}

/// Counts stack samples (no branch stack) by leading IP, each of a process in
/// `options.sample_pids` (all when unset) at its IP with its call chain as context, through
/// [`unwinder::leading_ip::count_leading_ip`], the daemon's cpu-clock path. `events` gives
/// the input's events from the start (called twice: the first sample tells whether the
/// samples have call chains). llvm-profgen 19 reads no such input (its `--leading-ip-only`
/// makes a flat profile, from LBR samples).
fn count_leading_ips<I: Iterator<Item = anyhow::Result<PerfEvent>>>(
    path: &Path,
    events: impl Fn() -> anyhow::Result<I>,
    binary: &ProfiledBinary,
    load: &BinaryLoadInfo,
    options: &UnwindOptions,
) -> anyhow::Result<CounterSet> {
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
        bail!(
            "{}: no sample with a branch stack, and none of the {} stack samples is in {}",
            path.display(),
            not_code + bad_stack,
            load.name
        );
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

/// The counters of the perf script at `path`, read before `binary` is asked for.
fn counters_of_script<'b>(
    args: &ConvertArgs,
    path: &Path,
    binary: impl FnOnce() -> anyhow::Result<&'b ProfiledBinary>,
) -> anyhow::Result<CounterSet> {
    let opened =
        Progress::for_file(path).and_then(|progress| Ok((progress, ScriptText::open(path)?)));
    let (progress, mut text) = match opened {
        Ok(opened) => opened,
        Err(e) => {
            binary()?;
            return Err(e);
        }
    };
    let script_type = PerfScriptType::of(text.bytes(), text.name());
    let filter = args.event_filter();
    if let Ok(PerfScriptType::LbrOnly) = script_type {
        let any_sample;
        (text, any_sample) = filter_script_events(text, &filter);
        if !any_sample {
            progress.finish();
            return counters_without_samples(args, &text, binary()?);
        }
    } else if !filter.is_empty() {
        binary()?;
        bail!(
            "{}: --perf-event filters LBR-only perf scripts (`perf script -F event,ip,brstack`); \
             this script has call stacks or no branch stacks",
            path.display()
        );
    }
    if matches!(script_type, Ok(PerfScriptType::StackOnly)) {
        progress.finish();
        let binary = binary()?;
        return stack_only_script_counters(
            path,
            &text,
            binary,
            &load_info(args, binary),
            &unwind_options(args),
        );
    }
    // Each distinct sample text is parsed once; the tally holds compact copies of the
    // distinct samples, or where they are in the text.
    let tally = tally_script(&text, convert_threads(), &|n| progress.bytes_read(n));
    progress.finish();
    let tally = match tally {
        Ok(tally) => tally,
        Err(e) => {
            binary()?;
            return Err(e.into());
        }
    };
    let binary = binary()?;
    let load = load_info(args, binary);
    let options = unwind_options(args);
    // The text is given back on a thread of its own (unmapping hundreds of megabytes
    // takes a while): at once when no text is kept in place in it, else once every
    // text is parsed, while the profile is made (on one core).
    let release = |text: ScriptText| {
        let _ = std::thread::Builder::new().spawn(move || text.release());
    };
    let unwound = match tally.detached() {
        Ok(tally) => {
            release(text);
            unwind_tally(tally, binary, &load, &options, args.show_mmap_events)
        }
        Err(tally) => {
            let unwound = unwind_tally(tally, binary, &load, &options, args.show_mmap_events);
            release(text);
            unwound
        }
    };
    let (counters, stats, script_stats) =
        unwound.with_context(|| format!("unwinding samples of {}", path.display()))?;
    for warning in script_stats.warnings() {
        eprintln!("warning: {}: {warning}", path.display());
    }
    finish_counters(
        binary,
        counters,
        stats,
        &args.generate_options(),
        args.show_detailed_warning,
    )
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
    args: &ConvertArgs,
    text: &ScriptText,
    binary: &ProfiledBinary,
) -> anyhow::Result<CounterSet> {
    let options = unwind_options(args);
    let mut agg = Aggregator::new(binary, load_info(args, binary), PerfContent::Lbr, options)?;
    for line in text.bytes().split(|&b| b == b'\n') {
        if collector::perf_script::reader::is_mmap_event(line) {
            if let Some(m) = collector::perf_script::reader::parse_mmap_line(line) {
                if args.show_mmap_events {
                    print_mmap_event(&m);
                }
                agg.feed_mmap(&m)?;
            }
        }
    }
    let (counters, stats) = agg.finish();
    finish_counters(
        binary,
        counters,
        stats,
        &args.generate_options(),
        args.show_detailed_warning,
    )
}

/// Threads `convert` reads, parses and unwinds on: every core.
fn convert_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_THREADS)
}

/// The binary's load description, marked as the kernel's with `--kernel`.
fn load_info(args: &ConvertArgs, binary: &ProfiledBinary) -> unwinder::BinaryLoadInfo {
    unwinder::BinaryLoadInfo {
        kernel: args.kernel,
        ..binary.load_info()
    }
}

/// The unwinder's options from `convert`'s arguments.
fn unwind_options(args: &ConvertArgs) -> UnwindOptions {
    UnwindOptions {
        ignore_stack_samples: args.ignore_stack_samples,
        pid: (args.pid != 0).then_some(args.pid),
        unwind_threads: convert_threads(),
        max_context_depth: usize::try_from(args.csprof_max_context_depth).ok(),
        compress_recursion: u32::try_from(args.compress_recursion).ok(),
        leading_ip_only: args.leading_ip_only,
        sample_period: args.sample_period,
        detailed_warnings: args.show_detailed_warning,
        stack_repair: args.perfdata.is_some() && !args.no_stack_repair,
        ..UnwindOptions::default()
    }
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

/// The counters with their warnings printed (line contexts counted as llvm-profgen counts
/// them).
fn finish_counters(
    binary: &ProfiledBinary,
    counters: CounterSet,
    mut stats: unwinder::UnwindStats,
    opts: &GenerateOptions,
    detailed: bool,
) -> anyhow::Result<CounterSet> {
    if stats.kernel_not_mapped {
        // llvm-profgen 19: the mmap warning of the first sample, then this error.
        if let Some(warning) = &stats.missing_mmap_warning {
            eprintln!("warning: {warning}");
        }
        bail!("Kernel is requested, but no kernel is found in mmap events.");
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

/// Unwinds the distinct samples of a perf script's tally: each is parsed, prepared and
/// aggregated on the threads of `options` (what [`unwinder::unwind_repeated_samples`] does
/// with the tally's samples in order, without holding them parsed).
///
/// The tally is not freed: both callers of [`read_counters`] (`convert`, `verify`) exit
/// soon after, and the exit returns the memory at once where freeing the texts and tables
/// piece by piece took milliseconds (on a thread of its own, it delayed the exit: both
/// took the memory-map lock).
fn unwind_tally(
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
fn unwind<E: std::error::Error + Send + Sync + 'static>(
    events: impl Iterator<Item = Result<PerfEvent, E>>,
    binary: &ProfiledBinary,
    load: &BinaryLoadInfo,
    options: &UnwindOptions,
    path: &Path,
) -> anyhow::Result<(CounterSet, unwinder::UnwindStats)> {
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
        return Err(err).with_context(|| format!("reading {}", path.display()));
    }
    result.with_context(|| format!("unwinding samples of {}", path.display()))
}

/// `--show-mmap-events`: one mmap event of the input, as llvm-profgen 19 prints each mmap
/// line it parses.
fn print_mmap_event(m: &collector::Mmap2Event) {
    println!("Mmap: Binary {} loaded at {:#x}: ", m.filename, m.addr);
}

/// Events read on a scoped thread and handed over in batches through a bounded channel, so
/// that reading (parsing) overlaps with sample preparation and unwinding on the caller's
/// thread. In input order; the reader's first error ends the stream after the events
/// before it. Dropping the iterator stops the reader at its next batch.
struct EventBatches<E> {
    rx: crossbeam_channel::Receiver<Result<Vec<PerfEvent>, E>>,
    current: std::vec::IntoIter<PerfEvent>,
}

/// Distinct sample texts parsed, prepared and aggregated at a time.
const FEED_BATCH: usize = 1 << 16;

/// Most threads `convert` reads, parses and unwinds on.
const MAX_THREADS: usize = 8;

/// Events per batch: large enough that channel traffic is negligible, small enough that
/// the two threads start overlapping at once.
const EVENT_BATCH: usize = 512;

impl<E: Send> EventBatches<E> {
    /// Starts `next(&mut reader)` on a thread of `scope` until it returns `Ok(None)` or an
    /// error.
    fn spawn<'scope, R: Send + 'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        mut reader: R,
        mut next: impl FnMut(&mut R) -> Result<Option<PerfEvent>, E> + Send + 'scope,
    ) -> EventBatches<E>
    where
        E: 'scope,
    {
        let (tx, rx) = crossbeam_channel::bounded(16);
        scope.spawn(move || {
            let mut batch = Vec::with_capacity(EVENT_BATCH);
            loop {
                match next(&mut reader) {
                    Ok(Some(event)) => {
                        batch.push(event);
                        if batch.len() == EVENT_BATCH {
                            let full =
                                std::mem::replace(&mut batch, Vec::with_capacity(EVENT_BATCH));
                            if tx.send(Ok(full)).is_err() {
                                return;
                            }
                        }
                    }
                    Ok(None) => {
                        let _ = tx.send(Ok(batch));
                        return;
                    }
                    Err(e) => {
                        if tx.send(Ok(batch)).is_ok() {
                            let _ = tx.send(Err(e));
                        }
                        return;
                    }
                }
            }
        });
        EventBatches {
            rx,
            current: Vec::new().into_iter(),
        }
    }
}

impl<E> Iterator for EventBatches<E> {
    type Item = Result<PerfEvent, E>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(event) = self.current.next() {
                return Some(Ok(event));
            }
            match self.rx.recv().ok()? {
                Ok(batch) => self.current = batch.into_iter(),
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// The processes with an MMAP2 event of the binary (restricted to `pid`), from a first
/// pass over the perf.data: what llvm-profgen's `convertPerfDataToTrace` collects.
fn mapping_processes(
    path: &Path,
    binary_name: &str,
    pid: Option<u32>,
    show_mmap_events: bool,
) -> anyhow::Result<std::collections::BTreeSet<u32>> {
    let mut reader = PerfDataReader::open(path).context("reading perf.data")?;
    let mut pids = std::collections::BTreeSet::new();
    while let Some(event) = reader.next_event().context("reading perf.data")? {
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
        bail!(
            "{}: no mmap event of {binary_name} found in perf data (no process mapped the binary{})",
            path.display(),
            pid.map(|p| format!(" with pid {p}")).unwrap_or_default()
        );
    }
    Ok(pids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use collector::{Sample, SideBandEvent};

    fn sample(ip: u64) -> PerfEvent {
        PerfEvent::Sample(Sample {
            ip,
            ..Sample::default()
        })
    }

    fn ips(events: &[Result<PerfEvent, String>]) -> Vec<Result<u64, String>> {
        events
            .iter()
            .map(|e| match e {
                Ok(PerfEvent::Sample(s)) => Ok(s.ip),
                Ok(PerfEvent::SideBand(_)) => Ok(u64::MAX),
                Err(e) => Err(e.clone()),
            })
            .collect()
    }

    #[test]
    fn batches_keep_order_across_batch_boundaries() {
        let n = EVENT_BATCH as u64 * 2 + 3;
        let got: Vec<_> = std::thread::scope(|scope| {
            EventBatches::spawn(scope, 0u64, |i: &mut u64| {
                *i += 1;
                Ok::<_, String>((*i <= n).then(|| sample(*i)))
            })
            .collect()
        });
        assert_eq!(ips(&got), (1..=n).map(Ok).collect::<Vec<_>>());
    }

    #[test]
    fn error_ends_the_stream_after_the_events_before_it() {
        let got: Vec<_> = std::thread::scope(|scope| {
            EventBatches::spawn(scope, 0u64, |i: &mut u64| {
                *i += 1;
                match *i {
                    1 => Ok(Some(sample(7))),
                    2 => Ok(Some(PerfEvent::SideBand(SideBandEvent::Mmap2(
                        Default::default(),
                    )))),
                    3 => Err("line 3: bad".to_string()),
                    _ => unreachable!("the reader stops at its first error"),
                }
            })
            .collect()
        });
        assert_eq!(
            ips(&got),
            vec![Ok(7), Ok(u64::MAX), Err("line 3: bad".into())]
        );
    }

    #[test]
    fn dropping_the_iterator_stops_the_reader() {
        use std::sync::atomic::{AtomicU64, Ordering};
        let reads = AtomicU64::new(0);
        std::thread::scope(|scope| {
            let mut events = EventBatches::spawn(scope, &reads, |c: &mut &AtomicU64| {
                let i = c.fetch_add(1, Ordering::Relaxed);
                Ok::<_, String>(Some(sample(i)))
            });
            assert!(matches!(events.next(), Some(Ok(PerfEvent::Sample(s))) if s.ip == 0));
            drop(events);
            // The scope joins the endless reader: it returns only because its send failed.
        });
        // At most the channel's batches, the one taken and the one being filled.
        assert!(reads.load(Ordering::Relaxed) <= 18 * EVENT_BATCH as u64 + 1);
    }
}

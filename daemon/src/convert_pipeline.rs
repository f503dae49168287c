//! The `convert` pipeline: input reader → unwinder → symbolizer → format writer.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::Path;

use anyhow::{bail, Context};
use collector::perf_script::reader::PerfScriptReader;
use collector::perf_data::PerfDataReader;
use collector::PerfEvent;
use exporter::format::unsymbolized::{read_unsymbolized, write_unsymbolized};
use symbolizer::binary::ProfiledBinary;
use symbolizer::generate::cs::expand_line_context;
use symbolizer::generate::{generate_profile, GenerateOptions};
use symbolizer::profile::SampleContext;
use unwinder::{BinaryLoadInfo, CounterKind, CounterSet, UnwindOptions};

use crate::convert::{ConvertArgs, OutputFormat};
use crate::progress::Progress;

/// Converts the input named in `args` into the requested output.
pub fn convert(args: &ConvertArgs) -> anyhow::Result<()> {
    let binary = ProfiledBinary::load(&args.binary)
        .with_context(|| format!("loading binary {}", args.binary.display()))?;
    let counters = read_counters(args, &binary)?;
    let address_base = if args.use_offset {
        binary.preferred_base()
    } else {
        0
    };
    let mut out = BufWriter::new(
        File::create(&args.output)
            .with_context(|| format!("creating {}", args.output.display()))?,
    );
    if args.skip_symbolization {
        let gen_opts = GenerateOptions::default();
        let line_context = |key: &[u64]| {
            let (frames, _) = expand_line_context(&binary, key, &gen_opts);
            SampleContext { frames }.to_string()
        };
        write_unsymbolized(&mut out, &counters, address_base, Some(&line_context))
            .with_context(|| format!("writing {}", args.output.display()))?;
    } else {
        let profile = generate_profile(&binary, &counters, &GenerateOptions::default());
        if profile.is_cs && (args.csspgo_preinliner.is_none() || args.gen_cs_nested_profile.is_none())
        {
            eprintln!(
                "pgo-agent: note: the CS pre-inliner and nested profiles are not implemented yet; \
                 writing the flat context-sensitive profile llvm-profgen writes with \
                 --csspgo-preinliner=false --gen-cs-nested-profile=false"
            );
        }
        let written = match args.format {
            OutputFormat::Text => exporter::format::llvm_text::write(&profile, &mut out),
            OutputFormat::Extbinary => exporter::format::extbinary::write(&profile, &mut out),
        };
        written.with_context(|| format!("writing {}", args.output.display()))?;
    }
    out.flush()
        .with_context(|| format!("writing {}", args.output.display()))?;
    Ok(())
}

/// Reads the input into counters: unsymbolized profiles directly, sample inputs through
/// the unwinder.
fn read_counters(args: &ConvertArgs, binary: &ProfiledBinary) -> anyhow::Result<CounterSet> {
    if let Some(path) = &args.unsymbolized_profile {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading {}", path.display()))?;
        let base = if args.use_offset {
            binary.preferred_base()
        } else {
            0
        };
        let profile = read_unsymbolized(&text, base)
            .with_context(|| format!("reading unsymbolized profile {}", path.display()))?;
        let Some(counters) = profile.to_counter_set(base) else {
            bail!(
                "{}: contexts are symbolized line contexts (`main:1 @ foo`); converting those \
                 back to address counters is not supported yet",
                path.display()
            );
        };
        return Ok(counters);
    }
    let load = BinaryLoadInfo {
        name: binary.name().to_string(),
        preferred_base: binary.preferred_base(),
        text_segment_offsets: binary.text_segment_offsets().to_vec(),
        preferred_text_segment_addresses: binary.preferred_text_segment_addresses().to_vec(),
    };
    let options = UnwindOptions {
        ignore_stack_samples: args.ignore_stack_samples,
        pid: (args.pid != 0).then_some(args.pid),
        ..UnwindOptions::default()
    };
    let (counters, stats) = if let Some(path) = &args.perfscript {
        let progress = Progress::for_file(path)?;
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let input = BufReader::with_capacity(1 << 20, progress.wrap(file));
        let mut reader = PerfScriptReader::new(input, path.display().to_string())
            .with_context(|| format!("reading perf script {}", path.display()))?;
        let events = std::iter::from_fn(|| reader.next_event().transpose());
        let result = unwind(events, binary, &load, &options, path);
        progress.finish();
        result?
    } else if let Some(path) = &args.perfdata {
        let mut reader = PerfDataReader::open(path)
            .with_context(|| format!("reading perf.data {}", path.display()))?;
        let progress = Progress::for_events(path);
        let (started, mut count) = (std::time::Instant::now(), 0u64);
        let events = std::iter::from_fn(|| {
            count += 1;
            progress.events_read(count, started);
            reader.next_event().transpose()
        });
        let result = unwind(events, binary, &load, &options, path);
        progress.finish();
        result?
    } else {
        bail!("no input: give --perfscript, --perfdata or --unsymbolized-profile");
    };
    for warning in stats.warnings(counters.kind != CounterKind::Flat) {
        eprintln!("warning: {warning}");
    }
    Ok(counters)
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


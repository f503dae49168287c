//! `pgo-agent heap`: offline MemProf ingestion. Reads raw MemProf profiles written by
//! binaries built with clang `-fmemory-profile` (`MEMPROF_OPTIONS=log_path=PREFIX` writes
//! `PREFIX.<pid>`), symbolizes them with the profiled binary, aggregates all of them per
//! allocation context (counts and totals summed, min/max kept, histograms merged — LLVM's own
//! `llvm-profdata merge` keeps MemProf data from one input only) and writes MemProf YAML for
//! `llvm-profdata merge` → `clang -fmemory-profile-use=`, or a text listing.
//!
//! Each file is parsed and symbolized completely before it is folded in; a truncated, corrupt,
//! wrong-version or wrong-binary file is reported with its reason and skipped, never half-merged
//! (`--strict` makes it fatal instead).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;
use collector::memprof::RawMemProfile;
use exporter::format::memprof_text::write_memprof_text;
use exporter::format::memprof_yaml::write_memprof_yaml;
use symbolizer::memprof::{HeapProfile, MemProfBinary, MemProfSymbolizeError};

/// What `heap` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HeapFormat {
    /// MemProf YAML (input of `llvm-profdata merge`, LLVM ≥ 21 schema).
    Yaml,
    /// Human-readable listing with averages and stack ids.
    Text,
}

/// `pgo-agent heap` arguments.
#[derive(Debug, Clone, Args)]
pub struct HeapArgs {
    /// Raw MemProf profiles (`<log_path>.<pid>`), all from the same binary.
    #[arg(long = "profraw", required = true, num_args = 1..)]
    pub profraw: Vec<PathBuf>,
    /// The profiled binary (with GNU build id and `-gmlt -fdebug-info-for-profiling` DWARF).
    #[arg(long)]
    pub binary: PathBuf,
    /// Output file.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "yaml")]
    pub format: HeapFormat,
    /// Fail (and write nothing) if any input is rejected.
    #[arg(long)]
    pub strict: bool,
}

/// Outcome of [`ingest`]: the aggregate and the rejected files with their reasons.
#[derive(Debug)]
pub struct Ingested {
    /// Contexts of every accepted file.
    pub profile: HeapProfile,
    /// `(file, reason)` of every rejected file.
    pub rejected: Vec<(PathBuf, String)>,
}

/// Parses, symbolizes and aggregates `files` with `binary`; bad files are collected in
/// [`Ingested::rejected`] and leave the aggregate untouched.
pub fn ingest(binary: &MemProfBinary, files: &[PathBuf]) -> Ingested {
    let mut profile = HeapProfile::new(Some(binary.build_id().clone()));
    let mut rejected = Vec::new();
    for path in files {
        let folded = RawMemProfile::read(path)
            .map_err(|e| e.to_string())
            .and_then(|raw| fold_in(&mut profile, binary, path, &raw).map_err(|e| e.to_string()));
        if let Err(reason) = folded {
            rejected.push((path.clone(), reason));
        }
    }
    Ingested { profile, rejected }
}

/// Symbolizes one parsed raw profile (read from `path`, which names it in errors) with
/// `binary` and folds it into `profile` whole, or leaves `profile` untouched on error. The
/// one ingest step shared by `pgo-agent heap` and the daemon's spool (`run::heap_spool`).
pub fn fold_in(
    profile: &mut HeapProfile,
    binary: &MemProfBinary,
    path: &Path,
    raw: &RawMemProfile,
) -> Result<(), MemProfSymbolizeError> {
    let symbolized = binary.symbolize(path, raw)?;
    profile.add(symbolized);
    Ok(())
}

/// Runs `pgo-agent heap`.
pub fn run(args: HeapArgs) -> anyhow::Result<ExitCode> {
    let binary = MemProfBinary::load(&args.binary)
        .with_context(|| format!("loading {}", args.binary.display()))?;
    let Ingested { profile, rejected } = ingest(&binary, &args.profraw);
    for (path, reason) in &rejected {
        eprintln!("pgo-agent heap: rejected {}: {reason}", path.display());
    }
    if args.strict && !rejected.is_empty() {
        bail!(
            "{} of {} raw profiles rejected",
            rejected.len(),
            args.profraw.len()
        );
    }
    if profile.profiles() == 0 {
        bail!("no raw profile could be ingested");
    }
    let mut buf = Vec::new();
    match args.format {
        HeapFormat::Yaml => write_memprof_yaml(&profile, &mut buf)?,
        HeapFormat::Text => write_memprof_text(&profile, &mut buf)?,
    }
    std::fs::File::create(&args.output)
        .and_then(|mut f| f.write_all(&buf))
        .with_context(|| format!("writing {}", args.output.display()))?;
    let stats = profile.call_stack_stats();
    eprintln!(
        "pgo-agent heap: {} contexts from {} raw profiles ({} rejected); call stacks {} frames \
         in {} trie nodes (dedup ratio {:.2}); wrote {}",
        profile.len(),
        profile.profiles(),
        rejected.len(),
        stats.total_frames,
        stats.trie_nodes,
        stats.dedup_ratio(),
        args.output.display()
    );
    Ok(ExitCode::SUCCESS)
}

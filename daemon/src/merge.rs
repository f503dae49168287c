//! `pgo-agent merge`: sums unsymbolized profiles (from many agents, or many windows) and
//! writes the sum, or symbolizes it with a local binary. The core of `pgo-agent pull` too.
//!
//! Merging is the sum of counters per (context, range) and (context, branch), keyed and
//! written in sorted order, so the result does not depend on input order; since the
//! generators read only those sums, symbolizing a merge equals converting the concatenated
//! samples.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Args;
use collector::BuildId;
use exporter::format::unsymbolized::{
    line_context_name, read_unsymbolized, write_unsymbolized, UnsymbolizedProfile,
};
use symbolizer::generate::{generate_profile, GenerateOptions};
use symbolizer::ProfiledBinary;
use unwinder::CounterSet;

/// Largest input profile `merge`/`pull` read (bytes).
pub const MAX_INPUT_BYTES: u64 = 1 << 30;

/// What `merge` and `pull` write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MergeFormat {
    /// llvm-profgen's unsymbolized profile (offsets from the preferred base).
    Unsymbolized,
    /// LLVM text sample profile (needs --binary).
    Text,
    /// LLVM extbinary sample profile (needs --binary).
    Extbinary,
}

/// What `pgo-agent merge --help` adds below the flags.
const MERGE_AFTER_HELP: &str = "\
Inputs named by build id (a state directory's <build-id>.unsymbolized, the API's
<build-id>.window-all.unsymbolized) must all be of one build, and --binary of that build.

Examples:
  pgo-agent merge host1/BUILD_ID.unsymbolized host2/BUILD_ID.unsymbolized -o sum.unsymbolized
  pgo-agent merge host*/BUILD_ID.unsymbolized --binary ./app --format text -o app.txt";

/// `pgo-agent merge` arguments.
#[derive(Debug, Clone, Args)]
#[command(after_help = MERGE_AFTER_HELP)]
pub struct MergeArgs {
    /// Unsymbolized profiles to sum (as written to the state dir or served by
    /// `?format=unsymbolized`).
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// The profiled binary: needed for text/extbinary; its build id is checked against
    /// --build-id, else against the build id the inputs' file names carry
    /// (`<build-id>.unsymbolized`, `<build-id>.window-all.unsymbolized`).
    #[arg(long)]
    pub binary: Option<PathBuf>,
    /// Build id (hex) of the inputs, checked against --binary; without it, the one the
    /// inputs' file names carry, if any.
    #[arg(long)]
    pub build_id: Option<String>,
    /// Output format (default: extbinary with --binary, else unsymbolized).
    #[arg(long, value_enum)]
    pub format: Option<MergeFormat>,
    /// Output file.
    #[arg(short, long)]
    pub output: PathBuf,
}

/// Runs `pgo-agent merge`.
pub fn run(args: MergeArgs) -> anyhow::Result<std::process::ExitCode> {
    let mut texts = Vec::new();
    for p in &args.inputs {
        let len = std::fs::metadata(p)
            .with_context(|| format!("reading {}", p.display()))?
            .len();
        anyhow::ensure!(
            len <= MAX_INPUT_BYTES,
            "{}: {len} bytes exceeds the limit of {MAX_INPUT_BYTES}",
            p.display()
        );
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        texts.push((p.display().to_string(), text));
    }
    // The state directory's and the API's file names carry the build id: summing
    // aggregates of two builds, or reading one against another build's binary, would count
    // addresses of one build in the other's code.
    // --build-id, when given, is the build: file names are not read for one (a name of 32
    // or more hex digits may be a content hash).
    let named = match &args.build_id {
        Some(_) => None,
        None => named_build_id(&args.inputs)?,
    };
    let build_id = args
        .build_id
        .clone()
        .or_else(|| named.as_ref().map(|(id, _)| id.clone()));
    merge_and_write(
        &texts,
        args.binary.as_deref(),
        build_id.as_deref(),
        args.format,
        &args.output,
    )
    .map_err(|e| match &named {
        Some((id, input)) => e.context(format!(
            "{} is named for build id {id} (give --build-id to say which build the inputs are)",
            input.display()
        )),
        None => e,
    })?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// Sums `inputs` (name, unsymbolized text) and writes `format` to `output`; text and
/// extbinary are generated with `binary` (llvm-profgen's default options).
pub fn merge_and_write(
    inputs: &[(String, String)],
    binary: Option<&Path>,
    build_id: Option<&str>,
    format: Option<MergeFormat>,
    output: &Path,
) -> anyhow::Result<()> {
    let binary = match binary {
        Some(p) => Some(load_binary(p, build_id)?),
        None => None,
    };
    let format = format.unwrap_or(if binary.is_some() {
        MergeFormat::Extbinary
    } else {
        MergeFormat::Unsymbolized
    });
    let read_all = |base: u64| -> anyhow::Result<UnsymbolizedProfile> {
        let mut merged = UnsymbolizedProfile::default();
        for (name, text) in inputs {
            let p = read_unsymbolized(text, base)
                .with_context(|| format!("reading unsymbolized profile {name}"))?;
            merged.merge(&p);
        }
        Ok(merged)
    };
    // Without the binary, the base is recovered from the external sentinel (when a branch
    // has one), so the sum sorts its counters by address exactly as llvm-profgen does.
    let (base, merged) = match &binary {
        Some(b) => (b.preferred_base(), read_all(b.preferred_base())?),
        None => {
            let mut merged = read_all(0)?;
            match merged.sentinel_base().filter(|&b| b != 0) {
                Some(b) => {
                    merged.rebase(b);
                    (b, merged)
                }
                None => (0, merged),
            }
        }
    };
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(output).with_context(|| format!("creating {}", output.display()))?,
    );
    match (format, &binary) {
        (MergeFormat::Unsymbolized, _) => merged.write(&mut out, base)?,
        (_, None) => bail!("--format text/extbinary needs --binary"),
        (f, Some(b)) => {
            let Some(counters) = merged.to_counter_set_for(base, b.has_pseudo_probes()) else {
                bail!(
                    "the profiles have symbolized line contexts; only --format unsymbolized \
                     can merge them"
                );
            };
            write_counters(&counters, Some(b), base, f, &mut out)?;
        }
    }
    out.flush()
        .with_context(|| format!("writing {}", output.display()))?;
    Ok(())
}

/// The build id the inputs' file names give (`<build-id>.unsymbolized` in the state
/// directory, `<build-id>.window-all.unsymbolized` from the API), with the first input
/// naming it; `None` when no name is a build id; an error when two name different ones.
fn named_build_id(inputs: &[PathBuf]) -> anyhow::Result<Option<(String, PathBuf)>> {
    let mut named: Option<(String, PathBuf)> = None;
    for p in inputs {
        let Some(stem) = p
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split('.').next())
        else {
            continue;
        };
        // A GNU build id is 20 bytes (SHA-1) or 16 (MD5/UUID); shorter names are not taken
        // for one.
        let is_build_id =
            stem.len() >= 32 && stem.len() % 2 == 0 && stem.bytes().all(|b| b.is_ascii_hexdigit());
        if !is_build_id {
            continue;
        }
        let id = stem.to_ascii_lowercase();
        match &named {
            Some((first, first_input)) if *first != id => bail!(
                "{} is the aggregate of build id {first} and {} of build id {id} (their file \
                 names): profiles of different builds cannot be summed",
                first_input.display(),
                p.display()
            ),
            Some(_) => {}
            None => named = Some((id, p.clone())),
        }
    }
    Ok(named)
}

/// Loads the binary at `path`, checking its build id against `build_id` (hex) when given.
pub fn load_binary(path: &Path, build_id: Option<&str>) -> anyhow::Result<ProfiledBinary> {
    let Some(want) = build_id.map(str::trim) else {
        return crate::binary_loading::load_binary_for(path, None, true);
    };
    // The note in the file's head first: another build's binary is refused before it is
    // loaded (and before its load's warnings are printed).
    if let Ok(Some(have)) = symbolizer::elf_image::build_id_of_file_head(path) {
        check_build_id(path, Some(&have), want)?;
    }
    let b = crate::binary_loading::load_binary_for(path, None, true)?;
    check_build_id(path, b.build_id(), want)?;
    Ok(b)
}

/// An error unless `have`, the build id of the binary at `path`, is `want` (hex).
fn check_build_id(path: &Path, have: Option<&BuildId>, want: &str) -> anyhow::Result<()> {
    let have = have.map(|i| i.to_hex()).unwrap_or_default();
    anyhow::ensure!(
        have.eq_ignore_ascii_case(want),
        "{} has build id {have:?}, not {want}",
        path.display()
    );
    Ok(())
}

/// Writes `counters` (in preferred addresses) as `format`: the unsymbolized profile
/// (offsets from `binary`'s preferred base, else from `base`; line contexts need `binary`
/// to be printed, as the daemon's state files print them), or the text / extbinary
/// profile generated with llvm-profgen's default options (needs `binary`). `merge`,
/// `pull` and `pull --clickhouse` write through here.
pub fn write_counters(
    counters: &CounterSet,
    binary: Option<&ProfiledBinary>,
    base: u64,
    format: MergeFormat,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let opts = GenerateOptions::default();
    match (format, binary) {
        (MergeFormat::Unsymbolized, None) => write_unsymbolized(out, counters, base, None)?,
        (MergeFormat::Unsymbolized, Some(b)) => {
            let base = b.preferred_base();
            let line_context = |key: &[u64]| line_context_name(b, key, base, &opts);
            write_unsymbolized(out, counters, base, Some(&line_context))?
        }
        (_, None) => bail!("--format text/extbinary needs --binary"),
        (f, Some(b)) => {
            let profile = generate_profile(b, counters, &opts);
            match f {
                MergeFormat::Text => exporter::format::llvm_text::write(&profile, out)?,
                _ => exporter::format::extbinary::write(&profile, out)?,
            }
        }
    }
    Ok(())
}

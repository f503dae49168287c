//! `pgo-agent convert`: LBR samples to a sample profile, with llvm-profgen 19's flag
//! spellings and defaults for the flags it supports.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use profgen::{AddressBase, ConvertOptions, Input, PhaseTimer};
use symbolizer::generate::GenerateOptions;
use symbolizer::listing::ListingOptions;
use symbolizer::profile::ThresholdRule;

/// Arguments of `pgo-agent convert`. Spellings follow llvm-profgen 19: `--perfscript=F` and
/// `--perfscript F` both work, as do the short aliases `--ps`, `--pd`, `--up` and
/// single-dash long options (`-perfscript=F`). Boolean flags accept `=true/false/1/0`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct ConvertArgs {
    /// perf script text (`perf script -F ip,brstack --show-mmap-events`), with call stacks
    /// for a context-sensitive profile. Samples without branch stack (`perf record -g` of
    /// cpu-clock or cycles): `perf script -F ip,dso --show-mmap-events`, counted by leading
    /// IP. Some perf versions (6.1) print the call-stack addresses of a PIE as file offsets,
    /// which llvm-profgen and this reader take as addresses (contexts are lost): give such
    /// a recording's perf.data with `--perfdata` instead.
    #[arg(long, visible_alias = "ps", value_name = "FILE", group = "input")]
    pub perfscript: Option<PathBuf>,
    /// perf.data recorded with `perf record -b` (and `-g` for context-sensitive profiles),
    /// file mode or pipe mode (`perf record -o - > FILE`, `perf inject -o -`); read
    /// directly, no `perf` binary needed. Samples without branch stack (`perf record -e
    /// cpu-clock:u -g`) are counted by leading IP, as the daemon counts them: a line's
    /// samples are summed (as `--leading-ip-only` sums them). Each process that mapped the
    /// binary is placed by its own mapping (`perf record -a` of several processes of one
    /// PIE); data mappings (`--call-graph dwarf`, `-d`) are ignored.
    #[arg(long, visible_alias = "pd", value_name = "FILE", group = "input")]
    pub perfdata: Option<PathBuf>,
    /// An unsymbolized profile written by `--skip-symbolization` (ours or llvm-profgen's).
    #[arg(long, visible_alias = "up", value_name = "FILE", group = "input")]
    pub unsymbolized_profile: Option<PathBuf>,
    /// An LLVM sample profile (text or extbinary) to post-process again for `--binary`
    /// (trimming, ambiguous-profile filtering, the output options); flat and nested
    /// profiles only (flat context-sensitive profiles are refused).
    #[arg(long, value_name = "FILE", group = "input")]
    pub llvm_sample_profile: Option<PathBuf>,
    /// The profiled executable (the one the samples were taken from).
    #[arg(long, value_name = "FILE", required = true)]
    pub binary: PathBuf,
    /// The binary's symbols and DWARF, when `--binary` is stripped of them (llvm-profgen's
    /// `--debug-binary`): a `.debug` file (`objcopy --only-keep-debug`) or the unstripped
    /// build. Code and probes are read from `--binary`; DWARF from this file; symbols from
    /// `--binary` when it has any (as llvm-profgen 19), else from this file, so a
    /// `strip -s` binary converts like its unstripped build (llvm-profgen 19 writes an
    /// empty profile for it). Without this flag, a binary lacking symbols or DWARF gets
    /// its debug file by build id from `/usr/lib/debug`, its `.gnu_debuglink`, or the
    /// debuginfod servers of `DEBUGINFOD_URLS`.
    #[arg(long, value_name = "FILE")]
    pub debug_binary: Option<PathBuf>,
    /// The DWARF package (`llvm-dwp` output) of a `-gsplit-dwarf` binary, whose functions
    /// and inline frames are in split units (llvm-profgen's `--dwp`). Without it,
    /// `<binary>.dwp` (`<debug-binary>.dwp` with `--debug-binary`) is read when present,
    /// else the `.dwo` files the binary names, as llvm-profgen 19 does.
    #[arg(long, value_name = "FILE")]
    pub dwp: Option<PathBuf>,
    /// Where to write the profile (`-`: the standard output).
    #[arg(long, short = 'o', value_name = "FILE", required = true)]
    pub output: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "extbinary")]
    pub format: OutputFormat,
    /// Write the unsymbolized profile (range and branch counters per context) and stop.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub skip_symbolization: bool,
    /// Only MMAP2 events of this process id place the binary (0: any process), as in
    /// llvm-profgen.
    #[arg(long, value_name = "PID", default_value_t = 0)]
    pub pid: u32,
    /// Ignore call stacks of hybrid samples: produce a flat (non-CS) profile from the LBRs.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub ignore_stack_samples: bool,
    /// Run the CS pre-inliner (llvm-profgen's default: true): contexts estimated to be
    /// inlined stay, the others merge into base profiles; the profile is marked pre-inlined.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_bool)]
    pub csspgo_preinliner: Option<bool>,
    /// Convert the CS profile into a nested profile (llvm-profgen's default: true).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_bool)]
    pub gen_cs_nested_profile: Option<bool>,
    /// Nested CS profiles: also merge every inlined context into its function's
    /// top-level profile (a base profile for callees the compiler may not inline, e.g. in
    /// ThinLTO's pre-link phase); the nested copies are marked as duplicated.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub generate_merged_base_profiles: bool,
    /// Pre-inliner threshold for hot call sites (1500 when not given).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub sample_profile_hot_inline_threshold: Option<i32>,
    /// Pre-inliner threshold for cold call sites (0 when not given).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub sample_profile_cold_inline_threshold: Option<i32>,
    /// Upper bound of a function's size growth by pre-inlining (50000 when not given).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub sample_profile_inline_limit_max: Option<i32>,
    /// Pre-inliner: a function may grow to this many times its size by inlining (12 when
    /// not given; LLVM's `--sample-profile-inline-growth-limit`).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub sample_profile_inline_growth_limit: Option<i32>,
    /// Pre-inliner: the size a function may always grow to (100 when not given; LLVM's
    /// `--sample-profile-inline-limit-min`).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub sample_profile_inline_limit_min: Option<i32>,
    /// Pre-inliner: order the members of a recursive call-graph cycle by call weight
    /// (LLVM's `--sort-profiled-scc-member`, true by default).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "true", value_parser = parse_bool)]
    pub sort_profiled_scc_member: bool,
    /// Pre-inliner: factor on the size threshold of contexts the profiled binary already
    /// inlined (probe profiles), to favour the compiler's earlier decision (100 when not
    /// given).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub csspgo_preinliner_multiplier_for_previous_inlining: Option<i32>,
    /// Use context-sensitive byte sizes (else body-sample counts) as pre-inliner costs.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "true", value_parser = parse_bool)]
    pub use_context_cost_for_preinliner: bool,
    /// Pre-inliner: inline exactly the contexts the profiled binary inlined (probe
    /// profiles: contexts whose leaf probe was inlined), whatever their size and count.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub csspgo_replay_preinline: bool,
    /// Drop cold profiles (below the hot threshold for CS profiles, as llvm-profgen does).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub trim_cold_profile: bool,
    /// Merge cold contexts into their last frames (default true, but off when the
    /// pre-inliner runs unless given).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_bool)]
    pub csprof_merge_cold_context: Option<bool>,
    /// Frames kept when merging cold contexts.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub csprof_max_cold_context_depth: u32,
    /// Override the summary's hot count threshold.
    #[arg(long, value_name = "N")]
    pub profile_summary_hot_count: Option<u64>,
    /// Override the summary's cold count threshold.
    #[arg(long, value_name = "N")]
    pub profile_summary_cold_count: Option<u64>,
    /// The hot count threshold is the minimum count of the counts making up this share of
    /// the total, per million (LLVM's default 990000; at most 999999).
    #[arg(long, value_name = "PER_MILLION", default_value_t = symbolizer::profile::summary::HOT_CUTOFF,
          value_parser = parse_cutoff)]
    pub profile_summary_cutoff_hot: u32,
    /// The cold count threshold likewise (LLVM's default 999999, the largest).
    #[arg(long, value_name = "PER_MILLION", default_value_t = symbolizer::profile::summary::COLD_CUTOFF,
          value_parser = parse_cutoff)]
    pub profile_summary_cutoff_cold: u32,
    /// CS profiles: compress recursion by collapsing repeated adjacent frame sequences of up
    /// to N frames in each context (-1, the default: any length; 0: off, which needs
    /// `--csspgo-preinliner=false`).
    #[arg(long, value_name = "N", allow_negative_numbers = true, default_value_t = -1)]
    pub compress_recursion: i32,
    /// CS profiles: keep at most the N innermost frames of each context (-1, the default:
    /// all).
    #[arg(long, value_name = "N", allow_negative_numbers = true, default_value_t = -1)]
    pub csprof_max_context_depth: i32,
    /// Recompute each profile's total samples as the sum of its body samples and its
    /// inlinees' totals.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub update_total_samples: bool,
    /// CS probe profiles: infer the frames of tail calls that the call stack misses from
    /// the sampled call graph (llvm-profgen's default: true).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "true", value_parser = parse_bool)]
    pub infer_missing_frames: bool,
    /// Missing-frame inference: the most functions a search for a tail-call chain goes
    /// through (the default, 4294967294, is no limit).
    #[arg(long, value_name = "N", default_value_t = symbolizer::generate::missing_frames::DEFAULT_MAX_SEARCH_DEPTH)]
    pub max_search_depth: u32,
    /// Read a pseudo-probe binary as a line-table binary: its probes are ignored and the
    /// profile is line-based.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub use_dwarf_correlation: bool,
    /// The binary is the Linux kernel image (vmlinux): it is placed by perf's
    /// `[kernel.kallsyms]` mmap events (`[kernel.kallsyms]_text`, `_stext`) instead of by its
    /// file name, perf.data samples of every process are read, and a recording without a
    /// kernel mmap event is an error.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub kernel: bool,
    /// extbinary: write function names as MD5 hashes (a fixed-length MD5 name table);
    /// ignored, with a warning, for other formats.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub use_md5: bool,
    /// extbinary: whether the written summary of a flat CS profile merges the contexts of
    /// each function (LLVM's default) or counts each context on its own (`=false`).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_bool)]
    pub profile_summary_contextless: Option<bool>,
    /// Print the wall time of each phase of the conversion on stderr when it ends.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub time_profgen: bool,
    /// Warn when the profile density (samples per block of the hot functions) is below this
    /// (llvm-profgen's suggestion to sample longer or faster).
    #[arg(long, value_name = "X", default_value_t = symbolizer::verify::DENSITY_THRESHOLD)]
    pub profile_density_threshold: f64,
    /// The share of samples, in millionths, whose functions make the profile density.
    #[arg(long, value_name = "N", default_value_t = symbolizer::verify::DENSITY_CUTOFF_HOT,
          value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub profile_density_cutoff_hot: u32,
    /// Print the profile density on stdout.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub show_density: bool,
    /// Write addresses of the unsymbolized profile as offsets from the binary's preferred
    /// base (llvm-profgen's default).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "true", value_parser = parse_bool)]
    pub use_offset: bool,
    /// With `--use-offset`: offsets of the unsymbolized profile are from the first loadable
    /// segment's address instead of the first executable segment's.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub use_first_loadable_segment_as_base: bool,
    /// A profile of sample IPs only: each LBR-only sample counts its leading IP (the
    /// branch stack is ignored) and line-based body counts are summed, not maxed.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub leading_ip_only: bool,
    /// The sampling period (`perf record -c N`) of LBR-only samples: each sample counts N,
    /// divided by its branches less one (unless `--leading-ip-only`), so that LBR and
    /// leading-IP profiles have comparable magnitudes. Not given: each sample counts 1.
    #[arg(long, value_name = "N")]
    pub sample_period: Option<u64>,
    /// Keep only the LBR-only samples of this event (repeatable): the event name `perf
    /// script -F event,ip,brstack` prints first on each line (`cycles:`), its trailing `:`
    /// removed. A line without an event name is warned about, and so is one with an event
    /// name when no filter is given.
    #[arg(long, value_name = "NAME")]
    pub perf_event: Vec<String>,
    /// `--perf-event` for each of comma-separated names.
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub perf_events: Vec<String>,
    /// Flat profiles: every function of the binary gets its zero-count lines, sampled or
    /// not (by default only functions with a sampled range do).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub fill_zero_for_all_funcs: bool,
    /// extbinary: write the profile symbol list (every function name in the binary's DWARF),
    /// so the compiler can tell functions without samples from functions not profiled.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub populate_profile_symbol_list: bool,
    /// Print each mmap event of the input on stdout (`Mmap: Binary PATH loaded at ADDR:`).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub show_mmap_events: bool,
    /// Print a warning per item behind the summary warnings (each invalid return address,
    /// each context truncated at a call without a probe).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub show_detailed_warning: bool,
    /// perf.data input: do not repair the call chains of samples taken in a prologue or
    /// epilogue from their recorded user registers and stack words
    /// (`PERF_SAMPLE_REGS_USER` / `PERF_SAMPLE_STACK_USER`, which `pgo-agent record` and the
    /// daemon record); drop them as llvm-profgen 19 does, for its exact output. perf script
    /// input carries no registers and always gets llvm-profgen's behaviour.
    #[arg(long)]
    pub no_stack_repair: bool,
    /// Print the disassembly listing of the binary's text sections on stdout and exit
    /// without reading samples or writing a profile. Instruction text is iced-x86's AT&T
    /// spelling, which can differ from LLVM MC's (docs/llvm-profgen-flags.md).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub show_disassembly_only: bool,
    /// With --show-disassembly-only: list only these functions (symbol names, comma
    /// separated; canonical names with --show-canonical-fname).
    #[arg(long, value_name = "F1,F2,...", value_delimiter = ',')]
    pub disassemble_functions: Vec<String>,
    /// With --show-disassembly-only: each instruction's inline frames, innermost first
    /// (`func:line-offset[.discriminator] @ caller:...`).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub show_source_locations: bool,
    /// With --show-disassembly-only: canonical function names (`.llvm.N` and `.part.N`
    /// suffixes stripped; `.__uniq.N` kept, as LLVM 19) in headers and source locations.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub show_canonical_fname: bool,
    /// Print the `Pseudo Probe Desc:` block of a probe binary on stdout; with
    /// --show-disassembly-only also the probes before the instruction at their address,
    /// and source locations as probe indices.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub show_pseudo_probe: bool,
}

const AFTER_HELP: &str = "\
Examples:
  pgo-agent convert --perfscript=app.perfscript --binary=./app --output=app.prof
  pgo-agent convert --perfdata perf.data --binary ./app --format=text -o app.txt
  pgo-agent convert --perfdata perf.data --binary ./app --format=text -o flat-cs.txt \\
      --csspgo-preinliner=false --gen-cs-nested-profile=false
  pgo-agent convert --perfdata perf.data --binary ./app --skip-symbolization -o app.raw
  pgo-agent convert --llvm-sample-profile app.prof --binary ./app --use-md5 -o app.md5.prof
  pgo-agent convert --binary ./app -o /dev/null --show-disassembly-only \
      --disassemble-functions=main --show-source-locations --show-pseudo-probe

Options of newer llvm-profgen releases that llvm-profgen 19 does not have
(--mark-all-context-preinlined, --csprof-max-unsymbolized-context-depth) are rejected with
a message naming them; none is silently ignored. --time-profgen prints
convert's own phases (newer llvm-profgen's flag; llvm-profgen 19 has none). Every
llvm-profgen 19 option and its support: docs/llvm-profgen-flags.md.";

/// Output formats `convert` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// LLVM's text sample profile.
    Text,
    /// LLVM's extensible binary sample profile (what clang reads fastest).
    Extbinary,
    /// LLVM's older raw binary sample profile (line-based profiles only, as llvm-profgen
    /// writes it).
    Binary,
}

/// llvm-profgen's boolean spellings (LLVM `cl::opt<bool>`).
fn parse_bool(s: &str) -> Result<bool, String> {
    match s {
        "true" | "TRUE" | "True" | "1" => Ok(true),
        "false" | "FALSE" | "False" | "0" => Ok(false),
        _ => Err(format!("'{s}' is not a boolean: use true, false, 1 or 0")),
    }
}

/// A summary cutoff, per million: LLVM stops with "Desired percentile exceeds the maximum
/// cutoff" above the largest cutoff the summary computes.
fn parse_cutoff(s: &str) -> Result<u32, String> {
    let max = *symbolizer::profile::DEFAULT_CUTOFFS
        .last()
        .unwrap_or(&999_999);
    match s.parse::<u32>() {
        Ok(v) if v <= max => Ok(v),
        _ => Err(format!(
            "'{s}' is not a cutoff: give a share per million, 0..={max}"
        )),
    }
}

/// llvm-profgen 19 options that `convert` does not implement (yet). Given one, convert
/// fails with a message naming it instead of ignoring it.
pub const UNSUPPORTED_LLVM_PROFGEN_OPTIONS: &[&str] = &[
    "mark-all-context-preinlined",
    "csprof-max-unsymbolized-context-depth",
];

/// Rewrites llvm-style single-dash long options (`-perfscript=F`) to `--perfscript=F` and
/// rejects llvm-profgen options `convert` does not implement. `args` are the arguments
/// after `convert`.
pub fn normalize_llvm_args(args: &[String]) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::with_capacity(args.len());
    for arg in args {
        let arg = if arg.len() > 2 && arg.starts_with('-') && !arg.starts_with("--") {
            format!("-{arg}")
        } else {
            arg.clone()
        };
        if let Some(long) = arg.strip_prefix("--") {
            let name = long.split('=').next().unwrap_or(long);
            if UNSUPPORTED_LLVM_PROFGEN_OPTIONS.contains(&name) {
                bail!(
                    "--{name} is an option of newer llvm-profgen releases (llvm-profgen 19 \
                     rejects it too) and is not implemented by `pgo-agent convert`; run without \
                     it (see `pgo-agent convert --help` for what is supported)"
                );
            }
        }
        out.push(arg);
    }
    Ok(out)
}

impl ConvertArgs {
    /// The conversion these arguments ask for (the command-line tools' debug-file lookup
    /// for a binary lacking symbols or DWARF).
    pub fn to_options(&self) -> ConvertOptions {
        let input = if let Some(p) = &self.perfscript {
            Some(Input::PerfScript(p.clone()))
        } else if let Some(p) = &self.perfdata {
            Some(Input::PerfData(p.clone()))
        } else if let Some(p) = &self.unsymbolized_profile {
            Some(Input::Unsymbolized(p.clone()))
        } else {
            self.llvm_sample_profile.clone().map(Input::SampleProfile)
        };
        let address_base = if !self.use_offset {
            AddressBase::Absolute
        } else if self.use_first_loadable_segment_as_base {
            AddressBase::FirstLoadableSegment
        } else {
            AddressBase::FirstExecutableSegment
        };
        ConvertOptions {
            input,
            binary: self.binary.clone(),
            debug_binary: self.debug_binary.clone(),
            debug_file_finder: crate::binary_loading::cli_debug_file_finder(),
            use_dwarf_correlation: self.use_dwarf_correlation,
            dwp: self.dwp.clone(),
            kernel: self.kernel,
            output: self.output.clone(),
            format: match self.format {
                OutputFormat::Text => profgen::OutputFormat::Text,
                OutputFormat::Extbinary => profgen::OutputFormat::Extbinary,
                OutputFormat::Binary => profgen::OutputFormat::Binary,
            },
            skip_symbolization: self.skip_symbolization,
            address_base,
            pid: self.pid,
            ignore_stack_samples: self.ignore_stack_samples,
            sample_period: self.sample_period,
            no_stack_repair: self.no_stack_repair,
            perf_events: self.event_filter(),
            show_mmap_events: self.show_mmap_events,
            show_detailed_warning: self.show_detailed_warning,
            generate: self.generate_options(),
            use_md5: self.use_md5,
            profile_summary_contextless: self.profile_summary_contextless,
            populate_profile_symbol_list: self.populate_profile_symbol_list,
            profile_density_threshold: self.profile_density_threshold,
            profile_density_cutoff_hot: self.profile_density_cutoff_hot,
            show_density: self.show_density,
            listing: ListingOptions {
                functions: self.disassemble_functions.clone(),
                source_locations: self.show_source_locations,
                canonical_names: self.show_canonical_fname,
                pseudo_probes: self.show_pseudo_probe,
            },
        }
    }

    /// The event names of `--perf-event` and `--perf-events` (empty: no filter).
    pub fn event_filter(&self) -> Vec<String> {
        self.perf_event
            .iter()
            .chain(&self.perf_events)
            .cloned()
            .collect()
    }

    /// The generation options these arguments ask for (llvm-profgen 19 defaults for the
    /// rest).
    pub fn generate_options(&self) -> GenerateOptions {
        let mut o = GenerateOptions {
            preinliner: self.csspgo_preinliner.unwrap_or(true),
            nested_profile: self.gen_cs_nested_profile.unwrap_or(true),
            ..GenerateOptions::default()
        };
        if let Some(v) = self.sample_profile_hot_inline_threshold {
            o.preinline.hot_threshold = v;
        }
        if let Some(v) = self.sample_profile_cold_inline_threshold {
            o.preinline.cold_threshold = v;
        }
        if let Some(v) = self.sample_profile_inline_limit_max {
            o.preinline.limit_max = v;
        }
        if let Some(v) = self.sample_profile_inline_growth_limit {
            o.preinline.growth_limit = v;
        }
        if let Some(v) = self.sample_profile_inline_limit_min {
            o.preinline.limit_min = v;
        }
        o.preinline.sort_scc_members = self.sort_profiled_scc_member;
        if let Some(v) = self.csspgo_preinliner_multiplier_for_previous_inlining {
            o.preinline.previous_inlining_multiplier = v;
        }
        o.preinline.use_context_cost = self.use_context_cost_for_preinliner;
        o.trim_cold_profile = self.trim_cold_profile;
        if let Some(v) = self.csprof_merge_cold_context {
            o.merge_cold_context = v;
            o.merge_cold_context_given = true;
        }
        o.max_cold_context_depth = self.csprof_max_cold_context_depth as usize;
        o.compress_recursion = self.compress_recursion;
        o.max_context_depth = self.csprof_max_context_depth;
        o.update_total_samples = self.update_total_samples;
        o.infer_missing_frames = self.infer_missing_frames;
        o.max_search_depth = self.max_search_depth;
        o.preinline.replay = self.csspgo_replay_preinline;
        o.leading_ip_only = self.leading_ip_only;
        o.fill_zero_for_all_funcs = self.fill_zero_for_all_funcs;
        o.thresholds = ThresholdRule {
            cutoff_hot: self.profile_summary_cutoff_hot,
            cutoff_cold: self.profile_summary_cutoff_cold,
            hot_count: self.profile_summary_hot_count,
            cold_count: self.profile_summary_cold_count,
        };
        o.merged_base_profiles = self.generate_merged_base_profiles;
        o
    }
}

/// Runs `pgo-agent convert`; with `--time-profgen`, prints the time of each phase on
/// stderr at the end.
pub fn run(args: ConvertArgs) -> anyhow::Result<ExitCode> {
    let options = args.to_options();
    if args.show_disassembly_only {
        profgen::print_listing(&options)
            .with_context(|| format!("listing {}", args.binary.display()))?;
        return Ok(ExitCode::SUCCESS);
    }
    options.validate()?;
    let timer = PhaseTimer::new(args.time_profgen);
    let converted = profgen::convert(&options, &timer);
    timer.print_report();
    converted.with_context(|| {
        format!(
            "converting samples for {} into {}",
            args.binary.display(),
            args.output.display()
        )
    })?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn single_dash_long_options_become_double_dash() {
        let out =
            normalize_llvm_args(&strings(&["-perfscript=a", "-o", "x", "--binary", "b"])).unwrap();
        assert_eq!(
            out,
            strings(&["--perfscript=a", "-o", "x", "--binary", "b"])
        );
    }

    #[test]
    fn unimplemented_llvm_options_are_rejected_by_name() {
        let err = normalize_llvm_args(&strings(&["--mark-all-context-preinlined=1"])).unwrap_err();
        assert!(
            err.to_string().contains("--mark-all-context-preinlined"),
            "{err}"
        );
        let err = normalize_llvm_args(&strings(&["-csprof-max-unsymbolized-context-depth=3"]))
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("--csprof-max-unsymbolized-context-depth"),
            "{err}"
        );
    }

    #[test]
    fn booleans_take_llvm_spellings() {
        assert_eq!(parse_bool("1"), Ok(true));
        assert_eq!(parse_bool("false"), Ok(false));
        assert!(parse_bool("yes").is_err());
    }
}

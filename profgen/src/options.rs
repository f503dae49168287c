//! [`ConvertOptions`]: what a conversion reads, how it counts and generates, and what it
//! writes; independent of any command line (`pgo-agent convert` maps its arguments here).

use std::path::PathBuf;

use symbolizer::debug_file::DebugFileFinder;
use symbolizer::generate::GenerateOptions;
use symbolizer::listing::ListingOptions;
use symbolizer::ProfiledBinary;
use unwinder::UnwindOptions;

/// The input of a conversion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// perf script text (LBR-only, hybrid with call stacks, or stack-only).
    PerfScript(PathBuf),
    /// A perf.data file.
    PerfData(PathBuf),
    /// An unsymbolized profile (ours or llvm-profgen's).
    Unsymbolized(PathBuf),
    /// An LLVM sample profile (text or extbinary) to post-process again.
    SampleProfile(PathBuf),
}

/// Output formats of a symbolized profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// LLVM's text sample profile.
    Text,
    /// LLVM's extensible binary sample profile.
    Extbinary,
    /// LLVM's older raw binary sample profile (line-based profiles only, as in LLVM).
    Binary,
}

/// What addresses of an unsymbolized profile are relative to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressBase {
    /// Absolute addresses (llvm-profgen's `--use-offset=false`).
    Absolute,
    /// Offsets from the first executable segment's preferred address (the default).
    FirstExecutableSegment,
    /// Offsets from the first loadable segment's address
    /// (`--use-first-loadable-segment-as-base`).
    FirstLoadableSegment,
}

impl AddressBase {
    /// The address of `binary` this base stands for.
    pub fn of(self, binary: &ProfiledBinary) -> u64 {
        match self {
            AddressBase::Absolute => 0,
            AddressBase::FirstExecutableSegment => binary.preferred_base(),
            AddressBase::FirstLoadableSegment => binary.first_loadable_address(),
        }
    }
}

/// Everything a conversion needs (llvm-profgen 19's options of the same names).
#[derive(Clone)]
pub struct ConvertOptions {
    /// The samples (or profile) to convert; `None` is refused by [`crate::convert`].
    pub input: Option<Input>,
    /// The profiled executable.
    pub binary: PathBuf,
    /// Its symbols and DWARF when the binary is stripped of them (`--debug-binary`).
    pub debug_binary: Option<PathBuf>,
    /// Where the debug file of a binary lacking symbols or DWARF is looked for when
    /// `debug_binary` is not given.
    pub debug_file_finder: DebugFileFinder,
    /// Read a pseudo-probe binary as a line-table binary (`--use-dwarf-correlation`).
    pub use_dwarf_correlation: bool,
    /// `--dwp`: the DWARF package of a `-gsplit-dwarf` binary (`None`: `<binary>.dwp` when
    /// it opens, else the `.dwo` files the binary names).
    pub dwp: Option<PathBuf>,
    /// `--kernel`: the binary is the kernel image, placed by perf's `[kernel.kallsyms]` mmap
    /// events whatever their offset; perf.data samples of every process are read.
    pub kernel: bool,
    /// Where the profile is written.
    pub output: PathBuf,
    /// The format of a symbolized profile.
    pub format: OutputFormat,
    /// Write the unsymbolized profile (`--skip-symbolization`).
    pub skip_symbolization: bool,
    /// What unsymbolized addresses are relative to.
    pub address_base: AddressBase,
    /// Only MMAP2 events of this process place the binary (0: any process).
    pub pid: u32,
    /// Ignore the call stacks of hybrid samples (`--ignore-stack-samples`).
    pub ignore_stack_samples: bool,
    /// Sampling period of LBR-only samples (`--sample-period`).
    pub sample_period: Option<u64>,
    /// perf.data input: keep the call chains of prologue and epilogue samples unrepaired
    /// (`--no-stack-repair`).
    pub no_stack_repair: bool,
    /// Keep only the LBR-only samples of these events (empty: no filter).
    pub perf_events: Vec<String>,
    /// Print each mmap event of the input on stdout.
    pub show_mmap_events: bool,
    /// Print a warning per item behind the summary warnings.
    pub show_detailed_warning: bool,
    /// Profile generation (pre-inliner, trimming, context depth, recursion compression,
    /// `leading_ip_only`, ...), which also sets the unwinder's context depth and recursion
    /// compression.
    pub generate: GenerateOptions,
    /// extbinary: function names as MD5 hashes (`--use-md5`; warned about for text).
    pub use_md5: bool,
    /// extbinary: write the profile symbol list (`--populate-profile-symbol-list`).
    pub populate_profile_symbol_list: bool,
    /// extbinary: `--profile-summary-contextless` when given (the written summary of a CS
    /// profile over merged contexts, LLVM's default, or over each context).
    pub profile_summary_contextless: Option<bool>,
    /// Warn when the profile density is below this.
    pub profile_density_threshold: f64,
    /// The share of samples, in millionths, whose functions make the profile density.
    pub profile_density_cutoff_hot: u32,
    /// Print the profile density on stdout.
    pub show_density: bool,
    /// The disassembly listing of [`crate::print_listing`]; its `pseudo_probes`
    /// (`--show-pseudo-probe`) also prints the probe descriptions before a conversion.
    pub listing: ListingOptions,
}

impl ConvertOptions {
    /// Refuses combinations the conversion does not implement.
    pub fn validate(&self) -> Result<(), crate::ConvertError> {
        if self.generate.compress_recursion == 0
            && self.generate.preinliner
            && !self.skip_symbolization
        {
            // Uncompressed recursive contexts through the pre-inliner give profiles that
            // differ from llvm-profgen 19's; refused rather than written different.
            return Err(crate::ConvertError::UncompressedRecursionWithPreinliner);
        }
        Ok(())
    }

    /// The binary's load description, marked as the kernel's with [`Self::kernel`].
    pub(crate) fn load_info(
        &self,
        binary: &symbolizer::ProfiledBinary,
    ) -> unwinder::BinaryLoadInfo {
        unwinder::BinaryLoadInfo {
            kernel: self.kernel,
            ..binary.load_info()
        }
    }

    /// The unwinder's options.
    pub(crate) fn unwind_options(&self) -> UnwindOptions {
        UnwindOptions {
            ignore_stack_samples: self.ignore_stack_samples,
            pid: (self.pid != 0).then_some(self.pid),
            unwind_threads: convert_threads(),
            max_context_depth: usize::try_from(self.generate.max_context_depth).ok(),
            compress_recursion: u32::try_from(self.generate.compress_recursion).ok(),
            leading_ip_only: self.generate.leading_ip_only,
            sample_period: self.sample_period,
            detailed_warnings: self.show_detailed_warning,
            stack_repair: matches!(self.input, Some(Input::PerfData(_))) && !self.no_stack_repair,
            ..UnwindOptions::default()
        }
    }
}

/// Most threads a conversion reads, parses and unwinds on.
const MAX_THREADS: usize = 8;

/// Threads a conversion reads, parses and unwinds on: every core.
pub(crate) fn convert_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_THREADS)
}

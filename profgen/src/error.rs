//! [`ConvertError`]: why a conversion failed, and [`LoadBinaryError`]: why the binary could
//! not be loaded. Each variant names the input (file, and the offset or line through the
//! reader's error where it knows one); a variant that wraps a cause says only its own
//! part, so the chain of causes prints each once.

use std::path::PathBuf;

use collector::perf_data::PerfDataError;
use collector::perf_script::PerfScriptError;
use exporter::format::extbinary::reader::ExtBinaryReadError;
use exporter::format::llvm_text_reader::TextReadError;
use exporter::format::unsymbolized::UnsymbolizedError;
use symbolizer::listing::ListingError;
use symbolizer::SymbolizerError;
use unwinder::UnwindError;

/// Why a binary could not be loaded for a conversion.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadBinaryError {
    /// The binary (or its debug file) could not be read or decoded.
    #[error(transparent)]
    Symbolizer(#[from] SymbolizerError),
    /// Nothing names the binary's code: it is stripped and no debug file was found.
    #[error(
        "{} has no symbol table and no debug file was found, so its functions \
         cannot be named; give the unstripped build or its debug file with \
         --debug-binary, put the debug file where it is looked for, or keep \
         the counters by address with --skip-symbolization. Tried:\n  {}",
        binary.display(),
        tried.join("\n  ")
    )]
    NoNames {
        /// The binary.
        binary: PathBuf,
        /// The places the debug-file lookup tried.
        tried: Vec<String>,
    },
}

/// Why a conversion failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConvertError {
    /// `--kernel` and no event mapped the kernel image (llvm-profgen 19's message).
    #[error("Kernel is requested, but no kernel is found in mmap events.")]
    KernelNotMapped,
    /// The options ask for `--compress-recursion=0` with the CS pre-inliner.
    #[error(
        "--compress-recursion=0 with the CS pre-inliner is not implemented by `pgo-agent \
         convert` yet; add --csspgo-preinliner=false, or leave recursion compressed"
    )]
    UncompressedRecursionWithPreinliner,
    /// No input file was given.
    #[error(
        "no input: give --perfscript, --perfdata, --unsymbolized-profile or \
         --llvm-sample-profile"
    )]
    NoInput,
    /// The binary could not be loaded.
    #[error("loading the binary")]
    LoadBinary(#[source] LoadBinaryError),
    /// A file could not be read.
    #[error("reading {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The output file could not be created.
    #[error("creating {}", path.display())]
    Create {
        /// The output file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The output could not be written.
    #[error("writing {}", path.display())]
    Write {
        /// The output file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The unsymbolized output could not be written.
    #[error("writing {}", path.display())]
    WriteUnsymbolized {
        /// The output file.
        path: PathBuf,
        /// The writer's error.
        source: UnsymbolizedError,
    },
    /// `--show-pseudo-probe`'s descriptions could not be written on stdout.
    #[error("writing the pseudo probe descriptions")]
    WriteProbeDescs(#[source] std::io::Error),
    /// The disassembly listing failed.
    #[error(transparent)]
    Listing(#[from] ListingError),
    /// An unsymbolized profile could not be read.
    #[error("reading unsymbolized profile {}", path.display())]
    Unsymbolized {
        /// The input file.
        path: PathBuf,
        /// The reader's error (with the line).
        source: UnsymbolizedError,
    },
    /// An unsymbolized profile has symbolized line contexts, which cannot become address
    /// counters.
    #[error(
        "{}: contexts are symbolized line contexts (`main:1 @ foo`); converting those \
         back to address counters is not supported yet",
        path.display()
    )]
    LineContextsAsCounters {
        /// The input file.
        path: PathBuf,
    },
    /// An extbinary sample profile could not be read.
    #[error("reading extbinary profile {}", path.display())]
    ExtBinaryProfile {
        /// The input file.
        path: PathBuf,
        /// The reader's error (with the offset).
        source: ExtBinaryReadError,
    },
    /// A text sample profile could not be read.
    #[error("reading profile {}", path.display())]
    TextProfile {
        /// The input file.
        path: PathBuf,
        /// The reader's error (with the line).
        source: TextReadError,
    },
    /// A sample profile is neither extbinary nor UTF-8 text.
    #[error("{}: neither a text nor an extbinary profile", path.display())]
    NotAProfile {
        /// The input file.
        path: PathBuf,
        /// Where the text stops being UTF-8.
        source: std::str::Utf8Error,
    },
    /// `--llvm-sample-profile` with a flat context-sensitive profile.
    #[error(
        "{}: a flat context-sensitive profile (`[main:1 @ foo]` contexts); \
         re-post-processing one (pre-inliner, nested conversion) with \
         --llvm-sample-profile is not implemented by `pgo-agent convert` yet; give a \
         nested or flat profile, or convert the samples again",
        path.display()
    )]
    FlatCsSampleProfile {
        /// The input file.
        path: PathBuf,
    },
    /// A perf.data file could not be opened or read.
    #[error("reading perf.data")]
    PerfData(#[source] PerfDataError),
    /// Reading the samples of an input failed part way.
    #[error("reading {}", path.display())]
    ReadSamples {
        /// The input file.
        path: PathBuf,
        /// The reader's error (with the offset).
        source: PerfDataError,
    },
    /// A perf script could not be read.
    #[error(transparent)]
    PerfScript(#[from] PerfScriptError),
    /// `--perf-event` on a perf.data whose samples are not LBR-only.
    #[error(
        "{}: --perf-event filters LBR-only samples (`perf record -b` without `-g`); \
         these samples have call stacks or no branch stack",
        path.display()
    )]
    EventFilterOnPerfData {
        /// The input file.
        path: PathBuf,
    },
    /// `--perf-event` on a perf script that is not LBR-only.
    #[error(
        "{}: --perf-event filters LBR-only perf scripts (`perf script -F event,ip,brstack`); \
         this script has call stacks or no branch stacks",
        path.display()
    )]
    EventFilterOnScript {
        /// The input file.
        path: PathBuf,
    },
    /// No process of the perf.data mapped the binary.
    #[error(
        "{}: no mmap event of {binary_name} found in perf data (no process mapped the binary{})",
        path.display(),
        pid.map(|p| format!(" with pid {p}")).unwrap_or_default()
    )]
    NoMappingProcess {
        /// The input file.
        path: PathBuf,
        /// The binary's name as the mmap events would name it.
        binary_name: String,
        /// `--pid`, when given.
        pid: Option<u32>,
    },
    /// Stack samples without branch stack, none of them in the binary's code.
    #[error(
        "{}: no sample with a branch stack, and none of the {samples} stack samples is in {binary_name}",
        path.display()
    )]
    NoLeadingIpSample {
        /// The input file.
        path: PathBuf,
        /// The stack samples read.
        samples: u64,
        /// The binary's name.
        binary_name: String,
    },
    /// A stack-only perf script failed and none of its stack lines names its file.
    #[error(
        "no stack line names its file: perf prints call-chain addresses as offsets in \
         their file, so convert needs the file named (`perf script -F ip,dso \
         --show-mmap-events`)"
    )]
    UnnamedStackFiles(#[source] Box<ConvertError>),
    /// Unwinding the samples of an input failed.
    #[error("unwinding samples of {}", path.display())]
    Unwind {
        /// The input file.
        path: PathBuf,
        /// The unwinder's error.
        source: UnwindError,
    },
    /// The unwinder refused an event (placing the binary, starting the aggregation).
    #[error(transparent)]
    Unwinder(#[from] UnwindError),
}

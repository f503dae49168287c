//! [`UprobeError`]: what can go wrong finding probe offsets and opening uprobe events.

use std::path::PathBuf;

use collector::live::LiveError;

/// Errors of the uprobe allocation sampler; each names the file or function concerned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UprobeError {
    /// Reading a file (an ELF, a /proc or /sys file) failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not an ELF object `object` can parse.
    #[error("{}: not a parsable ELF file: {what}", path.display())]
    Elf {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        what: String,
    },
    /// The function has no symbol, or its address lies in no `PT_LOAD` segment.
    #[error("{}: no probe offset for {function}: {what}", path.display())]
    NoSymbol {
        /// The file.
        path: PathBuf,
        /// The function.
        function: String,
        /// Why.
        what: &'static str,
    },
    /// The kernel has no uprobe PMU (`/sys/bus/event_source/devices/uprobe/type`).
    #[error("no uprobe PMU: {0}")]
    NoPmu(String),
    /// No libc could be found in the target's mappings.
    #[error("process {pid}: no libc mapping found in /proc/{pid}/maps")]
    NoLibc {
        /// The process.
        pid: i32,
    },
    /// Opening or mapping a perf event failed.
    #[error(transparent)]
    Live(#[from] LiveError),
    /// The in-kernel byte filter could not be loaded or attached.
    #[error("in-kernel byte filter: {0}")]
    Bpf(#[from] super::bpf::BpfError),
}

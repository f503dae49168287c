//! In-kernel byte sampling for the allocation probes: an eBPF program attached to each
//! uprobe perf event (`PERF_EVENT_IOC_SET_BPF`) decides, before the kernel writes the
//! sample, whether the call is sampled, so unsampled calls cost a trap and a few dozen BPF
//! instructions instead of a ~150-byte record, its call chain and the agent's parsing.
//!
//! Built here without a BPF library: [`insn`] encodes the instructions, [`sys`] calls
//! `bpf(2)` (`BPF_MAP_CREATE`, `BPF_MAP_UPDATE_ELEM`, `BPF_MAP_LOOKUP_ELEM`,
//! `BPF_PROG_LOAD`) and attaches, [`quantiles`] precomputes the exponential draws (no
//! floating point in BPF), [`filter`] assembles the program ([`ByteFilter`]).

pub mod filter;
pub mod insn;
pub mod quantiles;
pub mod sys;

pub use filter::{ByteFilter, FilterCounters, FilterState};

/// Why the in-kernel filter could not be set up (the session then samples in user space).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BpfError {
    /// A `bpf(2)` command, the attach ioctl, or reading a /sys file failed.
    #[error("{what}: {source}")]
    Syscall {
        /// The command.
        what: &'static str,
        /// The error (EPERM without CAP_BPF/CAP_SYS_ADMIN, ENOSYS/EINVAL on old kernels).
        source: std::io::Error,
    },
    /// `BPF_PROG_LOAD` refused the program; `log` is the verifier's (log level 1).
    #[error("BPF_PROG_LOAD: {source}{}", if log.is_empty() { String::new() } else { format!("; verifier log:\n{log}") })]
    Load {
        /// The error.
        source: std::io::Error,
        /// The verifier log.
        log: String,
    },
    /// A program of this many instructions (0 or more than 4096) is not loaded.
    #[error("program of {0} instructions")]
    ProgramSize(usize),
    /// A jump of the assembled program has no target.
    #[error("assembling the filter: {0}")]
    Asm(#[from] insn::AsmError),
    /// `/sys/devices/system/cpu/possible` did not parse.
    #[error("/sys/devices/system/cpu/possible: unparsable {0:?}")]
    CpuList(String),
    /// A mean interval of 0 (keep every call) needs no filter.
    #[error("sampling interval 0: nothing to filter")]
    ZeroInterval,
    /// A return or `free` probe without the free-matching maps.
    #[error("free matching was not set up")]
    NoLifetimeMaps,
}

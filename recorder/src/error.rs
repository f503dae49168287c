//! [`RecorderError`]: everything that can stop `pgo-agent record`.

use std::path::PathBuf;

/// Why a recording failed. Each variant says where (address, path, pid) and what.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecorderError {
    /// The program to record could not be found or is not executable.
    #[error("cannot find program `{program}` (searched PATH when it has no `/`)")]
    ProgramNotFound {
        /// The program as given on the command line.
        program: String,
    },
    /// An argument contains a NUL byte and cannot be passed to exec.
    #[error("argument {index} contains a NUL byte")]
    NulInArgument {
        /// Position in PROG ARGS... (0 = the program).
        index: usize,
    },
    /// An environment entry contains a NUL byte and cannot be passed to exec.
    #[error("environment entry `{entry}` contains a NUL byte")]
    NulInEnvironment {
        /// The entry, its NUL shown as `\\0`.
        entry: String,
    },
    /// A ptrace/wait/fork system call failed.
    #[error("{operation} failed for pid {pid}: {source}")]
    Ptrace {
        /// What we were doing (`PTRACE_SINGLESTEP`, `waitpid`, ...).
        operation: &'static str,
        /// The tracee.
        pid: i32,
        /// The errno.
        source: nix::Error,
    },
    /// The tracee exited before reaching the exec stop (exec failed in the child).
    #[error("`{program}` could not be started (exit status {status})")]
    ExecFailed {
        /// The program.
        program: String,
        /// Its exit status (127: exec failed).
        status: i32,
    },
    /// The tracee created a thread or a child process, or called exec again, which the
    /// recorder does not follow.
    #[error(
        "the program (pid {pid}) {what}{}; threads, fork and a second exec are not supported by `record`",
        new_pid.map(|p| format!(" (new pid {p})")).unwrap_or_default()
    )]
    Unsupported {
        /// What the tracee did (`created a thread`, `forked`, `called exec again`).
        what: &'static str,
        /// The tracee.
        pid: i32,
        /// The thread or process it created.
        new_pid: Option<i32>,
    },
    /// The program exists but cannot be run.
    #[error("`{program}` {why}")]
    NotAProgram {
        /// The program.
        program: String,
        /// Why not.
        why: &'static str,
    },
    /// The program is not a 64-bit x86 program.
    #[error("`{program}` runs 32-bit x86 code; `record` decodes x86-64 only")]
    Not64Bit {
        /// The program.
        program: String,
    },
    /// The code at an address could not be read or decoded.
    #[error("cannot decode the instruction at {addr:#x} in pid {pid}")]
    Decode {
        /// The tracee.
        pid: i32,
        /// The instruction address.
        addr: u64,
    },
    /// A file the recorder reads could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// /proc/PID/maps could not be read or parsed.
    #[error(transparent)]
    Maps(#[from] collector::process_maps::MapsError),
    /// The recording grew past a configured limit.
    #[error("limit exceeded: {what} reached {value} (max {max})")]
    LimitExceeded {
        /// Which limit.
        what: &'static str,
        /// The value reached.
        value: u64,
        /// The limit.
        max: u64,
    },
    /// The options are inconsistent (period 0, depth 0 or above the LBR maximum).
    #[error("invalid option: {0}")]
    InvalidOption(String),
}

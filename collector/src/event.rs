//! Side-band events (MMAP2, COMM, FORK, EXIT) and the [`PerfEvent`] stream that interleaves
//! them with samples in the order the input delivered them.

use crate::{BuildId, Sample};

/// `PERF_RECORD_MMAP2` (or a legacy `PERF_RECORD_MMAP`, with the MMAP2-only fields zero).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Mmap2Event {
    /// Process id (-1 for kernel mappings).
    pub pid: i32,
    /// Thread id.
    pub tid: i32,
    /// Start address of the mapping in the process.
    pub addr: u64,
    /// Length of the mapping in bytes.
    pub len: u64,
    /// File offset the mapping starts at.
    pub pgoff: u64,
    /// `PROT_*` bits (PROT_EXEC = 4).
    pub prot: u32,
    /// `MAP_*` flags.
    pub flags: u32,
    /// Device major/minor and inode, when the record carries them instead of a build id.
    pub maj: u32,
    /// Device minor.
    pub min: u32,
    /// Inode number.
    pub ino: u64,
    /// Inode generation.
    pub ino_generation: u64,
    /// Build id, when the record carries one (`PERF_RECORD_MISC_MMAP_BUILD_ID`).
    pub build_id: Option<BuildId>,
    /// Mapped path, as the kernel reported it (may be `[vdso]`, `//anon`, ...).
    pub filename: String,
}

impl Mmap2Event {
    /// True when the mapping is executable.
    pub fn is_executable(&self) -> bool {
        self.prot & 4 != 0
    }
}

/// `PERF_RECORD_COMM`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CommEvent {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// New command name.
    pub comm: String,
    /// Set when the name changed because of an exec (`PERF_RECORD_MISC_COMM_EXEC`).
    pub exec: bool,
}

/// `PERF_RECORD_FORK` / `PERF_RECORD_EXIT`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TaskEvent {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Thread id.
    pub tid: u32,
    /// Parent thread id.
    pub ptid: u32,
    /// Timestamp.
    pub time: u64,
}

/// A side-band event: what the unwinder needs besides samples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SideBandEvent {
    /// A new mapping.
    Mmap2(Mmap2Event),
    /// A process/thread name change.
    Comm(CommEvent),
    /// A new process or thread.
    Fork(TaskEvent),
    /// A process or thread ended.
    Exit(TaskEvent),
}

/// One event of an input stream, in input order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PerfEvent {
    /// A sample.
    Sample(Sample),
    /// A side-band event.
    SideBand(SideBandEvent),
}

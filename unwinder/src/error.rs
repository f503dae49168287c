//! [`UnwindError`]: the faults that stop a conversion (llvm-profgen exits on them).
//!
//! Per-sample problems (truncated stacks, unpaired external addresses, bogus traces) are not
//! errors: they are counted in [`crate::UnwindStats`], as llvm-profgen counts them for its
//! warning summary.

/// A fault that makes the samples of a binary unusable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnwindError {
    /// The binary has no executable segment, so nothing can be placed (llvm-profgen:
    /// "no executable segment found").
    #[error("binary {binary}: no executable segment found")]
    NoExecutableSegment {
        /// The binary's file name.
        binary: String,
    },
    /// The load description is inconsistent: one preferred address per text segment
    /// offset is required.
    #[error(
        "binary {binary}: {offsets} text segment offsets but {addresses} preferred text segment addresses"
    )]
    InconsistentLoadInfo {
        /// The binary's file name.
        binary: String,
        /// Number of text segment offsets.
        offsets: usize,
        /// Number of preferred text segment addresses.
        addresses: usize,
    },
    /// An MMAP2 event maps another executable segment at a distance from the first that
    /// differs from the link-time distance (llvm-profgen: "Executable segments not loaded
    /// consecutively").
    #[error(
        "mmap of {filename} (pid {pid}) at {addr:#x} offset {pgoff:#x}: executable segments not loaded consecutively"
    )]
    SegmentsNotConsecutive {
        /// Process of the event.
        pid: i32,
        /// Mapped address.
        addr: u64,
        /// File offset of the mapping.
        pgoff: u64,
        /// Mapped path.
        filename: String,
    },
    /// An MMAP2 event's file offset lies before every executable segment (llvm-profgen:
    /// "File offset not found").
    #[error(
        "mmap of {filename} (pid {pid}) at {addr:#x} offset {pgoff:#x}: file offset not found"
    )]
    FileOffsetNotFound {
        /// Process of the event.
        pid: i32,
        /// Mapped address.
        addr: u64,
        /// File offset of the mapping.
        pgoff: u64,
        /// Mapped path.
        filename: String,
    },
    /// A part of a segment is mapped at an address that does not continue the segment's
    /// first mapping (llvm-profgen: "Segment not loaded by consecutive mmaps").
    #[error(
        "mmap of {filename} (pid {pid}) at {addr:#x} offset {pgoff:#x}: segment not loaded by consecutive mmaps"
    )]
    SegmentNotConsecutiveMmaps {
        /// Process of the event.
        pid: i32,
        /// Mapped address.
        addr: u64,
        /// File offset of the mapping.
        pgoff: u64,
        /// Mapped path.
        filename: String,
    },
    /// A hybrid (call stack + LBR) input has a sample with a call stack but no branch
    /// stack (llvm-profgen: "Hybrid perf sample is corrupted, No LBR sample line").
    #[error("hybrid sample {sample_index} has a call stack but no LBR branch stack")]
    HybridSampleWithoutLbr {
        /// 0-based index of the sample in the input.
        sample_index: u64,
    },
    /// No sample with a branch stack was found, so the input kind cannot be told
    /// (llvm-profgen: "Invalid perf script input!").
    #[error("no sample with an LBR branch stack in the input")]
    NoLbrSamples,
}

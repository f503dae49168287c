//! # recorder — the software LBR recorder: runs a program under ptrace single-step and records every taken branch.
//!
//! Machines without a PMU (CI VMs) cannot run `perf record -b`. This module produces the
//! same data a real Intel machine would, exactly and with known truth:
//!
//! * [`tracer`] starts the program under ptrace and steps it one instruction at a time;
//! * `symbolizer::binary::branch` decodes each instruction (the one x86 branch classifier)
//!   to know its length and whether it is a near branch; a *taken* branch is a
//!   jump/call/ret, or a `jcc` whose next RIP is not the fall-through;
//! * every `period`-th taken branch becomes a [`collector::Sample`] as
//!   `perf record -e BR_INST_RETIRED.NEAR_TAKEN:uppp -c period -b -g` would write it on Intel
//!   (PEBS): IP = the target of that branch, LBR = the last `lbr_depth` taken branches newest
//!   first ([`lbr_ring`]), call chain = the kernel's frame-pointer walk ([`frame_chain`]);
//! * `collector::process_maps` turns `/proc/PID/maps` into MMAP2 events as mappings appear;
//! * [`GroundTruth`] (`collector::ground_truth`) counts every executed instruction and
//!   every taken edge.
//!
//! [`record`] runs a whole session and returns a [`collector::Recording`] (which the perf.data and
//! perf script writers serialise), the [`GroundTruth`] and [`RecordStats`].
//!
//! Limits: only the main thread is followed; a `clone`, `fork`, `vfork` or second `exec` stops
//! the recording with [`RecorderError::Unsupported`]. `syscall`/`int` are not near branches and
//! are never recorded; kernel code is never seen (the event is `:u`).

#![deny(missing_docs)]

pub mod error;
pub mod frame_chain;
pub mod lbr_ring;
pub mod session;
pub mod tracer;

pub use collector::ground_truth::GroundTruth;
pub use error::RecorderError;
pub use session::{
    record, record_with, RecordControl, RecordOptions, RecordOutcome, RecordStats, TraceeExit,
    POLL_STEPS,
};

/// Default sampling period: a prime near 1000, so samples do not lock onto loop periods.
pub const DEFAULT_PERIOD: u64 = 1009;
/// Default LBR depth (Intel Arch LBR maximum and the common Skylake+ depth).
pub const DEFAULT_LBR_DEPTH: usize = 32;

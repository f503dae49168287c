//! # collector — from the kernel (or a recording) to [`Sample`]s
//!
//! Stage one of the pipeline. It owns everything that turns bytes written by the kernel's
//! perf subsystem, or by `perf record`, or by our own software LBR recorder, into the one
//! sample model the rest of pgo-agent uses:
//!
//! * [`Sample`]: leading IP, pid/tid, time, the frame-pointer call chain (leaf first,
//!   context markers removed) and the LBR branch stack ([`LbrEntry`], newest first);
//! * [`SideBandEvent`]: MMAP2/COMM/FORK/EXIT, which the unwinder needs to rebase addresses;
//! * [`BuildId`]: the key every per-binary aggregate is stored under;
//! * [`Recording`]: a whole session in memory, what perf.data and perf script text hold.
//!
//! Modules: [`record`] (kernel record bodies), [`perf_data`] (perf.data reader and writer),
//! [`perf_script`] (perf script text reader and writer), [`live`] (the per-CPU rings of
//! `pgo-agent run`), [`memprof`] (MemProf raw profiles), [`process_maps`] (`/proc/PID/maps`
//! as MMAP2 events), [`ground_truth`] (the software LBR recorder's exact counts; the
//! recorder itself is the `recorder` crate, the uprobe allocation sampler the `heapprobe`
//! crate).
//!
//! It knows nothing about symbols or binaries' code: that is the symbolizer's job.
#![deny(missing_docs)]

pub mod build_id;
pub mod event;
pub mod freed_memory;
pub mod ground_truth;
pub mod large_writes;
pub mod live;
pub mod memprof;
pub mod perf_data;
pub mod perf_script;
pub mod prefetch;
pub mod process_maps;
pub mod record;
pub mod recording;
pub mod sample;
pub mod threads;

pub use build_id::BuildId;
pub use event::{CommEvent, Mmap2Event, PerfEvent, SideBandEvent, TaskEvent};
pub use ground_truth::GroundTruth;
pub use recording::{BuildIdEntry, EventDescription, Recording};
pub use sample::{LbrEntry, Sample, UserStack};

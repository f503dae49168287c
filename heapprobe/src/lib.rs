//! # heapprobe — allocation sampling with uprobes: `perf_event_open` on the `uprobe` PMU at the entry of
//! the allocator's functions (`malloc`, `calloc`, `realloc`) in a target's libc, for
//! programs not built for MemProf.
//!
//! * [`symbol`]: the file offset of a function in an ELF file (what the uprobe PMU's
//!   `config2` wants): `st_value − p_vaddr + p_offset` of the `PT_LOAD` containing it;
//! * [`probe`]: the probed functions ([`AllocFn`]), how each one's size argument is read
//!   from the sampled user registers, and the `perf_event_attr` of one probe;
//! * [`call`]: one probe hit decoded from a SAMPLE record ([`AllocCall`]), its call chain
//!   completed with the return address on top of the stack (frame-pointer unwinding from a
//!   function's first instruction skips the direct caller);
//! * [`sampler`]: byte sampling in user space ([`ByteSampler`], the tcmalloc/pprof
//!   convention: an allocation of `s` bytes is sampled with probability `1 − exp(−s/I)`)
//!   and the unsampling weight;
//! * [`profile`]: sampled calls aggregated per (process, call chain) ([`AllocProfile`]);
//! * [`bpf`]: the same byte sampling done in the kernel by an eBPF program attached to
//!   each probe event, so that unsampled calls write no record ([`bpf::ByteFilter`]);
//! * [`session`]: the opened probes of one process, one ring per CPU, with the kernel
//!   filter when it loads, else user-space sampling ([`UprobeSession`], [`SamplingMode`]).
//!
//! Records are parsed by [`collector::record`], rings read by [`collector::live::RingBuffer`].

#![deny(missing_docs)]

pub mod bpf;
pub mod call;
mod error;
pub mod launch;
pub mod probe;
pub mod profile;
pub mod sampler;
pub mod session;
pub mod symbol;

pub use call::{AllocCall, PointerEvent};
pub use error::UprobeError;
pub use launch::HeldChild;
pub use probe::{AllocFn, ProbeKind, ProbeTarget};
pub use profile::{AllocContext, AllocProfile};
pub use sampler::{unsampling_weight, ByteSampler, DEFAULT_SAMPLE_INTERVAL_BYTES};
pub use session::{
    libc_of_process, threads_of, FreeMatching, SamplingMode, SessionEvent, SessionStats,
    UprobeSession, UprobeSettings,
};

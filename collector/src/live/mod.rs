//! The live collector: system-wide sampling through `perf_event_open`, one ring per CPU.
//!
//! * [`capability`]: what the PMUs offer → candidate [`SamplingPlan`]s (Intel LBR hybrid,
//!   AMD branch sampling, cpu-clock fallback), chosen at start by probing and reported;
//! * [`attr`]: the `perf_event_attr` of each event; [`perf_event`]: the fd and ioctls;
//! * [`ring`]: the mmap ring buffer reader (acquire `data_head`, release `data_tail`,
//!   wrapped records copied out), also over heap memory for tests and replay;
//! * [`reader`]: per-CPU reader threads → bounded channel of [`EventBatch`]es (try_send,
//!   drops counted), LOST / LOST_SAMPLES counted;
//! * [`recycle`]: the pool through which the workers hand used samples back to the
//!   readers, which parse into them (no allocation per sample);
//! * [`proc_scan`]: MMAP2/COMM synthesised from `/proc` for processes already running, and
//!   where to open a mapped binary (`/proc/PID/map_files`, `/proc/PID/root`);
//! * [`session`]: the opened plan.
//!
//! Records are parsed by [`crate::record`], the same parsers the perf.data reader uses.

pub mod attr;
pub mod capability;
mod error;
pub mod perf_event;
pub mod proc_scan;
pub mod reader;
pub mod recycle;
pub mod ring;
pub mod session;

pub use attr::{EventAttr, SampleRate};
pub use capability::{PlanSettings, PmuCapabilities, SamplingMode, SamplingPlan};
pub use error::LiveError;
pub use perf_event::PerfEventFd;
pub use reader::{
    run_reader, run_reader_recycling, DrainLimit, EventBatch, ReaderCounts, ReaderSettings,
    ReaderStats, RecordDecoder,
};
pub use recycle::SampleRecycler;
pub use ring::{RecordHeader, RingBuffer};
pub use session::{online_cpus, CpuStream, LiveSession};

//! Parsers for the kernel's perf record bodies (SAMPLE, MMAP2, COMM, FORK, EXIT, LOST): one parser per
//! record type, shared by the live ring-buffer path and the perf.data reader.
//!
//! A body is the bytes after the 8-byte `perf_event_header { u32 type; u16 misc; u16 size; }`.
//! Every parser takes the body, the header's `misc` where it matters, and the attr's
//! [`SampleLayout`] where the body depends on it (SAMPLE fields, the `sample_id` trailer of
//! other records). Parsers never panic: short or inconsistent bodies give a
//! [`RecordParseError`] naming the field and its offset in the body.
//!
//! [`RecordWriter`] is the inverse: it encodes the same records (header included), for the
//! perf.data writer, the software recorder and round-trip tests.
//!
//! Only little-endian (x86-64) bodies are handled.

mod comm;
mod cursor;
mod error;
mod layout;
mod lost;
mod mmap;
mod sample;
mod sample_id;
mod task;
mod writer;

pub use comm::parse_comm;
pub use error::RecordParseError;
pub use layout::{branch_sample_type, read_format, sample_type, SampleLayout};
pub use lost::{parse_lost, parse_lost_samples, LostEvent, LostSamplesEvent};
pub use mmap::{parse_mmap, parse_mmap2, LEGACY_MMAP_DATA_PROT, LEGACY_MMAP_EXEC_PROT};
pub use sample::{
    parse_sample, parse_sample_record, parse_sample_record_into, user_callchain,
    user_callchain_into, SampleRecord, BRANCH_ENTRY_SIZE, PERF_SAMPLE_REGS_ABI_64,
};
pub use sample_id::{parse_sample_id, SampleId};
pub use task::parse_task;
pub use writer::RecordWriter;

use crate::{CommEvent, Mmap2Event, PerfEvent, SideBandEvent, TaskEvent};

/// `perf_event_header.type` values (`enum perf_event_type`) and perf's user record types.
pub mod record_type {
    /// PERF_RECORD_MMAP.
    pub const MMAP: u32 = 1;
    /// PERF_RECORD_LOST.
    pub const LOST: u32 = 2;
    /// PERF_RECORD_COMM.
    pub const COMM: u32 = 3;
    /// PERF_RECORD_EXIT.
    pub const EXIT: u32 = 4;
    /// PERF_RECORD_FORK.
    pub const FORK: u32 = 7;
    /// PERF_RECORD_SAMPLE.
    pub const SAMPLE: u32 = 9;
    /// PERF_RECORD_MMAP2.
    pub const MMAP2: u32 = 10;
    /// PERF_RECORD_LOST_SAMPLES.
    pub const LOST_SAMPLES: u32 = 13;
    /// PERF_RECORD_FINISHED_ROUND (perf user record, header only): no record after it is
    /// older than the records before it.
    pub const FINISHED_ROUND: u32 = 68;
}

/// `perf_event_header.misc` bits.
pub mod misc {
    /// Mask of the CPU mode field.
    pub const CPUMODE_MASK: u16 = 7;
    /// PERF_RECORD_MISC_KERNEL.
    pub const KERNEL: u16 = 1;
    /// PERF_RECORD_MISC_USER.
    pub const USER: u16 = 2;
    /// PERF_RECORD_MISC_MMAP_DATA (MMAP/MMAP2: a non-executable mapping).
    pub const MMAP_DATA: u16 = 1 << 13;
    /// PERF_RECORD_MISC_COMM_EXEC (COMM: the name changed because of exec).
    pub const COMM_EXEC: u16 = 1 << 13;
    /// PERF_RECORD_MISC_EXACT_IP (SAMPLE: the IP is the exact instruction, precise_ip > 0).
    pub const EXACT_IP: u16 = 1 << 14;
    /// PERF_RECORD_MISC_MMAP_BUILD_ID (MMAP2: a build id instead of maj/min/ino).
    pub const MMAP_BUILD_ID: u16 = 1 << 14;
}

/// One parsed kernel record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// PERF_RECORD_SAMPLE.
    Sample(SampleRecord),
    /// PERF_RECORD_MMAP or PERF_RECORD_MMAP2.
    Mmap2(Mmap2Event),
    /// PERF_RECORD_COMM.
    Comm(CommEvent),
    /// PERF_RECORD_FORK.
    Fork(TaskEvent),
    /// PERF_RECORD_EXIT.
    Exit(TaskEvent),
    /// PERF_RECORD_LOST.
    Lost(LostEvent),
    /// PERF_RECORD_LOST_SAMPLES.
    LostSamples(LostSamplesEvent),
    /// Any other record type (THROTTLE, SWITCH, KSYMBOL, ...): not needed by the pipeline.
    Other(u32),
}

impl Record {
    /// The shared event this record stands for, if the pipeline uses it.
    pub fn into_perf_event(self) -> Option<PerfEvent> {
        match self {
            Record::Sample(s) => Some(PerfEvent::Sample(s.sample)),
            Record::Mmap2(e) => Some(PerfEvent::SideBand(SideBandEvent::Mmap2(e))),
            Record::Comm(e) => Some(PerfEvent::SideBand(SideBandEvent::Comm(e))),
            Record::Fork(e) => Some(PerfEvent::SideBand(SideBandEvent::Fork(e))),
            Record::Exit(e) => Some(PerfEvent::SideBand(SideBandEvent::Exit(e))),
            Record::Lost(_) | Record::LostSamples(_) | Record::Other(_) => None,
        }
    }
}

/// Parses one record body by its `perf_event_header` type and misc.
pub fn parse_record(
    record_type: u32,
    header_misc: u16,
    body: &[u8],
    layout: &SampleLayout,
) -> Result<Record, RecordParseError> {
    Ok(match record_type {
        record_type::SAMPLE => Record::Sample(parse_sample_record(body, layout)?),
        record_type::MMAP => Record::Mmap2(parse_mmap(body, header_misc, layout)?),
        record_type::MMAP2 => Record::Mmap2(parse_mmap2(body, header_misc, layout)?),
        record_type::COMM => Record::Comm(parse_comm(body, header_misc, layout)?),
        record_type::FORK => Record::Fork(parse_task(body)?),
        record_type::EXIT => Record::Exit(parse_task(body)?),
        record_type::LOST => Record::Lost(parse_lost(body)?),
        record_type::LOST_SAMPLES => Record::LostSamples(parse_lost_samples(body)?),
        other => Record::Other(other),
    })
}

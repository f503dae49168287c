//! perf.data files: the writer (used by the software recorder) and the reader (linux-perf-data for the
//! container, our own record parsers for the bodies).
//!
//! * [`write_perf_data`] writes a [`crate::Recording`] as a file-mode perf.data that Debian's
//!   perf 6.1 reads without warnings.
//! * [`read_perf_data`] / [`PerfDataReader`] read any little-endian perf.data, file mode
//!   or pipe mode (`perf record -o -`, `perf inject -o -`): linux-perf-data handles the
//!   header, attrs, features, time ordering and zstd; every record body goes through
//!   [`crate::record`] (linux-perf-data drops LBR entries).

mod build_id_events;
mod error;
mod features;
mod header;
mod metadata_checks;
mod pipe_mode;
mod reader;
mod writer;

pub use error::PerfDataError;
pub use header::{
    attr_flag, feature, FileHeader, FileSection, RawAttr, ATTR_SIZE, FILE_HEADER_SIZE,
};
pub use reader::{read_perf_data, PerfDataReader, PerfEvents};
pub use writer::{
    recording_attr, write_perf_data, CPUID, EVENT_ID, MAX_SAMPLE_REPEAT, ROUND_RECORDS,
};

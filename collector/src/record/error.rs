//! [`RecordParseError`]: why a kernel record body could not be parsed.

use thiserror::Error;

/// A record body could not be parsed. Offsets are relative to the start of the record body
/// (the byte after the 8-byte `perf_event_header`); the caller adds the record's own position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RecordParseError {
    /// The body ended before a field: `field` needs `needed` bytes at `offset`, the body has `len`.
    #[error(
        "record truncated: {field} needs {needed} bytes at offset {offset}, body is {len} bytes"
    )]
    TooShort {
        /// The field being read (`perf_event.h` name).
        field: &'static str,
        /// Offset of the field in the body.
        offset: usize,
        /// Bytes the field needs.
        needed: usize,
        /// Length of the body.
        len: usize,
    },
    /// A count field (`nr`, `size`) is larger than the bytes that follow it, or than a limit.
    #[error("record field {field} = {value} at offset {offset} is too large (at most {max})")]
    CountTooLarge {
        /// The count field (`perf_event.h` name).
        field: &'static str,
        /// Offset of the field in the body.
        offset: usize,
        /// The value read.
        value: u64,
        /// The largest acceptable value here.
        max: u64,
    },
    /// A `sample_type` bit this parser does not support is set (bit number given).
    #[error("unsupported sample_type bit {bit} (0x{mask:x}) in {record}")]
    UnsupportedSampleType {
        /// Bit number in `perf_event_attr.sample_type`.
        bit: u32,
        /// The bit as a mask.
        mask: u64,
        /// Where it was met (`SAMPLE` or `sample_id`).
        record: &'static str,
    },
    /// A string field has no NUL terminator inside the record.
    #[error("record field {field} at offset {offset} is not NUL-terminated")]
    UnterminatedString {
        /// The string field (`perf_event.h` name).
        field: &'static str,
        /// Offset of the string in the body.
        offset: usize,
    },
    /// A record body is larger than a record can be (`perf_event_header.size` is a u16).
    #[error("record body of {len} bytes does not fit a perf_event_header (at most 65527)")]
    RecordTooLarge {
        /// The body length the encoder was asked to write.
        len: usize,
    },
}

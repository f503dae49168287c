//! [`PerfDataError`]: why a perf.data file could not be read or written. Every variant names
//! the file; those about content name the byte offset too.

use std::path::PathBuf;

use thiserror::Error;

use crate::record::RecordParseError;

/// A perf.data file could not be read or written.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PerfDataError {
    /// The file could not be opened, read, created or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file's structure is broken: a header field, section or record is out of bounds or
    /// inconsistent (truncated files end up here).
    #[error("{}: offset {offset}: {what}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte offset in the file where the problem was found.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// A record body in the data section could not be parsed.
    #[error("{}: record at offset {offset}: {source}", path.display())]
    Record {
        /// The file.
        path: PathBuf,
        /// Byte offset of the record in the file (or, inside compressed data, of the
        /// compressed record holding it), as far as the container reader reports it.
        offset: u64,
        /// The parse error (its offset is relative to the record body).
        source: RecordParseError,
    },
    /// linux-perf-data could not read the container (offset: how far the file had been read).
    #[error("{}: offset {offset}: {source}", path.display())]
    Container {
        /// The file.
        path: PathBuf,
        /// How far into the file reading had got when the error was found.
        offset: u64,
        /// The container reader's error.
        source: linux_perf_data::Error,
    },
    /// The file is valid but uses something this reader does not handle (big-endian data,
    /// an attr added in the middle of a pipe-mode stream, ...), or the recording cannot be
    /// written as perf.data.
    #[error("{}: unsupported: {what}", path.display())]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// What is not supported.
        what: String,
    },
    /// A record could not be encoded while writing.
    #[error("{}: cannot encode record: {source}", path.display())]
    Encode {
        /// The file being written.
        path: PathBuf,
        /// Why.
        source: RecordParseError,
    },
}

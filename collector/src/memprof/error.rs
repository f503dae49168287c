//! [`MemProfRawError`]: why a raw MemProf profile (`.memprofraw`, written by the compiler-rt
//! MemProf runtime) was rejected. Every variant names the file; those about content name the
//! byte offset in the file where the problem was found.

use std::path::PathBuf;

use thiserror::Error;

/// A raw MemProf profile could not be read or is malformed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MemProfRawError {
    /// The file could not be opened or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file ends (or a dump's declared size ends) before a structure does.
    #[error("{}: offset {offset}: truncated: {what} needs {needed} bytes, {available} available", path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Offset of the structure that does not fit.
        offset: u64,
        /// Which structure.
        what: &'static str,
        /// Bytes it needs.
        needed: u64,
        /// Bytes left.
        available: u64,
    },
    /// The first 8 bytes of a dump are not the MemProf raw magic.
    #[error("{}: offset {offset}: bad magic {found:#018x} (expected {expected:#018x}); not a raw MemProf profile", path.display())]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// Offset of the dump header.
        offset: u64,
        /// The value read.
        found: u64,
        /// `MEMPROF_RAW_MAGIC_64`.
        expected: u64,
    },
    /// A dump has a raw format version this reader does not know.
    #[error("{}: offset {offset}: unsupported raw MemProf version {version} (supported: 4 from clang 19, 5 from clang 22)", path.display())]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// Offset of the version field.
        offset: u64,
        /// The version read.
        version: u64,
    },
    /// A header field, count or section is inconsistent with the rest of the file.
    #[error("{}: offset {offset}: {what}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Offset of the inconsistent field or structure.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// A size that drives allocation exceeds a limit of this reader.
    #[error("{}: offset {offset}: {what} is {value}, above the limit {max}", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Offset of the field.
        offset: u64,
        /// Which quantity.
        what: &'static str,
        /// The value read.
        value: u64,
        /// The limit.
        max: u64,
    },
}

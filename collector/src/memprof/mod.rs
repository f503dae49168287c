//! Raw MemProf (heap profile) ingestion: binaries built with clang `-fmemory-profile` write a
//! raw profile at exit (`MEMPROF_OPTIONS=log_path=PREFIX` ⇒ `PREFIX.<pid>`). This module parses
//! and validates it ([`RawMemProfile`]) and holds the per-context statistics with their merge
//! rule ([`MemInfoBlock`]). Symbolizing the PCs into (GUID, line offset, column) frames is the
//! symbolizer's job (`symbolizer::memprof`).

pub mod error;
pub mod histogram;
pub mod mib;
pub mod raw;

pub use error::MemProfRawError;
pub use mib::{MemInfoBlock, MIB_FIELD_NAMES};
pub use raw::{RawMemProfile, SegmentEntry};

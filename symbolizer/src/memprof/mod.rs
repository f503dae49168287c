//! MemProf (heap profile) symbolization and aggregation: raw profiles parsed by
//! `collector::memprof` become allocation contexts of [`MemProfFrame`]s (function GUID, line
//! offset, column, inline flag), symbolized from the binary's DWARF exactly as LLVM's
//! `RawMemProfReader` does ([`MemProfBinary`]), then aggregated across runs ([`HeapProfile`]).
//! Stack ids are computed as clang computes them for `!memprof` metadata
//! ([`MemProfFrame::stack_id`]).

pub mod dwarf;
pub mod error;
pub mod frame;
pub mod profile;
pub mod symbolize;

pub use error::MemProfSymbolizeError;
pub use frame::{full_stack_id, memprof_guid, MemProfFrame};
pub use profile::{CallStackStats, HeapProfile};
pub use symbolize::{MemProfBinary, SymbolizedContext, SymbolizedProfile};

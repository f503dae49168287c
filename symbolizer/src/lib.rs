//! # symbolizer — binaries and counters to sample profiles
//!
//! Stage three. It knows binaries: ELF segments and symbols, x86 decoding (it implements the
//! unwinder's [`unwinder::CodeLayout`]), `.pseudo_probe`/`.pseudo_probe_desc`, DWARF lines with
//! inline frames and discriminators. It turns [`unwinder::CounterSet`]s into sample profiles
//! (CS probe-based, CS line-based, flat line-based AutoFDO, flat probe-based) the way
//! llvm-profgen 19 does. Writing them to bytes is the exporter's job.
//!
//! The binary model ([`ProfiledBinary`]) is in [`binary`], with [`dwarf`], [`probe`],
//! [`symtab`], [`guid`] and [`name`] as its parts. [`elf_image`] is the one reader of ELF
//! program headers and build-id notes and [`binary::branch`] the one x86 branch classifier;
//! the recorder, the heap prober and the daemon use both.
#![deny(missing_docs)]

pub mod binary;
pub mod debug_file;
pub mod decoded_bytes;
pub mod dwarf;
pub mod elf_image;
pub mod error;
pub mod generate;
pub mod guid;
pub mod listing;
pub mod memprof;
pub mod name;
pub mod probe;
pub mod profile;
pub mod quality;
#[cfg(test)]
mod resident_pages;
pub mod symtab;
pub mod verify;

pub use binary::{
    BinaryFunction, FrameLocation, FuncRange, LazyCode, LoadOptions, ProfiledBinary, SharedBytes,
};
pub use debug_file::{
    has_symbols_or_dwarf, DebugFile, DebugFileFinder, DebugLookup, DebugRoute, RemoteDebugSource,
};
pub use decoded_bytes::{decoded_bytes, DecodedBytes};
pub use dwarf::discriminator;
pub use error::SymbolizerError;
pub use guid::function_guid;
pub use name::canonical_function_name;
pub use probe::{ProbeDesc, ProbeFrame, ProbeKind, PseudoProbe};

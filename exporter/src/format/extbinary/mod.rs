//! LLVM extensible binary sample profile (`--format=extbinary`) writer and reader.
//!
//! Layout and encodings: llvm-profgen.md §3.3 (header, section table in layout order,
//! summary, string or MD5 name table, CSNameTable, LBRProfile, FuncOffsetTable, FuncMetadata),
//! and the older raw binary format (`--format=binary`, [`write_raw_binary`]) made of the same
//! summary, name table and function records without sections.

pub mod leb128;
pub mod reader;
pub mod section;
pub mod writer;

pub use writer::{
    to_bytes, to_bytes_with, to_bytes_with_symbol_list, write, write_raw_binary, write_with,
    write_with_symbol_list, WriteOptions,
};

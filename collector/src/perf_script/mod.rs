//! `perf script` text in the layouts llvm-profgen reads: the reader and the writer.

pub mod reader;
pub mod writer;

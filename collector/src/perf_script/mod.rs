//! `perf script` text in the layouts llvm-profgen reads: the reader and the writer.

pub mod reader;
pub mod writer;

pub use reader::{
    open_perf_script, read_perf_script, PerfScriptError, PerfScriptReader, PerfScriptStats,
    PerfScriptType,
};

//! `perf script` text in the layouts llvm-profgen reads: the reader, its units of text,
//! the parallel aggregation of identical samples, and the writer.

mod block_memo;
mod compact;
pub mod reader;
mod scan_queue;
pub mod tally;
pub mod text;
mod text_hash;
pub mod unit;
pub mod writer;

pub use reader::{
    read_perf_script, EntryTokenCache, PerfScriptError, PerfScriptReader, PerfScriptStats,
    PerfScriptType,
};
pub use tally::{
    parse_tallied_one, tally_samples, tally_script, ParsedPiece, ScriptPiece, ScriptTally,
    TalliedSample, TalliedText, TalliedTexts,
};
pub use text::ScriptText;

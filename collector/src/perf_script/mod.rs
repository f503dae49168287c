//! `perf script` text in the layouts llvm-profgen reads: the reader, its units of text,
//! the parallel aggregation of identical samples, and the writer.

mod block_memo;
mod compact;
pub mod event_filter;
mod packed;
mod previous_line;
pub mod reader;
mod scan_queue;
pub mod stack_only;
pub mod tally;
pub mod tally_parts;
pub mod text;
mod text_hash;
pub mod unit;
pub mod writer;

pub use reader::{
    parse_stack_line, read_perf_script, EntryTokenCache, PerfScriptError, PerfScriptReader,
    PerfScriptStats, PerfScriptType, StackLine,
};
pub use stack_only::{FileMappings, StackOnlyReader};
pub use tally::{
    tally_samples, ParsedPiece, ScriptPiece, ScriptTally, TalliedSample, TalliedText, TalliedTexts,
};
pub use tally_parts::{tally_script_parts, TallyParts, TALLY_HELD_BYTES};
pub use text::ScriptText;

/// The value of `field` (`"Rss:"`, `"VmFlags:"`, ...) in `/proc/self/smaps` for the first
/// mapping of this process whose address range and header line `is_mapping` accepts (tests
/// of how texts and arenas are mapped).
#[cfg(test)]
pub(crate) fn smaps_field(
    is_mapping: impl Fn((usize, usize), &str) -> bool,
    field: &str,
) -> Option<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        // A mapping's header starts with its `start-end` range in hex.
        let range = line
            .split_whitespace()
            .next()
            .and_then(|r| r.split_once('-'))
            .and_then(|(a, b)| {
                Some((
                    usize::from_str_radix(a, 16).ok()?,
                    usize::from_str_radix(b, 16).ok()?,
                ))
            });
        match range {
            Some(range) => inside = is_mapping(range, line),
            None if inside => {
                if let Some(value) = line.strip_prefix(field) {
                    return Some(value.trim().to_string());
                }
            }
            None => {}
        }
    }
    None
}

//! Reads `perf script -F ip,brstack --show-mmap-events` text (LBR-only and hybrid stack+LBR samples).
//!
//! The accepted layouts, and what counts as a sample, are llvm-profgen 19's
//! (llvm/tools/llvm-profgen/PerfReader.cpp, `PerfScriptReader` and its subclasses):
//!
//! * **MMAP lines**: a line of at least 50 bytes, not starting with a digit, containing
//!   `PERF_RECORD_MMAP` (`isMMapEvent`), matched as llvm-profgen's regexes
//!   `PERF_RECORD_MMAP2 (-?[0-9]+)/[0-9]+: \[(0x[a-f0-9]+)\((0x[a-f0-9]+)\) @ (0x[a-f0-9]+|0) .*\]: ([-a-z]+) (.*)`
//!   and `PERF_RECORD_MMAP (-?[0-9]+)/[0-9]+: \[(0x[a-f0-9]+)\((0x[a-f0-9]+)\) @ (0x[a-f0-9]+|0)\]: ([-a-z]+) (.*)`
//!   (pid, address, size, page offset, prot, path), hand-matched here. A line that does not
//!   match is skipped and counted ([`PerfScriptStats::unparsed_mmap_lines`]; llvm-profgen
//!   warns "Cannot parse mmap event").
//! * **Count line** (`parseAggregatedCount`): a line that is entirely a decimal u64 is the
//!   repeat count of the sample after it (pre-aggregated input); default 1.
//! * **Hybrid samples** (`extractCallstack`): stack lines, each leading whitespace then only
//!   hex digits (no `0x`), leaf first, then a branch-stack line starting with `" 0x"`. A line
//!   that is neither ends the sample, which is dropped (and so is a branch-stack line right
//!   after it); end of input after stack lines is the error "Hybrid perf sample is corrupted,
//!   No LBR sample line".
//! * **Branch-stack line** (`extractLBRStack`): split on single spaces; an optional
//!   `event:` token (newer llvm-profgen); an optional leading IP (a token without `/`, hex,
//!   invalid drops the sample); then `0xFROM/0xTO[/P|M|-/X|-/A|-/CYCLES[/TYPE]]` tokens,
//!   newest first. A malformed token ends the list (llvm-profgen warns "Invalid address in
//!   LBR record"); a line with no entry gives no sample.
//! * **LBR-only samples** (`LBRPerfReader`): every non-MMAP, non-count line is a
//!   branch-stack line.
//! * **Stack-only samples** (no llvm-profgen counterpart): a run of call-stack lines
//!   ([`parse_stack_line`]: an address, optionally followed by a symbol and ` (DSO)`), leaf
//!   first, ended by any other line. Other lines (blank lines, `perf script`'s sample header
//!   lines) make no sample. The addresses are kept as printed: perf prints a user address in
//!   a file-backed mapping as the offset in that file, which
//!   [`super::stack_only::StackOnlyReader`] maps back with the MMAP lines.
//!
//! The script type ([`PerfScriptType`]) is decided first, by llvm-profgen's
//! `checkPerfScriptType`: the first line that `isLBRSample` accepts decides, hybrid when at
//! least one hex stack line is right before it. In llvm-profgen 19, `isLBRSample` needs at
//! least two entries (a one-entry branch stack line is not recognised); that is kept. Text
//! with call-stack lines but no such line is stack-only.
//!
//! The reader is faithful to the text: address rebasing, external addresses, return address
//! to call conversion, leaf replacement by `lbr[0].to`, dropping samples whose entries are
//! all external — llvm-profgen does these with the binary in hand; they are the unwinder's.
//! Samples carry no pid, tid or time (the text has none).

use std::path::Path;

use thiserror::Error;

use super::previous_line::PreviousLine;
use super::text::ScriptText;
use super::unit::{Unit, UnitCursor};
use crate::{LbrEntry, Mmap2Event, PerfEvent, SideBandEvent};

/// Most lines buffered while the script type is detected (the lines before the first
/// branch-stack line: mmap events, mostly).
pub const MAX_DETECTION_LINES: usize = 1 << 20;

/// Longest line read (the line buffer is sized by the input otherwise).
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// What kind of samples a perf script holds (llvm-profgen's `PerfContent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PerfScriptType {
    /// Branch-stack lines only (`PerfContent::LBR`): the non-CS path.
    LbrOnly,
    /// Call-stack lines followed by a branch-stack line (`PerfContent::LBRStack`).
    Hybrid,
    /// Call-stack lines and no branch-stack line anywhere: `perf script -F ip,dso
    /// --show-mmap-events` of `perf record -g` without `-b` (cpu-clock, cycles, ...), counted
    /// by leading IP. llvm-profgen 19 rejects such input ("Invalid perf script input!").
    /// Stack lines may name their file: see [`parse_stack_line`].
    StackOnly,
}

/// One call-stack line of a stack-only script: `ADDR`, or `ADDR [SYMBOL] (DSO)` as `perf
/// script -F ip,dso` (or `-F ip,sym,dso`) prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackLine<'a> {
    /// The address as printed.
    pub addr: u64,
    /// The file named in parentheses at the end of the line (`[unknown]` included).
    pub dso: Option<&'a [u8]>,
}

/// A call-stack line of a stack-only script: leading whitespace, hex digits (no `0x`), then
/// nothing or anything ending in ` (DSO)` (the last ` (` opens the file name). `None` for
/// any other line.
pub fn parse_stack_line(line: &[u8]) -> Option<StackLine<'_>> {
    let line = trim_end(trim_start(line));
    let end = line.iter().position(|&b| b == b' ').unwrap_or(line.len());
    let addr = parse_hex(&line[..end])?;
    if end == line.len() {
        return Some(StackLine { addr, dso: None });
    }
    let open = rfind(line, b" (")?;
    if open < end || !line.ends_with(b")") {
        return None;
    }
    Some(StackLine {
        addr,
        dso: Some(&line[open + 2..line.len() - 1]),
    })
}

/// A perf script could not be read.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PerfScriptError {
    /// Reading the input failed.
    #[error("{name}: {source}")]
    Io {
        /// The input's name (path).
        name: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// No branch-stack line and no call-stack line anywhere (llvm-profgen: "Invalid perf
    /// script input!").
    #[error(
        "{name}: Invalid perf script input! (no LBR sample line and no call-stack line in \
         {lines} lines)"
    )]
    InvalidInput {
        /// The input's name.
        name: String,
        /// Lines read.
        lines: u64,
    },
    /// The input ended after stack lines (llvm-profgen: "Hybrid perf sample is corrupted, No
    /// LBR sample line").
    #[error("{name}:{line}: Hybrid perf sample is corrupted, No LBR sample line")]
    NoLbrLine {
        /// The input's name.
        name: String,
        /// Line number (1-based) of the sample's first stack line.
        line: u64,
    },
    /// A line longer than [`MAX_LINE_BYTES`] (no perf script line comes close: a
    /// 32-entry LBR line is about 1.6 KB).
    #[error("{name}:{line}: line longer than {max} bytes")]
    LineTooLong {
        /// The input's name.
        name: String,
        /// Line number (1-based).
        line: u64,
        /// The limit.
        max: usize,
    },
    /// A stack-only reader was given a script with branch-stack lines.
    #[error("{name}: the perf script has samples with a branch stack ({found:?}), not stack-only samples")]
    NotStackOnly {
        /// The input's name.
        name: String,
        /// The type the script has.
        found: PerfScriptType,
    },
    /// More than [`MAX_DETECTION_LINES`] lines before the first sample.
    #[error("{name}: no LBR sample line in the first {max} lines")]
    TooManyLinesBeforeFirstSample {
        /// The input's name.
        name: String,
        /// The limit.
        max: usize,
    },
}

impl PerfScriptError {
    /// The same error for text that starts `lines` lines into the input (its line
    /// numbers were counted from the start of that text).
    pub fn after_lines(self, lines: u64) -> PerfScriptError {
        match self {
            PerfScriptError::NoLbrLine { name, line } => PerfScriptError::NoLbrLine {
                name,
                line: line + lines,
            },
            PerfScriptError::LineTooLong { name, line, max } => PerfScriptError::LineTooLong {
                name,
                line: line + lines,
                max,
            },
            other => other,
        }
    }
}

/// What the reader skipped, as llvm-profgen would (it warns or silently drops).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerfScriptStats {
    /// Lines read.
    pub lines: u64,
    /// MMAP lines that did not match llvm-profgen's regex ("Cannot parse mmap event").
    pub unparsed_mmap_lines: u64,
    /// Samples dropped for their text: a non-hex line in a call stack, an empty stack, an
    /// invalid leading IP, or a branch-stack line without a valid entry.
    pub dropped_samples: u64,
    /// Branch-stack lines cut at a malformed entry ("Invalid address in LBR record").
    pub invalid_lbr_records: u64,
}

impl PerfScriptStats {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &PerfScriptStats) {
        self.lines += other.lines;
        self.unparsed_mmap_lines += other.unparsed_mmap_lines;
        self.dropped_samples += other.dropped_samples;
        self.invalid_lbr_records += other.invalid_lbr_records;
    }

    /// What was skipped, one warning per kind (none when nothing was). llvm-profgen warns
    /// for each malformed MMAP line and branch-stack entry, naming the line, and drops
    /// malformed samples without a word; these say how many of each, so that nothing is
    /// dropped unsaid.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.unparsed_mmap_lines > 0 {
            out.push(format!(
                "{} MMAP line(s) could not be parsed (llvm-profgen: \"Cannot parse mmap \
                 event\") and were skipped; samples in the mappings they describe count as \
                 external",
                self.unparsed_mmap_lines
            ));
        }
        if self.invalid_lbr_records > 0 {
            out.push(format!(
                "{} branch-stack line(s) end at a malformed entry (llvm-profgen: \"Invalid \
                 address in LBR record\"); the entries before it were used, the rest of the \
                 line was skipped",
                self.invalid_lbr_records
            ));
        }
        if self.dropped_samples > 0 {
            out.push(format!(
                "{} sample(s) dropped for malformed text: a call-stack line that is not hex, \
                 an empty call stack, an invalid leading IP, or a branch-stack line without \
                 a valid entry",
                self.dropped_samples
            ));
        }
        out
    }
}

/// Reads [`PerfEvent`]s out of perf script text in memory: [`Mmap2Event`]s for MMAP lines,
/// and [`Sample`](crate::Sample)s (call chain = the stack lines, leaf first; `ip` = the leaf, or the
/// leading IP of an LBR-only line; `lbr` newest first; `count` from a count line, else 1),
/// in input order. The units of text are [`super::unit`]'s, the same ones the parallel
/// [`super::tally`] aggregates.
#[derive(Debug)]
pub struct PerfScriptReader<'a> {
    units: UnitCursor<'a>,
    script_type: PerfScriptType,
    stats: PerfScriptStats,
    failed: bool,
    tokens: EntryTokenCache,
}

/// Reads a whole perf script file: its type and its events.
pub fn read_perf_script(path: &Path) -> Result<(PerfScriptType, Vec<PerfEvent>), PerfScriptError> {
    let text = ScriptText::open(path)?;
    let reader = PerfScriptReader::new(text.bytes(), text.name())?;
    let ty = reader.script_type();
    let events = reader.collect::<Result<Vec<_>, _>>()?;
    Ok((ty, events))
}

impl<'a> PerfScriptReader<'a> {
    /// Reads `text` (named `name` in errors), after detecting the script type from its
    /// lines up to the first branch-stack line.
    pub fn new(text: &'a [u8], name: impl Into<String>) -> Result<Self, PerfScriptError> {
        let name = name.into();
        let script_type = detect_type(text, &name)?;
        Ok(PerfScriptReader {
            units: UnitCursor::new(text, name, script_type, 0)?,
            script_type,
            stats: PerfScriptStats::default(),
            failed: false,
            tokens: EntryTokenCache::new(),
        })
    }

    /// LBR-only or hybrid, as llvm-profgen's `checkPerfScriptType` decides.
    pub fn script_type(&self) -> PerfScriptType {
        self.script_type
    }

    /// What was skipped so far.
    pub fn stats(&self) -> &PerfScriptStats {
        &self.stats
    }

    /// The next event, or `None` at the end of the input.
    pub fn next_event(&mut self) -> Result<Option<PerfEvent>, PerfScriptError> {
        let event = self.next_event_inner();
        self.stats.lines = self.units.lines();
        event
    }

    fn next_event_inner(&mut self) -> Result<Option<PerfEvent>, PerfScriptError> {
        while let Some(unit) = self.units.next_unit()? {
            match unit {
                Unit::Mmap(line) => match parse_mmap_line(line) {
                    Some(m) => return Ok(Some(PerfEvent::SideBand(SideBandEvent::Mmap2(m)))),
                    None => self.stats.unparsed_mmap_lines += 1,
                },
                Unit::Skipped { dropped } => self.stats.dropped_samples += dropped,
                Unit::Sample(text) => {
                    let parsed = text.parse(self.script_type, &mut self.tokens);
                    self.stats.dropped_samples += parsed.dropped;
                    self.stats.invalid_lbr_records += parsed.invalid_lbr_records;
                    if let Some(mut sample) = parsed.sample {
                        sample.count = text.count;
                        return Ok(Some(PerfEvent::Sample(sample)));
                    }
                }
            }
        }
        Ok(None)
    }
}

impl PerfScriptType {
    /// The type of the script `text` (named `name` in errors), decided as the reader
    /// decides it.
    pub fn of(text: &[u8], name: &str) -> Result<PerfScriptType, PerfScriptError> {
        detect_type(text, name)
    }
}

/// `checkPerfScriptType` over the first lines of `text`: the first line `isLBRSample`
/// accepts decides, hybrid when hex stack lines are right before it. Without such a line
/// (to the end of the text or the first [`MAX_DETECTION_LINES`] lines), text with call-stack
/// lines ([`parse_stack_line`]) is [`PerfScriptType::StackOnly`].
pub(crate) fn detect_type(text: &[u8], name: &str) -> Result<PerfScriptType, PerfScriptError> {
    let mut lines = DetectionLines {
        rest: text,
        lines: Vec::new(),
        name,
        limited: false,
    };
    let mut stack_lines = false;
    let mut i = 0usize; // index of the current line
    let found = loop {
        if !lines.have(i)? {
            break None;
        }
        if parse_dec(lines.lines[i]).is_some() {
            i += 1;
        }
        let mut frames = 0;
        while lines.have(i)? && parse_hex(trim_start(lines.lines[i])).is_some() {
            frames += 1;
            i += 1;
        }
        stack_lines |= frames > 0;
        if lines.have(i)? {
            if is_lbr_sample(lines.lines[i]) {
                break Some(if frames > 0 {
                    PerfScriptType::Hybrid
                } else {
                    PerfScriptType::LbrOnly
                });
            }
            stack_lines |=
                !is_mmap_event(lines.lines[i]) && parse_stack_line(lines.lines[i]).is_some();
            i += 1;
        }
    };
    match found {
        Some(found) => Ok(found),
        None if stack_lines => Ok(PerfScriptType::StackOnly),
        None if lines.limited => Err(PerfScriptError::TooManyLinesBeforeFirstSample {
            name: name.to_string(),
            max: MAX_DETECTION_LINES,
        }),
        None => Err(PerfScriptError::InvalidInput {
            name: name.to_string(),
            lines: lines.lines.len() as u64,
        }),
    }
}

/// The lines type detection has looked at, split on demand (at most
/// [`MAX_DETECTION_LINES`]).
struct DetectionLines<'a, 'n> {
    rest: &'a [u8],
    lines: Vec<&'a [u8]>,
    name: &'n str,
    /// [`MAX_DETECTION_LINES`] were split and more text follows.
    limited: bool,
}

impl DetectionLines<'_, '_> {
    /// Splits lines until line `i` exists; false at the end of the text or past
    /// [`MAX_DETECTION_LINES`] lines (then `limited`).
    fn have(&mut self, i: usize) -> Result<bool, PerfScriptError> {
        while self.lines.len() <= i {
            if self.rest.is_empty() {
                return Ok(false);
            }
            let len = memchr::memchr(b'\n', self.rest).unwrap_or(self.rest.len());
            if len > MAX_LINE_BYTES {
                return Err(PerfScriptError::LineTooLong {
                    name: self.name.to_string(),
                    line: self.lines.len() as u64 + 1,
                    max: MAX_LINE_BYTES,
                });
            }
            if self.lines.len() >= MAX_DETECTION_LINES {
                self.limited = true;
                return Ok(false);
            }
            self.lines.push(&self.rest[..len]);
            self.rest = &self.rest[(len + 1).min(self.rest.len())..];
        }
        Ok(true)
    }
}

impl Iterator for PerfScriptReader<'_> {
    type Item = Result<PerfEvent, PerfScriptError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.next_event() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// `isMMapEvent`: at least 50 bytes, not starting with a digit, containing `PERF_RECORD_MMAP`.
pub fn is_mmap_event(line: &[u8]) -> bool {
    line.len() >= 50 && !line[0].is_ascii_digit() && find(line, b"PERF_RECORD_MMAP").is_some()
}

/// `isLBRSample` (llvm-profgen 19, plus the newer `event:` token): split the trimmed line on
/// single spaces into at most three pieces (`split(" ", 2, KeepEmpty=false)`); the second
/// piece must start with `0x` and contain `/`.
pub fn is_lbr_sample(line: &[u8]) -> bool {
    let mut t = trim(line);
    // An `event:` first token: look at the rest.
    if let Some(sp) = t.iter().position(|&b| b == b' ') {
        if t[..sp].ends_with(b":") {
            t = trim(&t[sp..]);
        }
    }
    let pieces = split_limited(t, 2);
    pieces.len() >= 2 && pieces[1].starts_with(b"0x") && pieces[1].contains(&b'/')
}

/// LLVM `StringRef::split(Out, " ", MaxSplit, KeepEmpty=false)`: empty pieces still use up
/// a split.
fn split_limited(s: &[u8], max_split: usize) -> Vec<&[u8]> {
    let mut out = Vec::with_capacity(3);
    let mut rest = s;
    for _ in 0..max_split {
        let Some(i) = rest.iter().position(|&b| b == b' ') else {
            break;
        };
        if i > 0 {
            out.push(&rest[..i]);
        }
        rest = &rest[i + 1..];
    }
    if !rest.is_empty() {
        out.push(rest);
    }
    out
}

pub(crate) enum LbrLine {
    /// The leading token had no `/` and was not hex: the sample is dropped.
    BadLeadingIp,
    /// The entries were parsed (possibly none); `truncated` when a malformed entry ended
    /// the list.
    Entries { ip: Option<u64>, truncated: bool },
}

/// `extractLBRStack` at the text level, the entries into `entries` (cleared first). Hot:
/// one pass over the bytes, no allocation but what `entries` grows by. From any of its
/// first entries on (past an event name and a leading IP), a line that repeats the entries
/// of the line parsed before takes them ([`PreviousLine`]).
pub(crate) fn parse_lbr_line(
    line: &[u8],
    cache: &mut EntryTokenCache,
    entries: &mut Vec<LbrEntry>,
) -> LbrLine {
    let line = trim_end(line);
    // Token starts are kept as `u32`: a longer line is parsed token by token.
    let take_previous = line.len() <= u32::MAX as usize;
    let mut pos = 0usize;
    // 0: an `event:` name may come; 1: a leading IP may come; 2: entries only.
    let mut state = 0u8;
    let mut ip = None;
    entries.clear();
    let mut starts = std::mem::take(&mut cache.starts);
    starts.clear();
    let truncated = loop {
        if state == 2 {
            // Hot path: most tokens are well-formed entries, parsed in one pass.
            while pos < line.len() && line[pos] == b' ' {
                pos += 1;
            }
            if take_previous && pos < line.len() && cache.previous.worth_trying(entries.len()) {
                if let Some((taken, at)) = cache.previous.entries_of(&line[pos..]) {
                    entries.extend_from_slice(taken);
                    starts.extend(at.iter().map(|&s| s + pos as u32));
                    break false;
                }
            }
            if let Some((entry, end)) = cache.entry(line, pos) {
                entries.push(entry);
                starts.push(pos as u32);
                pos = end;
                continue;
            }
        }
        let Some(token) = next_token(line, &mut pos) else {
            break false;
        };
        if state < 2 {
            if state == 0 && token.ends_with(b":") {
                state = 1;
                continue;
            }
            state = 2;
            if !token.contains(&b'/') {
                match parse_hex(token) {
                    Some(v) => ip = Some(v),
                    None => {
                        cache.previous.forget();
                        cache.starts = starts;
                        return LbrLine::BadLeadingIp;
                    }
                }
                continue;
            }
        }
        match parse_lbr_entry(token) {
            Some(e) => {
                entries.push(e);
                starts.push((pos - token.len()) as u32);
            }
            None => break true,
        }
    };
    if truncated || !take_previous {
        cache.previous.forget();
    } else {
        cache.previous.remember(line, &starts, entries);
    }
    cache.starts = starts;
    LbrLine::Entries { ip, truncated }
}

/// The next run of non-space bytes (`split(" ", KeepEmpty=false)`).
fn next_token<'a>(line: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    let mut i = *pos;
    while i < line.len() && line[i] == b' ' {
        i += 1;
    }
    if i == line.len() {
        *pos = i;
        return None;
    }
    let start = i;
    while i < line.len() && line[i] != b' ' {
        i += 1;
    }
    *pos = i;
    Some(&line[start..i])
}

/// Hex digit values of bytes; `0xff` for bytes that are not hex digits.
static HEX_DIGIT: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// `0x` then 1 to 16 hex digits at `line[*pos..]` (at most 16 digits cannot overflow); the
/// value, with `*pos` on the byte after the digits. `None` for anything else.
/// A word at a time ([`leading_hex`]).
#[inline(always)]
fn fast_prefixed_hex(line: &[u8], pos: &mut usize) -> Option<u64> {
    let start = *pos;
    if line.get(start..start + 2)? != b"0x" {
        return None;
    }
    let digits = &line[start + 2..];
    let (n, v) = leading_hex(digits);
    // More than sixteen digits: left to the general path.
    let longer = n == 16
        && digits
            .get(16)
            .is_some_and(|&b| HEX_DIGIT[b as usize] != 0xff);
    if n == 0 || longer {
        return None;
    }
    *pos = start + 2 + n;
    Some(v)
}

/// The hex digits that `bytes` starts with, up to 16 of them: how many and their value
/// ([`hex_digits16`] on the first 16 bytes, or on all of fewer padded with zero bytes,
/// which are not digits).
#[inline(always)]
fn leading_hex(bytes: &[u8]) -> (usize, u64) {
    let (lo, hi) = first_16_bytes(bytes);
    hex_digits16(lo, hi)
}

/// The first 16 bytes of `bytes` as two little-endian words, zero bytes past its end. A
/// short slice is read with overlapping loads of its own bytes, put together by shifts:
/// copying it into a zeroed buffer and loading the words from there stalls the loads (the
/// processor cannot forward the copy's smaller stores to them), which cost more than
/// reading the digits.
#[inline(always)]
pub(crate) fn first_16_bytes(bytes: &[u8]) -> (u64, u64) {
    let n = bytes.len();
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let half = |at: usize| {
        u64::from(u32::from_le_bytes(
            bytes[at..at + 4].try_into().expect("4 bytes"),
        ))
    };
    match n {
        16.. => (word(0), word(8)),
        // `bytes[n - 8..]` holds `bytes[8..]` from its byte 16 - n on.
        9..=15 => (word(0), word(n - 8) >> (8 * (16 - n))),
        8 => (word(0), 0),
        // The two halves overlap by 8 - n bytes, equal in both.
        4..=7 => (half(0) | (half(n - 4) << (8 * (n - 4))), 0),
        1..=3 => {
            let b = |i: usize| u64::from(bytes[i]) << (8 * i);
            (b(0) | b(n / 2) | b(n - 1), 0)
        }
        0 => (0, 0),
    }
}

/// The leading hex digits of 16 bytes (`lo` the first eight, little-endian): how many (0
/// to 16) and their value. Both halves are classified and packed at once (two independent
/// chains of word operations), the digits found in them kept by shifts.
#[inline(always)]
fn hex_digits16(lo: u64, hi: u64) -> (usize, u64) {
    let (n_lo, n_hi) = (hex_run(lo), hex_run(hi));
    let n = if n_lo < 8 { n_lo } else { 8 + n_hi };
    let (v_lo, v_hi) = (pack_hex8(lo), pack_hex8(hi));
    let v = if n <= 8 {
        v_lo >> (4 * (8 - n))
    } else {
        (v_lo << (4 * (n - 8))) | (v_hi >> (4 * (16 - n)))
    };
    (n, v)
}

/// How many of the 8 bytes of `x` (first byte in the low bits) are hex digits before the
/// first that is not (0 to 8).
#[inline(always)]
fn hex_run(x: u64) -> usize {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const CASE: u64 = 0x2020_2020_2020_2020;
    // Setting bit 5 turns `A`-`F` into `a`-`f` and nothing else into them (digits are
    // checked on the bytes as they are: it would also turn 0x10-0x19 into digits).
    let hex = bytes_between(x, b'0' as u64 - 1, b'9' as u64 + 1)
        | bytes_between(x | CASE, b'a' as u64 - 1, b'f' as u64 + 1);
    ((!hex & HIGH).trailing_zeros() / 8) as usize
}

/// The 8 bytes of `x` read as hex digits, the first one most significant (bytes that are not
/// hex digits give some nibble: the caller shifts them out).
#[inline(always)]
fn pack_hex8(x: u64) -> u64 {
    // Digit values: the low nibble, plus 9 for letters (bit 6 set).
    let d = (x & 0x0f0f_0f0f_0f0f_0f0f) + ((x >> 6) & 0x0101_0101_0101_0101) * 9;
    // Pack the nibbles, first digit most significant: pairs, then quads, then all eight.
    let d = ((d & 0x0f00_0f00_0f00_0f00) >> 8) | ((d & 0x000f_000f_000f_000f) << 4);
    let d = ((d & 0x00ff_0000_00ff_0000) >> 16) | ((d & 0x0000_00ff_0000_00ff) << 8);
    ((d & 0x0000_ffff_0000_0000) >> 32) | ((d & 0x0000_0000_0000_ffff) << 16)
}

/// Per byte of `x`, high bit set when `low < byte < high` (both below 128; bytes of 128
/// and up never match). Exact per byte: the arithmetic runs on 7-bit lanes, so no carry
/// crosses bytes (the "hasbetween" bit trick).
#[inline]
fn bytes_between(x: u64, low: u64, high: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const LOW7: u64 = ONES * 0x7f;
    const HIGH: u64 = ONES * 0x80;
    let seven = x & LOW7;
    ((ONES * (127 + high)).wrapping_sub(seven) & !x & (seven + ONES * (127 - low))) & HIGH
}

/// Entry tokens already parsed by [`fast_lbr_entry`], by their exact bytes: a program
/// takes few distinct branches, so the same `0xFROM/0xTO/P/-/-/0` tokens come back in
/// sample after sample (with hardware cycle counts, a few per branch). A direct-mapped
/// table keyed by a hash of the token's bytes; a hit is checked byte for byte, so the
/// result is exactly the parser's (which depends only on the token's bytes: it ends at a
/// space or the end of the line). One per parsing thread.
pub struct EntryTokenCache {
    slots: Box<[EntryTokenSlot]>,
    /// The line parsed last.
    previous: PreviousLine,
    /// Scratch: where the entries of the line being parsed start.
    starts: Vec<u32>,
}

/// Longest token kept (a 48-bit address pair with flags and cycles is about 40 bytes).
const TOKEN_SLOT_WORDS: usize = 7;
const TOKEN_SLOT_BYTES: usize = TOKEN_SLOT_WORDS * 8;
/// log2 of the slots in an [`EntryTokenCache`].
const TOKEN_SLOT_BITS: u32 = 10;

#[derive(Clone, Copy)]
struct EntryTokenSlot {
    /// Token length; 0 for an empty slot.
    len: u8,
    /// The token's bytes, little-endian words, zero past `len`.
    words: [u64; TOKEN_SLOT_WORDS],
    entry: LbrEntry,
}

impl Default for EntryTokenCache {
    fn default() -> Self {
        EntryTokenCache::new()
    }
}

impl std::fmt::Debug for EntryTokenCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntryTokenCache").finish_non_exhaustive()
    }
}

impl EntryTokenCache {
    /// An empty cache.
    pub fn new() -> EntryTokenCache {
        let empty = EntryTokenSlot {
            len: 0,
            words: [0; TOKEN_SLOT_WORDS],
            entry: LbrEntry::default(),
        };
        EntryTokenCache {
            slots: vec![empty; 1 << TOKEN_SLOT_BITS].into_boxed_slice(),
            previous: PreviousLine::default(),
            starts: Vec::new(),
        }
    }

    /// [`fast_lbr_entry`]`(line, start)`, from the table when the same token was seen.
    /// The last token of a line and tokens over 56 bytes are parsed directly.
    #[inline]
    fn entry(&mut self, line: &[u8], start: usize) -> Option<(LbrEntry, usize)> {
        let Some(rest) = line.get(start..start + TOKEN_SLOT_BYTES + 1) else {
            return fast_lbr_entry(line, start);
        };
        // The token's words, read once: the first space ends the token (found in the
        // words themselves, eight bytes at a time), the bytes from it on are zeroed.
        const ONES: u64 = 0x0101_0101_0101_0101;
        const SPACES: u64 = ONES * b' ' as u64;
        let mut words = [0u64; TOKEN_SLOT_WORDS];
        let mut len = None;
        for (i, w) in words.iter_mut().enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(&rest[i * 8..i * 8 + 8]);
            let x = u64::from_le_bytes(b);
            let y = x ^ SPACES;
            // Zero bytes of `y` (spaces of `x`): the lowest flagged one is exact.
            let space = y.wrapping_sub(ONES) & !y & (ONES * 0x80);
            if space != 0 {
                let k = (space.trailing_zeros() / 8) as usize;
                *w = if k == 0 {
                    0
                } else {
                    x & (!0u64 >> (64 - 8 * k))
                };
                len = Some(i * 8 + k);
                break;
            }
            *w = x;
        }
        let len = match len {
            Some(len) => len,
            None if rest[TOKEN_SLOT_BYTES] == b' ' => TOKEN_SLOT_BYTES,
            None => return fast_lbr_entry(line, start),
        };
        if len == 0 {
            return fast_lbr_entry(line, start);
        }
        let used = len.div_ceil(8);
        let mut h = len as u64;
        for &w in &words[..used] {
            h = (h.rotate_left(5) ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        let slot = &mut self.slots[(h >> (64 - TOKEN_SLOT_BITS)) as usize];
        // All the words: past the token both are zero. Folded by hand: `==` on the arrays
        // (56 bytes, not a power of two) called `memcmp`.
        let differ = slot
            .words
            .iter()
            .zip(&words)
            .fold(0u64, |d, (a, b)| d | (a ^ b));
        if usize::from(slot.len) == len && differ == 0 {
            return Some((slot.entry, start + len));
        }
        let (entry, end) = fast_lbr_entry(line, start)?;
        if end == start + len {
            slot.words = words;
            slot.len = len as u8;
            slot.entry = entry;
        }
        Some((entry, end))
    }
}

/// The common well-formed entry token starting at `line[start]`, `0xFROM/0xTO[/FLAGS...]`,
/// parsed in one pass; the entry and the token's end. `None` for any other shape, where the
/// general `next_token` + [`parse_lbr_entry`] path decides (and decides the same for tokens
/// this accepts).
#[inline]
fn fast_lbr_entry(line: &[u8], start: usize) -> Option<(LbrEntry, usize)> {
    let mut i = start;
    let from = fast_prefixed_hex(line, &mut i)?;
    if line.get(i) != Some(&b'/') {
        return None;
    }
    i += 1;
    let to = fast_prefixed_hex(line, &mut i)?;
    let mut flags = 0;
    match line.get(i) {
        None | Some(b' ') => {}
        Some(b'/') => {
            if let Some((f, end)) = fast_lbr_flags(line, i + 1) {
                return Some((LbrEntry { from, to, flags: f }, end));
            }
            let rest_start = i + 1;
            while i < line.len() && line[i] != b' ' {
                i += 1;
            }
            flags = parse_lbr_flags(line[rest_start..i].split(|&b| b == b'/'));
        }
        Some(_) => return None,
    }
    Some((LbrEntry { from, to, flags }, i))
}

/// The common flag fields at `line[i..]`, `[MP-]/[X-]/[A-]/CYCLES` then the token's end or
/// `/` and more fields (ignored), in one pass: the flag word and the token's end. `None`
/// for other shapes, which [`parse_lbr_flags`] decides.
#[inline(always)]
fn fast_lbr_flags(line: &[u8], i: usize) -> Option<(u64, usize)> {
    let f = line.get(i..i + 6)?;
    if f[1] != b'/' || f[3] != b'/' || f[5] != b'/' {
        return None;
    }
    let mut flags = match f[0] {
        b'M' => 1,
        b'P' => 2,
        b'-' => 0,
        _ => return None,
    };
    match f[2] {
        b'X' => flags |= 4,
        b'-' => {}
        _ => return None,
    }
    match f[4] {
        b'A' => flags |= 8,
        b'-' => {}
        _ => return None,
    }
    let digits_start = i + 6;
    let mut j = digits_start;
    let mut cycles = 0u64;
    while let Some(&b) = line.get(j) {
        if !b.is_ascii_digit() {
            break;
        }
        // 19 digits always fit in a u64; longer numbers go the general way.
        if j - digits_start == 19 {
            return None;
        }
        cycles = cycles * 10 + u64::from(b - b'0');
        j += 1;
    }
    if j == digits_start {
        return None;
    }
    match line.get(j) {
        None | Some(b' ') => {}
        Some(b'/') => {
            while j < line.len() && line[j] != b' ' {
                j += 1;
            }
        }
        Some(_) => return None,
    }
    Some((flags | (cycles.min(0xffff) << 4), j))
}

/// One `0xFROM/0xTO/P/-/-/CYCLES[/TYPE]` token. Like llvm-profgen, the first two characters of
/// FROM and TO are skipped unchecked. The flag word is rebuilt from the optional fields
/// (`M` bit 0, `P` bit 1, `X` bit 2, `A` bit 3, cycles in bits 4..19); llvm-profgen ignores them.
fn parse_lbr_entry(token: &[u8]) -> Option<LbrEntry> {
    let mut parts = token.split(|&b| b == b'/');
    let from = parse_hex(parts.next()?.get(2..)?)?;
    let to = parse_hex(parts.next()?.get(2..)?)?;
    let flags = parse_lbr_flags(parts);
    Some(LbrEntry { from, to, flags })
}

/// The flag word from the `/`-separated fields after FROM and TO (`M`/`P`, `X`, `A`, cycles).
fn parse_lbr_flags<'a>(mut parts: impl Iterator<Item = &'a [u8]>) -> u64 {
    let mut flags = 0u64;
    let Some(p) = parts.next() else {
        return 0;
    };
    match p {
        b"M" => flags |= 1,
        b"P" => flags |= 2,
        _ => {}
    }
    if parts.next() == Some(b"X") {
        flags |= 4;
    }
    if parts.next() == Some(b"A") {
        flags |= 8;
    }
    if let Some(cycles) = parts.next().and_then(parse_dec) {
        flags |= cycles.min(0xffff) << 4;
    }
    flags
}

/// Parses an MMAP or MMAP2 line as llvm-profgen's regexes do; `None` if it does not match.
pub fn parse_mmap_line(line: &[u8]) -> Option<Mmap2Event> {
    let (mmap2, start) = if let Some(i) = find(line, b"PERF_RECORD_MMAP2 ") {
        (true, i + b"PERF_RECORD_MMAP2 ".len())
    } else {
        (
            false,
            find(line, b"PERF_RECORD_MMAP ")? + b"PERF_RECORD_MMAP ".len(),
        )
    };
    let mut c = Scan {
        s: line,
        pos: start,
    };
    // (-?[0-9]+)/[0-9]+: \[
    let neg = c.eat(b"-");
    let pid = c.digits(10)?;
    let pid = if neg {
        (pid as i64).wrapping_neg()
    } else {
        pid as i64
    } as i32;
    c.expect(b"/")?;
    let tid = c.digits(10)? as i32;
    c.expect(b": [0x")?;
    // (0x[a-f0-9]+)\((0x[a-f0-9]+)\) @ (0x[a-f0-9]+|0)
    let addr = c.lower_hex()?;
    c.expect(b"(0x")?;
    let len = c.lower_hex()?;
    c.expect(b") @ ")?;
    let pgoff = if c.eat(b"0x") {
        c.lower_hex()?
    } else {
        c.expect(b"0").map(|_| 0)?
    };
    let mut m = Mmap2Event {
        pid,
        tid,
        addr,
        len,
        pgoff,
        ..Mmap2Event::default()
    };
    let tail_start;
    if mmap2 {
        // ` .*\]: ([-a-z]+) (.*)`: the greedy `.*` takes the last `]: ` that is followed by
        // a prot word and a space.
        c.expect(b" ")?;
        let rest = &line[c.pos..];
        let mut found = None;
        let mut end = rest.len();
        while let Some(i) = rfind(&rest[..end], b"]: ") {
            if prot_then_space(&rest[i + 3..]).is_some() {
                found = Some(i);
                break;
            }
            end = i + 2; // search strictly before this match (`]: ` may not overlap itself)
            if i == 0 {
                break;
            }
        }
        let i = found?;
        parse_device_inode(&rest[..i], &mut m);
        tail_start = c.pos + i + 3;
    } else {
        c.expect(b"]: ")?;
        tail_start = c.pos;
    }
    let tail = &line[tail_start..];
    let prot_len = prot_then_space(tail)?;
    for &b in &tail[..prot_len] {
        match b {
            b'r' => m.prot |= 1,
            b'w' => m.prot |= 2,
            b'x' => m.prot |= 4,
            b's' => m.flags |= 1, // MAP_SHARED
            b'p' => m.flags |= 2, // MAP_PRIVATE
            _ => {}
        }
    }
    m.filename = String::from_utf8_lossy(&tail[prot_len + 1..]).into_owned();
    Some(m)
}

/// Length of a `[-a-z]+` word at the start of `s` when a space follows it.
fn prot_then_space(s: &[u8]) -> Option<usize> {
    let n = s
        .iter()
        .take_while(|&&b| b == b'-' || b.is_ascii_lowercase())
        .count();
    (n > 0 && s.get(n) == Some(&b' ')).then_some(n)
}

/// Best effort on MMAP2's `MAJ:MIN INO INO_GEN` (hex device numbers, decimal inode and
/// generation); left 0 when the text has another shape (a build id).
fn parse_device_inode(s: &[u8], m: &mut Mmap2Event) {
    let mut words = s.split(|&b| b == b' ').filter(|w| !w.is_empty());
    let (Some(dev), Some(ino), Some(generation)) = (words.next(), words.next(), words.next())
    else {
        return;
    };
    let Some(colon) = dev.iter().position(|&b| b == b':') else {
        return;
    };
    if let (Some(maj), Some(min), Some(ino), Some(generation)) = (
        parse_hex(&dev[..colon]),
        parse_hex(&dev[colon + 1..]),
        parse_dec(ino),
        parse_dec(generation),
    ) {
        (m.maj, m.min, m.ino, m.ino_generation) = (maj as u32, min as u32, ino, generation);
    }
}

/// A cursor for the hand-written regex match.
struct Scan<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Scan<'_> {
    fn eat(&mut self, lit: &[u8]) -> bool {
        if self.s[self.pos..].starts_with(lit) {
            self.pos += lit.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, lit: &[u8]) -> Option<()> {
        self.eat(lit).then_some(())
    }

    /// `[0-9]+` (radix 10) as u64 (wrapping like `getAsInteger` would fail; we refuse overflow).
    fn digits(&mut self, radix: u32) -> Option<u64> {
        let n = self.s[self.pos..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let v = parse_radix(&self.s[self.pos..self.pos + n], radix)?;
        self.pos += n;
        Some(v)
    }

    /// `[a-f0-9]+` as u64.
    fn lower_hex(&mut self) -> Option<u64> {
        let n = self.s[self.pos..]
            .iter()
            .take_while(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
            .count();
        let v = parse_hex(&self.s[self.pos..self.pos + n])?;
        self.pos += n;
        Some(v)
    }
}

fn parse_radix(s: &[u8], radix: u32) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        let d = (b as char).to_digit(radix)?;
        v = v.checked_mul(radix as u64)?.checked_add(d as u64)?;
    }
    Some(v)
}

/// LLVM `getAsInteger(16, u64)`: the whole string, hex digits of either case, no prefix, no
/// overflow.
pub fn parse_hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    // Up to 16 digits (a stack line's address): a word at a time.
    if s.len() <= 16 {
        let (n, v) = leading_hex(s);
        return (n == s.len()).then_some(v);
    }
    let mut v: u64 = 0;
    for &b in s {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        if v >> 60 != 0 {
            return None; // the next digit would overflow
        }
        v = (v << 4) | d as u64;
    }
    Some(v)
}

/// LLVM `getAsInteger(10, u64)`: the whole string, decimal digits only.
pub fn parse_dec(s: &[u8]) -> Option<u64> {
    parse_radix(s, 10)
}

/// `isSpace` of LLVM's `StringRef::trim`.
pub(crate) fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

pub(crate) fn trim_start(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&b| is_space(b)).count();
    &s[n..]
}

pub(crate) fn trim_end(s: &[u8]) -> &[u8] {
    let n = s.iter().rev().take_while(|&&b| is_space(b)).count();
    &s[..s.len() - n]
}

fn trim(s: &[u8]) -> &[u8] {
    trim_end(trim_start(s))
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

fn rfind(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).rposition(|w| w == n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(
        text: &str,
    ) -> Result<(PerfScriptType, Vec<PerfEvent>, PerfScriptStats), PerfScriptError> {
        let mut r = PerfScriptReader::new(text.as_bytes(), "test")?;
        let ty = r.script_type();
        let mut events = Vec::new();
        while let Some(e) = r.next_event()? {
            events.push(e);
        }
        Ok((ty, events, *r.stats()))
    }

    /// A line past [`MAX_LINE_BYTES`] (say, a file without newlines) is an error naming
    /// the line, not an unbounded buffer.
    #[test]
    fn overlong_line_is_an_error() {
        let lbr = " 0x4005c8/0x4005dc/P/-/-/0  0x40062f/0x4005b0/P/-/-/0\n";
        let long = format!("{lbr}{lbr}{}\n", "a".repeat(MAX_LINE_BYTES + 1));
        match read(&long) {
            Err(e @ PerfScriptError::LineTooLong { line: 3, .. }) => {
                assert_eq!(e.to_string(), "test:3: line longer than 1048576 bytes")
            }
            other => panic!("{other:?}"),
        }
        // Exactly at the limit (newline excluded) is fine.
        let ok = format!("{lbr}{}\n{lbr}", "a".repeat(MAX_LINE_BYTES));
        assert!(read(&ok).is_ok());
    }

    fn samples(events: &[PerfEvent]) -> Vec<&crate::Sample> {
        events
            .iter()
            .filter_map(|e| {
                if let PerfEvent::Sample(s) = e {
                    Some(s)
                } else {
                    None
                }
            })
            .collect()
    }

    const MMAP2: &str = "PERF_RECORD_MMAP2 1243676/1243676: [0x301000(0x1000) @ 0 00:1d 224517108 1044165]: r-xp /home/noinline-cs-pseudoprobe.perfbin";

    #[test]
    fn mmap2_line_fields() {
        let m = parse_mmap_line(MMAP2.as_bytes()).unwrap();
        assert_eq!(
            m,
            Mmap2Event {
                pid: 1243676,
                tid: 1243676,
                addr: 0x301000,
                len: 0x1000,
                pgoff: 0,
                prot: 5,
                flags: 2,
                maj: 0,
                min: 0x1d,
                ino: 224517108,
                ino_generation: 1044165,
                build_id: None,
                filename: "/home/noinline-cs-pseudoprobe.perfbin".into(),
            }
        );
        let line = "PERF_RECORD_MMAP2 2113428/2113428: [0x7fd4efb57000(0x204000) @ 0x2000 08:04 19532229 3585508847]: r-xp /usr/lib64/libdl-2.17.so";
        let m = parse_mmap_line(line.as_bytes()).unwrap();
        assert_eq!(
            (m.addr, m.len, m.pgoff, m.maj, m.min),
            (0x7fd4efb57000, 0x204000, 0x2000, 8, 4)
        );
        assert_eq!(m.filename, "/usr/lib64/libdl-2.17.so");
    }

    #[test]
    fn mmap_line_kernel() {
        let line = "PERF_RECORD_MMAP -1/0: [0xffffffff81e00000(0x3e8fa000) @ 0xffffffff81e00000]: x [kernel.kallsyms]_text";
        let m = parse_mmap_line(line.as_bytes()).unwrap();
        assert_eq!(
            (m.pid, m.tid, m.addr, m.len, m.pgoff),
            (-1, 0, 0xffffffff81e00000, 0x3e8fa000, 0xffffffff81e00000)
        );
        assert_eq!((m.prot, m.filename.as_str()), (4, "[kernel.kallsyms]_text"));
    }

    #[test]
    fn mmap_lines_that_do_not_match() {
        // Upper-case hex is not `[a-f0-9]`; a missing prot; `@ 00` is neither `0x..` nor `0 `.
        for bad in [
            "PERF_RECORD_MMAP2 1/1: [0x301000(0x1000) @ 0 00:1d 224517108 1044165]: R-XP /bin/x",
            "PERF_RECORD_MMAP2 1/1: [0x301ABC(0x1000) @ 0 00:1d 224517108 1044165]: r-xp /bin/x",
            "PERF_RECORD_MMAP2 1/1: [0x301000(0x1000) @ 00 00:1d 224517108 1044165]: r-xp /bin/x",
            "PERF_RECORD_MMAP 1/1: [0x301000(0x1000) @ 0 extra]: r-xp /bin/xxxxxxxxxxxx",
        ] {
            assert_eq!(parse_mmap_line(bad.as_bytes()), None, "{bad}");
        }
        // A path containing "]: " keeps the greedy reading: the last `]: word ` wins.
        let tricky = "PERF_RECORD_MMAP2 1/1: [0x1000(0x1000) @ 0 00:1d 1 2]: r-xp /tmp/a]: b c";
        assert_eq!(parse_mmap_line(tricky.as_bytes()).unwrap().filename, "c");
    }

    #[test]
    fn hybrid_script_from_llvm_test_inputs() {
        let text = format!(
            "{MMAP2}\n\n\t          30179e\n\t          3017f9\n\t    7f83e84e7793\n\t5541f689495641d7\n \
             0x3017cf/0x30179e/P/-/-/0  0x30177f/0x3017c4/M/-/-/3 \n\n\t          301234\n \
             0x3017cf/0x30179e/P/-/-/0  0x30177f/0x3017c4/P/X/A/7/COND \n"
        );
        let (ty, events, stats) = read(&text).unwrap();
        assert_eq!(ty, PerfScriptType::Hybrid);
        assert!(
            matches!(&events[0], PerfEvent::SideBand(SideBandEvent::Mmap2(m)) if m.addr == 0x301000)
        );
        let s = samples(&events);
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[0].callchain,
            vec![0x30179e, 0x3017f9, 0x7f83e84e7793, 0x5541f689495641d7]
        );
        assert_eq!(s[0].ip, 0x30179e);
        assert_eq!(
            s[0].lbr,
            vec![
                LbrEntry {
                    from: 0x3017cf,
                    to: 0x30179e,
                    flags: 2
                },
                LbrEntry {
                    from: 0x30177f,
                    to: 0x3017c4,
                    flags: 1 | 3 << 4
                }
            ]
        );
        assert_eq!(s[1].lbr[1].flags, 2 | 4 | 8 | 7 << 4);
        assert_eq!((s[0].count, s[0].pid, s[0].time), (1, 0, 0));
        assert_eq!(
            stats,
            PerfScriptStats {
                lines: 10,
                unparsed_mmap_lines: 0,
                dropped_samples: 0,
                invalid_lbr_records: 0
            }
        );
    }

    #[test]
    fn lbr_only_with_leading_ip_counts_and_event_token() {
        let text = "40062f 0x4005c8/0x4005dc/P/-/-/0   0x40062f/0x4005b0/P/-/-/0\n\
                    3\n 0x1/0x2/P/-/-/0  0x3/0x4/P/-/-/0\n\
                    br_inst_retired.near_taken:uppp: 4005dc 0x5/0x6/P/-/-/0 0x7/0x8/-/-/-/0\n\
                    \n";
        let (ty, events, _) = read(text).unwrap();
        assert_eq!(ty, PerfScriptType::LbrOnly);
        let s = samples(&events);
        assert_eq!(s.len(), 3);
        assert_eq!((s[0].ip, s[0].count, s[0].lbr.len()), (0x40062f, 1, 2));
        assert_eq!((s[1].ip, s[1].count), (0, 3));
        assert_eq!(
            s[1].lbr,
            vec![
                LbrEntry {
                    from: 1,
                    to: 2,
                    flags: 2
                },
                LbrEntry {
                    from: 3,
                    to: 4,
                    flags: 2
                }
            ]
        );
        assert_eq!(
            (s[2].ip, s[2].lbr[1]),
            (
                0x4005dc,
                LbrEntry {
                    from: 7,
                    to: 8,
                    flags: 0
                }
            )
        );
        assert!(s.iter().all(|s| s.callchain.is_empty()));
    }

    #[test]
    fn type_detection_needs_two_entries_like_llvm_profgen_19() {
        // The first sample's one-entry line is not an LBR sample line for isLBRSample; the
        // second sample decides (hybrid).
        let text = "\t 4005dc\n 0x1/0x2/P/-/-/0\n\n\t 4005dc\n 0x1/0x2/P/-/-/0 0x3/0x4/P/-/-/0\n";
        let (ty, events, _) = read(text).unwrap();
        assert_eq!(ty, PerfScriptType::Hybrid);
        // Both samples are still read as hybrid samples.
        assert_eq!(samples(&events).len(), 2);
        assert!(is_lbr_sample(b" 0x1/0x2/P/-/-/0  0x3/0x4/P/-/-/0 "));
        assert!(is_lbr_sample(b"  40062f 0x1/0x2/P/-/-/0"));
        assert!(!is_lbr_sample(b" 0x1/0x2/P/-/-/0"));
        assert!(!is_lbr_sample(MMAP2.as_bytes()));
    }

    #[test]
    fn stack_lines_with_and_without_their_file() {
        let line = |s: &'static str| parse_stack_line(s.as_bytes());
        assert_eq!(
            line("\t            117d"),
            Some(StackLine {
                addr: 0x117d,
                dso: None
            })
        );
        assert_eq!(
            line("\t            117d (/tmp/a b/prog)"),
            Some(StackLine {
                addr: 0x117d,
                dso: Some(b"/tmp/a b/prog")
            })
        );
        // With a symbol (C++ ones have parentheses of their own).
        assert_eq!(
            line("\t    117d f(int) (/tmp/prog)").and_then(|l| l.dso),
            Some(&b"/tmp/prog"[..])
        );
        assert_eq!(line("\t 117d trailing words"), None);
        assert_eq!(line("rec 10990 123.45:  50000 cpu-clock:u:"), None);
        assert_eq!(line("cafe 10990 123.45:  50000 cpu-clock:u: (x"), None);
        assert_eq!(line(""), None);
    }

    #[test]
    fn stack_only_scripts_keep_header_lines_out() {
        // `perf script -F comm,ip,sym,dso`: a header line, then the frames.
        let text = "rec \n\t 117d fib (/tmp/prog)\n\t 1169 fib (/tmp/prog)\n\nrec \n\t 1180 main (/tmp/prog)\n";
        let (ty, events, _) = read(text).unwrap();
        assert_eq!(ty, PerfScriptType::StackOnly);
        assert_eq!(
            samples(&events)
                .iter()
                .map(|s| s.callchain.clone())
                .collect::<Vec<_>>(),
            vec![vec![0x117d, 0x1169], vec![0x1180]]
        );
    }

    #[test]
    fn invalid_input_and_missing_lbr_line() {
        let err = read("no sample\n\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "test: Invalid perf script input! (no LBR sample line and no call-stack line in 2 \
             lines)"
        );
        // Call-stack lines without a branch-stack line anywhere: stack-only.
        let (ty, events, _) = read("\t 4005dc\n\t 4005e0\n").unwrap();
        assert_eq!(ty, PerfScriptType::StackOnly);
        assert_eq!(
            samples(&events)
                .iter()
                .map(|s| (s.ip, s.callchain.clone()))
                .collect::<Vec<_>>(),
            vec![(0x4005dc, vec![0x4005dc, 0x4005e0])]
        );
        let text = "\t 10\n 0x1/0x2/P/-/-/0 0x3/0x4/P/-/-/0\n\n\t 4005dc\n\t 4005e0\n";
        let err = read(text).unwrap_err();
        assert_eq!(
            err.to_string(),
            "test:4: Hybrid perf sample is corrupted, No LBR sample line"
        );
    }

    /// perf prints an LBR sample whose branch stack is empty as its leading IP alone (the
    /// Skylake recording in ../shared/corpus has such lines): a sample, as llvm-profgen's
    /// `extractLBRStack` reads it (`--leading-ip-only` counts its IP), not malformed text.
    #[test]
    fn an_lbr_only_leading_ip_alone_is_a_sample() {
        let text = "     40062f 0x4005c8/0x4005dc/P/-/-/0   0x40062f/0x4005b0/P/-/-/0\n\
                    \x20    4005e0\n\
                    \x20    4005e0  \n";
        let (ty, events, stats) = read(text).unwrap();
        assert_eq!(ty, PerfScriptType::LbrOnly);
        let s = samples(&events);
        assert_eq!(
            s.iter().map(|s| (s.ip, s.lbr.len())).collect::<Vec<_>>(),
            [(0x40062f, 2), (0x4005e0, 0), (0x4005e0, 0)]
        );
        assert_eq!(stats.dropped_samples, 0);
    }

    #[test]
    fn hybrid_samples_dropped_for_their_text() {
        let text = "\t 10\n 0x1/0x2/P/-/-/0 0x3/0x4/P/-/-/0\n\
                    \t 20\n\t main+0x4\n 0x5/0x6/P/-/-/0 0x7/0x8/P/-/-/0\n\
                    \n 0x9/0xa/P/-/-/0 0xb/0xc/P/-/-/0\n\
                    \t 30\n zz 0xd/0xe/P/-/-/0\n\
                    \t 40\n 0xf/0x10/P/-/-/0 0x11/0x1g/P/-/-/0 0x13/0x14/P/-/-/0\n";
        let (_, events, stats) = read(text).unwrap();
        let s = samples(&events);
        // Kept: the first sample, and the last one cut at its malformed entry. Dropped: the
        // stack with a symbol line, the LBR line after a blank line. " zz ..." starts with
        // " 0x"? no: it is a non-hex stack line, so that sample is dropped too.
        assert_eq!(
            s.iter().map(|s| s.callchain.clone()).collect::<Vec<_>>(),
            vec![vec![0x10], vec![0x40]]
        );
        assert_eq!(
            s[1].lbr,
            vec![LbrEntry {
                from: 0xf,
                to: 0x10,
                flags: 2
            }]
        );
        assert_eq!((stats.dropped_samples, stats.invalid_lbr_records), (3, 1));
    }

    #[test]
    fn number_parsers_match_get_as_integer() {
        assert_eq!(parse_hex(b"5541f689495641d7"), Some(0x5541f689495641d7));
        assert_eq!(parse_hex(b"0005541f689495641d7"), Some(0x5541f689495641d7));
        assert_eq!(parse_hex(b"15541f689495641d7"), None);
        assert_eq!(parse_hex(b"0x10"), None);
        assert_eq!(parse_hex(b"AbC"), Some(0xabc));
        assert_eq!(parse_hex(b""), None);
        // Against a digit loop: every length to 20, all hex or one other byte (a zero
        // byte too, like the padding of short strings) anywhere.
        let reference = |s: &[u8]| -> Option<u64> {
            let text = std::str::from_utf8(s).ok()?;
            if s.is_empty() || !s.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            u64::from_str_radix(text, 16).ok()
        };
        let digits = b"0f9aA5cFd7E1b83420";
        for len in 0..=20usize {
            let all: Vec<u8> = (0..len)
                .map(|k| digits[(k * 5 + len) % digits.len()])
                .collect();
            assert_eq!(parse_hex(&all), reference(&all), "{all:?}");
            for at in 0..len {
                for other in [0u8, b'g', b' ', b'x', 0xff] {
                    let mut odd = all.clone();
                    odd[at] = other;
                    assert_eq!(parse_hex(&odd), None, "{odd:?}");
                }
            }
        }
        assert_eq!(parse_dec(b"123"), Some(123));
        assert_eq!(parse_dec(b" 123"), None);
        assert_eq!(parse_dec(b"18446744073709551616"), None);
    }

    #[test]
    fn fast_entry_path_agrees_with_the_general_parser() {
        let tokens: &[&[u8]] = &[
            b"0x4005f0/0x400600/P/-/-/0/",
            b"0x4005f0/0x400600/M/X/A/17/",
            b"0x4005f0/0x400600/P/-/-/70000",
            b"0x4005f0/0x400600",
            b"0x4005f0/0x400600/",
            b"0xffffffffffffffff/0x1/-/-/-/3/CALL",
            b"0x0000000000000000ff/0x1/P/-/-/0/",
            b"0x1ffffffffffffffff/0x1/P/-/-/0/",
            b"Xy4005f0/0x400600/P/-/-/0/",
            b"0x4005g0/0x400600/P/-/-/0/",
            b"0x4005f0",
            b"0x/0x1/P",
            b"0x4005f0/0x",
            b"0x4005f0/0x12\tz",
            b"0x1/0x2/-/X/A/65535",
            b"0x1/0x2/-/X/A/65536/IND_CALL",
            b"0x1/0x2/M/-/-/9999999999999999999/",
            b"0x1/0x2/M/-/-/99999999999999999999/",
            b"0x1/0x2/M/-/-/12x/",
            b"0x1/0x2/M/-/-//",
            b"0x1/0x2/Q/-/-/3/",
            b"0x1/0x2/P/Y/-/3/",
            b"0x1/0x2/P/-/B/3/",
            b"0x1/0x2/P/-/-",
            b"0x1/0x2/PP/-/-/4/",
        ];
        for &t in tokens {
            let fast = fast_lbr_entry(t, 0);
            if let Some((e, end)) = fast {
                assert_eq!(end, t.len(), "{}", String::from_utf8_lossy(t));
                assert_eq!(
                    Some(e),
                    parse_lbr_entry(t),
                    "{}",
                    String::from_utf8_lossy(t)
                );
            }
        }
        // Accepted shapes really take the fast path, with exact values.
        assert_eq!(
            fast_lbr_entry(b"  0x10/0x20/M/-/-/5/ 0x30/0x40", 2),
            Some((
                LbrEntry {
                    from: 0x10,
                    to: 0x20,
                    flags: 1 | (5 << 4)
                },
                20
            ))
        );
        assert_eq!(fast_lbr_entry(b"0x1ffffffffffffffff/0x1", 0), None);
        let t = b"0x1/0x2/-/X/A/65536/IND_CALL 0x3/0x4";
        assert_eq!(fast_lbr_flags(t, 8), Some((4 | 8 | (0xffff << 4), 28)));
        assert_eq!(fast_lbr_flags(b"M/-/-/12x/", 0), None);
        let mut entries = vec![LbrEntry::default()];
        match parse_lbr_line(
            b" 0x1/0x2/P/-/-/0/  0x3/0x4/P/-/-/0/ 0x5/0xz/P ",
            &mut EntryTokenCache::new(),
            &mut entries,
        ) {
            LbrLine::Entries {
                ip: None,
                truncated: true,
            } => assert_eq!(
                entries.iter().map(|e| (e.from, e.to)).collect::<Vec<_>>(),
                [(1, 2), (3, 4)]
            ),
            _ => panic!("expected two entries, then truncation"),
        }
    }

    /// The general path's reading of `0x` and hex digits at `line[pos..]`.
    fn digit_loop(line: &[u8], pos: usize) -> Option<(u64, usize)> {
        if line.get(pos..pos + 2)? != b"0x" {
            return None;
        }
        let digits = line[pos + 2..]
            .iter()
            .take_while(|&&b| HEX_DIGIT[b as usize] != 0xff)
            .count();
        if digits == 0 || digits > 16 {
            return None;
        }
        let text = std::str::from_utf8(&line[pos + 2..pos + 2 + digits]).unwrap();
        Some((u64::from_str_radix(text, 16).unwrap(), pos + 2 + digits))
    }

    #[test]
    fn word_hex_matches_the_digit_loop() {
        assert_eq!(hex_run(u64::from_le_bytes(*b"55555550")), 8);
        assert_eq!(pack_hex8(u64::from_le_bytes(*b"55555550")), 0x5555_5550);
        assert_eq!(hex_run(u64::from_le_bytes(*b"aBcF/0x1")), 4);
        assert_eq!(hex_run(u64::from_le_bytes(*b"/0x12345")), 0);
        assert_eq!(hex_run(u64::from_le_bytes(*b"9:`gG@/f")), 1);
        // Every byte value after a digit: only hex digits extend the run.
        for b in 0..=255u8 {
            let mut bytes = *b"7XXXXXXX";
            bytes[1] = b;
            let n = hex_run(u64::from_le_bytes(bytes));
            assert_eq!(
                n,
                if HEX_DIGIT[b as usize] == 0xff { 1 } else { 2 },
                "byte {b:#x}"
            );
        }
        // Every number of digits (0 to 20) in every case, followed by every kind of byte,
        // at the end of the line or not, the window fast or not.
        let digits = b"0123456789abcdefABCDEF";
        for n in 0..=20usize {
            for after in [
                &b""[..],
                b"/",
                b" ",
                b"g",
                b"\x10",
                b"0x1/0x2/P/-/-/1 0x3/0x4",
            ] {
                for lead in [0usize, 3] {
                    let mut line = b"   ".repeat(lead);
                    line.extend_from_slice(b"0x");
                    line.extend((0..n).map(|k| digits[(k * 7 + n) % digits.len()]));
                    line.extend_from_slice(after);
                    let pos = lead * 3;
                    let mut at = pos;
                    let got = fast_prefixed_hex(&line, &mut at).map(|v| (v, at));
                    assert_eq!(
                        got,
                        digit_loop(&line, pos),
                        "{:?}",
                        String::from_utf8_lossy(&line)
                    );
                }
            }
        }
        let line = b"0x7ffff7fe582e/0x7ffff7fe5819/P 0x0000000000000000001/0x1ffffffffffffffff/";
        let mut pos = 0;
        assert_eq!(fast_prefixed_hex(line, &mut pos), Some(0x7fff_f7fe_582e));
        assert_eq!(pos, 14);
        pos = 15;
        assert_eq!(fast_prefixed_hex(line, &mut pos), Some(0x7fff_f7fe_5819));
        // 19 digits (leading zeros) and 17 significant digits: the general path decides.
        pos = 32;
        assert_eq!(fast_prefixed_hex(line, &mut pos), None);
        pos = 54;
        assert_eq!(fast_prefixed_hex(line, &mut pos), None);
        assert_eq!(fast_prefixed_hex(b"0xabc", &mut 0), Some(0xabc));
    }

    /// A line parsed after another (taking the entries it repeats) reads as it reads
    /// alone: 20,000 lines, each the previous one shifted by 0 to 9 new tokens, with a
    /// token changed, the spacing changed, the last token cut short (so that a line ends
    /// inside a token of the previous one), a malformed token, a leading IP or an event
    /// name now and then.
    #[test]
    fn lines_read_after_others_read_as_alone() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let read = |line: &[u8], cache: &mut EntryTokenCache| {
            let mut entries = Vec::new();
            match parse_lbr_line(line, cache, &mut entries) {
                LbrLine::BadLeadingIp => None,
                LbrLine::Entries { ip, truncated } => Some((ip, entries, truncated)),
            }
        };
        let mut tokens: Vec<String> = Vec::new();
        let mut cache = EntryTokenCache::new();
        let mut lines = 0;
        for _ in 0..20_000 {
            let new: Vec<String> = (0..next(10))
                .map(|_| {
                    let (from, to) = (0x1000 + next(40), 0x2000 + next(40));
                    match next(3) {
                        0 => format!("0x{from:x}/0x{to:x}"),
                        1 => format!("0x{from:x}/0x{to:x}/P/-/-/{}", next(30)),
                        _ => format!("0x{from:x}/0x{to:x}/M/-/-/{}/", next(30)),
                    }
                })
                .collect();
            tokens.splice(0..0, new);
            tokens.truncate(8 + next(30) as usize);
            if tokens.len() > 3 && next(8) == 0 {
                let i = next(tokens.len() as u64) as usize;
                tokens[i] = format!("0x{:x}/0x7", next(50));
            }
            if let Some(last) = tokens.last_mut().filter(|_| next(6) == 0) {
                last.truncate(1 + next(last.len() as u64) as usize);
            }
            if tokens.len() > 2 && next(20) == 0 {
                tokens[1] = "0x1/0xzz".into();
            }
            let gap = if next(10) == 0 { "  " } else { " " };
            let mut line = match next(20) {
                0 => "4005c8 ".to_string(),
                1 => "cycles: ".to_string(),
                _ => " ".to_string(),
            };
            line += &tokens.join(gap);
            if next(10) == 0 {
                line += "  ";
            }
            let alone = read(line.as_bytes(), &mut EntryTokenCache::new());
            let after = read(line.as_bytes(), &mut cache);
            assert_eq!(after, alone, "{line}");
            lines += 1;
        }
        // Many lines took entries from the previous one (the others had an edit in the way).
        let taken = cache.previous.taken.get();
        assert!(taken * 4 > lines, "{taken} of {lines}");
    }

    /// The token cache gives what parsing gives, token after token and again from the
    /// cache: 4,096 tokens sharing their first words (so that slots are taken over and a
    /// comparison of fewer than all words would hit the wrong token), tokens ending at a
    /// word boundary, and one of the longest kept (56 bytes).
    #[test]
    fn cached_entries_are_the_parsed_ones() {
        let mut tokens: Vec<String> = (0..4096).map(|i| format!("0x1/0x2/P/-/-/{i}")).collect();
        // 8, 16 and 24 bytes, then 56.
        tokens
            .extend(["0x1/0x23", "0x1/0x2/P/-/-/12", "0x1234/0x5678/M/-/-/9876"].map(String::from));
        tokens.push(format!(
            "0x{}/0x{}/P/-/-/{}",
            "a".repeat(16),
            "b".repeat(16),
            "7".repeat(12)
        ));
        assert_eq!(tokens.last().unwrap().len(), TOKEN_SLOT_BYTES);
        let mut cache = EntryTokenCache::new();
        for round in 0..2 {
            for token in &tokens {
                let line = format!("{token}{}", " 0x1/0x2".repeat(8));
                let cached = cache.entry(line.as_bytes(), 0);
                assert_eq!(
                    cached,
                    fast_lbr_entry(line.as_bytes(), 0),
                    "{token} (round {round})"
                );
                assert_eq!(cached.map(|(_, end)| end), Some(token.len()));
            }
        }
    }

    /// The words of a slice of every length up to 20 are those of its bytes copied into
    /// a zeroed 16-byte buffer (each byte distinct and non-zero, so a byte read from the
    /// wrong place or twice shows).
    #[test]
    fn first_16_bytes_read_as_if_zero_padded() {
        let bytes: Vec<u8> = (1..=20).map(|k| k * 11).collect();
        for n in 0..=20 {
            let mut padded = [0u8; 16];
            let m = n.min(16);
            padded[..m].copy_from_slice(&bytes[..m]);
            let lo = u64::from_le_bytes(padded[..8].try_into().unwrap());
            let hi = u64::from_le_bytes(padded[8..].try_into().unwrap());
            assert_eq!(first_16_bytes(&bytes[..n]), (lo, hi), "{n} bytes");
        }
    }
}

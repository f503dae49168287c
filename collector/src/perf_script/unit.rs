//! The perf script grammar at the level of units: one step of llvm-profgen's reading loop
//! (`PerfScriptReader::parseEventOrSample`) over text in memory, without parsing the
//! branch-stack line.
//!
//! A unit is an MMAP line, a sample's text (an optional count line, the stack lines of a
//! hybrid sample, its branch-stack line), or lines that make no sample. Splitting text
//! into units needs only line boundaries and the shape of each line; the expensive part,
//! the branch-stack line, is parsed by [`SampleText::parse`] — once per distinct text
//! when the caller aggregates identical texts first (see [`super::tally`]).
//!
//! After any line starting with `" 0x"` the loop is back at its top whatever came before
//! (such a line ends a sample, is dropped with the lines before it, or is an MMAP line),
//! which is where [`super::tally`] may cut the text to scan it on several threads.

use super::reader::{
    is_mmap_event, parse_dec, parse_hex, parse_lbr_line, parse_stack_line, trim_end, trim_start,
    EntryTokenCache, LbrLine, PerfScriptError, PerfScriptType, MAX_LINE_BYTES,
};
use crate::Sample;

/// One step of the reading loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit<'a> {
    /// An MMAP line (not yet matched: it may still be skipped as unparsable).
    Mmap(&'a [u8]),
    /// The text of one sample.
    Sample(SampleText<'a>),
    /// Lines that make no sample; `dropped` samples are counted as dropped for their text.
    Skipped {
        /// Samples dropped (llvm-profgen drops them silently).
        dropped: u64,
    },
}

/// The text of one sample: for a hybrid sample its stack lines (already checked to be hex)
/// followed by its branch-stack line; for an LBR-only sample the branch-stack line; for a
/// stack-only sample its stack lines (no branch-stack line: `lbr_start` is the block's
/// length).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleText<'a> {
    /// The repeat count of its count line, else 1.
    pub count: u64,
    /// Stack lines and branch-stack line, without the count line and the final newline.
    pub block: &'a [u8],
    /// Where the branch-stack line starts in `block`.
    pub lbr_start: usize,
}

/// What parsing a [`SampleText`] gave, with the reader statistics it adds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedSample {
    /// The sample (`count` 1), or `None` when it is dropped.
    pub sample: Option<Sample>,
    /// 1 when the sample was dropped for its text and counts as dropped.
    pub dropped: u64,
    /// 1 when a malformed entry cut the branch-stack line.
    pub invalid_lbr_records: u64,
}

impl<'a> SampleText<'a> {
    /// The sample's stack lines (empty for LBR-only samples).
    pub fn stack_lines(&self) -> &'a [u8] {
        &self.block[..self.lbr_start]
    }

    /// The branch-stack line.
    pub fn lbr_line(&self) -> &'a [u8] {
        &self.block[self.lbr_start..]
    }

    /// The stack lines of a stack-only sample, parsed, leaf first.
    pub fn stack_frames(&self) -> impl Iterator<Item = super::reader::StackLine<'a>> {
        self.stack_lines()
            .split(|&b| b == b'\n')
            .filter_map(parse_stack_line)
    }

    /// Parses the text (`extractCallstack` + `extractLBRStack`), with `tokens` remembering
    /// entry tokens across calls. The count is not applied: the sample's `count` is 1.
    pub fn parse(&self, script_type: PerfScriptType, tokens: &mut EntryTokenCache) -> ParsedSample {
        let mut sample = Sample::default();
        let verdict = self.parse_into(script_type, tokens, &mut sample);
        ParsedSample {
            sample: verdict.kept.then_some(sample),
            dropped: verdict.dropped,
            invalid_lbr_records: verdict.invalid_lbr_records,
        }
    }

    /// [`SampleText::parse`] into `sample`, whose buffers are reused: every field is set
    /// when the sample is kept (else its contents are unspecified).
    pub fn parse_into(
        &self,
        script_type: PerfScriptType,
        tokens: &mut EntryTokenCache,
        sample: &mut Sample,
    ) -> ParseVerdict {
        let mut verdict = ParseVerdict {
            kept: false,
            dropped: 0,
            invalid_lbr_records: 0,
        };
        let mut lbr = std::mem::take(&mut sample.lbr);
        let mut callchain = std::mem::take(&mut sample.callchain);
        callchain.clear();
        if script_type == PerfScriptType::StackOnly {
            lbr.clear();
            callchain.extend(self.stack_frames().map(|f| f.addr));
            verdict.kept = !callchain.is_empty();
            let ip = callchain.first().copied().unwrap_or(0);
            if !self.block.starts_with(b"\t") {
                // A sample without call chain: its IP alone on its line.
                callchain.clear();
            }
            *sample = Sample {
                ip,
                callchain,
                lbr,
                count: 1,
                ..Sample::default()
            };
            return verdict;
        }
        let ip = match parse_lbr_line(self.lbr_line(), tokens, &mut lbr) {
            LbrLine::BadLeadingIp => Err(1),
            LbrLine::Entries { ip, truncated } => {
                verdict.invalid_lbr_records = u64::from(truncated);
                // An LBR-only line of a leading IP alone is a sample (llvm-profgen's
                // `extractLBRStack` takes it: `--leading-ip-only` counts its IP; otherwise
                // it has no branch to count).
                let ip_alone = script_type == PerfScriptType::LbrOnly && ip.is_some();
                if lbr.is_empty() && !ip_alone {
                    let blank = trim_end(self.lbr_line()).iter().all(|&b| b == b' ');
                    Err(u64::from(!blank))
                } else {
                    Ok(ip)
                }
            }
        };
        let ip = match (ip, script_type) {
            (Err(dropped), _) => {
                verdict.dropped = dropped;
                None
            }
            (Ok(_), PerfScriptType::Hybrid) => {
                callchain.extend(
                    self.stack_lines()
                        .split(|&b| b == b'\n')
                        .filter_map(|line| parse_hex(trim_start(line))),
                );
                Some(callchain.first().copied().unwrap_or(0))
            }
            (Ok(ip), PerfScriptType::LbrOnly) => Some(ip.unwrap_or(0)),
            (Ok(_), PerfScriptType::StackOnly) => unreachable!("stack-only samples returned above"),
        };
        verdict.kept = ip.is_some();
        *sample = Sample {
            ip: ip.unwrap_or(0),
            callchain,
            lbr,
            count: 1,
            ..Sample::default()
        };
        verdict
    }
}

/// What [`SampleText::parse_into`] decided, with the reader statistics it adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseVerdict {
    /// The sample was parsed (not dropped).
    pub kept: bool,
    /// 1 when the sample was dropped for its text and counts as dropped.
    pub dropped: u64,
    /// 1 when a malformed entry cut the branch-stack line.
    pub invalid_lbr_records: u64,
}

/// The units of a text, from a position where the reading loop is at its top.
#[derive(Debug)]
pub struct UnitCursor<'a> {
    text: &'a [u8],
    name: String,
    script_type: PerfScriptType,
    /// The current line (without its `\n`); empty at the end.
    line: &'a [u8],
    /// Where the current line starts in `text`.
    line_start: usize,
    /// Where the line after the current one starts.
    next: usize,
    /// 1-based number of the current line, counted from `first_line`.
    line_no: u64,
    eof: bool,
}

impl<'a> UnitCursor<'a> {
    /// A cursor over `text` (named `name` in errors), whose first line is line
    /// `first_line + 1` of the input.
    pub fn new(
        text: &'a [u8],
        name: impl Into<String>,
        script_type: PerfScriptType,
        first_line: u64,
    ) -> Result<UnitCursor<'a>, PerfScriptError> {
        let mut c = UnitCursor {
            text,
            name: name.into(),
            script_type,
            line: &[],
            line_start: 0,
            next: 0,
            line_no: first_line,
            eof: false,
        };
        c.advance()?;
        Ok(c)
    }

    /// Lines read so far (including the current one).
    pub fn lines(&self) -> u64 {
        self.line_no
    }

    /// Where the current line starts (the text's length at the end).
    pub fn position(&self) -> usize {
        if self.eof {
            self.text.len()
        } else {
            self.line_start
        }
    }

    /// Ends the text at `len`, a line start after the current line (the rest is read by
    /// another cursor).
    pub(crate) fn truncate(&mut self, len: usize) {
        assert!(
            self.next <= len && len <= self.text.len(),
            "cut inside the current line"
        );
        self.text = &self.text[..len];
    }

    /// Moves past a block of `lines` lines ending at `end` (one past its last newline),
    /// which the units from the current position would have read.
    pub(crate) fn skip_block(&mut self, end: usize, lines: u64) -> Result<(), PerfScriptError> {
        debug_assert!(lines > 0 && end > self.line_start && end <= self.text.len());
        self.next = end;
        self.line_no += lines - 1;
        self.advance()
    }

    fn advance(&mut self) -> Result<(), PerfScriptError> {
        if self.next >= self.text.len() {
            self.eof = true;
            self.line = &[];
            self.line_start = self.text.len();
            return Ok(());
        }
        let start = self.next;
        let rest = &self.text[start..];
        let len = find_newline(rest).unwrap_or(rest.len());
        self.line_no += 1;
        if len > MAX_LINE_BYTES {
            return Err(PerfScriptError::LineTooLong {
                name: self.name.clone(),
                line: self.line_no,
                max: MAX_LINE_BYTES,
            });
        }
        self.line = &rest[..len];
        self.line_start = start;
        self.next = start + len + 1;
        Ok(())
    }

    /// The next unit, or `None` at the end of the text.
    pub fn next_unit(&mut self) -> Result<Option<Unit<'a>>, PerfScriptError> {
        if self.eof {
            return Ok(None);
        }
        if is_mmap_event(self.line) {
            let line = self.line;
            self.advance()?;
            return Ok(Some(Unit::Mmap(line)));
        }
        let mut count = 1;
        if let Some(c) = parse_dec(self.line) {
            count = c;
            self.advance()?;
        }
        let unit = match self.script_type {
            PerfScriptType::Hybrid => self.hybrid_unit(count)?,
            PerfScriptType::LbrOnly => self.lbr_only_unit(count)?,
            PerfScriptType::StackOnly => self.stack_only_unit(count)?,
        };
        Ok(Some(unit))
    }

    /// `HybridPerfReader::parseSample` up to the branch-stack line: stack lines (leading
    /// whitespace, then hex digits only) until a line starting with `" 0x"`.
    fn hybrid_unit(&mut self, count: u64) -> Result<Unit<'a>, PerfScriptError> {
        let first_line = self.line_no;
        let start = self.line_start;
        let mut frames = 0u64;
        while !self.eof && !self.line.starts_with(b" 0x") {
            if parse_hex(trim_start(self.line)).is_some() {
                frames += 1;
                self.advance()?;
                continue;
            }
            // A blank or foreign line: the sample (if any) is dropped, and so is a
            // branch-stack line right after it.
            self.advance()?;
            let mut dropped = u64::from(frames > 0);
            if !self.eof && self.line.starts_with(b" 0x") {
                dropped += u64::from(frames == 0);
                self.advance()?;
            }
            return Ok(Unit::Skipped { dropped });
        }
        if frames == 0 {
            // A branch-stack line with no stack before it (or the end).
            if self.eof {
                return Ok(Unit::Skipped { dropped: 0 });
            }
            self.advance()?;
            return Ok(Unit::Skipped { dropped: 1 });
        }
        if self.eof {
            return Err(PerfScriptError::NoLbrLine {
                name: self.name.clone(),
                line: first_line,
            });
        }
        let lbr_start = self.line_start - start;
        let end = self.line_start + self.line.len();
        self.advance()?;
        Ok(Unit::Sample(SampleText {
            count,
            block: &self.text[start..end],
            lbr_start,
        }))
    }

    /// A stack-only sample: the call-stack lines from the current line on, which perf
    /// indents with a tab; a call-stack line not indented with a tab is a sample without
    /// call chain on its own (perf prints such a sample's IP on one line, in a field padded
    /// with spaces). A current line that is no call-stack line (a blank or header line)
    /// makes no sample.
    fn stack_only_unit(&mut self, count: u64) -> Result<Unit<'a>, PerfScriptError> {
        let start = self.line_start;
        let mut end = start;
        while !self.eof && !is_mmap_event(self.line) && parse_stack_line(self.line).is_some() {
            let chain = self.line.starts_with(b"\t");
            if end > start && !chain {
                break;
            }
            end = self.line_start + self.line.len();
            self.advance()?;
            if !chain {
                break;
            }
        }
        if end == start {
            if !self.eof && !is_mmap_event(self.line) {
                self.advance()?;
            }
            return Ok(Unit::Skipped { dropped: 0 });
        }
        let block = &self.text[start..end];
        Ok(Unit::Sample(SampleText {
            count,
            block,
            lbr_start: block.len(),
        }))
    }

    /// `LBRPerfReader::parseSample`: the current line is a branch-stack line.
    fn lbr_only_unit(&mut self, count: u64) -> Result<Unit<'a>, PerfScriptError> {
        if self.eof {
            return Ok(Unit::Skipped { dropped: 0 });
        }
        let line = self.line;
        self.advance()?;
        Ok(Unit::Sample(SampleText {
            count,
            block: line,
            lbr_start: 0,
        }))
    }
}

/// The first newline in `bytes`. Most lines of a perf script are short (stack lines, blank
/// lines): the first 32 bytes are searched eight at a time in place, the rest with
/// `memchr`, whose set-up costs more than a short line.
#[inline]
fn find_newline(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = ONES * 0x80;
    const NEWLINES: u64 = ONES * b'\n' as u64;
    for (k, word) in bytes.chunks_exact(8).take(4).enumerate() {
        let x = u64::from_le_bytes(word.try_into().expect("8 bytes")) ^ NEWLINES;
        // Zero bytes of `x`: the lowest flagged one is exact.
        let zero = x.wrapping_sub(ONES) & !x & HIGH;
        if zero != 0 {
            return Some(k * 8 + (zero.trailing_zeros() / 8) as usize);
        }
    }
    let searched = (bytes.len() / 8).min(4) * 8;
    memchr::memchr(b'\n', &bytes[searched..]).map(|n| searched + n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(text: &str, ty: PerfScriptType) -> Vec<Unit<'_>> {
        let mut c = UnitCursor::new(text.as_bytes(), "t", ty, 0).unwrap();
        let mut out = Vec::new();
        while let Some(u) = c.next_unit().unwrap() {
            out.push(u);
        }
        out
    }

    #[test]
    fn hybrid_units_and_their_text() {
        let text = "\t 10\n\t 20\n 0x1/0x2/P/-/-/0 0x3/0x4/P/-/-/0\n\n3\n\t 30\n 0x5/0x6/P/-/-/0\n";
        let u = units(text, PerfScriptType::Hybrid);
        assert_eq!(u.len(), 3, "{u:?}");
        let Unit::Sample(first) = u[0] else {
            panic!("{u:?}")
        };
        assert_eq!(first.count, 1);
        assert_eq!(first.stack_lines(), b"\t 10\n\t 20\n");
        assert_eq!(first.lbr_line(), b" 0x1/0x2/P/-/-/0 0x3/0x4/P/-/-/0");
        // The blank line makes no sample and drops nothing.
        assert_eq!(u[1], Unit::Skipped { dropped: 0 });
        let Unit::Sample(second) = u[2] else {
            panic!("{u:?}")
        };
        assert_eq!(
            (second.count, second.block),
            (3, &b"\t 30\n 0x5/0x6/P/-/-/0"[..])
        );
        let parsed = first.parse(PerfScriptType::Hybrid, &mut EntryTokenCache::new());
        let s = parsed.sample.unwrap();
        assert_eq!(
            (s.ip, s.callchain, s.lbr.len()),
            (0x10, vec![0x10, 0x20], 2)
        );
    }

    #[test]
    fn count_line_at_the_end_and_lbr_only_units() {
        let text = "\t 10\n 0x1/0x2/P/-/-/0 0x3/0x4/P/-/-/0\n5\n";
        let u = units(text, PerfScriptType::Hybrid);
        assert_eq!(u[1], Unit::Skipped { dropped: 0 });
        assert_eq!(u.len(), 2);
        let u = units("2\n 0x1/0x2/P/-/-/0\n", PerfScriptType::LbrOnly);
        let [Unit::Sample(s)] = u[..] else {
            panic!("{u:?}")
        };
        assert_eq!(
            (s.count, s.stack_lines(), s.lbr_line()),
            (2, &b""[..], &b" 0x1/0x2/P/-/-/0"[..])
        );
    }

    #[test]
    fn newlines_found_at_every_offset() {
        for len in 0..80 {
            for at in 0..=len {
                let mut bytes = vec![b'x'; len];
                if at < len {
                    bytes[at] = b'\n';
                }
                // Bytes that differ from a newline by one bit or by borrows.
                bytes
                    .iter_mut()
                    .step_by(3)
                    .filter(|b| **b != b'\n')
                    .for_each(|b| *b = 0x0b);
                let expected = bytes.iter().position(|&b| b == b'\n');
                assert_eq!(find_newline(&bytes), expected, "{len} {at}");
            }
        }
    }

    #[test]
    fn lines_counted_and_errors_name_them() {
        let text = "\t 10\n 0x1/0x2/P/-/-/0 0x3/0x4/P/-/-/0\n\t 20\n";
        let mut c = UnitCursor::new(text.as_bytes(), "in", PerfScriptType::Hybrid, 100).unwrap();
        assert!(matches!(c.next_unit(), Ok(Some(Unit::Sample(_)))));
        assert_eq!(c.lines(), 103);
        assert_eq!(
            c.next_unit().unwrap_err().to_string(),
            "in:103: Hybrid perf sample is corrupted, No LBR sample line"
        );
    }
}

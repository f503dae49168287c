//! [`TallyParts`]: a perf script tallied a part at a time, so that the distinct sample
//! texts held grow with a part of the script, not with all of it.
//!
//! A tally holds about one copy of the distinct samples it has read (compact texts, or
//! where they are in the script) until they are parsed. Read whole, a script of hardware
//! samples (nearly every one distinct) is held whole. Read in parts, each cut where the
//! reading loop is at its top (just after a line starting with `" 0x"`, as between the
//! scanning threads), each part's tally is handed on, parsed and unwound by the caller, and
//! dropped before the next part is read. Counting is additive: a sample unwound once per
//! part with each part's count sum counts as once with the whole sum, so the parts change
//! no counter, only how often a sample repeated across parts is parsed. The parts come in
//! input order, each with its MMAP events where the script has them: the samples after an
//! MMAP event are unwound with the binary where that event put it, as in one tally.
//!
//! A part is sized to hold about a bound of bytes ([`TALLY_HELD_BYTES`]): the first reads
//! that many bytes of script (a compact text is never longer than its text), each next one
//! as many as held the bound in the part before, up to [`MAX_PART_GROWTH`] times the bound.
//! A script that repeats its samples is then read in few parts, and parses few of them
//! again.

use super::reader::{detect_type, PerfScriptError};
use super::tally::{cut_after_branch_line, merge_scans, scan_all, ScanOptions, ScriptTally};
use super::text::ScriptText;
use super::PerfScriptType;

/// Bytes of texts a part is sized to hold ([`TallyParts`]).
///
/// A smaller bound holds less but parses a sample repeated across parts once per part:
/// the choice is measured in `bench/convert_large_binary.md` ("Part size").
pub const TALLY_HELD_BYTES: usize = 4 << 20;

/// Most bytes of script a part reads, in bounds: a part after one that held little
/// reads more, but not so much that a change of the samples makes it hold many times
/// the bound.
pub const MAX_PART_GROWTH: usize = 8;

/// The tallies of a perf script's parts, in input order ([`tally_script_parts`]). The first
/// error ends them. The pages of a mapped script's part are given back once it is read.
pub struct TallyParts<'a, 'p> {
    script: &'a ScriptText,
    text: &'a [u8],
    name: &'a str,
    script_type: PerfScriptType,
    threads: usize,
    /// The bytes of texts a part is sized to hold.
    held_bound: usize,
    /// Bytes of script the next part reads (but for a cut).
    part_bytes: usize,
    progress: &'p (dyn Fn(u64) + Sync),
    drop_read_pages: bool,
    /// Where the next part starts; `None` once the last one (or an error) was given.
    next: Option<usize>,
    /// The lines of the parts read (errors name the line in the whole script).
    lines_before: u64,
}

/// The perf script `text` (errors name the file) read a part at a time, each sized to hold
/// about `held_bound` bytes of texts, on up to `threads` threads; `progress` is called from
/// the scanning threads with a number of bytes scanned since its last call. The parts'
/// tallies, one after the other, hold what one tally of the whole script
/// ([`super::tally_samples`] of its bytes) holds, split where the parts are cut; a script of
/// at most `held_bound` bytes is one part, that very tally.
pub fn tally_script_parts<'a, 'p>(
    text: &'a ScriptText,
    threads: usize,
    held_bound: usize,
    progress: &'p (dyn Fn(u64) + Sync),
) -> Result<TallyParts<'a, 'p>, PerfScriptError> {
    let (bytes, name) = (text.bytes(), text.name());
    let held_bound = held_bound.max(1);
    Ok(TallyParts {
        script: text,
        text: bytes,
        name,
        script_type: detect_type(bytes, name)?,
        threads,
        held_bound,
        part_bytes: held_bound,
        progress,
        drop_read_pages: text.is_mapped(),
        next: Some(0),
        lines_before: 0,
    })
}

/// The bytes of script the part after one that read `read` bytes holding `held` reads:
/// as many as would hold `bound` at that rate, from `bound` to [`MAX_PART_GROWTH`] times it.
fn next_part_bytes(bound: usize, read: usize, held: usize) -> usize {
    let at_rate = (bound as u128 * read as u128 / held.max(1) as u128).min(usize::MAX as u128);
    (at_rate as usize).clamp(bound, bound.saturating_mul(MAX_PART_GROWTH))
}

impl<'a> TallyParts<'a, '_> {
    /// LBR-only or hybrid.
    pub fn script_type(&self) -> PerfScriptType {
        self.script_type
    }

    /// Where the part starting at `start` ends: `part_bytes` on, at the first cut there (the
    /// script's end when there is none).
    fn part_end(&self, start: usize) -> usize {
        let len = self.text.len();
        if len - start <= self.part_bytes {
            return len;
        }
        cut_after_branch_line(self.text, start + self.part_bytes).unwrap_or(len)
    }
}

impl<'a> Iterator for TallyParts<'a, '_> {
    type Item = Result<ScriptTally, PerfScriptError>;

    fn next(&mut self) -> Option<Self::Item> {
        let start = self.next.take()?;
        let end = self.part_end(start);
        let scan = ScanOptions {
            name: self.name,
            script_type: self.script_type,
            threads: self.threads,
            progress: self.progress,
            share_at_once: false,
            drop_read_pages: self.drop_read_pages,
        };
        let tally = merge_scans(scan_all(self.text, start..end, &scan), self.lines_before);
        // The pages the scan kept behind it (and those the memo read again) go now.
        self.script.drop_pages_of(start..end);
        if let Ok(t) = &tally {
            self.lines_before += t.stats.lines;
            self.part_bytes = next_part_bytes(self.held_bound, end - start, t.held_bytes());
            self.next = (end < self.text.len()).then_some(end);
        }
        Some(tally)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::perf_script::tally::{tally_samples, ParsedPiece};
    use crate::perf_script::PerfScriptStats;
    use crate::Sample;

    fn mmap(base: u64) -> String {
        format!("PERF_RECORD_MMAP2 5/5: [{base:#x}(0x1000) @ 0x1000 fe:00 1 0]: r-xp /bin/prog\n")
    }

    /// Sample `k` of the three below: distinct stacks and branch stacks, each repeated.
    fn sample(k: usize) -> &'static str {
        [
            "\t 5014\n\t 5009\n 0x5015/0x5010/P/-/-/0  0x5004/0x5010/P/-/-/0 \n\n",
            "\t 5014\n 0x5015/0x5010/M/-/-/3  0x7fff0000/0x5000/P/-/-/0 \n\n",
            "\t 5009\n\t 5001\n 0x5004/0x5010/P/-/-/0 \n\n",
        ][k]
    }

    /// Three pieces after MMAP events (the second at another base, the third back at the
    /// first), each repeating its samples; a dropped sample (a non-hex stack line) first.
    fn script() -> String {
        let mut s = String::from("\t zz\n 0x1/0x2/P/-/-/0\n\n");
        for (base, n) in [(0x5000, 40), (0x9000, 25), (0x5000, 31)] {
            s += &mmap(base);
            for i in 0..n {
                s += sample(i % 3);
                if i % 4 == 0 {
                    s += sample(0);
                }
            }
        }
        s
    }

    /// The samples of `parts` parsed, as one tally's: pieces split where a part was cut
    /// joined, each piece's equal samples folded (their counts and occurrences summed, in
    /// order of first appearance); with the statistics, the sample texts read and the
    /// number of parts.
    fn joined(
        parts: impl Iterator<Item = Result<ScriptTally, PerfScriptError>>,
    ) -> (Vec<ParsedPiece>, PerfScriptStats, u64, usize) {
        let mut pieces: Vec<ParsedPiece> = Vec::new();
        let (mut stats, mut texts, mut n) = (PerfScriptStats::default(), 0, 0);
        for part in parts {
            let part = part.unwrap();
            let (parsed, parsed_stats) = part.parse_all();
            stats.add(&parsed_stats);
            texts += part.sample_texts;
            n += 1;
            for piece in parsed {
                match (pieces.last_mut(), piece) {
                    (Some(ParsedPiece::Samples(before)), ParsedPiece::Samples(after)) => {
                        before.extend(after)
                    }
                    (_, piece) => pieces.push(piece),
                }
            }
        }
        for piece in &mut pieces {
            if let ParsedPiece::Samples(samples) = piece {
                let mut at: HashMap<Sample, usize> = HashMap::new();
                let mut folded: Vec<crate::perf_script::TalliedSample> = Vec::new();
                for s in samples.drain(..) {
                    let key = Sample {
                        count: 0,
                        ..s.sample.clone()
                    };
                    match at.get(&key) {
                        Some(&i) => {
                            folded[i].sample.count += s.sample.count;
                            folded[i].occurrences += s.occurrences;
                        }
                        None => {
                            at.insert(key, folded.len());
                            folded.push(s);
                        }
                    }
                }
                *samples = folded;
            }
        }
        (pieces, stats, texts, n)
    }

    /// Parts of a few samples each (a sample repeated across their cuts is a distinct
    /// sample of each part) give the samples, counts, occurrences, MMAP events and
    /// statistics of one tally, in order, from a script in memory or mapped from its file
    /// (whose parts' pages are given back as the next is read).
    #[test]
    fn parts_give_the_samples_of_one_tally() {
        let text = script();
        let whole = tally_samples(text.as_bytes(), "t", 1, &|_| {}).unwrap();
        let expected = joined(std::iter::once(Ok(whole)));
        let (pieces, stats, texts, _) = &expected;
        // A dropped sample, then three MMAP events, each before its three samples.
        assert_eq!(pieces.len(), 6);
        let ParsedPiece::Samples(first) = &pieces[1] else {
            panic!("{pieces:?}")
        };
        // Sample 0: 14 of the 40 by turn, 10 more after every fourth.
        assert_eq!(first.len(), 3);
        assert_eq!((first[0].sample.count, first[0].occurrences), (24, 24));
        assert_eq!(first[0].sample.callchain, [0x5014, 0x5009]);
        assert_eq!((first[1].occurrences, first[2].occurrences), (13, 13));
        assert_eq!(*texts, 40 + 10 + 25 + 7 + 31 + 8);
        assert_eq!(stats.dropped_samples, 1);
        let dir = std::env::temp_dir().join(format!("tally-parts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("parts.perfscript");
        std::fs::write(&path, &text).unwrap();
        let mapped = ScriptText::open(&path).unwrap();
        assert!(mapped.is_mapped());
        let owned = ScriptText::from_bytes("t", text.clone().into_bytes());
        for script in [&owned, &mapped] {
            // Held bytes a part is sized for (the first part reads as many bytes).
            for (part_bytes, threads) in [(usize::MAX, 2), (4096, 1), (300, 2), (1, 1)] {
                let parts = tally_script_parts(script, threads, part_bytes, &|_| {}).unwrap();
                assert_eq!(parts.script_type(), PerfScriptType::Hybrid);
                let got = joined(parts);
                let (pieces, stats, texts, n) = &got;
                assert_eq!(
                    (pieces, stats, texts),
                    (&expected.0, &expected.1, &expected.2),
                    "parts for {part_bytes} bytes"
                );
                // One part; two of a 6,944-byte script (cut after 4 KiB, then the rest);
                // one per branch-stack line, and the blank line after the last (a part
                // holds more than it reads); or parts of 300 bytes and more, as they held
                // little.
                assert_eq!(text.len(), 6944);
                let n = *n as u64;
                match part_bytes {
                    usize::MAX => assert_eq!(n, 1),
                    4096 => assert_eq!(n, 2),
                    1 => assert_eq!(n, texts + 2),
                    _ => assert!((3..6944 / 300).contains(&n), "{n} parts"),
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An error in a later part names its line in the whole script; the parts end there.
    #[test]
    fn an_error_in_a_later_part_names_its_line_in_the_script() {
        let mut text = script();
        let lines = text.lines().count();
        text += "\t 60\n\t 70\n";
        let whole = tally_samples(text.as_bytes(), "in", 1, &|_| {}).unwrap_err();
        assert_eq!(
            whole.to_string(),
            format!(
                "in:{}: Hybrid perf sample is corrupted, No LBR sample line",
                lines + 1
            )
        );
        let script = ScriptText::from_bytes("in", text.into_bytes());
        let mut parts = tally_script_parts(&script, 2, 50, &|_| {}).unwrap();
        let ok = parts.by_ref().take_while(Result::is_ok).count();
        assert!(ok > 5, "{ok} parts before the error");
        assert!(parts.next().is_none(), "none after the error");
        let mut parts = tally_script_parts(&script, 2, 50, &|_| {}).unwrap();
        let err = parts.find_map(Result::err).unwrap();
        assert_eq!(err.to_string(), whole.to_string());
    }

    /// A part after one that held little reads more, at the rate it held, up to
    /// `MAX_PART_GROWTH` times the bound; never less than the bound.
    #[test]
    fn parts_grow_as_the_part_before_held_little() {
        const MIB: usize = 1 << 20;
        // 8 MiB of script held 2 MiB: 32 MiB hold 8.
        assert_eq!(next_part_bytes(8 * MIB, 8 * MIB, 2 * MIB), 32 * MIB);
        // Held as much as it read, or more: the bound.
        assert_eq!(next_part_bytes(8 * MIB, 8 * MIB, 8 * MIB), 8 * MIB);
        assert_eq!(next_part_bytes(8 * MIB, 8 * MIB, 9 * MIB), 8 * MIB);
        // Held almost nothing (or nothing): eight times the bound.
        assert_eq!(next_part_bytes(8 * MIB, 8 * MIB, 1000), 64 * MIB);
        assert_eq!(next_part_bytes(8 * MIB, 8 * MIB, 0), 64 * MIB);
        assert_eq!(MAX_PART_GROWTH, 8);
        // No overflow near the top.
        assert_eq!(next_part_bytes(usize::MAX, usize::MAX, 1), usize::MAX);
    }
}

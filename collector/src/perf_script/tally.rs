//! [`tally_samples`]: a perf script read on several threads, each distinct sample text
//! parsed once.
//!
//! Perf scripts repeat themselves: a program in a steady state produces the same stack and
//! branch stack over and over (216 k samples of the convert benchmark are 41 k distinct
//! texts). Identical bytes parse to identical samples, so the text of each sample is
//! hashed and counted, and only the first occurrence is parsed; the sample then stands for
//! all of them (`Sample::count` = the sum of their counts, plus how many occurrences, for
//! per-sample statistics). MMAP lines split the input into pieces: the samples after an
//! MMAP event are read with the binary where that event put it, so texts are only
//! aggregated within a piece. The result is exactly what [`super::PerfScriptReader`]
//! gives, in the same order of first appearance — same units ([`super::unit`]), same
//! parser.
//!
//! The text is cut into one chunk per thread right after a line starting with `" 0x"`,
//! where the reading loop is always back at its top (see [`super::unit`]).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use super::reader::{
    detect_type, parse_mmap_line, EntryTokenCache, PerfScriptError, PerfScriptStats,
};
use super::unit::{SampleText, Unit, UnitCursor};
use super::PerfScriptType;
use crate::{Mmap2Event, Sample};

/// One stretch of the input, in input order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScriptPiece {
    /// The event of an MMAP line.
    Mmap(Mmap2Event),
    /// The samples between two MMAP events, each distinct one once, in order of first
    /// appearance.
    Samples(Vec<TalliedSample>),
}

/// A distinct sample and how many times its text occurred.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TalliedSample {
    /// The sample; its `count` is the sum of the counts of its occurrences.
    pub sample: Sample,
    /// How many sample texts it stands for.
    pub occurrences: u64,
}

/// A perf script read by [`tally_samples`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptTally {
    /// LBR-only or hybrid.
    pub script_type: PerfScriptType,
    /// The input, in order.
    pub pieces: Vec<ScriptPiece>,
    /// What was skipped ([`super::PerfScriptReader::stats`] would say the same).
    pub stats: PerfScriptStats,
    /// Sample texts read (occurrences, kept or dropped).
    pub sample_texts: u64,
    /// Distinct sample texts (each parsed once).
    pub distinct_texts: u64,
}

/// Reads `text` (named `name` in errors) on up to `threads` threads. `progress` is called
/// from the scanning threads with a number of bytes scanned since its last call.
pub fn tally_samples(
    text: &[u8],
    name: &str,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ScriptTally, PerfScriptError> {
    let script_type = detect_type(text, name)?;
    let bounds = chunk_bounds(text, threads.max(1));
    let scans: Vec<Result<ChunkScan<'_>, PerfScriptError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = bounds
            .windows(2)
            .skip(1)
            .map(|w| {
                let chunk = &text[w[0]..w[1]];
                scope.spawn(move || scan_chunk(chunk, name, script_type, progress))
            })
            .collect();
        let mut scans = vec![scan_chunk(
            &text[bounds[0]..bounds[1]],
            name,
            script_type,
            progress,
        )];
        scans.extend(handles.into_iter().map(|h| match h.join() {
            Ok(scan) => scan,
            Err(panic) => std::panic::resume_unwind(panic),
        }));
        scans
    });
    let mut stats = PerfScriptStats::default();
    let mut pieces: Vec<RawPiece<'_>> = Vec::new();
    let mut lines_before = 0u64;
    for scan in scans {
        let scan = scan.map_err(|e| e.after_lines(lines_before))?;
        lines_before += scan.stats.lines;
        add_stats(&mut stats, &scan.stats);
        for piece in scan.pieces {
            match (pieces.last_mut(), piece) {
                // The samples either side of a chunk cut belong together.
                (Some(RawPiece::Texts(before)), RawPiece::Texts(after)) => before.absorb(after),
                (_, piece) => pieces.push(piece),
            }
        }
    }
    let (pieces, parse_stats, sample_texts, distinct_texts) =
        parse_pieces(pieces, script_type, threads.max(1));
    stats.dropped_samples += parse_stats.dropped_samples;
    stats.invalid_lbr_records += parse_stats.invalid_lbr_records;
    Ok(ScriptTally {
        script_type,
        pieces,
        stats,
        sample_texts,
        distinct_texts,
    })
}

fn add_stats(total: &mut PerfScriptStats, s: &PerfScriptStats) {
    total.lines += s.lines;
    total.unparsed_mmap_lines += s.unparsed_mmap_lines;
    total.dropped_samples += s.dropped_samples;
    total.invalid_lbr_records += s.invalid_lbr_records;
}

/// `0 = b0 < b1 < ... = text.len()`: each inner bound just after the first line starting
/// with `" 0x"` at or after an equal share of the text.
fn chunk_bounds(text: &[u8], threads: usize) -> Vec<usize> {
    let mut bounds = vec![0];
    for k in 1..threads {
        let target = text.len() / threads * k;
        let last = *bounds.last().unwrap_or(&0);
        if target <= last {
            continue;
        }
        // A line start at or after `target` (the byte before it is a newline).
        let Some(found) = memchr::memmem::find(&text[target - 1..], b"\n 0x") else {
            break;
        };
        let line = target + found;
        let end = match memchr::memchr(b'\n', &text[line..]) {
            Some(n) => line + n + 1,
            None => break,
        };
        if end < text.len() {
            bounds.push(end);
        }
    }
    bounds.push(text.len());
    bounds
}

/// Sample texts of one piece: each distinct one with its count sum and occurrences.
#[derive(Default)]
struct TextTally<'a> {
    texts: Vec<(SampleText<'a>, u64, u64)>,
    index: HashMap<TextKey<'a>, usize, BuildHasherDefault<KeyHashHasher>>,
}

impl<'a> TextTally<'a> {
    fn add(&mut self, text: SampleText<'a>) {
        let key = TextKey {
            hash: xxhash_rust::xxh3::xxh3_64(text.block),
            bytes: text.block,
        };
        match self.index.get(&key) {
            Some(&i) => {
                let entry = &mut self.texts[i];
                // Counts wrap like llvm-profgen's uint64_t, as the aggregator's do.
                entry.1 = entry.1.wrapping_add(text.count);
                entry.2 += 1;
            }
            None => {
                self.index.insert(key, self.texts.len());
                self.texts.push((text, text.count, 1));
            }
        }
    }

    fn absorb(&mut self, other: TextTally<'a>) {
        for (text, count, occurrences) in other.texts {
            let key = TextKey {
                hash: xxhash_rust::xxh3::xxh3_64(text.block),
                bytes: text.block,
            };
            match self.index.get(&key) {
                Some(&i) => {
                    let entry = &mut self.texts[i];
                    entry.1 = entry.1.wrapping_add(count);
                    entry.2 += occurrences;
                }
                None => {
                    self.index.insert(key, self.texts.len());
                    self.texts.push((text, count, occurrences));
                }
            }
        }
    }
}

/// A sample text with its hash computed once.
#[derive(Clone, Copy, PartialEq, Eq)]
struct TextKey<'a> {
    hash: u64,
    bytes: &'a [u8],
}

impl Hash for TextKey<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// Passes [`TextKey`]'s precomputed hash through.
#[derive(Default)]
struct KeyHashHasher(u64);

impl Hasher for KeyHashHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used by `TextKey`; fold anything else in anyway.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

enum RawPiece<'a> {
    Mmap(Mmap2Event),
    Texts(TextTally<'a>),
}

struct ChunkScan<'a> {
    pieces: Vec<RawPiece<'a>>,
    stats: PerfScriptStats,
}

/// Bytes scanned between two progress reports.
const PROGRESS_STEP: usize = 16 << 20;

fn scan_chunk<'a>(
    chunk: &'a [u8],
    name: &str,
    script_type: PerfScriptType,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ChunkScan<'a>, PerfScriptError> {
    let mut units = UnitCursor::new(chunk, name, script_type, 0)?;
    let mut stats = PerfScriptStats::default();
    let mut pieces = Vec::new();
    let mut texts = TextTally::default();
    let mut reported = 0usize;
    while let Some(unit) = units.next_unit()? {
        match unit {
            Unit::Sample(text) => texts.add(text),
            Unit::Skipped { dropped } => stats.dropped_samples += dropped,
            Unit::Mmap(line) => match parse_mmap_line(line) {
                Some(m) => {
                    if !texts.texts.is_empty() {
                        pieces.push(RawPiece::Texts(std::mem::take(&mut texts)));
                    }
                    pieces.push(RawPiece::Mmap(m));
                }
                None => stats.unparsed_mmap_lines += 1,
            },
        }
        let at = units.position();
        if at - reported >= PROGRESS_STEP {
            progress((at - reported) as u64);
            reported = at;
        }
    }
    progress((chunk.len() - reported) as u64);
    if !texts.texts.is_empty() {
        pieces.push(RawPiece::Texts(texts));
    }
    stats.lines = units.lines();
    Ok(ChunkScan { pieces, stats })
}

/// Parses each distinct text once, on up to `threads` threads.
fn parse_pieces(
    raw: Vec<RawPiece<'_>>,
    script_type: PerfScriptType,
    threads: usize,
) -> (Vec<ScriptPiece>, PerfScriptStats, u64, u64) {
    let texts: Vec<&(SampleText<'_>, u64, u64)> = raw
        .iter()
        .flat_map(|p| match p {
            RawPiece::Texts(t) => t.texts.iter(),
            RawPiece::Mmap(_) => [].iter(),
        })
        .collect();
    let per_thread = texts.len().div_ceil(threads).max(1);
    let parsed: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = texts
            .chunks(per_thread)
            .map(|part| {
                scope.spawn(move || {
                    let mut tokens = EntryTokenCache::new();
                    part.iter()
                        .map(|(text, _, _)| text.parse(script_type, &mut tokens))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(parsed) => parsed,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    });
    let mut stats = PerfScriptStats::default();
    let (mut sample_texts, distinct) = (0u64, texts.len() as u64);
    let mut parsed = parsed.into_iter();
    let mut pieces = Vec::with_capacity(raw.len());
    for piece in raw {
        match piece {
            RawPiece::Mmap(m) => pieces.push(ScriptPiece::Mmap(m)),
            RawPiece::Texts(t) => {
                let mut samples = Vec::with_capacity(t.texts.len());
                for ((_, count, occurrences), p) in t.texts.into_iter().zip(parsed.by_ref()) {
                    sample_texts += occurrences;
                    stats.dropped_samples += p.dropped * occurrences;
                    stats.invalid_lbr_records += p.invalid_lbr_records * occurrences;
                    if let Some(mut sample) = p.sample {
                        sample.count = count;
                        samples.push(TalliedSample {
                            sample,
                            occurrences,
                        });
                    }
                }
                if !samples.is_empty() {
                    pieces.push(ScriptPiece::Samples(samples));
                }
            }
        }
    }
    (pieces, stats, sample_texts, distinct)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_script::PerfScriptReader;
    use crate::PerfEvent;

    /// The reader's events with identical samples of one piece folded together, as
    /// [`tally_samples`] is meant to give them.
    fn folded_reader_events(text: &[u8]) -> (Vec<ScriptPiece>, PerfScriptStats) {
        let mut reader = PerfScriptReader::new(text, "t").unwrap();
        let mut pieces: Vec<ScriptPiece> = Vec::new();
        while let Some(event) = reader.next_event().unwrap() {
            match event {
                PerfEvent::Sample(s) => {
                    if !matches!(pieces.last(), Some(ScriptPiece::Samples(_))) {
                        pieces.push(ScriptPiece::Samples(Vec::new()));
                    }
                    let Some(ScriptPiece::Samples(samples)) = pieces.last_mut() else {
                        unreachable!()
                    };
                    let count = s.count;
                    let same = samples.iter_mut().find(|t| {
                        Sample {
                            count,
                            ..t.sample.clone()
                        } == s
                    });
                    match same {
                        Some(t) => {
                            t.sample.count += count;
                            t.occurrences += 1;
                        }
                        None => samples.push(TalliedSample {
                            sample: s,
                            occurrences: 1,
                        }),
                    }
                }
                PerfEvent::SideBand(crate::SideBandEvent::Mmap2(m)) => {
                    pieces.push(ScriptPiece::Mmap(m))
                }
                PerfEvent::SideBand(_) => {}
            }
        }
        (pieces, *reader.stats())
    }

    const MMAP: &str = "PERF_RECORD_MMAP2 6053/6053: [0x555555555000(0x1000) @ 0x1000 fe:00 5439513 0]: r-xp /bin/mix\n";

    fn script() -> String {
        let a = "\t 10\n\t 20\n 0x1/0x2/P/-/-/0  0x3/0x4/P/-/-/0 \n\n";
        let b = "\t 30\n 0x5/0x6/P/-/-/0  0x7/0x8/M/-/-/5 \n\n";
        let bad = "\t 40\n\t zz\n 0x9/0xa/P/-/-/0 0xb/0xc/P/-/-/0\n";
        let cut = "\t 50\n 0xd/0xe/P/-/-/0 0xf/0x1g/P/-/-/0\n";
        let mut s = String::new();
        s += MMAP;
        for i in 0..50 {
            s += a;
            if i % 3 == 0 {
                s += b;
                s += "4\n";
                s += b;
            }
            if i % 7 == 0 {
                s += bad;
                s += cut;
            }
            if i == 20 {
                s += MMAP;
            }
        }
        s
    }

    #[test]
    fn same_samples_and_statistics_as_the_reader_on_any_number_of_threads() {
        let text = script();
        let (expected, expected_stats) = folded_reader_events(text.as_bytes());
        assert_eq!(expected.len(), 4, "mmap, samples, mmap, samples");
        for threads in [1, 2, 3, 8] {
            let tally = tally_samples(text.as_bytes(), "t", threads, &|_| {}).unwrap();
            assert_eq!(tally.script_type, PerfScriptType::Hybrid);
            assert_eq!(tally.pieces, expected, "{threads} threads");
            assert_eq!(tally.stats, expected_stats, "{threads} threads");
        }
        let tally = tally_samples(text.as_bytes(), "t", 2, &|_| {}).unwrap();
        // 50 a, 17 × 2 b, 8 cut (the 8 "bad" ones are no sample text): 3 distinct texts in
        // each of the two pieces.
        assert_eq!((tally.sample_texts, tally.distinct_texts), (50 + 34 + 8, 6));
        let Some(ScriptPiece::Samples(first)) = tally.pieces.get(1) else {
            panic!("{:?}", tally.pieces)
        };
        assert_eq!((first[0].sample.count, first[0].occurrences), (21, 21));
        // b: 7 occurrences with count 1 and 7 with count 4 before the second mmap.
        assert_eq!((first[1].sample.count, first[1].occurrences), (35, 14));
    }

    #[test]
    fn chunks_are_cut_after_branch_stack_lines() {
        let text = b"\t 10\n 0x1/0x2\n\n\t 20\n 0x3/0x4\n\n\t 30\n 0x5/0x6\n";
        let bounds = chunk_bounds(text, 3);
        assert_eq!(bounds.first(), Some(&0));
        assert_eq!(bounds.last(), Some(&text.len()));
        for b in &bounds[1..bounds.len() - 1] {
            let before = &text[..*b];
            let last_line = before[..before.len() - 1]
                .rsplit(|&c| c == b'\n')
                .next()
                .unwrap();
            assert!(last_line.starts_with(b" 0x"), "{b}");
        }
        assert!(bounds.windows(2).all(|w| w[0] < w[1]), "{bounds:?}");
    }

    #[test]
    fn errors_name_the_line_in_the_whole_input() {
        let mut text = script();
        let lines_before = text.lines().count();
        text += "\t 60\n\t 70\n";
        let err = tally_samples(text.as_bytes(), "in", 2, &|_| {}).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "in:{}: Hybrid perf sample is corrupted, No LBR sample line",
                lines_before + 1
            )
        );
    }
}

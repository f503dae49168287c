//! [`tally_samples`]: a perf script read on several threads, each distinct sample parsed
//! once and kept packed.
//!
//! Perf scripts repeat themselves: a program in a steady state produces the same stack and
//! branch stack over and over (the software recorder's 216 k samples of the convert
//! benchmark are 41 k distinct samples). Hardware LBRs also carry cycle counts, which make
//! nearly every text distinct, but llvm-profgen ignores every LBR field but `FROM` and
//! `TO`. So a block of text seen before is found by its bytes ([`BlockMemo`]); any other
//! sample text is cut down to what the reader reads ([`super::compact`]) and looked up by
//! that: a new one is parsed at once and kept packed ([`super::packed`]: a few bytes per
//! LBR entry instead of its 40 bytes of text), with the sum of its occurrences' counts
//! (`Sample::count`) and how many occurrences (for per-sample statistics); its LBR entries
//! come without flags. MMAP lines split the input into pieces: the samples after an MMAP
//! event are read with the binary where that event put it, so samples are only aggregated
//! within a piece. The result is what [`super::PerfScriptReader`] gives with flags cleared
//! and samples of equal compact text folded together, in order of first appearance —
//! same units ([`super::unit`]), same parser.
//!
//! A compact text is looked up by its 128-bit hash ([`TextKey`]), not by its bytes, which
//! are not kept: two distinct texts among `n` share a key with a chance of about
//! `n² / 2¹²⁹` (below 10⁻²⁶ for a million distinct texts).
//!
//! The text is cut into one chunk per thread right after a line starting with `" 0x"`,
//! where the reading loop is always back at its top (see [`super::unit`]).

use std::ops::Range;
use std::sync::Mutex;

use hashbrown::HashTable;

#[cfg(test)]
use super::block_memo::WINDOW_OF_PROBES;
use super::block_memo::{BlockMemo, BlockUnits};
use super::compact::{compact_lbr_line, ByteMasks};
use super::packed::{most_packed_bytes, pack_sample, unpack_sample};
use super::reader::{
    detect_type, parse_mmap_line, EntryTokenCache, PerfScriptError, PerfScriptStats,
};
use super::scan_queue::ScanQueue;
use super::unit::{SampleText, Unit, UnitCursor};
use super::PerfScriptType;
use crate::threads::on_threads;
use crate::{Mmap2Event, Sample};

/// One stretch of the input, in input order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScriptPiece {
    /// The event of an MMAP line.
    Mmap(Mmap2Event),
    /// The samples between two MMAP events, each distinct one once, in order of first
    /// appearance (read them with [`TalliedTexts::sample_into`]).
    Texts(TalliedTexts),
}

/// The distinct sample texts of a piece, each parsed and packed. Two are equal when their
/// texts are, with equal packed samples (`Debug` shows the arenas' lengths only).
#[derive(Clone, Default, Eq)]
pub struct TalliedTexts {
    /// In order of first appearance.
    pub texts: Vec<TalliedText>,
    /// The packed samples, one after the other, in one or more arenas (a chunk's scan
    /// adds an arena when the last is full; merging chunks moves arenas instead of copying
    /// samples).
    arenas: Vec<Vec<u8>>,
}

impl PartialEq for TalliedTexts {
    fn eq(&self, other: &Self) -> bool {
        self.texts.len() == other.texts.len()
            && self.texts.iter().zip(&other.texts).all(|(a, b)| {
                (a.count, a.occurrences, a.verdict) == (b.count, b.occurrences, b.verdict)
                    && self.unpacked(a) == other.unpacked(b)
            })
    }
}

impl std::fmt::Debug for TalliedTexts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let arena_bytes: Vec<usize> = self.arenas.iter().map(Vec::len).collect();
        f.debug_struct("TalliedTexts")
            .field("texts", &self.texts)
            .field("arena_bytes", &arena_bytes)
            .finish()
    }
}

impl TalliedTexts {
    /// Gives back the room left in the last arena (its samples stay where they are: they
    /// are found by arena and offset).
    fn shrink_last_arena(&mut self) {
        if let Some(last) = self.arenas.last_mut() {
            last.shrink_to_fit();
        }
    }

    /// The arena the next packed sample goes at the end of, with room for `most` bytes:
    /// the last one, or a new one when it has not. A new arena rather than a larger copy
    /// of the last one: nothing is moved (growing a vector copies it, into fresh pages
    /// each time).
    fn arena_with_room(&mut self, most: usize) -> usize {
        let last = self.arenas.last();
        if last.map_or(0, |a| a.capacity() - a.len()) < most {
            let capacity = next_arena_capacity(last.map(Vec::capacity), most);
            self.arenas.push(Vec::with_capacity(capacity));
        }
        self.arenas.len() - 1
    }

    /// Distinct samples.
    pub fn len(&self) -> usize {
        self.texts.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    /// The bytes held for these samples until they are unwound: the packed samples and
    /// their entries.
    pub fn held_bytes(&self) -> usize {
        let packed: usize = self.arenas.iter().map(Vec::len).sum();
        packed + self.texts.len() * std::mem::size_of::<TalliedText>()
    }

    /// The sample of `t` unpacked into `sample` (`false` for a dropped one).
    fn unpack(&self, t: &TalliedText, sample: &mut Sample) -> bool {
        if t.verdict & KEPT == 0 {
            return false;
        }
        let packed = &self.arenas[t.arena as usize][t.start..];
        unpack_sample(packed, sample).expect("a packing of this tally");
        true
    }

    /// The sample of `t` (`None` for a dropped one; `count` 1).
    fn unpacked(&self, t: &TalliedText) -> Option<Sample> {
        let mut sample = Sample::default();
        self.unpack(t, &mut sample).then_some(sample)
    }

    /// Sample `i` with its count sum and occurrences, LBR entries without flags, or `None`
    /// when its text was dropped; what parsing its text dropped is added to `stats` (per
    /// occurrence, as the sequential reader counts it).
    pub fn sample(&self, i: usize, stats: &mut PerfScriptStats) -> Option<TalliedSample> {
        let mut sample = Sample::default();
        let occurrences = self.sample_into(i, stats, &mut sample)?;
        Some(TalliedSample {
            sample,
            occurrences,
        })
    }

    /// [`TalliedTexts::sample`] into `sample`, whose buffers are reused (a thread's samples
    /// then cost no allocation): its occurrences, or `None` when its text was dropped (then
    /// `sample` holds nothing of use).
    pub fn sample_into(
        &self,
        i: usize,
        stats: &mut PerfScriptStats,
        sample: &mut Sample,
    ) -> Option<u64> {
        let t = &self.texts[i];
        stats.dropped_samples += u64::from(t.verdict & DROPPED != 0) * t.occurrences;
        stats.invalid_lbr_records += u64::from(t.verdict & INVALID_LBR != 0) * t.occurrences;
        if !self.unpack(t, sample) {
            return None;
        }
        sample.count = t.count;
        Some(t.occurrences)
    }
}

/// [`TalliedText::verdict`]: the text was parsed to a sample (packed).
const KEPT: u8 = 1;
/// The text counts as a dropped sample.
const DROPPED: u8 = 2;
/// A malformed entry cut the text's branch-stack line.
const INVALID_LBR: u8 = 4;

/// A distinct sample text and its occurrences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TalliedText {
    /// Where its packed sample starts in [`TalliedTexts`] (its packing tells where it
    /// ends).
    arena: u32,
    start: usize,
    /// What parsing the text decided: [`KEPT`], [`DROPPED`], [`INVALID_LBR`].
    verdict: u8,
    /// The sum of the counts of its occurrences.
    pub count: u64,
    /// How many times it occurred.
    pub occurrences: u64,
}

/// A distinct sample and how many times its text occurred.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TalliedSample {
    /// The sample; its `count` is the sum of the counts of its occurrences.
    pub sample: Sample,
    /// How many sample texts it stands for.
    pub occurrences: u64,
}

/// A perf script read by [`tally_samples`], its distinct samples parsed and packed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptTally {
    /// LBR-only or hybrid.
    pub script_type: PerfScriptType,
    /// The input, in order.
    pub pieces: Vec<ScriptPiece>,
    /// What reading skipped; [`TalliedTexts::sample_into`] adds what parsing dropped
    /// (together they are what [`super::PerfScriptReader::stats`] says).
    pub stats: PerfScriptStats,
    /// Sample texts read (occurrences).
    pub sample_texts: u64,
    /// Distinct sample texts, by their compact text.
    pub distinct_texts: u64,
}

/// A piece of a fully read [`ScriptTally`] ([`ScriptTally::parse_all`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParsedPiece {
    /// The event of an MMAP line.
    Mmap(Mmap2Event),
    /// The samples of a [`ScriptPiece::Texts`] that were not dropped.
    Samples(Vec<TalliedSample>),
}

impl ScriptTally {
    /// The bytes held for the samples of every piece ([`TalliedTexts::held_bytes`]).
    pub fn held_bytes(&self) -> usize {
        self.pieces
            .iter()
            .map(|p| match p {
                ScriptPiece::Texts(t) => t.held_bytes(),
                ScriptPiece::Mmap(_) => 0,
            })
            .sum()
    }

    /// Every piece's samples at once (tests; `convert` unpacks, prepares and aggregates on
    /// every core, in batches, so that the samples of a large input are never all in
    /// memory unpacked). The statistics include what parsing dropped.
    pub fn parse_all(&self) -> (Vec<ParsedPiece>, PerfScriptStats) {
        let mut stats = self.stats;
        let pieces = self
            .pieces
            .iter()
            .filter_map(|piece| match piece {
                ScriptPiece::Mmap(m) => Some(ParsedPiece::Mmap(m.clone())),
                ScriptPiece::Texts(texts) => {
                    let samples: Vec<TalliedSample> = (0..texts.len())
                        .filter_map(|i| texts.sample(i, &mut stats))
                        .collect();
                    (!samples.is_empty()).then_some(ParsedPiece::Samples(samples))
                }
            })
            .collect();
        (pieces, stats)
    }
}

/// Reads `text` (named `name` in errors) on up to `threads` threads. `progress` is called
/// from the scanning threads with a number of bytes scanned since its last call.
pub fn tally_samples(
    text: &[u8],
    name: &str,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ScriptTally, PerfScriptError> {
    tally_shared(text, name, threads, progress, false, false)
}

/// [`tally_samples`]; `share_at_once`: the first scanning thread to check gives away half
/// of its range at once, as if another were hungry (tests of sharing).
fn tally_shared(
    text: &[u8],
    name: &str,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
    share_at_once: bool,
    drop_read_pages: bool,
) -> Result<ScriptTally, PerfScriptError> {
    let script_type = detect_type(text, name)?;
    let scan = ScanOptions {
        name,
        script_type,
        threads,
        progress,
        share_at_once,
        drop_read_pages,
    };
    merge_scans(scan_all(text, 0..text.len(), &scan), 0)
}

/// How [`scan_all`] reads a script.
pub(super) struct ScanOptions<'p> {
    /// The script's name, in errors.
    pub(super) name: &'p str,
    /// Its type ([`detect_type`] of the whole script).
    pub(super) script_type: PerfScriptType,
    /// Most threads to scan on.
    pub(super) threads: usize,
    /// Called from the scanning threads with a number of bytes scanned since its last call.
    pub(super) progress: &'p (dyn Fn(u64) + Sync),
    /// The first scanning thread to check gives away half of its range at once, as if
    /// another were hungry (tests of sharing).
    pub(super) share_at_once: bool,
    /// The script is a whole file mapping whose pages are given back as the scan passes
    /// them ([`ScriptText::is_mapped`]).
    pub(super) drop_read_pages: bool,
}

/// What the scanning threads read: the script's type and each range's scan, by start.
pub(super) struct Scanned {
    script_type: PerfScriptType,
    /// Threads the merge may use.
    threads: usize,
    scans: Vec<(usize, Result<ChunkScan, PerfScriptError>)>,
}

/// Reads `text[range]` on up to `scan.threads` threads (`range` starts at the text's start
/// or just after a line starting with `" 0x"`, and ends at the text's end or just after
/// such a line).
pub(super) fn scan_all(text: &[u8], range: Range<usize>, scan: &ScanOptions<'_>) -> Scanned {
    let ScanOptions {
        name,
        script_type,
        threads,
        progress,
        share_at_once,
        drop_read_pages,
    } = *scan;
    let threads = threads.max(1);
    let bounds = chunk_bounds(text, range, threads);
    let queue = ScanQueue::new(bounds.windows(2).rev().map(|w| w[0]..w[1]).collect());
    if share_at_once {
        queue.ask_for_work();
    }
    type Scan = (usize, Result<ChunkScan, PerfScriptError>);
    let scanned: Mutex<Vec<Scan>> = Mutex::new(Vec::new());
    let work = || {
        let _member = queue.join();
        while let Some(range) = queue.take() {
            let start = range.start;
            let scan = scan_chunk(
                text,
                range,
                name,
                script_type,
                progress,
                &queue,
                drop_read_pages,
            );
            scanned
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((start, scan));
        }
    };
    on_threads((0..threads).map(|_| work));
    let mut scans = scanned.into_inner().unwrap_or_else(|e| e.into_inner());
    scans.sort_by_key(|&(start, _)| start);
    Scanned {
        script_type,
        threads,
        scans,
    }
}

/// The ranges' scans put together in input order: the first error (its line number
/// counted from the start of the text, `lines_before` lines before the first range), or
/// the tally.
pub(super) fn merge_scans(
    scanned: Scanned,
    mut lines_before: u64,
) -> Result<ScriptTally, PerfScriptError> {
    let Scanned {
        script_type,
        threads,
        scans,
    } = scanned;
    let mut stats = PerfScriptStats::default();
    let mut pieces: Vec<RawPiece> = Vec::new();
    for (_, scan) in scans {
        let scan = scan.map_err(|e| e.after_lines(lines_before))?;
        lines_before += scan.stats.lines;
        stats.add(&scan.stats);
        for piece in scan.pieces {
            match (pieces.last_mut(), piece) {
                // The samples either side of a chunk cut belong together.
                (Some(RawPiece::Texts(before)), RawPiece::Texts(after)) => {
                    before.absorb(*after, threads)
                }
                (_, piece) => pieces.push(piece),
            }
        }
    }
    let (mut sample_texts, mut distinct_texts) = (0, 0);
    let pieces = pieces
        .into_iter()
        .map(|piece| match piece {
            RawPiece::Mmap(m) => ScriptPiece::Mmap(m),
            RawPiece::Texts(t) => {
                distinct_texts += t.tallied.texts.len() as u64;
                sample_texts += t.tallied.texts.iter().map(|t| t.occurrences).sum::<u64>();
                ScriptPiece::Texts(t.tallied)
            }
        })
        .collect();
    Ok(ScriptTally {
        script_type,
        pieces,
        stats,
        sample_texts,
        distinct_texts,
    })
}

/// `range.start = b0 < b1 < ... = range.end`: each inner bound just after the first line
/// starting with `" 0x"` at or after an equal share of the range.
fn chunk_bounds(text: &[u8], range: Range<usize>, threads: usize) -> Vec<usize> {
    let mut bounds = vec![range.start];
    for k in 1..threads {
        let target = range.start + range.len() / threads * k;
        let last = *bounds.last().unwrap_or(&range.start);
        if target <= last {
            continue;
        }
        match cut_after_branch_line(&text[..range.end], target) {
            Some(end) => bounds.push(end),
            None => break,
        }
    }
    bounds.push(range.end);
    bounds
}

/// Where the reading loop is at its top at or after `at` (`0 < at`): just after the first
/// line starting with `" 0x"` that starts at or after `at`; `None` when there is none
/// before the text's last line.
pub(super) fn cut_after_branch_line(text: &[u8], at: usize) -> Option<usize> {
    // A line start at or after `at` (the byte before it is a newline).
    let line = at + memchr::memmem::find(&text[at - 1..], b"\n 0x")?;
    let end = line + memchr::memchr(b'\n', &text[line..])? + 1;
    (end < text.len()).then_some(end)
}

/// A compact text's key: its 128-bit hash, seeded with where its branch-stack line starts
/// (see the module's documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TextKey([u64; 2]);

impl TextKey {
    fn of(compact: &[u8], lbr_start: usize) -> TextKey {
        let hash = xxhash_rust::xxh3::xxh3_128_with_seed(compact, lbr_start as u64);
        TextKey([hash as u64, (hash >> 64) as u64])
    }

    /// The hash the index's table spreads keys by.
    fn table_hash(self) -> u64 {
        self.0[0]
    }
}

/// What a scanning thread makes of a sample text it has not found: its compact text, and
/// the sample parsed from it; buffers reused from text to text.
struct TextParser {
    script_type: PerfScriptType,
    tokens: EntryTokenCache,
    masks: ByteMasks,
    /// The compact text of the text looked up last.
    compact: Vec<u8>,
    /// The sample parsed last.
    sample: Sample,
}

impl TextParser {
    fn new(script_type: PerfScriptType) -> TextParser {
        TextParser {
            script_type,
            tokens: EntryTokenCache::new(),
            masks: ByteMasks::default(),
            compact: Vec::new(),
            sample: Sample::default(),
        }
    }

    /// Makes `text` compact (in `self.compact`); its key.
    fn key(&mut self, text: &SampleText<'_>) -> TextKey {
        self.compact.clear();
        self.compact.extend_from_slice(text.stack_lines());
        compact_lbr_line(text.lbr_line(), &mut self.compact, &mut self.masks);
        TextKey::of(&self.compact, text.lbr_start)
    }

    /// Parses the compact text of the text `key` was last given (whose branch-stack line
    /// starts at `lbr_start`) into `self.sample`: what the parser decided
    /// ([`TalliedText::verdict`]).
    fn parse(&mut self, lbr_start: usize) -> u8 {
        let compact = SampleText {
            count: 1,
            block: &self.compact,
            lbr_start,
        };
        let verdict = compact.parse_into(self.script_type, &mut self.tokens, &mut self.sample);
        let mut bits = 0;
        if verdict.kept {
            bits |= KEPT;
        }
        if verdict.dropped > 0 {
            bits |= DROPPED;
        }
        if verdict.invalid_lbr_records > 0 {
            bits |= INVALID_LBR;
        }
        bits
    }
}

/// The samples of one piece as they are read: each distinct one with its count sum and
/// occurrences. Two levels: a block of text read before is found by its bytes
/// ([`BlockMemo`]); any other sample text by its compact text's key.
struct TextTally<'a> {
    distinct: DistinctTexts,
    /// Blocks read, their samples indexes into `distinct.tallied.texts`.
    memo: BlockMemo<'a>,
}

/// The distinct texts of a piece read so far, with their count sums and occurrences (what
/// is left of a [`TextTally`] once its stretch is read).
struct DistinctTexts {
    tallied: TalliedTexts,
    /// The keys of `tallied.texts`, in order.
    keys: Vec<TextKey>,
    /// The texts `tallied.texts[..indexed]`, by their keys: all of them while reading;
    /// the texts a merge adds are indexed only if another merge comes
    /// ([`DistinctTexts::absorb`]).
    index: HashTable<TextSlot>,
    indexed: usize,
}

/// A distinct text in [`DistinctTexts`]' index: its key, held in the table itself so that
/// a lookup does not first load the text's entry.
#[derive(Clone, Copy)]
struct TextSlot {
    key: TextKey,
    /// Its index in `texts`.
    index: usize,
}

impl<'a> TextTally<'a> {
    /// A tally of texts writing packed samples into `arenas` (none: the first sample adds
    /// one).
    fn new(arenas: Vec<Vec<u8>>) -> TextTally<'a> {
        TextTally {
            distinct: DistinctTexts {
                tallied: TalliedTexts {
                    texts: Vec::new(),
                    arenas,
                },
                keys: Vec::new(),
                index: HashTable::new(),
                indexed: 0,
            },
            memo: BlockMemo::new(),
        }
    }

    /// Adds an occurrence of a sample text; its index in `tallied.texts`. A text not seen
    /// before is parsed with `parser` and its sample packed.
    fn add_occurrence(&mut self, text: SampleText<'_>, parser: &mut TextParser) -> usize {
        let key = parser.key(&text);
        let distinct = &mut self.distinct;
        if let Some(index) = distinct.find(key) {
            distinct.bump(index, text.count, 1);
            return index;
        }
        let verdict = parser.parse(text.lbr_start);
        let (mut arena, mut start) = (0, 0);
        if verdict & KEPT != 0 {
            let s = &parser.sample;
            let tallied = &mut distinct.tallied;
            arena = tallied.arena_with_room(most_packed_bytes(s.callchain.len(), s.lbr.len()));
            let bytes = &mut tallied.arenas[arena];
            start = bytes.len();
            let room = bytes.capacity();
            pack_sample(s, bytes);
            debug_assert_eq!(bytes.capacity(), room, "an arena grew");
        }
        let t = TalliedText {
            arena: u32::try_from(arena).expect("fewer than 2³² arenas"),
            start,
            verdict,
            count: text.count,
            occurrences: 1,
        };
        distinct.add_new(t, key)
    }
}

impl DistinctTexts {
    /// The index of the text with `key`.
    fn find(&self, key: TextKey) -> Option<usize> {
        let found = self.index.find(key.table_hash(), |s| s.key == key);
        found.map(|s| s.index)
    }

    /// Adds `t` with `key`, known not to be here yet; its index.
    fn add_new(&mut self, t: TalliedText, key: TextKey) -> usize {
        debug_assert_eq!(self.indexed, self.tallied.texts.len());
        let texts = &mut self.tallied.texts;
        let index = texts.len();
        self.index
            .insert_unique(key.table_hash(), TextSlot { key, index }, |s| {
                s.key.table_hash()
            });
        texts.push(t);
        self.keys.push(key);
        self.indexed += 1;
        index
    }

    /// Indexes the texts a merge added without indexing them.
    fn index_all(&mut self) {
        let keys = &self.keys[self.indexed..];
        self.index.reserve(keys.len(), |s| s.key.table_hash());
        for (i, &key) in keys.iter().enumerate() {
            let slot = TextSlot {
                key,
                index: self.indexed + i,
            };
            self.index
                .insert_unique(key.table_hash(), slot, |s| s.key.table_hash());
        }
        self.indexed = self.keys.len();
    }

    /// Counts occurrences of the sample `tallied.texts[i]`.
    fn bump(&mut self, i: usize, count: u64, occurrences: u64) {
        let t = &mut self.tallied.texts[i];
        // Counts wrap like llvm-profgen's uint64_t, as the aggregator's do.
        t.count = t.count.wrapping_add(count);
        t.occurrences += occurrences;
    }

    /// Adds the samples of `other`, which comes after these (in the same script), looking
    /// them up on up to `threads` threads.
    ///
    /// The texts of `other` not found here are added but not indexed: after the last
    /// merge nothing looks texts up any more (the next merge indexes them first). Growing
    /// the index took fresh memory, dear on some machines, while the other core was idle.
    fn absorb(&mut self, other: DistinctTexts, threads: usize) {
        self.index_all();
        let base = u32::try_from(self.tallied.arenas.len()).expect("fewer than 2³² arenas");
        self.tallied.arenas.extend(other.tallied.arenas);
        let found = self.find_all(&other.keys, threads);
        // Room for all of them at once.
        self.tallied.texts.reserve(other.keys.len());
        self.keys.reserve(other.keys.len());
        // One not found here is added without looking again: the texts of `other` are
        // distinct.
        let moved = other.tallied.texts.into_iter().zip(other.keys);
        for ((mut t, key), found) in moved.zip(found) {
            match found {
                Some(i) => self.bump(i, t.count, t.occurrences),
                None => {
                    t.arena += base;
                    self.tallied.texts.push(t);
                    self.keys.push(key);
                }
            }
        }
    }

    /// [`DistinctTexts::find`] of each of `keys`, in order, on up to `threads` threads:
    /// merging the cores' tallies runs on one core while the other has nothing to do, and
    /// each lookup waits on memory.
    fn find_all(&self, keys: &[TextKey], threads: usize) -> Vec<Option<usize>> {
        /// Fewer keys than this are looked up on the calling thread.
        const PER_THREAD: usize = 2048;
        let threads = threads.clamp(1, keys.len().div_ceil(PER_THREAD).max(1));
        if threads == 1 {
            return keys.iter().map(|&k| self.find(k)).collect();
        }
        let part = keys.len().div_ceil(threads);
        let found = on_threads(
            keys.chunks(part)
                .map(|part| move || part.iter().map(|&k| self.find(k)).collect::<Vec<_>>()),
        );
        found.concat()
    }
}

enum RawPiece {
    Mmap(Mmap2Event),
    Texts(Box<DistinctTexts>),
}

struct ChunkScan {
    pieces: Vec<RawPiece>,
    stats: PerfScriptStats,
}

/// Bytes scanned between two progress reports.
const PROGRESS_STEP: usize = 16 << 20;

/// Scans `text[range]`, giving away the second half of what is left to a hungry thread
/// of `queue` (the scan then ends there).
fn scan_chunk(
    text: &[u8],
    range: Range<usize>,
    name: &str,
    script_type: PerfScriptType,
    progress: &(dyn Fn(u64) + Sync),
    queue: &ScanQueue,
    drop_read_pages: bool,
) -> Result<ChunkScan, PerfScriptError> {
    let start = range.start;
    // With `drop_read_pages` (`text` is a file mapping), the pages read are given back as
    // the scan moves on: a mapped script would otherwise stay resident whole while the
    // rest of `convert` runs. Bytes read again later (blocks the memo compares) come back
    // from the page cache.
    let mut read_pages = super::text::ReadPages::new(text, start, drop_read_pages);
    let mut chunk = &text[range];
    let mut units = UnitCursor::new(chunk, name, script_type, 0)?;
    let mut stats = PerfScriptStats::default();
    let mut pieces = Vec::new();
    let mut parser = TextParser::new(script_type);
    // Room for the packed samples of a chunk of distinct samples (address space only
    // until written), so that the bytes are not copied as they grow. Later pieces (after
    // an MMAP line) start small, as there may be many, and add larger arenas as they fill.
    let mut texts = TextTally::new(vec![Vec::with_capacity(chunk.len() / PACKED_SHARE)]);
    let mut reported = 0usize;
    let mut may_share = true;
    loop {
        let pos = units.position();
        read_pages.read_to(start + pos);
        if may_share && queue.is_hungry() {
            let end = start + chunk.len();
            match queue.share(start + pos, end, |middle| {
                cut_after_branch_line(&text[..end], middle)
            }) {
                Some(cut) => {
                    chunk = &chunk[..cut - start];
                    units.truncate(chunk.len());
                }
                // What is left only shrinks, and a later middle only moves on: a range
                // with no cut now (no branch-stack line in its second half, as in an
                // LBR-only script whose lines start with an IP) never has one.
                None => may_share = false,
            }
        }
        if let Some((end, seen)) = texts.memo.predict(chunk, pos) {
            texts.distinct.bump(seen.sample, seen.count, 1);
            units.skip_block(end, seen.lines)?;
            report(&mut reported, units.position(), progress);
            continue;
        }
        let block = texts.memo.probe(chunk, pos);
        if let Some(block) = block {
            if let Some(seen) = texts.memo.find(chunk, pos, block) {
                texts.distinct.bump(seen.sample, seen.count, 1);
                units.skip_block(block.end, seen.lines)?;
                report(&mut reported, units.position(), progress);
                continue;
            }
        }
        // Unit by unit through the block (or one unit): remembered when it was blank lines
        // and one sample ending with it.
        let lines_before = units.lines();
        let mut sample = None;
        let mut plain = true;
        let mut ended = false;
        loop {
            let Some(unit) = units.next_unit()? else {
                ended = true;
                break;
            };
            match unit {
                Unit::Sample(t) => sample = Some((texts.add_occurrence(t, &mut parser), t.count)),
                Unit::Skipped { dropped } => {
                    stats.dropped_samples += dropped;
                    plain &= dropped == 0;
                }
                Unit::Mmap(line) => {
                    plain = false;
                    match parse_mmap_line(line) {
                        Some(m) => {
                            if !texts.distinct.tallied.is_empty() {
                                let read =
                                    std::mem::replace(&mut texts, TextTally::new(Vec::new()));
                                let mut read = read.distinct;
                                // There may be many pieces: none keeps room it will not use.
                                read.tallied.shrink_last_arena();
                                pieces.push(RawPiece::Texts(Box::new(read)));
                            }
                            pieces.push(RawPiece::Mmap(m));
                        }
                        None => stats.unparsed_mmap_lines += 1,
                    }
                }
            }
            match block {
                Some(b) if sample.is_none() && units.position() < b.end => {}
                _ => break,
            }
        }
        match (block, sample, plain) {
            (Some(b), Some((i, count)), true) if units.position() == b.end => {
                let lines = units.lines() - lines_before;
                let seen = BlockUnits {
                    sample: i,
                    count,
                    lines,
                };
                texts.memo.remember(chunk, pos, b, seen);
            }
            _ => texts.memo.lose_track(),
        }
        report(&mut reported, units.position(), progress);
        if ended {
            break;
        }
    }
    progress((chunk.len() - reported) as u64);
    if !texts.distinct.tallied.is_empty() {
        pieces.push(RawPiece::Texts(Box::new(texts.distinct)));
    }
    stats.lines = units.lines();
    Ok(ChunkScan { pieces, stats })
}

/// The first arena of a chunk has room for packed samples of a 1/`PACKED_SHARE` of the
/// chunk's bytes: a text of distinct samples packs into about a sixth of its bytes.
const PACKED_SHARE: usize = 8;

/// Room for packed samples in the first arena of a piece after an MMAP line (there may be
/// many small pieces), or the room its first sample may need if that is more; each
/// further arena of a piece is four times the last, up to [`LARGEST_ARENA`].
const FIRST_ARENA: usize = 4 << 10;
const LARGEST_ARENA: usize = 64 << 20;

/// The capacity of the arena after one of capacity `last` (`None`: the first of a piece
/// after an MMAP line) for a sample that needs up to `most` bytes.
fn next_arena_capacity(last: Option<usize>, most: usize) -> usize {
    let grown = last.map_or(0, |c| c.saturating_mul(4));
    grown.clamp(FIRST_ARENA, LARGEST_ARENA).max(most)
}

/// Calls `progress` with the bytes scanned since `reported` once they are many.
fn report(reported: &mut usize, at: usize, progress: &(dyn Fn(u64) + Sync)) {
    if at - *reported >= PROGRESS_STEP {
        progress((at - *reported) as u64);
        *reported = at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_script::{tally_script_parts, PerfScriptReader, ScriptText};
    use crate::PerfEvent;

    /// Adds `t` to `samples`, folded into an equal sample already there.
    fn fold(samples: &mut Vec<TalliedSample>, t: TalliedSample) {
        let same = samples.iter_mut().find(|u| {
            Sample {
                count: t.sample.count,
                ..u.sample.clone()
            } == t.sample
        });
        match same {
            Some(u) => {
                u.sample.count += t.sample.count;
                u.occurrences += t.occurrences;
            }
            None => samples.push(t),
        }
    }

    /// The reader's events, LBR flags cleared, identical samples of one piece folded
    /// together: what [`tally_samples`] and [`ScriptTally::parse_all`] give, once their
    /// samples are folded too ([`folded`]).
    fn folded_reader_events(text: &[u8]) -> (Vec<ParsedPiece>, PerfScriptStats) {
        let mut reader = PerfScriptReader::new(text, "t").unwrap();
        let mut pieces: Vec<ParsedPiece> = Vec::new();
        while let Some(event) = reader.next_event().unwrap() {
            match event {
                PerfEvent::Sample(mut s) => {
                    if !matches!(pieces.last(), Some(ParsedPiece::Samples(_))) {
                        pieces.push(ParsedPiece::Samples(Vec::new()));
                    }
                    let Some(ParsedPiece::Samples(samples)) = pieces.last_mut() else {
                        unreachable!()
                    };
                    for e in &mut s.lbr {
                        e.flags = 0;
                    }
                    fold(
                        samples,
                        TalliedSample {
                            sample: s,
                            occurrences: 1,
                        },
                    );
                }
                PerfEvent::SideBand(crate::SideBandEvent::Mmap2(m)) => {
                    pieces.push(ParsedPiece::Mmap(m))
                }
                PerfEvent::SideBand(_) => {}
            }
        }
        (pieces, *reader.stats())
    }

    /// `pieces` with equal samples of a piece folded together.
    fn folded(pieces: Vec<ParsedPiece>) -> Vec<ParsedPiece> {
        pieces
            .into_iter()
            .map(|p| match p {
                ParsedPiece::Samples(samples) => {
                    let mut out = Vec::new();
                    for t in samples {
                        fold(&mut out, t);
                    }
                    ParsedPiece::Samples(out)
                }
                mmap => mmap,
            })
            .collect()
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
            let (pieces, stats) = tally.parse_all();
            assert_eq!(folded(pieces), expected, "{threads} threads");
            assert_eq!(stats, expected_stats, "{threads} threads");
        }
        let tally = tally_samples(text.as_bytes(), "t", 2, &|_| {}).unwrap();
        // 50 a, 17 × 2 b, 8 cut (the 8 "bad" ones are no sample text): 3 distinct samples
        // in each of the two pieces (b after a count line is the same text).
        assert_eq!((tally.sample_texts, tally.distinct_texts), (50 + 34 + 8, 6));
        let (pieces, _) = tally.parse_all();
        let Some(ParsedPiece::Samples(first)) = pieces.get(1) else {
            panic!("{pieces:?}")
        };
        assert_eq!((first[0].sample.count, first[0].occurrences), (21, 21));
        // b: 7 occurrences with count 1 and 7 with count 4 before the second mmap.
        assert_eq!((first[1].sample.count, first[1].occurrences), (35, 14));
        assert_eq!(first[1].sample.lbr[1].flags, 0, "M/-/-/5 cleared");
    }

    /// A piece after an MMAP line starts with a small arena and adds larger ones as its
    /// distinct samples fill them (none is grown by copying): every sample stays where it
    /// was written and reads as the reader reads it. A piece closed by an MMAP line keeps
    /// no spare room.
    #[test]
    fn a_piece_adds_arenas_as_it_fills() {
        // 5,000 distinct samples of about 19 packed bytes (two frames, three entries):
        // 95 KB, past 4 + 16 + 64 KiB.
        let samples = |base: u64| -> String {
            (0..5000u64)
                .map(|i| {
                    format!(
                        "\t {:x}\n\t 20\n 0x{:x}/0x2/P/-/-/0  0x3/0x4/M/-/-/7  0x5/0x6/P/-/-/1\n\n",
                        base + i,
                        0x10_0000 + i
                    )
                })
                .collect()
        };
        let text = format!("{MMAP}{}{MMAP}{}", samples(0x1000), samples(0x9000));
        let (expected, expected_stats) = folded_reader_events(text.as_bytes());
        let tally = tally_samples(text.as_bytes(), "t", 1, &|_| {}).unwrap();
        let [ScriptPiece::Mmap(_), ScriptPiece::Texts(first), ScriptPiece::Mmap(_), ScriptPiece::Texts(last)] =
            &tally.pieces[..]
        else {
            panic!("{:?}", tally.pieces)
        };
        let sizes = |t: &TalliedTexts| -> Vec<(usize, usize)> {
            t.arenas.iter().map(|a| (a.capacity(), a.len())).collect()
        };
        let packed = |t: &TalliedTexts| -> usize { sizes(t).iter().map(|&(_, len)| len).sum() };
        // The chunk's first arena (an eighth of the chunk, 48 KB) did not hold them all:
        // the last one added is shrunk to its samples.
        let first_sizes = sizes(first);
        assert_eq!(first_sizes.len(), 2, "{first_sizes:?}");
        assert_eq!(first_sizes[1].0, first_sizes[1].1, "shrunk to its samples");
        for t in [first, last] {
            let bytes = packed(t);
            assert!((5000 * 17..5000 * 22).contains(&bytes), "{bytes}");
            assert_eq!((t.held_bytes(), t.len()), (bytes + 5000 * 32, 5000));
        }
        let capacities: Vec<usize> = sizes(last).iter().map(|&(c, _)| c).collect();
        assert_eq!(capacities, [4 << 10, 16 << 10, 64 << 10, 256 << 10]);
        let (pieces, stats) = tally.parse_all();
        assert_eq!(folded(pieces), expected);
        assert_eq!(stats, expected_stats);
        // Four times the last, from the first arena's size up to the largest's, and never
        // less than the sample needs.
        assert_eq!(next_arena_capacity(None, 100), FIRST_ARENA);
        assert_eq!(next_arena_capacity(None, 10_000), 10_000);
        assert_eq!(next_arena_capacity(Some(1 << 20), 100), 4 << 20);
        assert_eq!(next_arena_capacity(Some(48 << 20), 100), LARGEST_ARENA);
        assert_eq!(next_arena_capacity(Some(usize::MAX), 100), LARGEST_ARENA);
        assert_eq!(next_arena_capacity(Some(64 << 20), 100 << 20), 100 << 20);
    }

    /// `file` read as one part ([`tally_script_parts`] without a bound), as
    /// `convert` reads a script that holds less than the bound.
    fn one_part(file: &ScriptText, threads: usize) -> Result<ScriptTally, PerfScriptError> {
        tally_script_parts(file, threads, usize::MAX, &|_| {})?
            .next()
            .expect("one part")
    }

    /// A mapped script larger than the pages a scan keeps resident (its read pages are
    /// given back as it moves on) tallies as its bytes do, also once parsed.
    #[test]
    fn a_large_mapped_script_tallies_as_its_bytes() {
        let dir = std::env::temp_dir().join(format!("tally-large-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("large.perfscript");
        let one = script();
        let text = one.repeat((24 << 20) / one.len() + 1);
        std::fs::write(&path, &text).unwrap();
        let name = path.display().to_string();
        let file = ScriptText::open(&path).unwrap();
        assert!(file.is_mapped());
        for threads in [1, 2] {
            let read = one_part(&file, threads).unwrap();
            let expected = tally_samples(text.as_bytes(), &name, threads, &|_| {}).unwrap();
            assert_eq!(read, expected);
            let (pieces, stats) = read.parse_all();
            let (want_pieces, want_stats) = expected.parse_all();
            assert_eq!(folded(pieces), folded(want_pieces));
            assert_eq!(stats, want_stats);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A script read from its file tallies as its bytes do; an error names the file.
    #[test]
    fn a_script_file_tallies_as_its_bytes() {
        let dir = std::env::temp_dir().join(format!("tally-script-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mix.perfscript");
        let text = script();
        std::fs::write(&path, &text).unwrap();
        let name = path.display().to_string();
        let file = ScriptText::open(&path).unwrap();
        for threads in [1, 2] {
            let read = one_part(&file, threads).unwrap();
            let expected = tally_samples(text.as_bytes(), &name, threads, &|_| {}).unwrap();
            assert_eq!(read, expected, "{threads} threads");
        }
        std::fs::write(&path, "PERF_RECORD_MMAP2 garbage\n").unwrap();
        let file = ScriptText::open(&path).unwrap();
        let err = one_part(&file, 2).unwrap_err();
        assert!(err.to_string().contains(&name), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The cores' tallies are merged with their texts looked up on several threads: the
    /// samples of the second core found among the first's are counted there, in order.
    #[test]
    fn tallies_merge_on_several_threads_as_on_one() {
        let sample = |i: u64| {
            format!(
                "\n\t {:x}\n\t 20\n 0x{:x}/0x2/P/-/-/0  0x3/0x4/M/-/-/7\n",
                0x1000 + i,
                i
            )
        };
        let first: String = (0..5000).map(sample).collect();
        let text = format!(
            "{first}{first}{}",
            (5000..8000).map(sample).collect::<String>()
        );
        let (expected, expected_stats) = folded_reader_events(text.as_bytes());
        for threads in [1, 2, 3] {
            let tally = tally_samples(text.as_bytes(), "t", threads, &|_| {}).unwrap();
            assert_eq!((tally.sample_texts, tally.distinct_texts), (13_000, 8000));
            let (pieces, stats) = tally.parse_all();
            assert_eq!(folded(pieces), expected, "{threads} threads");
            assert_eq!(stats, expected_stats, "{threads} threads");
        }
    }

    #[test]
    fn ranges_given_away_while_scanning_read_the_same() {
        // Over 4 MiB, so that half of a range is worth giving away.
        let one = script();
        let text = one.repeat((5 << 20) / one.len() + 1);
        let (expected, expected_stats) = folded_reader_events(text.as_bytes());
        for threads in [1, 2] {
            let tally = tally_shared(text.as_bytes(), "t", threads, &|_| {}, true, false).unwrap();
            let (pieces, stats) = tally.parse_all();
            assert_eq!(folded(pieces), expected, "{threads} threads");
            assert_eq!(stats, expected_stats, "{threads} threads");
        }
        // An error after a cut names its line in the whole input.
        let mut bad = text.clone();
        bad += "\t 60\n\t 70\n";
        let err = tally_shared(bad.as_bytes(), "in", 1, &|_| {}, true, false).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "in:{}: Hybrid perf sample is corrupted, No LBR sample line",
                text.lines().count() + 1
            )
        );
    }

    #[test]
    fn a_range_with_no_cut_is_scanned_whole() {
        // LBR-only lines starting with an IP: no line starts with " 0x", so there is no
        // place to cut, however hungry the other threads are.
        let line = "40062f 0x4005c8/0x4005dc/P/-/-/0   0x40062f/0x4005b0/P/-/-/0\n";
        let text = line.repeat((5 << 20) / line.len() + 1);
        let (expected, expected_stats) = folded_reader_events(text.as_bytes());
        for threads in [1, 2] {
            let tally = tally_shared(text.as_bytes(), "t", threads, &|_| {}, true, false).unwrap();
            assert_eq!(tally.script_type, PerfScriptType::LbrOnly);
            let (pieces, stats) = tally.parse_all();
            assert_eq!(folded(pieces), expected, "{threads} threads");
            assert_eq!(stats, expected_stats, "{threads} threads");
        }
    }

    /// Texts differing in their flags only are one text, whether the stretch repeats its
    /// blocks (a recorder's) or not, and on any number of threads; spaces are kept: one
    /// space between the entries makes another text of the same sample.
    #[test]
    fn texts_differing_in_flags_only_are_one_sample() {
        let n = WINDOW_OF_PROBES as u64;
        let distinct =
            |i: u64, flags: &str| format!("\t {:x}\n 0x{:x}/0x2/{flags}\n\n", 0xa000 + i, i);
        let early = "\t 30\n 0x7/0x8/P/-/-/1\n\n\t 30\n 0x7/0x8/M/-/-/2\n\n";
        let window: String = (0..n).map(|i| distinct(i, "P/-/-/1")).collect();
        let repeated = "\t 40\n 0x9/0xa/P/-/-/0\n\n".repeat(2 * n as usize);
        let late = "\t 10\n 0x1/0x2/P/-/-/1  0x3/0x4/P/-/-/7\n\n\t 10\n 0x1/0x2/M/-/-/9  0x3/0x4/-/X/-/2/COND\n\n\t 10\n 0x1/0x2 0x3/0x4\n\n";
        let text = format!(
            "{early}{window}{late}{}{repeated}{early}{late}",
            distinct(5, "M/-/-/4")
        );
        let (expected, expected_stats) = folded_reader_events(text.as_bytes());
        for threads in [1, 2] {
            let tally = tally_samples(text.as_bytes(), "t", threads, &|_| {}).unwrap();
            // early 2 + 2, window n + 1, late 3 + 3, repeated 2n; distinct: one early, the
            // window, two late, one repeated.
            assert_eq!(
                (tally.sample_texts, tally.distinct_texts),
                (3 * n + 11, n + 4),
                "{threads} threads"
            );
            let (pieces, stats) = tally.parse_all();
            assert_eq!(stats, expected_stats);
            assert_eq!(folded(pieces.clone()), expected);
            let [ParsedPiece::Samples(s)] = &pieces[..] else {
                panic!("{pieces:?}")
            };
            assert_eq!(s.len(), n as usize + 4);
            assert_eq!((s[0].sample.count, s[0].occurrences), (4, 4));
            // Sample 5 of the window, again with other flags after the window.
            assert_eq!(s[1 + 5].occurrences, 2);
            let late = &s[n as usize + 1..n as usize + 3];
            assert_eq!((late[0].sample.count, late[0].occurrences), (4, 4));
            assert_eq!(
                late[1].sample,
                Sample {
                    count: 2,
                    ..late[0].sample.clone()
                }
            );
            assert_eq!(s[n as usize + 3].occurrences, 2 * n);
        }
    }

    #[test]
    fn chunks_are_cut_after_branch_stack_lines() {
        let text = b"\t 10\n 0x1/0x2\n\n\t 20\n 0x3/0x4\n\n\t 30\n 0x5/0x6\n";
        let bounds = chunk_bounds(text, 0..text.len(), 3);
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

//! [`tally_samples`]: a perf script read on several threads, each distinct sample parsed
//! once.
//!
//! Perf scripts repeat themselves: a program in a steady state produces the same stack and
//! branch stack over and over (the software recorder's 216 k samples of the convert
//! benchmark are 41 k distinct samples). Hardware LBRs also carry cycle counts, which make
//! nearly every text distinct, but llvm-profgen ignores every LBR field but `FROM` and
//! `TO`. So each sample text is hashed and counted by its bytes; each distinct text is then
//! cut down to what the reader reads ([`super::compact`]) and counted by that (or, in a
//! stretch that repeats its blocks, kept in place in the script: [`IN_SCRIPT`]), and only
//! the first occurrence of each distinct text is parsed ([`parse_tallied_one`], on the
//! caller's threads). The sample then stands for all of them (`Sample::count` = the sum of their
//! counts, plus how many occurrences, for per-sample statistics); its LBR entries come
//! without flags. MMAP lines split the input into pieces: the samples after an MMAP event
//! are read with the binary where that event put it, so samples are only aggregated within
//! a piece. The result is what [`super::PerfScriptReader`] gives with flags cleared and
//! samples of equal text (once compact, if made compact) folded together (but for texts
//! made compact where they were kept in place: see [`DistinctTexts::make_compact`]), in
//! order of first appearance —
//! same units ([`super::unit`]), same parser.
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
use super::reader::{
    detect_type, parse_mmap_line, EntryTokenCache, PerfScriptError, PerfScriptStats,
};
use super::scan_queue::ScanQueue;
use super::text_hash::text_hash;
use super::unit::{SampleText, Unit, UnitCursor};
use super::PerfScriptType;
use crate::threads::on_threads;
use crate::{Mmap2Event, Sample};

/// One stretch of the input, in input order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScriptPiece<'a> {
    /// The event of an MMAP line.
    Mmap(Mmap2Event),
    /// The samples between two MMAP events, each distinct one once, in order of first
    /// appearance (parse them with [`parse_tallied_one`]).
    Texts(TalliedTexts<'a>),
}

/// The distinct samples of a piece, as compact texts or in place in the script. Two are
/// equal when their texts are, with equal bytes (`Debug` shows the script's length only).
#[derive(Clone, Default, Eq)]
pub struct TalliedTexts<'a> {
    /// In order of first appearance.
    pub texts: Vec<TalliedText>,
    /// The compact ones, one after the other, in one or more arenas (a chunk's scan
    /// adds an arena when the last is full; merging chunks moves arenas instead of copying
    /// texts).
    arenas: Vec<Vec<u8>>,
    /// The whole script, where the texts kept in place are ([`IN_SCRIPT`]).
    script: &'a [u8],
}

/// The `arena` of a text kept in place: its `start..end` are offsets in the script.
///
/// Once a stretch of the script is seen to repeat its blocks (a recorder's, or a steady
/// program's without cycle counts), its new texts are not made compact: their bytes are
/// in the script, which stays mapped until they are parsed. Making them compact cost a
/// sixth of the CPU time on the recorder's input of the convert benchmark (half of it
/// the kernel zeroing the fresh pages of the arenas), to merge texts that differ in
/// their flags only, which such a script seldom has (the aggregator merges equal
/// samples anyway). Until the stretch's block memo can tell (its first window of
/// probes, or the end of a shorter stretch), texts are kept in place too, and made compact
/// where they are if it does not repeat ([`DistinctTexts::make_compact`]).
const IN_SCRIPT: usize = usize::MAX;

/// The bytes of a stored text: in `arenas[arena]` or, [`IN_SCRIPT`], in `script`.
fn stored<'s>(arenas: &'s [Vec<u8>], script: &'s [u8], arena: usize, at: Range<usize>) -> &'s [u8] {
    if arena == IN_SCRIPT {
        &script[at]
    } else {
        &arenas[arena][at]
    }
}

impl PartialEq for TalliedTexts<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.texts == other.texts
            && (0..self.len()).all(|i| self.text(i).block == other.text(i).block)
    }
}

impl std::fmt::Debug for TalliedTexts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let arena_bytes: Vec<usize> = self.arenas.iter().map(Vec::len).collect();
        f.debug_struct("TalliedTexts")
            .field("texts", &self.texts)
            .field("arena_bytes", &arena_bytes)
            .field("script_bytes", &self.script.len())
            .finish()
    }
}

impl<'a> TalliedTexts<'a> {
    /// Whether some text is kept in place in the script.
    fn keeps_script(&self) -> bool {
        self.texts.iter().any(|t| t.arena == IN_SCRIPT)
    }

    /// Gives back the room left in the last arena (its texts stay where they are: they are
    /// found by arena and offset).
    fn shrink_last_arena(&mut self) {
        if let Some(last) = self.arenas.last_mut() {
            last.shrink_to_fit();
        }
    }

    /// The arena the next compact text goes at the end of, with room for `most` bytes:
    /// the last one, or a new one when it has not. A new arena rather than a larger copy
    /// of the last one: nothing is moved (growing a vector copies it, into fresh pages
    /// each time).
    fn arena_with_room(&mut self, most: usize) -> usize {
        let last = self.arenas.last();
        if last.map_or(0, |a| a.capacity() - a.len()) < most {
            let capacity = next_arena_capacity(last.map(Vec::capacity), most);
            self.arenas.push(compact_arena(capacity));
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

    /// The bytes held for these texts until they are parsed: the compact texts, the texts
    /// kept in place (their pages are read again to parse them), and the texts' entries.
    pub fn held_bytes(&self) -> usize {
        let compact: usize = self.arenas.iter().map(Vec::len).sum();
        let in_place: usize = self
            .texts
            .iter()
            .filter(|t| t.arena == IN_SCRIPT)
            .map(|t| t.end - t.start)
            .sum();
        compact + in_place + self.texts.len() * std::mem::size_of::<TalliedText>()
    }

    /// The text of `texts[i]`, compact or as the script has it (its `count` that of all
    /// its occurrences).
    pub fn text(&self, i: usize) -> SampleText<'_> {
        let t = &self.texts[i];
        SampleText {
            count: t.count,
            block: stored(&self.arenas, self.script, t.arena, t.start..t.end),
            lbr_start: t.lbr_start,
        }
    }
}

/// A distinct sample and its occurrences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TalliedText {
    /// Where its text is in [`TalliedTexts`]: an arena, or [`IN_SCRIPT`].
    arena: usize,
    start: usize,
    end: usize,
    lbr_start: usize,
    /// The hash of the text.
    hash: u64,
    /// The sum of the counts of its occurrences.
    pub count: u64,
    /// How many times it occurred.
    pub occurrences: u64,
}

/// A parsed distinct sample and how many times its text occurred.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TalliedSample {
    /// The sample; its `count` is the sum of the counts of its occurrences.
    pub sample: Sample,
    /// How many sample texts it stands for.
    pub occurrences: u64,
}

/// A perf script read by [`tally_samples`], its sample texts not parsed yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptTally<'a> {
    /// LBR-only or hybrid.
    pub script_type: PerfScriptType,
    /// The input, in order.
    pub pieces: Vec<ScriptPiece<'a>>,
    /// What reading skipped so far; [`parse_tallied_one`] adds what parsing drops (together
    /// they are what [`super::PerfScriptReader::stats`] says).
    pub stats: PerfScriptStats,
    /// Sample texts read (occurrences).
    pub sample_texts: u64,
    /// Distinct sample texts: compact texts, and texts kept in place (where a stretch of
    /// the script repeats its blocks), distinct by their bytes but for texts made compact
    /// where they were kept in place ([`DistinctTexts::make_compact`]). Which texts are
    /// kept in place depends on where the script was cut between the threads, so the
    /// count may differ from run to run on a large input (the samples do not).
    pub distinct_texts: u64,
}

/// A piece of a fully parsed [`ScriptTally`] ([`ScriptTally::parse_all`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParsedPiece {
    /// The event of an MMAP line.
    Mmap(Mmap2Event),
    /// The samples of a [`ScriptPiece::Texts`] that were not dropped.
    Samples(Vec<TalliedSample>),
}

impl ScriptTally<'_> {
    /// The bytes held for the texts of every piece ([`TalliedTexts::held_bytes`]).
    pub fn held_bytes(&self) -> usize {
        self.pieces
            .iter()
            .map(|p| match p {
                ScriptPiece::Texts(t) => t.held_bytes(),
                ScriptPiece::Mmap(_) => 0,
            })
            .sum()
    }

    /// Whether some text is kept in place in the script (it is read again when parsed).
    pub(super) fn keeps_script(&self) -> bool {
        self.pieces.iter().any(|p| match p {
            ScriptPiece::Texts(t) => t.keeps_script(),
            ScriptPiece::Mmap(_) => false,
        })
    }

    /// Parses every piece at once, on the calling thread (tests; `convert` parses,
    /// prepares and aggregates on every core, in batches, so that the samples of a large
    /// input are never all in memory). The statistics include what parsing dropped.
    pub fn parse_all(&self) -> (Vec<ParsedPiece>, PerfScriptStats) {
        let mut stats = self.stats;
        let mut tokens = EntryTokenCache::new();
        let pieces = self
            .pieces
            .iter()
            .filter_map(|piece| match piece {
                ScriptPiece::Mmap(m) => Some(ParsedPiece::Mmap(m.clone())),
                ScriptPiece::Texts(texts) => {
                    let samples: Vec<TalliedSample> = (0..texts.len())
                        .filter_map(|i| {
                            parse_tallied_one(texts, i, self.script_type, &mut tokens, &mut stats)
                        })
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
pub fn tally_samples<'a>(
    text: &'a [u8],
    name: &str,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ScriptTally<'a>, PerfScriptError> {
    tally_shared(text, name, threads, progress, false, false)
}

/// [`tally_samples`]; `share_at_once`: the first scanning thread to check gives away half
/// of its range at once, as if another were hungry (tests of sharing).
fn tally_shared<'a>(
    text: &'a [u8],
    name: &str,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
    share_at_once: bool,
    drop_read_pages: bool,
) -> Result<ScriptTally<'a>, PerfScriptError> {
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
pub(super) struct Scanned<'a> {
    script_type: PerfScriptType,
    /// Threads the merge may use.
    threads: usize,
    scans: Vec<(usize, Result<ChunkScan<'a>, PerfScriptError>)>,
}

/// Reads `text[range]` on up to `scan.threads` threads (`range` starts at the text's start
/// or just after a line starting with `" 0x"`, and ends at the text's end or just after
/// such a line).
pub(super) fn scan_all<'a>(
    text: &'a [u8],
    range: Range<usize>,
    scan: &ScanOptions<'_>,
) -> Scanned<'a> {
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
    type Scan<'a> = (usize, Result<ChunkScan<'a>, PerfScriptError>);
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
    scanned: Scanned<'_>,
    mut lines_before: u64,
) -> Result<ScriptTally<'_>, PerfScriptError> {
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
                distinct_texts += t.compact.texts.len() as u64;
                sample_texts += t.compact.texts.iter().map(|t| t.occurrences).sum::<u64>();
                ScriptPiece::Texts(t.compact)
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

/// The samples of one piece as they are read: each distinct one with its count sum and
/// occurrences. Two levels: each distinct text is made compact (or kept in place, in a
/// stretch that repeats its blocks) and looked up once among the texts; its later
/// occurrences find it by the bytes of their block ([`BlockMemo`]).
struct TextTally<'a> {
    distinct: DistinctTexts<'a>,
    /// Blocks read, their samples indexes into `distinct.compact.texts`.
    memo: BlockMemo<'a>,
    masks: ByteMasks,
    /// The texts `compact.texts[..undecided]` were kept in place before the memo told
    /// whether the stretch repeats its blocks: made compact if it does not.
    undecided: usize,
}

/// The distinct texts of a piece read so far, with their count sums and occurrences (what
/// is left of a [`TextTally`] once its stretch is read: it refers to the script only for
/// the texts kept in place).
struct DistinctTexts<'a> {
    compact: TalliedTexts<'a>,
    /// The texts `compact.texts[..indexed]`, by their stored bytes: all of them while
    /// reading; the texts a merge adds are indexed only if another merge comes
    /// ([`DistinctTexts::absorb`]).
    index: HashTable<TextSlot>,
    indexed: usize,
}

/// A distinct text in [`DistinctTexts`]' index: where its bytes are, held in the table itself
/// so that a lookup compares hash and bytes without first loading the text's entry in
/// `texts` (for the input with cycle counts, a wait on memory for every sample).
#[derive(Clone, Copy)]
struct TextSlot {
    hash: u64,
    /// Its index in `texts`.
    index: usize,
    arena: usize,
    start: usize,
    end: usize,
    lbr_start: usize,
}

impl TextSlot {
    /// The slot of `t`, `texts[index]`.
    fn of(index: usize, t: &TalliedText) -> TextSlot {
        TextSlot {
            hash: t.hash,
            index,
            arena: t.arena,
            start: t.start,
            end: t.end,
            lbr_start: t.lbr_start,
        }
    }
}

/// Room a compact text may need past the bytes of its text: the slack of the
/// compaction's fixed-size copies.
const COMPACT_SLACK: usize = 64;

impl<'a> TextTally<'a> {
    /// A tally of texts of `script` writing compact texts into `arenas` (none: the first
    /// text adds one).
    fn new(script: &'a [u8], arenas: Vec<Vec<u8>>) -> TextTally<'a> {
        TextTally {
            distinct: DistinctTexts {
                compact: TalliedTexts {
                    texts: Vec::new(),
                    arenas,
                    script,
                },
                index: HashTable::new(),
                indexed: 0,
            },
            memo: BlockMemo::new(),
            masks: ByteMasks::default(),
            undecided: 0,
        }
    }

    /// Adds an occurrence of a sample text; its index in `compact.texts`.
    ///
    /// Until the memo has told whether the stretch repeats its blocks (a whole window of
    /// probes), texts are kept in place too, then made compact if it does not: a
    /// recorder's texts are then never made compact (the first window's compact texts
    /// cost a fresh huge page of the arena per core, zeroed by the kernel).
    fn add_occurrence(&mut self, text: SampleText<'a>) -> usize {
        let told = self.memo.has_told();
        if told && self.undecided > 0 {
            if !self.memo.finds_repeats() {
                self.distinct.make_compact(self.undecided, &mut self.masks);
            }
            self.undecided = 0;
        }
        if !told || self.memo.finds_repeats() {
            // Kept in place (see IN_SCRIPT). `text.block` lies in the script.
            let script = self.distinct.compact.script;
            let start = text.block.as_ptr() as usize - script.as_ptr() as usize;
            let t = TalliedText {
                arena: IN_SCRIPT,
                start,
                end: start + text.block.len(),
                lbr_start: text.lbr_start,
                hash: text_hash(text.block),
                count: text.count,
                occurrences: 1,
            };
            let index = self.distinct.add_compact(t, false);
            if !told {
                self.undecided = self.distinct.compact.texts.len();
            }
            return index;
        }
        // The compact text goes at the end of the last arena, and stays there if it is new.
        let compact = &mut self.distinct.compact;
        // At most the text's bytes, plus the slack of the compaction's fixed-size copies.
        let arena = compact.arena_with_room(text.block.len() + COMPACT_SLACK);
        let bytes = &mut compact.arenas[arena];
        let (start, room) = (bytes.len(), bytes.capacity());
        bytes.extend_from_slice(text.stack_lines());
        compact_lbr_line(text.lbr_line(), bytes, &mut self.masks);
        debug_assert_eq!(bytes.capacity(), room, "an arena grew");
        let t = TalliedText {
            arena,
            start,
            end: bytes.len(),
            lbr_start: text.lbr_start,
            hash: text_hash(&bytes[start..]),
            count: text.count,
            occurrences: 1,
        };
        self.distinct.add_compact(t, true)
    }
}

impl<'a> TextTally<'a> {
    /// The distinct texts of the stretch read. Texts still kept in place for want of a
    /// verdict (a stretch shorter than a window of probes, between MMAP lines or at a
    /// range's end) are made compact when the probes so far found fewer than one block in
    /// eight, as a whole window would have decided.
    fn finish(mut self) -> DistinctTexts<'a> {
        if self.undecided > 0 && !self.memo.has_told() && !self.memo.repeats_so_far() {
            self.distinct.make_compact(self.undecided, &mut self.masks);
        }
        self.distinct
    }
}

impl DistinctTexts<'_> {
    /// Adds `t`, whose text is in place in the arenas or the script; its index. A new text
    /// at the end of the last arena (`fresh`) is removed from it when it is already known.
    /// (A compact text and a text in place are compared by their bytes too: the same
    /// sample both ways is two texts, parsed to equal samples.)
    fn add_compact(&mut self, t: TalliedText, fresh: bool) -> usize {
        if let Some(index) = self.find(&t) {
            if fresh {
                self.compact.arenas[t.arena].truncate(t.start);
            }
            self.bump(index, t.count, t.occurrences);
            return index;
        }
        self.add_new(t)
    }

    /// The index of the text with the bytes of `t` (stored in the arenas or the script).
    fn find(&self, t: &TalliedText) -> Option<usize> {
        let TalliedTexts { arenas, script, .. } = &self.compact;
        let new = stored(arenas, script, t.arena, t.start..t.end);
        let found = self.index.find(t.hash, |s| {
            s.hash == t.hash
                && s.lbr_start == t.lbr_start
                && stored(arenas, script, s.arena, s.start..s.end) == new
        });
        found.map(|s| s.index)
    }

    /// Adds `t`, known not to be here yet; its index.
    fn add_new(&mut self, t: TalliedText) -> usize {
        debug_assert_eq!(self.indexed, self.compact.texts.len());
        let texts = &mut self.compact.texts;
        let index = texts.len();
        self.index
            .insert_unique(t.hash, TextSlot::of(index, &t), |s| s.hash);
        texts.push(t);
        self.indexed += 1;
        index
    }

    /// Indexes the texts a merge added without indexing them.
    fn index_all(&mut self) {
        let texts = &self.compact.texts[self.indexed..];
        self.index.reserve(texts.len(), |s| s.hash);
        for (i, t) in texts.iter().enumerate() {
            let slot = TextSlot::of(self.indexed + i, t);
            self.index.insert_unique(t.hash, slot, |s| s.hash);
        }
        self.indexed = self.compact.texts.len();
    }

    /// Makes compact the texts kept in place among `compact.texts[..n]`, where they are:
    /// their indexes do not change. Two of them that differ in their flags only stay two
    /// texts with equal bytes (a lookup finds either; their samples are aggregated as one).
    fn make_compact(&mut self, n: usize, masks: &mut ByteMasks) {
        let script = self.compact.script;
        for i in 0..n {
            let t = self.compact.texts[i];
            if t.arena != IN_SCRIPT {
                continue;
            }
            let block = &script[t.start..t.end];
            let arena = self.compact.arena_with_room(block.len() + COMPACT_SLACK);
            let bytes = &mut self.compact.arenas[arena];
            let start = bytes.len();
            bytes.extend_from_slice(&block[..t.lbr_start]);
            compact_lbr_line(&block[t.lbr_start..], bytes, masks);
            let compact = TalliedText {
                arena,
                start,
                end: bytes.len(),
                hash: text_hash(&bytes[start..]),
                ..t
            };
            if let Ok(slot) = self.index.find_entry(t.hash, |s| s.index == i) {
                slot.remove();
            }
            self.index
                .insert_unique(compact.hash, TextSlot::of(i, &compact), |s| s.hash);
            self.compact.texts[i] = compact;
        }
    }

    /// Counts occurrences of the sample `compact.texts[i]`.
    fn bump(&mut self, i: usize, count: u64, occurrences: u64) {
        let t = &mut self.compact.texts[i];
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
    fn absorb(&mut self, other: DistinctTexts<'_>, threads: usize) {
        debug_assert!(std::ptr::eq(self.compact.script, other.compact.script));
        self.index_all();
        let base = self.compact.arenas.len();
        self.compact.arenas.extend(other.compact.arenas);
        let mut moved = other.compact.texts;
        for t in &mut moved {
            if t.arena != IN_SCRIPT {
                t.arena += base;
            }
        }
        let found = self.find_all(&moved, threads);
        // Room for all of them at once.
        self.compact.texts.reserve(moved.len());
        // One not found here is added without looking again: the texts of `other` are
        // distinct (or, made compact where they were, equal to another of `other`, which
        // is then added too: two texts of one sample).
        for (t, found) in moved.into_iter().zip(found) {
            match found {
                Some(i) => self.bump(i, t.count, t.occurrences),
                None => self.compact.texts.push(t),
            }
        }
    }

    /// [`DistinctTexts::find`] of each of `texts`, in order, on up to `threads` threads:
    /// merging the cores' tallies runs on one core while the other has nothing to do, and
    /// each lookup waits on memory for the bytes it compares.
    fn find_all(&self, texts: &[TalliedText], threads: usize) -> Vec<Option<usize>> {
        /// Fewer texts than this are looked up on the calling thread.
        const PER_THREAD: usize = 2048;
        let threads = threads.clamp(1, texts.len().div_ceil(PER_THREAD).max(1));
        if threads == 1 {
            return texts.iter().map(|t| self.find(t)).collect();
        }
        let part = texts.len().div_ceil(threads);
        let found = on_threads(
            texts
                .chunks(part)
                .map(|part| move || part.iter().map(|t| self.find(t)).collect::<Vec<_>>()),
        );
        found.concat()
    }
}

enum RawPiece<'a> {
    Mmap(Mmap2Event),
    Texts(Box<DistinctTexts<'a>>),
}

struct ChunkScan<'a> {
    pieces: Vec<RawPiece<'a>>,
    stats: PerfScriptStats,
}

/// Bytes scanned between two progress reports.
const PROGRESS_STEP: usize = 16 << 20;

/// Scans `text[range]`, giving away the second half of what is left to a hungry thread
/// of `queue` (the scan then ends there).
fn scan_chunk<'a>(
    text: &'a [u8],
    range: Range<usize>,
    name: &str,
    script_type: PerfScriptType,
    progress: &(dyn Fn(u64) + Sync),
    queue: &ScanQueue,
    drop_read_pages: bool,
) -> Result<ChunkScan<'a>, PerfScriptError> {
    let start = range.start;
    // With `drop_read_pages` (`text` is a file mapping), the pages read are given back as
    // the scan moves on: a mapped script would otherwise stay resident whole while the
    // rest of `convert` runs. Bytes read again later (kept sample texts) come back from
    // the page cache.
    let mut read_pages = super::text::ReadPages::new(text, start, drop_read_pages);
    let mut chunk = &text[range];
    let mut units = UnitCursor::new(chunk, name, script_type, 0)?;
    let mut stats = PerfScriptStats::default();
    let mut pieces = Vec::new();
    // Room for the compact texts of a chunk of distinct samples (address space only until
    // written), so that the bytes are not copied as they grow. Later pieces (after an MMAP
    // line) start small, as there may be many, and add larger arenas as they fill.
    let mut texts = TextTally::new(text, vec![compact_arena(chunk.len() / 4)]);
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
                Unit::Sample(text) => sample = Some((texts.add_occurrence(text), text.count)),
                Unit::Skipped { dropped } => {
                    stats.dropped_samples += dropped;
                    plain &= dropped == 0;
                }
                Unit::Mmap(line) => {
                    plain = false;
                    match parse_mmap_line(line) {
                        Some(m) => {
                            if !texts.distinct.compact.is_empty() {
                                let read =
                                    std::mem::replace(&mut texts, TextTally::new(text, Vec::new()));
                                let mut read = read.finish();
                                // There may be many pieces: none keeps room it will not use.
                                read.compact.shrink_last_arena();
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
    if !texts.distinct.compact.is_empty() {
        pieces.push(RawPiece::Texts(Box::new(texts.finish())));
    }
    stats.lines = units.lines();
    Ok(ChunkScan { pieces, stats })
}

/// Room for compact texts in the first arena of a piece after an MMAP line (there may be
/// many small pieces), or the room its first text may need if that is more; each further
/// arena of a piece is four times the last, up to [`LARGEST_ARENA`].
const FIRST_ARENA: usize = 4 << 10;
const LARGEST_ARENA: usize = 64 << 20;

/// The capacity of the arena after one of capacity `last` (`None`: the first of a piece
/// after an MMAP line) for a text that needs up to `most` bytes.
fn next_arena_capacity(last: Option<usize>, most: usize) -> usize {
    let grown = last.map_or(0, |c| c.saturating_mul(4));
    grown.clamp(FIRST_ARENA, LARGEST_ARENA).max(most)
}

/// An empty arena with room for `capacity` bytes of compact texts, on transparent huge
/// pages where the system gives them on request (`transparent_hugepage/enabled` at
/// `madvise`, the default of many distributions). The compact texts of the distinct
/// samples fill tens of megabytes as they are read, with one page fault (and one zeroed
/// page) per 4 KiB otherwise. Where the advice is not taken, nothing changes; an arena
/// never grows: a full one is followed by another ([`TalliedTexts::arena_with_room`]).
fn compact_arena(capacity: usize) -> Vec<u8> {
    const HUGE_PAGE: usize = 2 << 20;
    let mut arena = Vec::with_capacity(capacity);
    let start = (arena.as_mut_ptr() as usize).next_multiple_of(HUGE_PAGE);
    let end = (arena.as_mut_ptr() as usize + arena.capacity()) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        // SAFETY: the whole huge pages inside the arena's allocation, which it owns; the
        // advice changes how its pages are backed, not their contents or mapping (a
        // refusal is ignored).
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
    arena
}

/// Calls `progress` with the bytes scanned since `reported` once they are many.
fn report(reported: &mut usize, at: usize, progress: &(dyn Fn(u64) + Sync)) {
    if at - *reported >= PROGRESS_STEP {
        progress((at - *reported) as u64);
        *reported = at;
    }
}

/// Parses sample `i` of `texts` (callers parse on threads of their own, each with its
/// `tokens`): the sample with its count sum and occurrences, LBR entries without flags, or
/// `None` when it is dropped; what parsing dropped is added to `stats` (per occurrence, as
/// the sequential reader counts it).
pub fn parse_tallied_one(
    texts: &TalliedTexts,
    i: usize,
    script_type: PerfScriptType,
    tokens: &mut EntryTokenCache,
    stats: &mut PerfScriptStats,
) -> Option<TalliedSample> {
    let mut sample = Sample::default();
    let occurrences = parse_tallied_into(texts, i, script_type, tokens, stats, &mut sample)?;
    Some(TalliedSample {
        sample,
        occurrences,
    })
}

/// [`parse_tallied_one`] into `sample`, whose buffers are reused (a parsing thread's
/// samples then cost no allocation): its occurrences, or `None` when it is dropped (then
/// `sample` holds nothing of use).
pub fn parse_tallied_into(
    texts: &TalliedTexts,
    i: usize,
    script_type: PerfScriptType,
    tokens: &mut EntryTokenCache,
    stats: &mut PerfScriptStats,
    sample: &mut Sample,
) -> Option<u64> {
    let text = texts.text(i);
    let occurrences = texts.texts[i].occurrences;
    let verdict = text.parse_into(script_type, tokens, sample);
    stats.dropped_samples += verdict.dropped * occurrences;
    stats.invalid_lbr_records += verdict.invalid_lbr_records * occurrences;
    if !verdict.kept {
        return None;
    }
    for e in &mut sample.lbr {
        e.flags = 0;
    }
    sample.count = text.count;
    Some(occurrences)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_script::{tally_script_parts, PerfScriptReader, ScriptText};
    use crate::PerfEvent;

    /// The `VmFlags` of the mapping of this process that holds `address` (`None` when
    /// `/proc/self/smaps` does not say).
    fn vm_flags(address: usize) -> Option<String> {
        crate::perf_script::smaps_field(|(from, to), _| (from..to).contains(&address), "VmFlags:")
    }

    /// The arena's whole huge pages are marked for transparent huge pages (`hg`), on a
    /// kernel that has them and says so.
    #[test]
    fn the_compact_arena_asks_for_huge_pages() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            return;
        }
        let mut arena = compact_arena(8 << 20);
        let first_huge_page = (arena.as_mut_ptr() as usize).next_multiple_of(2 << 20);
        let Some(flags) = vm_flags(first_huge_page) else {
            return;
        };
        assert!(flags.split_whitespace().any(|f| f == "hg"), "{flags}");
    }

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
    /// distinct samples fill them (none is grown by copying): every text stays where it
    /// was written and reads as the reader reads it. A piece closed by an MMAP line keeps
    /// no spare room. (Each piece has more distinct samples than a window of probes: its
    /// texts are made compact once the memo has told that it does not repeat.)
    #[test]
    fn a_piece_adds_arenas_as_it_fills() {
        // 5,000 distinct samples of 43 compact bytes: 215 KB, past 4 + 16 + 64 KiB.
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
        // The chunk's first arena (a quarter of the chunk) did not hold them all: the last
        // one added is shrunk to its texts.
        let first_sizes = sizes(first);
        let used: usize = first_sizes.iter().map(|&(_, len)| len).sum();
        assert_eq!((first_sizes.len(), used), (2, 5000 * 43));
        assert_eq!(first_sizes[1].0, first_sizes[1].1, "shrunk to its texts");
        assert!(!first.keeps_script() && !last.keeps_script());
        let used: usize = sizes(last).iter().map(|&(_, len)| len).sum();
        assert_eq!((last.len(), used), (5000, 5000 * 43));
        let capacities: Vec<usize> = sizes(last).iter().map(|&(c, _)| c).collect();
        assert_eq!(capacities, [4 << 10, 16 << 10, 64 << 10, 256 << 10]);
        let (pieces, stats) = tally.parse_all();
        assert_eq!(folded(pieces), expected);
        assert_eq!(stats, expected_stats);
        // Four times the last, from the first arena's size up to the largest's, and never
        // less than the text needs.
        assert_eq!(next_arena_capacity(None, 100), FIRST_ARENA);
        assert_eq!(next_arena_capacity(None, 10_000), 10_000);
        assert_eq!(next_arena_capacity(Some(1 << 20), 100), 4 << 20);
        assert_eq!(next_arena_capacity(Some(48 << 20), 100), LARGEST_ARENA);
        assert_eq!(next_arena_capacity(Some(usize::MAX), 100), LARGEST_ARENA);
        assert_eq!(next_arena_capacity(Some(64 << 20), 100 << 20), 100 << 20);
    }

    /// `file` read as one part ([`tally_script_parts`] without a bound), as
    /// `convert` reads a script that holds less than the bound.
    fn one_part(file: &ScriptText, threads: usize) -> Result<ScriptTally<'_>, PerfScriptError> {
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
            if threads == 1 {
                // With more threads, how the scans share the text depends on timing, and
                // with it which texts are kept in place: compared once parsed.
                assert_eq!(read, expected);
            }
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

    /// Once a stretch has repeated its blocks for a whole window of probes, its new texts
    /// are kept in place in the script, not made compact: they read as the reader reads
    /// them, and texts differing in their flags only are then two texts of one sample.
    #[test]
    fn texts_of_a_repeating_stretch_are_kept_in_place() {
        let repeated = "\n\t 10\n\t 20\n 0x1/0x2/P/-/-/0  0x3/0x4/M/-/-/7\n";
        let mut text = repeated.repeat(2 * WINDOW_OF_PROBES);
        for i in 0..50u64 {
            // Two occurrences of each new sample, with other flags the second time.
            for flags in ["P/-/-/0", "M/-/-/3"] {
                text += &format!(
                    "\n\t {:x}\n 0x{:x}/0x2/{flags}  0x3/0x4/P/-/-/1\n",
                    0x100 + i,
                    0x500 + i
                );
            }
        }
        let (expected, expected_stats) = folded_reader_events(text.as_bytes());
        for threads in [1, 2] {
            let tally = tally_samples(text.as_bytes(), "t", threads, &|_| {}).unwrap();
            let (pieces, stats) = tally.parse_all();
            assert_eq!(folded(pieces), expected, "{threads} threads");
            assert_eq!(stats, expected_stats, "{threads} threads");
            assert_eq!(tally.sample_texts, 2 * WINDOW_OF_PROBES as u64 + 100);
            let [ScriptPiece::Texts(texts)] = &tally.pieces[..] else {
                panic!("{:?}", tally.pieces)
            };
            if threads > 1 {
                // Where the windows end depends on where the text was cut; the second
                // range's window ends among the new samples, which the parse above read
                // from the script after the cut.
                assert!(texts.keeps_script(), "{texts:?}");
                continue;
            }
            let in_place: Vec<&TalliedText> = texts
                .texts
                .iter()
                .filter(|t| t.arena == IN_SCRIPT)
                .collect();
            // The first sample (read before any window ended: in place too) and 100 new
            // texts.
            assert_eq!(
                (texts.len(), in_place.len()),
                (101, 101),
                "{threads} threads"
            );
            let last = texts.text(100);
            assert_eq!(last.block, b"\t 131\n 0x531/0x2/M/-/-/3  0x3/0x4/P/-/-/1");
            assert_eq!(last.lbr_line(), b" 0x531/0x2/M/-/-/3  0x3/0x4/P/-/-/1");
            assert_eq!((last.count, texts.texts[100].occurrences), (1, 1));
        }
        // Such a tally keeps its borrow of the script; one with compact texts only does not.
        let tally = tally_samples(text.as_bytes(), "t", 1, &|_| {}).unwrap();
        assert!(tally.keeps_script());
        // Distinct samples only: made compact once the memo has told so.
        let distinct: String = (0..WINDOW_OF_PROBES as u64 + 10)
            .map(|i| {
                format!(
                    "\n\t {:x}\n 0x{:x}/0x2/P/-/-/0  0x3/0x4/P/-/-/0\n",
                    0xa000 + i,
                    0x10_0000 + i
                )
            })
            .collect();
        let tally = tally_samples(distinct.as_bytes(), "t", 1, &|_| {}).unwrap();
        assert!(!tally.keeps_script());
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

    /// A stretch shorter than a window of probes (here between MMAP lines) is settled at
    /// its end: made compact when its probes found fewer than one block in eight, kept in
    /// place when they found more.
    #[test]
    fn short_stretches_are_settled_at_their_end() {
        let distinct: String = (0..100u64)
            .map(|i| {
                format!(
                    "\t {:x}\n 0x{:x}/0x2/P/-/-/0  0x3/0x4/M/-/-/7\n\n",
                    0xa000 + i,
                    0x100 + i
                )
            })
            .collect();
        let repeated = "\t b000\n 0x1/0x2/P/-/-/0  0x3/0x4/P/-/-/0\n\n".repeat(100);
        let text = format!("{MMAP}{distinct}{MMAP}{repeated}");
        let (expected, expected_stats) = folded_reader_events(text.as_bytes());
        let tally = tally_samples(text.as_bytes(), "t", 1, &|_| {}).unwrap();
        let [ScriptPiece::Mmap(_), ScriptPiece::Texts(short), ScriptPiece::Mmap(_), ScriptPiece::Texts(repeating)] =
            &tally.pieces[..]
        else {
            panic!("{:?}", tally.pieces)
        };
        assert!(!short.keeps_script(), "made compact");
        assert_eq!(short.len(), 100);
        assert_eq!(short.text(7).block, b"\t a007\n 0x107/0x2  0x3/0x4");
        assert!(repeating.keeps_script(), "kept in place");
        assert_eq!((repeating.len(), repeating.texts[0].occurrences), (1, 100));
        let (pieces, stats) = tally.parse_all();
        assert_eq!(folded(pieces), expected);
        assert_eq!(stats, expected_stats);
    }

    /// Once the memo has told that the stretch does not repeat its blocks (a window of
    /// distinct samples), texts are made compact and those differing in their flags only
    /// are one text. The texts kept in place until then are made compact where they are:
    /// two of them differing in their flags only stay two texts (parsed to equal samples),
    /// and a later occurrence finds its text among them by its compact bytes.
    #[test]
    fn texts_differing_in_flags_only_are_one_sample() {
        let n = WINDOW_OF_PROBES as u64;
        let distinct =
            |i: u64, flags: &str| format!("\t {:x}\n 0x{:x}/0x2/{flags}\n\n", 0xa000 + i, i);
        let early = "\t 30\n 0x7/0x8/P/-/-/1\n\n\t 30\n 0x7/0x8/M/-/-/2\n\n";
        let window: String = (0..n).map(|i| distinct(i, "P/-/-/1")).collect();
        let late = "\t 10\n 0x1/0x2/P/-/-/1  0x3/0x4/P/-/-/7\n\n\t 10\n 0x1/0x2/M/-/-/9  0x3/0x4/-/X/-/2/COND\n\n\t 10\n 0x1/0x2 0x3/0x4\n\n";
        let text = format!("{early}{window}{late}{}", distinct(5, "M/-/-/4"));
        let tally = tally_samples(text.as_bytes(), "t", 1, &|_| {}).unwrap();
        assert_eq!((tally.sample_texts, tally.distinct_texts), (n + 6, n + 4));
        let [ScriptPiece::Texts(texts)] = &tally.pieces[..] else {
            panic!("{:?}", tally.pieces)
        };
        assert!(!texts.keeps_script(), "every text made compact");
        assert_eq!(texts.text(0).block, b"\t 30\n 0x7/0x8");
        assert_eq!(texts.text(1).block, texts.text(0).block);
        let (pieces, _) = tally.parse_all();
        let [ParsedPiece::Samples(s)] = &pieces[..] else {
            panic!("{pieces:?}")
        };
        assert_eq!(
            (s[0].sample.clone(), s[0].occurrences),
            (s[1].sample.clone(), 1)
        );
        // Sample 5 of the window, again with other flags after the window.
        assert_eq!(s[2 + 5].occurrences, 2);
        let late = &s[s.len() - 2..];
        assert_eq!((late[0].sample.count, late[0].occurrences), (2, 2));
        // Spaces are kept: one space between the entries makes another text, the same sample.
        assert_eq!(
            late[1].sample,
            Sample {
                count: 1,
                ..late[0].sample.clone()
            }
        );
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

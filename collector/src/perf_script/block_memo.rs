//! [`BlockMemo`]: the blocks of text a scan has already cut into units, so that a block
//! seen again is counted without splitting its lines again.
//!
//! A block runs from the top of the reading loop through the newline of the first line
//! starting with `" 0x"` at or after it: for a hybrid script the blank line before a
//! sample, its count line, its stack lines and its branch-stack line. The units of a block
//! depend only on its bytes (every decision of [`super::unit::UnitCursor`] looks at lines
//! inside it), so a block made of blank lines and one sample that ends exactly at the
//! block's end gives, whenever the same bytes come again at the top of the loop, the same
//! sample with the same count over the same number of lines. Only such blocks are kept.
//!
//! A recorder's or a steady program's samples repeat, and most blocks are then found here
//! at the cost of a hash ([`super::text_hash`]) and a comparison; samples with hardware
//! cycle counts hardly ever repeat their text, so the memo switches itself off while it
//! finds too little ([`BlockMemo::probe`]) and looks again now and then.

use hashbrown::HashTable;

/// Longest stretch searched for a block's branch-stack line, and longest branch-stack
/// line searched for its end: a block longer than that is read unit by unit. Bounds the
/// search at every position of a long stretch that holds no branch-stack line.
const MAX_SEARCH: usize = 16 << 10;

/// Block probes between two decisions whether probing pays.
const WINDOW: u32 = 4096;
/// [`WINDOW`], for the tally's tests.
#[cfg(test)]
pub(crate) const WINDOW_OF_PROBES: usize = WINDOW as usize;
/// While switched off, one block in this many is still probed (and remembered).
const SPARSE: u32 = 64;

/// A block at some position: where it ends and its hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    /// One past its last newline.
    pub end: usize,
    hash: u64,
}

/// What a remembered block gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlockUnits {
    /// The sample (an index chosen by the caller).
    pub sample: usize,
    /// Its count line's count, else 1.
    pub count: u64,
    /// Lines in the block.
    pub lines: u64,
}

/// A block read before: its bytes, their hash and what they gave.
struct Remembered<'a> {
    bytes: &'a [u8],
    hash: u64,
    units: BlockUnits,
}

/// Blocks already read, by their bytes.
pub(crate) struct BlockMemo<'a> {
    /// Held in the table itself: a lookup then waits on memory for the table's control
    /// bytes, the entry and the remembered bytes, not also a vector of entries.
    blocks: HashTable<Remembered<'a>>,
    finder: memchr::memmem::Finder<'static>,
    on: bool,
    /// The last whole window of probes (switched on) found its blocks often enough.
    repeats: bool,
    tries: u32,
    hits: u32,
    /// Positions passed while switched off.
    passed: u32,
}

impl<'a> BlockMemo<'a> {
    pub(crate) fn new() -> BlockMemo<'a> {
        BlockMemo {
            blocks: HashTable::new(),
            finder: memchr::memmem::Finder::new(b"\n 0x"),
            on: true,
            repeats: false,
            tries: 0,
            hits: 0,
            passed: 0,
        }
    }

    /// The block of `text` at `pos` (the top of the reading loop), or `None` when there is
    /// none within reach or the memo is not probing this position.
    pub(crate) fn probe(&mut self, text: &'a [u8], pos: usize) -> Option<Block> {
        if !self.on {
            self.passed += 1;
            if !self.passed.is_multiple_of(SPARSE) {
                return None;
            }
        }
        let rest = &text[pos..];
        let lbr = if rest.starts_with(b" 0x") {
            Some(0)
        } else {
            self.finder
                .find(&rest[..rest.len().min(MAX_SEARCH)])
                .map(|n| n + 1)
        };
        let newline = lbr.and_then(|lbr| {
            let line = &rest[lbr..];
            memchr::memchr(b'\n', &line[..line.len().min(MAX_SEARCH)]).map(|n| lbr + n)
        });
        let Some(newline) = newline else {
            // No block within reach counts as a probe that found nothing: text without
            // blocks (an LBR-only script whose lines start with an IP) switches probing off.
            self.count(false);
            return None;
        };
        let end = pos + newline + 1;
        Some(Block {
            end,
            hash: super::text_hash::text_hash(&text[pos..end]),
        })
    }

    /// Whether the text repeats its blocks: the last whole window of probes found at least
    /// one in eight (false until one has; a window of sparse probes, while switched off,
    /// only switches probing back on).
    pub(crate) fn finds_repeats(&self) -> bool {
        self.repeats
    }

    /// Counts a probe, and decides at the end of a window whether probing pays.
    fn count(&mut self, hit: bool) {
        self.tries += 1;
        self.hits += u32::from(hit);
        if self.tries == if self.on { WINDOW } else { WINDOW / SPARSE } {
            // On while at least one probe in eight finds its block.
            let found = self.hits * 8 >= self.tries;
            self.repeats = self.on && found;
            self.on = found;
            self.tries = 0;
            self.hits = 0;
        }
    }

    /// What the block `text[pos..block.end]` gave when it was read before.
    pub(crate) fn find(&mut self, text: &[u8], pos: usize, block: Block) -> Option<BlockUnits> {
        let bytes = &text[pos..block.end];
        let found = self
            .blocks
            .find(block.hash, |r| r.hash == block.hash && r.bytes == bytes)
            .map(|r| r.units);
        self.count(found.is_some());
        found
    }

    /// Remembers that `text[pos..block.end]` gave `units`.
    pub(crate) fn remember(&mut self, text: &'a [u8], pos: usize, block: Block, units: BlockUnits) {
        let remembered = Remembered {
            bytes: &text[pos..block.end],
            hash: block.hash,
            units,
        };
        self.blocks
            .insert_unique(block.hash, remembered, |r| r.hash);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_end_after_the_first_branch_stack_line() {
        let text = b"\n3\n\t 10\n 0x1/0x2\n\n\t 20\n 0x3/0x4\n 0x5";
        let mut memo = BlockMemo::new();
        let a = memo.probe(text, 0).unwrap();
        assert_eq!(&text[..a.end], b"\n3\n\t 10\n 0x1/0x2\n");
        let b = memo.probe(text, a.end).unwrap();
        assert_eq!(&text[a.end..b.end], b"\n\t 20\n 0x3/0x4\n");
        // A branch-stack line at the position itself; one without its newline is no block.
        assert_eq!(memo.probe(text, b.end), None);
        assert_eq!(memo.probe(b" 0x1\n", 0).map(|b| b.end), Some(5));
    }

    /// A whole window of probes that find their blocks says the text repeats; a window of
    /// misses takes it back.
    #[test]
    fn repeats_are_told_after_a_window_of_hits() {
        let text = b"\t 10\n 0x1/0x2\n";
        let mut memo = BlockMemo::new();
        let block = memo.probe(text, 0).unwrap();
        assert_eq!(memo.find(text, 0, block), None);
        let units = BlockUnits {
            sample: 0,
            count: 1,
            lines: 2,
        };
        memo.remember(text, 0, block, units);
        for _ in 1..WINDOW {
            assert!(!memo.finds_repeats());
            assert_eq!(memo.find(text, 0, block), Some(units));
        }
        assert!(memo.finds_repeats());
        let other = b"\t 11\n 0x1/0x2\n";
        let miss = memo.probe(other, 0).unwrap();
        for _ in 0..WINDOW {
            assert!(memo.finds_repeats());
            assert_eq!(memo.find(other, 0, miss), None);
        }
        assert!(!memo.finds_repeats());
        assert!(!memo.on);
        // Switched back on by a window of sparse probes that hit: that is no whole window.
        for _ in 0..WINDOW {
            if let Some(block) = memo.probe(text, 0) {
                assert_eq!(memo.find(text, 0, block), Some(units));
            }
        }
        assert!(memo.on && !memo.finds_repeats());
    }

    #[test]
    fn found_by_bytes_and_switched_off_when_nothing_repeats() {
        let text = b"\t 10\n 0x1/0x2\n\t 10\n 0x1/0x2\n\t 11\n 0x1/0x2\n";
        let mut memo = BlockMemo::new();
        let a = memo.probe(text, 0).unwrap();
        assert_eq!(memo.find(text, 0, a), None);
        let units = BlockUnits {
            sample: 7,
            count: 1,
            lines: 2,
        };
        memo.remember(text, 0, a, units);
        let b = memo.probe(text, a.end).unwrap();
        assert_eq!(memo.find(text, a.end, b), Some(units));
        let c = memo.probe(text, b.end).unwrap();
        assert_eq!(memo.find(text, b.end, c), None, "one byte differs");
        // A window of misses switches probing off but for one position in SPARSE.
        let mut memo = BlockMemo::new();
        for _ in 0..WINDOW {
            let block = memo.probe(text, b.end).unwrap();
            assert_eq!(memo.find(text, b.end, block), None);
        }
        assert!(!memo.finds_repeats());
        let probed = (0..SPARSE * 2)
            .filter(|_| memo.probe(text, 0).is_some())
            .count();
        assert_eq!(probed, 2);
        // Text with no block anywhere switches probing off too.
        let lines = b"40062f 0x1/0x2\n".repeat(10);
        let mut memo = BlockMemo::new();
        for _ in 0..WINDOW {
            assert_eq!(memo.probe(&lines, 0), None);
        }
        assert!(!memo.on);
    }
}

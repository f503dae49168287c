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
//!
//! Repeating samples also tend to come in the same order (a program's loop goes through
//! the same code again), so each remembered block keeps the block that followed it last
//! time, and that one is tried first ([`BlockMemo::predict`]): a comparison of its bytes
//! with the text finds the block without searching for its end, hashing it or looking it
//! up (on the convert benchmark's recording, 3 blocks in 4 are found so).

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

/// A block read before: its bytes, what they gave and the block after it.
struct Remembered<'a> {
    /// The bytes where they were last read: a block compared with the text is near the
    /// reader when it repeats often, so the pages it reads again are mostly resident
    /// ([`super::text::ReadPages`] gives back those far behind).
    bytes: &'a [u8],
    units: BlockUnits,
    /// The block that came right after it the last time it was read ([`NO_BLOCK`]: none
    /// known).
    next: u32,
}

/// No block, in [`Remembered::next`] and [`BlockMemo::last`].
const NO_BLOCK: u32 = u32::MAX;

/// A block in the memo's hash table: its hash and where it is in `blocks` (the table
/// holds the hash so that a lookup compares bytes only for an equal hash).
#[derive(Clone, Copy)]
struct BlockSlot {
    hash: u64,
    block: u32,
}

/// Blocks already read, by their bytes.
pub(crate) struct BlockMemo<'a> {
    blocks: Vec<Remembered<'a>>,
    index: HashTable<BlockSlot>,
    /// The block just read, when it is one of `blocks` ([`NO_BLOCK`] otherwise).
    last: u32,
    finder: memchr::memmem::Finder<'static>,
    on: bool,
    tries: u32,
    hits: u32,
    /// Positions passed while switched off.
    passed: u32,
}

impl<'a> BlockMemo<'a> {
    pub(crate) fn new() -> BlockMemo<'a> {
        BlockMemo {
            blocks: Vec::new(),
            index: HashTable::new(),
            last: NO_BLOCK,
            finder: memchr::memmem::Finder::new(b"\n 0x"),
            on: true,
            tries: 0,
            hits: 0,
            passed: 0,
        }
    }

    /// The block that followed the last one read the last time, when `text` has it at
    /// `pos` (the top of the reading loop): where it ends and what it gave. The bytes are
    /// compared, so the block is exactly the one remembered.
    pub(crate) fn predict(&mut self, text: &'a [u8], pos: usize) -> Option<(usize, BlockUnits)> {
        if !self.on || self.last == NO_BLOCK {
            return None;
        }
        let next = self.blocks[self.last as usize].next;
        let r = self.blocks.get(next as usize)?;
        if !text[pos..].starts_with(r.bytes) {
            return None;
        }
        let found = (pos + r.bytes.len(), r.units);
        self.blocks[next as usize].bytes = &text[pos..found.0];
        self.last = next;
        self.count(true);
        Some(found)
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

    /// Counts a probe, and decides at the end of a window whether probing pays.
    fn count(&mut self, hit: bool) {
        self.tries += 1;
        self.hits += u32::from(hit);
        if self.tries == if self.on { WINDOW } else { WINDOW / SPARSE } {
            // On while at least one probe in eight finds its block.
            self.on = self.hits * 8 >= self.tries;
            self.tries = 0;
            self.hits = 0;
        }
    }

    /// What the block `text[pos..block.end]` gave when it was read before.
    pub(crate) fn find(&mut self, text: &'a [u8], pos: usize, block: Block) -> Option<BlockUnits> {
        let bytes = &text[pos..block.end];
        let blocks = &self.blocks;
        let found = self
            .index
            .find(block.hash, |s| {
                s.hash == block.hash && blocks[s.block as usize].bytes == bytes
            })
            .map(|s| s.block);
        self.count(found.is_some());
        let found = found?;
        self.blocks[found as usize].bytes = bytes;
        self.follow(found);
        Some(self.blocks[found as usize].units)
    }

    /// Remembers that `text[pos..block.end]` gave `units`.
    pub(crate) fn remember(&mut self, text: &'a [u8], pos: usize, block: Block, units: BlockUnits) {
        let Ok(new) = u32::try_from(self.blocks.len()) else {
            return;
        };
        self.blocks.push(Remembered {
            bytes: &text[pos..block.end],
            units,
            next: NO_BLOCK,
        });
        let slot = BlockSlot {
            hash: block.hash,
            block: new,
        };
        self.index.insert_unique(block.hash, slot, |s| s.hash);
        self.follow(new);
    }

    /// The block just read is not one remembered: the next one is not predicted.
    pub(crate) fn lose_track(&mut self) {
        self.last = NO_BLOCK;
    }

    /// `block` was just read: it follows the last one read.
    fn follow(&mut self, block: u32) {
        if let Some(last) = self.blocks.get_mut(self.last as usize) {
            last.next = block;
        }
        self.last = block;
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

    /// A window of probes that find their blocks keeps probing on; a window of misses
    /// switches it off, and a window of sparse probes that hit switches it back on.
    #[test]
    fn probing_stays_on_while_blocks_are_found() {
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
        for _ in 1..2 * WINDOW {
            assert_eq!(memo.find(text, 0, block), Some(units));
        }
        assert!(memo.on);
        let other = b"\t 11\n 0x1/0x2\n";
        let miss = memo.probe(other, 0).unwrap();
        for _ in 0..WINDOW - 1 {
            assert_eq!(memo.find(other, 0, miss), None);
            assert!(memo.on);
        }
        assert_eq!(memo.find(other, 0, miss), None);
        assert!(!memo.on);
        for _ in 0..WINDOW {
            if let Some(block) = memo.probe(text, 0) {
                assert_eq!(memo.find(text, 0, block), Some(units));
            }
        }
        assert!(memo.on);
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
        assert!(!memo.on);
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

    /// The block that followed a block last time is tried first, and found only with
    /// its exact bytes; a block not remembered breaks the chain.
    #[test]
    fn the_block_after_the_last_one_is_predicted_by_its_bytes() {
        let (a, b) = (&b"\t 10\n 0x1/0x2\n"[..], &b"\t 20\n 0x3/0x4\n"[..]);
        let text = [a, b, a, b, a, &b"\t 20\n 0x3/0x5\n"[..], a, b].concat();
        let units = |sample| BlockUnits {
            sample,
            count: 1,
            lines: 2,
        };
        let mut memo = BlockMemo::new();
        let mut pos = 0;
        // A and B are new; nothing is predicted before any block is known.
        for sample in [0, 1] {
            assert_eq!(memo.predict(&text, pos), None);
            let block = memo.probe(&text, pos).unwrap();
            assert_eq!(memo.find(&text, pos, block), None);
            memo.remember(&text, pos, block, units(sample));
            pos = block.end;
        }
        // A again: found by its hash (B's successor is not known yet), then B predicted.
        assert_eq!(memo.predict(&text, pos), None);
        let block = memo.probe(&text, pos).unwrap();
        assert_eq!(memo.find(&text, pos, block), Some(units(0)));
        pos = block.end;
        assert_eq!(memo.predict(&text, pos), Some((pos + b.len(), units(1))));
        pos += b.len();
        // A predicted after B; then a block differing from B in its last digit is not B.
        assert_eq!(memo.predict(&text, pos), Some((pos + a.len(), units(0))));
        pos += a.len();
        assert_eq!(memo.predict(&text, pos), None);
        // Read unit by unit and not remembered: the next A is not predicted.
        memo.lose_track();
        pos += b.len();
        assert_eq!(memo.predict(&text, pos), None);
        let block = memo.probe(&text, pos).unwrap();
        assert_eq!(memo.find(&text, pos, block), Some(units(0)));
        pos = block.end;
        // B cut short at the end of a text is not B; whole, it is predicted again.
        assert_eq!(memo.predict(&text[..text.len() - 1], pos), None);
        assert_eq!(memo.predict(&text, pos), Some((text.len(), units(1))));
        // Switched off, the memo predicts nothing.
        memo.on = false;
        assert_eq!(memo.predict(&text, pos), None);
    }
}

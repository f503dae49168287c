//! `HeldSamples`: a live binary's LBR samples, tallied from feed to feed until they are
//! counted.
//!
//! A program takes the same branches again and again, so hardware LBR samples repeat
//! exactly (cycle counts aside) — but seldom within the few hundred samples of one feed.
//! Held across feeds in a [`SampleTally`], each distinct sample is prepared and unwound
//! once for all its occurrences when the shard counts them
//! ([`crate::shard::BinaryShard::settle`], a feed from a process that maps the binary
//! elsewhere, a feed in the next window, or past [`MAX_HELD_BYTES`]). Counting is a sum
//! over samples, so the counters are those of counting each feed on its own.

use collector::Mmap2Event;

use crate::sample_tally::SampleTally;
use crate::BinaryPlacement;

/// Most bytes of held samples per binary (about 5,000 distinct samples of 32 LBR
/// entries and a dozen frames); the shard counts them past it. The worker's memory
/// budget counts them ([`crate::shard::BinaryShard::approx_bytes`]) and has every shard
/// count its held samples when the budget is exceeded.
pub const MAX_HELD_BYTES: usize = 4 << 20;

/// The distinct samples a held tally has room for when it is made: about what
/// [`MAX_HELD_BYTES`] holds of LBR samples, so that filling it never grows (copies) its
/// entries or rehashes its index in the middle of a feed. Reserved, not written: the
/// pages cost memory as the entries fill them.
pub const HELD_ENTRY_ROOM: usize = MAX_HELD_BYTES / 640;

/// Samples of one binary held, all placed by the same mappings and in the same window.
pub(crate) struct HeldSamples {
    /// The window the samples fall in.
    pub window: u64,
    /// The mappings of the binary in the process the samples came from, sorted by file
    /// offset.
    pub mappings: Vec<Mmap2Event>,
    /// Where those mappings place the binary (what the repair witness reads and the
    /// samples are counted with).
    pub placement: BinaryPlacement,
    /// The samples.
    pub tally: SampleTally,
}

impl HeldSamples {
    /// True when `mappings` (sorted by file offset) place the binary as the held samples'
    /// do: the same addresses, lengths, offsets, protections and files, in the same
    /// process when `by_process` (a process filter applies).
    pub fn placed_alike(&self, mappings: &[&Mmap2Event], by_process: bool) -> bool {
        self.mappings.len() == mappings.len()
            && self.mappings.iter().zip(mappings).all(|(a, b)| {
                (!by_process || a.pid == b.pid)
                    && a.addr == b.addr
                    && a.len == b.len
                    && a.pgoff == b.pgoff
                    && a.prot == b.prot
                    && a.build_id == b.build_id
                    && a.filename == b.filename
            })
    }

    /// True when the held samples take more than [`MAX_HELD_BYTES`].
    pub fn is_full(&self) -> bool {
        self.tally.approx_bytes() > MAX_HELD_BYTES
    }
}

//! [`LbrRing`]: the last D taken branches, as the LBR MSR stack holds them.

use std::collections::VecDeque;

use collector::LbrEntry;

/// The largest LBR depth real hardware offers (Arch LBR: 32 entries).
pub const MAX_LBR_DEPTH: usize = 32;

/// `perf_branch_entry.flags` for every recorded branch: bit 1 (`predicted`) set, cycles 0,
/// type 0 — what Intel LBR reports through `perf record -b` for a correctly predicted branch
/// when no cycle count or branch type is requested.
pub const PREDICTED_FLAGS: u64 = 1 << 1;

/// A ring of the most recent taken branches; the oldest falls out when a new one arrives
/// and the ring is full.
#[derive(Clone, Debug)]
pub struct LbrRing {
    depth: usize,
    entries: VecDeque<LbrEntry>,
}

impl LbrRing {
    /// An empty ring holding at most `depth` branches.
    pub fn new(depth: usize) -> LbrRing {
        LbrRing {
            depth,
            entries: VecDeque::with_capacity(depth),
        }
    }

    /// Records a taken branch `from` → `to`.
    pub fn push(&mut self, from: u64, to: u64) {
        if self.depth == 0 {
            return;
        }
        if self.entries.len() == self.depth {
            self.entries.pop_back();
        }
        self.entries.push_front(LbrEntry {
            from,
            to,
            flags: PREDICTED_FLAGS,
        });
    }

    /// The branches newest first, as `PERF_SAMPLE_BRANCH_STACK` lists them.
    pub fn snapshot(&self) -> Vec<LbrEntry> {
        self.entries.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_depth_entries_newest_first() {
        let mut ring = LbrRing::new(3);
        assert!(ring.snapshot().is_empty());
        for i in 1..=5u64 {
            ring.push(i * 0x10, i * 0x10 + 1);
        }
        let froms: Vec<u64> = ring.snapshot().iter().map(|e| e.from).collect();
        assert_eq!(froms, vec![0x50, 0x40, 0x30]);
        assert_eq!(ring.snapshot()[0].to, 0x51);
        assert!(ring
            .snapshot()
            .iter()
            .all(|e| e.flags == 2 && e.predicted() && !e.mispredicted()));
    }
}

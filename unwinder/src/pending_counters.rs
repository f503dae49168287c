//! [`PendingCounters`]: the ranges and branches one sample leaves on the frames of a
//! [`FrameTrie`](crate::frame_trie::FrameTrie) until the unwinder hands them to the counter
//! table.
//!
//! Two lists for the whole sample, each entry naming its frame, in the order the replay
//! adds them: adding is a push onto memory the previous addition touched (a list per frame
//! would be a lookup of the frame's list and a load of its end for every entry). Their
//! buffers are reused from sample to sample.

use crate::frame_trie::FrameId;

/// `((frame, first, second), count)`: a fall-through range `(start, end)` or a branch
/// `(source, target)` on a frame, and how many times it was taken.
pub type FrameCounted = ((FrameId, u64, u64), u64);

/// The counters the current sample left, in the order they were added.
#[derive(Debug, Default)]
pub struct PendingCounters {
    /// `(frame, start, end, count)` fall-through ranges.
    ranges: Vec<FrameCounted>,
    /// `(frame, source, target, count)` branches.
    branches: Vec<FrameCounted>,
}

impl PendingCounters {
    /// Records the fall-through range `[start, end]` on frame `id`, taken `count` times.
    #[inline]
    pub fn add_range(&mut self, id: FrameId, start: u64, end: u64, count: u64) {
        add_or_push(&mut self.ranges, (id, start, end), count);
    }

    /// Records the branch `source -> target` on frame `id`, taken `count` times.
    #[inline]
    pub fn add_branch(&mut self, id: FrameId, source: u64, target: u64, count: u64) {
        add_or_push(&mut self.branches, (id, source, target), count);
    }

    /// The ranges, in the order they were added.
    pub fn ranges(&self) -> &[FrameCounted] {
        &self.ranges
    }

    /// The branches, in the order they were added.
    pub fn branches(&self) -> &[FrameCounted] {
        &self.branches
    }

    /// Orders the counters by frame (each frame's in the order they were added), so that
    /// [`Self::of_sorted`] finds a frame's.
    pub fn sort_by_frame(&mut self) {
        self.ranges.sort_by_key(|e| e.0 .0);
        self.branches.sort_by_key(|e| e.0 .0);
    }

    /// The ranges and branches on frame `id`, after [`Self::sort_by_frame`].
    pub fn of_sorted(&self, id: FrameId) -> (&[FrameCounted], &[FrameCounted]) {
        let of = |list: &[FrameCounted]| -> std::ops::Range<usize> {
            list.partition_point(|e| e.0 .0 < id)..list.partition_point(|e| e.0 .0 <= id)
        };
        let (r, b) = (of(&self.ranges), of(&self.branches));
        (&self.ranges[r], &self.branches[b])
    }

    /// Forgets the sample's counters.
    pub fn clear(&mut self) {
        self.ranges.clear();
        self.branches.clear();
    }
}

/// Adds `count` to the entry of `key` when it is one of the last two of `entries` (a
/// loop in the LBR records the same one or two ranges and branches over and over: summed
/// here, each is counted into the counter table once per sample instead of once per
/// iteration), else appends it. Counts wrap, as the counter table's do.
#[inline]
pub(crate) fn add_or_push<K: Copy + PartialEq>(entries: &mut Vec<(K, u64)>, key: K, count: u64) {
    // The two candidates compared one by one, not through an iterator over a slice of
    // them: this runs twice for every LBR entry of every sample unwound.
    let n = entries.len();
    if n >= 1 && entries[n - 1].0 == key {
        entries[n - 1].1 = entries[n - 1].1.wrapping_add(count);
    } else if n >= 2 && entries[n - 2].0 == key {
        entries[n - 2].1 = entries[n - 2].1.wrapping_add(count);
    } else {
        entries.push((key, count));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_among_the_last_two_is_summed_others_appended() {
        let mut entries = Vec::new();
        // A loop of two branches, then a third, then the first again (no longer among the
        // last two: appended).
        for _ in 0..3 {
            add_or_push(&mut entries, (1, 2), 1);
            add_or_push(&mut entries, (3, 4), 10);
        }
        add_or_push(&mut entries, (5, 6), 100);
        add_or_push(&mut entries, (1, 2), u64::MAX);
        add_or_push(&mut entries, (1, 2), 2);
        assert_eq!(
            entries,
            [((1, 2), 3), ((3, 4), 30), ((5, 6), 100), ((1, 2), 1)]
        );
    }

    #[test]
    fn counters_are_summed_per_frame_and_found_by_frame_once_sorted() {
        let mut p = PendingCounters::default();
        assert!(p.ranges().is_empty() && p.branches().is_empty());
        // A loop on frame 7: the same range and branch again and again, summed.
        for _ in 0..3 {
            p.add_range(7, 1, 2, 1);
            p.add_branch(7, 2, 1, 1);
        }
        // The same range on another frame is another entry; back on frame 7 after two
        // other ranges, appended again.
        p.add_range(3, 1, 2, 5);
        p.add_range(9, 4, 5, 1);
        p.add_range(7, 1, 2, u64::MAX);
        p.add_branch(3, 8, 9, 2);
        assert_eq!(
            p.ranges(),
            [
                ((7, 1, 2), 3),
                ((3, 1, 2), 5),
                ((9, 4, 5), 1),
                ((7, 1, 2), u64::MAX)
            ]
        );
        assert_eq!(p.branches(), [((7, 2, 1), 3), ((3, 8, 9), 2)]);
        p.sort_by_frame();
        let (r, b) = p.of_sorted(7);
        assert_eq!(
            r,
            [((7, 1, 2), 3), ((7, 1, 2), u64::MAX)],
            "in the order added"
        );
        assert_eq!(b, [((7, 2, 1), 3)]);
        let (r, b) = p.of_sorted(3);
        assert_eq!((r, b), (&[((3, 1, 2), 5)][..], &[((3, 8, 9), 2)][..]));
        assert_eq!(p.of_sorted(4), (&[][..], &[][..]));
        p.clear();
        assert!(p.ranges().is_empty() && p.branches().is_empty());
    }
}

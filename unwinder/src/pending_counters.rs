//! [`PendingCounters`]: the ranges and branches one sample leaves on the frames of a
//! [`FrameTrie`] until the unwinder hands them to the counter table.
//!
//! They live here, not in the frames: a kept trie holds up to tens of thousands of frames
//! and a sample touches a few dozen, so the lists are as many as the frames one sample
//! touches and their buffers are reused from sample to sample.

use crate::frame_trie::{FrameId, FrameTrie, NO_PENDING};

/// `(first, second, count)`: a fall-through range `(start, end)` or a branch
/// `(source, target)` and how many times it was taken.
pub type Counted = (u64, u64, u64);

/// The counters of one frame.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrameCounters {
    /// `(start, end, count)` fall-through ranges.
    pub ranges: Vec<Counted>,
    /// `(source, target, count)` branches.
    pub branches: Vec<Counted>,
}

impl FrameCounters {
    /// Records the fall-through range `[start, end]` taken `count` times.
    #[inline]
    pub fn add_range(&mut self, start: u64, end: u64, count: u64) {
        add_or_push(&mut self.ranges, start, end, count);
    }

    /// Records the branch `source -> target` taken `count` times.
    #[inline]
    pub fn add_branch(&mut self, source: u64, target: u64, count: u64) {
        add_or_push(&mut self.branches, source, target, count);
    }
}

/// The counters the current sample left, per touched frame, in the order the frames were
/// first touched. Each touched frame's [`crate::frame_trie::Frame::pending`] indexes them.
#[derive(Debug, Default)]
pub struct PendingCounters {
    /// The touched frames; `lists[k]` belongs to `touched[k]`.
    touched: Vec<FrameId>,
    /// At least as many as `touched` (the rest keep their buffers).
    lists: Vec<FrameCounters>,
}

impl PendingCounters {
    /// The counters of frame `id` of `trie`, made (empty) when the sample has none there.
    #[inline]
    pub fn of_mut(&mut self, trie: &mut FrameTrie, id: FrameId) -> &mut FrameCounters {
        let f = trie.frame_mut(id);
        if f.pending == NO_PENDING {
            let k = self.touched.len();
            f.pending = k as u32;
            self.touched.push(id);
            if self.lists.len() == k {
                self.lists.push(FrameCounters::default());
            }
        }
        &mut self.lists[f.pending as usize]
    }

    /// The counters of frame `id` of `trie`, if the sample left any there.
    #[inline]
    pub fn of(&self, trie: &FrameTrie, id: FrameId) -> Option<&FrameCounters> {
        let k = trie.frame(id).pending;
        (k != NO_PENDING).then(|| &self.lists[k as usize])
    }

    /// The touched frames with their counters, in the order they were first touched.
    pub fn iter(&self) -> impl Iterator<Item = (FrameId, &FrameCounters)> {
        self.touched.iter().copied().zip(&self.lists)
    }

    /// Forgets the sample's counters; `trie` is the trie they were left on (its frames
    /// forget where theirs were).
    pub fn clear(&mut self, trie: &mut FrameTrie) {
        for (k, &id) in self.touched.iter().enumerate() {
            if (id as usize) < trie.len() {
                trie.frame_mut(id).pending = NO_PENDING;
            }
            self.lists[k].ranges.clear();
            self.lists[k].branches.clear();
        }
        self.touched.clear();
    }
}

/// Adds `count` to the entry `(a, b)` when it is one of the last two of `entries` (a loop
/// in the LBR records the same one or two ranges and branches over and over: summed here,
/// each is counted into the counter table once per sample instead of once per
/// iteration), else appends it. Counts wrap, as the counter table's do.
#[inline]
pub(crate) fn add_or_push(entries: &mut Vec<Counted>, a: u64, b: u64, count: u64) {
    let n = entries.len();
    for e in entries[n.saturating_sub(2)..].iter_mut().rev() {
        if e.0 == a && e.1 == b {
            e.2 = e.2.wrapping_add(count);
            return;
        }
    }
    entries.push((a, b, count));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame_trie::ROOT;

    #[test]
    fn an_entry_among_the_last_two_is_summed_others_appended() {
        let mut f = FrameCounters::default();
        // A loop of two branches, then a third, then the first again (no longer among the
        // last two: appended).
        for _ in 0..3 {
            f.add_branch(1, 2, 1);
            f.add_branch(3, 4, 10);
        }
        f.add_branch(5, 6, 100);
        f.add_branch(1, 2, u64::MAX);
        f.add_branch(1, 2, 2);
        assert_eq!(f.branches, [(1, 2, 3), (3, 4, 30), (5, 6, 100), (1, 2, 1)]);
        f.add_range(7, 8, 1);
        f.add_range(7, 9, 1);
        f.add_range(7, 8, 1);
        assert_eq!(f.ranges, [(7, 8, 2), (7, 9, 1)]);
    }

    #[test]
    fn counters_stay_with_their_frames_in_touch_order_until_cleared() {
        let mut t = FrameTrie::new();
        let a = t.child(ROOT, 0x10);
        let b = t.child(a, 0x20);
        let mut p = PendingCounters::default();
        assert_eq!(p.of(&t, a), None);
        p.of_mut(&mut t, b).add_range(1, 2, 3);
        p.of_mut(&mut t, a).add_branch(4, 5, 6);
        p.of_mut(&mut t, b).add_branch(7, 8, 9);
        assert_eq!(p.of(&t, b).unwrap().ranges, [(1, 2, 3)]);
        assert_eq!(p.of(&t, b).unwrap().branches, [(7, 8, 9)]);
        assert_eq!(p.of(&t, a).unwrap().branches, [(4, 5, 6)]);
        assert_eq!(
            p.iter().map(|(id, _)| id).collect::<Vec<_>>(),
            [b, a],
            "first touched first"
        );
        p.clear(&mut t);
        assert_eq!(p.of(&t, a), None);
        assert_eq!(p.of(&t, b), None);
        assert_eq!(p.iter().count(), 0);
        // The next sample starts with empty lists (their buffers reused).
        p.of_mut(&mut t, a).add_range(10, 11, 1);
        assert_eq!(p.of(&t, a).unwrap().ranges, [(10, 11, 1)]);
        assert_eq!(p.of(&t, a).unwrap().branches, []);
    }
}

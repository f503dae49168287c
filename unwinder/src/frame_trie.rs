//! [`FrameTrie`]: llvm-profgen's `ProfiledFrame` trie, in a `Vec` arena.
//!
//! For each aggregated sample the path from the dummy root to the leaf is the sample's call
//! stack; the virtual unwinder then pushes, pops and switches frames while it replays the
//! LBR backwards, and records ranges and branches on frames. A frame's address is "where
//! execution is in that frame": the call instruction for a caller frame. A frame stands for
//! its path from the root, so the unwinder keeps one trie for all its samples (llvm-profgen
//! builds one per sample).

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

/// Index of a frame in its [`FrameTrie`].
pub type FrameId = u32;

/// The dummy root (address 0).
pub const ROOT: FrameId = 0;

/// One frame of the trie.
#[derive(Clone, Debug, Default)]
pub struct Frame {
    /// The frame's address (0 for the dummy root).
    pub address: u64,
    /// The parent frame (the root is its own parent).
    pub parent: FrameId,
    /// Children by address, in creation order. Only [`FrameTrie::child`] adds to it (it
    /// indexes long lists).
    pub children: Vec<(u64, FrameId)>,
    /// `(start, end, count)` fall-through ranges recorded on this frame.
    pub ranges: Vec<(u64, u64, u64)>,
    /// `(source, target, count)` branches recorded on this frame.
    pub branches: Vec<(u64, u64, u64)>,
}

impl Frame {
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

/// Adds `count` to the entry `(a, b)` when it is one of the last two of `entries` (a loop
/// in the LBR records the same one or two ranges and branches over and over: summed here,
/// each is counted into the counter table once per sample instead of once per
/// iteration), else appends it. Counts wrap, as the counter table's do.
#[inline]
pub(crate) fn add_or_push(entries: &mut Vec<(u64, u64, u64)>, a: u64, b: u64, count: u64) {
    let n = entries.len();
    for e in entries[n.saturating_sub(2)..].iter_mut().rev() {
        if e.0 == a && e.1 == b {
            e.2 = e.2.wrapping_add(count);
            return;
        }
    }
    entries.push((a, b, count));
}

/// A frame with more children than this finds them through [`FrameTrie`]'s index instead
/// of a scan of its list: line-context unwinding of a binary without inline information
/// gives each instruction of a range its own frame under the caller, so a caller can
/// collect hundreds of children in one sample.
const INDEXED_CHILDREN: usize = 8;

/// The arena.
#[derive(Clone, Debug)]
pub struct FrameTrie {
    frames: Vec<Frame>,
    len: usize,
    /// `(parent, address) → child` for the children of every frame with more than
    /// [`INDEXED_CHILDREN`] of them.
    index: HashMap<(FrameId, u64), FrameId, FxBuildHasher>,
}

impl Default for FrameTrie {
    fn default() -> Self {
        FrameTrie::new()
    }
}

impl FrameTrie {
    /// A trie holding only the dummy root.
    pub fn new() -> FrameTrie {
        FrameTrie {
            frames: vec![Frame::default()],
            len: 1,
            index: HashMap::default(),
        }
    }

    /// Resets to the dummy root alone, keeping allocations.
    pub fn clear(&mut self) {
        for f in &mut self.frames[..self.len] {
            f.children.clear();
            f.ranges.clear();
            f.branches.clear();
        }
        self.len = 1;
        if !self.index.is_empty() {
            self.index.clear();
        }
    }

    /// Number of frames, the root included.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when only the root exists.
    pub fn is_empty(&self) -> bool {
        self.len == 1
    }

    /// The frame `id` (must come from this trie).
    pub fn frame(&self, id: FrameId) -> &Frame {
        &self.frames[id as usize]
    }

    /// The frame `id`, mutable.
    pub fn frame_mut(&mut self, id: FrameId) -> &mut Frame {
        &mut self.frames[id as usize]
    }

    /// The child of `parent` at `address`, created when missing
    /// (`getOrCreateChildFrame`).
    pub fn child(&mut self, parent: FrameId, address: u64) -> FrameId {
        let children = &self.frames[parent as usize].children;
        let found = if children.len() > INDEXED_CHILDREN {
            self.index.get(&(parent, address)).copied()
        } else {
            children
                .iter()
                .find(|(a, _)| *a == address)
                .map(|&(_, id)| id)
        };
        if let Some(id) = found {
            return id;
        }
        let id = self.len as FrameId;
        if self.len == self.frames.len() {
            self.frames.push(Frame::default());
        }
        let f = &mut self.frames[self.len];
        f.address = address;
        f.parent = parent;
        self.len += 1;
        let children = &mut self.frames[parent as usize].children;
        children.push((address, id));
        match children.len() {
            n if n == INDEXED_CHILDREN + 1 => {
                // The list just outgrew scanning: index all of it.
                for &(a, c) in children.iter() {
                    self.index.insert((parent, a), c);
                }
            }
            n if n > INDEXED_CHILDREN => {
                self.index.insert((parent, address), id);
            }
            _ => {}
        }
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_among_the_last_two_is_summed_others_appended() {
        let mut f = Frame::default();
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
    fn children_are_shared_and_reused_after_clear() {
        let mut t = FrameTrie::new();
        let a = t.child(ROOT, 0x10);
        let b = t.child(a, 0x20);
        assert_eq!(t.child(ROOT, 0x10), a);
        assert_eq!(t.frame(b).parent, a);
        assert_eq!(t.frame(b).address, 0x20);
        t.frame_mut(b).ranges.push((1, 2, 3));
        assert_eq!(t.len(), 3);
        t.clear();
        assert!(t.is_empty());
        let c = t.child(ROOT, 0x30);
        assert_eq!(c, 1);
        assert!(t.frame(c).ranges.is_empty() && t.frame(c).children.is_empty());
        let d = t.child(c, 0x40);
        assert!(
            t.frame(d).ranges.is_empty(),
            "stale counters of the reused slot are gone"
        );
    }

    #[test]
    fn many_children_are_found_through_the_index_and_forgotten_on_clear() {
        let mut t = FrameTrie::new();
        for round in 0..3 {
            let a = t.child(ROOT, 0x10);
            let ids: Vec<FrameId> = (0..100u64).map(|k| t.child(a, 0x1000 + k)).collect();
            // Found again, in any order, with no new frame.
            let len = t.len();
            for k in (0..100u64).rev() {
                assert_eq!(t.child(a, 0x1000 + k), ids[k as usize], "round {round}");
            }
            assert_eq!(t.len(), len);
            assert_eq!(t.frame(a).children.len(), 100);
            assert!(t
                .frame(a)
                .children
                .iter()
                .enumerate()
                .all(|(k, &(addr, id))| addr == 0x1000 + k as u64 && id == ids[k]));
            // The same address under another parent is another frame.
            let b = t.child(ROOT, 0x20);
            assert_ne!(t.child(b, 0x1000), ids[0]);
            t.clear();
        }
    }
}

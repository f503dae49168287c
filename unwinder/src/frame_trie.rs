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

/// One frame of the trie: 24 bytes, no allocation of its own (the children are a list
/// through the arena, the counters a sample leaves on it are in [`crate::pending_counters`]).
#[derive(Clone, Copy, Debug)]
pub struct Frame {
    /// The frame's address (0 for the dummy root).
    pub address: u64,
    /// The parent frame (the root is its own parent).
    pub parent: FrameId,
    /// The newest child ([`ROOT`]: none; the root is no one's child).
    newest_child: FrameId,
    /// The next older sibling ([`ROOT`]: none).
    older_sibling: FrameId,
    /// How many children the frame has.
    child_count: u32,
}

impl Frame {
    fn new(address: u64, parent: FrameId) -> Frame {
        Frame {
            address,
            parent,
            newest_child: ROOT,
            older_sibling: ROOT,
            child_count: 0,
        }
    }

    /// True when the frame has children.
    pub fn has_children(&self) -> bool {
        self.child_count != 0
    }
}

/// A frame with more children than this finds them through [`FrameTrie`]'s index instead
/// of a walk of its list: line-context unwinding of a binary without inline information
/// gives each instruction of a range its own frame under the caller, so a caller can
/// collect hundreds of children in one sample.
const INDEXED_CHILDREN: usize = 8;

/// Most frames [`FrameTrie::child`] adds room for at once.
const GROWTH_STEP: usize = 1 << 13;

/// The arena.
#[derive(Clone, Debug)]
pub struct FrameTrie {
    frames: Vec<Frame>,
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
            frames: vec![Frame::new(0, ROOT)],
            index: HashMap::default(),
        }
    }

    /// Resets to the dummy root alone, keeping allocations.
    pub fn clear(&mut self) {
        self.frames.truncate(1);
        self.frames[0] = Frame::new(0, ROOT);
        if !self.index.is_empty() {
            self.index.clear();
        }
    }

    /// Number of frames, the root included.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// True when only the root exists.
    pub fn is_empty(&self) -> bool {
        self.frames.len() == 1
    }

    /// The frame `id` (must come from this trie).
    pub fn frame(&self, id: FrameId) -> &Frame {
        &self.frames[id as usize]
    }

    /// The children of `id`, newest first.
    pub fn children(&self, id: FrameId) -> impl Iterator<Item = FrameId> + '_ {
        let mut next = self.frames[id as usize].newest_child;
        std::iter::from_fn(move || {
            let child = next;
            (child != ROOT).then(|| {
                next = self.frames[child as usize].older_sibling;
                child
            })
        })
    }

    /// The child of `parent` at `address`, created when missing
    /// (`getOrCreateChildFrame`).
    pub fn child(&mut self, parent: FrameId, address: u64) -> FrameId {
        let p = self.frames[parent as usize];
        let found = if p.child_count as usize > INDEXED_CHILDREN {
            self.index.get(&(parent, address)).copied()
        } else {
            self.children(parent)
                .find(|&c| self.frames[c as usize].address == address)
        };
        if let Some(id) = found {
            return id;
        }
        let id = self.frames.len() as FrameId;
        if self.frames.len() == self.frames.capacity() {
            // Grown by at most GROWTH_STEP frames at a time: a kept trie stops a little
            // past its bound, not at twice it.
            self.frames
                .reserve_exact(self.frames.len().clamp(16, GROWTH_STEP));
        }
        let mut f = Frame::new(address, parent);
        f.older_sibling = p.newest_child;
        self.frames.push(f);
        let p = &mut self.frames[parent as usize];
        p.newest_child = id;
        p.child_count += 1;
        match p.child_count as usize {
            n if n == INDEXED_CHILDREN + 1 => {
                // The list just outgrew walking: index all of it.
                let kids: Vec<FrameId> = self.children(parent).collect();
                for c in kids {
                    let a = self.frames[c as usize].address;
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
    fn children_are_shared_and_reused_after_clear() {
        let mut t = FrameTrie::new();
        let a = t.child(ROOT, 0x10);
        let b = t.child(a, 0x20);
        assert_eq!(t.child(ROOT, 0x10), a);
        assert_eq!(t.frame(b).parent, a);
        assert_eq!(t.frame(b).address, 0x20);
        assert_eq!(t.len(), 3);
        assert_eq!(std::mem::size_of::<Frame>(), 24);
        t.clear();
        assert!(t.is_empty());
        assert!(!t.frame(ROOT).has_children());
        let c = t.child(ROOT, 0x30);
        assert_eq!(c, 1);
        assert!(!t.frame(c).has_children());
        let d = t.child(c, 0x40);
        assert_eq!(d, 2);
        assert_eq!(
            (t.frame(d).address, t.frame(d).parent),
            (0x40, c),
            "the reused slot is the new frame's"
        );
        assert_eq!(t.children(ROOT).collect::<Vec<_>>(), [c]);
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
            // Newest first.
            let kids: Vec<FrameId> = t.children(a).collect();
            assert_eq!(kids.len(), 100);
            assert!(kids
                .iter()
                .rev()
                .enumerate()
                .all(|(k, &id)| t.frame(id).address == 0x1000 + k as u64 && id == ids[k]));
            // The same address under another parent is another frame.
            let b = t.child(ROOT, 0x20);
            assert_ne!(t.child(b, 0x1000), ids[0]);
            t.clear();
        }
    }
}

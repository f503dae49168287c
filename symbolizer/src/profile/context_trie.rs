//! [`ContextTrie`]: the calling-context trie CS generation fills (LLVM's
//! `SampleContextTracker` / `ContextTrieNode`), converted to a flat CS profile map at
//! the end (`CSProfileGenerator::convertToProfileMap`).

use std::collections::BTreeMap;

use super::context::{ContextFrame, SampleContext};
use super::function_samples::FunctionSamples;
use super::location::LineLocation;

/// Index of a node in a [`ContextTrie`].
pub type TrieNodeId = usize;

#[derive(Clone, Debug)]
struct Node {
    func: String,
    /// Location in the parent's function of the call to this node (0:0 under the root).
    callsite: LineLocation,
    parent: Option<TrieNodeId>,
    children: BTreeMap<(LineLocation, String), TrieNodeId>,
    samples: Option<FunctionSamples>,
}

/// A trie of calling contexts; node 0 is the (function-less) root. Children are keyed by
/// (call-site location in the parent, callee name), as `ContextTrieNode` keys them.
#[derive(Clone, Debug)]
pub struct ContextTrie {
    nodes: Vec<Node>,
}

impl Default for ContextTrie {
    fn default() -> ContextTrie {
        ContextTrie::new()
    }
}

impl ContextTrie {
    /// The root node's id.
    pub const ROOT: TrieNodeId = 0;

    /// A trie with only the root.
    pub fn new() -> ContextTrie {
        ContextTrie {
            nodes: vec![Node {
                func: String::new(),
                callsite: LineLocation::default(),
                parent: None,
                children: BTreeMap::new(),
                samples: None,
            }],
        }
    }

    /// The child of `parent` for a call at `callsite` to `func`, created if missing
    /// (`getOrCreateChildContext`).
    pub fn child(&mut self, parent: TrieNodeId, callsite: LineLocation, func: &str) -> TrieNodeId {
        let key = (callsite, func.to_string());
        if let Some(id) = self.nodes[parent].children.get(&key) {
            return *id;
        }
        let id = self.nodes.len();
        self.nodes.push(Node {
            func: func.to_string(),
            callsite,
            parent: Some(parent),
            children: BTreeMap::new(),
            samples: None,
        });
        self.nodes[parent].children.insert(key, id);
        id
    }

    /// The node of a full context (outermost first; each frame's location is the call
    /// site of the next frame), created if missing (`getOrCreateContextPath`).
    pub fn path(&mut self, frames: &[ContextFrame]) -> TrieNodeId {
        let mut node = Self::ROOT;
        let mut loc = LineLocation::default();
        for f in frames {
            node = self.child(node, loc, &f.func);
            loc = f.location;
        }
        node
    }

    /// The parent of `id` (None for the root).
    pub fn parent(&self, id: TrieNodeId) -> Option<TrieNodeId> {
        self.nodes[id].parent
    }

    /// The function of `id`.
    pub fn func(&self, id: TrieNodeId) -> &str {
        &self.nodes[id].func
    }

    /// The call-site location of `id` in its parent.
    pub fn callsite(&self, id: TrieNodeId) -> LineLocation {
        self.nodes[id].callsite
    }

    /// The profile of `id`, if created.
    pub fn samples(&self, id: TrieNodeId) -> Option<&FunctionSamples> {
        self.nodes[id].samples.as_ref()
    }

    /// The profile of `id`, created empty if missing (`getOrCreateFunctionSamples`;
    /// its context is filled in by [`ContextTrie::into_profiles`]).
    pub fn samples_mut(&mut self, id: TrieNodeId) -> &mut FunctionSamples {
        let node = &mut self.nodes[id];
        let func = node.func.clone();
        node.samples
            .get_or_insert_with(|| FunctionSamples::new(SampleContext::from_name(func)))
    }

    /// All node ids, children before their parent (post-order), root last.
    pub fn post_order(&self) -> Vec<TrieNodeId> {
        let mut out = Vec::with_capacity(self.nodes.len());
        let mut stack: Vec<(TrieNodeId, bool)> = vec![(Self::ROOT, false)];
        while let Some((id, expanded)) = stack.pop() {
            if expanded {
                out.push(id);
            } else {
                stack.push((id, true));
                for child in self.nodes[id].children.values().rev() {
                    stack.push((*child, false));
                }
            }
        }
        out
    }

    /// Every node with a profile as a full-context profile (leaf location 0:0).
    ///
    /// Nodes are taken newest first: a child is always newer than its parent, so each node
    /// is last needed for its own context and is dropped then (its name moves into the
    /// context), and the trie shrinks as the profiles grow rather than both being held
    /// whole.
    pub fn into_profiles(mut self) -> BTreeMap<SampleContext, FunctionSamples> {
        let mut out = BTreeMap::new();
        while let Some(node) = self.nodes.pop() {
            let Some(mut fs) = node.samples else {
                continue;
            };
            let mut frames = vec![ContextFrame::new(node.func, LineLocation::default())];
            let (mut callsite, mut parent) = (node.callsite, node.parent);
            while let Some(p) = parent {
                if p == Self::ROOT {
                    break;
                }
                let p = &self.nodes[p];
                frames.push(ContextFrame::new(p.func.clone(), callsite));
                (callsite, parent) = (p.callsite, p.parent);
            }
            frames.reverse();
            let ctx = SampleContext::from_frames(frames);
            fs.context = ctx.clone();
            out.insert(ctx, fs);
            if self.nodes.len() < self.nodes.capacity() / 4 {
                self.nodes.shrink_to_fit();
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_share_prefixes_and_convert_to_contexts() {
        let mut t = ContextTrie::new();
        let frames = vec![
            ContextFrame::new("main", LineLocation::new(1, 0)),
            ContextFrame::new("foo", LineLocation::new(3, 1)),
            ContextFrame::new("bar", LineLocation::default()),
        ];
        let bar = t.path(&frames);
        let foo = t.parent(bar).unwrap();
        assert_eq!(t.func(foo), "foo");
        assert_eq!(t.callsite(bar), LineLocation::new(3, 1));
        assert_eq!(t.path(&frames), bar);
        t.samples_mut(bar).total = 5;
        t.samples_mut(foo).total = 2;
        assert_eq!(t.post_order().last(), Some(&ContextTrie::ROOT));
        let pos = |id| t.post_order().iter().position(|x| *x == id).unwrap();
        assert!(pos(bar) < pos(foo));
        let m = t.into_profiles();
        let keys: Vec<String> = m.keys().map(|c| c.to_string()).collect();
        assert_eq!(keys, vec!["main:1 @ foo", "main:1 @ foo:3.1 @ bar"]);
        assert_eq!(m.values().map(|f| f.total).collect::<Vec<_>>(), vec![2, 5]);
    }
}

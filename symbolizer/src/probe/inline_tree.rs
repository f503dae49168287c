//! [`ProbeInlineTree`]: MCDecodedPseudoProbeInlineTree flattened into a vector. A top-level
//! node is an outlined function body; its descendants are inlinees, each keyed under its
//! parent by (callee GUID, call-site probe index). The dummy root of LLVM is implicit: a
//! top-level node has no parent.

use std::collections::HashMap;

/// Index of a node in a [`ProbeInlineTree`].
pub type InlineNodeId = u32;

/// One inline-tree node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InlineTreeNode {
    /// GUID of the function whose probes the node holds.
    pub guid: u64,
    /// For an inlinee: the probe index of the call site in the parent (LLVM `ISite` index).
    /// For a top-level node: its sequence number among top-level nodes.
    pub site: u32,
    /// The caller's node; `None` for top-level (outlined) functions.
    pub parent: Option<InlineNodeId>,
}

impl InlineTreeNode {
    /// LLVM `hasInlineSite`: true for inlinees (nodes below a top-level node).
    pub fn has_inline_site(&self) -> bool {
        self.parent.is_some()
    }
}

/// All nodes, plus the child index used while decoding (`getOrAddNode`).
#[derive(Clone, Debug, Default)]
pub struct ProbeInlineTree {
    nodes: Vec<InlineTreeNode>,
    top_level: u32,
    children: HashMap<(InlineNodeId, u64, u32), InlineNodeId>,
}

impl ProbeInlineTree {
    /// Adds a new top-level node (each top-level record gets its own node, keyed by sequence).
    pub fn add_top_level(&mut self, guid: u64) -> InlineNodeId {
        let id = self.nodes.len() as InlineNodeId;
        self.nodes.push(InlineTreeNode {
            guid,
            site: self.top_level,
            parent: None,
        });
        self.top_level += 1;
        id
    }

    /// `getOrAddNode`: the child of `parent` for inline site (guid, site), created if new.
    pub fn child(&mut self, parent: InlineNodeId, guid: u64, site: u32) -> InlineNodeId {
        let next = self.nodes.len() as InlineNodeId;
        let id = *self.children.entry((parent, guid, site)).or_insert(next);
        if id == next {
            self.nodes.push(InlineTreeNode {
                guid,
                site,
                parent: Some(parent),
            });
        }
        id
    }

    /// The node `id`.
    pub fn node(&self, id: InlineNodeId) -> &InlineTreeNode {
        &self.nodes[id as usize]
    }

    /// All nodes, in creation (DFS decode) order.
    pub fn nodes(&self) -> &[InlineTreeNode] {
        &self.nodes
    }

    /// Drops the decode-time child index.
    pub fn shrink(&mut self) {
        self.children = HashMap::new();
        self.nodes.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_are_merged_by_guid_and_site() {
        let mut t = ProbeInlineTree::default();
        let main = t.add_top_level(1);
        let again = t.add_top_level(1);
        assert_ne!(main, again);
        let foo = t.child(main, 2, 8);
        assert_eq!(t.child(main, 2, 8), foo);
        assert_ne!(t.child(main, 2, 9), foo);
        assert_eq!(
            *t.node(foo),
            InlineTreeNode {
                guid: 2,
                site: 8,
                parent: Some(main)
            }
        );
        assert!(t.node(foo).has_inline_site());
        assert!(!t.node(again).has_inline_site());
        assert_eq!(t.node(again).site, 1);
    }
}

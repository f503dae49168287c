//! [`SizeTracker`]: the byte size of each function in each inline context, as llvm-profgen
//! 19's `BinarySizeContextTracker` (ProfiledBinary.cpp) computes it for the CS pre-inliner
//! (`--use-context-cost-for-preinliner`, default true).
//!
//! Every instruction of every profiled function adds its size to the node of its inline
//! stack in a reversed trie (leaf function first, then its callers, each keyed by the call
//! site in the caller). In a probe binary the stack comes from DWARF with probe indices as
//! line offsets, and inlinees optimised away but still owning probes are recorded with size
//! 0 (`trackInlineesOptimizedAway`), so they count as known. A context's size is the size
//! of the longest matching suffix of its stack; failing that, the first-child chain below
//! the deepest match (`getFuncSizeForContext`).

use std::collections::{BTreeMap, HashMap};

use super::binary_view::BinaryView;
use super::profiled_functions::ProfiledFunctions;
use crate::guid::function_guid;
use crate::profile::LineLocation;

/// LLVM's `FunctionSamples::getCallSiteHash`: the key of a child in every context trie
/// (`ContextTrieNode::AllChildContext`, a `std::map` ordered by this value).
pub fn call_site_hash(callee_guid: u64, callsite: LineLocation) -> u64 {
    let loc = (u64::from(callsite.discriminator) << 32) | u64::from(callsite.line_offset);
    callee_guid.wrapping_add(loc << 5).wrapping_add(loc)
}

#[derive(Clone, Debug, Default)]
struct SizeNode {
    children: BTreeMap<u64, usize>,
    size: Option<u32>,
}

/// Function sizes by inline context (leaf-first reversed trie); see the module docs.
#[derive(Clone, Debug)]
pub struct SizeTracker {
    nodes: Vec<SizeNode>,
}

impl Default for SizeTracker {
    fn default() -> SizeTracker {
        SizeTracker {
            nodes: vec![SizeNode::default()],
        }
    }
}

impl SizeTracker {
    fn child(&self, node: usize, func: &str, callsite: LineLocation) -> Option<usize> {
        self.nodes[node]
            .children
            .get(&call_site_hash(function_guid(func), callsite))
            .copied()
    }

    fn child_or_create(&mut self, node: usize, func: &str, callsite: LineLocation) -> usize {
        let key = call_site_hash(function_guid(func), callsite);
        if let Some(id) = self.nodes[node].children.get(&key) {
            return *id;
        }
        let id = self.nodes.len();
        self.nodes.push(SizeNode::default());
        self.nodes[node].children.insert(key, id);
        id
    }

    /// `addInstructionForContext`: `stack` is outermost first (each frame's location is
    /// the call site of the next frame; the leaf's own location is ignored).
    pub fn add_instruction(&mut self, stack: &[(&str, LineLocation)], size: u32) {
        let mut node = 0;
        for (i, (func, loc)) in stack.iter().rev().enumerate() {
            let callsite = if i == 0 {
                LineLocation::default()
            } else {
                *loc
            };
            node = self.child_or_create(node, func, callsite);
        }
        let n = &mut self.nodes[node];
        n.size = Some(n.size.unwrap_or(0).wrapping_add(size));
    }

    /// `getFuncSizeForContext`: `path` is leaf first, each entry the function and the
    /// call site *into the previous entry* (0:0 for the leaf). Unknown sizes give 0 (LLVM
    /// asserts a size exists).
    pub fn size_for_context(&self, path: &[(&str, LineLocation)]) -> u32 {
        let mut cur = Some(0usize);
        let mut prev = 0usize;
        let mut size = None;
        for (func, loc) in path {
            let Some(c) = cur else { break };
            prev = c;
            cur = self.child(c, func, *loc);
            if let Some(n) = cur {
                if let Some(s) = self.nodes[n].size {
                    size = Some(s);
                }
            }
        }
        if size.is_none() {
            let mut node = cur.unwrap_or(prev);
            while size.is_none() {
                let Some((_, first)) = self.nodes[node].children.iter().next() else {
                    break;
                };
                node = *first;
                size = self.nodes[node].size;
            }
        }
        size.unwrap_or(0)
    }

    /// Builds the tracker for the `profiled` functions (`computeSizeForProfiledFunctions`).
    pub fn build<B: BinaryView>(binary: &B, profiled: &ProfiledFunctions) -> SizeTracker {
        let mut tracker = SizeTracker::default();
        let optimized_away = if binary.has_pseudo_probes() {
            probe_contexts_by_top_level(binary)
        } else {
            HashMap::new()
        };
        for addr in profiled.addresses() {
            for (start, end) in binary.function_ranges_at(addr).to_vec() {
                if end == 0 {
                    continue;
                }
                for (a, size) in binary.instructions_in(start, end - 1) {
                    let frames = binary.size_frames(a);
                    let stack: Vec<(&str, LineLocation)> = frames
                        .iter()
                        .map(|f| {
                            (
                                f.func_name.as_str(),
                                LineLocation::new(f.line_offset, f.discriminator),
                            )
                        })
                        .collect();
                    tracker.add_instruction(&stack, size);
                }
            }
            if let Some(name) = binary.function_name_at(addr) {
                if let Some(paths) = optimized_away.get(name) {
                    for path in paths {
                        tracker.mark_known(path);
                    }
                }
            }
        }
        tracker
    }

    /// Adds size 0 at `path` (leaf first), making the context's size known.
    fn mark_known(&mut self, path: &[(String, LineLocation)]) {
        let mut node = 0;
        for (func, loc) in path {
            node = self.child_or_create(node, func, *loc);
        }
        let n = &mut self.nodes[node];
        n.size = Some(n.size.unwrap_or(0));
    }
}

/// A leaf-first probe context: (descriptor name, call site into the previous entry).
type ProbePath = Vec<(String, LineLocation)>;

/// For `trackInlineesOptimizedAway`: per top-level function name (descriptor name of the
/// last top-level inline-tree node of its GUID, as `TopLevelProbeFrameMap` keeps it), the
/// leaf-first probe contexts of every node of its tree that owns probes.
fn probe_contexts_by_top_level<B: BinaryView>(binary: &B) -> HashMap<String, Vec<ProbePath>> {
    let with_probes = binary.nodes_with_probes();
    // guid → site (sequence) of its last top-level node.
    let mut last_top: HashMap<u64, u32> = HashMap::new();
    let mut out: HashMap<String, Vec<ProbePath>> = HashMap::new();
    let mut entries: Vec<(u64, u32, ProbePath)> = Vec::new();
    for node in with_probes {
        let mut path = Vec::new();
        let mut cur = node;
        let mut callsite = LineLocation::default();
        let mut ok = true;
        loop {
            let n = binary.probe_node(cur);
            let Some(desc) = binary.probe_desc(n.guid) else {
                ok = false;
                break;
            };
            path.push((desc.name.clone(), callsite));
            match n.parent {
                Some(p) => {
                    callsite = LineLocation::new(n.site, 0);
                    cur = p;
                }
                None => break,
            }
        }
        if !ok {
            continue;
        }
        let top = binary.probe_node(cur);
        let e = last_top.entry(top.guid).or_insert(top.site);
        *e = (*e).max(top.site);
        entries.push((top.guid, top.site, path));
    }
    for (guid, site, path) in entries {
        if last_top.get(&guid) != Some(&site) {
            continue;
        }
        if let Some(desc) = binary.probe_desc(guid) {
            out.entry(desc.name.clone()).or_default().push(path);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(line: u32) -> LineLocation {
        LineLocation::new(line, 0)
    }

    #[test]
    fn sizes_accumulate_per_reversed_stack() {
        let mut t = SizeTracker::default();
        // foo outlined: 3 + 4 bytes; foo inlined into main at line 2: 5 bytes.
        t.add_instruction(&[("foo", l(1))], 3);
        t.add_instruction(&[("foo", l(7))], 4);
        t.add_instruction(&[("main", l(2)), ("foo", l(1))], 5);
        t.add_instruction(&[("main", l(3))], 10);
        assert_eq!(t.size_for_context(&[("foo", l(0))]), 7);
        assert_eq!(t.size_for_context(&[("foo", l(0)), ("main", l(2))]), 5);
        // main:9 @ foo: no such inline site → longest match is foo alone.
        assert_eq!(t.size_for_context(&[("foo", l(0)), ("main", l(9))]), 7);
        assert_eq!(t.size_for_context(&[("main", l(0))]), 10);
    }

    #[test]
    fn unknown_leaf_falls_back_to_first_child() {
        let mut t = SizeTracker::default();
        // bar only exists inlined (into main at 4).
        t.add_instruction(&[("main", l(4)), ("bar", l(1))], 6);
        assert_eq!(t.size_for_context(&[("bar", l(0))]), 6);
        // No match at all: LLVM falls back from the root down its first children.
        assert_eq!(t.size_for_context(&[("baz", l(0))]), 6);
        assert_eq!(SizeTracker::default().size_for_context(&[("baz", l(0))]), 0);
    }

    #[test]
    fn call_site_hash_matches_llvm_formula() {
        // NameHash + (LocId << 5) + LocId with LocId = disc << 32 | line.
        assert_eq!(call_site_hash(100, LineLocation::new(3, 0)), 100 + 96 + 3);
        let loc = (2u64 << 32) | 1;
        assert_eq!(
            call_site_hash(u64::MAX, LineLocation::new(1, 2)),
            u64::MAX.wrapping_add(loc << 5).wrapping_add(loc)
        );
    }
}

//! A small in-memory [`BinaryView`] for generator tests.

use std::collections::{BTreeMap, HashMap};

use super::binary_view::{BinaryView, BranchClass};
use crate::binary::FrameLocation;
use crate::probe::{InlineNodeId, InlineTreeNode, ProbeDesc, ProbeFrame, PseudoProbe};

/// Instructions, frames, functions and probes given by hand.
#[derive(Default)]
pub struct FakeBinary {
    /// address → size.
    pub insts: BTreeMap<u64, u32>,
    /// address → inline frames.
    pub frames: BTreeMap<u64, Vec<FrameLocation>>,
    /// function name → ranges [start, end).
    pub funcs: BTreeMap<String, Vec<(u64, u64)>>,
    /// entry address → callee name.
    pub entries: BTreeMap<u64, String>,
    /// probes (address-sorted).
    pub probes: Vec<PseudoProbe>,
    /// Probe inline-tree nodes.
    pub nodes: Vec<InlineTreeNode>,
    /// Control-flow class of branch instructions (others: [`BranchClass::Other`]).
    pub branches: BTreeMap<u64, BranchClass>,
    /// Probe descriptors by GUID.
    pub descs: HashMap<u64, ProbeDesc>,
}

/// A frame.
pub fn fr(func: &str, line: u32, disc: u32) -> FrameLocation {
    FrameLocation {
        func_name: func.to_string(),
        line_offset: line,
        discriminator: disc,
    }
}

impl BinaryView for FakeBinary {
    fn instructions_in(&self, start: u64, end: u64) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.insts.range(start..=end).map(|(a, s)| (*a, *s))
    }
    fn function_ranges_at(&self, addr: u64) -> &[(u64, u64)] {
        self.funcs
            .values()
            .find(|r| r.iter().any(|(s, e)| *s <= addr && addr < *e))
            .map_or(&[], |r| r.as_slice())
    }
    fn all_function_ranges(&self) -> Vec<(u64, u64)> {
        self.funcs.values().flatten().copied().collect()
    }
    fn callee_name_at(&self, target: u64) -> Option<&str> {
        self.entries.get(&target).map(|s| s.as_str())
    }
    fn inline_frames(&self, addr: u64) -> &[FrameLocation] {
        self.frames.get(&addr).map_or(&[], |v| v.as_slice())
    }
    fn func_range_id_at(&self, addr: u64) -> Option<(u64, usize)> {
        self.funcs.values().enumerate().find_map(|(i, r)| {
            r.iter()
                .find(|(s, e)| *s <= addr && addr < *e)
                .map(|(s, _)| (*s, i))
        })
    }
    fn branch_class(&self, addr: u64) -> BranchClass {
        self.branches
            .get(&addr)
            .copied()
            .unwrap_or(BranchClass::Other)
    }
    fn uses_fs_discriminator(&self) -> bool {
        false
    }
    fn has_pseudo_probes(&self) -> bool {
        !self.probes.is_empty()
    }
    fn node_probes(&self, node: InlineNodeId) -> Vec<&PseudoProbe> {
        self.probes.iter().filter(|p| p.node == node).collect()
    }
    fn nodes_with_probes(&self) -> Vec<InlineNodeId> {
        let mut nodes: Vec<InlineNodeId> = self.probes.iter().map(|p| p.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }
    fn probes_at(&self, addr: u64) -> &[PseudoProbe] {
        let lo = self.probes.partition_point(|p| p.address < addr);
        let hi = self.probes.partition_point(|p| p.address <= addr);
        &self.probes[lo..hi]
    }
    fn call_probe_at(&self, addr: u64) -> Option<&PseudoProbe> {
        self.probes_at(addr).iter().find(|p| p.kind.is_call())
    }
    fn probe_inline_context(&self, probe: &PseudoProbe, include_leaf: bool) -> Vec<ProbeFrame<'_>> {
        let name = |guid: u64| self.descs.get(&guid).map_or("", |d| d.name.as_str());
        let mut out = Vec::new();
        let mut node = self.nodes[probe.node as usize];
        while let Some(parent) = node.parent {
            let caller = self.nodes[parent as usize];
            out.push(ProbeFrame {
                func_name: name(caller.guid),
                probe_index: node.site,
            });
            node = caller;
        }
        out.reverse();
        if include_leaf {
            out.push(ProbeFrame {
                func_name: name(probe.guid),
                probe_index: probe.index,
            });
        }
        out
    }
    fn probe_node(&self, node: InlineNodeId) -> &InlineTreeNode {
        &self.nodes[node as usize]
    }
    fn probe_desc(&self, guid: u64) -> Option<&ProbeDesc> {
        self.descs.get(&guid)
    }
}

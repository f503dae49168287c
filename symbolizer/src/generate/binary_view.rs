//! [`BinaryView`]: exactly the binary queries profile generation makes. [`ProfiledBinary`]
//! implements it; tests implement it with small fakes.
//!
//! Every query returns borrowed data (slices, `&str`, iterators) so the generators do not
//! allocate per instruction; the one exception is [`BinaryView::probe_inline_context`],
//! which builds a short vector per probe as llvm-profgen does.

use crate::binary::disasm::{KIND_BRANCH, KIND_CALL, KIND_UNCOND};
use crate::binary::{FrameLocation, ProfiledBinary};
use crate::probe::{InlineNodeId, InlineTreeNode, ProbeDesc, ProbeFrame, PseudoProbe};

/// The control-flow class of an instruction, as missing-frame inference needs it
/// (LLVM's `MCInstrDesc::isCall` / `isUnconditionalBranch` / `isIndirectBranch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BranchClass {
    /// A call (direct or indirect).
    Call,
    /// A direct unconditional jump.
    DirectJump,
    /// An indirect unconditional jump (`isIndirectBranch() && isBarrier()`).
    IndirectJump,
    /// A conditional jump, or a jump the binary model cannot classify further
    /// ([`ProfiledBinary`]'s instruction kinds do not tell indirect jumps from
    /// conditional ones, so it reports both as this).
    OtherJump,
    /// Anything else (returns included).
    Other,
}

/// The queries profile generation makes of a profiled binary (preferred addresses).
pub trait BinaryView {
    /// Instructions `(address, size)` starting in `[start, end_inclusive]`, ascending
    /// (a start between instructions rounds up, like `InstructionPointer(.., true)`).
    fn instructions_in(
        &self,
        start: u64,
        end_inclusive: u64,
    ) -> impl Iterator<Item = (u64, u32)> + '_;
    /// All ranges `[start, end)` of the function whose range contains `addr`
    /// (`ProfiledBinary::getRanges`); empty when no function does.
    fn function_ranges_at(&self, addr: u64) -> &[(u64, u64)];
    /// Every range `[start, end)` of every function of the binary
    /// (`getAllBinaryFunctions`), for `--fill-zero-for-all-funcs`.
    fn all_function_ranges(&self) -> Vec<(u64, u64)>;
    /// Canonical callee name when `target` starts a function range marked as entry
    /// (`getCalleeNameForAddress`).
    fn callee_name_at(&self, target: u64) -> Option<&str>;
    /// Inline frames at `addr`, outermost first; empty without debug info
    /// (`getCachedFrameLocationStack`).
    fn inline_frames(&self, addr: u64) -> &[FrameLocation];
    /// The function range containing `addr` as (range start, function id): `findFuncRange`,
    /// with the range and its `BinaryFunction` identified.
    fn func_range_id_at(&self, addr: u64) -> Option<(u64, usize)>;
    /// The control-flow class of the instruction at `addr`.
    fn branch_class(&self, addr: u64) -> BranchClass;
    /// The binary uses flow-sensitive discriminators.
    fn uses_fs_discriminator(&self) -> bool;
    /// The binary has `.pseudo_probe` and `.pseudo_probe_desc`.
    fn has_pseudo_probes(&self) -> bool;
    /// The probes of inline-tree node `node`, sorted by address
    /// (`MCDecodedPseudoProbeInlineTree::getProbes`).
    fn node_probes(&self, node: InlineNodeId) -> Vec<&PseudoProbe>;
    /// The inline-tree nodes that own at least one probe, sorted.
    fn nodes_with_probes(&self) -> Vec<InlineNodeId>;
    /// Probes at `addr` (block and call probes), in decode order.
    fn probes_at(&self, addr: u64) -> &[PseudoProbe];
    /// The first call probe at call instruction `addr` (`getCallProbeForAddr`).
    fn call_probe_at(&self, addr: u64) -> Option<&PseudoProbe>;
    /// Inline context of a probe, outermost first: `(function, call-site probe index)`
    /// per inliner, plus `(function, probe index)` of the probe itself when
    /// `include_leaf` (`getInlineContextForProbe`).
    fn probe_inline_context(&self, probe: &PseudoProbe, include_leaf: bool) -> Vec<ProbeFrame<'_>>;
    /// The probe inline-tree node `node`.
    fn probe_node(&self, node: InlineNodeId) -> &InlineTreeNode;
    /// The `.pseudo_probe_desc` record of `guid`.
    fn probe_desc(&self, guid: u64) -> Option<&ProbeDesc>;
    /// Inline frames at `addr` as llvm-profgen's context-size tracker reads them
    /// (`getFrameLocationStack(addr, UsePseudoProbes)`): outermost first, names as in DWARF,
    /// raw discriminators, and in a probe binary the probe index as line offset.
    fn size_frames(&self, addr: u64) -> Vec<FrameLocation> {
        self.inline_frames(addr).to_vec()
    }
    /// The DWARF name of the function whose range contains `addr` (`BinaryFunction::FuncName`).
    fn function_name_at(&self, addr: u64) -> Option<&str> {
        let _ = addr;
        None
    }
}

impl BinaryView for ProfiledBinary {
    fn instructions_in(
        &self,
        start: u64,
        end_inclusive: u64,
    ) -> impl Iterator<Item = (u64, u32)> + '_ {
        ProfiledBinary::instructions_in(self, start, end_inclusive)
    }

    fn function_ranges_at(&self, addr: u64) -> &[(u64, u64)] {
        match self.func_range_at(addr) {
            Some(r) => self
                .function_table()
                .functions()
                .get(r.func_index)
                .map_or(&[], |f| f.ranges.as_slice()),
            None => &[],
        }
    }

    fn all_function_ranges(&self) -> Vec<(u64, u64)> {
        self.functions()
            .flat_map(|f| f.ranges.iter().copied())
            .collect()
    }

    fn callee_name_at(&self, target: u64) -> Option<&str> {
        self.func_entry_name(target)
    }

    fn inline_frames(&self, addr: u64) -> &[FrameLocation] {
        ProfiledBinary::inline_frames(self, addr)
    }

    fn func_range_id_at(&self, addr: u64) -> Option<(u64, usize)> {
        self.func_range_at(addr).map(|r| (r.start, r.func_index))
    }

    fn branch_class(&self, addr: u64) -> BranchClass {
        let kind = self.instruction_kind(addr);
        if kind & KIND_CALL != 0 {
            BranchClass::Call
        } else if kind & KIND_BRANCH != 0 && kind & KIND_UNCOND != 0 {
            BranchClass::DirectJump
        } else if kind & KIND_BRANCH != 0 {
            BranchClass::OtherJump
        } else {
            BranchClass::Other
        }
    }

    fn uses_fs_discriminator(&self) -> bool {
        ProfiledBinary::uses_fs_discriminator(self)
    }

    fn has_pseudo_probes(&self) -> bool {
        ProfiledBinary::has_pseudo_probes(self)
    }

    fn node_probes(&self, node: InlineNodeId) -> Vec<&PseudoProbe> {
        ProfiledBinary::node_probes(self, node)
    }

    fn nodes_with_probes(&self) -> Vec<InlineNodeId> {
        ProfiledBinary::nodes_with_probes(self).to_vec()
    }

    fn probes_at(&self, addr: u64) -> &[PseudoProbe] {
        ProfiledBinary::probes_at(self, addr)
    }

    fn call_probe_at(&self, addr: u64) -> Option<&PseudoProbe> {
        ProfiledBinary::call_probe_at(self, addr)
    }

    fn probe_inline_context(&self, probe: &PseudoProbe, include_leaf: bool) -> Vec<ProbeFrame<'_>> {
        ProfiledBinary::probe_inline_context(self, probe, include_leaf)
    }

    fn probe_node(&self, node: InlineNodeId) -> &InlineTreeNode {
        self.probe_inline_tree().node(node)
    }

    fn probe_desc(&self, guid: u64) -> Option<&ProbeDesc> {
        ProfiledBinary::probe_desc(self, guid)
    }

    fn size_frames(&self, addr: u64) -> Vec<FrameLocation> {
        self.symbolize(addr, self.has_pseudo_probes())
    }

    fn function_name_at(&self, addr: u64) -> Option<&str> {
        let r = self.func_range_at(addr)?;
        self.function_table()
            .functions()
            .get(r.func_index)
            .map(|f| f.name.as_str())
    }
}

/// Derived queries every [`BinaryView`] answers from the primitive ones.
pub trait BinaryViewExt: BinaryView {
    /// The CFG checksum of the descriptor with `guid`.
    fn checksum_for_guid(&self, guid: u64) -> Option<u64> {
        self.probe_desc(guid).map(|d| d.hash)
    }

    /// The CFG checksum of function `name` (GUID = MD5 of the name), as
    /// `getFuncDescForGUID(Function.getHashCode())`.
    fn checksum_for_name(&self, name: &str) -> Option<u64> {
        self.checksum_for_guid(crate::guid::function_guid(name))
    }

    /// The inline-tree node is an inlined call site (`hasInlineSite`).
    fn node_is_inlined(&self, node: InlineNodeId) -> bool {
        self.probe_node(node).has_inline_site()
    }

    /// The CFG checksum of the function inlining `node` (its parent node's descriptor),
    /// None when `node` is not inlined (`getInlinerDescForProbe`).
    fn inliner_checksum(&self, node: InlineNodeId) -> Option<u64> {
        let parent = self.probe_node(node).parent?;
        self.checksum_for_guid(self.probe_node(parent).guid)
    }
}

impl<T: BinaryView + ?Sized> BinaryViewExt for T {}

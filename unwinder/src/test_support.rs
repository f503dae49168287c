//! [`FakeLayout`]: a hand-written instruction list implementing [`CodeLayout`], for tests
//! of the unwinder and of crates that use it without a real binary; [`fake_placement`], the
//! placement of such a binary.

use std::collections::{BTreeMap, BTreeSet};

use crate::{BinaryLoadInfo, BinaryPlacement, CodeLayout, FrameSetup, RangeChecks};

/// The kind of a fake instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inst {
    /// Anything that does not transfer control.
    Other,
    /// A call.
    Call,
    /// A return.
    Return,
    /// An unconditional jump.
    Jump,
    /// A conditional branch.
    CondBranch,
}

/// A fake binary: instruction starts with their kinds, function starts, optional inline
/// frames per address, and whether it "has pseudo probes".
#[derive(Clone, Debug, Default)]
pub struct FakeLayout {
    insts: BTreeMap<u64, Inst>,
    prolog_epilog: BTreeSet<u64>,
    inline_frames: BTreeMap<u64, Vec<u64>>,
    probes: bool,
    function_ranges: Vec<(u64, u64)>,
    block_probes: BTreeSet<u64>,
    frame_setups: Option<BTreeMap<u64, FrameSetup>>,
}

impl FakeLayout {
    /// Instructions (ascending or not) and function start addresses; the prolog/epilog set
    /// is built as llvm-profgen builds it (each function's first two instructions, each
    /// `ret` and the instruction before it).
    pub fn new(insts: &[(u64, Inst)], function_starts: &[u64]) -> FakeLayout {
        let insts: BTreeMap<u64, Inst> = insts.iter().copied().collect();
        let addrs: Vec<u64> = insts.keys().copied().collect();
        let mut prolog_epilog = BTreeSet::new();
        for &start in function_starts {
            if let Ok(i) = addrs.binary_search(&start) {
                prolog_epilog.insert(start);
                if let Some(&next) = addrs.get(i + 1) {
                    prolog_epilog.insert(next);
                }
            }
        }
        for (i, &a) in addrs.iter().enumerate() {
            if insts[&a] == Inst::Return {
                prolog_epilog.insert(a);
                if i > 0 {
                    prolog_epilog.insert(addrs[i - 1]);
                }
            }
        }
        FakeLayout {
            insts,
            prolog_epilog,
            inline_frames: BTreeMap::new(),
            probes: false,
            function_ranges: Vec::new(),
            block_probes: BTreeSet::new(),
            frame_setups: None,
        }
    }

    /// Marks the layout as probe-based (contexts keyed by call-site addresses).
    pub fn with_probes(mut self, probes: bool) -> FakeLayout {
        self.probes = probes;
        self
    }

    /// Sets the inline frames of `[start, end]`'s instructions: outermost first, each an
    /// opaque id; the last is the leaf location (ignored by `inline_context_equal`).
    pub fn with_inline(mut self, start: u64, end: u64, frames: &[u64]) -> FakeLayout {
        let addrs: Vec<u64> = self.insts.range(start..=end).map(|(a, _)| *a).collect();
        for a in addrs {
            self.inline_frames.insert(a, frames.to_vec());
        }
        self
    }

    /// Sets `[start, end)` function ranges; the layout then offers [`RangeChecks`].
    pub fn with_function_ranges(mut self, ranges: &[(u64, u64)]) -> FakeLayout {
        self.function_ranges = ranges.to_vec();
        self.function_ranges.sort_unstable();
        self
    }

    /// Sets the addresses of block probes (for [`CodeLayout::block_probe_anchor`], which
    /// then looks within the function ranges of [`FakeLayout::with_function_ranges`]).
    pub fn with_block_probes(mut self, addrs: &[u64]) -> FakeLayout {
        self.block_probes = addrs.iter().copied().collect();
        self
    }

    /// Decodes prologues and epilogues: [`CodeLayout::frame_setup`] answers the given
    /// state at these addresses and [`FrameSetup::Framed`] at every other instruction
    /// (without this call it answers `None`, "cannot tell").
    pub fn with_frame_setups(mut self, setups: &[(u64, FrameSetup)]) -> FakeLayout {
        self.frame_setups = Some(setups.iter().copied().collect());
        self
    }

    fn kind(&self, addr: u64) -> Option<Inst> {
        self.insts.get(&addr).copied()
    }
}

impl CodeLayout for FakeLayout {
    fn is_code(&self, addr: u64) -> bool {
        self.insts.contains_key(&addr)
    }
    fn is_call(&self, addr: u64) -> bool {
        self.kind(addr) == Some(Inst::Call)
    }
    fn is_return(&self, addr: u64) -> bool {
        self.kind(addr) == Some(Inst::Return)
    }
    fn range_crosses_uncond_branch(&self, start: u64, end: u64) -> bool {
        start < end
            && self
                .insts
                .range(start..end)
                .any(|(_, k)| matches!(k, Inst::Call | Inst::Return | Inst::Jump))
    }
    fn previous_instruction(&self, addr: u64) -> Option<u64> {
        self.insts.range(..addr).next_back().map(|(a, _)| *a)
    }
    fn is_prolog_or_epilog(&self, addr: u64) -> bool {
        self.prolog_epilog.contains(&addr)
    }
    fn has_pseudo_probes(&self) -> bool {
        self.probes
    }
    fn inline_context_equal(&self, a: u64, b: u64) -> bool {
        match (self.inline_frames.get(&a), self.inline_frames.get(&b)) {
            (Some(x), Some(y)) => {
                x.len() == y.len() && !x.is_empty() && x[..x.len() - 1] == y[..y.len() - 1]
            }
            _ => false,
        }
    }
    fn has_inline_frames(&self) -> bool {
        !self.inline_frames.is_empty()
    }
    fn range_checks(&self) -> Option<&dyn RangeChecks> {
        (!self.function_ranges.is_empty()).then_some(self as &dyn RangeChecks)
    }
    fn frame_setup(&self, addr: u64) -> Option<FrameSetup> {
        let setups = self.frame_setups.as_ref()?;
        if !self.is_code(addr) {
            return None;
        }
        Some(setups.get(&addr).copied().unwrap_or(FrameSetup::Framed))
    }
    fn block_probe_anchor(&self, addr: u64) -> Option<u64> {
        let (start, _) = self.function_range(addr)?;
        self.block_probes.range(start..=addr).next_back().copied()
    }
}

impl RangeChecks for FakeLayout {
    fn is_transfer(&self, addr: u64) -> bool {
        matches!(self.kind(addr), Some(k) if k != Inst::Other)
    }
    fn function_range(&self, addr: u64) -> Option<(u64, u64)> {
        let i = self.function_ranges.partition_point(|r| r.0 <= addr);
        let r = *self.function_ranges.get(i.checked_sub(1)?)?;
        (addr < r.1).then_some(r)
    }
}

/// Two functions, `main` calling `foo`, without probes (add them with
/// [`FakeLayout::with_probes`]):
///
/// main: 0x1000 push; 0x1001 mov; 0x1004 call foo; 0x1009 jcc; 0x100b ret
/// foo:  0x1010 push; 0x1011 mov; 0x1014 nop; 0x1015 jcc; 0x1017 pop; 0x1018 ret
pub fn main_calls_foo() -> FakeLayout {
    use Inst::*;
    FakeLayout::new(
        &[
            (0x1000, Other),
            (0x1001, Other),
            (0x1004, Call),
            (0x1009, CondBranch),
            (0x100b, Return),
            (0x1010, Other),
            (0x1011, Other),
            (0x1014, Other),
            (0x1015, CondBranch),
            (0x1017, Other),
            (0x1018, Return),
        ],
        &[0x1000, 0x1010],
    )
}

/// The load of [`main_calls_foo`]'s binary `prog`: preferred base 0x1000, its text at file
/// offset 0x1000.
pub fn main_calls_foo_load() -> BinaryLoadInfo {
    BinaryLoadInfo {
        name: "prog".into(),
        preferred_base: 0x1000,
        text_segment_offsets: vec![0x1000],
        preferred_text_segment_addresses: vec![0x1000],
        kernel: false,
    }
}

/// The load of a binary `p`: preferred base 0x1000, one text segment at file offset 0.
pub fn fake_load() -> BinaryLoadInfo {
    BinaryLoadInfo {
        name: "p".into(),
        preferred_base: 0x1000,
        text_segment_offsets: vec![0],
        preferred_text_segment_addresses: vec![0x1000],
        kernel: false,
    }
}

/// The placement of [`fake_load`]'s binary `p` mapped at `base` by a process, as its MMAP2
/// event (`/x/p`) places it.
pub fn fake_placement(base: u64) -> BinaryPlacement {
    let mut p = BinaryPlacement::new(fake_load(), None).expect("a fixed load info");
    p.observe(&collector::Mmap2Event {
        addr: base,
        pgoff: 0,
        filename: "/x/p".into(),
        ..Default::default()
    })
    .expect("the binary's own mapping");
    p
}

//! [`CodeLayout`]: what the unwinder must know about a binary's code.

/// llvm-profgen's `ExternalAddr`: the sentinel that stands for every address outside the
/// profiled binary's code (another DSO, the kernel, JIT code, or not an instruction start).
pub const EXTERNAL_ADDR: u64 = 1;

/// Where the frame pointer stands at an instruction, from its function's decoded prologue
/// and epilogue ([`CodeLayout::frame_setup`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameSetup {
    /// `rbp` holds the function's own frame: the kernel's frame-pointer walk reaches the
    /// caller. Also every instruction of a function the layout finds no prologue in.
    Framed,
    /// `rbp` still holds the caller's frame (at the entry, before `push rbp`, or between
    /// `push rbp` and `mov rbp, rsp`) or holds it again (after `pop rbp` / `leave`): the
    /// frame-pointer walk skips the immediate caller, whose return address is at
    /// `[sp + return_address_offset]`.
    CallerFrame {
        /// Bytes from the stack pointer to the return address (0 or 8).
        return_address_offset: u64,
    },
}

/// One bit per byte from `base`: set where an instruction starts (see
/// [`CodeLayout::code_bitmap`]). `contains(a)` must equal `is_code(a)`.
#[derive(Clone, Copy, Debug)]
pub struct CodeBitmap<'a> {
    /// Address of bit 0.
    pub base: u64,
    /// The bits, little-endian within each word.
    pub words: &'a [u64],
}

impl CodeBitmap<'_> {
    /// True when an instruction starts at `addr`.
    #[inline]
    pub fn contains(&self, addr: u64) -> bool {
        let Some(off) = addr.checked_sub(self.base) else {
            return false;
        };
        self.words
            .get((off / 64) as usize)
            .is_some_and(|w| w & (1 << (off % 64)) != 0)
    }
}

/// [`CodeLayout::is_code`] for many addresses: a direct bit test when the layout has a
/// [`CodeBitmap`], else the trait call.
pub fn code_test(layout: &dyn CodeLayout) -> impl Fn(u64) -> bool + '_ {
    let bitmap = layout.code_bitmap();
    move |addr| match &bitmap {
        Some(b) => b.contains(addr),
        None => layout.is_code(addr),
    }
}

/// The code facts the unwinder needs, in the binary's preferred (link-time) addresses.
///
/// Implemented by the symbolizer's `ProfiledBinary` from its x86 disassembly; tests may
/// implement it over a hand-written instruction list.
pub trait CodeLayout: Sync {
    /// True when `addr` is the first byte of a decoded instruction.
    fn is_code(&self, addr: u64) -> bool;
    /// True when the instruction at `addr` is a call (direct or indirect).
    fn is_call(&self, addr: u64) -> bool;
    /// True when the instruction at `addr` is a return.
    fn is_return(&self, addr: u64) -> bool;
    /// True when some call, return or unconditional jump starts in `[start, end)`
    /// (llvm-profgen's `rangeCrossUncondBranch`; `start < end` required).
    fn range_crosses_uncond_branch(&self, start: u64, end: u64) -> bool;
    /// The start of the instruction before the first instruction at or above `addr`
    /// (llvm-profgen's `lower_bound(CodeAddressVec, addr) - 1`), if any.
    fn previous_instruction(&self, addr: u64) -> Option<u64>;
    /// True when `addr` is a function's first or second instruction, or a `ret` or the
    /// instruction before it: stack samples with such a leaf are dropped, because the
    /// frame pointer chain is not set up there.
    fn is_prolog_or_epilog(&self, addr: u64) -> bool;
    /// True when the binary has pseudo probes (`.pseudo_probe` and `.pseudo_probe_desc`):
    /// probe contexts are keyed by call-site addresses, line contexts by inline frames.
    fn has_pseudo_probes(&self) -> bool;
    /// For line-based (DWARF) contexts: true when the two addresses have the same inline
    /// frames except the leaf's location (llvm-profgen's `inlineContextEqual`).
    fn inline_context_equal(&self, a: u64, b: u64) -> bool;

    /// False when [`CodeLayout::inline_context_equal`] is false for every pair of
    /// addresses (no instruction has inline frames: a binary without DWARF), so that
    /// line-context unwinding need not ask it for every instruction.
    fn has_inline_frames(&self) -> bool {
        true
    }

    /// For probe binaries: the address of the nearest block probe at or before `addr` in
    /// the same function (the start of the sampled block, when blocks are laid out
    /// contiguously). Leading-IP samples count the range from it to the IP, so that a
    /// sample anywhere in a block reaches the block's probe. `None`: no such probe.
    fn block_probe_anchor(&self, addr: u64) -> Option<u64> {
        let _ = addr;
        None
    }

    /// [`CodeLayout::is_code`] of each of `addrs`, into `out` (as long as `addrs`): one
    /// call for a sample's addresses, so that a layout answers them from its tables
    /// without a dynamic call per address.
    fn is_code_each(&self, addrs: &[u64], out: &mut [bool]) {
        for (&a, o) in addrs.iter().zip(out) {
            *o = self.is_code(a);
        }
    }

    /// The instruction-start bitmap behind [`CodeLayout::is_code`], when the layout has
    /// one: sample preparation checks every LBR address, and a direct bit test there
    /// saves a dynamic call per address.
    fn code_bitmap(&self) -> Option<CodeBitmap<'_>> {
        None
    }

    /// llvm-profgen's `isValidFallThroughRange`: `start <= end` and no unconditional
    /// transfer lies in `[start, end)`.
    fn is_valid_fall_through_range(&self, start: u64, end: u64) -> bool {
        start <= end && !self.range_crosses_uncond_branch(start, end)
    }

    /// The branch classes and function ranges llvm-profgen's `warnInvalidRange` checks
    /// sampled ranges against, when the implementation knows them; `None` (the default)
    /// leaves those warnings out of [`crate::UnwindStats`].
    fn range_checks(&self) -> Option<&dyn RangeChecks> {
        None
    }

    /// The frame-pointer state at the instruction `addr` (before it executes), decoded from
    /// its function's prologue (`push rbp; mov rbp, rsp`, after an optional `endbr64`) and
    /// epilogue (`pop rbp` or `leave`, then `ret` or a tail-call `jmp`): what repairs the
    /// call chain of a sample taken there ([`crate::stack_repair`]). `None` (the default)
    /// when the layout cannot tell (not an instruction, or no function known around it).
    fn frame_setup(&self, addr: u64) -> Option<FrameSetup> {
        let _ = addr;
        None
    }

    /// The call instruction a return address returns to (`getCallAddrFromFrameAddr`):
    /// the previous instruction if it is a call, else `None`. The external sentinel maps
    /// to itself.
    fn call_before_return_address(&self, ret: u64) -> Option<u64> {
        if ret == EXTERNAL_ADDR {
            return Some(EXTERNAL_ADDR);
        }
        let prev = self.previous_instruction(ret)?;
        self.is_call(prev).then_some(prev)
    }
}

/// What llvm-profgen 19's `warnInvalidRange` needs besides a [`CodeLayout`]: it counts
/// the sampled fall-through ranges that do not start on an instruction or end on a
/// branch, that lie outside every function, that cross a function's end, or that cross an
/// unconditional branch.
pub trait RangeChecks {
    /// `addressIsTransfer`: the instruction at `addr` is a branch (conditional or not), a
    /// call or a return.
    fn is_transfer(&self, addr: u64) -> bool;
    /// `findFuncRange`: the `[start, end)` function range (from DWARF) containing `addr`.
    fn function_range(&self, addr: u64) -> Option<(u64, u64)>;
}

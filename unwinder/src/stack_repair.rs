//! [`leaf_repair`]: the caller a frame-pointer call chain misses when the sample's leaf is
//! in a prologue or an epilogue, read from the sample's user registers and stack words.
//!
//! The kernel walks the chain from `rbp` (`perf_callchain_user`): the leaf IP, then the
//! return address of every frame `rbp` links. At a function's entry (before `push rbp`),
//! between `push rbp` and `mov rbp, rsp`, and after `pop rbp` / `leave` (at the `ret` or a
//! tail-call `jmp`), `rbp` holds the caller's frame, so the chain goes from the leaf
//! straight to the caller's caller. llvm-profgen drops such samples (its prolog/epilog
//! set: a function's first two instructions, each `ret` and the instruction before it).
//! With `PERF_SAMPLE_REGS_USER` and `PERF_SAMPLE_STACK_USER` the missing return address
//! is the stack word at `[sp]` (entry, after `pop rbp`) or `[sp + 8]` (after `push rbp`),
//! and the decoded prologue/epilogue ([`CodeLayout::frame_setup`]) says which.

use collector::UserStack;

use crate::{CodeLayout, FrameSetup, Rebase};

/// What the registers say about a sample's call chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StackRepair {
    /// No user registers (perf script input), or the repair is off: llvm-profgen's rule
    /// (a leaf in its prolog/epilog set drops the sample) applies.
    Unavailable,
    /// The leaf's own frame is set up: the chain is whole and counted as it is, even where
    /// llvm-profgen's address rule would drop it (a `pop rbp` before its `ret`).
    Whole,
    /// The chain misses the leaf's caller: this return address (a process address) goes
    /// between the leaf and the rest of the chain.
    InsertCaller(u64),
    /// The chain misses the caller and the sample cannot give it: the stack word was not
    /// copied, the registers are not the leaf's, the word is not a return address, or the
    /// layout cannot decode the leaf's function and llvm-profgen's rule drops it.
    Unrepairable,
}

impl StackRepair {
    /// The return address to insert after the leaf, for [`StackRepair::InsertCaller`].
    pub fn inserted_caller(self) -> Option<u64> {
        match self {
            StackRepair::InsertCaller(ra) => Some(ra),
            _ => None,
        }
    }
}

/// Decides how to repair the chain whose leaf (process address, the chain's first entry)
/// is `leaf`, with the sample's `user_stack` (`None`: [`StackRepair::Unavailable`]).
pub fn leaf_repair(
    leaf: u64,
    user_stack: Option<&UserStack>,
    rebase: Rebase,
    layout: &dyn CodeLayout,
) -> StackRepair {
    let Some(regs) = user_stack else {
        return StackRepair::Unavailable;
    };
    let canonical = rebase.canonical(leaf);
    let offset = match layout.frame_setup(canonical) {
        Some(FrameSetup::Framed) => return StackRepair::Whole,
        Some(FrameSetup::CallerFrame {
            return_address_offset,
        }) => return_address_offset,
        None if layout.is_prolog_or_epilog(canonical) => return StackRepair::Unrepairable,
        None => return StackRepair::Whole,
    };
    // The registers must be those of the leaf instruction (the chain's walk started there).
    if regs.ip != leaf {
        return StackRepair::Unrepairable;
    }
    let Some(ret) = regs.word_at(offset) else {
        return StackRepair::Unrepairable;
    };
    // A return address into the binary follows a call; one outside it (a caller in
    // another object) stays an external frame.
    let ret_canonical = rebase.canonical(ret);
    if layout.is_code(ret_canonical) && layout.call_before_return_address(ret_canonical).is_none() {
        return StackRepair::Unrepairable;
    }
    StackRepair::InsertCaller(ret)
}

/// What in a sample's registers and stack words decides [`leaf_repair`]'s answer, given the
/// sample's leaf: samples with the same call chain whose witnesses match repair alike, so
/// they may be prepared once for all (a stack word read nowhere, like the local data at
/// `[sp]` in a function's body, must not tell them apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepairWitness {
    /// Repair is off or cannot apply (no call chain): the registers are never read.
    Ignored,
    /// No user registers: [`StackRepair::Unavailable`].
    NoRegisters,
    /// The leaf's frame is set up, or its function is not decoded: the answer depends on
    /// the leaf alone.
    LeafOnly,
    /// The leaf is in a prologue or epilogue: the answer depends on whether the registers
    /// are the leaf's and on the stack word at `offset` from `sp`.
    StackWord {
        /// Bytes from `sp` to the return address ([`FrameSetup::CallerFrame`]).
        offset: u64,
        /// The registers' IP is the chain's leaf.
        regs_of_leaf: bool,
        /// The word at `sp + offset`, when it was copied.
        word: Option<u64>,
    },
}

impl RepairWitness {
    /// The witness of a sample whose call chain is `callchain` and registers `user_stack`
    /// (`repair`: the repair is on), asking the layout where the leaf's return address
    /// is.
    pub fn of(
        callchain: &[u64],
        user_stack: Option<&UserStack>,
        repair: bool,
        rebase: Rebase,
        layout: &dyn CodeLayout,
    ) -> RepairWitness {
        let Some(&leaf) = callchain.first().filter(|_| repair) else {
            return RepairWitness::Ignored;
        };
        let Some(regs) = user_stack else {
            return RepairWitness::NoRegisters;
        };
        match layout.frame_setup(rebase.canonical(leaf)) {
            Some(FrameSetup::CallerFrame {
                return_address_offset: offset,
            }) => RepairWitness::StackWord {
                offset,
                regs_of_leaf: regs.ip == leaf,
                word: regs.word_at(offset),
            },
            _ => RepairWitness::LeafOnly,
        }
    }

    /// True when a sample with the same call chain (`callchain`) and registers
    /// `user_stack` has this witness: no layout asked, the offset is the witness's.
    pub fn matches(&self, callchain: &[u64], user_stack: Option<&UserStack>) -> bool {
        match *self {
            RepairWitness::Ignored => true,
            RepairWitness::NoRegisters => user_stack.is_none(),
            RepairWitness::LeafOnly => user_stack.is_some(),
            RepairWitness::StackWord {
                offset,
                regs_of_leaf,
                word,
            } => user_stack.is_some_and(|regs| {
                (callchain.first() == Some(&regs.ip)) == regs_of_leaf
                    && regs.word_at(offset) == word
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{fake_placement, FakeLayout, Inst};

    /// main: 0x1000 push rbp, 0x1001 mov rbp,rsp, 0x1004 call foo, 0x1009 pop rbp, 0x100a ret
    /// foo:  0x1010 push rbp, 0x1011 mov rbp,rsp, 0x1014 nop, 0x1015 pop rbp, 0x1016 ret
    fn layout(decoded: bool) -> FakeLayout {
        let l = FakeLayout::new(
            &[
                (0x1000, Inst::Other),
                (0x1001, Inst::Other),
                (0x1004, Inst::Call),
                (0x1009, Inst::Other),
                (0x100a, Inst::Return),
                (0x1010, Inst::Other),
                (0x1011, Inst::Other),
                (0x1014, Inst::Other),
                (0x1015, Inst::Other),
                (0x1016, Inst::Return),
            ],
            &[0x1000, 0x1010],
        );
        if !decoded {
            return l;
        }
        let at = |return_address_offset| FrameSetup::CallerFrame {
            return_address_offset,
        };
        l.with_frame_setups(&[
            (0x1000, at(0)),
            (0x1001, at(8)),
            (0x100a, at(0)),
            (0x1010, at(0)),
            (0x1011, at(8)),
            (0x1016, at(0)),
        ])
    }

    fn regs(ip: u64, words: &[u64]) -> UserStack {
        let mut u = UserStack {
            ip,
            sp: 0x7ffd_0000,
            bp: 0x7ffd_0100,
            ..UserStack::default()
        };
        u.words[..words.len()].copy_from_slice(words);
        u.len = words.len() as u8;
        u
    }

    #[test]
    fn each_prologue_and_epilogue_shape_reads_its_slot() {
        let (l, p) = (layout(true), fake_placement(0x7000).rebase());
        // foo's entry (before push rbp): the return address into main is at [sp].
        let r = regs(0x7010, &[0x7009, 0x7ffd_0100]);
        assert_eq!(
            leaf_repair(0x7010, Some(&r), p, &l),
            StackRepair::InsertCaller(0x7009)
        );
        // After push rbp, before mov rbp, rsp: [sp] is the saved rbp, [sp + 8] the return.
        let r = regs(0x7011, &[0x7ffd_0100, 0x7009]);
        assert_eq!(
            leaf_repair(0x7011, Some(&r), p, &l),
            StackRepair::InsertCaller(0x7009)
        );
        // At the ret after pop rbp: [sp] again.
        let r = regs(0x7016, &[0x7009, 0]);
        assert_eq!(
            leaf_repair(0x7016, Some(&r), p, &l),
            StackRepair::InsertCaller(0x7009)
        );
        // The body and the pop rbp itself: rbp is foo's frame, the chain is whole (the
        // second is in llvm-profgen's set, which would drop it).
        for leaf in [0x7014, 0x7015] {
            let r = regs(leaf, &[0x1234, 0x5678]);
            assert_eq!(leaf_repair(leaf, Some(&r), p, &l), StackRepair::Whole);
        }
        // A caller outside the binary (libc's qsort calling a comparator): an external
        // return address is inserted as it is.
        let r = regs(0x7010, &[0x7f00_1234, 0]);
        assert_eq!(
            leaf_repair(0x7010, Some(&r), p, &l),
            StackRepair::InsertCaller(0x7f00_1234)
        );
    }

    #[test]
    fn unrepairable_and_unavailable() {
        let (l, p) = (layout(true), fake_placement(0x7000).rebase());
        // No registers: llvm-profgen's rule.
        assert_eq!(leaf_repair(0x7010, None, p, &l), StackRepair::Unavailable);
        // The slot was not copied (dyn_size 8 while the return address is at [sp + 8]).
        let r = regs(0x7011, &[0x7ffd_0100]);
        assert_eq!(
            leaf_repair(0x7011, Some(&r), p, &l),
            StackRepair::Unrepairable
        );
        // Registers of another instruction than the chain's leaf.
        let r = regs(0x7014, &[0x7009, 0]);
        assert_eq!(
            leaf_repair(0x7010, Some(&r), p, &l),
            StackRepair::Unrepairable
        );
        // A word into the binary that does not follow a call is no return address.
        let r = regs(0x7010, &[0x7014, 0]);
        assert_eq!(
            leaf_repair(0x7010, Some(&r), p, &l),
            StackRepair::Unrepairable
        );
        // A layout that cannot decode: llvm-profgen's set decides between dropping the
        // sample (unrepairable) and keeping the chain as it is.
        let l = layout(false);
        let r = regs(0x7010, &[0x7009, 0]);
        assert_eq!(
            leaf_repair(0x7010, Some(&r), p, &l),
            StackRepair::Unrepairable
        );
        let r = regs(0x7014, &[0x7009, 0]);
        assert_eq!(leaf_repair(0x7014, Some(&r), p, &l), StackRepair::Whole);
    }
}

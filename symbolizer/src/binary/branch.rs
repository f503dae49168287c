//! The one branch classifier of x86-64 instructions ([`Transfer`]), and the two views made
//! from it:
//!
//! * llvm-profgen 19's instruction kinds ([`super::disasm::classify`]): what its
//!   `MCInstrDesc` predicates (`isCall`, `isReturn`, `isBranch`, `isUnconditionalBranch`) say,
//!   far transfers included;
//! * the hardware's taken *near* branches ([`BranchKind`], [`decode`]): what
//!   `BR_INST_RETIRED.NEAR_TAKEN` counts, the software LBR recorder's view: conditional
//!   jumps (`jcc`, `loop*`, `jrcxz`), unconditional jumps, calls and returns, direct or
//!   indirect. `syscall`, `sysenter`, `int`, far transfers and TSX `xbegin`/`xabort` are not
//!   near branches (the kernel part of a syscall is invisible to a `:u` event anyway).

use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic};

/// The longest x86 instruction, in bytes.
pub const MAX_INSTRUCTION_LEN: usize = 15;

/// How an instruction transfers control.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flow {
    /// Falls through (includes `syscall`, `int`, `sysret`, `xabort`, `xend`).
    None,
    /// A conditional jump: `jcc`, `loop*`, `jrcxz`.
    Conditional,
    /// An unconditional direct jump.
    Jump,
    /// An indirect jump (`jmp *%rax`, `jmp *(%rip)`).
    IndirectJump,
    /// A `call`, direct or indirect.
    Call,
    /// `ret`, `retf` or `iret*`.
    Return,
    /// TSX `xbegin` (branches to its fallback on abort).
    Xbegin,
}

/// One instruction's [`Flow`] and whether it is a far transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Transfer {
    /// How control moves.
    pub flow: Flow,
    /// A far call, jump or return (`lcall`, `ljmp`, `retf`, `iret*`).
    pub far: bool,
}

/// Classifies a decoded instruction.
pub fn transfer(instr: &Instruction) -> Transfer {
    let mnemonic = instr.mnemonic();
    let far = instr.is_jmp_far()
        || instr.is_call_far()
        || instr.is_jmp_far_indirect()
        || instr.is_call_far_indirect()
        || matches!(
            mnemonic,
            Mnemonic::Retf | Mnemonic::Iret | Mnemonic::Iretd | Mnemonic::Iretq
        );
    let flow = match instr.flow_control() {
        FlowControl::ConditionalBranch => Flow::Conditional,
        FlowControl::UnconditionalBranch => Flow::Jump,
        FlowControl::IndirectBranch => Flow::IndirectJump,
        // iced also gives `syscall`, `sysenter`, `vmcall`, … call flow: only CALL is a call.
        FlowControl::Call | FlowControl::IndirectCall if mnemonic == Mnemonic::Call => Flow::Call,
        FlowControl::Return
            if matches!(
                mnemonic,
                Mnemonic::Ret | Mnemonic::Retf | Mnemonic::Iret | Mnemonic::Iretd | Mnemonic::Iretq
            ) =>
        {
            Flow::Return
        }
        FlowControl::XbeginXabortXend if mnemonic == Mnemonic::Xbegin => Flow::Xbegin,
        _ => Flow::None,
    };
    Transfer { flow, far }
}

/// The kind of near branch an instruction is, if any (the hardware's view).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BranchKind {
    /// Not a near branch (includes `syscall`, `int`, far jumps).
    NotBranch,
    /// Conditional: taken only when the next RIP is not the fall-through.
    Conditional,
    /// Unconditional jump, direct or indirect: always taken.
    Jump,
    /// Call, direct or indirect: always taken.
    Call,
    /// Near return: always taken.
    Return,
}

impl BranchKind {
    /// The near-branch view of a [`Transfer`].
    pub fn of(transfer: Transfer) -> BranchKind {
        if transfer.far {
            return BranchKind::NotBranch;
        }
        match transfer.flow {
            Flow::Conditional => BranchKind::Conditional,
            Flow::Jump | Flow::IndirectJump => BranchKind::Jump,
            Flow::Call => BranchKind::Call,
            Flow::Return => BranchKind::Return,
            Flow::None | Flow::Xbegin => BranchKind::NotBranch,
        }
    }

    /// True for kinds that transfer control whenever they execute.
    pub fn always_taken(self) -> bool {
        matches!(
            self,
            BranchKind::Jump | BranchKind::Call | BranchKind::Return
        )
    }
}

/// One decoded instruction: its length and near-branch kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodedInstruction {
    /// Length in bytes (1..=15).
    pub len: u8,
    /// Near-branch kind.
    pub kind: BranchKind,
    /// True for `syscall` (after which the recorder re-reads the mappings).
    pub is_syscall: bool,
    /// A `rep`/`repne` string instruction: it executes once per element, a single step
    /// each, with the IP left on it until the last.
    pub repeats: bool,
}

impl DecodedInstruction {
    /// True when this instruction, executed at `ip`, transferred control to `next_ip` as a
    /// taken near branch.
    pub fn is_taken(&self, ip: u64, next_ip: u64) -> bool {
        match self.kind {
            BranchKind::NotBranch => false,
            BranchKind::Conditional => next_ip != ip.wrapping_add(u64::from(self.len)),
            _ => true,
        }
    }
}

/// Decodes the 64-bit instruction at the start of `bytes` (which was read from `ip`).
/// Returns `None` when the bytes are not a valid instruction (or are too short for one).
pub fn decode(bytes: &[u8], ip: u64) -> Option<DecodedInstruction> {
    let mut decoder = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let instr = decoder.decode();
    if instr.is_invalid() {
        return None;
    }
    let len = u8::try_from(instr.len()).ok()?;
    Some(DecodedInstruction {
        len,
        kind: BranchKind::of(transfer(&instr)),
        is_syscall: instr.mnemonic() == Mnemonic::Syscall,
        repeats: instr.is_string_instruction()
            && (instr.has_rep_prefix() || instr.has_repne_prefix()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::disasm::{classify, KIND_BRANCH, KIND_CALL, KIND_RETURN, KIND_UNCOND};

    fn kind(bytes: &[u8]) -> (u8, BranchKind) {
        let d = decode(bytes, 0x1000).unwrap();
        (d.len, d.kind)
    }

    /// llvm-profgen's kind bits of the instruction `bytes`.
    fn profgen_kind(bytes: &[u8]) -> u8 {
        let instr = Decoder::with_ip(64, bytes, 0x1000, DecoderOptions::NONE).decode();
        assert!(!instr.is_invalid(), "{bytes:x?}");
        classify(&instr)
    }

    #[test]
    fn classifies_near_branches_and_lengths() {
        assert_eq!(kind(&[0x74, 0x05]), (2, BranchKind::Conditional)); // je +5
        assert_eq!(
            kind(&[0x0f, 0x85, 0, 0, 0, 0]),
            (6, BranchKind::Conditional)
        ); // jne rel32
        assert_eq!(kind(&[0xe2, 0xfe]), (2, BranchKind::Conditional)); // loop
        assert_eq!(kind(&[0xeb, 0x00]), (2, BranchKind::Jump)); // jmp rel8
        assert_eq!(kind(&[0xff, 0xe0]), (2, BranchKind::Jump)); // jmp rax
        assert_eq!(kind(&[0xe8, 0, 0, 0, 0]), (5, BranchKind::Call)); // call rel32
        assert_eq!(kind(&[0xff, 0xd0]), (2, BranchKind::Call)); // call rax
        assert_eq!(kind(&[0x41, 0xff, 0x14, 0xc4]), (4, BranchKind::Call)); // call [r12+rax*8]
        assert_eq!(kind(&[0xc3]), (1, BranchKind::Return)); // ret
        assert_eq!(kind(&[0xf3, 0xc3]), (2, BranchKind::Return)); // rep ret
        assert_eq!(kind(&[0xc2, 0x08, 0x00]), (3, BranchKind::Return)); // ret 8
    }

    #[test]
    fn system_calls_and_far_transfers_are_not_near_branches() {
        assert_eq!(kind(&[0x0f, 0x05]), (2, BranchKind::NotBranch)); // syscall
        assert!(decode(&[0x0f, 0x05], 0).unwrap().is_syscall);
        assert!(!decode(&[0xc3], 0).unwrap().is_syscall);
        assert_eq!(kind(&[0xcd, 0x80]), (2, BranchKind::NotBranch)); // int 0x80
        assert_eq!(kind(&[0x48, 0xcb]), (2, BranchKind::NotBranch)); // retfq
        assert_eq!(kind(&[0x48, 0xcf]), (2, BranchKind::NotBranch)); // iretq
        assert_eq!(kind(&[0xff, 0x18]), (2, BranchKind::NotBranch)); // lcall *(%rax)
        assert_eq!(kind(&[0xc7, 0xf8, 0, 0, 0, 0]), (6, BranchKind::NotBranch)); // xbegin
        assert_eq!(kind(&[0x55]), (1, BranchKind::NotBranch)); // push rbp
        assert_eq!(kind(&[0x48, 0x89, 0xe5]), (3, BranchKind::NotBranch)); // mov rbp, rsp
    }

    #[test]
    fn llvm_profgen_view_of_the_same_instructions() {
        assert_eq!(profgen_kind(&[0x74, 0x05]), KIND_BRANCH); // je
        assert_eq!(profgen_kind(&[0xeb, 0x00]), KIND_BRANCH | KIND_UNCOND); // jmp rel8
        assert_eq!(profgen_kind(&[0xff, 0xe0]), KIND_BRANCH); // jmp rax: not unconditional
        assert_eq!(profgen_kind(&[0xe8, 0, 0, 0, 0]), KIND_CALL | KIND_UNCOND);
        assert_eq!(profgen_kind(&[0xff, 0x18]), KIND_CALL | KIND_UNCOND); // far calls count
        assert_eq!(profgen_kind(&[0xc3]), KIND_RETURN | KIND_UNCOND);
        assert_eq!(profgen_kind(&[0x48, 0xcb]), KIND_RETURN | KIND_UNCOND); // retfq
        assert_eq!(profgen_kind(&[0x48, 0xcf]), KIND_RETURN | KIND_UNCOND); // iretq
        assert_eq!(profgen_kind(&[0xc7, 0xf8, 0, 0, 0, 0]), KIND_BRANCH); // xbegin
        assert_eq!(profgen_kind(&[0x0f, 0x05]), 0); // syscall
        assert_eq!(profgen_kind(&[0x0f, 0x07]), 0); // sysret
        assert_eq!(profgen_kind(&[0xcd, 0x80]), 0); // int 0x80
    }

    #[test]
    fn taken_only_when_control_moved() {
        let jcc = decode(&[0x74, 0x05], 0x1000).unwrap();
        assert!(!jcc.is_taken(0x1000, 0x1002));
        assert!(jcc.is_taken(0x1000, 0x1007));
        // A call to the next instruction (`call +0`, the PIC idiom) is still taken.
        let call = decode(&[0xe8, 0, 0, 0, 0], 0x1000).unwrap();
        assert!(call.is_taken(0x1000, 0x1005));
        assert_eq!(decode(&[0x0f], 0x1000), None);
        assert_eq!(decode(&[], 0x1000), None);
    }
}

//! [`BranchKind`] and [`DecodedInstruction`]: what the recorder needs to know about one x86-64
//! instruction — its length and whether it is a near branch — decoded with iced-x86.
//!
//! Which instructions count: the event `BR_INST_RETIRED.NEAR_TAKEN` counts taken *near*
//! branches: conditional jumps (`jcc`, `loop*`, `jrcxz`), unconditional jumps, calls and
//! returns, direct or indirect. `syscall`, `sysenter`, `int`, far transfers and
//! TSX `xbegin`/`xabort` are not near branches and are never recorded (the kernel part of a
//! syscall is invisible to a `:u` event anyway).

use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Mnemonic};

/// The longest x86 instruction, in bytes.
pub const MAX_INSTRUCTION_LEN: usize = 15;

/// The kind of near branch an instruction is, if any.
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
    /// True for kinds that transfer control whenever they execute.
    pub fn always_taken(self) -> bool {
        matches!(
            self,
            BranchKind::Jump | BranchKind::Call | BranchKind::Return
        )
    }
}

/// One decoded instruction: its length and branch kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodedInstruction {
    /// Length in bytes (1..=15).
    pub len: u8,
    /// Near-branch kind.
    pub kind: BranchKind,
    /// True for `syscall` (after which the recorder re-reads the mappings).
    pub is_syscall: bool,
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
        kind: classify(&instr),
        is_syscall: instr.mnemonic() == Mnemonic::Syscall,
    })
}

fn classify(instr: &iced_x86::Instruction) -> BranchKind {
    // Far transfers and system calls are not near branches, whatever their flow control.
    match instr.mnemonic() {
        Mnemonic::Syscall | Mnemonic::Sysenter | Mnemonic::Sysret | Mnemonic::Sysexit => {
            return BranchKind::NotBranch;
        }
        Mnemonic::Retf | Mnemonic::Iret | Mnemonic::Iretd | Mnemonic::Iretq => {
            return BranchKind::NotBranch;
        }
        _ => {}
    }
    if instr.is_jmp_far()
        || instr.is_call_far()
        || instr.is_jmp_far_indirect()
        || instr.is_call_far_indirect()
    {
        return BranchKind::NotBranch;
    }
    match instr.flow_control() {
        FlowControl::ConditionalBranch => BranchKind::Conditional,
        FlowControl::UnconditionalBranch | FlowControl::IndirectBranch => BranchKind::Jump,
        FlowControl::Call | FlowControl::IndirectCall => BranchKind::Call,
        FlowControl::Return => {
            // `ret` / `ret imm16` (near); retf was excluded above.
            debug_assert!(!matches!(instr.code(), Code::Retfq | Code::Retfd));
            BranchKind::Return
        }
        _ => BranchKind::NotBranch,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(bytes: &[u8]) -> (u8, BranchKind) {
        let d = decode(bytes, 0x1000).unwrap();
        (d.len, d.kind)
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
    fn system_calls_and_far_transfers_are_not_branches() {
        assert_eq!(kind(&[0x0f, 0x05]), (2, BranchKind::NotBranch)); // syscall
        assert!(decode(&[0x0f, 0x05], 0).unwrap().is_syscall);
        assert!(!decode(&[0xc3], 0).unwrap().is_syscall);
        assert_eq!(kind(&[0xcd, 0x80]), (2, BranchKind::NotBranch)); // int 0x80
        assert_eq!(kind(&[0x48, 0xcb]), (2, BranchKind::NotBranch)); // retfq
        assert_eq!(kind(&[0x55]), (1, BranchKind::NotBranch)); // push rbp
        assert_eq!(kind(&[0x48, 0x89, 0xe5]), (3, BranchKind::NotBranch)); // mov rbp, rsp
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

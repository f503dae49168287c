//! A tiny eBPF instruction encoder: the few opcodes the byte filter needs, as typed
//! constructors, and [`Asm`], a list of instructions with forward labels.
//!
//! Encoding (include/uapi/linux/bpf.h `struct bpf_insn`, little-endian): byte 0 the opcode,
//! byte 1 `dst_reg:4` in the low nibble and `src_reg:4` in the high nibble, bytes 2–3 the
//! signed 16-bit `off`, bytes 4–7 the signed 32-bit `imm`. The opcode is class | size/op |
//! mode/source (include/uapi/linux/bpf_common.h, bpf.h): classes `BPF_LD` 0x00, `BPF_LDX`
//! 0x01, `BPF_ST` 0x02, `BPF_STX` 0x03, `BPF_JMP` 0x05, `BPF_ALU64` 0x07; sizes `BPF_W` 0x00,
//! `BPF_DW` 0x18; modes `BPF_IMM` 0x00, `BPF_MEM` 0x60; sources `BPF_K` 0x00 (imm),
//! `BPF_X` 0x08 (register). A jump's `off` counts instructions from the one after it.

/// An eBPF register. R0 return value and helper result, R1–R5 helper arguments (clobbered
/// by calls), R6–R9 callee-saved, R10 the read-only frame pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Reg {
    /// Return value.
    R0 = 0,
    /// Argument 1 (the context at entry).
    R1 = 1,
    /// Argument 2.
    R2 = 2,
    /// Argument 3.
    R3 = 3,
    /// Argument 4.
    R4 = 4,
    /// Argument 5.
    R5 = 5,
    /// Callee-saved.
    R6 = 6,
    /// Callee-saved.
    R7 = 7,
    /// Callee-saved.
    R8 = 8,
    /// Callee-saved.
    R9 = 9,
    /// Frame pointer (read-only; the stack is below it).
    R10 = 10,
}

/// 64-bit arithmetic operations (`BPF_OP` of class `BPF_ALU64`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum AluOp {
    /// `dst += src`.
    Add = 0x00,
    /// `dst -= src`.
    Sub = 0x10,
    /// `dst *= src`.
    Mul = 0x20,
    /// `dst /= src` (unsigned; division by zero yields 0).
    Div = 0x30,
    /// `dst &= src`.
    And = 0x50,
    /// `dst <<= src`.
    Lsh = 0x60,
    /// `dst >>= src` (logical).
    Rsh = 0x70,
    /// `dst = src`.
    Mov = 0xb0,
}

/// Conditional jumps (`BPF_OP` of class `BPF_JMP`), comparisons unsigned and 64-bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum JmpOp {
    /// `==`.
    Jeq = 0x10,
    /// `>` (unsigned).
    Jgt = 0x20,
    /// `>=` (unsigned).
    Jge = 0x30,
    /// `!=`.
    Jne = 0x50,
    /// `<` (unsigned).
    Jlt = 0xa0,
}

/// `BPF_LD`.
pub const BPF_LD: u8 = 0x00;
/// `BPF_LDX`.
pub const BPF_LDX: u8 = 0x01;
/// `BPF_ST`.
pub const BPF_ST: u8 = 0x02;
/// `BPF_STX`.
pub const BPF_STX: u8 = 0x03;
/// `BPF_JMP`.
pub const BPF_JMP: u8 = 0x05;
/// `BPF_ALU64`.
pub const BPF_ALU64: u8 = 0x07;
/// `BPF_W`: 32-bit access.
pub const BPF_W: u8 = 0x00;
/// `BPF_DW`: 64-bit access.
pub const BPF_DW: u8 = 0x18;
/// `BPF_IMM` mode (the 16-byte `ld_imm64`).
pub const BPF_IMM: u8 = 0x00;
/// `BPF_MEM` mode.
pub const BPF_MEM: u8 = 0x60;
/// `BPF_K`: the operand is `imm`.
pub const BPF_K: u8 = 0x00;
/// `BPF_X`: the operand is `src_reg`.
pub const BPF_X: u8 = 0x08;
/// `BPF_JA`.
pub const BPF_JA: u8 = 0x00;
/// `BPF_CALL`.
pub const BPF_CALL: u8 = 0x80;
/// `BPF_EXIT`.
pub const BPF_EXIT: u8 = 0x90;
/// `BPF_PSEUDO_MAP_FD`: `src_reg` of an `ld_imm64` whose `imm` is a map fd the kernel
/// replaces by the map's address.
pub const BPF_PSEUDO_MAP_FD: u8 = 1;

/// Helper function ids (`enum bpf_func_id`, the `FN(...)` list of bpf.h, in order).
pub mod helper {
    /// `void *bpf_map_lookup_elem(map, key)`.
    pub const MAP_LOOKUP_ELEM: i32 = 1;
    /// `long bpf_map_update_elem(map, key, value, flags)`.
    pub const MAP_UPDATE_ELEM: i32 = 2;
    /// `long bpf_map_delete_elem(map, key)`.
    pub const MAP_DELETE_ELEM: i32 = 3;
    /// `u32 bpf_get_prandom_u32(void)`.
    pub const GET_PRANDOM_U32: i32 = 7;
    /// `u32 bpf_get_smp_processor_id(void)`.
    pub const GET_SMP_PROCESSOR_ID: i32 = 8;
    /// `u64 bpf_get_current_pid_tgid(void)`: `tgid << 32 | tid`.
    pub const GET_CURRENT_PID_TGID: i32 = 14;
}

/// One `struct bpf_insn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Opcode.
    pub code: u8,
    /// Destination register (low nibble).
    pub dst: u8,
    /// Source register (high nibble).
    pub src: u8,
    /// Signed offset (memory displacement or jump distance).
    pub off: i16,
    /// Signed immediate.
    pub imm: i32,
}

impl Insn {
    /// The 8 bytes of the kernel's `struct bpf_insn`.
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = (self.dst & 0x0f) | (self.src & 0x0f) << 4;
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }

    fn new(code: u8, dst: Reg, src: Reg, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            dst: dst as u8,
            src: src as u8,
            off,
            imm,
        }
    }

    /// `dst op= imm` (64-bit; `imm` sign-extended).
    pub fn alu64_imm(op: AluOp, dst: Reg, imm: i32) -> Insn {
        Insn::new(BPF_ALU64 | op as u8 | BPF_K, dst, Reg::R0, 0, imm)
    }

    /// `dst op= src` (64-bit).
    pub fn alu64_reg(op: AluOp, dst: Reg, src: Reg) -> Insn {
        Insn::new(BPF_ALU64 | op as u8 | BPF_X, dst, src, 0, 0)
    }

    /// `dst = imm` (sign-extended to 64 bits).
    pub fn mov64_imm(dst: Reg, imm: i32) -> Insn {
        Insn::alu64_imm(AluOp::Mov, dst, imm)
    }

    /// `dst = src`.
    pub fn mov64_reg(dst: Reg, src: Reg) -> Insn {
        Insn::alu64_reg(AluOp::Mov, dst, src)
    }

    /// `dst = *(u64 *)(src + off)`.
    pub fn ldx_dw(dst: Reg, src: Reg, off: i16) -> Insn {
        Insn::new(BPF_LDX | BPF_DW | BPF_MEM, dst, src, off, 0)
    }

    /// `*(u64 *)(dst + off) = src`.
    pub fn stx_dw(dst: Reg, off: i16, src: Reg) -> Insn {
        Insn::new(BPF_STX | BPF_DW | BPF_MEM, dst, src, off, 0)
    }

    /// `*(u32 *)(dst + off) = src`.
    pub fn stx_w(dst: Reg, off: i16, src: Reg) -> Insn {
        Insn::new(BPF_STX | BPF_W | BPF_MEM, dst, src, off, 0)
    }

    /// `*(u32 *)(dst + off) = imm`.
    pub fn st_w(dst: Reg, off: i16, imm: i32) -> Insn {
        Insn::new(BPF_ST | BPF_W | BPF_MEM, dst, Reg::R0, off, imm)
    }

    /// `*(u64 *)(dst + off) = imm` (sign-extended).
    pub fn st_dw(dst: Reg, off: i16, imm: i32) -> Insn {
        Insn::new(BPF_ST | BPF_DW | BPF_MEM, dst, Reg::R0, off, imm)
    }

    /// `dst = map` (`ld_imm64` with `BPF_PSEUDO_MAP_FD`): two instruction slots, the second
    /// carrying the upper 32 bits of the 64-bit immediate (0 for an fd).
    pub fn ld_map_fd(dst: Reg, map_fd: i32) -> [Insn; 2] {
        [
            Insn {
                code: BPF_LD | BPF_DW | BPF_IMM,
                dst: dst as u8,
                src: BPF_PSEUDO_MAP_FD,
                off: 0,
                imm: map_fd,
            },
            Insn {
                code: 0,
                dst: 0,
                src: 0,
                off: 0,
                imm: 0,
            },
        ]
    }

    /// `if dst op imm goto +off`.
    pub fn jmp_imm(op: JmpOp, dst: Reg, imm: i32, off: i16) -> Insn {
        Insn::new(BPF_JMP | op as u8 | BPF_K, dst, Reg::R0, off, imm)
    }

    /// `if dst op src goto +off`.
    pub fn jmp_reg(op: JmpOp, dst: Reg, src: Reg, off: i16) -> Insn {
        Insn::new(BPF_JMP | op as u8 | BPF_X, dst, src, off, 0)
    }

    /// `goto +off`.
    pub fn ja(off: i16) -> Insn {
        Insn::new(BPF_JMP | BPF_JA, Reg::R0, Reg::R0, off, 0)
    }

    /// Calls helper `id` (arguments in R1–R5, result in R0).
    pub fn call(id: i32) -> Insn {
        Insn::new(BPF_JMP | BPF_CALL, Reg::R0, Reg::R0, 0, id)
    }

    /// Returns R0.
    pub fn exit() -> Insn {
        Insn::new(BPF_JMP | BPF_EXIT, Reg::R0, Reg::R0, 0, 0)
    }
}

/// A forward or backward jump target in an [`Asm`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label(usize);

/// Instructions being assembled, with labelled jumps resolved by [`Asm::finish`].
#[derive(Clone, Debug, Default)]
pub struct Asm {
    insns: Vec<Insn>,
    labels: Vec<Option<usize>>,
    fixups: Vec<(usize, Label)>,
}

/// A jump to a label that was never bound, or too far for a 16-bit offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("instruction {at}: jump target {target:?} unbound or out of range")]
pub struct AsmError {
    /// The jump's index.
    pub at: usize,
    /// Its target.
    pub target: Label,
}

impl Asm {
    /// An empty program.
    pub fn new() -> Asm {
        Asm::default()
    }

    /// Appends instructions.
    pub fn push(&mut self, insns: impl IntoIterator<Item = Insn>) -> &mut Asm {
        self.insns.extend(insns);
        self
    }

    /// A new, unbound label.
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Binds `l` to the next instruction.
    pub fn bind(&mut self, l: Label) -> &mut Asm {
        self.labels[l.0] = Some(self.insns.len());
        self
    }

    /// Appends a jump (`Insn::ja`, `jmp_imm` or `jmp_reg`; its `off` is replaced) to `l`.
    pub fn jump(&mut self, insn: Insn, l: Label) -> &mut Asm {
        self.fixups.push((self.insns.len(), l));
        self.insns.push(insn);
        self
    }

    /// The instructions with every jump offset resolved.
    pub fn finish(mut self) -> Result<Vec<Insn>, AsmError> {
        for &(at, target) in &self.fixups {
            let err = AsmError { at, target };
            let to = self.labels[target.0].ok_or(err)?;
            let off = to as i64 - (at as i64 + 1);
            self.insns[at].off = i16::try_from(off).map_err(|_| err)?;
        }
        Ok(self.insns)
    }
}

/// The program's bytes (what `BPF_PROG_LOAD`'s `insns` points at).
pub fn program_bytes(insns: &[Insn]) -> Vec<u8> {
    insns.iter().flat_map(|i| i.to_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_match_struct_bpf_insn() {
        // r6 = r1: BPF_ALU64|BPF_MOV|BPF_X = 0xbf, dst 6, src 1 -> 0x16.
        assert_eq!(
            Insn::mov64_reg(Reg::R6, Reg::R1).to_bytes(),
            [0xbf, 0x16, 0, 0, 0, 0, 0, 0]
        );
        // r0 = 1: 0xb7, imm 1.
        assert_eq!(
            Insn::mov64_imm(Reg::R0, 1).to_bytes(),
            [0xb7, 0x00, 0, 0, 1, 0, 0, 0]
        );
        // r7 = -1: imm 0xffffffff (sign-extended by the kernel).
        assert_eq!(
            Insn::mov64_imm(Reg::R7, -1).to_bytes(),
            [0xb7, 0x07, 0, 0, 0xff, 0xff, 0xff, 0xff]
        );
        // r7 = *(u64 *)(r6 + 112): BPF_LDX|BPF_DW|BPF_MEM = 0x79, off 0x0070.
        assert_eq!(
            Insn::ldx_dw(Reg::R7, Reg::R6, 112).to_bytes(),
            [0x79, 0x67, 0x70, 0x00, 0, 0, 0, 0]
        );
        // *(u64 *)(r8 + 8) = r1: 0x7b, dst 8 src 1 -> 0x18.
        assert_eq!(
            Insn::stx_dw(Reg::R8, 8, Reg::R1).to_bytes(),
            [0x7b, 0x18, 0x08, 0x00, 0, 0, 0, 0]
        );
        // *(u32 *)(r10 - 8) = r0: 0x63, dst 10, off -8 = 0xfff8.
        assert_eq!(
            Insn::stx_w(Reg::R10, -8, Reg::R0).to_bytes(),
            [0x63, 0x0a, 0xf8, 0xff, 0, 0, 0, 0]
        );
        // *(u32 *)(r10 - 4) = 0: BPF_ST|BPF_W|BPF_MEM = 0x62.
        assert_eq!(
            Insn::st_w(Reg::R10, -4, 0).to_bytes(),
            [0x62, 0x0a, 0xfc, 0xff, 0, 0, 0, 0]
        );
        assert_eq!(Insn::st_dw(Reg::R10, -16, 7).to_bytes()[..2], [0x7a, 0x0a]);
        // r2 += -4: 0x07.
        assert_eq!(
            Insn::alu64_imm(AluOp::Add, Reg::R2, -4).to_bytes(),
            [0x07, 0x02, 0, 0, 0xfc, 0xff, 0xff, 0xff]
        );
        // r7 *= r2: 0x2f; r3 /= r2: 0x3f; r0 &= 4095: 0x57; r0 <<= 32: 0x67; r0 >>= 32: 0x77;
        // r1 -= r7: 0x1f.
        assert_eq!(
            Insn::alu64_reg(AluOp::Mul, Reg::R7, Reg::R2).to_bytes()[..2],
            [0x2f, 0x27]
        );
        assert_eq!(
            Insn::alu64_reg(AluOp::Div, Reg::R3, Reg::R2).to_bytes()[0],
            0x3f
        );
        assert_eq!(
            Insn::alu64_imm(AluOp::And, Reg::R0, 4095).to_bytes(),
            [0x57, 0x00, 0, 0, 0xff, 0x0f, 0, 0]
        );
        assert_eq!(Insn::alu64_imm(AluOp::Lsh, Reg::R0, 32).to_bytes()[0], 0x67);
        assert_eq!(Insn::alu64_imm(AluOp::Rsh, Reg::R0, 32).to_bytes()[0], 0x77);
        assert_eq!(
            Insn::alu64_reg(AluOp::Sub, Reg::R1, Reg::R7).to_bytes()[..2],
            [0x1f, 0x71]
        );
        // ld_imm64 r1 = map fd 5: 0x18, src BPF_PSEUDO_MAP_FD -> 0x11, then a zero slot.
        let [a, b] = Insn::ld_map_fd(Reg::R1, 5);
        assert_eq!(a.to_bytes(), [0x18, 0x11, 0, 0, 5, 0, 0, 0]);
        assert_eq!(b.to_bytes(), [0; 8]);
        // if r0 == 0 goto +3: 0x15; if r7 > r1 goto +2: 0x2d; if r0 != 7 goto +1: 0x55.
        assert_eq!(
            Insn::jmp_imm(JmpOp::Jeq, Reg::R0, 0, 3).to_bytes(),
            [0x15, 0x00, 3, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            Insn::jmp_reg(JmpOp::Jgt, Reg::R7, Reg::R1, 2).to_bytes(),
            [0x2d, 0x17, 2, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            Insn::jmp_imm(JmpOp::Jne, Reg::R0, 7, 1).to_bytes(),
            [0x55, 0x00, 1, 0, 7, 0, 0, 0]
        );
        assert_eq!(Insn::jmp_imm(JmpOp::Jge, Reg::R0, 0, 0).code, 0x35);
        assert_eq!(Insn::jmp_imm(JmpOp::Jlt, Reg::R0, 0, 0).code, 0xa5);
        // goto -2: 0x05, off 0xfffe.
        assert_eq!(Insn::ja(-2).to_bytes(), [0x05, 0, 0xfe, 0xff, 0, 0, 0, 0]);
        // call bpf_get_prandom_u32 (7): 0x85; exit: 0x95.
        assert_eq!(
            Insn::call(helper::GET_PRANDOM_U32).to_bytes(),
            [0x85, 0, 0, 0, 7, 0, 0, 0]
        );
        assert_eq!(Insn::exit().to_bytes(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn labels_resolve_to_relative_offsets() {
        let mut a = Asm::new();
        let (out, back) = (a.label(), a.label());
        a.bind(back);
        a.push([Insn::mov64_imm(Reg::R0, 0)]); // 0
        a.jump(Insn::jmp_imm(JmpOp::Jeq, Reg::R0, 1, 0), out); // 1 -> 4: off +2
        a.push([Insn::mov64_imm(Reg::R0, 1)]); // 2
        a.jump(Insn::ja(0), back); // 3 -> 0: off -4
        a.bind(out);
        a.push([Insn::exit()]); // 4
        let insns = a.finish().unwrap();
        assert_eq!((insns[1].off, insns[3].off), (2, -4));
        assert_eq!(program_bytes(&insns).len(), 40);

        let mut a = Asm::new();
        let never = a.label();
        a.jump(Insn::ja(0), never);
        assert_eq!(
            a.finish().unwrap_err(),
            AsmError {
                at: 0,
                target: never
            }
        );
    }
}

//! [`CodeMap`]: every decoded instruction of the binary's text, classified the way
//! llvm-profgen 19's `ProfiledBinary::dissassembleSymbol` classifies `MCInstrDesc`s:
//!
//! * call (`isCall`): direct and indirect near/far calls → call set and unconditional set;
//! * return (`isReturn`): `ret`, `retf`, `iret*` → return set and unconditional set;
//! * branch (`isBranch`): `jmp`, `jcc`, `loop*`, `jrcxz`, `xbegin`, indirect `jmp` → branch set;
//!   only `isUnconditionalBranch() = isBranch && isBarrier && !isIndirectBranch` joins the
//!   unconditional set, i.e. a direct `jmp` does and `jmp *%rax` does not;
//! * `syscall`, `int`, `int3`, `ud2`, `endbr64`, … are none of these.
//!
//! Decoding walks each symbol's bytes up to the next symbol; an undecodable byte is skipped one
//! byte at a time (LLVM's X86 disassembler may skip more: undecodable bytes do not occur in
//! compiler-generated code, which pads with `int3`/`nop`).

use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind, Register};

use super::branch::{transfer, Flow};

/// Instruction-kind bit: a call.
pub const KIND_CALL: u8 = 1;
/// Instruction-kind bit: a return.
pub const KIND_RETURN: u8 = 2;
/// Instruction-kind bit: a branch (conditional, unconditional or indirect jump).
pub const KIND_BRANCH: u8 = 4;
/// Instruction-kind bit: in llvm-profgen's `UncondBranchAddrSet` (call, return, direct `jmp`).
pub const KIND_UNCOND: u8 = 8;
/// Instruction-kind bit: `push rbp` (a prologue saving the caller's frame pointer).
pub const KIND_PUSH_BP: u8 = 16;
/// Instruction-kind bit: `pop rbp` or `leave` (an epilogue restoring the caller's frame
/// pointer).
pub const KIND_POP_BP: u8 = 32;

/// The kind bits of one decoded instruction (see the module docs): the control-flow bits,
/// plus [`KIND_PUSH_BP`] / [`KIND_POP_BP`] for the frame-pointer saves and restores.
pub fn classify(instr: &Instruction) -> u8 {
    let frame = match instr.mnemonic() {
        Mnemonic::Push if is_rbp(instr) => KIND_PUSH_BP,
        Mnemonic::Pop if is_rbp(instr) => KIND_POP_BP,
        Mnemonic::Leave => KIND_POP_BP,
        _ => 0,
    };
    frame | classify_flow(instr)
}

/// True when the one operand is the register rbp.
fn is_rbp(instr: &Instruction) -> bool {
    instr.op_count() == 1
        && instr.op0_kind() == OpKind::Register
        && instr.op0_register() == Register::RBP
}

/// The control-flow kind bits: llvm-profgen's view of the one classification
/// ([`super::branch::transfer`]).
fn classify_flow(instr: &Instruction) -> u8 {
    match transfer(instr).flow {
        Flow::Call => KIND_CALL | KIND_UNCOND,
        Flow::Return => KIND_RETURN | KIND_UNCOND,
        Flow::Jump => KIND_BRANCH | KIND_UNCOND,
        Flow::IndirectJump | Flow::Conditional | Flow::Xbegin => KIND_BRANCH,
        Flow::None => 0,
    }
}

/// Decodes `[start, end)` where `section` holds the bytes of the section at `section_addr`,
/// calling `emit(address, size, kind)` for each instruction in address order. An instruction
/// may run past `end` (into the next symbol), but never past the section's bytes; an
/// undecodable byte is skipped.
pub fn decode_range(
    section: &[u8],
    section_addr: u64,
    start: u64,
    end: u64,
    mut emit: impl FnMut(u64, u8, u8),
) {
    let Some(first) = start.checked_sub(section_addr) else {
        return;
    };
    let Ok(first) = usize::try_from(first) else {
        return;
    };
    if first >= section.len() {
        return;
    }
    let mut decoder = Decoder::with_ip(64, &section[first..], start, DecoderOptions::NONE);
    let mut instr = Instruction::default();
    let mut addr = start;
    while addr < end && decoder.can_decode() {
        decoder.decode_out(&mut instr);
        if instr.is_invalid() {
            // Skip one byte and resynchronise.
            addr += 1;
            let pos = (addr - start) as usize;
            if decoder.set_position(pos).is_err() {
                break;
            }
            decoder.set_ip(addr);
            continue;
        }
        let size = instr.len() as u8;
        emit(addr, size, classify(&instr));
        addr += u64::from(size);
    }
}

/// Collects decoded instructions; [`CodeMapBuilder::finish`] makes them a [`CodeMap`].
/// Instructions go straight into the map's columns (10 bytes each): symbols are decoded in
/// address order, so the columns are usually sorted already; when they are not, `finish`
/// sorts them.
#[derive(Default)]
pub struct CodeMapBuilder {
    addrs: Vec<u64>,
    sizes: Vec<u8>,
    kinds: Vec<u8>,
    /// True once an address was pushed at or below the one before.
    unsorted: bool,
}

impl CodeMapBuilder {
    /// Reserves room for the instructions of about `code_bytes` bytes of x86 code (about
    /// four bytes an instruction), so the columns are not copied as they grow.
    pub fn reserve_for_code_bytes(&mut self, code_bytes: u64) {
        let n = usize::try_from(code_bytes / 4).unwrap_or(0);
        self.addrs.reserve(n);
        self.sizes.reserve(n);
        self.kinds.reserve(n);
    }

    /// Decodes `[start, end)` where `section` holds the bytes of the section at `section_addr`.
    /// As in llvm-profgen, an instruction may run past `end` (into the next symbol), but never
    /// past the section's bytes.
    pub fn disassemble(&mut self, section: &[u8], section_addr: u64, start: u64, end: u64) {
        decode_range(section, section_addr, start, end, |addr, size, kind| {
            self.push(addr, size, kind)
        });
    }

    /// Adds one instruction.
    pub fn push(&mut self, addr: u64, size: u8, kind: u8) {
        if self.addrs.last().is_some_and(|&last| addr <= last) {
            self.unsorted = true;
        }
        self.addrs.push(addr);
        self.sizes.push(size);
        self.kinds.push(kind);
    }

    /// Sorts by address; of duplicates the first decoded wins.
    pub fn finish(self) -> CodeMap {
        let (mut addrs, mut sizes, mut kinds) = (self.addrs, self.sizes, self.kinds);
        if self.unsorted {
            let mut entries: Vec<(u64, u8, u8)> = addrs
                .iter()
                .zip(&sizes)
                .zip(&kinds)
                .map(|((&a, &s), &k)| (a, s, k))
                .collect();
            entries.sort_by_key(|e| e.0);
            entries.dedup_by_key(|e| e.0);
            addrs.clear();
            sizes.clear();
            kinds.clear();
            for (a, s, k) in entries {
                addrs.push(a);
                sizes.push(s);
                kinds.push(k);
            }
        }
        addrs.shrink_to_fit();
        sizes.shrink_to_fit();
        kinds.shrink_to_fit();
        let uncond = addrs
            .iter()
            .zip(&kinds)
            .filter(|(_, &k)| k & KIND_UNCOND != 0)
            .map(|(&a, _)| a)
            .collect();
        let buckets = bucket_index(&addrs);
        let starts = start_bitmap(&addrs);
        CodeMap {
            addrs,
            sizes,
            kinds,
            uncond,
            buckets,
            starts,
        }
    }
}

/// Sorted instruction starts with their sizes and kinds: llvm-profgen's `CodeAddressVec`,
/// `AddressToInstSizeMap`, call/return/branch sets and `UncondBranchAddrSet` in flat vectors.
#[derive(Clone, Debug, Default)]
pub struct CodeMap {
    addrs: Vec<u64>,
    sizes: Vec<u8>,
    kinds: Vec<u8>,
    uncond: Vec<u64>,
    /// `buckets[k]`: the index of the first instruction at or above `addrs[0] + k * 2^BUCKET_SHIFT`
    /// (one more entry than buckets); empty when the span is too large, then lookups binary
    /// search the whole vector. Address lookups are the unwinder's hottest query.
    buckets: Vec<u32>,
    /// One bit per byte from `addrs[0]`: set where an instruction starts. Empty when the
    /// span is too large ([`MAX_BITMAP_SPAN`]); then [`CodeMap::contains`] uses the buckets.
    starts: Vec<u64>,
}

/// The largest code span given a start bitmap (32 MiB of bits).
const MAX_BITMAP_SPAN: u64 = 1 << 28;

/// The start bitmap of sorted `addrs` (see [`CodeMap::starts`]).
fn start_bitmap(addrs: &[u64]) -> Vec<u64> {
    let (Some(&first), Some(&last)) = (addrs.first(), addrs.last()) else {
        return Vec::new();
    };
    let span = last - first + 1;
    if span > MAX_BITMAP_SPAN {
        return Vec::new();
    }
    let mut bits = vec![0u64; span.div_ceil(64) as usize];
    for &a in addrs {
        let off = a - first;
        bits[(off / 64) as usize] |= 1 << (off % 64);
    }
    bits
}

/// Bytes per lookup bucket, as a shift: 64 bytes hold about 16 x86 instructions.
const BUCKET_SHIFT: u32 = 6;
/// At most this many buckets (64 MiB of index, a 1 GiB code span); larger spans go without.
const MAX_BUCKETS: u64 = 1 << 24;

/// The bucket index of sorted `addrs` (see [`CodeMap::buckets`]).
fn bucket_index(addrs: &[u64]) -> Vec<u32> {
    let (Some(&first), Some(&last)) = (addrs.first(), addrs.last()) else {
        return Vec::new();
    };
    let count = ((last - first) >> BUCKET_SHIFT) + 1;
    if count > MAX_BUCKETS || u32::try_from(addrs.len()).is_err() {
        return Vec::new();
    }
    let mut buckets = Vec::with_capacity(count as usize + 1);
    let mut i = 0usize;
    for k in 0..=count {
        let start = first + (k << BUCKET_SHIFT);
        while i < addrs.len() && addrs[i] < start {
            i += 1;
        }
        buckets.push(i as u32);
    }
    buckets
}

impl CodeMap {
    /// Number of decoded instructions.
    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    /// True when nothing was decoded.
    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }

    /// True when an instruction starts at `addr` (`index_of(addr).is_some()`, faster).
    #[inline]
    pub fn contains(&self, addr: u64) -> bool {
        if self.starts.is_empty() {
            return self.index_of(addr).is_some();
        }
        let Some(off) = addr.checked_sub(self.addrs[0]) else {
            return false;
        };
        self.starts
            .get((off / 64) as usize)
            .is_some_and(|w| w & (1 << (off % 64)) != 0)
    }

    /// The start bitmap and the address of its bit 0 (`None` when the map has none).
    pub fn start_bitmap(&self) -> Option<(u64, &[u64])> {
        (!self.starts.is_empty()).then(|| (self.addrs[0], self.starts.as_slice()))
    }

    /// Index of the instruction starting at `addr`.
    #[inline]
    pub fn index_of(&self, addr: u64) -> Option<usize> {
        let i = self.lower_bound(addr);
        (self.addrs.get(i) == Some(&addr)).then_some(i)
    }

    /// `lower_bound(CodeAddressVec, addr)`: the index of the first instruction at or above `addr`.
    #[inline]
    pub fn lower_bound(&self, addr: u64) -> usize {
        let Some(&first) = self.addrs.first() else {
            return 0;
        };
        if self.buckets.is_empty() {
            return self.addrs.partition_point(|&a| a < addr);
        }
        if addr <= first {
            return 0;
        }
        let k = ((addr - first) >> BUCKET_SHIFT) as usize;
        if k + 1 >= self.buckets.len() {
            return self.addrs.len();
        }
        // Every instruction of bucket k is in [lo, hi): those before are below the bucket,
        // those from hi on are at or above the next one.
        let (lo, hi) = (self.buckets[k] as usize, self.buckets[k + 1] as usize);
        lo + self.addrs[lo..hi].partition_point(|&a| a < addr)
    }

    /// The address of instruction `index`.
    #[inline]
    pub fn address(&self, index: usize) -> Option<u64> {
        self.addrs.get(index).copied()
    }

    /// All instruction addresses, sorted.
    pub fn addresses(&self) -> &[u64] {
        &self.addrs
    }

    /// The kind bits of the instruction at `addr` (0 when not code).
    #[inline]
    pub fn kind(&self, addr: u64) -> u8 {
        self.index_of(addr).map_or(0, |i| self.kinds[i])
    }

    /// The byte size of the instruction at `addr`.
    #[inline]
    pub fn size(&self, addr: u64) -> Option<u32> {
        self.index_of(addr).map(|i| u32::from(self.sizes[i]))
    }

    /// Addresses of all returns (for the epilog heuristic).
    pub fn returns(&self) -> impl Iterator<Item = u64> + '_ {
        self.addrs
            .iter()
            .zip(&self.kinds)
            .filter(|(_, k)| *k & KIND_RETURN != 0)
            .map(|(a, _)| *a)
    }

    /// `rangeCrossUncondBranch(start, end)`: some call/return/direct jump lies in `[start, end)`.
    #[inline]
    pub fn range_crosses_uncond_branch(&self, start: u64, end: u64) -> bool {
        if start >= end {
            return false;
        }
        let i = self.uncond.partition_point(|&a| a < start);
        self.uncond.get(i).is_some_and(|&a| a < end)
    }

    /// The instruction before the first one at or above `addr`.
    #[inline]
    pub fn previous_instruction(&self, addr: u64) -> Option<u64> {
        let i = self.lower_bound(addr);
        i.checked_sub(1).map(|j| self.addrs[j])
    }

    /// The instruction before `addr` when it is a call (one search instead of
    /// `previous_instruction` + `kind`).
    #[inline]
    pub fn previous_call(&self, addr: u64) -> Option<u64> {
        let j = self.lower_bound(addr).checked_sub(1)?;
        (self.kinds[j] & KIND_CALL != 0).then(|| self.addrs[j])
    }

    /// Instructions with `start <= addr <= end_inclusive`, as (address, size).
    pub fn instructions_in(
        &self,
        start: u64,
        end_inclusive: u64,
    ) -> impl Iterator<Item = (u64, u32)> + '_ {
        let from = self.lower_bound(start);
        self.addrs[from..]
            .iter()
            .zip(&self.sizes[from..])
            .take_while(move |(a, _)| **a <= end_inclusive)
            .map(|(a, s)| (*a, u32::from(*s)))
    }
}

/// `bytes` decoded as code at 0x1000, for tests.
#[cfg(test)]
pub(crate) fn decode_at_0x1000(bytes: &[u8]) -> CodeMap {
    let mut b = CodeMapBuilder::default();
    b.disassemble(bytes, 0x1000, 0x1000, 0x1000 + bytes.len() as u64);
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> CodeMap {
        decode_at_0x1000(bytes)
    }

    #[test]
    fn classifies_like_mcinstrdesc() {
        #[rustfmt::skip]
        let bytes = [
            0xf3, 0x0f, 0x1e, 0xfa,       // 0x1000 endbr64
            0xe8, 0x00, 0x00, 0x00, 0x00, // 0x1004 call rel32
            0xff, 0xd0,                   // 0x1009 call *%rax
            0x74, 0x02,                   // 0x100b je
            0xff, 0xe0,                   // 0x100d jmp *%rax   (branch, not unconditional)
            0xeb, 0x00,                   // 0x100f jmp rel8    (unconditional)
            0x0f, 0x05,                   // 0x1011 syscall     (nothing)
            0xcc,                         // 0x1013 int3
            0x0f, 0x0b,                   // 0x1014 ud2
            0xc3,                         // 0x1016 ret
        ];
        let map = decode(&bytes);
        let got: Vec<(u64, u32, u8)> = map
            .instructions_in(0, u64::MAX)
            .map(|(a, s)| (a, s, map.kind(a)))
            .collect();
        assert_eq!(
            got,
            [
                (0x1000, 4, 0),
                (0x1004, 5, KIND_CALL | KIND_UNCOND),
                (0x1009, 2, KIND_CALL | KIND_UNCOND),
                (0x100b, 2, KIND_BRANCH),
                (0x100d, 2, KIND_BRANCH),
                (0x100f, 2, KIND_BRANCH | KIND_UNCOND),
                (0x1011, 2, 0),
                (0x1013, 1, 0),
                (0x1014, 2, 0),
                (0x1016, 1, KIND_RETURN | KIND_UNCOND),
            ]
        );
        assert!(map.range_crosses_uncond_branch(0x1000, 0x1005));
        assert!(!map.range_crosses_uncond_branch(0x1000, 0x1004));
        assert!(!map.range_crosses_uncond_branch(0x100b, 0x100f));
        assert!(map.range_crosses_uncond_branch(0x100b, 0x1010));
        assert!(!map.range_crosses_uncond_branch(0x1011, 0x1016));
        assert_eq!(map.previous_instruction(0x1009), Some(0x1004));
        assert_eq!(map.previous_instruction(0x1008), Some(0x1004));
        assert_eq!(map.previous_instruction(0x1000), None);
        assert_eq!(map.size(0x1005), None);
    }

    #[test]
    fn previous_call_is_the_call_before_a_return_address() {
        #[rustfmt::skip]
        let bytes = [
            0xe8, 0x00, 0x00, 0x00, 0x00, // 0x1000 call rel32
            0xff, 0xd0,                   // 0x1005 call *%rax
            0x90,                         // 0x1007 nop
            0xc3,                         // 0x1008 ret
        ];
        let map = decode(&bytes);
        assert_eq!(map.previous_call(0x1005), Some(0x1000));
        assert_eq!(map.previous_call(0x1007), Some(0x1005));
        assert_eq!(map.previous_call(0x1008), None);
        assert_eq!(map.previous_call(0x1000), None);
        // Not an instruction start: the instruction before it counts, as with
        // `previous_instruction` + `kind`.
        assert_eq!(map.previous_call(0x1003), Some(0x1000));
        assert_eq!(map.previous_call(0x1006), Some(0x1005));
    }

    #[test]
    fn invalid_bytes_are_skipped_one_at_a_time() {
        // 0x06 (push %es) is invalid in 64-bit mode; then nop; ret.
        let map = decode(&[0x06, 0x06, 0x90, 0xc3]);
        assert_eq!(map.addresses(), [0x1002, 0x1003]);
    }

    #[test]
    fn instruction_may_run_past_symbol_end_but_not_section_end() {
        let mut b = CodeMapBuilder::default();
        // mov $1,%eax (5 bytes) decoded for a symbol covering only 2 bytes.
        b.disassemble(&[0xb8, 1, 0, 0, 0, 0xb8, 1], 0x10, 0x10, 0x12);
        // A truncated instruction at the section end is not decoded.
        b.disassemble(&[0xb8, 1, 0, 0, 0, 0xb8, 1], 0x10, 0x15, 0x17);
        let map = b.finish();
        assert_eq!(
            map.instructions_in(0, 0x100).collect::<Vec<_>>(),
            [(0x10, 5)]
        );
    }

    #[test]
    fn bucket_lookups_agree_with_binary_search() {
        // Instructions spread over several buckets with gaps, plus a far-away one.
        let mut b = CodeMapBuilder::default();
        let addrs: Vec<u64> = (0..200u64)
            .map(|i| 0x1000 + i * 7 + (i / 50) * 300)
            .chain([0x9000])
            .collect();
        for &a in &addrs {
            b.push(a, 1, 0);
        }
        let map = b.finish();
        assert_eq!(map.buckets.len(), ((0x9000 - 0x1000) >> BUCKET_SHIFT) + 2);
        for probe in (0xf00..0x9100u64).chain([0, u64::MAX]) {
            assert_eq!(
                map.lower_bound(probe),
                addrs.partition_point(|&a| a < probe),
                "{probe:#x}"
            );
            assert_eq!(
                map.index_of(probe),
                addrs.binary_search(&probe).ok(),
                "{probe:#x}"
            );
            assert_eq!(
                map.contains(probe),
                addrs.binary_search(&probe).is_ok(),
                "{probe:#x}"
            );
            let (base, words) = map.start_bitmap().unwrap();
            assert_eq!(
                unwinder::CodeBitmap { base, words }.contains(probe),
                addrs.binary_search(&probe).is_ok(),
                "{probe:#x}"
            );
        }
        assert!(CodeMap::default().start_bitmap().is_none());
        assert_eq!(CodeMap::default().lower_bound(5), 0);
        assert_eq!(CodeMap::default().index_of(5), None);
        assert!(!CodeMap::default().contains(5));
        assert_eq!(map.starts.len(), (0x9000 - 0x1000) / 64 + 1);
    }
}

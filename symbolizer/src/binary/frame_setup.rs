//! [`frame_setup`]: where the frame pointer stands at an instruction, from the
//! `push rbp` / `pop rbp` / `leave` kind bits the disassembly keeps
//! ([`super::disasm::KIND_PUSH_BP`], [`super::disasm::KIND_POP_BP`]).
//!
//! Shapes (x86-64 System V with frame pointers, as GCC and Clang emit them):
//!
//! * the function's entry, before anything ran: the return address is at `[sp]`;
//! * `endbr64; push rbp`: at the `push rbp`, still `[sp]`;
//! * after `push rbp` (at the `mov rbp, rsp`): `[sp + 8]`;
//! * after `pop rbp` or `leave`, at the `ret` or a tail-call `jmp`: `[sp]`;
//! * anywhere else `rbp` holds the function's frame ([`FrameSetup::Framed`]).

use unwinder::FrameSetup;

use super::disasm::{KIND_BRANCH, KIND_POP_BP, KIND_PUSH_BP, KIND_RETURN};

/// The frame-pointer state before the instruction at `addr` runs. `entry` is the start of
/// the function `addr` is in, when `addr` lies in its entry range (`None`: a fragment such
/// as `.cold`, where only epilogues are decoded); `kind(a)` gives an instruction's kind
/// bits and `previous(a)` the instruction before `a`.
pub fn frame_setup(
    addr: u64,
    entry: Option<u64>,
    kind: impl Fn(u64) -> u8,
    previous: impl Fn(u64) -> Option<u64>,
) -> FrameSetup {
    let at = |return_address_offset| FrameSetup::CallerFrame {
        return_address_offset,
    };
    if entry == Some(addr) {
        return at(0);
    }
    let Some(prev) = previous(addr).filter(|&p| entry.is_none_or(|e| p >= e)) else {
        return FrameSetup::Framed;
    };
    let (k, pk) = (kind(addr), kind(prev));
    if let Some(entry) = entry {
        // `endbr64; push rbp`: nothing is pushed before the push.
        if k & KIND_PUSH_BP != 0 && prev == entry && pk & KIND_PUSH_BP == 0 {
            return at(0);
        }
        // Right after the prologue's `push rbp` (the first or second instruction).
        if pk & KIND_PUSH_BP != 0 && (prev == entry || previous(prev) == Some(entry)) {
            return at(8);
        }
    }
    // `pop rbp` / `leave`, then the return or a tail call.
    if pk & KIND_POP_BP != 0 && k & (KIND_RETURN | KIND_BRANCH) != 0 {
        return at(0);
    }
    FrameSetup::Framed
}

#[cfg(test)]
mod tests {
    use super::super::disasm::{decode_at_0x1000 as decode, CodeMap};
    use super::*;

    fn setups(map: &CodeMap, entry: Option<u64>) -> Vec<(u64, FrameSetup)> {
        map.addresses()
            .iter()
            .map(|&a| {
                let s = frame_setup(a, entry, |x| map.kind(x), |x| map.previous_instruction(x));
                (a, s)
            })
            .collect()
    }

    const AT0: FrameSetup = FrameSetup::CallerFrame {
        return_address_offset: 0,
    };
    const AT8: FrameSetup = FrameSetup::CallerFrame {
        return_address_offset: 8,
    };
    const FRAMED: FrameSetup = FrameSetup::Framed;

    #[test]
    fn clang_prologue_and_pop_rbp_epilogue() {
        #[rustfmt::skip]
        let bytes = [
            0x55,                   // 0x1000 push rbp
            0x48, 0x89, 0xe5,       // 0x1001 mov rbp, rsp
            0x8b, 0x07,             // 0x1004 mov eax, [rdi]
            0x2b, 0x06,             // 0x1006 sub eax, [rsi]
            0x5d,                   // 0x1008 pop rbp
            0xc3,                   // 0x1009 ret
        ];
        let map = decode(&bytes);
        assert_eq!(
            setups(&map, Some(0x1000)),
            [
                (0x1000, AT0),
                (0x1001, AT8),
                (0x1004, FRAMED),
                (0x1006, FRAMED),
                (0x1008, FRAMED),
                (0x1009, AT0),
            ]
        );
    }

    #[test]
    fn endbr_prologue_leave_epilogue_and_tail_call() {
        #[rustfmt::skip]
        let bytes = [
            0xf3, 0x0f, 0x1e, 0xfa, // 0x1000 endbr64
            0x55,                   // 0x1004 push rbp
            0x48, 0x89, 0xe5,       // 0x1005 mov rbp, rsp
            0x48, 0x83, 0xec, 0x10, // 0x1008 sub rsp, 16
            0x74, 0x02,             // 0x100c je 0x1010
            0xc9,                   // 0x100e leave
            0xc3,                   // 0x100f ret
            0x5d,                   // 0x1010 pop rbp
            0xe9, 0x00, 0x00, 0x00, 0x00, // 0x1011 jmp rel32 (tail call)
        ];
        let map = decode(&bytes);
        assert_eq!(
            setups(&map, Some(0x1000)),
            [
                (0x1000, AT0),
                (0x1004, AT0),
                (0x1005, AT8),
                (0x1008, FRAMED),
                (0x100c, FRAMED),
                (0x100e, FRAMED),
                (0x100f, AT0),
                (0x1010, FRAMED),
                (0x1011, AT0),
            ]
        );
        // A `.cold` fragment (not the entry range): only epilogues are decoded.
        assert_eq!(
            setups(&map, None)
                .into_iter()
                .filter(|(_, s)| *s != FRAMED)
                .collect::<Vec<_>>(),
            [(0x100f, AT0), (0x1011, AT0)]
        );
    }

    #[test]
    fn push_rbp_among_saved_registers_is_no_prologue() {
        // Frameless code saving rbp as a callee-saved register after others: only the
        // entry is known.
        #[rustfmt::skip]
        let bytes = [
            0x41, 0x57,             // 0x1000 push r15
            0x41, 0x56,             // 0x1002 push r14
            0x55,                   // 0x1004 push rbp
            0x48, 0x89, 0xfd,       // 0x1005 mov rbp, rdi
            0x5d,                   // 0x1008 pop rbp
            0x41, 0x5e,             // 0x1009 pop r14
            0x41, 0x5f,             // 0x100b pop r15
            0xc3,                   // 0x100d ret
        ];
        let map = decode(&bytes);
        assert_eq!(
            setups(&map, Some(0x1000))
                .into_iter()
                .filter(|(_, s)| *s != FRAMED)
                .collect::<Vec<_>>(),
            [(0x1000, AT0)]
        );
    }
}

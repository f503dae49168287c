//! [`user_frame_chain`]: the user call chain exactly as the Linux kernel's frame-pointer walk
//! produces it for a `PERF_SAMPLE_CALLCHAIN` sample.
//!
//! The walk follows `perf_callchain_user()` in `arch/x86/events/core.c` (Linux 5.x–6.x, the
//! form with `__get_user` and `valid_user_frame`; read at torvalds/linux, matching Debian 12's
//! 6.1): the first entry is `regs->ip`; then, starting at `fp = regs->bp`, while fewer than
//! `max_stack` entries were stored: stop unless `valid_user_frame(fp, 16)` (the 16 bytes lie
//! below the top of user space, `__access_ok`); read `next_frame` at `fp` and
//! `return_address` at `fp + 8`, stop if either read faults; store `return_address`;
//! `fp = next_frame`. There is no alignment or "frames grow upwards" check on x86-64. The
//! entry count limit `max_stack` counts `regs->ip` too (`perf_callchain_store` increments
//! `ctx->nr` for every address; the `PERF_CONTEXT_USER` marker is counted separately) and is
//! `sysctl_perf_event_max_stack` = 127 by default.
//!
//! The consequence the profile pipeline must cope with: in a function's prologue before
//! `push rbp; mov rbp, rsp` (and after `pop rbp` in its epilogue) `rbp` still holds the
//! caller's frame, so the caller's own return address is missing from the chain. Newer
//! kernels (6.11+) add a uprobe-only fix-up at function entry; it does not apply to PMU
//! samples and is not reproduced.

/// `PERF_MAX_STACK_DEPTH`, the default of `/proc/sys/kernel/perf_event_max_stack`.
pub const DEFAULT_MAX_STACK: usize = 127;

/// x86-64 `TASK_SIZE_MAX` with 4-level page tables: `(1 << 47) - PAGE_SIZE`. `__access_ok`
/// accepts a range only when it ends at or below this address.
pub const TASK_SIZE_MAX: u64 = (1 << 47) - 4096;

/// Size of `struct stack_frame { next_frame; return_address; }` on x86-64.
const FRAME_SIZE: u64 = 16;

/// Walks the frame-pointer chain. `read_frame(fp)` returns the two words at `fp`
/// (`next_frame`, `return_address`) or `None` when the memory cannot be read.
/// Returns the chain leaf first: `[ip, ret1, ret2, ...]`, at most `max_stack` entries.
pub fn user_frame_chain(
    ip: u64,
    bp: u64,
    max_stack: usize,
    mut read_frame: impl FnMut(u64) -> Option<(u64, u64)>,
) -> Vec<u64> {
    let mut chain = Vec::with_capacity(16);
    if max_stack == 0 {
        return chain;
    }
    chain.push(ip);
    let mut fp = bp;
    while chain.len() < max_stack {
        if !valid_user_frame(fp) {
            break;
        }
        let Some((next_frame, return_address)) = read_frame(fp) else {
            break;
        };
        chain.push(return_address);
        fp = next_frame;
    }
    chain
}

/// `valid_user_frame(fp, sizeof(frame))` = `__access_ok(fp, 16)` on x86-64.
fn valid_user_frame(fp: u64) -> bool {
    fp <= TASK_SIZE_MAX - FRAME_SIZE
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn stack(frames: &[(u64, u64, u64)]) -> HashMap<u64, (u64, u64)> {
        frames
            .iter()
            .map(|&(fp, next, ret)| (fp, (next, ret)))
            .collect()
    }

    #[test]
    fn walks_until_a_read_fails() {
        // main's frame at 0x7ff0 (its saved rbp is 0: unreadable), f at 0x7fc0, g at 0x7fa0.
        let mem = stack(&[
            (0x7fa0, 0x7fc0, 0x401234),
            (0x7fc0, 0x7ff0, 0x401111),
            (0x7ff0, 0, 0x7f00_0000_1000),
        ]);
        let chain = user_frame_chain(0x401500, 0x7fa0, 127, |fp| mem.get(&fp).copied());
        assert_eq!(chain, vec![0x401500, 0x401234, 0x401111, 0x7f00_0000_1000]);
    }

    #[test]
    fn prologue_blind_spot_skips_the_callers_return_address() {
        // Sampled at the first instruction of g (before push rbp): rbp is still f's frame,
        // so the chain goes ip(g) -> f's return address into main; f's caller site in f (the
        // return address into f, on top of the stack at rsp) is not part of the walk.
        let mem = stack(&[(0x7fc0, 0x7ff0, 0x401111), (0x7ff0, 0, 0x0)]);
        let chain = user_frame_chain(0x401600, 0x7fc0, 127, |fp| mem.get(&fp).copied());
        assert_eq!(chain, vec![0x401600, 0x401111, 0x0]);
    }

    #[test]
    fn stops_at_max_stack_and_outside_user_space() {
        // A self-loop frame: the chain is cut at max_stack entries, ip included.
        let chain = user_frame_chain(0x1, 0x7000, 4, |_| Some((0x7000, 0x2)));
        assert_eq!(chain, vec![0x1, 0x2, 0x2, 0x2]);
        // A kernel-looking frame pointer is rejected before any read.
        let chain = user_frame_chain(0x1, 0xffff_8000_0000_0000, 127, |_| panic!("must not read"));
        assert_eq!(chain, vec![0x1]);
        // The last valid frame start is TASK_SIZE_MAX - 16.
        let chain = user_frame_chain(0x1, TASK_SIZE_MAX - 15, 127, |_| panic!("must not read"));
        assert_eq!(chain, vec![0x1]);
        assert_eq!(user_frame_chain(0x1, 0, 0, |_| None), Vec::<u64>::new());
    }
}

//! Leading-IP counting for samples without a branch stack (the daemon's cpu-clock mode).
//!
//! llvm-profgen's `--leading-ip-only` turns each sample into one pseudo range `(IP, IP)`
//! ("produce the single pseudo entry (IP, IP) if IP is code"), counted flat. Here the
//! frame-pointer call chain is kept as the context, with the same shaping the virtual
//! unwinder gives a range that lies in the leaf frame:
//!
//! * the chain is prepared like a hybrid sample's ([`crate::sample_prep::extract_call_stack`]: rebased,
//!   return addresses → call addresses, external frames collapsed, truncated at a return
//!   address that follows no call, rejected when the leaf is in a prolog/epilog — unless
//!   [`UnwindOptions::stack_repair`] and the sample's registers give the caller the chain
//!   misses there, [`crate::stack_repair`]);
//! * [`CounterKind::LineContext`]: the key is the frame addresses root first, leaf (the IP)
//!   included, as `collectSamplesFromFrameTrie` builds it for the leaf frame;
//! * [`CounterKind::ProbeContext`]: the key is the call sites above the leaf (a range is
//!   recorded on the parent frame), recursion-compressed and trimmed;
//! * an external frame truncates the context: only the frames below it are kept (the
//!   frame trie walk restarts with an empty stack there);
//! * [`CounterKind::Flat`] (no call chain, or `ignore_stack_samples`): the empty context.
//!
//! Counts are samples (not periods): `ranges[(ip, ip)] += sample.count`. On probe binaries
//! the range starts at the sampled block's probe instead
//! ([`CodeLayout::block_probe_anchor`]): `(IP, IP)` would reach a probe only when the IP is
//! the probe's own address, and the profile would stay nearly empty. No branch counters
//! are produced, so call targets and head samples stay empty in this mode.

use collector::Sample;

use crate::context::{compress_recursion, trim_context};
use crate::sample_prep::{extract_repaired_call_stack_into, StackNotes};
use crate::stack_repair::{leaf_repair, StackRepair};
use crate::{BinaryPlacement, CodeLayout, CounterKind, CounterSet, UnwindOptions, EXTERNAL_ADDR};

/// What happened to one sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeadingIpOutcome {
    /// Counted.
    Counted,
    /// Counted after the leaf's caller, which the frame-pointer chain missed, was put back
    /// from the sample's registers ([`UnwindOptions::stack_repair`]).
    Repaired,
    /// The IP is not an instruction of the binary.
    NotCode,
    /// The call stack was rejected (leaf in a prolog/epilog).
    BadStack,
    /// The call stack misses the leaf's caller and the sample's registers could not give
    /// it back: rejected, as [`LeadingIpOutcome::BadStack`].
    Unrepairable,
}

impl LeadingIpOutcome {
    /// True when the sample was counted.
    pub fn counted(self) -> bool {
        matches!(self, LeadingIpOutcome::Counted | LeadingIpOutcome::Repaired)
    }

    /// True when the call stack was rejected.
    pub fn bad_stack(self) -> bool {
        matches!(
            self,
            LeadingIpOutcome::BadStack | LeadingIpOutcome::Unrepairable
        )
    }
}

/// The counter kind leading-IP counting produces for a binary.
pub fn leading_ip_kind(
    layout: &dyn CodeLayout,
    options: &UnwindOptions,
    has_callchain: bool,
) -> CounterKind {
    if options.ignore_stack_samples || !has_callchain {
        CounterKind::Flat
    } else if layout.has_pseudo_probes() {
        CounterKind::ProbeContext
    } else {
        CounterKind::LineContext
    }
}

/// Counts one sample into `counters` (whose kind decides the key shape).
pub fn count_leading_ip(
    sample: &Sample,
    placement: &BinaryPlacement,
    layout: &dyn CodeLayout,
    options: &UnwindOptions,
    counters: &mut CounterSet,
) -> LeadingIpOutcome {
    let rebase = placement.rebase_for(sample.pid);
    let ip = rebase.canonical(sample.ip);
    if !layout.is_code(ip) {
        return LeadingIpOutcome::NotCode;
    }
    let mut outcome = LeadingIpOutcome::Counted;
    let key = match counters.kind {
        CounterKind::Flat => Vec::new(),
        kind => {
            let mut chain = Vec::with_capacity(sample.callchain.len() + 1);
            if sample.callchain.first() != Some(&sample.ip) {
                chain.push(sample.ip);
            }
            chain.extend_from_slice(&sample.callchain);
            let mut notes = StackNotes::default();
            let repair = if options.stack_repair {
                leaf_repair(chain[0], sample.user_stack.as_ref(), rebase, layout)
            } else {
                StackRepair::Unavailable
            };
            let mut stack = Vec::with_capacity(chain.len() + 1);
            if extract_repaired_call_stack_into(
                &chain, repair, rebase, layout, &mut notes, &mut stack,
            )
            .is_err()
            {
                return match repair {
                    StackRepair::Unrepairable => LeadingIpOutcome::Unrepairable,
                    _ => LeadingIpOutcome::BadStack,
                };
            }
            if let StackRepair::InsertCaller(_) = repair {
                outcome = LeadingIpOutcome::Repaired;
            }
            // Root first; the leaf frame is the IP itself.
            let frames: Vec<u64> = stack.iter().rev().copied().collect();
            let owner = if kind == CounterKind::ProbeContext {
                &frames[..frames.len() - 1]
            } else {
                &frames[..]
            };
            let start = owner
                .iter()
                .rposition(|&a| a == EXTERNAL_ADDR)
                .map_or(0, |i| i + 1);
            let mut key = owner[start..].to_vec();
            if kind == CounterKind::ProbeContext {
                compress_recursion(&mut key, options.compress_recursion);
                trim_context(&mut key, options.probe_context_depth());
            }
            key
        }
    };
    // llvm-profgen's (IP, IP) reaches a probe only when the IP is a probe's address; on
    // probe binaries the range starts at the sampled block's probe instead (layouts without
    // probes have no anchor).
    let start = layout.block_probe_anchor(ip).unwrap_or(ip);
    *counters
        .context_mut(&key)
        .ranges
        .entry((start, ip))
        .or_default() += sample.count.max(1);
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{fake_placement, FakeLayout, Inst};

    /// main: 0x1000 push, 0x1001 mov, 0x1004 call foo, 0x1009 add, 0x100d ret
    /// foo:  0x1010 push, 0x1011 mov, 0x1014 nop, 0x1015 call foo, 0x101a pop, 0x101b ret
    fn layout(probes: bool) -> FakeLayout {
        FakeLayout::new(
            &[
                (0x1000, Inst::Other),
                (0x1001, Inst::Other),
                (0x1004, Inst::Call),
                (0x1009, Inst::Other),
                (0x100d, Inst::Return),
                (0x1010, Inst::Other),
                (0x1011, Inst::Other),
                (0x1014, Inst::Other),
                (0x1015, Inst::Call),
                (0x101a, Inst::Other),
                (0x101b, Inst::Return),
            ],
            &[0x1000, 0x1010],
        )
        .with_probes(probes)
    }

    fn sample(ip: u64, callers: &[u64]) -> Sample {
        let mut callchain = vec![ip];
        callchain.extend_from_slice(callers);
        Sample {
            ip,
            callchain,
            count: 1,
            ..Sample::default()
        }
    }

    fn ranges(c: &CounterSet, key: &[u64]) -> Vec<((u64, u64), u64)> {
        c.contexts[key]
            .ranges
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect()
    }

    #[test]
    fn line_context_includes_the_leaf() {
        let l = layout(false);
        let p = fake_placement(0x7000);
        let o = UnwindOptions::default();
        let mut c = CounterSet::new(leading_ip_kind(&l, &o, true));
        assert_eq!(c.kind, CounterKind::LineContext);
        // foo's 0x1014 called from main's call at 0x1004 (return address 0x1009), twice.
        for _ in 0..2 {
            assert_eq!(
                count_leading_ip(&sample(0x7014, &[0x7009]), &p, &l, &o, &mut c),
                LeadingIpOutcome::Counted
            );
        }
        assert_eq!(ranges(&c, &[0x1004, 0x1014]), vec![((0x1014, 0x1014), 2)]);
        assert_eq!(
            count_leading_ip(&sample(0x9999, &[]), &p, &l, &o, &mut c),
            LeadingIpOutcome::NotCode
        );
        // A leaf at a function's first instruction is a prolog: rejected.
        assert_eq!(
            count_leading_ip(&sample(0x7010, &[0x7009]), &p, &l, &o, &mut c),
            LeadingIpOutcome::BadStack
        );
    }

    #[test]
    fn prologue_and_epilogue_leaves_are_repaired_from_registers() {
        use crate::FrameSetup;
        let at = |return_address_offset| FrameSetup::CallerFrame {
            return_address_offset,
        };
        let l =
            layout(false).with_frame_setups(&[(0x1010, at(0)), (0x1011, at(8)), (0x101b, at(0))]);
        let p = fake_placement(0x7000);
        let with_regs = |ip: u64, callers: &[u64], words: [u64; 2]| Sample {
            user_stack: Some(collector::UserStack {
                ip,
                sp: 0x7ffd_0000,
                bp: 0x7ffd_0100,
                words,
                len: 2,
            }),
            ..sample(ip, callers)
        };
        // foo called from main (return address 0x7009), main from outside: the kernel's
        // chain at foo's entry skips 0x7009 and goes on with main's own return address.
        let entry = with_regs(0x7010, &[0x5555_0000], [0x7009, 0x7ffd_0100]);
        let after_push = with_regs(0x7011, &[0x5555_0000], [0x7ffd_0100, 0x7009]);
        let at_ret = with_regs(0x701b, &[0x5555_0000], [0x7009, 0]);
        let off = UnwindOptions::default();
        let on = UnwindOptions {
            stack_repair: true,
            ..UnwindOptions::default()
        };
        let mut c = CounterSet::new(leading_ip_kind(&l, &on, true));
        for s in [&entry, &after_push, &at_ret] {
            // llvm-profgen's behaviour without the option.
            assert_eq!(
                count_leading_ip(s, &p, &l, &off, &mut c),
                LeadingIpOutcome::BadStack
            );
            assert_eq!(
                count_leading_ip(s, &p, &l, &on, &mut c),
                LeadingIpOutcome::Repaired
            );
        }
        // Counted under main's call site 0x1004, as a sample in foo's body is.
        assert_eq!(ranges(&c, &[0x1004, 0x1010]), vec![((0x1010, 0x1010), 1)]);
        assert_eq!(ranges(&c, &[0x1004, 0x1011]), vec![((0x1011, 0x1011), 1)]);
        assert_eq!(ranges(&c, &[0x1004, 0x101b]), vec![((0x101b, 0x101b), 1)]);
        // The pop rbp before the ret: rbp is still foo's frame, the chain is whole.
        let at_pop = with_regs(0x701a, &[0x7009, 0x5555_0000], [0x7ffd_0100, 0x7009]);
        assert_eq!(
            count_leading_ip(&at_pop, &p, &l, &on, &mut c),
            LeadingIpOutcome::Counted
        );
        assert_eq!(ranges(&c, &[0x1004, 0x101a]), vec![((0x101a, 0x101a), 1)]);
        // Without the stack word, or without registers at all.
        let mut short = after_push.clone();
        short.user_stack.as_mut().unwrap().len = 1;
        assert_eq!(
            count_leading_ip(&short, &p, &l, &on, &mut c),
            LeadingIpOutcome::Unrepairable
        );
        assert_eq!(
            count_leading_ip(&sample(0x7010, &[0x5555_0000]), &p, &l, &on, &mut c),
            LeadingIpOutcome::BadStack
        );
        assert!(LeadingIpOutcome::Repaired.counted() && LeadingIpOutcome::Unrepairable.bad_stack());
    }

    #[test]
    fn probe_context_is_the_call_sites_compressed() {
        let l = layout(true);
        let p = fake_placement(0x7000);
        let o = UnwindOptions::default();
        let mut c = CounterSet::new(leading_ip_kind(&l, &o, true));
        assert_eq!(c.kind, CounterKind::ProbeContext);
        // foo recursing twice under main: call sites 0x1004, 0x1015, 0x1015 → compressed.
        count_leading_ip(
            &sample(0x7014, &[0x701a, 0x701a, 0x7009]),
            &p,
            &l,
            &o,
            &mut c,
        );
        assert_eq!(ranges(&c, &[0x1004, 0x1015]), vec![((0x1014, 0x1014), 1)]);
        // An external frame at the bottom of the stack is stripped.
        count_leading_ip(&sample(0x7014, &[0x701a, 0x5555_0000]), &p, &l, &o, &mut c);
        assert_eq!(ranges(&c, &[0x1015]), vec![((0x1014, 0x1014), 1)]);
    }

    #[test]
    fn flat_without_callchain() {
        let l = layout(true);
        let p = fake_placement(0x7000);
        let o = UnwindOptions::default();
        let mut c = CounterSet::new(leading_ip_kind(&l, &o, false));
        let s = Sample {
            ip: 0x7014,
            count: 3,
            ..Sample::default()
        };
        count_leading_ip(&s, &p, &l, &o, &mut c);
        assert_eq!(ranges(&c, &[]), vec![((0x1014, 0x1014), 3)]);
    }

    #[test]
    fn probe_binaries_count_from_the_block_probe() {
        // Block probes at main's 0x1000 and foo's 0x1010 and 0x1014; functions
        // [0x1000, 0x1010) and [0x1010, 0x101c).
        let l = layout(true)
            .with_function_ranges(&[(0x1000, 0x1010), (0x1010, 0x101c)])
            .with_block_probes(&[0x1000, 0x1010, 0x1014]);
        let p = fake_placement(0x7000);
        let o = UnwindOptions::default();
        let mut c = CounterSet::new(leading_ip_kind(&l, &o, false));
        for ip in [0x701a, 0x7014, 0x7011, 0x7009] {
            count_leading_ip(&sample(ip, &[]), &p, &l, &o, &mut c);
        }
        assert_eq!(
            ranges(&c, &[]),
            vec![
                ((0x1000, 0x1009), 1),
                ((0x1010, 0x1011), 1),
                ((0x1014, 0x1014), 1),
                ((0x1014, 0x101a), 1)
            ]
        );
    }
}

//! From [`collector::Sample`] (process addresses) to llvm-profgen's `PerfSample`
//! (canonical addresses, external sentinel, call addresses instead of return addresses).
//!
//! llvm-profgen 19: `extractLBRStack`, `extractCallstack`, `HybridPerfReader::parseSample`.

use std::collections::BTreeSet;

use collector::LbrEntry;

use crate::code_layout::code_test;
use crate::{BinaryPlacement, CodeLayout, EXTERNAL_ADDR};

/// One LBR branch in canonical addresses; either end may be [`EXTERNAL_ADDR`], not both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Branch {
    /// The branch instruction.
    pub source: u64,
    /// Where it went.
    pub target: u64,
}

/// A prepared sample, the aggregation key (llvm-profgen's `PerfSample`): equal samples
/// are counted once with a repeat count.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct PerfSample {
    /// Leaf first: the leaf (replaced by `lbr[0].target`), then call-instruction
    /// addresses; external frames collapsed into one [`EXTERNAL_ADDR`]. Empty for LBR-only
    /// counting.
    pub call_stack: Vec<u64>,
    /// Newest branch first.
    pub lbr: Vec<Branch>,
}

/// Canonicalises a branch stack; non-code addresses become [`EXTERNAL_ADDR`] and
/// external→external entries are dropped (`extractLBRStack`).
pub fn extract_lbr_stack(
    entries: &[LbrEntry],
    placement: &BinaryPlacement,
    layout: &dyn CodeLayout,
) -> Vec<Branch> {
    let mut out = Vec::with_capacity(entries.len());
    extract_lbr_stack_into(entries, placement, layout, &mut out);
    out
}

/// [`extract_lbr_stack`] into `out` (cleared first), so a caller can reuse one buffer.
pub fn extract_lbr_stack_into(
    entries: &[LbrEntry],
    placement: &BinaryPlacement,
    layout: &dyn CodeLayout,
    out: &mut Vec<Branch>,
) {
    out.clear();
    let is_code = code_test(layout);
    for e in entries {
        let source = placement.canonical(e.from);
        let target = placement.canonical(e.to);
        let source_internal = is_code(source);
        let target_internal = is_code(target);
        if !source_internal && !target_internal {
            continue;
        }
        out.push(Branch {
            source: if source_internal {
                source
            } else {
                EXTERNAL_ADDR
            },
            target: if target_internal {
                target
            } else {
                EXTERNAL_ADDR
            },
        });
    }
}

/// Why [`extract_call_stack`] rejected a stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackRejection {
    /// No frame at all.
    Empty,
    /// The leaf is a function's first two instructions or a `ret` and the one before it,
    /// where the frame-pointer chain is not set up.
    LeafInPrologEpilog,
}

/// Side results of [`extract_call_stack`] that feed the warning summary.
#[derive(Clone, Debug, Default)]
pub struct StackNotes {
    /// The leaf frame was outside the binary.
    pub leaf_external: bool,
    /// The return address where the stack was truncated, if it was.
    pub invalid_return_address: Option<u64>,
}

/// Builds the call stack of a hybrid sample from its frame-pointer chain (leaf first):
/// canonical addresses, consecutive external frames collapsed into one
/// [`EXTERNAL_ADDR`], return addresses replaced by their call instruction (the stack is
/// truncated at the first that does not follow a call), the bottom external frame
/// stripped (`extractCallstack`).
pub fn extract_call_stack(
    callchain: &[u64],
    placement: &BinaryPlacement,
    layout: &dyn CodeLayout,
    notes: &mut StackNotes,
) -> Result<Vec<u64>, StackRejection> {
    let mut stack: Vec<u64> = Vec::with_capacity(callchain.len());
    extract_call_stack_into(callchain, placement, layout, notes, &mut stack)?;
    Ok(stack)
}

/// [`extract_call_stack`] into `stack` (cleared first), so a caller can reuse one buffer.
pub fn extract_call_stack_into(
    callchain: &[u64],
    placement: &BinaryPlacement,
    layout: &dyn CodeLayout,
    notes: &mut StackNotes,
    stack: &mut Vec<u64>,
) -> Result<(), StackRejection> {
    stack.clear();
    let is_code = code_test(layout);
    for &raw in callchain {
        let mut addr = placement.canonical(raw);
        if !is_code(addr) {
            if stack.is_empty() {
                notes.leaf_external = true;
            }
            if stack.last() != Some(&EXTERNAL_ADDR) {
                stack.push(EXTERNAL_ADDR);
            }
            continue;
        }
        if !stack.is_empty() {
            match layout.call_before_return_address(addr) {
                Some(call) if call != 0 => addr = call,
                _ => {
                    notes.invalid_return_address = Some(addr);
                    break;
                }
            }
        }
        stack.push(addr);
    }
    if stack.len() > 1 && stack.last() == Some(&EXTERNAL_ADDR) {
        stack.pop();
    }
    match stack.first() {
        None => Err(StackRejection::Empty),
        Some(&leaf) if layout.is_prolog_or_epilog(leaf) => Err(StackRejection::LeafInPrologEpilog),
        Some(_) => Ok(()),
    }
}

/// Collects the distinct invalid return addresses (llvm-profgen keeps a set).
pub fn note_invalid_return(set: &mut BTreeSet<u64>, notes: &StackNotes) {
    if let Some(a) = notes.invalid_return_address {
        set.insert(a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{FakeLayout, Inst};
    use crate::BinaryLoadInfo;

    /// main: 0x1000 push, 0x1001 mov, 0x1004 call foo, 0x1009 add, 0x100d ret
    /// foo:  0x1010 push, 0x1011 mov, 0x1014 nop, 0x1015 jmp, 0x1017 pop, 0x1018 ret
    fn layout() -> FakeLayout {
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
                (0x1015, Inst::Jump),
                (0x1017, Inst::Other),
                (0x1018, Inst::Return),
            ],
            &[0x1000, 0x1010],
        )
    }

    fn placement(base: u64) -> BinaryPlacement {
        let mut p = BinaryPlacement::new(
            BinaryLoadInfo {
                name: "p".into(),
                preferred_base: 0x1000,
                text_segment_offsets: vec![0],
                preferred_text_segment_addresses: vec![0x1000],
            },
            None,
        )
        .unwrap();
        p.observe(&collector::Mmap2Event {
            addr: base,
            pgoff: 0,
            filename: "/x/p".into(),
            ..Default::default()
        })
        .unwrap();
        p
    }

    fn lbr(from: u64, to: u64) -> LbrEntry {
        LbrEntry { from, to, flags: 0 }
    }

    #[test]
    fn lbr_rebased_external_and_dropped() {
        let p = placement(0x7000);
        let l = layout();
        let got = extract_lbr_stack(
            &[
                lbr(0x7015, 0x7017),
                lbr(0x9999, 0x7010),
                lbr(0x9999, 0x8888),
                lbr(0x7018, 0x5),
            ],
            &p,
            &l,
        );
        assert_eq!(
            got,
            vec![
                Branch {
                    source: 0x1015,
                    target: 0x1017
                },
                Branch {
                    source: EXTERNAL_ADDR,
                    target: 0x1010
                },
                Branch {
                    source: 0x1018,
                    target: EXTERNAL_ADDR
                },
            ]
        );
        // Not an instruction start: external too.
        let got = extract_lbr_stack(&[lbr(0x7012, 0x7014)], &p, &l);
        assert_eq!(
            got,
            vec![Branch {
                source: EXTERNAL_ADDR,
                target: 0x1014
            }]
        );
    }

    #[test]
    fn stack_returns_become_calls() {
        let p = placement(0x7000);
        let l = layout();
        let mut n = StackNotes::default();
        // leaf in foo, return address into main after the call, then external libc frames.
        let s = extract_call_stack(&[0x7014, 0x7009, 0x123, 0x456], &p, &l, &mut n).unwrap();
        assert_eq!(s, vec![0x1014, 0x1004]);
        assert!(!n.leaf_external && n.invalid_return_address.is_none());
    }

    #[test]
    fn stack_truncated_at_invalid_return() {
        let p = placement(0x7000);
        let l = layout();
        let mut n = StackNotes::default();
        // 0x100d follows 0x1009, not a call: truncated there.
        let s = extract_call_stack(&[0x7014, 0x700d, 0x7009], &p, &l, &mut n).unwrap();
        assert_eq!(s, vec![0x1014]);
        assert_eq!(n.invalid_return_address, Some(0x100d));
    }

    #[test]
    fn external_frames_collapse() {
        let p = placement(0x7000);
        let l = layout();
        let mut n = StackNotes::default();
        let s = extract_call_stack(&[0x1, 0x2, 0x7009, 0x3], &p, &l, &mut n).unwrap();
        assert_eq!(s, vec![EXTERNAL_ADDR, 0x1004]);
        assert!(n.leaf_external);
        let mut n = StackNotes::default();
        // Only external: the single external frame stays (size 1).
        let s = extract_call_stack(&[0x1, 0x2], &p, &l, &mut n).unwrap();
        assert_eq!(s, vec![EXTERNAL_ADDR]);
    }

    #[test]
    fn prolog_epilog_and_empty_rejected() {
        let p = placement(0x7000);
        let l = layout();
        let mut n = StackNotes::default();
        for leaf in [0x7010, 0x7011, 0x7017, 0x7018] {
            assert_eq!(
                extract_call_stack(&[leaf, 0x7009], &p, &l, &mut n),
                Err(StackRejection::LeafInPrologEpilog)
            );
        }
        assert_eq!(
            extract_call_stack(&[], &p, &l, &mut n),
            Err(StackRejection::Empty)
        );
    }
}

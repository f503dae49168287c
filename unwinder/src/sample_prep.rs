//! From [`collector::Sample`] (process addresses) to llvm-profgen's `PerfSample`
//! (canonical addresses, external sentinel, call addresses instead of return addresses).
//!
//! llvm-profgen 19: `extractLBRStack`, `extractCallstack`, `HybridPerfReader::parseSample`.

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};

use collector::prefetch::prefetch_bytes;
use collector::LbrEntry;

use crate::code_layout::code_test;
use crate::stack_repair::StackRepair;
use crate::{CodeLayout, Rebase, EXTERNAL_ADDR};

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
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PerfSample {
    /// Leaf first: the leaf (replaced by `lbr[0].target`), then call-instruction
    /// addresses; external frames collapsed into one [`EXTERNAL_ADDR`]. Empty for LBR-only
    /// counting.
    pub call_stack: Vec<u64>,
    /// Newest branch first.
    pub lbr: Vec<Branch>,
}

impl Hash for PerfSample {
    /// One word for the whole sample, computed in four independent lanes: a sample is
    /// about 70 addresses, and hashing them one after another (each step waiting for the
    /// previous multiply) was a tenth of the live pipeline's time.
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.lane_hash());
    }
}

impl PerfSample {
    /// Asks the CPU to bring the sample's addresses into the cache: a sample about to be
    /// counted after this one (they lie wherever the threads that prepared them allocated
    /// them, and counting was mostly waiting for them to arrive from memory).
    #[inline]
    pub(crate) fn prefetch(&self) {
        prefetch_bytes(self.call_stack.as_ptr().cast(), self.call_stack.len() * 8);
        prefetch_bytes(self.lbr.as_ptr().cast(), self.lbr.len() * 16);
    }

    fn lane_hash(&self) -> u64 {
        lane_hash(
            self.lbr.iter().map(|b| (b.source, b.target)),
            self.lbr.len(),
            &self.call_stack,
        )
    }
}

/// A hash of a branch stack (`(source, target)` pairs, `branches` of them) and a call
/// stack, in four independent lanes (see [`PerfSample`]'s `Hash`).
pub(crate) fn lane_hash(
    mut pairs: impl Iterator<Item = (u64, u64)>,
    branches: usize,
    frames: &[u64],
) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    #[inline(always)]
    fn step(lane: u64, word: u64) -> u64 {
        (lane.rotate_left(23) ^ word).wrapping_mul(K)
    }
    let mut lanes = [1u64, 2, 3, 4];
    while let Some((a, b)) = pairs.next() {
        lanes[0] = step(lanes[0], a);
        lanes[1] = step(lanes[1], b);
        let Some((c, d)) = pairs.next() else { break };
        lanes[2] = step(lanes[2], c);
        lanes[3] = step(lanes[3], d);
    }
    let mut chunks = frames.chunks_exact(2);
    for f in &mut chunks {
        lanes[2] = step(lanes[2], f[0]);
        lanes[3] = step(lanes[3], f[1]);
    }
    if let [f] = chunks.remainder() {
        lanes[2] = step(lanes[2], *f);
    }
    // The lengths tell apart an LBR word from a call-stack word in the same lane.
    let lengths = (branches as u64) << 32 | frames.len() as u64;
    let mut h = step(step(lanes[0], lanes[1]), step(lanes[2], lanes[3])) ^ lengths;
    // A final avalanche: hash tables take their control bits from the top of the word.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// Canonicalises a branch stack; non-code addresses become [`EXTERNAL_ADDR`] and
/// external→external entries are dropped (`extractLBRStack`).
pub fn extract_lbr_stack(
    entries: &[LbrEntry],
    rebase: Rebase,
    layout: &dyn CodeLayout,
) -> Vec<Branch> {
    let mut out = Vec::with_capacity(entries.len());
    extract_lbr_stack_into(entries, rebase, layout, &mut out);
    out
}

/// [`extract_lbr_stack`] into `out` (cleared first), so a caller can reuse one buffer.
pub fn extract_lbr_stack_into(
    entries: &[LbrEntry],
    rebase: Rebase,
    layout: &dyn CodeLayout,
    out: &mut Vec<Branch>,
) {
    out.clear();
    // The addresses asked of the layout a chunk of entries at a time (target, then
    // source: an entry's source lies in the function the next entry's target does, so
    // each source and the following target are asked one after the other, where a
    // layout's last-found function answers). A layout with a start bitmap answers
    // `is_code_each` with it.
    const CHUNK: usize = 16;
    let mut addrs = [0u64; 2 * CHUNK];
    let mut code = [false; 2 * CHUNK];
    for chunk in entries.chunks(CHUNK) {
        let n = 2 * chunk.len();
        for (e, pair) in chunk.iter().zip(addrs.chunks_exact_mut(2)) {
            pair[0] = rebase.canonical(e.to);
            pair[1] = rebase.canonical(e.from);
        }
        layout.is_code_each(&addrs[..n], &mut code[..n]);
        for k in 0..chunk.len() {
            let (target, source) = (addrs[2 * k], addrs[2 * k + 1]);
            let (target_internal, source_internal) = (code[2 * k], code[2 * k + 1]);
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
    rebase: Rebase,
    layout: &dyn CodeLayout,
    notes: &mut StackNotes,
) -> Result<Vec<u64>, StackRejection> {
    let mut stack: Vec<u64> = Vec::with_capacity(callchain.len());
    extract_call_stack_into(callchain, rebase, layout, notes, &mut stack)?;
    Ok(stack)
}

/// [`extract_call_stack`] into `stack` (cleared first), so a caller can reuse one buffer.
pub fn extract_call_stack_into(
    callchain: &[u64],
    rebase: Rebase,
    layout: &dyn CodeLayout,
    notes: &mut StackNotes,
    stack: &mut Vec<u64>,
) -> Result<(), StackRejection> {
    extract_repaired_call_stack_into(
        callchain,
        StackRepair::Unavailable,
        rebase,
        layout,
        notes,
        stack,
    )
}

/// [`extract_call_stack_into`] with the chain repaired as `repair` says
/// ([`crate::stack_repair::leaf_repair`]): [`StackRepair::Unavailable`] is llvm-profgen's
/// rule (a leaf in its prolog/epilog set is rejected); [`StackRepair::Whole`] and
/// [`StackRepair::InsertCaller`] (the return address goes after the leaf) accept the leaf
/// wherever it is; [`StackRepair::Unrepairable`] rejects the stack.
pub fn extract_repaired_call_stack_into(
    callchain: &[u64],
    repair: StackRepair,
    rebase: Rebase,
    layout: &dyn CodeLayout,
    notes: &mut StackNotes,
    stack: &mut Vec<u64>,
) -> Result<(), StackRejection> {
    stack.clear();
    let is_code = code_test(layout);
    let inserted = repair.inserted_caller();
    let frames = callchain
        .iter()
        .take(1)
        .chain(inserted.as_ref())
        .chain(callchain.iter().skip(1));
    for &raw in frames {
        let mut addr = rebase.canonical(raw);
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
    match (stack.first(), repair) {
        (None, _) => Err(StackRejection::Empty),
        (Some(_), StackRepair::Unrepairable) => Err(StackRejection::LeafInPrologEpilog),
        (Some(&leaf), StackRepair::Unavailable) if layout.is_prolog_or_epilog(leaf) => {
            Err(StackRejection::LeafInPrologEpilog)
        }
        (Some(_), _) => Ok(()),
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
    use crate::test_support::{fake_placement, FakeLayout, Inst};

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

    fn lbr(from: u64, to: u64) -> LbrEntry {
        LbrEntry { from, to, flags: 0 }
    }

    #[test]
    fn equal_samples_hash_equal_and_words_are_told_apart_by_place() {
        use std::hash::BuildHasher;
        let h = |s: &PerfSample| rustc_hash::FxBuildHasher.hash_one(s);
        let br = |source, target| Branch { source, target };
        let a = PerfSample {
            call_stack: vec![0x10, 0x20, 0x30],
            lbr: vec![br(1, 2), br(3, 4), br(5, 6)],
        };
        assert_eq!(h(&a), h(&a.clone()));
        let mut moved = a.clone();
        moved.call_stack.push(6);
        moved.lbr[2].target = EXTERNAL_ADDR;
        assert_ne!(h(&a), h(&moved));
        // Every word and every length matters.
        for i in 0..a.lbr.len() {
            let mut b = a.clone();
            b.lbr[i].source += 1;
            assert_ne!(h(&a), h(&b), "source {i}");
            let mut b = a.clone();
            b.lbr[i].target += 1;
            assert_ne!(h(&a), h(&b), "target {i}");
        }
        for i in 0..a.call_stack.len() {
            let mut b = a.clone();
            b.call_stack[i] += 1;
            assert_ne!(h(&a), h(&b), "frame {i}");
        }
        let mut shorter = a.clone();
        shorter.lbr.pop();
        assert_ne!(h(&a), h(&shorter));
        // The top bits (the map's control bytes) spread over nearby samples.
        let tops: BTreeSet<u64> = (0..64u64)
            .map(|i| {
                let mut b = a.clone();
                b.lbr[0].source = 0x1000 + i;
                h(&b) >> 57
            })
            .collect();
        assert!(tops.len() > 32, "{tops:?}");
    }

    #[test]
    fn lbr_rebased_external_and_dropped() {
        let p = fake_placement(0x7000).rebase();
        let l = layout();
        let got = extract_lbr_stack(
            &[
                lbr(0x7015, 0x7017),
                lbr(0x9999, 0x7010),
                lbr(0x9999, 0x8888),
                lbr(0x7018, 0x5),
            ],
            p,
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
        let got = extract_lbr_stack(&[lbr(0x7012, 0x7014)], p, &l);
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
        let p = fake_placement(0x7000).rebase();
        let l = layout();
        let mut n = StackNotes::default();
        // leaf in foo, return address into main after the call, then external libc frames.
        let s = extract_call_stack(&[0x7014, 0x7009, 0x123, 0x456], p, &l, &mut n).unwrap();
        assert_eq!(s, vec![0x1014, 0x1004]);
        assert!(!n.leaf_external && n.invalid_return_address.is_none());
    }

    #[test]
    fn stack_truncated_at_invalid_return() {
        let p = fake_placement(0x7000).rebase();
        let l = layout();
        let mut n = StackNotes::default();
        // 0x100d follows 0x1009, not a call: truncated there.
        let s = extract_call_stack(&[0x7014, 0x700d, 0x7009], p, &l, &mut n).unwrap();
        assert_eq!(s, vec![0x1014]);
        assert_eq!(n.invalid_return_address, Some(0x100d));
    }

    #[test]
    fn external_frames_collapse() {
        let p = fake_placement(0x7000).rebase();
        let l = layout();
        let mut n = StackNotes::default();
        let s = extract_call_stack(&[0x1, 0x2, 0x7009, 0x3], p, &l, &mut n).unwrap();
        assert_eq!(s, vec![EXTERNAL_ADDR, 0x1004]);
        assert!(n.leaf_external);
        let mut n = StackNotes::default();
        // Only external: the single external frame stays (size 1).
        let s = extract_call_stack(&[0x1, 0x2], p, &l, &mut n).unwrap();
        assert_eq!(s, vec![EXTERNAL_ADDR]);
    }

    #[test]
    fn prolog_epilog_and_empty_rejected() {
        let p = fake_placement(0x7000).rebase();
        let l = layout();
        let mut n = StackNotes::default();
        for leaf in [0x7010, 0x7011, 0x7017, 0x7018] {
            assert_eq!(
                extract_call_stack(&[leaf, 0x7009], p, &l, &mut n),
                Err(StackRejection::LeafInPrologEpilog)
            );
        }
        assert_eq!(
            extract_call_stack(&[], p, &l, &mut n),
            Err(StackRejection::Empty)
        );
    }
}

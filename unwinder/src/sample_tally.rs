//! [`SampleTally`]: distinct raw samples of one binary, each with how many times it
//! occurred and the sum of their counts.
//!
//! Preparing a sample (rebasing, the call stack, every LBR address checked against the
//! code) depends only on its call chain, its branch sources and targets, its process when
//! a process filter applies, and — when call chains are repaired — on what its
//! [`RepairWitness`] says of its registers; unwinding depends only on the prepared sample.
//! Samples equal in those are prepared and unwound once, standing for all their
//! occurrences. A batch is tallied by reference ([`crate::Aggregator::feed_batch`]); a
//! live binary's samples are tallied as copies from feed to feed
//! ([`crate::held_samples`]).

use std::borrow::Borrow;
use std::collections::HashMap;

use collector::{LbrEntry, Sample};
use rustc_hash::FxBuildHasher;

use crate::sample_prep::lane_hash;
use crate::stack_repair::RepairWitness;
use crate::{BinaryPlacement, CodeLayout};

/// No older entry with the same hash.
const NONE: u32 = u32::MAX;

/// One distinct raw sample and its occurrences.
pub struct TallyEntry<S> {
    /// The first of the samples (its own count is not theirs: see `count`).
    pub sample: S,
    /// How many samples it stands for.
    pub occurrences: u64,
    /// Their counts summed (wrapping, like llvm-profgen's `uint64_t`).
    pub count: u64,
    witness: RepairWitness,
    /// The next older entry with the same hash ([`NONE`]).
    next: u32,
}

/// Distinct raw samples in order of first occurrence (see the module docs). `S` is a
/// sample or a reference to one.
pub struct SampleTally<S> {
    /// Samples of different processes are told apart.
    by_process: bool,
    entries: Vec<TallyEntry<S>>,
    /// Hash → the newest entry with it (older ones through [`TallyEntry::next`]).
    by_hash: HashMap<u64, u32, FxBuildHasher>,
    occurrences: u64,
    sample_bytes: usize,
}

impl<S: Borrow<Sample>> SampleTally<S> {
    /// An empty tally with room for `capacity` distinct samples; `by_process`: samples of
    /// different processes are told apart (a process filter applies to them).
    pub fn with_capacity(by_process: bool, capacity: usize) -> SampleTally<S> {
        SampleTally {
            by_process,
            entries: Vec::with_capacity(capacity),
            by_hash: HashMap::with_capacity_and_hasher(capacity, FxBuildHasher),
            occurrences: 0,
            sample_bytes: 0,
        }
    }

    /// Adds one occurrence of `sample`: to the entry it matches, or as a new entry holding
    /// `keep(sample)` with the witness `witness(sample)` (asked only for a new entry).
    pub fn add<'s>(
        &mut self,
        sample: &'s Sample,
        keep: impl FnOnce(&'s Sample) -> S,
        witness: impl FnOnce(&Sample) -> RepairWitness,
    ) {
        self.occurrences += 1;
        let hash = self.hash(sample);
        let newest = self.by_hash.get(&hash).copied().unwrap_or(NONE);
        let mut at = newest;
        while at != NONE {
            let e = &mut self.entries[at as usize];
            if (!self.by_process || e.sample.borrow().pid == sample.pid)
                && same_branches_and_chain(e.sample.borrow(), sample)
                && e.witness
                    .matches(&sample.callchain, sample.user_stack.as_ref())
            {
                e.occurrences += 1;
                e.count = e.count.wrapping_add(sample.count);
                return;
            }
            at = e.next;
        }
        let index = u32::try_from(self.entries.len()).expect("fewer than 2^32 distinct samples");
        self.sample_bytes += heap_bytes(sample);
        self.entries.push(TallyEntry {
            sample: keep(sample),
            occurrences: 1,
            count: sample.count,
            witness: witness(sample),
            next: newest,
        });
        self.by_hash.insert(hash, index);
    }

    /// [`Self::add`] with the witness [`RepairWitness::of`] gives the sample when the
    /// binary is placed by `placement` (`repair`: call chains are repaired).
    pub fn add_placed<'s>(
        &mut self,
        sample: &'s Sample,
        keep: impl FnOnce(&'s Sample) -> S,
        repair: bool,
        placement: &BinaryPlacement,
        layout: &dyn CodeLayout,
    ) {
        self.add(sample, keep, |s| {
            RepairWitness::of(
                &s.callchain,
                s.user_stack.as_ref(),
                repair,
                placement,
                layout,
            )
        });
    }

    fn hash(&self, s: &Sample) -> u64 {
        let h = lane_hash(
            s.lbr.iter().map(|e| (e.from, e.to)),
            s.lbr.len(),
            &s.callchain,
        );
        if self.by_process {
            h ^ u64::from(s.pid)
        } else {
            h
        }
    }

    /// The distinct samples, in order of first occurrence.
    pub fn entries(&self) -> &[TallyEntry<S>] {
        &self.entries
    }

    /// Number of distinct samples.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no sample was added.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Samples added (the sum of the entries' occurrences).
    pub fn occurrences(&self) -> u64 {
        self.occurrences
    }

    /// A rough size in bytes of the entries, their hash index and the samples' call
    /// chains and branch stacks (what copies of the samples allocate).
    pub fn approx_bytes(&self) -> usize {
        self.sample_bytes + self.entries.len() * (std::mem::size_of::<TallyEntry<S>>() + 16)
    }

    /// Forgets every sample, keeping the allocations.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.by_hash.clear();
        self.occurrences = 0;
        self.sample_bytes = 0;
    }
}

/// Same call chain and same branch sources and targets (their flags and cycles aside).
fn same_branches_and_chain(a: &Sample, b: &Sample) -> bool {
    a.callchain == b.callchain
        && a.lbr.len() == b.lbr.len()
        && a.lbr
            .iter()
            .zip(&b.lbr)
            .all(|(x, y)| x.from == y.from && x.to == y.to)
}

/// The bytes a copy of `s` allocates.
fn heap_bytes(s: &Sample) -> usize {
    s.callchain.len() * 8 + s.lbr.len() * std::mem::size_of::<LbrEntry>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use collector::UserStack;

    fn sample(pid: u32, branches: &[(u64, u64)], chain: &[u64], count: u64) -> Sample {
        Sample {
            pid,
            callchain: chain.to_vec(),
            lbr: branches
                .iter()
                .map(|&(from, to)| LbrEntry { from, to, flags: 0 })
                .collect(),
            count,
            ..Sample::default()
        }
    }

    fn tally(samples: &[Sample], by_process: bool) -> SampleTally<&Sample> {
        let mut t = SampleTally::with_capacity(by_process, 4);
        for s in samples {
            t.add(s, |s| s, |_| RepairWitness::Ignored);
        }
        t
    }

    /// Flags, cycles and (without a process filter) the process do not tell samples
    /// apart; a branch, the chain or (with a filter) the process do. Counts add up.
    #[test]
    fn samples_equal_in_what_preparation_reads_are_one_entry() {
        let mut cycles = sample(1, &[(0x10, 0x20), (0x30, 0x40)], &[0x25, 0x99], 2);
        cycles.lbr[1].flags = 7 << 4;
        let samples = [
            sample(1, &[(0x10, 0x20), (0x30, 0x40)], &[0x25, 0x99], 1),
            cycles,
            sample(2, &[(0x10, 0x20), (0x30, 0x40)], &[0x25, 0x99], 4),
            sample(1, &[(0x10, 0x20), (0x30, 0x41)], &[0x25, 0x99], 8),
            sample(1, &[(0x10, 0x20), (0x30, 0x40)], &[0x25, 0x98], 16),
        ];
        let t = tally(&samples, false);
        let got: Vec<(u64, u64)> = t
            .entries()
            .iter()
            .map(|e| (e.occurrences, e.count))
            .collect();
        assert_eq!(got, [(3, 7), (1, 8), (1, 16)]);
        assert_eq!(t.occurrences(), 5);
        let t = tally(&samples, true);
        let got: Vec<(u32, u64)> = t
            .entries()
            .iter()
            .map(|e| (e.sample.pid, e.count))
            .collect();
        assert_eq!(got, [(1, 3), (2, 4), (1, 8), (1, 16)]);
    }

    /// Samples whose witnesses differ (another return address at a prologue, registers
    /// or none) are told apart; a stack word no witness reads is not.
    #[test]
    fn the_repair_witness_tells_samples_apart() {
        let regs = |ip: u64, word: u64| UserStack {
            ip,
            sp: 0x7ffd_0000 + word,
            words: [word, 0x1234],
            len: 2,
            ..UserStack::default()
        };
        let at = |stack: Option<UserStack>| {
            let mut s = sample(1, &[(0x10, 0x20)], &[0x20, 0x99], 1);
            s.user_stack = stack;
            s
        };
        let samples = [
            at(Some(regs(0x20, 0x5009))),
            at(Some(regs(0x20, 0x5009))),
            at(Some(regs(0x20, 0x6009))),
            at(Some(regs(0x21, 0x5009))),
            at(None),
        ];
        let mut t = SampleTally::with_capacity(false, 4);
        for s in &samples {
            let witness = |s: &Sample| match s.user_stack {
                Some(r) => RepairWitness::StackWord {
                    offset: 0,
                    regs_of_leaf: r.ip == s.callchain[0],
                    word: r.word_at(0),
                },
                None => RepairWitness::NoRegisters,
            };
            t.add(s, |s| s.clone(), witness);
        }
        let got: Vec<u64> = t.entries().iter().map(|e| e.occurrences).collect();
        assert_eq!(got, [2, 1, 1, 1]);
        assert!(t.approx_bytes() >= 4 * (2 * 8 + 24));
        // A leaf whose frame is set up reads no word: any registers are alike.
        let mut t = SampleTally::with_capacity(false, 4);
        for s in &samples[..4] {
            t.add(s, |s| s, |_| RepairWitness::LeafOnly);
        }
        assert_eq!(t.len(), 1);
        t.clear();
        assert!(t.is_empty() && t.occurrences() == 0);
    }
}

//! [`SampleTally`]: distinct raw samples of one binary, each with how many times it
//! occurred and the sum of their counts.
//!
//! Preparing a sample (rebasing, the call stack, every LBR address checked against the
//! code) depends only on its call chain, its branch sources and targets, its process when
//! a process filter applies, and — when call chains are repaired — on what its
//! [`RepairWitness`] says of its registers; unwinding depends only on the prepared sample.
//! Samples equal in those are prepared and unwound once, standing for all their
//! occurrences: a batch's ([`crate::Aggregator::feed_batch`]), a live binary's from feed
//! to feed ([`crate::held_samples`]). What an entry keeps of its samples is their branch
//! sources and targets and call chain, in one store of words shared by all entries, and
//! the first sample's process, IP and registers.

use std::collections::HashMap;

use collector::prefetch::prefetch_bytes;
use collector::{LbrEntry, Sample, UserStack};
use rustc_hash::FxBuildHasher;

use crate::sample_prep::lane_hash;
use crate::stack_repair::RepairWitness;
use crate::{BinaryPlacement, CodeLayout};

/// No older entry with the same hash.
const NONE: u32 = u32::MAX;

/// How many samples ahead of its addition [`SampleTally::add_all_placed`] hashes a sample.
const LOOKAHEAD: usize = 4;

/// One distinct raw sample and its occurrences. Its branches and call chain are kept in
/// the tally's word store (read back with [`SampleTally::sample_into`]); the rest of what
/// preparation reads is the first sample's.
pub struct TallyEntry {
    /// How many samples it stands for.
    pub occurrences: u64,
    /// Their counts summed (wrapping, like llvm-profgen's `uint64_t`).
    pub count: u64,
    /// The first sample's process.
    pub pid: u32,
    /// The first sample's IP.
    ip: u64,
    /// The first sample's registers and stack words (alike in all of them as far as
    /// `witness` reads).
    user_stack: Option<UserStack>,
    witness: RepairWitness,
    /// Where its words start in [`SampleTally::words`]: `2 * branches` words of branch
    /// sources and targets, then `frames` call-chain words.
    at: usize,
    branches: usize,
    frames: usize,
    /// The next older entry with the same hash ([`NONE`]).
    next: u32,
}

/// Distinct raw samples in order of first occurrence (see the module docs). Their branch
/// stacks and call chains sit one after another in one store of words, so comparing a
/// sample with an entry reads consecutive memory and a new entry allocates nothing of
/// its own.
pub struct SampleTally {
    /// Samples of different processes are told apart.
    by_process: bool,
    entries: Vec<TallyEntry>,
    /// Each entry's branch sources and targets, then its call chain.
    words: Vec<u64>,
    /// Hash → the newest entry with it (older ones through [`TallyEntry::next`]) and
    /// where its words start (its `at`, kept here too so that a lookahead fetches the
    /// words without waiting for the entry).
    by_hash: HashMap<u64, (u32, usize), FxBuildHasher>,
    occurrences: u64,
}

impl SampleTally {
    /// An empty tally with room for `capacity` distinct samples; `by_process`: samples of
    /// different processes are told apart (a process filter applies to them).
    pub fn with_capacity(by_process: bool, capacity: usize) -> SampleTally {
        SampleTally {
            by_process,
            entries: Vec::with_capacity(capacity),
            words: Vec::new(),
            by_hash: HashMap::with_capacity_and_hasher(capacity, FxBuildHasher),
            occurrences: 0,
        }
    }

    /// The tally with room for `words` words of branches and call chains reserved: a
    /// tally that fills to a known bound then never grows its store by copying it (nor
    /// touches fresh pages of a larger copy) in the middle of a feed. Reserved, not
    /// written: the pages cost memory as the samples fill them.
    pub fn with_word_room(mut self, words: usize) -> SampleTally {
        self.words.reserve(words);
        self
    }

    /// Adds one occurrence of `sample`: to the entry it matches, or as a new entry with
    /// the witness `witness(sample)` (asked only for a new entry).
    pub fn add(&mut self, sample: &Sample, witness: impl FnOnce(&Sample) -> RepairWitness) {
        let hash = self.hash(sample);
        self.add_hashed(sample, hash, witness);
    }

    /// [`Self::add`] of a sample whose [`Self::hash`] is `hash`.
    fn add_hashed(
        &mut self,
        sample: &Sample,
        hash: u64,
        witness: impl FnOnce(&Sample) -> RepairWitness,
    ) {
        self.occurrences += 1;
        let newest = self.by_hash.get(&hash).map_or(NONE, |&(at, _)| at);
        let mut at = newest;
        while at != NONE {
            let e = &self.entries[at as usize];
            if self.holds(e, sample)
                && e.witness
                    .matches(&sample.callchain, sample.user_stack.as_ref())
            {
                let e = &mut self.entries[at as usize];
                e.occurrences += 1;
                e.count = e.count.wrapping_add(sample.count);
                return;
            }
            at = e.next;
        }
        let index = u32::try_from(self.entries.len()).expect("fewer than 2^32 distinct samples");
        let words_at = self.words.len();
        self.words
            .extend(sample.lbr.iter().flat_map(|b| [b.from, b.to]));
        self.words.extend_from_slice(&sample.callchain);
        self.entries.push(TallyEntry {
            occurrences: 1,
            count: sample.count,
            pid: sample.pid,
            ip: sample.ip,
            user_stack: sample.user_stack,
            witness: witness(sample),
            at: words_at,
            branches: sample.lbr.len(),
            frames: sample.callchain.len(),
            next: newest,
        });
        self.by_hash.insert(hash, (index, words_at));
    }

    /// [`Self::add`] of each sample of `samples` that `keep` keeps, in order, with the
    /// witness [`RepairWitness::of`] gives it when the binary is placed by `placement`
    /// (`repair`: call chains are repaired).
    ///
    /// Adding a sample that repeats an entry is mostly waiting for the entry's words (the
    /// store is megabytes, far from the core) and for the sample's own: the samples are
    /// hashed [`LOOKAHEAD`] samples ahead of their addition, and the words of the entry
    /// each hash names are fetched into the cache then, while the samples before it are
    /// added.
    pub fn add_all_placed(
        &mut self,
        samples: &[Sample],
        mut keep: impl FnMut(&Sample) -> bool,
        repair: bool,
        placement: &BinaryPlacement,
        layout: &dyn CodeLayout,
    ) {
        let mut hashes = [0u64; LOOKAHEAD];
        for (i, s) in samples.iter().enumerate().take(LOOKAHEAD) {
            hashes[i] = self.hash_and_prefetch(s);
        }
        for (i, s) in samples.iter().enumerate() {
            if let Some(ahead) = samples.get(i + 2 * LOOKAHEAD) {
                ahead.prefetch();
            }
            let hash = hashes[i % LOOKAHEAD];
            if let Some(ahead) = samples.get(i + LOOKAHEAD) {
                hashes[i % LOOKAHEAD] = self.hash_and_prefetch(ahead);
            }
            if keep(s) {
                self.add_hashed(s, hash, placed_witness(repair, placement, layout));
            }
        }
    }

    /// The hash of `s`, the words of the newest entry with it asked into the cache.
    #[inline]
    fn hash_and_prefetch(&self, s: &Sample) -> u64 {
        let hash = self.hash(s);
        if let Some(&(at, words_at)) = self.by_hash.get(&hash) {
            prefetch_bytes(
                self.entries.as_ptr().wrapping_add(at as usize).cast(),
                std::mem::size_of::<TallyEntry>(),
            );
            prefetch_bytes(
                self.words.as_ptr().wrapping_add(words_at).cast(),
                (2 * s.lbr.len() + s.callchain.len()) * 8,
            );
        }
        hash
    }

    /// True when `e` stands for `s`: the same call chain, branch sources and targets and,
    /// when processes are told apart, process (the witness aside).
    fn holds(&self, e: &TallyEntry, s: &Sample) -> bool {
        if e.branches != s.lbr.len()
            || e.frames != s.callchain.len()
            || (self.by_process && e.pid != s.pid)
        {
            return false;
        }
        let (branches, chain) = self.words_of(e);
        chain == s.callchain.as_slice()
            && branches
                .chunks_exact(2)
                .zip(&s.lbr)
                .all(|(w, b)| w[0] == b.from && w[1] == b.to)
    }

    /// An entry's branch words (source, target, ...) and call chain.
    fn words_of(&self, e: &TallyEntry) -> (&[u64], &[u64]) {
        let branch_words = 2 * e.branches;
        self.words[e.at..e.at + branch_words + e.frames].split_at(branch_words)
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
    pub fn entries(&self) -> &[TallyEntry] {
        &self.entries
    }

    /// Writes into `out` the sample `e` stands for: its process, IP, registers, call chain
    /// and branches as the first of its samples had them; its thread, time, branch flags
    /// and cycles as 0 (preparation reads none of them) and its count as one sample's
    /// (see [`TallyEntry::count`] for theirs).
    pub fn sample_into(&self, e: &TallyEntry, out: &mut Sample) {
        let (branches, chain) = self.words_of(e);
        out.pid = e.pid;
        out.tid = 0;
        out.time = 0;
        out.ip = e.ip;
        out.user_stack = e.user_stack;
        out.count = 1;
        out.callchain.clear();
        out.callchain.extend_from_slice(chain);
        out.lbr.clear();
        out.lbr.extend(branches.chunks_exact(2).map(|w| LbrEntry {
            from: w[0],
            to: w[1],
            flags: 0,
        }));
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

    /// A rough size in bytes of the entries, their hash index and their words.
    pub fn approx_bytes(&self) -> usize {
        self.words.len() * 8 + self.entries.len() * (std::mem::size_of::<TallyEntry>() + 16)
    }

    /// Forgets every sample, keeping the allocations.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.words.clear();
        self.by_hash.clear();
        self.occurrences = 0;
    }
}

/// The witness [`RepairWitness::of`] gives a sample when the binary is placed by
/// `placement` (`repair`: call chains are repaired).
fn placed_witness<'a>(
    repair: bool,
    placement: &'a BinaryPlacement,
    layout: &'a dyn CodeLayout,
) -> impl Fn(&Sample) -> RepairWitness + 'a {
    move |s| {
        RepairWitness::of(
            &s.callchain,
            s.user_stack.as_ref(),
            repair,
            placement.rebase_for(s.pid),
            layout,
        )
    }
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

    fn tally(samples: &[Sample], by_process: bool) -> SampleTally {
        let mut t = SampleTally::with_capacity(by_process, 4);
        for s in samples {
            t.add(s, |_| RepairWitness::Ignored);
        }
        t
    }

    /// An entry gives back what preparation reads of its first sample: process, IP,
    /// registers, call chain, branch sources and targets (flags and cycles as 0).
    #[test]
    fn an_entry_gives_back_its_first_sample() {
        let mut first = sample(
            7,
            &[(0x10, 0x20), (0x30, 0x40), (0x50, 0x60)],
            &[0x65, 0x99],
            3,
        );
        first.ip = 0x65;
        (first.tid, first.time) = (9, 77);
        first.lbr[2].flags = 0x35;
        first.user_stack = Some(UserStack {
            ip: 0x65,
            sp: 0x7ffd_0000,
            bp: 0x7ffd_0040,
            words: [0x5009, 0x1234],
            len: 2,
        });
        let mut other = sample(7, &[(0x1, 0x2)], &[0x2], 1);
        other.user_stack = None;
        let mut t = SampleTally::with_capacity(false, 2);
        t.add(&other, |_| RepairWitness::Ignored);
        t.add(&first, |_| RepairWitness::Ignored);
        t.add(&first, |_| RepairWitness::Ignored);
        let mut out = sample(1, &[(0xdead, 0xbeef); 40], &[0xdead; 9], 5);
        (out.tid, out.time) = (4, 1_000_000);
        t.sample_into(&t.entries()[1], &mut out);
        let mut want = first.clone();
        (want.tid, want.time) = (0, 0);
        want.lbr[2].flags = 0;
        want.count = 1;
        assert_eq!(out, want);
        assert_eq!((t.entries()[1].occurrences, t.entries()[1].count), (2, 6));
        t.sample_into(&t.entries()[0], &mut out);
        assert_eq!(
            (out.lbr.len(), out.callchain.as_slice(), out.user_stack),
            (1, &[0x2][..], None)
        );
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
        let got: Vec<(u32, u64)> = t.entries().iter().map(|e| (e.pid, e.count)).collect();
        assert_eq!(got, [(1, 3), (2, 4), (1, 8), (1, 16)]);
    }

    /// A batch added at once (samples hashed ahead of their addition) gives the entries
    /// adding its kept samples one at a time gives: the same order, occurrences, counts
    /// and words, for batches shorter and longer than the lookahead, with samples left
    /// out by `keep` and entries already in the tally from an earlier batch.
    #[test]
    fn a_batch_tallies_like_adding_one_sample_at_a_time() {
        let distinct: Vec<Sample> = (0..7u64)
            .map(|k| {
                let branches: Vec<(u64, u64)> =
                    (0..=k).map(|i| (0x100 * k + i, 0x200 + i)).collect();
                sample(1 + (k % 2) as u32, &branches, &[0x99 + k, 0x500], 1 << k)
            })
            .collect();
        let batch = |n: usize, shift: usize| -> Vec<Sample> {
            (0..n)
                .map(|i| {
                    let mut s = distinct[(i * i + shift) % distinct.len()].clone();
                    if i % 5 == 3 {
                        s.lbr.clear();
                    }
                    s
                })
                .collect()
        };
        let layout = crate::test_support::main_calls_foo();
        let placement =
            BinaryPlacement::new(crate::test_support::main_calls_foo_load(), None).unwrap();
        for by_process in [false, true] {
            let mut one_by_one = SampleTally::with_capacity(by_process, 0);
            let mut batched = SampleTally::with_capacity(by_process, 0);
            let mut left_out = 0;
            for (n, shift) in [(2, 0), (LOOKAHEAD + 1, 3), (40, 1), (3 * LOOKAHEAD, 5)] {
                let samples = batch(n, shift);
                for s in samples.iter().filter(|s| !s.lbr.is_empty()) {
                    one_by_one.add(s, placed_witness(false, &placement, &layout));
                }
                let keep = |s: &Sample| {
                    left_out += usize::from(s.lbr.is_empty());
                    !s.lbr.is_empty()
                };
                batched.add_all_placed(&samples, keep, false, &placement, &layout);
            }
            assert_eq!(left_out, 11);
            assert_eq!(batched.occurrences(), one_by_one.occurrences());
            assert_eq!(batched.len(), one_by_one.len());
            assert!(batched.len() >= 6 && batched.occurrences() > 40);
            let (mut a, mut b) = (Sample::default(), Sample::default());
            for (x, y) in batched.entries().iter().zip(one_by_one.entries()) {
                assert_eq!(
                    (x.occurrences, x.count, x.pid),
                    (y.occurrences, y.count, y.pid)
                );
                batched.sample_into(x, &mut a);
                one_by_one.sample_into(y, &mut b);
                assert_eq!(a, b);
            }
        }
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
            t.add(s, witness);
        }
        let got: Vec<u64> = t.entries().iter().map(|e| e.occurrences).collect();
        assert_eq!(got, [2, 1, 1, 1]);
        assert!(t.approx_bytes() >= 4 * (2 * 8 + 24));
        // A leaf whose frame is set up reads no word: any registers are alike.
        let mut t = SampleTally::with_capacity(false, 4);
        for s in &samples[..4] {
            t.add(s, |_| RepairWitness::LeafOnly);
        }
        assert_eq!(t.len(), 1);
        t.clear();
        assert!(t.is_empty() && t.occurrences() == 0);
    }
}

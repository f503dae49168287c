//! [`CountedSamples`]: the fingerprints of the distinct prepared samples an input read once
//! has counted, so its samples can be counted as they are prepared instead of held until
//! the end ([`crate::Aggregator::counting_as_fed`]).
//!
//! llvm-profgen aggregates the prepared samples of its whole input and unwinds each
//! distinct one once. Counters are sums over samples, so counting each sample as it comes
//! gives the same counters; what llvm-profgen counts once per distinct sample (aggregated
//! samples, branches, bogus traces, unwinding mismatches) is counted for a sample's first
//! occurrence only, which this set tells.

use std::collections::HashSet;
use std::sync::Mutex;

use rustc_hash::FxBuildHasher;

use crate::PerfSample;

/// The 128-bit fingerprints of the distinct prepared samples counted so far: 16 bytes a
/// distinct sample (a prepared sample itself takes about 600). Two distinct samples share
/// a fingerprint with odds of about n²/2¹²⁹ among n samples (xxh3-128 of the sample's
/// words); they would then share its once-per-sample statistics, never its counts.
#[derive(Default, Debug)]
pub struct CountedSamples {
    seen: Mutex<HashSet<u128, FxBuildHasher>>,
}

impl CountedSamples {
    /// No sample counted yet.
    pub fn new() -> CountedSamples {
        CountedSamples::default()
    }

    /// Number of distinct samples counted.
    pub fn len(&self) -> usize {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// No sample was counted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records `sample` (its words gathered into `scratch`, a buffer the caller reuses) and
    /// tells whether it is its first occurrence. Threads may call it at once.
    pub fn first_occurrence(&self, sample: &PerfSample, scratch: &mut Vec<u64>) -> bool {
        let key = fingerprint(sample, scratch);
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key)
    }
}

/// xxh3-128 of the sample's branch count, branches and call stack, as little-endian words.
fn fingerprint(sample: &PerfSample, words: &mut Vec<u64>) -> u128 {
    // Gathered as words (one capacity check for the sample) and hashed as their bytes.
    words.clear();
    words.reserve(1 + 2 * sample.lbr.len() + sample.call_stack.len());
    words.push((sample.lbr.len() as u64).to_le());
    words.extend(
        sample
            .lbr
            .iter()
            .flat_map(|b| [b.source.to_le(), b.target.to_le()]),
    );
    words.extend(sample.call_stack.iter().map(|f| f.to_le()));
    // SAFETY: the words are initialized memory, viewed as the bytes they occupy (`u8`
    // has no alignment to keep and every byte value is valid); the view ends with
    // the borrow of `words`.
    let bytes = unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), words.len() * 8) };
    xxhash_rust::xxh3::xxh3_128(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Branch;

    fn sample(leaf: u64, stack: &[u64]) -> PerfSample {
        PerfSample {
            call_stack: stack.to_vec(),
            lbr: vec![Branch {
                source: 0x1010,
                target: leaf,
            }],
        }
    }

    #[test]
    fn only_the_first_occurrence_of_a_sample_is_first() {
        let counted = CountedSamples::new();
        let mut scratch = Vec::new();
        assert!(counted.is_empty());
        assert!(counted.first_occurrence(&sample(0x1000, &[0x1000, 0x2000]), &mut scratch));
        assert!(!counted.first_occurrence(&sample(0x1000, &[0x1000, 0x2000]), &mut scratch));
        assert!(counted.first_occurrence(&sample(0x1004, &[0x1004, 0x2000]), &mut scratch));
        assert_eq!(counted.len(), 2);
    }

    #[test]
    fn a_branch_word_and_a_stack_word_do_not_stand_for_each_other() {
        // The same words, split differently between the branch stack and the call stack.
        let counted = CountedSamples::new();
        let mut scratch = Vec::new();
        let two_branches = PerfSample {
            call_stack: vec![],
            lbr: vec![
                Branch {
                    source: 1,
                    target: 2,
                },
                Branch {
                    source: 3,
                    target: 4,
                },
            ],
        };
        let one_branch = PerfSample {
            call_stack: vec![3, 4],
            lbr: vec![Branch {
                source: 1,
                target: 2,
            }],
        };
        assert!(counted.first_occurrence(&two_branches, &mut scratch));
        assert!(counted.first_occurrence(&one_branch, &mut scratch));
    }
}

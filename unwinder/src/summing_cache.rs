//! [`SummingCache`]: counts summed in a small direct-mapped table on their way to a hash
//! map.
//!
//! Unwinding adds a count per range and per branch of every sample to a map keyed by the
//! range (and context): hundreds of thousands of additions to a few thousand keys, most of
//! them to the keys of the program's hot loops. A map that large misses the caches on
//! every lookup; this table (a slot per key hash, 32 KiB for the counter table's keys)
//! takes most additions, and a key only reaches the map when another key takes its slot,
//! or when the map is read ([`SummingCache::flush_into`]). Sums wrap like the map's.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

use rustc_hash::FxBuildHasher;

/// log2 of the slots.
const SLOT_BITS: u32 = 10;

/// Sums of `K` not yet in their map, one key per slot.
#[derive(Clone, Debug, Default)]
pub(crate) struct SummingCache<K> {
    /// Empty until the first addition (a table that is never added to costs nothing).
    slots: Vec<Option<(K, u64)>>,
}

impl<K: Copy + Eq + Hash> SummingCache<K> {
    /// Adds `n` to `key`'s sum, sending the sum of the key in its slot to `map` first when
    /// it is another key.
    #[inline]
    pub(crate) fn add(&mut self, key: K, n: u64, map: &mut HashMap<K, u64, FxBuildHasher>) {
        // The hit, inlined into the caller's loop; the rest out of line.
        if let Some(Some((k, sum))) = self.slots.get_mut(slot_of(&key)) {
            if *k == key {
                *sum = sum.wrapping_add(n);
                return;
            }
        }
        self.take_slot(key, n, map);
    }

    /// [`Self::add`] of a key whose slot holds another key's sum (sent to `map`) or none
    /// (the table made on the first addition).
    #[inline(never)]
    fn take_slot(&mut self, key: K, n: u64, map: &mut HashMap<K, u64, FxBuildHasher>) {
        if self.slots.is_empty() {
            self.slots = vec![None; 1 << SLOT_BITS];
        }
        if let Some((k, sum)) = self.slots[slot_of(&key)].replace((key, n)) {
            add_to(map, k, sum);
        }
    }

    /// Sends every sum to `map` (and empties the table).
    pub(crate) fn flush_into(&mut self, map: &mut HashMap<K, u64, FxBuildHasher>) {
        for (k, sum) in self.slots.iter_mut().filter_map(Option::take) {
            add_to(map, k, sum);
        }
    }
}

/// The slot of `key` in a table of `1 << SLOT_BITS` slots.
#[inline]
fn slot_of<K: Hash>(key: &K) -> usize {
    (FxBuildHasher.hash_one(key) >> (64 - SLOT_BITS)) as usize
}

fn add_to<K: Eq + Hash>(map: &mut HashMap<K, u64, FxBuildHasher>, key: K, n: u64) {
    let c = map.entry(key).or_insert(0);
    *c = c.wrapping_add(n);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever keys share slots, the map ends with every key's sum (wrapped), and a key
    /// whose sum wraps to 0 is still there.
    #[test]
    fn sums_reach_the_map_whole() {
        let mut cache = SummingCache::default();
        let mut map = HashMap::default();
        let mut expected: HashMap<(u64, u64), u64> = HashMap::new();
        // More keys than slots, each added to several times, interleaved.
        for round in 0..5u64 {
            for k in 0..3000u64 {
                let key = (k % 7, k * 31);
                let n = k + round;
                cache.add(key, n, &mut map);
                let e = expected.entry(key).or_insert(0);
                *e = e.wrapping_add(n);
            }
        }
        cache.add((9, 9), u64::MAX, &mut map);
        cache.add((9, 9), 1, &mut map);
        expected.insert((9, 9), 0);
        cache.flush_into(&mut map);
        let got: HashMap<(u64, u64), u64> = map.into_iter().collect();
        assert_eq!(got, expected);
        // Flushed: a second flush adds nothing.
        let mut again = HashMap::default();
        cache.flush_into(&mut again);
        assert!(again.is_empty());
    }
}

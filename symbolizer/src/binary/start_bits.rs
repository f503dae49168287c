//! [`StartBits`]: the instruction starts of one decoded extent as a bitmap with ranks, so
//! that "does an instruction start here, and which one" and "the last instruction below
//! here" are a bit test and a population count instead of binary searches.
//!
//! One bit per byte of the extent (bit `o` set when an instruction starts at offset `o`)
//! and, per 64-bit word, the number of starts before it: 12 bytes per 64 bytes of code.

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct StartBits {
    words: Box<[u64]>,
    /// `ranks[w]`: set bits in `words[..w]`.
    ranks: Box<[u32]>,
}

impl StartBits {
    /// The bitmap of `offsets` (sorted, distinct, each below `span`).
    pub(crate) fn new(offsets: &[u32], span: u64) -> StartBits {
        let n = span.div_ceil(64) as usize;
        let mut words = vec![0u64; n];
        for &o in offsets {
            words[(o / 64) as usize] |= 1 << (o % 64);
        }
        let mut ranks = Vec::with_capacity(n);
        let mut seen = 0u32;
        for w in &words {
            ranks.push(seen);
            seen += w.count_ones();
        }
        StartBits {
            words: words.into_boxed_slice(),
            ranks: ranks.into_boxed_slice(),
        }
    }

    /// The bytes it holds (beyond its own size).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.words.len() * 8 + self.ranks.len() * 4
    }

    /// True when an instruction starts at offset `off` ([`StartBits::index_of`] without
    /// the rank: one bit test).
    #[inline]
    pub(crate) fn contains(&self, off: u64) -> bool {
        self.words
            .get((off / 64) as usize)
            .is_some_and(|w| w & (1u64 << (off % 64)) != 0)
    }

    /// The index of the instruction starting at offset `off` (its rank among the starts).
    #[inline]
    pub(crate) fn index_of(&self, off: u64) -> Option<usize> {
        let w = *self.words.get((off / 64) as usize)?;
        let bit = 1u64 << (off % 64);
        (w & bit != 0).then(|| {
            self.ranks[(off / 64) as usize] as usize + (w & (bit - 1)).count_ones() as usize
        })
    }

    /// The number of instructions starting below offset `off` (`partition_point(o < off)`
    /// over the sorted offsets), `total` when `off` is past the extent.
    #[inline]
    pub(crate) fn rank(&self, off: u64, total: usize) -> usize {
        let i = (off / 64) as usize;
        match self.words.get(i) {
            Some(&w) => {
                let below = w & ((1u64 << (off % 64)) - 1);
                self.ranks[i] as usize + below.count_ones() as usize
            }
            None => total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_equal_the_binary_searches() {
        let offsets: Vec<u32> = vec![0, 1, 5, 63, 64, 65, 127, 200, 255];
        let span = 260;
        let bits = StartBits::new(&offsets, span);
        assert_eq!(bits.heap_bytes(), 5 * 12);
        for off in 0..span + 70 {
            assert_eq!(
                bits.index_of(off),
                offsets
                    .binary_search(&(off as u32))
                    .ok()
                    .filter(|_| off < span),
                "index_of({off})"
            );
            assert_eq!(
                bits.contains(off),
                bits.index_of(off).is_some(),
                "contains({off})"
            );
            let below = offsets.partition_point(|&o| u64::from(o) < off);
            assert_eq!(bits.rank(off, offsets.len()), below, "rank({off})");
        }
        let empty = StartBits::new(&[], 0);
        assert_eq!(
            (
                empty.index_of(0),
                empty.contains(0),
                empty.rank(0, 0),
                empty.heap_bytes()
            ),
            (None, false, 0, 0)
        );
    }
}

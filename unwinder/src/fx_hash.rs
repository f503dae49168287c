//! [`FxHasher`]: a small, fast, non-cryptographic hasher for the aggregation maps, whose
//! keys are lists of addresses (rustc's FxHash: rotate, xor, multiply per word). SipHash,
//! the std default, showed in profiles of large inputs; hash flooding is not a concern
//! for keys made of the profiled binary's own addresses.

use std::hash::{BuildHasherDefault, Hasher};

/// The FxHash multiplier (from rustc-hash).
const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

/// The FxHash state.
#[derive(Clone, Copy, Debug, Default)]
pub struct FxHasher {
    hash: u64,
}

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        for &b in chunks.remainder() {
            self.add(u64::from(b));
        }
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// `HashMap` builder with [`FxHasher`].
pub type FxBuildHasher = BuildHasherDefault<FxHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    #[test]
    fn equal_keys_hash_equal_and_order_matters() {
        let b = FxBuildHasher::default();
        let h = |v: &[u64]| b.hash_one(v);
        assert_eq!(h(&[1, 2, 3]), h(&[1, 2, 3]));
        assert_ne!(h(&[1, 2, 3]), h(&[3, 2, 1]));
        assert_ne!(h(&[1, 2]), h(&[1, 2, 0]));
        let mut x = FxHasher::default();
        x.write_u64(7);
        // One word: (0.rotl(5) ^ 7) * SEED.
        assert_eq!(x.finish(), 7u64.wrapping_mul(SEED));
        let mut y = FxHasher::default();
        7u64.hash(&mut y);
        assert_eq!(y.finish(), x.finish());
    }
}

//! [`text_hash`]: the hash by which a scan looks up blocks and compact texts it has seen.
//!
//! Every hit is checked byte for byte, so the hash only has to spread distinct texts over
//! a hash table, within one process (it is never stored). A recorder's block memo hashes
//! every sample's text, about 1.4 KB each: with AES-NI, four chains of `aesenc` (one round
//! per 16 bytes) hash several times faster than xxh3, which is used where AES-NI is missing.

/// A 64-bit hash of `bytes` (the same for the same bytes within a process).
#[inline]
pub(crate) fn text_hash(bytes: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("aes") {
        // SAFETY: the processor has AES-NI (checked just above; SSE2 is part of x86_64).
        return unsafe { aes::hash(bytes) };
    }
    xxhash_rust::xxh3::xxh3_64(bytes)
}

#[cfg(target_arch = "x86_64")]
mod aes {
    use std::arch::x86_64::{
        __m128i, _mm_aesenc_si128, _mm_cvtsi128_si64, _mm_loadu_si128, _mm_set_epi64x,
        _mm_unpackhi_epi64, _mm_xor_si128,
    };

    /// Round keys: the first 128 hex digits of pi's fractional part.
    const KEYS: [i64; 8] = [
        0x243f_6a88_85a3_08d3,
        0x1319_8a2e_0370_7344,
        0xa409_3822_299f_31d0u64 as i64,
        0x082e_fa98_ec4e_6c89,
        0x4528_21e6_38d0_1377,
        0xbe54_66cf_34e9_0c6cu64 as i64,
        0xc0ac_29b7_c97c_50ddu64 as i64,
        0x3f84_d5b5_b547_0917,
    ];

    /// Four lanes take 64 bytes at a time, a round each per 16 bytes (the round's key is
    /// the data, so the lanes' rounds do not wait for one another); the last 1 to 63 bytes
    /// go through lane `a` (the last 16 loaded from the end, overlapping bytes already
    /// taken); then the lanes are mixed and added up.
    ///
    /// # Safety
    /// The processor has AES-NI.
    #[target_feature(enable = "aes")]
    pub(super) unsafe fn hash(bytes: &[u8]) -> u64 {
        let n = bytes.len();
        let load = |at: usize| {
            // SAFETY: every caller passes `at + 16 <= n`, so the 16 bytes at `at` are
            // inside `bytes`.
            unsafe { _mm_loadu_si128(bytes.as_ptr().add(at).cast::<__m128i>()) }
        };
        let key = |k: usize| _mm_set_epi64x(KEYS[2 * k], KEYS[2 * k + 1]);
        let length = _mm_set_epi64x(n as i64, !(n as i64));
        let (mut a, mut b) = (_mm_xor_si128(key(0), length), key(1));
        let (mut c, mut d) = (key(2), _mm_xor_si128(key(3), length));
        let mut i = 0;
        while i + 64 <= n {
            a = _mm_aesenc_si128(a, load(i));
            b = _mm_aesenc_si128(b, load(i + 16));
            c = _mm_aesenc_si128(c, load(i + 32));
            d = _mm_aesenc_si128(d, load(i + 48));
            i += 64;
        }
        if n >= 16 {
            while i + 16 < n {
                a = _mm_aesenc_si128(a, load(i));
                i += 16;
            }
            if i < n {
                a = _mm_aesenc_si128(a, load(n - 16));
            }
        } else if n > 0 {
            let (lo, hi) = crate::perf_script::reader::first_16_bytes(bytes);
            a = _mm_aesenc_si128(a, _mm_set_epi64x(hi as i64, lo as i64));
        }
        // Three rounds per lane spread a difference in any of its bytes over all of them
        // (after one round it sits in four bytes and takes one of about 127 values, so
        // differences from two lanes would often cancel), then the lanes are added up.
        let spread = |mut x: __m128i, k: usize| {
            for r in 0..3 {
                x = _mm_aesenc_si128(x, key((k + r) % 4));
            }
            x
        };
        let x = _mm_xor_si128(
            _mm_xor_si128(spread(a, 0), spread(b, 1)),
            _mm_xor_si128(spread(c, 2), spread(d, 3)),
        );
        let x = _mm_aesenc_si128(x, key(0));
        (_mm_cvtsi128_si64(x) ^ _mm_cvtsi128_si64(_mm_unpackhi_epi64(x, x))) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Every byte counts, at every position of inputs of every length up to 300 (across the
    /// 16- and 64-byte steps): flipping the low or the high bit of any one byte, or dropping
    /// the last byte, gives a hash not seen before. A byte left out of the hash, lengths
    /// mixed up, or lanes added up before their differences are spread (which gave equal
    /// hashes for flips in two lanes) would repeat one.
    #[test]
    fn every_byte_and_the_length_count() {
        let base: Vec<u8> = (0..300u32).map(|i| (i * 37 + 11) as u8).collect();
        let mut seen = HashSet::new();
        let mut hashed = 0;
        for n in 0..=300 {
            let text = &base[..n];
            // The same bytes elsewhere in memory.
            let copy = text.to_vec();
            assert_eq!(text_hash(text), text_hash(&copy));
            assert!(seen.insert(text_hash(text)), "length {n}");
            hashed += 1;
            for at in 0..n {
                for bit in [0, 7] {
                    let mut changed = text.to_vec();
                    changed[at] ^= 1 << bit;
                    assert!(
                        seen.insert(text_hash(&changed)),
                        "length {n}, byte {at}, bit {bit}"
                    );
                    hashed += 1;
                }
            }
        }
        assert_eq!(hashed, 90_601);
        // Both ends of the words are spread (the low bits index the table, the high seven
        // fill its control bytes): 90,601 uniform values fill about 49,100 of the 65,536
        // 16-bit patterns.
        let low: HashSet<u64> = seen.iter().map(|h| h & 0xffff).collect();
        let high: HashSet<u64> = seen.iter().map(|h| h >> 57).collect();
        assert!(
            (47_000..51_000).contains(&low.len()) && high.len() == 128,
            "{} {}",
            low.len(),
            high.len()
        );
    }
}

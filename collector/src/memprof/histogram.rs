//! Access histogram counter encodings. Raw version 4 stores each histogram entry as a `u64`;
//! version 5 stores a `u16` "scaled" value: a 12-bit mantissa `M` and a 4-bit exponent `E`
//! meaning `M << E` (`encodeHistogramCount` / `decodeHistogramCount` in LLVM
//! `llvm/include/llvm/ProfileData/MemProfData.inc`).

/// Largest mantissa of the v5 encoding (12 bits).
pub const MAX_MANTISSA: u64 = 0xfff;

/// Largest value the v5 encoding represents: `4095 << 15`; larger counts are clamped.
pub const MAX_ENCODED_COUNT: u64 = MAX_MANTISSA << 15;

/// Decodes one v5 histogram entry: `(v & 0xfff) << (v >> 12)`.
pub fn decode_histogram_count(v: u16) -> u64 {
    let mantissa = u64::from(v & 0x0fff);
    let exponent = u32::from(v >> 12);
    mantissa << exponent
}

/// Encodes a count the way the v5 writer does: values up to 4095 as is, larger ones rounded
/// (halving the mantissa with round-up, incrementing the exponent) and clamped to
/// [`MAX_ENCODED_COUNT`].
pub fn encode_histogram_count(count: u64) -> u16 {
    let count = count.min(MAX_ENCODED_COUNT);
    if count <= MAX_MANTISSA {
        return count as u16;
    }
    let mut mantissa = count;
    let mut exponent = 0u16;
    while mantissa > MAX_MANTISSA {
        mantissa = (mantissa + 1) >> 1;
        exponent += 1;
    }
    (exponent << 12) | mantissa as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_counts_are_exact() {
        for c in [0u64, 1, 7, 4095] {
            assert_eq!(encode_histogram_count(c), c as u16);
            assert_eq!(decode_histogram_count(c as u16), c);
        }
    }

    #[test]
    fn large_counts_round_up_and_clamp() {
        // 4096 -> mantissa 2048, exponent 1.
        assert_eq!(encode_histogram_count(4096), (1 << 12) | 2048);
        assert_eq!(decode_histogram_count((1 << 12) | 2048), 4096);
        // 8191 -> (8191+1)>>1 = 4096 > 4095 -> (4096+1)>>1 = 2048, exponent 2 -> 8192.
        assert_eq!(decode_histogram_count(encode_histogram_count(8191)), 8192);
        assert_eq!(encode_histogram_count(u64::MAX), (15 << 12) | 0xfff);
        assert_eq!(decode_histogram_count(0xffff), MAX_ENCODED_COUNT);
    }
}

//! DWARF discriminators as llvm-profgen 19 reads them.
//!
//! * Regular (non-FS) discriminators pack base discriminator, duplication factor and copy id
//!   with LLVM's prefix encoding (`llvm/Support/Discriminator.h`,
//!   `DILocation::decodeDiscriminator`).
//! * Pseudo-probe discriminators (`(D & 7) == 7 && (D & !7) != 0`, `llvm/IR/PseudoProbe.h`
//!   `PseudoProbeDwarfDiscriminator`) carry a probe index (bits 3..18, or 3..15 when bit 28 says
//!   a 3-bit DWARF base discriminator sits in bits 16..18).
//! * Flow-sensitive (FS) binaries (symbol `__llvm_fs_discriminator__`) use the raw value as the
//!   base discriminator and a duplication factor of 1 (`ProfileGeneratorBase::getBaseDiscriminator`
//!   / `getDuplicationFactor` in llvm-profgen's ProfileGenerator.h).

/// `getUnsignedFromPrefixEncoding`.
pub fn unprefix(u: u32) -> u32 {
    if u & 1 != 0 {
        return 0;
    }
    let u = u >> 1;
    if u & 0x20 != 0 {
        ((u >> 1) & 0xfe0) | (u & 0x1f)
    } else {
        u & 0x1f
    }
}

/// `getNextComponentInDiscriminator`.
pub fn next_component(d: u32) -> u32 {
    if d & 1 == 0 {
        d >> if d & 0x40 != 0 { 14 } else { 7 }
    } else {
        d >> 1
    }
}

/// `DILocation::decodeDiscriminator`: (base discriminator, duplication factor, copy id), raw
/// (a duplication factor of 0 means "none").
pub fn decode(d: u32) -> (u32, u32, u32) {
    let df_part = next_component(d);
    (
        unprefix(d),
        unprefix(df_part),
        unprefix(next_component(df_part)),
    )
}

/// `DILocation::isPseudoProbeDiscriminator`.
pub fn is_pseudo_probe_discriminator(d: u32) -> bool {
    d & 7 == 7 && d & !7 != 0
}

/// `PseudoProbeDwarfDiscriminator::extractProbeIndex`.
pub fn probe_index(d: u32) -> u32 {
    if d & 0x1000_0000 != 0 {
        (d >> 3) & 0x1fff
    } else {
        (d >> 3) & 0xffff
    }
}

/// llvm-profgen's `getBaseDiscriminator(D, UseFSD)`: the raw value for FS binaries, else
/// `DILocation::getBaseDiscriminatorFromDiscriminator(D, false)` (for a probe discriminator the
/// embedded DWARF base discriminator if present, else the probe index).
pub fn base_discriminator(d: u32, fs: bool) -> u32 {
    if fs {
        return d;
    }
    if is_pseudo_probe_discriminator(d) {
        if d & 0x1000_0000 != 0 {
            return (d >> 16) & 7;
        }
        return probe_index(d);
    }
    unprefix(d)
}

/// llvm-profgen's `getDuplicationFactor(D, UseFSD)`: 1 for FS binaries, else
/// `DILocation::getDuplicationFactorFromDiscriminator` (1 when none or 0 is encoded).
pub fn duplication_factor(d: u32, fs: bool) -> u32 {
    if fs {
        return 1;
    }
    match unprefix(next_component(d)) {
        0 => 1,
        f => f,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LLVM `encodeDiscriminator` for components that fit (test helper).
    fn encode(bd: u32, df: u32, ci: u32) -> u32 {
        fn prefix(u: u32) -> u32 {
            if u > 0x1f {
                ((u & 0xfe0) << 1) | (u & 0x1f) | 0x20
            } else {
                u
            }
        }
        fn component(c: u32) -> (u32, u32) {
            if c == 0 {
                (1, 1)
            } else {
                (prefix(c) << 1, if c > 0x1f { 14 } else { 7 })
            }
        }
        let mut out = 0;
        let mut shift = 0;
        let parts = [bd, df, ci];
        for (i, &c) in parts.iter().enumerate() {
            if parts[i..].iter().all(|&x| x == 0) {
                break;
            }
            let (bits, width) = component(c);
            out |= bits << shift;
            shift += width;
        }
        out
    }

    #[test]
    fn decode_round_trips_llvm_encoding() {
        for (bd, df, ci) in [
            (0, 0, 0),
            (1, 0, 0),
            (3, 2, 0),
            (0, 4, 0),
            (31, 8, 1),
            (100, 2, 5),
            (2, 33, 0),
        ] {
            let d = encode(bd, df, ci);
            assert_eq!(decode(d), (bd, df, ci), "d = {d:#x}");
            assert_eq!(base_discriminator(d, false), bd);
            assert_eq!(duplication_factor(d, false), df.max(1));
        }
        // Unrolled-by-4 loop body, base 0: an empty 1-bit base component, then DF 4 as
        // prefix(4) << 1 = 8 shifted past it: 0x11.
        assert_eq!(encode(0, 4, 0), 0x11);
        assert_eq!(duplication_factor(0x11, false), 4);
        assert_eq!(duplication_factor(0x11, true), 1);
        assert_eq!(base_discriminator(0x11, true), 0x11);
    }

    #[test]
    fn probe_discriminators() {
        // Index 5, factor 100, type 0, no base: (5 << 3) | (100 << 19) | 7.
        let d = (5 << 3) | (100 << 19) | 7;
        assert!(is_pseudo_probe_discriminator(d));
        assert!(!is_pseudo_probe_discriminator(7));
        assert!(!is_pseudo_probe_discriminator(0x11));
        assert_eq!(probe_index(d), 5);
        assert_eq!(base_discriminator(d, false), 5);
        // With a DWARF base discriminator 3 encoded (bit 28, bits 16..18).
        let d = (9 << 3) | (3 << 16) | (1 << 28) | 7;
        assert_eq!(probe_index(d), 9);
        assert_eq!(base_discriminator(d, false), 3);
    }
}

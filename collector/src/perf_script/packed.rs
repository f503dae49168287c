//! A parsed sample packed into a few bytes: what a tally keeps of each distinct sample
//! until it is unwound ([`super::tally`]).
//!
//! A sample's text spends about 40 bytes on each LBR entry (`0xFROM/0xTO/P/-/-/0`); its
//! addresses lie close to one another. Packed, each address is the zigzag-coded difference
//! from the one before it, in LEB128 (7 bits a byte): the sampled IP from 0, each frame of
//! the call chain from the one before (the first is the IP), and the branch stack newest
//! entry first, each entry's `TO` from the address before (the run from `TO` to the next
//! branch's `FROM` is short) and its `FROM` from its `TO`. An entry takes 3 or 4 bytes on
//! the convert benchmark's recording instead of its 40 bytes of text.
//!
//! Layout: the call chain's length, the branch stack's length, the IP, the frames, then
//! each entry's `TO` and `FROM`, all LEB128. Only what the parser of a tallied sample sets
//! is kept: the IP, the call chain and the entries' addresses (their flags are cleared).

use crate::{LbrEntry, Sample};

/// Most bytes the packing of a sample with `frames` call-chain frames and `entries` LBR
/// entries takes (a LEB128 of 64 bits takes up to 10 bytes).
pub(crate) fn most_packed_bytes(frames: usize, entries: usize) -> usize {
    10 * (3 + frames + 2 * entries)
}

/// Appends the packing of `sample`'s IP, call chain and LBR entries' addresses to `out`.
pub(crate) fn pack_sample(sample: &Sample, out: &mut Vec<u8>) {
    out.reserve(most_packed_bytes(sample.callchain.len(), sample.lbr.len()));
    put(out, sample.callchain.len() as u64);
    put(out, sample.lbr.len() as u64);
    let mut previous = 0;
    let mut next = |out: &mut Vec<u8>, address: u64| {
        put(out, zigzag(address.wrapping_sub(previous)));
        previous = address;
    };
    next(out, sample.ip);
    for &frame in &sample.callchain {
        next(out, frame);
    }
    for e in &sample.lbr {
        next(out, e.to);
        next(out, e.from);
    }
}

/// The sample packed at the start of `bytes` ([`pack_sample`]) into `sample`, whose buffers
/// are reused: its IP, call chain and LBR entries (flags 0), `count` 1 and every other
/// field its default. The bytes it took (a packing tells where it ends), or `None` when
/// `bytes` does not start with a whole packing.
pub(crate) fn unpack_sample(bytes: &[u8], sample: &mut Sample) -> Option<usize> {
    let mut at = 0;
    let mut take = || get(bytes, &mut at);
    let frames = usize::try_from(take()?).ok()?;
    let entries = usize::try_from(take()?).ok()?;
    let mut previous = 0u64;
    let mut next = || -> Option<u64> {
        previous = previous.wrapping_add(unzigzag(get(bytes, &mut at)?));
        Some(previous)
    };
    let ip = next()?;
    let mut callchain = std::mem::take(&mut sample.callchain);
    let mut lbr = std::mem::take(&mut sample.lbr);
    callchain.clear();
    lbr.clear();
    // The counts come from the bytes: no more room than they can hold.
    callchain.reserve(frames.min(bytes.len()));
    lbr.reserve(entries.min(bytes.len()));
    for _ in 0..frames {
        callchain.push(next()?);
    }
    for _ in 0..entries {
        let to = next()?;
        let from = next()?;
        lbr.push(LbrEntry { from, to, flags: 0 });
    }
    *sample = Sample {
        ip,
        callchain,
        lbr,
        count: 1,
        ..Sample::default()
    };
    Some(at)
}

/// `value` as zigzag: small magnitudes of either sign are small numbers.
fn zigzag(value: u64) -> u64 {
    let v = value as i64;
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(value: u64) -> u64 {
    (value >> 1) ^ (value & 1).wrapping_neg()
}

/// Appends `value` in LEB128.
#[inline]
fn put(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// The LEB128 number at `*at` in `bytes`, moving `*at` past it; `None` when it runs past
/// the end or past 64 bits.
#[inline]
fn get(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    let mut shift = 0;
    loop {
        let b = *bytes.get(*at)?;
        *at += 1;
        if shift == 63 && b > 1 {
            return None;
        }
        value |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(value);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ip: u64, callchain: &[u64], lbr: &[(u64, u64)]) -> Sample {
        Sample {
            ip,
            callchain: callchain.to_vec(),
            lbr: lbr
                .iter()
                .map(|&(from, to)| LbrEntry { from, to, flags: 0 })
                .collect(),
            count: 1,
            ..Sample::default()
        }
    }

    /// Samples of every shape unpack to themselves, into a buffer that held another.
    #[test]
    fn samples_unpack_to_themselves() {
        let samples = [
            sample(0, &[], &[]),
            sample(0x5555_5555_5123, &[0x5555_5555_5123, 0x5555_5555_4000], &[]),
            sample(
                0x40_062f,
                &[],
                &[(0x40_05c8, 0x40_05dc), (0x40_062f, 0x40_05b0)],
            ),
            // Kernel addresses, the ends of the range, a wrap from the top to the bottom.
            sample(
                u64::MAX,
                &[0xffff_ffff_8100_0000, 0, u64::MAX, 1],
                &[
                    (u64::MAX, 0),
                    (0, u64::MAX),
                    (0x7fff_ffff_ffff_ffff, 0x8000_0000_0000_0000),
                ],
            ),
        ];
        let mut into = sample(7, &[1, 2, 3, 4, 5, 6], &[(1, 2); 9]);
        for s in &samples {
            let mut bytes = Vec::new();
            pack_sample(s, &mut bytes);
            assert!(bytes.len() <= most_packed_bytes(s.callchain.len(), s.lbr.len()));
            // Followed by the next packing: the bytes of this one.
            let len = bytes.len();
            pack_sample(&samples[0], &mut bytes);
            assert_eq!(unpack_sample(&bytes, &mut into), Some(len));
            assert_eq!(&into, s);
        }
    }

    /// An LBR entry takes a few bytes when its `TO` is a short run before the branch
    /// after it and its `FROM` a short jump from its `TO`: 32 such entries, newest first,
    /// take 3 bytes each.
    #[test]
    fn close_addresses_take_few_bytes() {
        let ip = 0x5555_5560_0040u64;
        let mut lbr = Vec::new();
        let mut after = ip;
        for i in 0..32u64 {
            let to = after - (0x10 + i);
            let from = if i % 2 == 0 {
                to + 0x100 * i
            } else {
                to - 0x80 * i
            };
            lbr.push((from, to));
            after = from;
        }
        let s = sample(ip, &[ip, ip + 0x9_0000, ip + 0x1000], &lbr);
        let mut bytes = Vec::new();
        pack_sample(&s, &mut bytes);
        assert_eq!(&bytes[..2], &[3, 32], "three frames, 32 entries");
        // The counts, the IP (7 bytes for a 47-bit address), the frames (1 + 3 + 3).
        assert_eq!(bytes.len(), 2 + 7 + 7 + 32 * 3);
        let mut into = Sample::default();
        assert_eq!(unpack_sample(&bytes, &mut into), Some(bytes.len()));
        assert_eq!(into, s);
    }

    /// Bytes that do not start with a whole packing are refused: cut short, or with a
    /// number longer than 64 bits.
    #[test]
    fn broken_packings_are_refused() {
        let mut bytes = Vec::new();
        pack_sample(&sample(0x1234, &[0x1234], &[(1, 2)]), &mut bytes);
        let mut into = Sample::default();
        for cut in 0..bytes.len() {
            assert_eq!(
                unpack_sample(&bytes[..cut], &mut into),
                None,
                "cut at {cut}"
            );
        }
        let too_long = [0x80u8, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02];
        assert_eq!(get(&too_long, &mut 0), None);
        let top = [0xffu8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(get(&top, &mut 0), Some(u64::MAX));
    }
}

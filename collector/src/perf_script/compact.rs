//! A branch-stack line without its LBR flag fields, for counting samples.
//!
//! llvm-profgen reads only `FROM` and `TO` of an entry `0xFROM/0xTO/M/X/A/CYCLES/...`; the
//! rest (mispredict bits, cycle counts) it ignores. Hardware LBRs give every entry the
//! cycles since the previous branch, which makes almost every sample text distinct although
//! the samples are not. [`compact_lbr_line`] cuts each token of a branch-stack line at its
//! second `/`: the reader parses the compact line exactly as the original, but for the
//! flag word (see [`compact_lbr_line`] for why), so samples can be counted by their compact
//! text and each distinct one parsed once.

use super::reader::is_space;

/// Appends `line` to `out` with every space-separated token cut at its second `/`, but for
/// a token whose cut would matter to `extractLBRStack`:
/// - the first token when it ends with `:` (an event name, skipped whole);
/// - a token whose byte before the second `/` is whitespace (the last token's `TO` would
///   lose it to the line's `trim_end` and parse where the original does not).
///
/// Otherwise the reader's answer depends on a token's first two `/`-separated fields only:
/// whether it has a `/` (a leading IP or an entry), `FROM` and `TO` (a malformed one ends
/// the stack), then the flag word, from the fields cut off. Spaces are kept as they are.
pub(crate) fn compact_lbr_line(line: &[u8], out: &mut Vec<u8>, masks: &mut ByteMasks) {
    masks.set(line);
    let n = line.len();
    let mut copied = 0;
    let mut first = true;
    let mut s = 0;
    // A token at a time. A token shorter than 64 bytes lies in the 64-bit window of the
    // masks from its start, where its end and second `/` are found without a loop; longer
    // ones search on.
    while s < n {
        let spaces = window(&masks.spaces, s);
        let skip = (!spaces).trailing_zeros() as usize;
        if skip > 0 {
            s += skip;
            continue;
        }
        let len = spaces.trailing_zeros() as usize;
        let end = if len < 64 {
            s + len
        } else {
            next_set(&masks.spaces, s + 64).unwrap_or(n)
        }
        .min(n);
        let slashes = window(&masks.slashes, s);
        let second = slashes & slashes.wrapping_sub(1);
        let cut = if second != 0 {
            Some(s + second.trailing_zeros() as usize)
        } else {
            next_set(&masks.slashes, s).and_then(|first| next_set(&masks.slashes, first + 1))
        };
        // Kept whole: no second `/` in the token, whitespace before it, an event name.
        // (The byte before the cut is inside the token, so never a space: only a line
        // with other whitespace needs to look at it.)
        let keep_whole = |cut: usize| {
            (masks.other_spaces && is_space(line[cut - 1])) || (first && line[end - 1] == b':')
        };
        if let Some(cut) = cut.filter(|&c| c < end && !keep_whole(c)) {
            append(out, line, copied, cut);
            copied = end;
        }
        first = false;
        s = end;
    }
    out.extend_from_slice(&line[copied..]);
}

/// Appends `line[from..to]` to `out`; a piece of up to 64 bytes (the common case: the
/// spaces and `0xFROM/0xTO` of one entry) as a fixed-size copy, which compiles to a few
/// vector moves instead of a call to `memcpy`.
#[inline(always)]
fn append(out: &mut Vec<u8>, line: &[u8], from: usize, to: usize) {
    const FIXED: usize = 64;
    if to - from <= FIXED {
        if let Some(block) = line.get(from..from + FIXED) {
            let block: &[u8; FIXED] = block.try_into().expect("64 bytes");
            let len = out.len();
            out.extend_from_slice(block);
            out.truncate(len + (to - from));
            return;
        }
    }
    out.extend_from_slice(&line[from..to]);
}

/// 64 bits of `mask` from bit `at` (zeros past its end).
#[inline(always)]
fn window(mask: &[u64], at: usize) -> u64 {
    let (w, b) = (at / 64, at % 64);
    let low = mask.get(w).copied().unwrap_or(0) >> b;
    if b == 0 {
        return low;
    }
    low | (mask.get(w + 1).copied().unwrap_or(0) << (64 - b))
}

/// The first set bit of `mask` at or after bit `from`.
fn next_set(mask: &[u64], from: usize) -> Option<usize> {
    let mut w = from / 64;
    let mut bits = *mask.get(w)? & (!0u64 << (from % 64));
    while bits == 0 {
        w += 1;
        bits = *mask.get(w)?;
    }
    Some(w * 64 + bits.trailing_zeros() as usize)
}

/// Bit `i % 64` of word `i / 64`: whether `line[i]` is a space, or a slash (kept from line
/// to line to reuse its buffers).
#[derive(Default)]
pub(crate) struct ByteMasks {
    spaces: Vec<u64>,
    slashes: Vec<u64>,
    /// Whether the line has whitespace other than spaces (`\t`, `\x0b`, `\x0c`, `\r`;
    /// `\n` ends it).
    other_spaces: bool,
}

impl ByteMasks {
    fn set(&mut self, line: &[u8]) {
        let words = line.len().div_ceil(64);
        let m = self;
        m.spaces.clear();
        m.spaces.resize(words, 0);
        m.slashes.clear();
        m.slashes.resize(words, 0);
        let full = line.len() / 64;
        let mut other_spaces = false;
        for w in 0..full {
            let (s, l, o) = block_masks(&line[w * 64..w * 64 + 64]);
            m.spaces[w] = s;
            m.slashes[w] = l;
            other_spaces |= o;
        }
        for (i, &b) in line.iter().enumerate().skip(full * 64) {
            m.spaces[i / 64] |= u64::from(b == b' ') << (i % 64);
            m.slashes[i / 64] |= u64::from(b == b'/') << (i % 64);
            other_spaces |= b != b' ' && is_space(b);
        }
        m.other_spaces = other_spaces;
    }
}

/// The space and slash masks of 64 bytes, and whether they hold other whitespace (a byte
/// from `\t` to `\r`).
#[cfg(target_arch = "x86_64")]
fn block_masks(block: &[u8]) -> (u64, u64, bool) {
    use std::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_cmpeq_epi8, _mm_cmpgt_epi8, _mm_loadu_si128, _mm_movemask_epi8,
        _mm_or_si128, _mm_set1_epi8, _mm_setzero_si128,
    };
    assert_eq!(block.len(), 64);
    let (mut spaces, mut slashes) = (0u64, 0u64);
    let other;
    // SAFETY: SSE2 is part of x86_64; the four 16-byte loads are within the 64 bytes
    // checked above (unaligned loads).
    unsafe {
        let space = _mm_set1_epi8(b' ' as i8);
        let slash = _mm_set1_epi8(b'/' as i8);
        // Signed compares: bytes from 0x80 are negative, below `\t`.
        let below_tab = _mm_set1_epi8(b'\t' as i8 - 1);
        let above_cr = _mm_set1_epi8(b'\r' as i8 + 1);
        let mut whitespace = _mm_setzero_si128();
        for k in 0..4 {
            let v = _mm_loadu_si128(block.as_ptr().add(16 * k) as *const __m128i);
            let s = _mm_movemask_epi8(_mm_cmpeq_epi8(v, space)) as u16;
            let l = _mm_movemask_epi8(_mm_cmpeq_epi8(v, slash)) as u16;
            spaces |= u64::from(s) << (16 * k);
            slashes |= u64::from(l) << (16 * k);
            let in_range = _mm_and_si128(_mm_cmpgt_epi8(v, below_tab), _mm_cmpgt_epi8(above_cr, v));
            whitespace = _mm_or_si128(whitespace, in_range);
        }
        other = _mm_movemask_epi8(whitespace) != 0;
    }
    (spaces, slashes, other)
}

/// The space and slash masks of 64 bytes, and whether they hold other whitespace.
#[cfg(not(target_arch = "x86_64"))]
fn block_masks(block: &[u8]) -> (u64, u64, bool) {
    let (mut spaces, mut slashes, mut other) = (0u64, 0u64, false);
    for (i, &b) in block.iter().enumerate() {
        spaces |= u64::from(b == b' ') << i;
        slashes |= u64::from(b == b'/') << i;
        other |= b != b' ' && is_space(b);
    }
    (spaces, slashes, other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_script::reader::{parse_lbr_line, EntryTokenCache, LbrLine};

    fn compact(line: &str) -> String {
        let mut out = Vec::new();
        compact_lbr_line(line.as_bytes(), &mut out, &mut ByteMasks::default());
        String::from_utf8(out).unwrap()
    }

    /// The reader's reading of a branch-stack line, flags cleared.
    fn read(line: &[u8]) -> String {
        match parse_lbr_line(line, &mut EntryTokenCache::new()) {
            LbrLine::BadLeadingIp => "bad leading ip".into(),
            LbrLine::Entries {
                ip,
                entries,
                truncated,
            } => {
                let e: Vec<(u64, u64)> = entries.iter().map(|e| (e.from, e.to)).collect();
                format!("{ip:?} {e:?} {truncated}")
            }
        }
    }

    #[test]
    fn tokens_cut_at_their_second_slash() {
        assert_eq!(
            compact(" 0x1/0x2/P/-/-/13/  0xa/0xb/M/-/-/1 0xc/0xd "),
            " 0x1/0x2  0xa/0xb 0xc/0xd "
        );
        assert_eq!(compact(" 0x1/0x2"), " 0x1/0x2");
        // Kept whole: an event name, whitespace before the cut, a leading IP.
        assert_eq!(compact(" cycles:/x/y: 0x1/0x2/P"), " cycles:/x/y: 0x1/0x2");
        assert_eq!(compact(" 0x1/0x2\t/P 0x3/0x4/P"), " 0x1/0x2\t/P 0x3/0x4");
        assert_eq!(compact(" 0x10 0x1/0x2/P/-"), " 0x10 0x1/0x2");
        // A token of 64 bytes or more (found beyond the window).
        let long_token = format!("0x1/0x2/{}", "P".repeat(70));
        assert_eq!(
            compact(&format!(" 0x5/0x6/P {long_token} 0x3/0x4/-")),
            " 0x5/0x6 0x1/0x2 0x3/0x4"
        );
        assert_eq!(
            compact(&format!("{}0x1/0x2/P", " ".repeat(100))),
            format!("{}0x1/0x2", " ".repeat(100))
        );
        // Tokens across the 64-byte blocks the masks are made of.
        let long: String = (0..40)
            .map(|i| format!(" 0x{i:x}/0x{:x}/P/-/-/{}", i + 1, i * 7))
            .collect();
        let expected: String = (0..40).map(|i| format!(" 0x{i:x}/0x{:x}", i + 1)).collect();
        assert_eq!(compact(&long), expected);
    }

    /// Whitespace other than spaces is found in the 64-byte blocks as in the tail: a cut
    /// after it is not made wherever it lies.
    #[test]
    fn other_whitespace_is_seen_in_every_block() {
        for ws in [b'\t', 0x0b, 0x0c, b'\r'] {
            let mut block = [b'a'; 64];
            block[37] = ws;
            assert!(block_masks(&block).2, "{ws:#x}");
        }
        // Neither spaces, newlines' neighbours nor bytes from 0x80 count.
        let mut block = [b' '; 64];
        block[1] = 0x08;
        block[2] = 0x0e;
        block[3] = 0x89;
        block[4] = 0xff;
        assert!(!block_masks(&block).2);
        let filler: String = (0..4)
            .map(|i| format!(" 0x{i:x}/0x{i:x}/P/-/-/1"))
            .collect();
        for at_start in [true, false] {
            let odd = " 0x1/0x2\x0b/P";
            let line = if at_start {
                format!("{odd}{filler}{filler}")
            } else {
                format!("{filler}{filler}{odd}")
            };
            let out = compact(&line);
            assert!(out.contains("0x1/0x2\x0b/P"), "{line:?} -> {out:?}");
            assert_eq!(out.matches("/P").count(), 1, "{out:?}");
        }
    }

    #[test]
    fn the_reader_reads_the_compact_line_as_the_original() {
        let tokens = [
            "0x1/0x2/P/-/-/5",
            "0x3/0x4",
            "0x5/0x6/",
            "0x7/0x8/M/X/A/123/COND",
            "cycles:",
            "x:/y/z:",
            "0x9/0xa\t/P",
            "0xb/0xc/\t",
            "0xd",
            "0xe/0xf0/P\t",
            "/0x1/P",
            "//",
            "0x/0x/",
            "0x11/0x1g/P",
            "0x12/\t0x13/P",
            "0x14/0x15/P/-/-/7/",
            "\t",
            "0x16/0x17\r/x",
            "0x18/0x19/PPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPP:",
            "                                                                      0x1a/0x1b/P",
        ];
        // Every line of up to three of these tokens, with one or two spaces between them and
        // optional trailing whitespace.
        let mut lines = Vec::new();
        for a in &tokens {
            for b in &tokens {
                for c in ["", "0x20/0x21/P/-/-/1", "\t", "0x22/0x23\t/x"] {
                    for sep in [" ", "  "] {
                        for tail in ["", " ", "\t", " \r"] {
                            lines.push(format!(" {a}{sep}{b}{sep}{c}{tail}"));
                        }
                    }
                }
            }
        }
        let mut masks = ByteMasks::default();
        for line in &lines {
            let mut out = Vec::new();
            compact_lbr_line(line.as_bytes(), &mut out, &mut masks);
            assert_eq!(
                read(&out),
                read(line.as_bytes()),
                "{line:?} -> {:?}",
                String::from_utf8_lossy(&out)
            );
            // Cut once, it stays as it is.
            let mut again = Vec::new();
            compact_lbr_line(&out, &mut again, &mut masks);
            assert_eq!(again, out, "{line:?}");
        }
    }
}

//! A branch-stack line without its LBR flag fields, for counting samples.
//!
//! llvm-profgen reads only `FROM` and `TO` of an entry `0xFROM/0xTO/M/X/A/CYCLES/...`; the
//! rest (mispredict bits, cycle counts) it ignores. Hardware LBRs give every entry the
//! cycles since the previous branch, which makes almost every sample text distinct although
//! the samples are not. [`compact_lbr_line`] cuts each token of a branch-stack line at its
//! second `/`: the reader parses the compact line exactly as the original, but for the
//! flag word (see [`compact_lbr_line`] for why), so samples can be counted by their compact
//! text and each distinct one parsed once.

use std::mem::MaybeUninit;

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
///
/// A line with neither `:` nor whitespace other than spaces (every line of a perf script
/// without an event name) has no token to keep whole: its cuts are found for 64 bytes at
/// a time ([`compact_blocks`]); other lines token by token ([`compact_tokens`]).
pub(crate) fn compact_lbr_line(line: &[u8], out: &mut Vec<u8>, masks: &mut ByteMasks) {
    if !compact_blocks(line, out) {
        masks.set(line);
        compact_tokens(line, out, masks);
    }
}

/// [`compact_lbr_line`] for a line without tokens kept whole: per 64-byte block, its masks,
/// the bytes to drop found with a few word operations, then the runs of bytes kept copied.
/// `false` (and `out` as it was) when the line has a byte that may keep a token whole
/// ([`is_unusual`]).
///
/// Each cut is found by carry propagation. Adding a bit at a start position to a mask of
/// "gap" positions ripples the carry through the run of gaps above it and leaves a bit at
/// the first position after the run. With `R` the spaces (and everything past the line,
/// so no carry leaves it), `E` the slashes and gaps `G = !(R | E)`:
/// - `((R << 1) + G) & E`: the first slash after each space, unless a space comes first
///   (the line's start counts as after a space);
/// - the same from one past each first slash: each token's second slash;
/// - `!R & !(second + !R)`: from each second slash up to the next space, the bytes
///   dropped (the carry clears the run of non-spaces it crosses).
///
/// Carries and the top bits of shifted masks pass from one block to the next.
fn compact_blocks(line: &[u8], out: &mut Vec<u8>) -> bool {
    let n = line.len();
    let base = out.len();
    // Room for a 64-byte copy at any point of the output.
    out.reserve(n + 64);
    let room = &mut out.spare_capacity_mut()[..n + 64];
    let mut written = 0;
    let (mut space_top, mut first_top) = (1u64, 0u64);
    let (mut carry_first, mut carry_second, mut carry_drop) = (0u64, 0u64, 0u64);
    for w in 0..n.div_ceil(64) {
        let (spaces, slashes, unusual) = line_block_masks(line, w);
        let valid = match n - w * 64 {
            64.. => !0u64,
            tail => (1u64 << tail) - 1,
        };
        if unusual {
            return false;
        }
        let r = spaces | !valid;
        let e = slashes;
        let gaps = !(r | e);
        let (first_sum, c) = add3((r << 1) | space_top, gaps, carry_first);
        carry_first = c;
        let first = first_sum & e;
        let (second_sum, c) = add3((first << 1) | first_top, gaps, carry_second);
        carry_second = c;
        let second = second_sum & e;
        let (drop_sum, c) = add3(second, !r, carry_drop);
        carry_drop = c;
        let dropped = !r & !drop_sum;
        space_top = r >> 63;
        first_top = first >> 63;
        let mut keep = !dropped & valid;
        while keep != 0 {
            let start = keep.trailing_zeros() as usize;
            let len = (!(keep >> start)).trailing_zeros() as usize;
            let from = w * 64 + start;
            // A fixed-size copy (a few vector moves) covers the run: an entry's
            // ` 0xFROM/0xTO` (30 bytes with 12-digit user addresses) in 32, a longer run
            // (kernel addresses) in 64; near the line's end, the run itself.
            // (Each copy is of a length known here: a slice chosen among them would be
            // copied by a call to `memcpy`.)
            match (line.get(from..from + 32), line.get(from..from + 64)) {
                (Some(run), _) if len <= 32 => write_fixed::<32>(&mut room[written..], run),
                (_, Some(run)) => write_fixed::<64>(&mut room[written..], run),
                _ => write_short(&mut room[written..written + len], &line[from..from + len]),
            }
            written += len;
            // Clears the lowest run of ones.
            keep &= keep.wrapping_add(1u64 << start);
        }
    }
    // SAFETY: the copies above wrote every byte of `room[..written]` (each run at the
    // end of the previous one), within the capacity reserved.
    unsafe { out.set_len(base + written) };
    true
}

/// Copies the `N` bytes of `src` to the start of `dst` (at least `N` long).
#[inline(always)]
fn write_fixed<const N: usize>(dst: &mut [MaybeUninit<u8>], src: &[u8]) {
    let src: &[u8; N] = src.try_into().expect("N bytes");
    write_bytes(&mut dst[..N], src);
}

/// Copies `src` into `dst` (of the same length): up to 64 bytes as two fixed-size copies
/// that overlap (the first and the last bytes of a power-of-two size), a run near the end
/// of a line, which cannot be read 32 or 64 bytes at a time, without a call to `memcpy`.
#[inline(always)]
fn write_short(dst: &mut [MaybeUninit<u8>], src: &[u8]) {
    #[inline(always)]
    fn ends<const N: usize>(dst: &mut [MaybeUninit<u8>], src: &[u8]) {
        let n = src.len();
        write_fixed::<N>(dst, &src[..N]);
        write_fixed::<N>(&mut dst[n - N..], &src[n - N..]);
    }
    match src.len() {
        0 => {}
        1 => write_fixed::<1>(dst, src),
        2..=3 => ends::<2>(dst, src),
        4..=7 => ends::<4>(dst, src),
        8..=15 => ends::<8>(dst, src),
        16..=31 => ends::<16>(dst, src),
        32..=64 => ends::<32>(dst, src),
        _ => write_bytes(dst, src),
    }
}

/// Copies `src` into `dst` (of the same length).
#[inline(always)]
fn write_bytes(dst: &mut [MaybeUninit<u8>], src: &[u8]) {
    assert_eq!(dst.len(), src.len());
    // SAFETY: both slices hold `src.len()` bytes (checked above); `dst` is borrowed
    // mutably, so they do not overlap; any byte is a valid `MaybeUninit<u8>`.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr().cast::<u8>(), src.len()) }
}

/// `a + b + carry` (`carry` 0 or 1) and the carry out (0 or 1).
#[inline(always)]
fn add3(a: u64, b: u64, carry: u64) -> (u64, u64) {
    let (sum, o1) = a.overflowing_add(b);
    let (sum, o2) = sum.overflowing_add(carry);
    (sum, u64::from(o1 | o2))
}

/// [`compact_lbr_line`] token by token, from the line's masks (set).
fn compact_tokens(line: &[u8], out: &mut Vec<u8>, masks: &ByteMasks) {
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
            (masks.unusual && is_space(line[cut - 1])) || (first && line[end - 1] == b':')
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
    /// `\n` ends it) or a `:`: what may keep a token whole.
    unusual: bool,
}

impl ByteMasks {
    fn set(&mut self, line: &[u8]) {
        let words = line.len().div_ceil(64);
        let m = self;
        m.spaces.clear();
        m.spaces.resize(words, 0);
        m.slashes.clear();
        m.slashes.resize(words, 0);
        let mut unusual = false;
        for w in 0..words {
            let (s, l, u) = line_block_masks(line, w);
            m.spaces[w] = s;
            m.slashes[w] = l;
            unusual |= u;
        }
        m.unusual = unusual;
    }
}

/// [`block_masks`] of the 64-byte block `w` of `line`; the last one, if shorter, padded
/// with zero bytes (neither spaces, slashes nor unusual).
#[inline(always)]
fn line_block_masks(line: &[u8], w: usize) -> (u64, u64, bool) {
    match line.get(w * 64..w * 64 + 64) {
        Some(block) => block_masks(block.try_into().expect("64 bytes")),
        None => {
            let tail = &line[w * 64..];
            let mut block = [0u8; 64];
            block[..tail.len()].copy_from_slice(tail);
            block_masks(&block)
        }
    }
}

/// Whether `b` is whitespace other than a space, or a `:` (see [`ByteMasks::unusual`]): what
/// [`block_masks`] flags, a byte at a time.
#[cfg(any(test, not(target_arch = "x86_64")))]
fn is_unusual(b: u8) -> bool {
    (b != b' ' && is_space(b)) || b == b':'
}

/// The space and slash masks of 64 bytes, and whether they hold an unusual byte
/// ([`is_unusual`]: a byte from `\t` to `\r`, or `:`).
#[cfg(target_arch = "x86_64")]
fn block_masks(block: &[u8; 64]) -> (u64, u64, bool) {
    use std::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_cmpeq_epi8, _mm_cmpgt_epi8, _mm_loadu_si128, _mm_movemask_epi8,
        _mm_or_si128, _mm_set1_epi8, _mm_setzero_si128,
    };
    let (mut spaces, mut slashes) = (0u64, 0u64);
    let any_unusual;
    // SAFETY: SSE2 is part of x86_64; the four 16-byte loads are within the 64 bytes
    // (unaligned loads).
    unsafe {
        let space = _mm_set1_epi8(b' ' as i8);
        let slash = _mm_set1_epi8(b'/' as i8);
        let colon = _mm_set1_epi8(b':' as i8);
        // Signed compares: bytes from 0x80 are negative, below `\t`.
        let below_tab = _mm_set1_epi8(b'\t' as i8 - 1);
        let above_cr = _mm_set1_epi8(b'\r' as i8 + 1);
        let mut unusual = _mm_setzero_si128();
        for k in 0..4 {
            let v = _mm_loadu_si128(block.as_ptr().add(16 * k) as *const __m128i);
            let s = _mm_movemask_epi8(_mm_cmpeq_epi8(v, space)) as u16;
            let l = _mm_movemask_epi8(_mm_cmpeq_epi8(v, slash)) as u16;
            spaces |= u64::from(s) << (16 * k);
            slashes |= u64::from(l) << (16 * k);
            let in_range = _mm_and_si128(_mm_cmpgt_epi8(v, below_tab), _mm_cmpgt_epi8(above_cr, v));
            unusual = _mm_or_si128(unusual, in_range);
            unusual = _mm_or_si128(unusual, _mm_cmpeq_epi8(v, colon));
        }
        any_unusual = _mm_movemask_epi8(unusual) != 0;
    }
    (spaces, slashes, any_unusual)
}

/// The space and slash masks of 64 bytes, and whether they hold an unusual byte.
#[cfg(not(target_arch = "x86_64"))]
fn block_masks(block: &[u8; 64]) -> (u64, u64, bool) {
    let (mut spaces, mut slashes, mut other) = (0u64, 0u64, false);
    for (i, &b) in block.iter().enumerate() {
        spaces |= u64::from(b == b' ') << i;
        slashes |= u64::from(b == b'/') << i;
        other |= is_unusual(b);
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
        let mut entries = Vec::new();
        match parse_lbr_line(line, &mut EntryTokenCache::new(), &mut entries) {
            LbrLine::BadLeadingIp => "bad leading ip".into(),
            LbrLine::Entries { ip, truncated } => {
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
        block[40] = b':';
        assert!(block_masks(&block).2, "a colon");
        // Every byte value, as the byte-at-a-time definition says.
        for b in 0..=255u8 {
            let mut block = [b'a'; 64];
            block[37] = b;
            assert_eq!(block_masks(&block).2, is_unusual(b), "{b:#x}");
        }
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

    /// Cut 64 bytes at a time, a line gives what it gives token by token: lines of random
    /// tokens (slashes anywhere, runs of spaces, tokens longer than a block) of every
    /// length up to several blocks.
    #[test]
    fn blocks_cut_as_tokens_do() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let mut masks = ByteMasks::default();
        let (mut cut, mut lines) = (0, 0);
        for _ in 0..20_000 {
            let len = next(300) as usize;
            let mut line = Vec::with_capacity(len);
            while line.len() < len {
                line.push(match next(10) {
                    0..=1 => b' ',
                    2..=3 => b'/',
                    _ => b"0x1aP-9"[next(7) as usize],
                });
                if next(40) == 0 {
                    // A long token.
                    line.extend((0..next(150)).map(|i| if i % 37 == 5 { b'/' } else { b'a' }));
                }
            }
            masks.set(&line);
            assert!(!masks.unusual);
            let (mut by_blocks, mut by_tokens) = (b"kept".to_vec(), b"kept".to_vec());
            assert!(compact_blocks(&line, &mut by_blocks));
            compact_tokens(&line, &mut by_tokens, &masks);
            assert_eq!(
                String::from_utf8_lossy(&by_blocks),
                String::from_utf8_lossy(&by_tokens),
                "{:?}",
                String::from_utf8_lossy(&line)
            );
            cut += usize::from(by_tokens.len() < line.len() + 4);
            lines += 1;
        }
        // Most lines had something cut.
        assert!(cut * 2 > lines, "{cut} of {lines}");
        // A line with a byte that may keep a token whole is left to the tokens, wherever
        // the byte is (the output as it was).
        let line = " 0x1/0x2/P/-/-/1".repeat(9);
        for at in [0, 63, 64, 100, line.len() - 1] {
            for unusual in [b':', b'\t', b'\r'] {
                let mut odd = line.clone().into_bytes();
                odd[at] = unusual;
                let mut out = b"kept".to_vec();
                assert!(!compact_blocks(&odd, &mut out), "{at}");
                assert_eq!(out, b"kept");
            }
        }
    }

    /// Every length up to 64 and beyond is copied exactly (a copy past the end would panic
    /// on the slice's bounds; the bytes after it are checked too).
    #[test]
    fn short_copies_write_their_bytes_only() {
        let src: Vec<u8> = (1..=80).collect();
        for n in 0..=80 {
            let mut dst = [MaybeUninit::new(0u8); 80];
            write_short(&mut dst[..n], &src[..n]);
            // SAFETY: every byte was initialised above.
            let got: Vec<u8> = dst.iter().map(|b| unsafe { b.assume_init() }).collect();
            assert_eq!(got[..n], src[..n], "{n} bytes");
            assert!(got[n..].iter().all(|&b| b == 0), "{n} bytes: written past");
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

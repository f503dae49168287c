//! Disjoint ranges (`ProfileGeneratorBase::findDisjointRanges`, llvm-profgen.md §2.7.1):
//! overlapping range counts are summed per boundary-delimited piece; zero-count ranges
//! keep the gaps they cover as explicit 0-count pieces.

use std::collections::BTreeMap;

#[derive(Default)]
struct Boundary {
    begin: Option<u64>,
    end: Option<u64>,
    zero_begin: bool,
    zero_end: bool,
}

/// Splits `(start, end inclusive) → count` into disjoint ranges.
pub fn find_disjoint_ranges(ranges: &BTreeMap<(u64, u64), u64>) -> BTreeMap<(u64, u64), u64> {
    let mut points: BTreeMap<u64, Boundary> = BTreeMap::new();
    for (&(s, e), &c) in ranges {
        if s > e {
            continue;
        }
        let b = points.entry(s).or_default();
        b.begin = Some(b.begin.unwrap_or(0).saturating_add(c));
        if c == 0 {
            b.zero_begin = true;
        }
        let p = points.entry(e).or_default();
        p.end = Some(p.end.unwrap_or(0).saturating_add(c));
        if c == 0 {
            p.zero_end = true;
        }
    }
    let mut out = BTreeMap::new();
    let mut begin: Option<u64> = None;
    let mut zero_depth = 0i64;
    let mut count = 0u64;
    for (&addr, p) in &points {
        if let Some(bc) = p.begin {
            if let Some(b) = begin {
                if addr > b {
                    out.insert((b, addr - 1), count);
                }
            }
            count = count.saturating_add(bc);
            begin = Some(addr);
            zero_depth += i64::from(p.zero_begin);
        }
        if let Some(ec) = p.end {
            if let Some(b) = begin {
                out.insert((b, addr), count);
            }
            count = count.saturating_sub(ec);
            begin = addr.checked_add(1);
            zero_depth -= i64::from(p.zero_end);
            if count == 0 && zero_depth == 0 {
                begin = None;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(v: &[((u64, u64), u64)]) -> BTreeMap<(u64, u64), u64> {
        v.iter().copied().collect()
    }

    #[test]
    fn overlapping_ranges_sum() {
        // |<--100-->| and |<--200------>| from A: [A,B] 300, [B+1,C] 200.
        let out = find_disjoint_ranges(&m(&[((10, 20), 100), ((10, 30), 200)]));
        assert_eq!(out, m(&[((10, 20), 300), ((21, 30), 200)]));
    }

    #[test]
    fn shared_point_becomes_its_own_range() {
        let out = find_disjoint_ranges(&m(&[((10, 20), 100), ((20, 30), 200)]));
        assert_eq!(out, m(&[((10, 19), 100), ((20, 20), 300), ((21, 30), 200)]));
    }

    #[test]
    fn zero_range_fills_gaps() {
        let out = find_disjoint_ranges(&m(&[((12, 20), 100), ((25, 30), 200), ((10, 40), 0)]));
        assert_eq!(
            out,
            m(&[
                ((10, 11), 0),
                ((12, 20), 100),
                ((21, 24), 0),
                ((25, 30), 200),
                ((31, 40), 0)
            ])
        );
        // Without the zero range there is no gap piece.
        let out = find_disjoint_ranges(&m(&[((12, 20), 10), ((25, 30), 20)]));
        assert_eq!(out, m(&[((12, 20), 10), ((25, 30), 20)]));
    }
}

//! Context shaping shared with the symbolizer: recursion compression and depth trimming
//! (llvm-profgen's `CSProfileGenerator::compressRecursionContext` and `trimContext`).

/// Removes adjacent repeated subsequences of the context, for every sequence length from
/// 1 up to `max_size` (`None` = unlimited, llvm-profgen's -1; `Some(0)` leaves the context
/// alone). Repeats are found on exact equality of frames (call-site addresses, or function
/// plus call-site location), e.g. `[a, b, c, b, c, d]` → `[a, b, c, d]`.
///
/// This is llvm-profgen's linear in-place algorithm: for each length `I` a window of `2·I`
/// slides over the context; when its halves are equal the right half is skipped, otherwise
/// the right half's part that differs from the left half is kept.
pub fn compress_recursion<T: PartialEq + Clone>(context: &mut Vec<T>, max_size: Option<u32>) {
    let half = context.len() / 2;
    let mut max_dedup = match max_size {
        None => half,
        Some(m) => (m as usize).min(half),
    };
    let mut size = 1usize;
    while size <= max_dedup {
        let len = context.len();
        // Indices follow the reference: `right` is the end of the window's left half,
        // `end` the length of what is kept so far; `left` may go to -1.
        let mut right = size as isize - 1;
        let mut end = size;
        let mut left_boundary: isize = 0;
        while (right as usize) + size < len {
            let mut left = right;
            while left >= left_boundary && context[left as usize] == context[left as usize + size] {
                left -= 1;
            }
            let duplication = left < left_boundary;
            left_boundary = right + 1;
            if duplication {
                right += size as isize;
            } else {
                let from = (right + 1) as usize;
                let to = (left + size as isize + 1) as usize;
                move_within(context, from..to, end);
                end += to - from;
                right = left + size as isize;
            }
        }
        let from = (right + 1) as usize;
        move_within(context, from..len, end);
        end += len - from;
        size += 1;
        context.truncate(end);
        max_dedup = max_dedup.min(end / 2);
    }
}

/// `copy_within` for frames that are `Clone` but not `Copy` (string frames): copies
/// `range` to `dest`, with `dest <= range.start`, front to back.
fn move_within<T: Clone>(context: &mut [T], range: std::ops::Range<usize>, dest: usize) {
    if dest == range.start {
        return;
    }
    for (k, i) in range.enumerate() {
        context[dest + k] = context[i].clone();
    }
}

/// Keeps the last `depth` frames (the callee side) when the context is longer
/// (`None` = unlimited).
pub fn trim_context<T>(context: &mut Vec<T>, depth: Option<usize>) {
    if let Some(depth) = depth {
        if depth < context.len() {
            context.drain(..context.len() - depth);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compressed(v: &[u64], max: Option<u32>) -> Vec<u64> {
        let mut v = v.to_vec();
        compress_recursion(&mut v, max);
        v
    }

    #[test]
    fn compresses_runs_of_one() {
        assert_eq!(compressed(&[1, 1, 2, 2], None), vec![1, 2]);
        assert_eq!(compressed(&[7, 5, 5, 5, 5, 5, 9], None), vec![7, 5, 9]);
    }

    #[test]
    fn compresses_longer_sequences() {
        assert_eq!(compressed(&[1, 2, 3, 2, 3, 4], None), vec![1, 2, 3, 4]);
        assert_eq!(
            compressed(&[1, 2, 3, 1, 2, 3, 1, 2, 3], None),
            vec![1, 2, 3]
        );
        // The reference's own example: [a, b, c, b, c] with I = 2.
        assert_eq!(compressed(&[10, 11, 12, 11, 12], None), vec![10, 11, 12]);
    }

    #[test]
    fn respects_max_size() {
        assert_eq!(
            compressed(&[1, 2, 1, 2, 3, 3], Some(1)),
            vec![1, 2, 1, 2, 3]
        );
        assert_eq!(
            compressed(&[1, 2, 1, 2, 3, 3], Some(0)),
            vec![1, 2, 1, 2, 3, 3]
        );
        assert_eq!(compressed(&[1, 2, 1, 2, 3, 3], Some(2)), vec![1, 2, 3]);
    }

    #[test]
    fn keeps_non_repeating() {
        assert_eq!(compressed(&[1, 2, 3, 4, 5], None), vec![1, 2, 3, 4, 5]);
        assert_eq!(compressed(&[1, 2, 1, 3], None), vec![1, 2, 1, 3]);
        assert_eq!(compressed(&[], None), Vec::<u64>::new());
        assert_eq!(compressed(&[4], None), vec![4]);
    }

    #[test]
    fn trims_caller_side() {
        let mut v = vec![1, 2, 3, 4];
        trim_context(&mut v, Some(2));
        assert_eq!(v, vec![3, 4]);
        trim_context(&mut v, Some(5));
        assert_eq!(v, vec![3, 4]);
        trim_context(&mut v, None);
        assert_eq!(v, vec![3, 4]);
        trim_context(&mut v, Some(0));
        assert!(v.is_empty());
    }
}

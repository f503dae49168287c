//! Context shaping: recursion compression and depth trimming
//! (`CSProfileGenerator::compressRecursionContext` / `trimContext`).

/// Removes adjacent repeated sequences of up to `max_size` elements (-1: no limit),
/// in place, with llvm-profgen's sliding-window algorithm.
pub fn compress_recursion<T: PartialEq + Clone>(ctx: &mut Vec<T>, max_size: i32) {
    let mut i: usize = 1;
    let hs = ctx.len() / 2;
    let mut max_dedup = if max_size < 0 {
        hs
    } else {
        (max_size as usize).min(hs)
    };
    while i <= max_dedup {
        let mut right = i - 1;
        let mut end = i;
        let mut left_boundary = 0usize;
        while right + i < ctx.len() {
            // Longest common suffix of the two halves of the window.
            let mut left = right as isize;
            while left >= left_boundary as isize && ctx[left as usize] == ctx[left as usize + i] {
                left -= 1;
            }
            let duplicated = left < left_boundary as isize;
            left_boundary = right + 1;
            if duplicated {
                right += i;
            } else {
                let l = (left + i as isize) as usize;
                for k in right + 1..=l {
                    ctx[end] = ctx[k].clone();
                    end += 1;
                }
                right = l;
            }
        }
        for k in right + 1..ctx.len() {
            ctx[end] = ctx[k].clone();
            end += 1;
        }
        ctx.truncate(end);
        i += 1;
        max_dedup = max_dedup.min(end / 2);
    }
}

/// Keeps the last `depth` elements (-1 or ≥ len: unchanged).
pub fn trim_context<T>(ctx: &mut Vec<T>, depth: i32) {
    if depth < 0 || depth as usize >= ctx.len() {
        return;
    }
    let cut = ctx.len() - depth as usize;
    ctx.drain(..cut);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compresses_adjacent_repeats() {
        let mut v = vec!['a', 'a', 'b', 'b'];
        compress_recursion(&mut v, -1);
        assert_eq!(v, vec!['a', 'b']);
        let mut v = vec!['a', 'b', 'c', 'b', 'c'];
        compress_recursion(&mut v, -1);
        assert_eq!(v, vec!['a', 'b', 'c']);
        let mut v = vec!['x', 'a', 'b', 'a', 'b', 'a', 'b', 'y'];
        compress_recursion(&mut v, -1);
        assert_eq!(v, vec!['x', 'a', 'b', 'y']);
        let mut v = vec!['x', 'a', 'b', 'a', 'b'];
        compress_recursion(&mut v, 1);
        assert_eq!(v, vec!['x', 'a', 'b', 'a', 'b']);
        let mut v = vec!['a', 'a', 'a'];
        compress_recursion(&mut v, 0);
        assert_eq!(v, vec!['a', 'a', 'a']);
    }

    #[test]
    fn trims_to_last_frames() {
        let mut v = vec![1, 2, 3];
        trim_context(&mut v, 2);
        assert_eq!(v, vec![2, 3]);
        trim_context(&mut v, -1);
        assert_eq!(v, vec![2, 3]);
    }
}

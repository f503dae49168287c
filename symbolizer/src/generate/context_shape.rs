//! Context shaping: recursion compression and depth trimming
//! (`CSProfileGenerator::compressRecursionContext` / `trimContext`).

/// Removes adjacent repeated sequences of up to `max_size` elements (-1: no limit), in
/// place: llvm-profgen's option spelling over the unwinder's implementation
/// ([`unwinder::compress_recursion`]), which probe address contexts use too.
pub fn compress_recursion<T: PartialEq + Clone>(ctx: &mut Vec<T>, max_size: i32) {
    unwinder::compress_recursion(ctx, u32::try_from(max_size).ok());
}

/// Keeps the last `depth` elements (-1 or ≥ len: unchanged).
pub fn trim_context<T>(ctx: &mut Vec<T>, depth: i32) {
    unwinder::trim_context(ctx, usize::try_from(depth).ok());
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

//! [`PreviousLine`]: the entries of the branch-stack line parsed last, for the next line
//! to take those it repeats.
//!
//! A branch stack is a window over the taken branches, newest first: the next sample of
//! the same thread holds the branches taken since, then most of the previous sample's
//! entries, shifted. The distinct samples of a tally come in order of first appearance,
//! so consecutive ones are often consecutive samples (on the convert benchmark's
//! recording, 9 entries in 10 of the distinct samples were in the sample parsed just
//! before). Once the line being parsed is, from some token on, the previous line's entries
//! from their first token on (cut at a token's end), its remaining entries are the
//! previous line's: the same bytes give the same entries, as every token is parsed by its
//! bytes alone.

use crate::LbrEntry;

/// Most entries a line is parsed into before it is compared with the previous one: the
/// branches taken between two samples, which a sampling period keeps small.
const MAX_SHIFT: usize = 8;

/// The previous line's entries and the bytes they were parsed from.
#[derive(Default)]
pub(crate) struct PreviousLine {
    /// The previous line from its first entry's token to its end (trailing whitespace
    /// trimmed); empty when there is none to take from.
    bytes: Vec<u8>,
    /// Where each entry's token starts in `bytes`.
    starts: Vec<u32>,
    entries: Vec<LbrEntry>,
    /// How many times entries were taken (tests).
    #[cfg(test)]
    pub(crate) taken: std::cell::Cell<usize>,
}

impl PreviousLine {
    /// Whether a line that has `parsed` entries so far should be compared with the
    /// previous one at its next token.
    #[inline]
    pub(crate) fn worth_trying(&self, parsed: usize) -> bool {
        parsed <= MAX_SHIFT && !self.bytes.is_empty()
    }

    /// The entries of `rest`, the end of a line from one of its entry tokens on (trimmed),
    /// when its bytes are the previous line's from its first token on, cut at a token's end.
    #[inline]
    pub(crate) fn entries_of(&self, rest: &[u8]) -> Option<(&[LbrEntry], &[u32])> {
        let n = rest.len();
        let head = self.bytes.get(..n)?;
        // The first word first: most tries fail there.
        if n < 8 || head[..8] != rest[..8] || head != rest {
            return None;
        }
        if self.bytes.get(n).is_some_and(|&b| b != b' ') {
            return None;
        }
        let m = self.starts.partition_point(|&s| (s as usize) < n);
        #[cfg(test)]
        self.taken.set(self.taken.get() + 1);
        Some((&self.entries[..m], &self.starts[..m]))
    }

    /// Remembers `line` (trimmed), whose entry tokens start at `starts` and were parsed
    /// into `entries`, every token of it from the first entry's on.
    pub(crate) fn remember(&mut self, line: &[u8], starts: &[u32], entries: &[LbrEntry]) {
        debug_assert_eq!(starts.len(), entries.len());
        self.bytes.clear();
        self.starts.clear();
        self.entries.clear();
        let Some(&first) = starts.first() else {
            return;
        };
        self.bytes.extend_from_slice(&line[first as usize..]);
        self.starts.extend(starts.iter().map(|&s| s - first));
        self.entries.extend_from_slice(entries);
    }

    /// Nothing to take from: the last line did not end in entries only.
    pub(crate) fn forget(&mut self) {
        self.bytes.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(from: u64) -> LbrEntry {
        LbrEntry {
            from,
            to: from + 1,
            flags: 0,
        }
    }

    #[test]
    fn the_rest_of_a_line_takes_the_entries_it_repeats() {
        let mut prev = PreviousLine::default();
        assert!(!prev.worth_trying(0));
        let line = b"7 0x10/0x11  0x20/0x21 0x30/0x31/P";
        prev.remember(line, &[2, 12, 22], &[entry(0x10), entry(0x20), entry(0x30)]);
        assert!(prev.worth_trying(MAX_SHIFT) && !prev.worth_trying(MAX_SHIFT + 1));
        // Cut after the second token (the line being parsed is shorter).
        let (entries, starts) = prev.entries_of(b"0x10/0x11  0x20/0x21").unwrap();
        assert_eq!(entries, [entry(0x10), entry(0x20)]);
        assert_eq!(starts, [0, 10]);
        // The whole rest.
        let (entries, _) = prev
            .entries_of(b"0x10/0x11  0x20/0x21 0x30/0x31/P")
            .unwrap();
        assert_eq!(entries.len(), 3);
        // Not at a token's end, a differing byte, a longer rest, too short to tell.
        assert!(prev.entries_of(b"0x10/0x11  0x20/0x2").is_none());
        assert!(prev.entries_of(b"0x10/0x11  0x20/0x22").is_none());
        assert!(prev
            .entries_of(b"0x10/0x11  0x20/0x21 0x30/0x31/P 0x1/0x2")
            .is_none());
        assert!(prev.entries_of(b"0x10/0x").is_none());
        prev.forget();
        assert!(!prev.worth_trying(0));
        assert!(prev.entries_of(b"0x10/0x11  0x20/0x21").is_none());
    }
}

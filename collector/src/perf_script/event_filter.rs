//! `--perf-event`: the event names of LBR-only perf script samples (`perf script -F
//! event,ip,brstack`), as llvm-profgen 19's `extractLBRStack` reads them.
//!
//! A branch-stack line's first space-separated token, when it ends with `:`, is the event
//! name: the token with leading whitespace and every trailing `:` removed (`cycles:` is
//! `cycles`, `branches:u:` is `branches:u`). With a filter, a sample whose event is not in
//! it is dropped (with its count line), and a sample line without an event name is warned
//! about; without a filter, a sample line with an event name is warned about. Every line of
//! an LBR-only script that is not an MMAP line or a count line is a sample line (a blank
//! line too), numbered from 1 as llvm-profgen numbers them.

use super::reader::is_mmap_event;

/// The outcome of [`filter_events`].
#[derive(Debug, Default)]
pub struct EventFilterOutcome {
    /// The text without the samples the filter drops (`None`: nothing dropped).
    pub kept: Option<Vec<u8>>,
    /// llvm-profgen's per-line warnings, without the `warning: ` prefix, in line order.
    pub warnings: Vec<String>,
    /// Samples dropped for an event name not in the filter.
    pub dropped: u64,
    /// Sample lines kept.
    pub kept_samples: u64,
}

/// The event name of a branch-stack line, when its first token ends with `:`.
pub fn event_name(line: &[u8]) -> Option<&[u8]> {
    let line = trim_end_whitespace(line);
    let start = line.iter().position(|&b| b != b' ')?;
    let rest = &line[start..];
    let token = &rest[..rest.iter().position(|&b| b == b' ').unwrap_or(rest.len())];
    if !token.ends_with(b":") {
        return None;
    }
    let from = token
        .iter()
        .position(|b| !b.is_ascii_whitespace() && *b != 0x0b)
        .unwrap_or(token.len());
    let mut to = token.len();
    while to > from && token[to - 1] == b':' {
        to -= 1;
    }
    Some(&token[from..to])
}

/// Whether the LBR-only script `text` has an event name on its first sample line.
pub fn has_event_names(text: &[u8]) -> bool {
    lines(text)
        .find(|l| !is_mmap_event(l) && !is_count_line(l))
        .is_some_and(|l| event_name(l).is_some())
}

/// Applies the event `filter` (empty: none) to the samples of the LBR-only script `text`.
pub fn filter_events(text: &[u8], filter: &[String]) -> EventFilterOutcome {
    let mut out = EventFilterOutcome::default();
    let mut kept: Vec<u8> = Vec::new();
    // Bytes of `text` up to `copied` are in `kept` (or dropped).
    let mut copied = 0usize;
    let mut count_line: Option<usize> = None;
    let mut offset = 0usize;
    for (i, line) in lines(text).enumerate() {
        let start = offset;
        offset += line.len() + 1;
        if count_line.is_none() && is_count_line(line) && !is_mmap_event(line) {
            count_line = Some(start);
            continue;
        }
        if is_mmap_event(line) && count_line.is_none() {
            continue;
        }
        let sample_start = count_line.take().unwrap_or(start);
        let number = i + 1;
        let shown = || String::from_utf8_lossy(line).into_owned();
        let name = event_name(line);
        match name {
            Some(_) if filter.is_empty() => out.warnings.push(format!(
                "No --perf-event filter was specified, but an \"event\" field was found in line {number}: {}",
                shown()
            )),
            None if !filter.is_empty() => out.warnings.push(format!(
                "A --perf-event filter was specified, but no \"event\" field found in line {number}: {}",
                shown()
            )),
            _ => {}
        }
        if name
            .is_some_and(|name| !filter.is_empty() && !filter.iter().any(|f| f.as_bytes() == name))
        {
            kept.extend_from_slice(&text[copied..sample_start]);
            copied = offset.min(text.len());
            out.dropped += 1;
        } else {
            out.kept_samples += 1;
        }
    }
    if out.dropped > 0 {
        kept.extend_from_slice(&text[copied.min(text.len())..]);
        out.kept = Some(kept);
    }
    out
}

/// `parseAggregatedCount`: the whole line is a decimal `u64`.
fn is_count_line(line: &[u8]) -> bool {
    !line.is_empty()
        && line.len() <= 20
        && line.iter().all(u8::is_ascii_digit)
        && std::str::from_utf8(line).is_ok_and(|s| s.parse::<u64>().is_ok())
}

/// The lines of `text` as `std::getline` gives them (no line after a final newline).
fn lines(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let text = text.strip_suffix(b"\n").unwrap_or(text);
    let empty = text.is_empty();
    text.split(|&b| b == b'\n').filter(move |_| !empty)
}

/// LLVM `StringRef::rtrim()`: trailing ` \t\n\v\f\r` removed.
fn trim_end_whitespace(mut s: &[u8]) -> &[u8] {
    while let [rest @ .., last] = s {
        if matches!(last, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
            s = rest;
        } else {
            break;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = "\
PERF_RECORD_MMAP2 1/1: [0x400000(0x1000) @ 0 00:00 0 0]: r-xp /bin/app
cycles: 40062f 0x4005c8/0x4005dc/P/-/-/0 0x40062f/0x4005b0/P/-/-/0
3
branches:u: 400630 0x4005c8/0x4005dc/P/-/-/0 0x40062f/0x4005b0/P/-/-/0
cycles:: 400631 0x4005c8/0x4005dc/P/-/-/0 0x40062f/0x4005b0/P/-/-/0
";

    #[test]
    fn event_names_lose_every_trailing_colon() {
        assert_eq!(event_name(b"cycles: 40062f 0x1/0x2"), Some(&b"cycles"[..]));
        assert_eq!(
            event_name(b"  branches:u: 1 0x1/0x2"),
            Some(&b"branches:u"[..])
        );
        assert_eq!(event_name(b"cycles:: 1"), Some(&b"cycles"[..]));
        assert_eq!(event_name(b"40062f 0x1/0x2"), None);
        assert_eq!(event_name(b""), None);
        assert!(has_event_names(SCRIPT.as_bytes()));
        assert!(!has_event_names(b"40062f 0x4005c8/0x4005dc/P/-/-/0\n"));
    }

    #[test]
    fn a_filter_drops_other_events_with_their_count_lines() {
        let out = filter_events(SCRIPT.as_bytes(), &["cycles".into()]);
        assert_eq!((out.dropped, out.kept_samples), (1, 2));
        assert!(out.warnings.is_empty(), "{:?}", out.warnings);
        let kept = String::from_utf8(out.kept.unwrap()).unwrap();
        let want: String = SCRIPT
            .lines()
            .filter(|l| *l != "3" && !l.starts_with("branches"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(kept, want);
        let out = filter_events(SCRIPT.as_bytes(), &["branches:u".into(), "x".into()]);
        assert_eq!(out.dropped, 2);
        let kept = String::from_utf8(out.kept.unwrap()).unwrap();
        assert_eq!(kept.lines().count(), 3, "{kept}");
        assert!(kept.contains("\n3\nbranches:u: 400630"), "{kept}");
    }

    #[test]
    fn warnings_name_each_line() {
        let out = filter_events(SCRIPT.as_bytes(), &[]);
        assert!(out.kept.is_none());
        assert_eq!(out.warnings.len(), 3);
        assert_eq!(
            out.warnings[1],
            "No --perf-event filter was specified, but an \"event\" field was found in line 4: \
             branches:u: 400630 0x4005c8/0x4005dc/P/-/-/0 0x40062f/0x4005b0/P/-/-/0"
        );
        let out = filter_events(b"1 0x1/0x2\n\n2\n5 0x1/0x2\n", &["cycles".into()]);
        assert_eq!(out.dropped, 0);
        assert_eq!(
            out.warnings,
            [
                "A --perf-event filter was specified, but no \"event\" field found in line 1: 1 0x1/0x2",
                "A --perf-event filter was specified, but no \"event\" field found in line 2: ",
                "A --perf-event filter was specified, but no \"event\" field found in line 4: 5 0x1/0x2",
            ]
        );
    }
}

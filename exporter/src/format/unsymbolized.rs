//! llvm-profgen's unsymbolized profile (`--skip-symbolization` output, `--unsymbolized-profile` input).
//!
//! The counters of [`unwinder::CounterSet`] as text, byte-for-byte as llvm-profgen 19 writes
//! them (`PerfScriptReader::writeUnsymbolizedProfile`):
//!
//! ```text
//! [0x7f4 @ 0x7bf]          context, only for context-sensitive profiles ("[]" when empty)
//!   2                      number of ranges
//!   5ff-62f:6              start-end (inclusive):count, ascending
//!   640-645:3
//!   1                      number of branches
//!   7bf->760:3             source->target:count, ascending
//! ```
//!
//! * Contexts are sorted as the printed strings (a `std::map<std::string, ..>`); blocks of
//!   context-sensitive profiles are indented by 2 spaces, a flat profile has one block
//!   without header and no indentation. A flat profile always has its block (`0`/`0` when
//!   empty); a context-sensitive profile without contexts is an empty file.
//! * Addresses are lower-case hex without `0x`, as offsets from the preferred base
//!   (`--use-offset`, the default); the external sentinel 1 prints as `1 − base`
//!   (wrapping, e.g. `ffffffffffc00001`).
//! * Probe contexts print call-site offsets `0x7f4 @ 0x7bf`; line (DWARF) contexts print
//!   symbolized frames `main:1 @ foo:3.1 @ bar`, which the caller formats (the symbolizer
//!   owns inline frames); keys that print the same are merged, as llvm-profgen keys its
//!   counters by the expanded context.
//!
//! The reader (`UnsymbolizedProfileReader::readSampleCounters`) keeps contexts as strings,
//! adds the base back, sums duplicate blocks and counters, and reports the line of a fault.

use std::collections::BTreeMap;
use std::io::Write;

use symbolizer::generate::cs::expand_line_context;
use symbolizer::generate::GenerateOptions;
use symbolizer::profile::SampleContext;
use symbolizer::ProfiledBinary;
use unwinder::{ContextCounters, CounterKind, CounterSet};

/// Errors of the unsymbolized profile writer and reader.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UnsymbolizedError {
    /// Writing failed.
    #[error("writing the unsymbolized profile: {0}")]
    Io(#[from] std::io::Error),
    /// Line contexts need the symbolizer's formatter.
    #[error("line-based contexts need a context formatter")]
    MissingLineFormatter,
    /// A line of the input is not what the format expects at that point.
    #[error("invalid unsymbolized profile at line {line}: {reason}: {text:?}")]
    Invalid {
        /// 1-based line number (the line after the last when the input ended early).
        line: usize,
        /// What was expected.
        reason: &'static str,
        /// The offending line (empty at end of input).
        text: String,
    },
}

/// Formats a line (DWARF) context key — frame addresses in preferred addresses, outermost
/// first — as llvm-profgen's context string without brackets (`main:1 @ foo`).
pub type LineContextFormatter<'a> = &'a dyn Fn(&[u64]) -> String;

/// Writes `counters` as llvm-profgen's unsymbolized profile. `address_base` is subtracted
/// from every address (the preferred base for `--use-offset`, 0 for absolute addresses).
pub fn write_unsymbolized(
    out: &mut dyn Write,
    counters: &CounterSet,
    address_base: u64,
    line_context: Option<LineContextFormatter<'_>>,
) -> Result<(), UnsymbolizedError> {
    let mut blocks: BTreeMap<String, ContextCounters> = BTreeMap::new();
    for (key, c) in &counters.contexts {
        let name = match counters.kind {
            CounterKind::Flat => String::new(),
            CounterKind::ProbeContext => probe_context_string(key, address_base),
            CounterKind::LineContext => {
                let format = line_context.ok_or(UnsymbolizedError::MissingLineFormatter)?;
                format(key)
            }
        };
        blocks.entry(name).or_default().merge(c);
    }
    let cs = counters.kind != CounterKind::Flat;
    if !cs {
        blocks.entry(String::new()).or_default();
    }
    write_blocks(out, &blocks, cs, address_base)
}

/// The name of line-context `key` (call-site addresses, outermost first) of `binary` in an
/// unsymbolized profile: symbolized (`main:7 @ quick`, llvm-profgen's form) when the binary
/// has DWARF, else its call-site offsets (`0x7f4 @ 0x7bf`), which a host with the debug
/// file reads back as line-context counters
/// ([`UnsymbolizedProfile::to_counter_set_for`]) and symbolizes.
pub fn line_context_name(
    binary: &ProfiledBinary,
    key: &[u64],
    address_base: u64,
    opts: &GenerateOptions,
) -> String {
    if !binary.has_line_info() {
        return probe_context_string(key, address_base);
    }
    let (frames, _) = expand_line_context(binary, key, opts);
    SampleContext { frames }.to_string()
}

/// `0x7f4 @ 0x7bf`: call-site offsets, lower-case, joined by " @ ".
pub fn probe_context_string(key: &[u64], address_base: u64) -> String {
    let mut s = String::new();
    for (i, a) in key.iter().enumerate() {
        if i > 0 {
            s.push_str(" @ ");
        }
        s.push_str(&format!("0x{:x}", a.wrapping_sub(address_base)));
    }
    s
}

fn write_blocks(
    out: &mut dyn Write,
    blocks: &BTreeMap<String, ContextCounters>,
    cs: bool,
    base: u64,
) -> Result<(), UnsymbolizedError> {
    let indent = if cs { "  " } else { "" };
    let mut buf = String::new();
    for (name, c) in blocks {
        use std::fmt::Write as _;
        if cs {
            let _ = writeln!(buf, "[{name}]");
        }
        for (map, sep) in [(&c.ranges, "-"), (&c.branches, "->")] {
            let _ = writeln!(buf, "{indent}{}", map.len());
            for (&(a, b), n) in map {
                let _ = writeln!(
                    buf,
                    "{indent}{:x}{sep}{:x}:{n}",
                    a.wrapping_sub(base),
                    b.wrapping_sub(base)
                );
            }
        }
        if buf.len() > 1 << 16 {
            out.write_all(buf.as_bytes())?;
            buf.clear();
        }
    }
    out.write_all(buf.as_bytes())?;
    Ok(())
}

/// An unsymbolized profile as read back: contexts as strings (without brackets; "" for a
/// flat profile or the empty context), counters in absolute addresses.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct UnsymbolizedProfile {
    /// True when the input had `[...]` context lines.
    pub context_sensitive: bool,
    /// Counters per context string.
    pub contexts: BTreeMap<String, ContextCounters>,
}

impl UnsymbolizedProfile {
    /// Writes the profile back (byte-identical to llvm-profgen's output for its own input).
    pub fn write(&self, out: &mut dyn Write, address_base: u64) -> Result<(), UnsymbolizedError> {
        write_blocks(out, &self.contexts, self.context_sensitive, address_base)
    }

    /// Sums another profile into this one (host aggregation of unsymbolized profiles).
    /// For a profile read with base 0: the preferred base the writer used, recovered from
    /// the external sentinel, which prints as `1 − base` (no code offset comes near 2^63).
    /// `None` when no branch has an external end.
    pub fn sentinel_base(&self) -> Option<u64> {
        self.contexts
            .values()
            .flat_map(|c| c.branches.keys())
            .flat_map(|&(s, t)| [s, t])
            .find(|&a| a >= 1 << 63)
            .map(|a| 1u64.wrapping_sub(a))
    }

    /// Adds `base` to every counter address, as reading the same text with `base` would
    /// have (adding a constant keeps distinct keys distinct, so every count is unchanged).
    pub fn rebase(&mut self, base: u64) {
        let shift = |map: &mut BTreeMap<(u64, u64), u64>| {
            *map = std::mem::take(map)
                .into_iter()
                .map(|((a, b), n)| ((a.wrapping_add(base), b.wrapping_add(base)), n))
                .collect();
        };
        for c in self.contexts.values_mut() {
            shift(&mut c.ranges);
            shift(&mut c.branches);
        }
    }

    /// Sums `other` into `self`.
    pub fn merge(&mut self, other: &UnsymbolizedProfile) {
        self.context_sensitive |= other.context_sensitive;
        for (k, c) in &other.contexts {
            self.contexts.entry(k.clone()).or_default().merge(c);
        }
    }

    /// The counters as a [`CounterSet`] when every context is a probe (address) context
    /// (`0x7f4 @ 0x7bf`, offsets from `address_base`) or the profile is flat; `None` for
    /// symbolized line contexts.
    pub fn to_counter_set(&self, address_base: u64) -> Option<CounterSet> {
        self.to_counter_set_for(address_base, true)
    }

    /// [`UnsymbolizedProfile::to_counter_set`] for a binary with or without pseudo probes:
    /// address contexts of a binary without probes are line contexts (written by a host
    /// without the binary's DWARF: see [`line_context_name`]).
    pub fn to_counter_set_for(
        &self,
        address_base: u64,
        has_pseudo_probes: bool,
    ) -> Option<CounterSet> {
        let mut set = self.address_counters(address_base)?;
        if set.kind == CounterKind::ProbeContext && !has_pseudo_probes {
            set.kind = CounterKind::LineContext;
        }
        Some(set)
    }

    fn address_counters(&self, address_base: u64) -> Option<CounterSet> {
        let kind = if self.context_sensitive {
            CounterKind::ProbeContext
        } else {
            CounterKind::Flat
        };
        let mut set = CounterSet::new(kind);
        for (name, c) in &self.contexts {
            let key = if name.is_empty() {
                Vec::new()
            } else {
                name.split(" @ ")
                    .map(|f| {
                        let hex = f.strip_prefix("0x")?;
                        parse_hex(hex).map(|v| v.wrapping_add(address_base))
                    })
                    .collect::<Option<Vec<u64>>>()?
            };
            set.context_mut(&key).merge(c);
        }
        Some(set)
    }
}

impl UnsymbolizedProfile {
    /// The counters keyed by symbolized line context (`main:7 @ quick`, what llvm-profgen
    /// and pgo-agent write for binaries without pseudo probes), when the profile is
    /// context-sensitive and its contexts are not addresses; `None` otherwise, or when a
    /// context does not parse.
    pub fn line_contexts(&self) -> Option<BTreeMap<SampleContext, ContextCounters>> {
        if !self.context_sensitive || self.to_counter_set(0).is_some() {
            return None;
        }
        let mut out: BTreeMap<SampleContext, ContextCounters> = BTreeMap::new();
        for (name, c) in &self.contexts {
            let ctx = if name.is_empty() {
                SampleContext::from_frames(Vec::new())
            } else {
                super::llvm_text_reader::parse_context(name)?
            };
            out.entry(ctx).or_default().merge(c);
        }
        Some(out)
    }
}

fn parse_hex(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

fn parse_dec(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Reads an unsymbolized profile; `address_base` is added to every address (the
/// preferred base for `--use-offset`, 0 for absolute addresses).
pub fn read_unsymbolized(
    text: &str,
    address_base: u64,
) -> Result<UnsymbolizedProfile, UnsymbolizedError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut profile = UnsymbolizedProfile::default();
    let mut i = 0usize;
    let invalid = |i: usize, reason: &'static str| UnsymbolizedError::Invalid {
        line: i + 1,
        reason,
        text: lines.get(i).map(|s| s.to_string()).unwrap_or_default(),
    };
    while i < lines.len() {
        let mut name = String::new();
        if lines[i].starts_with('[') {
            profile.context_sensitive = true;
            let l = lines[i];
            let inner = l[1..].strip_suffix(']').unwrap_or(&l[1..]);
            name = inner.to_string();
            i += 1;
        }
        let c = profile.contexts.entry(name).or_default();
        for (is_branch, sep) in [(false, "-"), (true, "->")] {
            let count = lines
                .get(i)
                .and_then(|l| parse_dec(l.trim_start()))
                .ok_or_else(|| invalid(i, "expected a number of entries"))?;
            i += 1;
            for _ in 0..count {
                let l = lines
                    .get(i)
                    .ok_or_else(|| invalid(i, "expected a counter line"))?
                    .trim_start();
                let (pair, n) = l
                    .split_once(':')
                    .ok_or_else(|| invalid(i, "expected `:count`"))?;
                let n = parse_dec(n).ok_or_else(|| invalid(i, "invalid count"))?;
                let (a, b) = pair
                    .split_once(sep)
                    .ok_or_else(|| invalid(i, "expected an address pair"))?;
                let (Some(a), Some(b)) = (parse_hex(a), parse_hex(b)) else {
                    return Err(invalid(i, "invalid hex address"));
                };
                let key = (a.wrapping_add(address_base), b.wrapping_add(address_base));
                let map = if is_branch {
                    &mut c.branches
                } else {
                    &mut c.ranges
                };
                let e = map.entry(key).or_default();
                *e = e.wrapping_add(n);
                i += 1;
            }
        }
    }
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use super::*;
    use unwinder::EXTERNAL_ADDR;

    fn probe_set() -> CounterSet {
        let mut s = CounterSet::new(CounterKind::ProbeContext);
        let c = s.context_mut(&[0x4007f4, 0x4007bf]);
        c.ranges.insert((0x400640, 0x400645), 3);
        c.ranges.insert((0x4005ff, 0x40062f), 6);
        c.branches.insert((0x4007bf, 0x400760), 3);
        let c = s.context_mut(&[]);
        c.branches.insert((EXTERNAL_ADDR, 0x400540), 2);
        let c = s.context_mut(&[0x4007f4]);
        c.ranges.insert((0x400700, 0x400710), 1);
        s
    }

    const PROBE_TEXT: &str = "[]
  0
  1
  ffffffffffc00001->540:2
[0x7f4]
  1
  700-710:1
  0
[0x7f4 @ 0x7bf]
  2
  5ff-62f:6
  640-645:3
  1
  7bf->760:3
";

    /// Sorted as the strings without brackets: "0x7f4" < "0x7f4 @ 0x7bf" (with brackets
    /// `]` would sort after ` `).
    #[test]
    fn probe_contexts_sorted_as_strings() {
        let mut out = Vec::new();
        write_unsymbolized(&mut out, &probe_set(), 0x400000, None).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), PROBE_TEXT);
    }

    #[test]
    fn flat_profile_has_no_header_and_always_a_block() {
        let mut s = CounterSet::new(CounterKind::Flat);
        let mut out = Vec::new();
        write_unsymbolized(&mut out, &s, 0x400000, None).unwrap();
        assert_eq!(out, b"0\n0\n");
        s.context_mut(&[]).ranges.insert((0x4005c5, 0x4005c8), 1);
        s.context_mut(&[]).branches.insert((0x4005c8, 0x4005c5), 7);
        let mut out = Vec::new();
        write_unsymbolized(&mut out, &s, 0x400000, None).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "1\n5c5-5c8:1\n1\n5c8->5c5:7\n"
        );
        // An empty context-sensitive profile is an empty file.
        let mut out = Vec::new();
        write_unsymbolized(
            &mut out,
            &CounterSet::new(CounterKind::ProbeContext),
            0,
            None,
        )
        .unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn line_contexts_merge_by_printed_string() {
        let mut s = CounterSet::new(CounterKind::LineContext);
        s.context_mut(&[0x401000, 0x401100])
            .ranges
            .insert((0x401100, 0x401104), 2);
        s.context_mut(&[0x401000, 0x401108])
            .ranges
            .insert((0x401100, 0x401104), 3);
        s.context_mut(&[0x401010])
            .ranges
            .insert((0x401010, 0x401012), 1);
        let format = |key: &[u64]| {
            if key.len() == 2 {
                "main:1 @ foo".to_string()
            } else {
                "main".to_string()
            }
        };
        let mut out = Vec::new();
        write_unsymbolized(&mut out, &s, 0x401000, Some(&format)).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "[main]\n  1\n  10-12:1\n  0\n[main:1 @ foo]\n  1\n  100-104:5\n  0\n"
        );
        assert!(matches!(
            write_unsymbolized(&mut Vec::new(), &s, 0, None),
            Err(UnsymbolizedError::MissingLineFormatter)
        ));
    }

    #[test]
    fn round_trip_probe() {
        let p = read_unsymbolized(PROBE_TEXT, 0x400000).unwrap();
        assert!(p.context_sensitive);
        assert_eq!(p.contexts.len(), 3);
        assert_eq!(p.contexts[""].branches[&(EXTERNAL_ADDR, 0x400540)], 2);
        assert_eq!(p.to_counter_set(0x400000).unwrap(), probe_set());
        let mut out = Vec::new();
        p.write(&mut out, 0x400000).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), PROBE_TEXT);
    }

    #[test]
    fn reader_sums_duplicates_and_accepts_upper_case() {
        let text = "[main:1 @ foo]\n  1\n  5FF-62f:1\n  0\n[main:1 @ foo]\n  2\n  5ff-62f:2\n  600-600:1\n  1\n  1->2:3\n";
        let p = read_unsymbolized(text, 0).unwrap();
        assert_eq!(p.contexts.len(), 1);
        let c = &p.contexts["main:1 @ foo"];
        assert_eq!(c.ranges[&(0x5ff, 0x62f)], 3);
        assert_eq!(c.ranges[&(0x600, 0x600)], 1);
        assert_eq!(c.branches[&(1, 2)], 3);
        assert_eq!(p.to_counter_set(0), None);
        let flat = read_unsymbolized("1\n5c5-5c5:1\n0\n", 0x400000).unwrap();
        assert!(!flat.context_sensitive);
        assert_eq!(
            flat.to_counter_set(0x400000).unwrap().contexts[&vec![]].ranges[&(0x4005c5, 0x4005c5)],
            1
        );
    }

    #[test]
    fn reader_errors_name_the_line() {
        let e = read_unsymbolized("[a]\n  2\n  1-2:3\n", 0).unwrap_err();
        assert!(
            matches!(
                e,
                UnsymbolizedError::Invalid {
                    line: 4,
                    reason: "expected a counter line",
                    ..
                }
            ),
            "{e}"
        );
        let e = read_unsymbolized("1\n1-2\n0\n", 0).unwrap_err();
        assert!(
            matches!(
                e,
                UnsymbolizedError::Invalid {
                    line: 2,
                    reason: "expected `:count`",
                    ..
                }
            ),
            "{e}"
        );
        let e = read_unsymbolized("1\n1-x:2\n0\n", 0).unwrap_err();
        assert!(
            matches!(
                e,
                UnsymbolizedError::Invalid {
                    line: 2,
                    reason: "invalid hex address",
                    ..
                }
            ),
            "{e}"
        );
        let e = read_unsymbolized("1\n1->2:2\n0\n", 0).unwrap_err();
        assert!(
            matches!(
                e,
                UnsymbolizedError::Invalid {
                    line: 2,
                    reason: "invalid hex address",
                    ..
                }
            ),
            "{e}"
        );
        let e = read_unsymbolized("x\n", 0).unwrap_err();
        assert!(
            matches!(e, UnsymbolizedError::Invalid { line: 1, .. }),
            "{e}"
        );
        let e = read_unsymbolized("0\n", 0).unwrap_err();
        assert!(
            matches!(
                e,
                UnsymbolizedError::Invalid {
                    line: 2,
                    reason: "expected a number of entries",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn sentinel_base_is_recovered_from_an_offset_profile() {
        let text = "[]\n  1\n  0-e:1\n  2\n  ffffffffffbff001->0:1\n  e->12:1\n";
        let p = read_unsymbolized(text, 0).unwrap();
        assert_eq!(p.sentinel_base(), Some(0x40_1000));
        let no_external = read_unsymbolized("[]\n  1\n  0-e:1\n  1\n  e->12:1\n", 0).unwrap();
        assert_eq!(no_external.sentinel_base(), None);
    }

    /// `merge` without a binary reads each input once at base 0 and rebases the sum by the
    /// sentinel's base: that must equal reading at that base, order of keys included.
    #[test]
    fn rebasing_equals_reading_at_the_base() {
        let text = "[]\n  2\n  0-e:1\n  20-2f:4\n  2\n  ffffffffffbff001->0:1\n  e->12:1\n\
                    [0x7f4 @ 0x7bf]\n  1\n  5ff-62f:6\n  0\n";
        let mut p = read_unsymbolized(text, 0).unwrap();
        let base = p.sentinel_base().unwrap();
        p.rebase(base);
        let at_base = read_unsymbolized(text, base).unwrap();
        assert_eq!(p, at_base);
        let order = |p: &UnsymbolizedProfile| -> Vec<(u64, u64)> {
            p.contexts[""].branches.keys().copied().collect()
        };
        // The sentinel (1) sorts first once rebased; at base 0 it sorted last.
        assert_eq!(order(&p), vec![(1, 0x40_1000), (0x40_100e, 0x40_1012)]);
        let mut out = Vec::new();
        p.write(&mut out, base).unwrap();
        let mut expect = Vec::new();
        at_base.write(&mut expect, base).unwrap();
        assert_eq!(out, expect);
    }
}

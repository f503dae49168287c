//! Flame graphs (inferno) of an unsymbolized profile: collapsed stacks
//! `outer;…;leaf count`, one per (context, range), summed by stack, then drawn as SVG.
//!
//! Frames are function names: a probe context's call sites (`0x7f4 @ 0x7bf`, offsets from
//! the preferred base) name the functions containing them; a line context (`main:1 @
//! foo:3.1`) names its frames directly; the leaf is the function containing the range's
//! first address. A function known only by its extent (an address-only binary) prints as
//! the hex address of its start, an address outside every function as itself in hex.

use std::collections::BTreeMap;
use std::io::{self, Write};

use symbolizer::ProfiledBinary;

use super::unsymbolized::UnsymbolizedProfile;

/// The collapsed stacks of `profile` (counters in absolute preferred addresses, as
/// [`super::unsymbolized::read_unsymbolized`] returns them with `address_base`), sorted.
pub fn collapsed(
    profile: &UnsymbolizedProfile,
    binary: Option<&ProfiledBinary>,
    address_base: u64,
) -> Vec<String> {
    let name_at = |addr: u64| -> String {
        binary.map_or_else(|| format!("0x{addr:x}"), |b| b.function_label(addr))
    };
    let mut stacks: BTreeMap<String, u64> = BTreeMap::new();
    for (context, counters) in &profile.contexts {
        let mut frames: Vec<String> = Vec::new();
        for frame in context.split(" @ ").filter(|f| !f.is_empty()) {
            match frame
                .strip_prefix("0x")
                .and_then(|h| u64::from_str_radix(h, 16).ok())
            {
                Some(offset) => frames.push(name_at(offset.wrapping_add(address_base))),
                None => frames.push(frame.split(':').next().unwrap_or(frame).to_string()),
            }
        }
        for (&(start, _), &n) in &counters.ranges {
            let mut stack = frames.join(";");
            if !stack.is_empty() {
                stack.push(';');
            }
            stack.push_str(&name_at(start));
            *stacks.entry(stack).or_default() += n;
        }
    }
    stacks
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| format!("{s} {n}"))
        .collect()
}

/// Draws `lines` (collapsed stacks) as an SVG flame graph titled `title`.
pub fn write_svg(lines: &[String], title: &str, out: &mut dyn Write) -> io::Result<()> {
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_string();
    options.count_name = "executions".to_string();
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
        .map_err(io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::unsymbolized::read_unsymbolized;

    #[test]
    fn line_contexts_collapse_by_frame_name() {
        let text = "[main:1 @ foo:3.1]\n  2\n  10-20:5\n  30-40:2\n  0\n[main:2 @ foo:3]\n  1\n  10-12:1\n  0\n";
        let p = read_unsymbolized(text, 0).unwrap();
        // No binary: leaves print as hex; equal stacks are summed.
        assert_eq!(
            collapsed(&p, None, 0),
            vec!["main;foo;0x10 6".to_string(), "main;foo;0x30 2".to_string()]
        );
        let mut svg = Vec::new();
        write_svg(&collapsed(&p, None, 0), "t", &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.starts_with("<?xml"), "{svg}");
        assert!(svg.contains(">foo<") || svg.contains("foo ("), "{svg}");
    }
}

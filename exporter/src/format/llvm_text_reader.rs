//! LLVM text sample profile reader: the inverse of [`super::llvm_text`], following LLVM 19's
//! `SampleProfileReaderText::readImpl` (`ParseHead`, `ParseLine`, `parseMetadata`) and
//! `SampleContext::createCtxVectorFromStr` for bracketed contexts.
//!
//! Grammar (llvm-profgen.md §3.1): blank lines and lines whose first non-space character is
//! `#` are skipped. A line starting in column 0 is a function header `NAME:TOTAL:HEAD` (split
//! at the last two colons, so the name may contain colons) or, for a CS profile,
//! `[main:1 @ foo:3.2 @ bar]:TOTAL:HEAD`. An indented line belongs to the innermost profile
//! whose depth (number of leading spaces) is smaller:
//!
//! * `LOC: COUNT[ TARGET:COUNT]*` — body samples and call targets (target names may contain
//!   spaces and colons: `:NUM` words are the anchors, as in LLVM);
//! * `LOC: CALLEE:TOTAL` — an inlined callee, whose lines follow one space deeper;
//! * `!CFGChecksum: N`, `!Attributes: N`, ` !Flat` — metadata, after every other line of
//!   the same profile ("Found non-metadata after metadata" otherwise).
//!
//! `LOC` is `LINE[.DISC]`; a `LINE` without discriminator must fit 16 bits (LLVM's
//! `isOffsetLegal`, which LLVM checks only in that case). Repeated headers and lines add up
//! (`Profiles.create` returns the existing profile; `addBodySamples` adds); within one body
//! line a repeated call target keeps its last count (LLVM fills a map).
//!
//! Profile-wide flags are set as a release build of LLVM sets them (its consistency
//! `assert`s compiled out): `is_cs` when some header is bracketed, `is_probe_based` when some
//! top-level profile has a non-zero `!CFGChecksum`, `is_preinlined` when some `!Attributes`
//! has the ShouldBeInlined bit. `is_fs` stays false (`--profile-isfs` is an LLVM option, not
//! part of the text).
//!
//! Where this reader is stricter than LLVM (each is a malformed-input case LLVM's writer
//! never produces, and LLVM either reads past the end of a line or silently uses 0): a body
//! line indented deeper than one past the enclosing profile, a context frame whose location
//! does not parse, a line that ends right after `LOC:`. A bracketed context's leaf frame is
//! the whole text after the last ` @ ` (LLVM splits it at its first `:`; writers print the
//! leaf without a location, and a name with `::` then survives). Every error names the
//! 1-based line.

use std::collections::BTreeMap;

use symbolizer::profile::{
    ContextFrame, FunctionSamples, LineLocation, SampleContext, SampleProfile,
    CONTEXT_SHOULD_BE_INLINED,
};

/// Deepest inline nesting accepted (a guard against hostile input: each level costs a walk
/// from the top-level profile per line).
pub const MAX_INLINE_DEPTH: usize = 1024;

/// Errors of the text profile reader.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TextReadError {
    /// A line is not what the format expects at that point.
    #[error("invalid text sample profile at line {line}: {reason}: {text:?}")]
    Invalid {
        /// 1-based line number.
        line: usize,
        /// What was expected (LLVM's message where it has one).
        reason: &'static str,
        /// The offending line.
        text: String,
    },
    /// Inlined callees nest deeper than [`MAX_INLINE_DEPTH`].
    #[error("text sample profile at line {line}: inline depth {depth} exceeds {MAX_INLINE_DEPTH}")]
    TooDeep {
        /// 1-based line number.
        line: usize,
        /// The depth found.
        depth: usize,
    },
}

/// One parsed indented line.
#[derive(Debug, PartialEq, Eq)]
enum BodyLine<'a> {
    /// `LOC: COUNT[ TARGET:COUNT]*`.
    Body {
        loc: LineLocation,
        count: u64,
        targets: BTreeMap<&'a str, u64>,
    },
    /// `LOC: CALLEE:TOTAL`.
    Callsite {
        loc: LineLocation,
        callee: &'a str,
        total: u64,
    },
    /// `!CFGChecksum: N`.
    Checksum(u64),
    /// `!Attributes: N`.
    Attributes(u32),
    /// ` !Flat`.
    Flat,
}

/// Reads an LLVM text sample profile.
pub fn read(text: &str) -> Result<SampleProfile, TextReadError> {
    let mut profile = SampleProfile::default();
    // The top-level context of the current profile and the call-site path to the innermost
    // open inlined callee (`InlineStack` of LLVM minus its first element).
    let mut top: Option<SampleContext> = None;
    let mut path: Vec<(LineLocation, String)> = Vec::new();
    let mut depth_metadata = 0usize;
    let mut cs_headers = 0usize;
    let mut top_level_probe_profiles = 0usize;

    for (index, raw) in text.split('\n').enumerate() {
        let line_no = index + 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let invalid = |reason: &'static str| TextReadError::Invalid {
            line: line_no,
            reason,
            text: line.to_string(),
        };
        match line.trim_start_matches(' ').as_bytes().first() {
            None | Some(b'#') => continue,
            Some(_) => {}
        }
        if !line.starts_with(' ') {
            let (name, total, head) =
                parse_head(line).ok_or_else(|| invalid("expected 'mangled_name:NUM:NUM'"))?;
            let context = if name.len() >= 2 && name.starts_with('[') && name.ends_with(']') {
                cs_headers += 1;
                parse_context(&name[1..name.len() - 1])
                    .ok_or_else(|| invalid("expected a context 'NAME:LOC @ ... @ NAME'"))?
            } else {
                SampleContext::from_name(name)
            };
            let fs = profile.profile_mut(&context);
            fs.add_total_samples(total);
            fs.add_head_samples(head);
            top = Some(context);
            path.clear();
            depth_metadata = 0;
            continue;
        }

        let depth = line.len() - line.trim_start_matches(' ').len();
        let parsed = parse_line(line, depth).map_err(invalid)?;
        let is_metadata = matches!(
            parsed,
            BodyLine::Checksum(_) | BodyLine::Attributes(_) | BodyLine::Flat
        );
        if !is_metadata && depth == depth_metadata {
            return Err(invalid("found non-metadata after metadata"));
        }
        let Some(top_ctx) = top.as_ref() else {
            return Err(invalid("indented line before the first function header"));
        };
        // LLVM: `while (InlineStack.size() > Depth) pop` with InlineStack = [top] + path.
        if depth > path.len() + 1 {
            return Err(invalid("indented deeper than the enclosing profile"));
        }
        path.truncate(depth - 1);
        let current = current_profile(&mut profile, top_ctx, &path);
        match parsed {
            BodyLine::Body {
                loc,
                count,
                targets,
            } => {
                for (name, n) in targets {
                    current.add_called_target_samples(loc, name, n);
                }
                current.add_body_samples(loc, count);
            }
            BodyLine::Callsite { loc, callee, total } => {
                if path.len() + 1 > MAX_INLINE_DEPTH {
                    return Err(TextReadError::TooDeep {
                        line: line_no,
                        depth: path.len() + 1,
                    });
                }
                current.callee_mut(loc, callee).add_total_samples(total);
                path.push((loc, callee.to_string()));
                depth_metadata = 0;
            }
            BodyLine::Checksum(hash) => {
                if hash != 0 {
                    current.checksum = hash;
                    if depth == 1 {
                        top_level_probe_profiles += 1;
                    }
                }
                // LLVM's metadata branch also does `setAllAttributes(Attributes)` with the
                // line's attributes, 0 for a checksum line.
                current.attributes = 0;
                depth_metadata = depth;
            }
            BodyLine::Attributes(bits) => {
                current.attributes = bits;
                if bits & CONTEXT_SHOULD_BE_INLINED != 0 {
                    profile.is_preinlined = true;
                }
                depth_metadata = depth;
            }
            BodyLine::Flat => {
                current.attributes = 0;
                depth_metadata = depth;
            }
        }
    }
    profile.is_cs = cs_headers > 0;
    profile.is_probe_based = top_level_probe_profiles > 0;
    Ok(profile)
}

/// The profile at `path` below the top-level profile `top` (every step exists: the call-site
/// line that opened it created it).
fn current_profile<'p>(
    profile: &'p mut SampleProfile,
    top: &SampleContext,
    path: &[(LineLocation, String)],
) -> &'p mut FunctionSamples {
    let mut fs = profile.profile_mut(top);
    for (loc, name) in path {
        fs = fs.callee_mut(*loc, name);
    }
    fs
}

/// `ParseHead`: `NAME:TOTAL:HEAD`, split at the last two colons.
fn parse_head(line: &str) -> Option<(&str, u64, u64)> {
    let n2 = line.rfind(':')?;
    let n1 = line[..n2].rfind(':')?;
    Some((
        &line[..n1],
        parse_u64(&line[n1 + 1..n2])?,
        parse_u64(&line[n2 + 1..])?,
    ))
}

/// `ParseLine` for a line with `depth` (≥ 1) leading spaces.
fn parse_line(line: &str, depth: usize) -> Result<BodyLine<'_>, &'static str> {
    let rest = &line[depth..];
    if rest.starts_with('!') {
        if line == " !Flat" {
            return Ok(BodyLine::Flat);
        }
        if let Some(v) = rest.strip_prefix("!CFGChecksum:") {
            return parse_u64(v.trim())
                .map(BodyLine::Checksum)
                .ok_or("cannot parse metadata");
        }
        if let Some(v) = rest.strip_prefix("!Attributes:") {
            return parse_u32(v.trim())
                .map(BodyLine::Attributes)
                .ok_or("cannot parse metadata");
        }
        return Err("cannot parse metadata");
    }

    const EXPECTED: &str = "expected 'NUM[.NUM]: NUM[ mangled_name:NUM]*'";
    let n1 = line.find(':').ok_or(EXPECTED)?;
    if n1 < depth {
        return Err(EXPECTED);
    }
    let loc = parse_location(&line[depth..n1]).ok_or(EXPECTED)?;
    // LLVM skips the colon and the following character (the space) unchecked.
    let rest = line
        .get(n1 + 2..)
        .filter(|r| !r.is_empty())
        .ok_or(EXPECTED)?;
    if rest.as_bytes()[0].is_ascii_digit() {
        let (count_text, mut tail) = match rest.find(' ') {
            Some(i) => (&rest[..i], Some(&rest[i..])),
            None => (rest, None),
        };
        let count = parse_u64(count_text).ok_or(EXPECTED)?;
        let mut targets = BTreeMap::new();
        while let Some(t) = tail {
            let t = t.trim_start_matches(' ');
            if t.is_empty() {
                break;
            }
            let (name, n, after) = parse_target(t).ok_or(EXPECTED)?;
            targets.insert(name, n);
            tail = after;
        }
        Ok(BodyLine::Body {
            loc,
            count,
            targets,
        })
    } else {
        let n3 = rest.rfind(':').ok_or(EXPECTED)?;
        let total = parse_u64(&rest[n3 + 1..]).ok_or(EXPECTED)?;
        Ok(BodyLine::Callsite {
            loc,
            callee: &rest[..n3],
            total,
        })
    }
}

/// One `TARGET:COUNT` pair at the start of `text`: the target runs up to the first colon
/// followed by a word that is an integer (LLVM's anchor rule). Returns the rest after the
/// count (starting at its space), if any.
fn parse_target(text: &str) -> Option<(&str, u64, Option<&str>)> {
    let mut colon = text.find(':')?;
    if colon == 0 {
        return None;
    }
    loop {
        let after = &text[colon + 1..];
        let word_end = after.find(' ').map_or(text.len(), |i| colon + 1 + i);
        if let Some(count) = parse_u64(&text[colon + 1..word_end]) {
            let tail = (word_end < text.len()).then(|| &text[word_end..]);
            return Some((&text[..colon], count, tail));
        }
        colon += 1 + after.find(':')?;
    }
}

/// `LINE[.DISC]` as `ParseLine` reads it.
fn parse_location(text: &str) -> Option<LineLocation> {
    match text.split_once('.') {
        None => {
            let line = parse_u32(text)?;
            (line <= 0xffff).then(|| LineLocation::new(line, 0))
        }
        Some((line, disc)) => Some(LineLocation::new(parse_u32(line)?, parse_u32(disc)?)),
    }
}

/// The inside of a bracketed context: frames separated by ` @ `, each `NAME:LOC` but the
/// leaf, which is the whole remaining text.
pub(crate) fn parse_context(text: &str) -> Option<SampleContext> {
    let parts: Vec<&str> = text.split(" @ ").collect();
    let last = parts.len() - 1;
    let mut frames = Vec::with_capacity(parts.len());
    for (i, part) in parts.into_iter().enumerate() {
        if i == last {
            frames.push(ContextFrame::new(part, LineLocation::default()));
        } else {
            let (name, loc) = part.rsplit_once(':')?;
            frames.push(ContextFrame::new(name, parse_location(loc)?));
        }
    }
    Some(SampleContext::from_frames(frames))
}

/// A decimal integer: digits only (LLVM's `getAsInteger(10, ..)` on an unsigned type).
fn parse_u64(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn parse_u32(text: &str) -> Option<u32> {
    u32::try_from(parse_u64(text)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::llvm_text::{self, tests as writer_tests};

    fn loc(l: u32, d: u32) -> LineLocation {
        LineLocation::new(l, d)
    }

    fn round_trip(text: &str) -> String {
        llvm_text::to_string(&read(text).unwrap())
    }

    #[test]
    fn reads_back_what_the_writer_wrote() {
        for profile in [
            writer_tests::cs_probe_profile(),
            writer_tests::nested_profile(),
        ] {
            let text = llvm_text::to_string(&profile);
            let back = read(&text).unwrap();
            // `!Attributes: 3` has the ShouldBeInlined bit: LLVM marks the profile
            // pre-inlined, which the fixture leaves unset.
            let expected = SampleProfile {
                is_preinlined: text.contains("!Attributes: 3"),
                ..profile
            };
            assert_eq!(back, expected, "{text}");
        }
    }

    #[test]
    fn reads_cs_probe_profile_of_llvm_profgen_test() {
        // llvm/test/tools/llvm-profgen/inline-cs-pseudoprobe.test (llvm-profgen.md §3.1).
        let text = "[main:2 @ foo]:74:0
 1: 0
 2: 15
 8: 14 bar:14
 9: 0
 !CFGChecksum: 563088904013236
 !Attributes: 1
[main:2 @ foo:8 @ bar]:28:14
 1: 14
 4: 14
 !CFGChecksum: 72617220756
 !Attributes: 1
";
        let p = read(text).unwrap();
        assert!(p.is_cs && p.is_probe_based && !p.is_preinlined);
        let bar =
            &p.profiles[&writer_tests::cs_ctx(&[("main", 2, 0), ("foo", 8, 0), ("bar", 0, 0)])];
        assert_eq!(
            (bar.total, bar.head, bar.checksum, bar.attributes),
            (28, 14, 72617220756, 1)
        );
        assert_eq!(bar.samples_at(loc(4, 0)), Some(14));
        let foo = &p.profiles[&writer_tests::cs_ctx(&[("main", 2, 0), ("foo", 0, 0)])];
        assert_eq!(foo.body[&loc(8, 0)].call_targets["bar"], 14);
        assert_eq!(round_trip(text), text);
    }

    #[test]
    fn nested_callees_by_indentation_and_metadata_order() {
        let text = "main:100:3
 1: 3
 2.1: 5 _M_construct<char *>:1000 string_view<std::allocator<char> >:437
 3: baz:7
  1: 7
  !CFGChecksum: 6
  !Attributes: 3
 3: foo:40
  1: 20
  7: bar:20
   2: 20
   !CFGChecksum: 9
  !CFGChecksum: 8
 !CFGChecksum: 5
";
        let p = read(text).unwrap();
        assert!(!p.is_cs && p.is_probe_based && p.is_preinlined);
        let main = &p.profiles[&SampleContext::from_name("main")];
        assert_eq!((main.total, main.head, main.checksum), (100, 3, 5));
        let targets = &main.body[&loc(2, 1)].call_targets;
        assert_eq!(targets["_M_construct<char *>"], 1000);
        assert_eq!(targets["string_view<std::allocator<char> >"], 437);
        let foo = &main.callsites[&loc(3, 0)]["foo"];
        assert_eq!((foo.total, foo.head, foo.checksum), (40, 0, 8));
        assert_eq!(foo.context, SampleContext::from_name("foo"));
        let bar = &foo.callsites[&loc(7, 0)]["bar"];
        assert_eq!(
            (bar.total, bar.checksum, bar.samples_at(loc(2, 0))),
            (20, 9, Some(20))
        );
        let baz = &main.callsites[&loc(3, 0)]["baz"];
        assert_eq!((baz.total, baz.checksum, baz.attributes), (7, 6, 3));
        // The writer prints call targets by count and callees by name: same text back.
        assert_eq!(round_trip(text), text);
    }

    #[test]
    fn repeated_headers_and_lines_add_up_and_comments_are_skipped() {
        let text =
            "# a comment\nfoo:10:1\n 1: 4\n\n   # indented comment\nfoo:5:2\n 1: 3 g:1 g:2\n";
        let p = read(text).unwrap();
        let foo = &p.profiles[&SampleContext::from_name("foo")];
        assert_eq!((foo.total, foo.head), (15, 3));
        assert_eq!(foo.samples_at(loc(1, 0)), Some(7));
        // Within one line the last count of a target wins (LLVM's TargetCountMap).
        assert_eq!(foo.body[&loc(1, 0)].call_targets["g"], 2);
        assert!(!p.is_probe_based && !p.is_cs);
        assert_eq!(
            round_trip("a:b::c:7:0\n 65535: 1\n"),
            "a:b::c:7:0\n 65535: 1\n"
        );
    }

    #[test]
    fn contexts_with_discriminators_and_colons_in_the_leaf() {
        let text = "[main:1.2 @ ns::foo:3 @ std::bar]:9:9\n 1: 9\n";
        let p = read(text).unwrap();
        let ctx = writer_tests::cs_ctx(&[("main", 1, 2), ("ns::foo", 3, 0), ("std::bar", 0, 0)]);
        assert_eq!(p.profiles[&ctx].total, 9);
        assert_eq!(round_trip(text), text);
    }

    #[test]
    fn flat_marker_is_accepted_at_top_level() {
        let p = read("f:1:0\n 1: 1\n !Flat\n").unwrap();
        assert_eq!(p.profiles.len(), 1);
    }

    fn err(text: &str) -> (usize, &'static str) {
        match read(text).unwrap_err() {
            TextReadError::Invalid { line, reason, .. } => (line, reason),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn errors_name_the_line() {
        assert_eq!(err("foo:1\n").0, 1);
        assert_eq!(err("foo:1:x\n").0, 1);
        assert_eq!(
            err("foo:1:0\n 1: 1\n 2: x\n"),
            (3, "expected 'NUM[.NUM]: NUM[ mangled_name:NUM]*'")
        );
        assert_eq!(err("foo:1:0\n 65536: 1\n").0, 2);
        assert_eq!(err("foo:1:0\n 1:\n").0, 2);
        assert_eq!(err("foo:1:0\n 1: 1 bar\n").0, 2);
        assert_eq!(err("foo:1:0\n 1: 1 :4\n").0, 2);
        assert_eq!(err("foo:1:0\n !Bogus: 1\n"), (2, "cannot parse metadata"));
        assert_eq!(
            err("foo:1:0\n !CFGChecksum: 1\n 1: 1\n"),
            (3, "found non-metadata after metadata")
        );
        assert_eq!(
            err(" 1: 1\n"),
            (1, "indented line before the first function header")
        );
        assert_eq!(
            err("foo:1:0\n   1: 1\n"),
            (2, "indented deeper than the enclosing profile")
        );
        assert_eq!(err("[main:x @ foo]:1:0\n").0, 1);
        assert_eq!(err("foo:1:0\n 1: bar:x\n").0, 2);
    }

    #[test]
    fn nesting_is_bounded() {
        let mut text = String::from("f:1:0\n");
        for d in 1..=MAX_INLINE_DEPTH + 1 {
            text.push_str(&" ".repeat(d));
            text.push_str("1: g:1\n");
        }
        assert_eq!(
            read(&text).unwrap_err(),
            TextReadError::TooDeep {
                line: MAX_INLINE_DEPTH + 2,
                depth: MAX_INLINE_DEPTH + 1
            }
        );
    }
}

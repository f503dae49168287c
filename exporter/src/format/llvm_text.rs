//! LLVM text sample profile writer (`--format=text`), byte for byte as LLVM 19's
//! `SampleProfileWriterText::writeSample` writes it.
//!
//! Layout: top-level profiles in `sortFuncProfiles` order (total descending, then
//! context); a header `NAME:TOTAL:HEAD` (or `[CONTEXT]:TOTAL:HEAD` for a CS profile);
//! body lines `LOC: COUNT[ TARGET:COUNT...]` indented one space more than the header's
//! depth, sorted by location, call targets by count descending then name; inlined
//! callees `LOC: NAME:TOTAL` (no head) with their bodies one level deeper; then
//! `!CFGChecksum: N` (probe profiles) and `!Attributes: N` (when non-zero) after the body.

use std::io::{self, Write};

use symbolizer::profile::{FunctionSamples, SampleProfile};

/// Writes `profile` in LLVM's text format to `out`.
pub fn write(profile: &SampleProfile, out: &mut dyn Write) -> io::Result<()> {
    let mut buf = Vec::new();
    for fs in profile.sorted_profiles() {
        write_sample(profile, fs, 0, &mut buf);
    }
    out.write_all(&buf)
}

/// The text of `profile` as a string.
pub fn to_string(profile: &SampleProfile) -> String {
    let mut buf = Vec::new();
    for fs in profile.sorted_profiles() {
        write_sample(profile, fs, 0, &mut buf);
    }
    // Names are UTF-8 (they come from Rust strings), so this cannot lose data.
    String::from_utf8_lossy(&buf).into_owned()
}

fn indent(out: &mut Vec<u8>, n: usize) {
    out.extend(std::iter::repeat_n(b' ', n));
}

fn write_sample(profile: &SampleProfile, fs: &FunctionSamples, depth: usize, out: &mut Vec<u8>) {
    if profile.is_cs {
        out.push(b'[');
        out.extend_from_slice(fs.context.to_string().as_bytes());
        out.push(b']');
    } else {
        out.extend_from_slice(fs.name().as_bytes());
    }
    out.extend_from_slice(format!(":{}", fs.total).as_bytes());
    if depth == 0 {
        out.extend_from_slice(format!(":{}", fs.head).as_bytes());
    }
    out.push(b'\n');

    for (loc, sample) in &fs.body {
        indent(out, depth + 1);
        out.extend_from_slice(format!("{}: {}", loc, sample.count).as_bytes());
        for (name, count) in sample.sorted_call_targets() {
            out.push(b' ');
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(format!(":{count}").as_bytes());
        }
        out.push(b'\n');
    }

    for (loc, callees) in &fs.callsites {
        for callee in callees.values() {
            indent(out, depth + 1);
            out.extend_from_slice(format!("{loc}: ").as_bytes());
            write_sample(profile, callee, depth + 1, out);
        }
    }

    if profile.is_probe_based {
        indent(out, depth + 1);
        out.extend_from_slice(format!("!CFGChecksum: {}\n", fs.checksum).as_bytes());
    }
    if fs.attributes != 0 {
        indent(out, depth + 1);
        out.extend_from_slice(format!("!Attributes: {}\n", fs.attributes).as_bytes());
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use symbolizer::profile::{ContextFrame, LineLocation, SampleContext};

    fn loc(l: u32, d: u32) -> LineLocation {
        LineLocation::new(l, d)
    }

    pub(crate) fn cs_ctx(frames: &[(&str, u32, u32)]) -> SampleContext {
        SampleContext::from_frames(
            frames
                .iter()
                .map(|(n, l, d)| ContextFrame::new(*n, loc(*l, *d)))
                .collect(),
        )
    }

    /// The CS probe profile of llvm/test/tools/llvm-profgen/inline-cs-pseudoprobe.test
    /// (llvm-profgen.md §3.1).
    pub(crate) fn cs_probe_profile() -> SampleProfile {
        let mut p = SampleProfile {
            is_cs: true,
            is_probe_based: true,
            ..SampleProfile::default()
        };
        let foo = p.profile_mut(&cs_ctx(&[("main", 2, 0), ("foo", 0, 0)]));
        foo.total = 74;
        for (l, c) in [(1, 0), (2, 15), (8, 14), (9, 0)] {
            foo.add_body_samples(loc(l, 0), c);
        }
        foo.add_called_target_samples(loc(8, 0), "bar", 14);
        foo.checksum = 563088904013236;
        foo.attributes = 1;
        let bar = p.profile_mut(&cs_ctx(&[("main", 2, 0), ("foo", 8, 0), ("bar", 0, 0)]));
        bar.total = 28;
        bar.head = 14;
        bar.add_body_samples(loc(1, 0), 14);
        bar.add_body_samples(loc(4, 0), 14);
        bar.checksum = 72617220756;
        bar.attributes = 1;
        p
    }

    /// A nested, pre-inlined profile like the default output of cs-preinline.test.
    pub(crate) fn nested_profile() -> SampleProfile {
        let mut p = SampleProfile::default();
        let foo = p.profile_mut(&SampleContext::from_name("foo"));
        foo.total = 379;
        foo.add_body_samples(loc(2, 1), 14);
        foo.add_body_samples(loc(3, 0), 15);
        foo.add_body_samples(loc(3, 2), 1);
        foo.add_body_samples(loc(65526, 0), 14);
        let bar = foo.callee_mut(loc(3, 1), "bar");
        bar.total = 84;
        bar.add_body_samples(loc(1, 0), 14);
        bar.attributes = 3;
        p
    }

    #[test]
    fn writes_cs_probe_profile_like_llvm_profgen() {
        let expected = "[main:2 @ foo]:74:0
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
        assert_eq!(to_string(&cs_probe_profile()), expected);
    }

    #[test]
    fn writes_nested_callees_one_level_deeper() {
        let expected = "foo:379:0
 2.1: 14
 3: 15
 3.2: 1
 65526: 14
 3.1: bar:84
  1: 14
  !Attributes: 3
";
        assert_eq!(to_string(&nested_profile()), expected);
    }

    #[test]
    fn call_targets_sorted_and_functions_by_total() {
        let mut p = SampleProfile::default();
        let m = p.profile_mut(&SampleContext::from_name("main"));
        m.total = 10;
        m.head = 1;
        m.add_body_samples(loc(1, 0), 6);
        m.add_called_target_samples(loc(1, 0), "b", 2);
        m.add_called_target_samples(loc(1, 0), "a", 2);
        m.add_called_target_samples(loc(1, 0), "c", 4);
        p.profile_mut(&SampleContext::from_name("zz")).total = 20;
        let mut out = Vec::new();
        write(&p, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "zz:20:0\nmain:10:1\n 1: 6 c:4 a:2 b:2\n"
        );
    }
}

//! Generator tests on hand-built binaries (expected values computed by hand from
//! llvm-profgen 19's algorithms).

use unwinder::{CounterKind, CounterSet};

use super::fake_binary::{fr, FakeBinary};
use super::{generate_profile, GenerateOptions};
use crate::guid::function_guid;
use crate::probe::{InlineTreeNode, ProbeDesc, ProbeKind, PseudoProbe};
use crate::profile::{LineLocation, SampleContext};

fn loc(l: u32, d: u32) -> LineLocation {
    LineLocation::new(l, d)
}

/// main [0x10, 0x20): 0x10 (4 bytes, line 1), 0x14 (2 bytes, line 2 disc 17 = DF 4),
/// 0x16 (2 bytes, line 2 base 0 DF 1; foo inlined at line 3), 0x18 call (line 4),
/// 0x1c (line 5). foo [0x20, 0x28): 0x20 (line 0), 0x24 ret.
fn line_binary() -> FakeBinary {
    let mut b = FakeBinary::default();
    for (a, s) in [
        (0x10, 4),
        (0x14, 2),
        (0x16, 2),
        (0x18, 4),
        (0x1c, 4),
        (0x20, 4),
        (0x24, 4),
    ] {
        b.insts.insert(a, s);
    }
    b.frames.insert(0x10, vec![fr("main", 1, 0)]);
    b.frames.insert(0x14, vec![fr("main", 2, 17)]);
    b.frames
        .insert(0x16, vec![fr("main", 3, 0), fr("bar", 1, 0)]);
    b.frames.insert(0x18, vec![fr("main", 4, 0)]);
    b.frames.insert(0x1c, vec![fr("main", 5, 0)]);
    b.frames.insert(0x20, vec![fr("foo", 0, 0)]);
    b.frames.insert(0x24, vec![fr("foo", 1, 0)]);
    b.funcs.insert("main".into(), vec![(0x10, 0x20)]);
    b.funcs.insert("foo".into(), vec![(0x20, 0x28)]);
    b.entries.insert(0x20, "foo".into());
    b.entries.insert(0x10, "main".into());
    b
}

#[test]
fn flat_line_profile_uses_max_times_dup_factor_and_byte_totals() {
    let b = line_binary();
    let mut cs = CounterSet::new(CounterKind::Flat);
    let c = cs.context_mut(&[]);
    c.ranges.insert((0x10, 0x18), 10);
    c.ranges.insert((0x20, 0x20), 7);
    c.branches.insert((0x18, 0x20), 6);
    c.branches.insert((0x24, 0x1c), 6);
    let p = generate_profile(&b, &cs, &flat_cs_options());
    let main = &p.profiles[&SampleContext::from_name("main")];
    // Totals per byte: 10 × (4 + 2 + 2 + 4) = 120 (0x1c is in a zero-filled range).
    assert_eq!(main.total, 120);
    assert_eq!(main.samples_at(loc(1, 0)), Some(10));
    // 0x14: disc 17 → base 0, DF 4: 40.
    assert_eq!(main.samples_at(loc(2, 0)), Some(40));
    // Call at line 4: body 10, call target foo 6.
    assert_eq!(main.body[&loc(4, 0)].call_targets["foo"], 6);
    assert_eq!(main.samples_at(loc(4, 0)), Some(10));
    // Zero fill of main's range: line 5 exists with 0.
    assert_eq!(main.samples_at(loc(5, 0)), Some(0));
    let bar = &main.callsites[&loc(3, 0)]["bar"];
    assert_eq!((bar.total, bar.samples_at(loc(1, 0))), (20, Some(10)));
    let foo = &p.profiles[&SampleContext::from_name("foo")];
    // Head from the call branch; 0x24 zero-filled; total 7 × 4.
    assert_eq!((foo.head, foo.total), (6, 28));
    assert_eq!(foo.samples_at(loc(1, 0)), Some(0));
    // The return into main is not a call to a function entry: no head for main.
    assert_eq!(main.head, 0);
}

#[test]
fn cs_line_profile_infers_inliner_samples() {
    let b = line_binary();
    let mut cs = CounterSet::new(CounterKind::LineContext);
    // Context [main @ 0x16 (bar inlined)]: expands to main:3 @ bar.
    cs.context_mut(&[0x16]).ranges.insert((0x16, 0x16), 5);
    // Context [0x18 @ 0x20]: main:4 @ foo, with a head from the call branch in main's context.
    cs.context_mut(&[0x18, 0x20]).ranges.insert((0x20, 0x24), 3);
    cs.context_mut(&[0x18]).branches.insert((0x18, 0x20), 3);
    cs.context_mut(&[0x18]).ranges.insert((0x18, 0x18), 3);
    let opts = GenerateOptions {
        merge_cold_context: false,
        ..flat_cs_options()
    };
    let p = generate_profile(&b, &cs, &opts);
    let texts: Vec<String> = p.profiles.keys().map(|c| c.to_string()).collect();
    assert_eq!(texts, vec!["main", "main:3 @ bar", "main:4 @ foo"]);
    let bar = &p.profiles[&p.profiles.keys().nth(1).unwrap().clone()];
    assert_eq!(bar.attributes, 1);
    assert_eq!((bar.total, bar.samples_at(loc(1, 0))), (5, Some(5)));
    let main = &p.profiles[&SampleContext::from_name("main")];
    // Inferred: bar has no head → main gets 5 at 3:0 (body, target, total); foo has a
    // head from the branch, so main's 4:0 only has the branch's call target (3) and the
    // range count 3.
    assert_eq!(main.body[&loc(3, 0)].call_targets["bar"], 5);
    assert_eq!(main.samples_at(loc(3, 0)), Some(5));
    assert_eq!(main.samples_at(loc(4, 0)), Some(3));
    assert_eq!(main.body[&loc(4, 0)].call_targets["foo"], 3);
    assert_eq!(main.total, 3 + 5);
    let foo = p.profiles.values().find(|f| f.name() == "foo").unwrap();
    assert_eq!((foo.head, foo.total), (3, 6));
}

fn probe(address: u64, func: &str, node: u32, index: u32, is_block: bool) -> PseudoProbe {
    PseudoProbe {
        address,
        guid: function_guid(func),
        index,
        kind: if is_block {
            ProbeKind::Block
        } else {
            ProbeKind::DirectCall
        },
        attributes: 0,
        discriminator: 0,
        node,
    }
}

/// main (node 0, checksum 100): probes 1 @0x10, call probe 2 @0x18 (call to foo), 3 @0x1c.
/// bar inlined into main at probe 4 (node 1, checksum 200): probes 1 @0x14, 2 @0x16.
/// foo (node 2, checksum 300): 1 @0x20, 2 @0x24.
fn probe_binary() -> FakeBinary {
    let mut b = line_binary();
    b.probes = vec![
        probe(0x10, "main", 0, 1, true),
        probe(0x14, "bar", 1, 1, true),
        probe(0x16, "bar", 1, 2, true),
        probe(0x18, "main", 0, 2, false),
        probe(0x1c, "main", 0, 3, true),
        probe(0x20, "foo", 2, 1, true),
        probe(0x24, "foo", 2, 2, true),
    ];
    let node = |f: &str, site, parent| InlineTreeNode {
        guid: function_guid(f),
        site,
        parent,
    };
    b.nodes = vec![
        node("main", 0, None),
        node("bar", 4, Some(0)),
        node("foo", 1, None),
    ];
    for (name, hash) in [("main", 100), ("bar", 200), ("foo", 300)] {
        let guid = function_guid(name);
        b.descs.insert(
            guid,
            ProbeDesc {
                guid,
                hash,
                name: name.to_string(),
            },
        );
    }
    b
}

#[test]
fn cs_probe_profile_counts_probes_inliner_and_zero_fill() {
    let b = probe_binary();
    let mut cs = CounterSet::new(CounterKind::ProbeContext);
    cs.context_mut(&[]).ranges.insert((0x10, 0x14), 4);
    cs.context_mut(&[]).branches.insert((0x18, 0x20), 2);
    cs.context_mut(&[0x18]).ranges.insert((0x20, 0x20), 2);
    let opts = GenerateOptions {
        merge_cold_context: false,
        ..flat_cs_options()
    };
    let p = generate_profile(&b, &cs, &opts);
    assert!(p.is_cs && p.is_probe_based);
    let text: Vec<String> = p.profiles.keys().map(|c| c.to_string()).collect();
    assert_eq!(text, vec!["main", "main:2 @ foo", "main:4 @ bar"]);
    let main = &p.profiles[&SampleContext::from_name("main")];
    // Probe 1: 4; inlined bar's entry adds 4 at call site 4; call probe 2 gets the
    // branch count 2 with target foo; probe 3 zero-filled.
    assert_eq!(main.samples_at(loc(1, 0)), Some(4));
    assert_eq!(main.samples_at(loc(4, 0)), Some(4));
    assert_eq!(main.body[&loc(4, 0)].call_targets["bar"], 4);
    assert_eq!(main.samples_at(loc(2, 0)), Some(2));
    assert_eq!(main.body[&loc(2, 0)].call_targets["foo"], 2);
    assert_eq!(main.samples_at(loc(3, 0)), Some(0));
    assert_eq!((main.total, main.head, main.checksum), (10, 4, 100));
    let bar = p.profiles.values().find(|f| f.name() == "bar").unwrap();
    assert_eq!(
        (bar.total, bar.head, bar.checksum, bar.attributes),
        (4, 4, 200, 1)
    );
    assert_eq!(bar.samples_at(loc(2, 0)), Some(0));
    let foo = p.profiles.values().find(|f| f.name() == "foo").unwrap();
    assert_eq!((foo.total, foo.head, foo.attributes), (2, 2, 0));
    assert_eq!(foo.samples_at(loc(2, 0)), Some(0));
}

#[test]
fn flat_probe_profile_nests_inlinees() {
    let b = probe_binary();
    let mut cs = CounterSet::new(CounterKind::Flat);
    cs.context_mut(&[]).ranges.insert((0x10, 0x18), 3);
    cs.context_mut(&[]).branches.insert((0x18, 0x20), 3);
    let p = generate_profile(&b, &cs, &flat_cs_options());
    let main = &p.profiles[&SampleContext::from_name("main")];
    // Probes 1 and call probe 2 (both counted in the flat path) get 3, 3 zero-filled.
    assert_eq!(main.samples_at(loc(1, 0)), Some(3));
    assert_eq!(main.samples_at(loc(2, 0)), Some(3));
    assert_eq!(main.body[&loc(2, 0)].call_targets["foo"], 3);
    assert_eq!(main.samples_at(loc(3, 0)), Some(0));
    assert_eq!((main.head, main.checksum), (3, 100));
    let bar = &main.callsites[&loc(4, 0)]["bar"];
    assert_eq!((bar.total, bar.head, bar.checksum), (6, 3, 200));
    // main's total: probes 1, 2 and bar's two probes (3 each) + probe 3 (0).
    assert_eq!(main.total, 12);
    // No range reached foo: its profile does not exist (flat probe heads come from
    // entry probes only).
    assert!(!p.profiles.contains_key(&SampleContext::from_name("foo")));
}

/// Zero-count ranges in main that begin together and end apart leave llvm-profgen's
/// disjoint-range walk in a zero gap up to the next range (in baz), across foo. foo's probes
/// count only when foo is profiled: llvm-profgen decodes no other function's probes.
#[test]
fn flat_probe_profile_counts_no_probe_of_an_unprofiled_function() {
    let mut b = probe_binary();
    b.insts.insert(0x30, 4);
    b.funcs.insert("baz".into(), vec![(0x30, 0x34)]);
    let mut cs = CounterSet::new(CounterKind::Flat);
    let counters = cs.context_mut(&[]);
    counters.ranges.insert((0x10, 0x14), 0);
    counters.ranges.insert((0x10, 0x16), 0);
    counters.ranges.insert((0x30, 0x30), 0);
    let names = |cs: &CounterSet| -> Vec<String> {
        let p = generate_profile(&b, cs, &flat_cs_options());
        p.profiles.keys().map(|c| c.to_string()).collect()
    };
    assert_eq!(names(&cs), vec!["main"]);
    // A branch into foo makes it profiled: the gap's zero count reaches its probes.
    cs.context_mut(&[]).branches.insert((0x1c, 0x20), 0);
    assert_eq!(names(&cs), vec!["foo", "main"]);
}

#[test]
fn cold_contexts_merge_into_base_profiles() {
    let b = probe_binary();
    let mut cs = CounterSet::new(CounterKind::ProbeContext);
    cs.context_mut(&[]).ranges.insert((0x10, 0x10), 1000);
    cs.context_mut(&[0x18]).ranges.insert((0x20, 0x20), 1);
    let p = generate_profile(&b, &cs, &flat_cs_options());
    let text: Vec<String> = p.profiles.keys().map(|c| c.to_string()).collect();
    // Hot threshold is 1000 (99% of 1001 needs the 1000): [main:2 @ foo] (total 1) is
    // merged into [foo], and main itself (total 1000) is not cold.
    assert_eq!(text, vec!["foo", "main"]);
    let foo = &p.profiles[&SampleContext::from_name("foo")];
    assert_eq!((foo.total, foo.head, foo.attributes), (1, 1, 0));
}

/// The flags these tests compare with: `--csspgo-preinliner=false --gen-cs-nested-profile=false`.
fn flat_cs_options() -> GenerateOptions {
    GenerateOptions {
        preinliner: false,
        nested_profile: false,
        ..GenerateOptions::default()
    }
}

/// Counters of sampled IPs (one range (IP, IP) per sample, no branch: cpu-clock stack
/// samples) sum a line's instructions, as `--leading-ip-only` does, flag or not; counters
/// with branches keep the maximum.
#[test]
fn sampled_ips_sum_a_line_branch_ranges_take_its_maximum() {
    let mut b = FakeBinary::default();
    for a in [0x40, 0x44] {
        b.insts.insert(a, 4);
        b.frames.insert(a, vec![fr("f", 1, 0)]);
    }
    b.funcs.insert("f".into(), vec![(0x40, 0x48)]);
    b.entries.insert(0x40, "f".into());
    for kind in [CounterKind::Flat, CounterKind::LineContext] {
        let mut cs = CounterSet::new(kind);
        let key: &[u64] = if kind == CounterKind::Flat {
            &[]
        } else {
            &[0x40]
        };
        cs.context_mut(key).ranges.insert((0x40, 0x40), 3);
        cs.context_mut(key).ranges.insert((0x44, 0x44), 5);
        assert!(super::counts_sampled_ips(cs.contexts.values()));
        let body = |cs: &CounterSet| {
            let p = generate_profile(&b, cs, &flat_cs_options());
            let f = p.profiles.values().find(|f| f.name() == "f").unwrap();
            f.samples_at(loc(1, 0))
        };
        assert_eq!(body(&cs), Some(8), "{kind:?}");
        cs.context_mut(key).branches.insert((0x44, 0x40), 1);
        assert!(!super::counts_sampled_ips(cs.contexts.values()));
        assert_eq!(body(&cs), Some(5), "{kind:?}");
    }
}

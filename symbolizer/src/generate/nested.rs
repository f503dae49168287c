//! Conversion of a flat CS profile into a nested one (LLVM 19
//! `ProfileConverter::convertCSProfiles`, SampleProf.cpp; `--gen-cs-nested-profile`).
//!
//! The contexts form a trie (children ordered by LLVM's call-site hash). Bottom-up, each
//! child profile becomes an inlined callee of its parent context's profile at the call
//! site: the parent's total grows by the child's total, and the parent's call target to
//! the child (and as much of the body count at that site) is removed, the body entry
//! disappearing when its count reaches 0. A child whose parent context has no profile
//! becomes (or merges into) a top-level profile of its function. The result is keyed by
//! function name; context attributes survive on the nested profiles. With
//! `--generate-merged-base-profiles` every nested child is also merged into its
//! function's top-level profile.

use std::collections::BTreeMap;

use super::size_tracker::call_site_hash;
use crate::guid::function_guid;
use crate::profile::{FunctionSamples, LineLocation, SampleContext, CONTEXT_DUPLICATED_INTO_BASE};

struct FrameNode {
    func: String,
    callsite: LineLocation,
    children: BTreeMap<u64, usize>,
    prof: Option<FunctionSamples>,
}

/// Converts `profiles` (full contexts) to nested top-level profiles keyed by name. With
/// `merged_base_profiles` (`--generate-merged-base-profiles`) a child nested into its
/// parent is also merged into its function's top-level profile, and the nested copy is
/// marked [`CONTEXT_DUPLICATED_INTO_BASE`] (the summary then counts it once).
pub fn convert_cs_to_nested(
    profiles: BTreeMap<SampleContext, FunctionSamples>,
    merged_base_profiles: bool,
) -> BTreeMap<SampleContext, FunctionSamples> {
    let mut nodes = vec![FrameNode {
        func: String::new(),
        callsite: LineLocation::default(),
        children: BTreeMap::new(),
        prof: None,
    }];
    for (ctx, fs) in profiles {
        let mut node = 0usize;
        let mut loc = LineLocation::default();
        for f in &ctx.frames {
            let key = call_site_hash(function_guid(&f.func), loc);
            node = match nodes[node].children.get(&key) {
                Some(c) => *c,
                None => {
                    let id = nodes.len();
                    nodes.push(FrameNode {
                        func: f.func.clone(),
                        callsite: loc,
                        children: BTreeMap::new(),
                        prof: None,
                    });
                    nodes[node].children.insert(key, id);
                    id
                }
            };
            loc = f.location;
        }
        nodes[node].prof = Some(fs);
    }
    let mut out = BTreeMap::new();
    // Depth first, as LLVM recurses: each child is folded into its parent as soon as its
    // own subtree is done, so profiles merge into a base profile in LLVM's order (the
    // first merge decides the base's attributes). Stack of (node, parent, expanded).
    let mut stack: Vec<(usize, usize, bool)> = vec![(0, 0, false)];
    while let Some((n, parent, expanded)) = stack.pop() {
        if !expanded {
            stack.push((n, parent, true));
            for c in nodes[n].children.values().rev() {
                stack.push((*c, n, false));
            }
            continue;
        }
        if n == 0 {
            continue;
        }
        let Some(mut child) = nodes[n].prof.take() else {
            continue;
        };
        let func = nodes[n].func.clone();
        let site = nodes[n].callsite;
        child.context = SampleContext::from_name(func.clone());
        // What goes into the function's top-level profile: the child itself when its
        // parent context has no profile, a copy of it with merged base profiles.
        let into_base = match nodes[parent].prof.as_mut() {
            Some(parent) => {
                let total = child.total;
                let copy = merged_base_profiles.then(|| child.clone());
                let nested = parent
                    .callsites
                    .entry(site)
                    .or_default()
                    .entry(func.clone())
                    .or_insert(child);
                if merged_base_profiles {
                    nested.attributes |= CONTEXT_DUPLICATED_INTO_BASE;
                }
                parent.add_total_samples(total);
                let removed = remove_called_target_and_body_sample(parent, site, &func);
                parent.total = parent.total.saturating_sub(removed);
                copy
            }
            None => Some(child),
        };
        if let Some(child) = into_base {
            out.entry(SampleContext::from_name(func))
                .or_insert_with(|| FunctionSamples::new(SampleContext::default()))
                .merge(&child);
        }
    }
    out
}

/// `FunctionSamples::removeCalledTargetAndBodySample`: removes the call target `callee` at
/// `loc` and as many body samples (at most the body count); returns the amount removed.
pub fn remove_called_target_and_body_sample(
    fs: &mut FunctionSamples,
    loc: LineLocation,
    callee: &str,
) -> u64 {
    let Some(b) = fs.body.get_mut(&loc) else {
        return 0;
    };
    let count = b.call_targets.remove(callee).unwrap_or(0).min(b.count);
    b.count -= count;
    if b.count == 0 {
        fs.body.remove(&loc);
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::ContextFrame;

    fn ctx(frames: &[(&str, u32)]) -> SampleContext {
        SampleContext::from_frames(
            frames
                .iter()
                .map(|(n, l)| ContextFrame::new(*n, LineLocation::new(*l, 0)))
                .collect(),
        )
    }

    #[test]
    fn children_nest_into_parents_and_orphans_go_top_level() {
        let mut m = BTreeMap::new();
        // [main] 100: body 8 = 744 calls to foo (all), body 9 = 30 with bar 20 + baz 10.
        let main = ctx(&[("main", 0)]);
        let mut mp = FunctionSamples::new(main.clone());
        mp.total = 100;
        mp.add_body_samples(LineLocation::new(8, 0), 744);
        mp.add_called_target_samples(LineLocation::new(8, 0), "foo", 744);
        mp.add_body_samples(LineLocation::new(9, 0), 30);
        mp.add_called_target_samples(LineLocation::new(9, 0), "bar", 20);
        mp.add_called_target_samples(LineLocation::new(9, 0), "baz", 10);
        m.insert(main, mp);
        let foo = ctx(&[("main", 8), ("foo", 0)]);
        let mut fp = FunctionSamples::new(foo.clone());
        fp.total = 50;
        fp.attributes = 2;
        m.insert(foo, fp);
        let bar = ctx(&[("main", 9), ("bar", 0)]);
        let mut bp = FunctionSamples::new(bar.clone());
        bp.total = 20;
        m.insert(bar, bp);
        // An orphan: [other:1 @ baz] without [other].
        let orphan = ctx(&[("other", 1), ("baz", 0)]);
        let mut op = FunctionSamples::new(orphan.clone());
        op.total = 7;
        op.attributes = 3;
        m.insert(orphan, op);
        let out = convert_cs_to_nested(m, false);
        let names: Vec<String> = out.keys().map(|c| c.to_string()).collect();
        assert_eq!(names, vec!["baz", "main"]);
        let main = &out[&SampleContext::from_name("main")];
        // 100 + 50 - 744 (clamped at 0) + 20 - 20 ... in hash order; totals saturate.
        assert!(!main.body.contains_key(&LineLocation::new(8, 0)));
        assert_eq!(main.body[&LineLocation::new(9, 0)].count, 10);
        assert_eq!(
            main.body[&LineLocation::new(9, 0)]
                .call_targets
                .keys()
                .collect::<Vec<_>>(),
            vec!["baz"]
        );
        let nested_foo = &main.callsites[&LineLocation::new(8, 0)]["foo"];
        assert_eq!((nested_foo.total, nested_foo.attributes), (50, 2));
        assert_eq!(nested_foo.context, SampleContext::from_name("foo"));
        let baz = &out[&SampleContext::from_name("baz")];
        assert_eq!((baz.total, baz.attributes), (7, 3));
    }

    #[test]
    fn merged_base_profiles_duplicate_nested_children_into_their_bases() {
        let mut m = BTreeMap::new();
        let main = ctx(&[("main", 0)]);
        let mut mp = FunctionSamples::new(main.clone());
        mp.total = 100;
        mp.add_body_samples(LineLocation::new(8, 0), 40);
        mp.add_called_target_samples(LineLocation::new(8, 0), "foo", 30);
        m.insert(main, mp);
        let foo_in_main = ctx(&[("main", 8), ("foo", 0)]);
        let mut fp = FunctionSamples::new(foo_in_main.clone());
        fp.total = 50;
        fp.attributes = 2;
        fp.add_body_samples(LineLocation::new(1, 0), 50);
        m.insert(foo_in_main, fp);
        let foo = ctx(&[("foo", 0)]);
        let mut base = FunctionSamples::new(foo.clone());
        base.total = 9;
        base.add_body_samples(LineLocation::new(1, 0), 9);
        m.insert(foo, base);

        let plain = convert_cs_to_nested(m.clone(), false);
        assert_eq!(plain[&SampleContext::from_name("foo")].total, 9);
        let merged = convert_cs_to_nested(m, true);
        let main = &merged[&SampleContext::from_name("main")];
        // 100 + 50 nested - 30 call target removed from the body.
        assert_eq!(main.total, 120);
        assert_eq!(main.body[&LineLocation::new(8, 0)].count, 10);
        let nested = &main.callsites[&LineLocation::new(8, 0)]["foo"];
        assert_eq!((nested.total, nested.attributes), (50, 2 | 4));
        // The base: [foo] (9) and the copy of [main:8 @ foo] (50).
        let base = &merged[&SampleContext::from_name("foo")];
        assert_eq!(base.total, 59);
        assert_eq!(base.body[&LineLocation::new(1, 0)].count, 59);
    }

    #[test]
    fn removal_clamps_to_body_count() {
        let mut f = FunctionSamples::new(SampleContext::from_name("f"));
        f.add_body_samples(LineLocation::new(1, 0), 5);
        f.add_called_target_samples(LineLocation::new(1, 0), "g", 9);
        assert_eq!(
            remove_called_target_and_body_sample(&mut f, LineLocation::new(1, 0), "g"),
            5
        );
        assert!(f.body.is_empty());
        assert_eq!(
            remove_called_target_and_body_sample(&mut f, LineLocation::new(1, 0), "g"),
            0
        );
    }
}

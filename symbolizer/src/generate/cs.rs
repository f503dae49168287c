//! Context-sensitive generation (`CSProfileGenerator`): probe-based (llvm-profgen.md
//! §2.7.5) and DWARF line-based (§2.7.4), both filling a [`ContextTrie`].

use std::collections::{BTreeMap, BTreeSet, HashMap};

use unwinder::{ContextCounters, CounterSet};

use super::binary_view::{BinaryView, BinaryViewExt};
use super::context_shape::{compress_recursion, trim_context};
use super::disjoint::find_disjoint_ranges;
use super::flat::{probe_counts, update_body_max};
use super::missing_frames::MissingFrameInferrer;
use super::profiled_functions::ProfiledFunctions;
use super::GenerateOptions;
use crate::dwarf::discriminator::base_discriminator;
use crate::probe::{InlineNodeId, ProbeKind, PseudoProbe};
use crate::profile::{
    ContextFrame, ContextTrie, LineLocation, SampleContext, TrieNodeId, CONTEXT_WAS_INLINED,
};

/// Leaf location := 0:0, compress and trim the non-leaf part, re-append the leaf.
fn shape(mut frames: Vec<ContextFrame>, opts: &GenerateOptions) -> Vec<ContextFrame> {
    let Some(mut leaf) = frames.pop() else {
        return frames;
    };
    leaf.location = LineLocation::default();
    compress_recursion(&mut frames, opts.compress_recursion);
    trim_context(&mut frames, opts.max_context_depth);
    frames.push(leaf);
    frames
}

/// `ProfiledBinary::getInlineContextForProbe(.., IncludeLeaf = true)` appending to `out`:
/// the callers' (function, call-site probe index) outermost first, then the probe's own
/// (function, index). A call site with probe index 0 before the last frame clears
/// everything collected so far, the caller's prefix included, as LLVM clears its output
/// vector.
fn push_probe_context<B: BinaryView>(binary: &B, probe: &PseudoProbe, out: &mut Vec<ContextFrame>) {
    let name = |guid: u64| binary.probe_desc(guid).map_or("", |d| d.name.as_str());
    let mut callers: Vec<(u64, u32)> = Vec::new();
    let mut node = binary.probe_node(probe.node);
    while let Some(parent) = node.parent {
        let caller = binary.probe_node(parent);
        callers.push((caller.guid, node.site));
        node = caller;
    }
    for &(guid, site) in callers.iter().rev() {
        if site == 0 {
            out.clear();
            continue;
        }
        out.push(ContextFrame::new(name(guid), LineLocation::new(site, 0)));
    }
    out.push(ContextFrame::new(
        name(probe.guid),
        LineLocation::new(probe.index, 0),
    ));
}

/// `getContextNodeForLeafProbe`: the trie node of `probe` in the address context `key`
/// (missing frames inferred first when `infer` is given).
fn node_for_leaf_probe<B: BinaryView>(
    trie: &mut ContextTrie,
    binary: &B,
    key: &[u64],
    probe: &PseudoProbe,
    opts: &GenerateOptions,
    infer: Option<&MissingFrameInferrer>,
) -> TrieNodeId {
    let inferred;
    let key = match infer {
        Some(inferrer) => {
            inferred = inferrer.infer(binary, key, probe.address);
            inferred.as_slice()
        }
        None => key,
    };
    // Prefix: call probes of the key's addresses, cut at the first (from the leaf side)
    // address without one (`extractPrefixContextStack`).
    let mut first = key.len();
    while first > 0 && binary.call_probe_at(key[first - 1]).is_some() {
        first -= 1;
    }
    let mut frames = Vec::new();
    for &addr in &key[first..] {
        if let Some(p) = binary.call_probe_at(addr) {
            push_probe_context(binary, p, &mut frames);
        }
    }
    push_probe_context(binary, probe, &mut frames);
    let frames = shape(frames, opts);
    let was_leaf_inlined = binary.node_is_inlined(probe.node);
    let node = trie.path(&frames);
    let checksum = binary.checksum_for_guid(probe.guid).unwrap_or(0);
    let fs = trie.samples_mut(node);
    if was_leaf_inlined {
        fs.attributes |= CONTEXT_WAS_INLINED;
    }
    fs.checksum = checksum;
    node
}

/// CS probe-based trie (`CSProfileGenerator::generateProbeBasedProfile`), counting the
/// probes of the `profiled` functions.
pub fn generate_cs_probe_trie<B: BinaryView>(
    binary: &B,
    counters: &CounterSet,
    profiled: &ProfiledFunctions,
    opts: &GenerateOptions,
) -> ContextTrie {
    let mut trie = ContextTrie::new();
    let inferrer = opts.infer_missing_frames.then(|| {
        MissingFrameInferrer::new(binary, counters).with_max_search_depth(opts.max_search_depth)
    });
    let mut keys: Vec<&Vec<u64>> = counters.contexts.keys().collect();
    keys.sort();
    for key in keys {
        let cc = &counters.contexts[key];
        let infer = inferrer.as_ref();
        populate_body_with_probes(&mut trie, binary, key, cc, opts, infer, profiled);
        populate_boundary_with_probes(&mut trie, binary, key, cc, opts, inferrer.as_ref());
    }
    trie
}

fn populate_body_with_probes<B: BinaryView>(
    trie: &mut ContextTrie,
    binary: &B,
    key: &[u64],
    cc: &ContextCounters,
    opts: &GenerateOptions,
    infer: Option<&MissingFrameInferrer>,
    profiled: &ProfiledFunctions,
) {
    let ranges = find_disjoint_ranges(&cc.ranges);
    let mut frame_samples: HashMap<InlineNodeId, BTreeSet<TrieNodeId>> = HashMap::new();
    for (probe, c) in probe_counts(binary, &ranges, profiled).into_values() {
        if probe.kind != ProbeKind::Block || c == 0 {
            continue;
        }
        let node = node_for_leaf_probe(trie, binary, key, probe, opts, infer);
        frame_samples.entry(probe.node).or_default().insert(node);
        let f = trie.samples_mut(node);
        f.add_body_samples(LineLocation::new(probe.index, probe.discriminator), c);
        f.add_total_samples(c);
        if probe.index == 1 {
            f.add_head_samples(c);
            let inliner = binary.inliner_checksum(probe.node);
            let parent = trie.parent(node);
            if let (Some(hash), Some(parent)) = (inliner, parent) {
                if parent != ContextTrie::ROOT {
                    let site = trie.callsite(node);
                    let callee = trie.func(node).to_string();
                    let caller = trie.samples_mut(parent);
                    caller.checksum = hash;
                    caller.add_body_samples(site, c);
                    caller.add_total_samples(c);
                    caller.add_called_target_samples(site, &callee, c);
                }
            }
        }
    }
    // Zero-fill every probe of each sampled frame: 0 = cold, absent = unknown.
    for (tree_node, nodes) in frame_samples {
        let probes = binary.node_probes(tree_node);
        for node in nodes {
            let f = trie.samples_mut(node);
            for p in &probes {
                f.add_body_samples(LineLocation::new(p.index, p.discriminator), 0);
            }
        }
    }
}

fn populate_boundary_with_probes<B: BinaryView>(
    trie: &mut ContextTrie,
    binary: &B,
    key: &[u64],
    cc: &ContextCounters,
    opts: &GenerateOptions,
    infer: Option<&MissingFrameInferrer>,
) {
    for (&(src, dst), &c) in &cc.branches {
        let Some(call_probe) = binary.call_probe_at(src) else {
            continue;
        };
        let node = node_for_leaf_probe(trie, binary, key, call_probe, opts, infer);
        let f = trie.samples_mut(node);
        f.add_body_samples(LineLocation::new(call_probe.index, 0), c);
        f.add_total_samples(c);
        if let Some(callee) = binary.callee_name_at(dst) {
            f.add_called_target_samples(
                LineLocation::new(call_probe.index, call_probe.discriminator),
                callee,
                c,
            );
        }
    }
}

/// `getExpandedContext`: inline frames of each address (root first), base
/// discriminators, leaf 0:0, compressed and trimmed; plus WasLeafInlined. Empty when an
/// address has no debug info.
pub fn expand_line_context<B: BinaryView>(
    binary: &B,
    key: &[u64],
    opts: &GenerateOptions,
) -> (Vec<ContextFrame>, bool) {
    let fs = binary.uses_fs_discriminator();
    let mut frames = Vec::new();
    let mut was_leaf_inlined = false;
    for &addr in key {
        let inl = binary.inline_frames(addr);
        if inl.is_empty() {
            return (Vec::new(), false);
        }
        was_leaf_inlined = inl.len() > 1;
        for f in inl {
            frames.push(ContextFrame::new(
                f.func_name.as_str(),
                LineLocation::new(f.line_offset, base_discriminator(f.discriminator, fs)),
            ));
        }
    }
    (shape(frames, opts), was_leaf_inlined)
}

/// CS DWARF line-based trie (`CSProfileGenerator::generateLineNumBasedProfile`).
pub fn generate_cs_line_trie<B: BinaryView>(
    binary: &B,
    counters: &CounterSet,
    opts: &GenerateOptions,
) -> ContextTrie {
    // Address stacks that expand to the same context share counters (the unwinder's
    // StringBasedCtxKey); WasLeafInlined is or-ed.
    let mut by_context: BTreeMap<SampleContext, (ContextCounters, bool)> = BTreeMap::new();
    let mut keys: Vec<&Vec<u64>> = counters.contexts.keys().collect();
    keys.sort();
    for key in keys {
        let (ctx, inl) = expand_line_context(binary, key, opts);
        let e = by_context
            .entry(SampleContext::from_frames(ctx))
            .or_default();
        e.0.merge(&counters.contexts[key]);
        e.1 |= inl;
    }
    line_trie_of_contexts(binary, &by_context, opts)
}

/// CS line-based trie of counters already keyed by symbolized context (an unsymbolized
/// profile with line contexts, llvm-profgen's `StringBasedCtxKey`): each context is
/// compressed and trimmed as `opts` say (`getOrCreateContextNode`), its leaf not marked
/// inlined (the text does not say).
pub fn generate_cs_line_trie_of_contexts<B: BinaryView>(
    binary: &B,
    contexts: &BTreeMap<SampleContext, ContextCounters>,
    opts: &GenerateOptions,
) -> ContextTrie {
    let mut by_context: BTreeMap<SampleContext, (ContextCounters, bool)> = BTreeMap::new();
    for (ctx, cc) in contexts {
        let frames = shape(ctx.frames.clone(), opts);
        by_context
            .entry(SampleContext::from_frames(frames))
            .or_default()
            .0
            .merge(cc);
    }
    line_trie_of_contexts(binary, &by_context, opts)
}

/// The trie of line contexts with their counters and `WasLeafInlined`.
fn line_trie_of_contexts<B: BinaryView>(
    binary: &B,
    by_context: &BTreeMap<SampleContext, (ContextCounters, bool)>,
    opts: &GenerateOptions,
) -> ContextTrie {
    let fs = binary.uses_fs_discriminator();
    let mut trie = ContextTrie::new();
    for (ctx, (cc, was_leaf_inlined)) in by_context {
        let mut node = ContextTrie::ROOT;
        if !ctx.frames.is_empty() {
            node = trie.path(&ctx.frames);
            let f = trie.samples_mut(node);
            if *was_leaf_inlined {
                f.attributes |= CONTEXT_WAS_INLINED;
            }
            for ((b, e), c) in find_disjoint_ranges(&cc.ranges) {
                if c == 0 {
                    continue;
                }
                for (addr, _) in binary.instructions_in(b, e) {
                    if let Some(leaf) = binary.inline_frames(addr).last() {
                        update_body_max(
                            f,
                            leaf.line_offset,
                            leaf.discriminator,
                            c,
                            fs,
                            opts.leading_ip_only,
                        );
                        f.add_total_samples(c);
                    }
                }
            }
        }
        for (&(src, dst), &c) in &cc.branches {
            let Some(callee) = binary.callee_name_at(dst) else {
                continue;
            };
            let mut site = LineLocation::default();
            if node != ContextTrie::ROOT {
                if let Some(leaf) = binary.inline_frames(src).last() {
                    let loc = LineLocation::new(
                        leaf.line_offset,
                        base_discriminator(leaf.discriminator, fs),
                    );
                    trie.samples_mut(node)
                        .add_called_target_samples(loc, callee, c);
                    site = LineLocation::new(leaf.line_offset, leaf.discriminator);
                }
            }
            let callee_node = trie.child(node, site, callee);
            trie.samples_mut(callee_node).add_head_samples(c);
        }
    }
    populate_inferred_function_samples(&mut trie);
    trie
}

/// `populateInferredFunctionSamples`: callers of contexts without head samples get the
/// callee's estimated entry count as call target and body samples at the call site.
fn populate_inferred_function_samples(trie: &mut ContextTrie) {
    for id in trie.post_order() {
        let Some(callee) = trie.samples(id) else {
            continue;
        };
        if callee.head > 0 {
            continue;
        }
        let Some(parent) = trie.parent(id) else {
            continue;
        };
        if parent == ContextTrie::ROOT {
            continue;
        }
        let mut est = callee.head_samples_estimate(true);
        if est == 0 && callee.body.is_empty() {
            est = 1;
        }
        let site = trie.callsite(id);
        let name = trie.func(id).to_string();
        let caller = trie.samples_mut(parent);
        caller.add_called_target_samples(site, &name, est);
        caller.add_body_samples(site, est);
        caller.add_total_samples(est);
    }
}

//! [`ProbeStore`]: the `.pseudo_probe` section decoded a function at a time.
//!
//! A decoded probe takes 32 bytes; its encoding about three. A large binary has millions
//! of probes, of which a profile needs those of the functions samples reach. The store
//! keeps the section's bytes (a range of the file's memory map, or a copy) and, from one
//! pass at load that checks every record, the inline forest, where each top-level record
//! starts with the decoder state it starts in, and the address spans its probes cover.
//! A record's probes are decoded on the first query that reaches them.
//!
//! Records whose spans overlap (identical code folded, a split function's parts between
//! another's) form one group, decoded together, so that every address belongs to at most
//! one group and the probes at an address come out in the eager decoder's order: sorted by
//! address, in decode order at one address ([`super::ProbeSection::decode`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use super::inline_tree::{InlineNodeId, ProbeInlineTree};
use super::reader::DecodeError;
use super::section::{Decoder, ProbeKind, PseudoProbe, RecordState};
use crate::decoded_bytes::Cache;
use crate::dwarf::sections::SectionBytes;

/// Probe addresses of one record further apart than this start a new span: a function's
/// split-off parts lie elsewhere in the code.
const SPAN_GAP: u64 = 4096;

/// One top-level record of the section.
#[derive(Debug)]
struct Record {
    offset: usize,
    state: RecordState,
    /// Its first node; its nodes are `node_base..` up to the next record's base.
    node_base: InlineNodeId,
    group: u32,
}

/// Records decoded together, in section order.
#[derive(Debug)]
struct Group {
    records: Box<[u32]>,
    probes: OnceLock<Box<[PseudoProbe]>>,
}

/// Addresses `[lo, hi]` (inclusive) whose probes are all in `group`.
#[derive(Clone, Copy, Debug)]
struct Span {
    lo: u64,
    hi: u64,
    group: u32,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct ProbeStore {
    bytes: Option<SectionBytes>,
    func_starts: HashMap<u64, u64>,
    tree: ProbeInlineTree,
    records: Vec<Record>,
    groups: Vec<Group>,
    /// Disjoint, sorted.
    spans: Vec<Span>,
    /// Nodes that own at least one probe, sorted.
    nodes_with_probes: Vec<InlineNodeId>,
    probe_count: usize,
    decoded: AtomicUsize,
    /// Give back the pages of the records each group decodes (bytes in a file mapping).
    release_pages: bool,
}

impl Drop for ProbeStore {
    fn drop(&mut self) {
        Cache::Probes.sub(self.decoded() * std::mem::size_of::<PseudoProbe>());
    }
}

impl ProbeStore {
    /// Checks and indexes the section `bytes`; `func_starts` maps symbol-name GUIDs to
    /// symbol addresses (as [`super::ProbeSection::decode`]). Errors are those of the
    /// eager decoder, with the same offsets.
    pub(crate) fn index(
        bytes: SectionBytes,
        func_starts: HashMap<u64, u64>,
    ) -> Result<ProbeStore, DecodeError> {
        let data = bytes.bytes();
        let mut d = Decoder::at(data, 0, RecordState::default(), &func_starts);
        let mut records = Vec::new();
        let mut record_spans: Vec<(u64, u64, u32)> = Vec::new();
        let mut owners: Vec<InlineNodeId> = Vec::new();
        let mut probe_count = 0;
        let mut addrs: Vec<u64> = Vec::new();
        while !d.is_empty() {
            let (offset, state, node_base) = (d.offset(), d.state(), d.node_count());
            d.record()?;
            let probes = d.take_probes();
            probe_count += probes.len();
            let record = records.len() as u32;
            addrs.clear();
            addrs.extend(probes.iter().map(|p| p.address));
            addrs.sort_unstable();
            let mut run: Option<(u64, u64)> = None;
            for &a in &addrs {
                run = match run {
                    Some((lo, hi)) if a - hi <= SPAN_GAP => Some((lo, a)),
                    Some((lo, hi)) => {
                        record_spans.push((lo, hi, record));
                        Some((a, a))
                    }
                    None => Some((a, a)),
                };
            }
            if let Some((lo, hi)) = run {
                record_spans.push((lo, hi, record));
            }
            // A record's nodes are numbered after the previous record's: sorting each
            // record's owners keeps the whole list sorted.
            let from = owners.len();
            owners.extend(probes.iter().map(|p| p.node));
            owners[from..].sort_unstable();
            let mut kept = from;
            for i in from..owners.len() {
                if i == from || owners[i] != owners[kept - 1] {
                    owners[kept] = owners[i];
                    kept += 1;
                }
            }
            owners.truncate(kept);
            records.push(Record {
                offset,
                state,
                node_base: node_base as InlineNodeId,
                group: record,
            });
        }
        let mut tree = d.into_tree();
        tree.shrink();

        // Overlapping spans join their records (union-find) and merge.
        let mut parent: Vec<u32> = (0..records.len() as u32).collect();
        fn find(parent: &mut [u32], mut x: u32) -> u32 {
            while parent[x as usize] != x {
                parent[x as usize] = parent[parent[x as usize] as usize];
                x = parent[x as usize];
            }
            x
        }
        record_spans.sort_unstable_by_key(|s| (s.0, s.1));
        let mut merged: Vec<(u64, u64, u32)> = Vec::new();
        for (lo, hi, r) in record_spans {
            match merged.last_mut() {
                Some(last) if lo <= last.1 => {
                    last.1 = last.1.max(hi);
                    let (a, b) = (find(&mut parent, last.2), find(&mut parent, r));
                    parent[a.max(b) as usize] = a.min(b);
                }
                _ => merged.push((lo, hi, r)),
            }
        }
        // Groups numbered by their first record; members in section order.
        let mut group_of_root: HashMap<u32, u32> = HashMap::new();
        let mut members: Vec<Vec<u32>> = Vec::new();
        for r in 0..records.len() as u32 {
            let root = find(&mut parent, r);
            let g = *group_of_root.entry(root).or_insert_with(|| {
                members.push(Vec::new());
                (members.len() - 1) as u32
            });
            members[g as usize].push(r);
            records[r as usize].group = g;
        }
        let spans = merged
            .into_iter()
            .map(|(lo, hi, r)| Span {
                lo,
                hi,
                group: records[r as usize].group,
            })
            .collect();
        let groups = members
            .into_iter()
            .map(|m| Group {
                records: m.into_boxed_slice(),
                probes: OnceLock::new(),
            })
            .collect();
        owners.shrink_to_fit();
        Ok(ProbeStore {
            bytes: Some(bytes),
            func_starts,
            tree,
            records,
            groups,
            spans,
            nodes_with_probes: owners,
            probe_count,
            decoded: AtomicUsize::new(0),
            release_pages: false,
        })
    }

    /// With `release` and a section kept as a range of the file's map, the section's pages
    /// are given back each time a query has decoded what it reads, as
    /// [`crate::LoadOptions::release_decoded_pages`] asks (the decoded probes are kept: the
    /// pages would only be read again for a neighbouring group). A large binary's section
    /// is megabytes, and the functions a profile reaches are spread all over it.
    pub(crate) fn releasing_decoded_pages(mut self, release: bool) -> ProbeStore {
        self.release_pages = release && matches!(self.bytes, Some(SectionBytes::Mapped(..)));
        self
    }

    /// The number of probes (sentinels left out).
    pub fn len(&self) -> usize {
        self.probe_count
    }

    /// True when the section has no probe.
    pub fn is_empty(&self) -> bool {
        self.probe_count == 0
    }

    /// Probes decoded so far.
    pub fn decoded(&self) -> usize {
        self.decoded.load(Ordering::Relaxed)
    }

    /// The inline forest.
    pub fn tree(&self) -> &ProbeInlineTree {
        &self.tree
    }

    /// The probes of group `g`, sorted by address (decode order at one address).
    fn group(&self, g: u32) -> &[PseudoProbe] {
        let group = &self.groups[g as usize];
        group.probes.get_or_init(|| {
            let Some(bytes) = &self.bytes else {
                return Box::default();
            };
            let data = bytes.bytes();
            let mut probes = Vec::new();
            for &r in &group.records {
                let record = &self.records[r as usize];
                let mut d = Decoder::at(data, record.offset, record.state, &self.func_starts);
                // Checked at load: the same bytes decode the same way.
                if d.record().is_err() {
                    continue;
                }
                let mut mine = d.take_probes();
                for p in &mut mine {
                    p.node += record.node_base;
                }
                probes.append(&mut mine);
            }
            if self.release_pages {
                // The whole section: the kernel maps the file's cached pages a large
                // folio (or 64 KiB) around each one touched, well past the records read.
                crate::binary::LazyCode::release(data);
            }
            probes.sort_by_key(|p| p.address);
            self.decoded.fetch_add(probes.len(), Ordering::Relaxed);
            Cache::Probes.add(probes.len() * std::mem::size_of::<PseudoProbe>());
            probes.into_boxed_slice()
        })
    }

    /// The span containing `addr`.
    fn span_at(&self, addr: u64) -> Option<&Span> {
        let i = self
            .spans
            .partition_point(|s| s.lo <= addr)
            .checked_sub(1)?;
        let span = &self.spans[i];
        (addr <= span.hi).then_some(span)
    }

    /// The probes at `addr`, in decode order.
    pub fn probes_at(&self, addr: u64) -> &[PseudoProbe] {
        let Some(span) = self.span_at(addr) else {
            return &[];
        };
        let probes = self.group(span.group);
        let lo = probes.partition_point(|p| p.address < addr);
        let hi = lo + probes[lo..].partition_point(|p| p.address == addr);
        &probes[lo..hi]
    }

    /// The address of the last block probe at or before `addr` and at or after `floor`.
    pub fn block_probe_at_or_before(&self, addr: u64, floor: u64) -> Option<u64> {
        let end = self.spans.partition_point(|s| s.lo <= addr);
        for span in self.spans[..end].iter().rev() {
            if span.hi < floor {
                break;
            }
            let (lo, hi) = (floor.max(span.lo), addr.min(span.hi));
            let probes = self.group(span.group);
            let to = probes.partition_point(|p| p.address <= hi);
            let found = probes[..to]
                .iter()
                .rev()
                .take_while(|p| p.address >= lo)
                .find(|p| p.kind == ProbeKind::Block);
            if let Some(p) = found {
                return Some(p.address);
            }
        }
        None
    }

    /// The probes of inline-tree node `node`, sorted by address.
    pub fn node_probes(&self, node: InlineNodeId) -> Vec<&PseudoProbe> {
        let Some(r) = self
            .records
            .partition_point(|r| r.node_base <= node)
            .checked_sub(1)
        else {
            return Vec::new();
        };
        self.group(self.records[r].group)
            .iter()
            .filter(|p| p.node == node)
            .collect()
    }

    /// The nodes that own at least one probe, sorted.
    pub fn nodes_with_probes(&self) -> &[InlineNodeId] {
        &self.nodes_with_probes
    }

    /// Every probe, sorted by address (decodes the whole section).
    pub fn all(&self) -> Vec<&PseudoProbe> {
        let mut all: Vec<&PseudoProbe> = (0..self.groups.len() as u32)
            .flat_map(|g| self.group(g).iter())
            .collect();
        // Groups cover disjoint addresses: a stable sort keeps each address's order.
        all.sort_by_key(|p| p.address);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::SharedBytes;
    use crate::probe::ProbeSection;
    use crate::resident_pages::{resident_kb, temp_file};
    use std::sync::Arc;

    /// Records of `guid`s at `starts`: probe 1 (block) at +0, probe 2 (direct call) at +4,
    /// one inlinee with a block probe at +2.
    fn section(funcs: &[(u64, u64)]) -> Vec<u8> {
        let mut v = Vec::new();
        for &(guid, _) in funcs {
            v.extend(guid.to_le_bytes());
            v.extend([2, 1]);
            v.extend([1, 0x80, 0x00]); // index 1, delta 0, Block
            v.extend([2, 0x82, 0x04]); // index 2, delta +4, DirectCall
            v.push(2);
            v.extend((guid ^ 0xff).to_le_bytes());
            v.extend([1, 0]);
            v.extend([1, 0x80, 0x7e]); // index 1, delta -2, Block
        }
        v
    }

    #[test]
    fn answers_as_the_eager_decoder() {
        // 11 and 33 fold onto the same code (identical code folding).
        let funcs = [(11, 0x1000), (22, 0x2000), (33, 0x1000), (44, 0x9000)];
        let starts: HashMap<u64, u64> = funcs.iter().copied().collect();
        let bytes = section(&funcs);
        let eager = ProbeSection::decode(&bytes, &starts).unwrap();
        let store = ProbeStore::index(SectionBytes::Owned(Arc::from(&bytes[..])), starts).unwrap();
        assert_eq!(store.len(), eager.probes.len());
        assert_eq!(store.decoded(), 0);
        assert_eq!(store.tree().nodes(), eager.tree.nodes());
        // Folded records form one group; the others one each.
        assert_eq!(store.groups.len(), 3);
        for addr in 0xff0..0x9010 {
            assert_eq!(store.probes_at(addr), eager.probes_at(addr), "{addr:#x}");
            for floor in [0, 0x1000, 0x1003, 0x2000] {
                assert_eq!(
                    store.block_probe_at_or_before(addr, floor),
                    eager.block_probe_at_or_before(addr, floor)
                );
            }
        }
        let all: Vec<PseudoProbe> = store.all().into_iter().copied().collect();
        assert_eq!(all, eager.probes);
        for node in 0..eager.tree.nodes().len() as u32 {
            let want: Vec<&PseudoProbe> = eager.probes.iter().filter(|p| p.node == node).collect();
            assert_eq!(store.node_probes(node), want);
        }
        assert_eq!(store.nodes_with_probes().len(), eager.tree.nodes().len());
    }

    /// A section in a file mapping gives its pages back after each decode (and still
    /// answers as the eager decoder); a copy never does.
    #[test]
    fn a_mapped_section_gives_its_pages_back_once_decoded() {
        let funcs: Vec<(u64, u64)> = (0..2000u64).map(|k| (100 + k, 0x1000 + k * 0x20)).collect();
        let starts: HashMap<u64, u64> = funcs.iter().copied().collect();
        let bytes = section(&funcs);
        let eager = ProbeSection::decode(&bytes, &starts).unwrap();
        // The section starts mid-page, as in a binary.
        let mut file = vec![0u8; 5000];
        file.extend(&bytes);
        let path = temp_file("probe-release", &file);
        let map: SharedBytes = Arc::new(crate::binary::map_file(&path).unwrap());
        let kept = SectionBytes::keep(&(*map).as_ref()[5000..], Some(&map));
        assert!(matches!(kept, SectionBytes::Mapped(..)));
        let store = ProbeStore::index(kept, starts.clone())
            .unwrap()
            .releasing_decoded_pages(true);
        assert!(store.release_pages);
        // Read whole (as loading reads it), then one query: its group's records are
        // decoded and every page of the section goes.
        let sum: u64 = (*map).as_ref().iter().map(|&b| u64::from(b)).sum();
        assert!(sum > 0);
        assert!(
            resident_kb(&path).unwrap() >= 12,
            "{:?}",
            resident_kb(&path)
        );
        assert_eq!(
            store.probes_at(0x1000 + 7 * 0x20),
            eager.probes_at(0x1000 + 7 * 0x20)
        );
        assert!(resident_kb(&path).unwrap() <= 4, "{:?}", resident_kb(&path));
        for addr in (0x1000..0x1000 + 2000 * 0x20).step_by(2) {
            assert_eq!(store.probes_at(addr), eager.probes_at(addr), "{addr:#x}");
        }
        let copy = ProbeStore::index(SectionBytes::Owned(Arc::from(&bytes[..])), starts)
            .unwrap()
            .releasing_decoded_pages(true);
        assert!(
            !copy.release_pages,
            "a copy's pages would read back as zeros"
        );
        drop((store, map));
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn queries_decode_only_the_records_they_reach() {
        let funcs = [(11, 0x1000), (22, 0x2000), (33, 0x3000)];
        let starts: HashMap<u64, u64> = funcs.iter().copied().collect();
        let bytes = section(&funcs);
        let store = ProbeStore::index(SectionBytes::Owned(Arc::from(&bytes[..])), starts).unwrap();
        assert_eq!(store.probes_at(0x2004).len(), 1);
        assert_eq!(store.decoded(), 3);
        assert!(store.probes_at(0x2800).is_empty());
        assert_eq!(store.decoded(), 3);
    }

    #[test]
    fn a_truncated_section_fails_at_index_with_the_eager_error() {
        let funcs = [(11, 0x1000), (22, 0x2000)];
        let starts: HashMap<u64, u64> = funcs.iter().copied().collect();
        let bytes = section(&funcs);
        let cut = &bytes[..bytes.len() - 3];
        let eager = ProbeSection::decode(cut, &starts).unwrap_err();
        let lazy = ProbeStore::index(SectionBytes::Owned(Arc::from(cut)), starts).unwrap_err();
        assert_eq!((lazy.offset, lazy.what), (eager.offset, eager.what));
    }
}

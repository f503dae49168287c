//! `.pseudo_probe` decoding (MCPseudoProbeDecoder `buildAddress2ProbeMap`, LLVM 19):
//!
//! ```text
//! section    := func_body*                         (top level: no inline-site field)
//! func_body  := [ULEB site]  u64 GUID  ULEB NPROBES  ULEB NUM_INLINED
//!               probe*NPROBES  func_body*NUM_INLINED  (inlinees carry the site field)
//! probe      := ULEB index, u8 (addr_type << 7 | attr << 4 | type),
//!               addr_type 1: SLEB delta from the previous probe's address,
//!               addr_type 0: u64 (sentinel: GUID of the symbol whose address it stands for;
//!                            otherwise a legacy absolute address),
//!               [ULEB discriminator if attr & 4]
//! ```
//!
//! The running address carries across the whole section. At each top-level body (unless the
//! legacy absolute encoding was seen) it restarts at the address of the ELF symbol whose name
//! hashes to the body's GUID, when there is one. Sentinel probes (attr 2) only move the running
//! address; they are not recorded.

use std::collections::HashMap;

use super::inline_tree::{InlineNodeId, ProbeInlineTree};
use super::reader::{ByteReader, DecodeError};

/// Maximum inline nesting accepted (guards the recursion against hostile input).
pub const MAX_INLINE_DEPTH: usize = 512;

/// Probe attribute bit: reserved.
pub const ATTR_RESERVED: u8 = 1;
/// Probe attribute bit: sentinel (stands for a split function's start).
pub const ATTR_SENTINEL: u8 = 2;
/// Probe attribute bit: a discriminator follows.
pub const ATTR_HAS_DISCRIMINATOR: u8 = 4;

/// The probe's type (`PseudoProbeType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// A basic-block probe.
    Block,
    /// An indirect call site.
    IndirectCall,
    /// A direct call site.
    DirectCall,
    /// A type value LLVM 19 does not define (kept so decoding does not fail).
    Other(u8),
}

impl ProbeKind {
    fn from_bits(bits: u8) -> ProbeKind {
        match bits {
            0 => ProbeKind::Block,
            1 => ProbeKind::IndirectCall,
            2 => ProbeKind::DirectCall,
            other => ProbeKind::Other(other),
        }
    }

    /// True for direct and indirect call probes.
    pub fn is_call(self) -> bool {
        matches!(self, ProbeKind::IndirectCall | ProbeKind::DirectCall)
    }

    /// The name llvm-profgen prints (`Block`, `IndirectCall`, `DirectCall`).
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Block => "Block",
            ProbeKind::IndirectCall => "IndirectCall",
            ProbeKind::DirectCall => "DirectCall",
            ProbeKind::Other(_) => "Unknown",
        }
    }
}

/// One decoded probe (LLVM `MCDecodedPseudoProbe`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PseudoProbe {
    /// Code address the probe is attached to.
    pub address: u64,
    /// GUID of the function the probe belongs to.
    pub guid: u64,
    /// Probe index within that function (1 = entry block).
    pub index: u32,
    /// Block or call.
    pub kind: ProbeKind,
    /// Attribute bits (`ATTR_*`).
    pub attributes: u8,
    /// Probe discriminator (0 when absent).
    pub discriminator: u32,
    /// The inline-tree node the probe belongs to.
    pub node: InlineNodeId,
}

/// Decoded probes, sorted by address (decode order within one address), with their tree.
#[derive(Clone, Debug, Default)]
pub struct ProbeSection {
    /// Probes sorted by address.
    pub probes: Vec<PseudoProbe>,
    /// The inline forest.
    pub tree: ProbeInlineTree,
}

impl ProbeSection {
    /// Decodes `data`; `func_starts` maps symbol-name GUIDs to symbol addresses.
    pub fn decode(
        data: &[u8],
        func_starts: &HashMap<u64, u64>,
    ) -> Result<ProbeSection, DecodeError> {
        let mut d = Decoder {
            r: ByteReader::new(data),
            func_starts,
            last_addr: 0,
            addr_based: false,
            out: ProbeSection::default(),
        };
        while !d.r.is_empty() {
            d.body(None, 0)?;
        }
        let mut out = d.out;
        out.probes.sort_by_key(|p| p.address);
        out.tree.shrink();
        Ok(out)
    }

    /// The address of the last block probe at or before `addr` and at or after `floor`.
    pub fn block_probe_at_or_before(&self, addr: u64, floor: u64) -> Option<u64> {
        let hi = self.probes.partition_point(|p| p.address <= addr);
        self.probes[..hi]
            .iter()
            .rev()
            .take_while(|p| p.address >= floor)
            .find(|p| p.kind == ProbeKind::Block)
            .map(|p| p.address)
    }

    /// The probes at `addr`, in decode order.
    pub fn probes_at(&self, addr: u64) -> &[PseudoProbe] {
        let lo = self.probes.partition_point(|p| p.address < addr);
        let hi = lo + self.probes[lo..].partition_point(|p| p.address == addr);
        &self.probes[lo..hi]
    }
}

/// What decoding a top-level record depends on from the records before it: the address
/// the first probe's delta is taken from, and whether an absolute probe address was seen
/// (after which function starts no longer reset the delta base).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RecordState {
    pub(crate) last_addr: u64,
    pub(crate) addr_based: bool,
}

/// The `.pseudo_probe` decoder (LLVM `MCPseudoProbeDecoder::buildAddress2ProbeMap`), one
/// top-level record at a time.
pub(crate) struct Decoder<'a, 'm> {
    r: ByteReader<'a>,
    func_starts: &'m HashMap<u64, u64>,
    last_addr: u64,
    addr_based: bool,
    out: ProbeSection,
}

impl<'a, 'm> Decoder<'a, 'm> {
    /// A decoder at offset `offset` of `data` in `state`.
    pub(crate) fn at(
        data: &'a [u8],
        offset: usize,
        state: RecordState,
        func_starts: &'m HashMap<u64, u64>,
    ) -> Self {
        Decoder {
            r: ByteReader::at(data, offset),
            func_starts,
            last_addr: state.last_addr,
            addr_based: state.addr_based,
            out: ProbeSection::default(),
        }
    }

    /// The state the next record is decoded in.
    pub(crate) fn state(&self) -> RecordState {
        RecordState {
            last_addr: self.last_addr,
            addr_based: self.addr_based,
        }
    }

    /// The offset of the next record.
    pub(crate) fn offset(&self) -> usize {
        self.r.offset()
    }

    /// True when every record was decoded.
    pub(crate) fn is_empty(&self) -> bool {
        self.r.is_empty()
    }

    /// Decodes the next top-level record: its nodes join the tree, its probes (decode
    /// order, sentinels left out) the probe list.
    pub(crate) fn record(&mut self) -> Result<(), DecodeError> {
        self.body(None, 0)
    }

    /// Nodes created so far.
    pub(crate) fn node_count(&self) -> usize {
        self.out.tree.nodes().len()
    }

    /// Takes the probes decoded so far.
    pub(crate) fn take_probes(&mut self) -> Vec<PseudoProbe> {
        std::mem::take(&mut self.out.probes)
    }

    /// The inline forest built so far.
    pub(crate) fn into_tree(self) -> ProbeInlineTree {
        self.out.tree
    }

    fn body(&mut self, parent: Option<InlineNodeId>, depth: usize) -> Result<(), DecodeError> {
        if depth > MAX_INLINE_DEPTH {
            return Err(DecodeError {
                offset: self.r.offset(),
                what: "inline tree deeper than the limit",
            });
        }
        let site = match parent {
            None => 0,
            Some(_) => self.r.uleb32("inline site probe index")?,
        };
        let guid = self.r.u64("function GUID")?;
        let node = match parent {
            None => {
                if !self.addr_based {
                    if let Some(&start) = self.func_starts.get(&guid) {
                        // DenseMap::lookup returns 0 for "absent"; an address 0 never resets.
                        if start != 0 {
                            self.last_addr = start;
                        }
                    }
                }
                self.out.tree.add_top_level(guid)
            }
            Some(p) => self.out.tree.child(p, guid, site),
        };
        let nprobes = self.r.uleb32("probe count")?;
        let ninlined = self.r.uleb32("inlinee count")?;
        for _ in 0..nprobes {
            let index = self.r.uleb32("probe index")?;
            let value = self.r.u8("probe type and attributes")?;
            let kind = ProbeKind::from_bits(value & 0xf);
            let attributes = (value & 0x70) >> 4;
            let address = if value & 0x80 != 0 {
                let delta = self.r.sleb("probe address delta")?;
                self.last_addr.wrapping_add(delta as u64)
            } else {
                let raw = self.r.u64("probe address")?;
                if attributes & ATTR_SENTINEL != 0 {
                    match self.func_starts.get(&raw) {
                        Some(&start) if start != 0 => start,
                        _ => raw,
                    }
                } else {
                    self.addr_based = true;
                    raw
                }
            };
            let discriminator = if attributes & ATTR_HAS_DISCRIMINATOR != 0 {
                self.r.uleb32("probe discriminator")?
            } else {
                0
            };
            if attributes & ATTR_SENTINEL == 0 {
                self.out.probes.push(PseudoProbe {
                    address,
                    guid,
                    index,
                    kind,
                    attributes,
                    discriminator,
                    node,
                });
            }
            self.last_addr = address;
        }
        for _ in 0..ninlined {
            self.body(Some(node), depth + 1)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-assembled section: `main` (symbol at 0x1000) with probes 1 (block, +0x4) and
    /// 2 (direct call, +0x10), and `foo` inlined at call site 2 with probe 1 (block, +0x2,
    /// discriminator 7); then `bar.cold`'s body split off with a sentinel.
    #[rustfmt::skip]
    fn section(main: u64, foo: u64, bar: u64, bar_cold: u64) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend(main.to_le_bytes());        // top-level GUID
        v.extend([2, 1]);                    // 2 probes, 1 inlinee
        v.extend([1, 0x80, 0x04]);           // index 1, delta, Block, +4
        v.extend([2, 0x82, 0x0c]);           // index 2, delta, DirectCall, +12 -> 0x1010
        v.push(2);                           // inline site: probe 2
        v.extend(foo.to_le_bytes());         // inlinee GUID
        v.extend([1, 0]);                    // 1 probe, 0 inlinees
        v.extend([1, 0xc0, 0x02, 7]);        // index 1, delta, attr HasDiscriminator, +2, disc 7
        v.extend(bar.to_le_bytes());         // second top-level body
        v.extend([2, 0]);                    // sentinel + 1 probe
        v.extend([0, 0x20]);                 // index 0, absolute, attr Sentinel, Block
        v.extend(bar_cold.to_le_bytes());    //   GUID of symbol "bar.cold"
        v.extend([3, 0x80, 0x7f]);           // index 3, delta -1 from bar.cold's start
        v
    }

    #[test]
    fn decodes_deltas_inline_sites_discriminators_and_sentinels() {
        use crate::guid::function_guid as g;
        let starts: HashMap<u64, u64> = [
            (g("main"), 0x1000),
            (g("bar"), 0x2000),
            (g("bar.cold"), 0x3000),
        ]
        .into_iter()
        .collect();
        let bytes = section(g("main"), g("foo"), g("bar"), g("bar.cold"));
        let s = ProbeSection::decode(&bytes, &starts).unwrap();
        let got: Vec<(u64, u64, u32, ProbeKind, u8, u32)> = s
            .probes
            .iter()
            .map(|p| {
                (
                    p.address,
                    p.guid,
                    p.index,
                    p.kind,
                    p.attributes,
                    p.discriminator,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (0x1004, g("main"), 1, ProbeKind::Block, 0, 0),
                (0x1010, g("main"), 2, ProbeKind::DirectCall, 0, 0),
                (0x1012, g("foo"), 1, ProbeKind::Block, 4, 7),
                (0x2fff, g("bar"), 3, ProbeKind::Block, 0, 0),
            ]
        );
        let foo_node = s.tree.node(s.probes[2].node);
        assert_eq!((foo_node.guid, foo_node.site), (g("foo"), 2));
        assert_eq!(s.tree.node(foo_node.parent.unwrap()).guid, g("main"));
        assert_eq!(s.probes_at(0x1010).len(), 1);
        assert!(s.probes_at(0x1011).is_empty());
    }

    #[test]
    fn block_probe_anchor_skips_call_probes_and_stops_at_the_floor() {
        use crate::guid::function_guid as g;
        let starts: HashMap<u64, u64> = [
            (g("main"), 0x1000),
            (g("bar"), 0x2000),
            (g("bar.cold"), 0x3000),
        ]
        .into_iter()
        .collect();
        let bytes = section(g("main"), g("foo"), g("bar"), g("bar.cold"));
        let s = ProbeSection::decode(&bytes, &starts).unwrap();
        // 0x1011: the call probe at 0x1010 is skipped, main's block probe 0x1004 found.
        assert_eq!(s.block_probe_at_or_before(0x1011, 0x1000), Some(0x1004));
        assert_eq!(s.block_probe_at_or_before(0x1012, 0x1000), Some(0x1012));
        assert_eq!(s.block_probe_at_or_before(0x1003, 0x1000), None);
        // A floor above the probe (another function's start) stops the search.
        assert_eq!(s.block_probe_at_or_before(0x1011, 0x1005), None);
    }

    #[test]
    fn truncation_reports_offset_and_field() {
        use crate::guid::function_guid as g;
        let bytes = section(g("main"), g("foo"), g("bar"), g("bar.cold"));
        let starts = HashMap::new();
        // Cut inside the inlinee's GUID (offset 8+2+3+3+1 = 17).
        assert_eq!(
            ProbeSection::decode(&bytes[..20], &starts).unwrap_err(),
            DecodeError {
                offset: 17,
                what: "function GUID"
            }
        );
        // Cut inside a probe's delta.
        let mut b = bytes[..12].to_vec();
        b.push(0x80);
        assert_eq!(
            ProbeSection::decode(&b, &starts).unwrap_err(),
            DecodeError {
                offset: 12,
                what: "probe address delta"
            }
        );
    }
}

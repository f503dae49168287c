//! [`DwarfInfo`]: what pgo-agent needs from DWARF, extracted once at load time so lookups need
//! no parsing:
//!
//! * subprograms with names and ranges (llvm-profgen's `loadSymbolsFromDWARFUnit`);
//! * per unit, the subroutine DIEs (`DW_TAG_subprogram`, `DW_TAG_inlined_subroutine`) with
//!   their name, `DW_AT_decl_line`, `DW_AT_call_line`, `DW_AT_GNU_discriminator` and parent,
//!   plus an address → deepest-DIE map (LLVM `DWARFUnit::updateAddressDieMap`);
//! * per unit, the line table's sequences (address, line, discriminator).
//!
//! [`DwarfInfo::inlining_info`] then reproduces LLVM 19 `DWARFContext::getInliningInfoForAddress`
//! with linkage names: innermost frame first; the innermost frame's line and discriminator come
//! from the line table row covering the address, each outer frame's from the call site
//! attributes of the frame inside it; each frame's start line is its subprogram's decl line.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use gimli::{AttributeValue, DwAt, EndianSlice, RunTimeEndian, UnitOffset};
use object::{Object, ObjectSection};

use super::interval::{IntervalMap, IntervalMapBuilder};
use crate::error::SymbolizerError;

type Slice<'a> = EndianSlice<'a, RunTimeEndian>;

/// Upper bound on the number of DIEs followed through `DW_AT_abstract_origin` /
/// `DW_AT_specification` when resolving one attribute (guards against reference cycles).
const MAX_REFERENCE_HOPS: usize = 16;

/// Most frames [`DwarfInfo::inlining_info`] returns for one address (innermost first). Real
/// inline chains are a few dozen deep; a crafted DIE tree nesting thousands of inlined
/// subroutines over the same code would otherwise cost depth × instructions frames in
/// the per-instruction frame cache.
pub const MAX_INLINE_DEPTH: usize = 1024;

/// Largest uncompressed size a compressed debug section may claim per compressed byte
/// (zlib's ratio cannot pass 1032:1, zstd's stays below 2^15:1 per 128 KiB block of one
/// repeated byte): the size drives one allocation before any data is decompressed.
pub const MAX_DECOMPRESSION_RATIO: u64 = 1 << 15;

/// Largest uncompressed debug section.
pub const MAX_DEBUG_SECTION_BYTES: u64 = 4 << 30;

/// The (decompressed) contents of a debug section, refusing compressed sections whose
/// claimed uncompressed size exceeds [`MAX_DECOMPRESSION_RATIO`] times their compressed
/// size or [`MAX_DEBUG_SECTION_BYTES`].
pub(crate) fn debug_section_data<'data>(
    section: &impl ObjectSection<'data>,
    path: &Path,
) -> Result<Cow<'data, [u8]>, SymbolizerError> {
    let name = || section.name().unwrap_or("?").to_string();
    let error = |what: String| SymbolizerError::SectionData {
        path: path.to_path_buf(),
        section: name(),
        what,
    };
    let compressed = section
        .compressed_data()
        .map_err(|e| error(e.to_string()))?;
    if compressed.format != object::CompressionFormat::None {
        let max = (compressed.data.len() as u64)
            .saturating_mul(MAX_DECOMPRESSION_RATIO)
            .min(MAX_DEBUG_SECTION_BYTES);
        if compressed.uncompressed_size > max {
            return Err(error(format!(
                "claims {} uncompressed bytes from {} compressed, over the limit of {max}",
                compressed.uncompressed_size,
                compressed.data.len()
            )));
        }
    }
    section
        .uncompressed_data()
        .map_err(|e| error(e.to_string()))
}

/// One frame of [`DwarfInfo::inlining_info`] (LLVM `DILineInfo`, reduced).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawFrame {
    /// Interned function name ([`DwarfInfo::name`]); `None` is LLVM's `<invalid>`.
    pub name: Option<u32>,
    /// Source line (0 when unknown).
    pub line: u64,
    /// `DW_AT_decl_line` of the frame's subprogram (LLVM `StartLine`).
    pub start_line: u64,
    /// DWARF discriminator of the line row or call site.
    pub discriminator: u32,
}

#[derive(Clone, Copy, Debug)]
struct Subroutine {
    name: Option<u32>,
    decl_line: u64,
    call_line: u64,
    call_discriminator: u32,
    parent: Option<u32>,
    is_subprogram: bool,
}

#[derive(Clone, Copy, Debug)]
struct Row {
    address: u64,
    line: u64,
    discriminator: u32,
}

#[derive(Clone, Debug)]
struct Sequence {
    low: u64,
    high: u64,
    rows: Vec<Row>,
}

#[derive(Clone, Debug, Default)]
struct UnitInfo {
    nodes: Vec<Subroutine>,
    die_map: IntervalMap<u32>,
    /// Sorted by `high` (LLVM `Sequence::orderByHighPC`).
    sequences: Vec<Sequence>,
}

/// DWARF facts of one binary; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct DwarfInfo {
    subprograms: Vec<(String, Vec<(u64, u64)>)>,
    names: Vec<String>,
    units: Vec<UnitInfo>,
    unit_map: IntervalMap<u32>,
}

impl DwarfInfo {
    /// Extracts everything from the DWARF sections of `file` (compressed sections are
    /// decompressed). A binary without DWARF gives an empty `DwarfInfo`.
    pub fn load<'data>(
        file: &impl Object<'data>,
        path: &Path,
    ) -> Result<DwarfInfo, SymbolizerError> {
        let endian = if file.is_little_endian() {
            RunTimeEndian::Little
        } else {
            RunTimeEndian::Big
        };
        let mut data: HashMap<gimli::SectionId, Cow<'data, [u8]>> = HashMap::new();
        for id in ALL_SECTIONS {
            if let Some(section) = file.section_by_name(id.name()) {
                let bytes = debug_section_data(&section, path)?;
                data.insert(id, bytes);
            }
        }
        let dwarf = gimli::Dwarf::load(|id| -> Result<Slice<'_>, gimli::Error> {
            Ok(EndianSlice::new(
                data.get(&id).map_or(&[][..], |c| &c[..]),
                endian,
            ))
        })
        .map_err(|e| dwarf_error(path, e, None))?;
        Loader {
            dwarf: &dwarf,
            path,
            units: Vec::new(),
            names: HashMap::new(),
            info: DwarfInfo::default(),
        }
        .run()
    }

    /// Subprograms in DIE order: (linkage name else short name, ranges), including ones with
    /// empty range lists (callers filter).
    pub fn subprograms(&self) -> &[(String, Vec<(u64, u64)>)] {
        &self.subprograms
    }

    /// Moves the subprogram list out (to build the function table without copying).
    pub fn take_subprograms(&mut self) -> Vec<(String, Vec<(u64, u64)>)> {
        std::mem::take(&mut self.subprograms)
    }

    /// The interned name `id`.
    pub fn name(&self, id: u32) -> &str {
        self.names.get(id as usize).map_or("", String::as_str)
    }

    /// True when the binary has no compilation unit with code.
    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }

    /// LLVM `getInliningInfoForAddress`: frames innermost first; empty when no unit or no
    /// subroutine DIE covers `addr` (LLVM then returns one nameless frame, which llvm-profgen
    /// discards).
    pub fn inlining_info(&self, addr: u64) -> Vec<RawFrame> {
        let Some(unit) = self
            .unit_map
            .get(addr)
            .and_then(|u| self.units.get(u as usize))
        else {
            return Vec::new();
        };
        let Some(mut node_id) = unit.die_map.get(addr) else {
            return Vec::new();
        };
        let mut frames = Vec::new();
        let mut inner: Option<&Subroutine> = None;
        loop {
            let node = &unit.nodes[node_id as usize];
            let (line, discriminator) = match inner {
                None => unit
                    .line_at(addr)
                    .map_or((0, 0), |r| (r.line, r.discriminator)),
                Some(callee) => (callee.call_line, callee.call_discriminator),
            };
            frames.push(RawFrame {
                name: node.name,
                line,
                start_line: node.decl_line,
                discriminator,
            });
            if node.is_subprogram || frames.len() >= MAX_INLINE_DEPTH {
                break;
            }
            match node.parent {
                Some(p) => {
                    inner = Some(node);
                    node_id = p;
                }
                None => break,
            }
        }
        frames
    }
}

impl UnitInfo {
    /// LLVM `LineTable::lookupAddress`: the sequence whose `[low, high)` holds `addr` (first by
    /// high PC), then the last row at or below `addr`.
    fn line_at(&self, addr: u64) -> Option<Row> {
        let i = self.sequences.partition_point(|s| s.high <= addr);
        let seq = self.sequences.get(i)?;
        if seq.low > addr {
            return None;
        }
        let j = seq
            .rows
            .partition_point(|r| r.address <= addr)
            .checked_sub(1)?;
        Some(seq.rows[j])
    }
}

const ALL_SECTIONS: [gimli::SectionId; 14] = [
    gimli::SectionId::DebugAbbrev,
    gimli::SectionId::DebugAddr,
    gimli::SectionId::DebugAranges,
    gimli::SectionId::DebugInfo,
    gimli::SectionId::DebugLine,
    gimli::SectionId::DebugLineStr,
    gimli::SectionId::DebugLoc,
    gimli::SectionId::DebugLocLists,
    gimli::SectionId::DebugRanges,
    gimli::SectionId::DebugRngLists,
    gimli::SectionId::DebugStr,
    gimli::SectionId::DebugStrOffsets,
    gimli::SectionId::DebugTypes,
    gimli::SectionId::DebugMacro,
];

fn dwarf_error(path: &Path, e: gimli::Error, unit_offset: Option<usize>) -> SymbolizerError {
    let what = match unit_offset {
        Some(off) => format!("{e} (unit at .debug_info offset {off:#x})"),
        None => e.to_string(),
    };
    SymbolizerError::Dwarf {
        path: path.to_path_buf(),
        what,
    }
}

/// A subroutine DIE found in pass 1: offset, parent subroutine, is-subprogram, ranges.
type PendingDie = (UnitOffset, Option<u32>, bool, Vec<(u64, u64)>);

struct Loader<'a, 'd> {
    dwarf: &'a gimli::Dwarf<Slice<'d>>,
    path: &'a Path,
    units: Vec<gimli::Unit<Slice<'d>>>,
    names: HashMap<String, u32>,
    info: DwarfInfo,
}

impl<'a, 'd> Loader<'a, 'd> {
    fn run(mut self) -> Result<DwarfInfo, SymbolizerError> {
        let mut headers = self.dwarf.units();
        loop {
            let header = match headers.next() {
                Ok(Some(h)) => h,
                Ok(None) => break,
                Err(e) => return Err(dwarf_error(self.path, e, None)),
            };
            let offset = header.offset().0;
            let unit = self
                .dwarf
                .unit(header)
                .map_err(|e| dwarf_error(self.path, e, Some(offset)))?;
            self.units.push(unit);
        }
        let mut unit_map = IntervalMapBuilder::default();
        let mut unit_ranges: Vec<Vec<(u64, u64)>> = Vec::with_capacity(self.units.len());
        for index in 0..self.units.len() {
            let offset = unit_section_offset(&self.units[index]);
            let (info, ranges) = self
                .load_unit(index)
                .map_err(|e| dwarf_error(self.path, e, Some(offset)))?;
            self.info.units.push(info);
            unit_ranges.push(ranges);
        }
        // DWARFDebugAranges: of overlapping units the lowest offset wins, so insert last first.
        for (index, ranges) in unit_ranges.iter().enumerate().rev() {
            for &(lo, hi) in ranges {
                unit_map.insert(lo, hi, index as u32);
            }
        }
        self.info.unit_map = unit_map.finish();
        let mut names: Vec<(String, u32)> = self.names.into_iter().collect();
        names.sort_by_key(|(_, id)| *id);
        self.info.names = names.into_iter().map(|(n, _)| n).collect();
        Ok(self.info)
    }

    fn intern(&mut self, name: String) -> u32 {
        let next = self.names.len() as u32;
        *self.names.entry(name).or_insert(next)
    }

    /// Returns the unit's info and its address ranges (from the unit DIE, else from its
    /// subroutines, as LLVM `DWARFUnit::collectAddressRanges` falls back to the DIE tree).
    fn load_unit(&mut self, index: usize) -> Result<(UnitInfo, Vec<(u64, u64)>), gimli::Error> {
        let dwarf = self.dwarf;
        let unit = &self.units[index];
        let mut info = UnitInfo::default();
        let mut die_map = IntervalMapBuilder::default();
        let mut pending: Vec<PendingDie> = Vec::new();
        {
            // Pass 1: walk the tree, recording subroutine DIEs with their parents and ranges.
            let mut cursor = unit.entries();
            let mut ancestors: Vec<(isize, Option<u32>)> = Vec::new();
            while let Some(entry) = cursor.next_dfs()? {
                let depth = entry.depth();
                while ancestors.last().is_some_and(|(d, _)| *d >= depth) {
                    ancestors.pop();
                }
                let parent = ancestors.last().and_then(|(_, n)| *n);
                let tag = entry.tag();
                let is_subprogram = tag == gimli::DW_TAG_subprogram;
                if is_subprogram || tag == gimli::DW_TAG_inlined_subroutine {
                    let mut ranges = Vec::new();
                    // LLVM skips DIEs whose ranges cannot be read; so do we.
                    if let Ok(mut iter) = dwarf.die_ranges(unit, entry) {
                        while let Ok(Some(r)) = iter.next() {
                            ranges.push((r.begin, r.end));
                        }
                    }
                    let id = pending.len() as u32;
                    pending.push((entry.offset(), parent, is_subprogram, ranges));
                    ancestors.push((depth, Some(id)));
                } else {
                    ancestors.push((depth, parent));
                }
            }
        }
        // Pass 2: resolve names and lines (may follow references into other units).
        for (id, (offset, parent, is_subprogram, ranges)) in pending.into_iter().enumerate() {
            let linkage = self.find_string(
                index,
                offset,
                &[gimli::DW_AT_MIPS_linkage_name, gimli::DW_AT_linkage_name],
            );
            let name = match linkage {
                Some(n) => Some(n),
                None => self.find_string(index, offset, &[gimli::DW_AT_name]),
            };
            let decl_line = self
                .find_udata(index, offset, gimli::DW_AT_decl_line)
                .unwrap_or(0);
            let entry = self.units[index].entry(offset)?;
            let call_line = entry
                .attr(gimli::DW_AT_call_line)
                .and_then(|a| a.udata_value())
                .unwrap_or(0);
            let call_discriminator = entry
                .attr(gimli::DW_AT_GNU_discriminator)
                .and_then(|a| a.udata_value())
                .unwrap_or(0) as u32;
            if is_subprogram {
                if let Some(n) = &name {
                    self.info.subprograms.push((n.clone(), ranges.clone()));
                }
            }
            for &(lo, hi) in &ranges {
                die_map.insert(lo, hi, id as u32);
            }
            let name = name.map(|n| self.intern(n));
            info.nodes.push(Subroutine {
                name,
                decl_line,
                call_line,
                call_discriminator,
                parent,
                is_subprogram,
            });
        }
        info.die_map = die_map.finish();
        info.sequences = self.line_sequences(index)?;

        let mut unit_ranges = Vec::new();
        if let Ok(mut iter) = dwarf.unit_ranges(&self.units[index]) {
            while let Ok(Some(r)) = iter.next() {
                if r.begin < r.end {
                    unit_ranges.push((r.begin, r.end));
                }
            }
        }
        if unit_ranges.is_empty() {
            unit_ranges = info
                .die_map
                .entries()
                .iter()
                .map(|(lo, hi, _)| (*lo, *hi))
                .collect();
        }
        Ok((info, unit_ranges))
    }

    fn line_sequences(&self, index: usize) -> Result<Vec<Sequence>, gimli::Error> {
        let unit = &self.units[index];
        let Some(program) = unit.line_program.clone() else {
            return Ok(Vec::new());
        };
        let mut rows = program.rows();
        let mut sequences = Vec::new();
        let mut current: Vec<Row> = Vec::new();
        while let Some((_, row)) = rows.next_row()? {
            if row.end_sequence() {
                if let Some(first) = current.first() {
                    if first.address < row.address() {
                        sequences.push(Sequence {
                            low: first.address,
                            high: row.address(),
                            rows: std::mem::take(&mut current),
                        });
                    }
                }
                current.clear();
                continue;
            }
            current.push(Row {
                address: row.address(),
                line: row.line().map_or(0, |l| l.get()),
                discriminator: row.discriminator() as u32,
            });
        }
        sequences.sort_by_key(|s| s.high);
        Ok(sequences)
    }

    /// LLVM `DWARFDie::findRecursively`: the first of `attrs` on the DIE, else on the DIEs it
    /// references through `DW_AT_abstract_origin` / `DW_AT_specification` (depth first).
    fn find_recursive(
        &self,
        unit: usize,
        offset: UnitOffset,
        attrs: &[DwAt],
    ) -> Option<(usize, AttributeValue<Slice<'d>>)> {
        let mut work = vec![(unit, offset)];
        let mut seen = vec![(unit, offset)];
        while let Some((u, off)) = work.pop() {
            if seen.len() > MAX_REFERENCE_HOPS {
                return None;
            }
            let Ok(entry) = self.units[u].entry(off) else {
                continue;
            };
            for attr in attrs {
                if let Some(value) = entry.attr_value(*attr) {
                    return Some((u, value));
                }
            }
            for link in [gimli::DW_AT_abstract_origin, gimli::DW_AT_specification] {
                if let Some(target) = entry.attr_value(link).and_then(|v| self.resolve_ref(u, v)) {
                    if !seen.contains(&target) {
                        seen.push(target);
                        work.push(target);
                    }
                }
            }
        }
        None
    }

    fn resolve_ref(
        &self,
        unit: usize,
        value: AttributeValue<Slice<'d>>,
    ) -> Option<(usize, UnitOffset)> {
        match value {
            AttributeValue::UnitRef(off) => Some((unit, off)),
            AttributeValue::DebugInfoRef(dio) => {
                let i = self
                    .units
                    .partition_point(|u| unit_section_offset(u) <= dio.0)
                    .checked_sub(1)?;
                let off = dio.to_unit_offset(&self.units[i].header)?;
                Some((i, off))
            }
            _ => None,
        }
    }

    fn find_string(&self, unit: usize, offset: UnitOffset, attrs: &[DwAt]) -> Option<String> {
        let (u, value) = self.find_recursive(unit, offset, attrs)?;
        let s = self.dwarf.attr_string(&self.units[u], value).ok()?;
        Some(s.to_string_lossy().into_owned())
    }

    fn find_udata(&self, unit: usize, offset: UnitOffset, attr: DwAt) -> Option<u64> {
        let (_, value) = self.find_recursive(unit, offset, &[attr])?;
        value.udata_value()
    }
}

fn unit_section_offset(unit: &gimli::Unit<Slice<'_>>) -> usize {
    unit.header.offset().0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A subprogram with `depth - 1` inlined subroutines nested over [0x1000, 0x1010).
    fn nested(depth: u32) -> DwarfInfo {
        let nodes = (0..depth)
            .map(|i| Subroutine {
                name: Some(0),
                decl_line: 1,
                call_line: 10 + u64::from(i),
                call_discriminator: 0,
                parent: i.checked_sub(1),
                is_subprogram: i == 0,
            })
            .collect();
        let mut die_map = IntervalMapBuilder::default();
        die_map.insert(0x1000, 0x1010, depth - 1);
        let mut unit_map = IntervalMapBuilder::default();
        unit_map.insert(0x1000, 0x1010, 0);
        DwarfInfo {
            subprograms: Vec::new(),
            names: vec!["f".into()],
            units: vec![UnitInfo {
                nodes,
                die_map: die_map.finish(),
                sequences: Vec::new(),
            }],
            unit_map: unit_map.finish(),
        }
    }

    #[test]
    fn inline_chain_reaches_the_subprogram() {
        let frames = nested(3).inlining_info(0x1008);
        // Innermost first: its line from the line table (none: 0), then each caller's
        // line is its callee's call line.
        let lines: Vec<u64> = frames.iter().map(|f| f.line).collect();
        assert_eq!(lines, vec![0, 12, 11]);
    }

    /// A minimal x86-64 ELF whose only section is a zlib-compressed `.debug_info` (8 bytes
    /// of data) claiming `claimed` uncompressed bytes.
    fn compressed_debug_info(claimed: u64) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
        b.extend(2u16.to_le_bytes()); // e_type: EXEC
        b.extend(62u16.to_le_bytes()); // e_machine: x86-64
        b.extend(1u32.to_le_bytes()); // e_version
        b.extend(0u64.to_le_bytes()); // e_entry
        b.extend(0u64.to_le_bytes()); // e_phoff
        b.extend(120u64.to_le_bytes()); // e_shoff
        b.extend(0u32.to_le_bytes()); // e_flags
        for h in [64u16, 56, 0, 64, 3, 2] {
            // e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx
            b.extend(h.to_le_bytes());
        }
        // 64: Elf64_Chdr { ch_type: ELFCOMPRESS_ZLIB, ch_size, ch_addralign } + 8 bytes.
        b.extend(1u32.to_le_bytes());
        b.extend(0u32.to_le_bytes());
        b.extend(claimed.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend([0x78, 0x9c, 0, 0, 0, 0, 0, 0]);
        // 96: section names.
        b.extend(b"\0.debug_info\0.shstrtab\0\0");
        assert_eq!(b.len(), 120);
        let section = |b: &mut Vec<u8>, name: u32, ty: u32, flags: u64, offset: u64, size: u64| {
            b.extend(name.to_le_bytes());
            b.extend(ty.to_le_bytes());
            b.extend(flags.to_le_bytes());
            b.extend(0u64.to_le_bytes()); // sh_addr
            b.extend(offset.to_le_bytes());
            b.extend(size.to_le_bytes());
            b.extend([0u8; 8]); // sh_link, sh_info
            b.extend(1u64.to_le_bytes()); // sh_addralign
            b.extend(0u64.to_le_bytes()); // sh_entsize
        };
        section(&mut b, 0, 0, 0, 0, 0);
        section(&mut b, 1, 1, 0x800, 64, 32); // PROGBITS, SHF_COMPRESSED
        section(&mut b, 13, 3, 0, 96, 23); // STRTAB
        b
    }

    /// Fuzz crash (elf target): a compressed `.debug_info` claiming 2^48 uncompressed bytes
    /// made object reserve them before decompressing anything.
    #[test]
    fn compressed_section_claiming_too_much_is_refused() {
        let bytes = compressed_debug_info(1 << 48);
        let file = object::File::parse(&*bytes).unwrap();
        let err = DwarfInfo::load(&file, Path::new("bomb.elf")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bomb.elf: section .debug_info: cannot read contents: claims 281474976710656 \
             uncompressed bytes from 8 compressed, over the limit of 262144"
        );
        // Within the ratio, the (here corrupt) data is decompressed and fails on its own.
        let bytes = compressed_debug_info(1000);
        let file = object::File::parse(&*bytes).unwrap();
        let err = DwarfInfo::load(&file, Path::new("ok.elf")).unwrap_err();
        assert!(!err.to_string().contains("claims"), "{err}");
    }

    /// A crafted DIE tree 100000 inlined subroutines deep: the chain stops at the limit.
    #[test]
    fn inline_chain_is_bounded() {
        let frames = nested(100_000).inlining_info(0x1008);
        assert_eq!(frames.len(), MAX_INLINE_DEPTH);
        assert_eq!(frames[1].line, 10 + 99_999);
    }
}

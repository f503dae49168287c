//! [`MemProfDwarf`]: the DWARF lookups MemProf symbolization needs, extracted once at load.
//! It reproduces what LLVM's `RawMemProfReader` gets from `symbolizeInlinedCode` with linkage
//! names and raw file names: for an address, its inline frames innermost first, each with
//! linkage name, line, **column**, the subprogram's declaration line and the file name. The
//! innermost frame's line/column/file come from the line table row covering the address; each
//! outer frame's from the `DW_AT_call_line` / `DW_AT_call_column` / `DW_AT_call_file` of the
//! frame inside it (LLVM `DWARFContext::getInliningInfoForAddress`).
//!
//! The sample-profile side ([`crate::dwarf::DwarfInfo`]) needs discriminators but no columns or
//! files; MemProf needs columns and files but no discriminators, hence this separate loader.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use gimli::{AttributeValue, DwAt, EndianSlice, RunTimeEndian, UnitOffset};
use object::Object;

use crate::dwarf::interval::{IntervalMap, IntervalMapBuilder};
use crate::error::SymbolizerError;

type Slice<'a> = EndianSlice<'a, RunTimeEndian>;

/// Upper bound on references followed through `DW_AT_abstract_origin`/`DW_AT_specification`.
const MAX_REFERENCE_HOPS: usize = 16;

/// Upper bound on the inline depth of one address (guards malformed parent chains).
const MAX_INLINE_DEPTH: usize = 256;

/// One inline frame of an address (LLVM `DILineInfo`, reduced).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DwarfFrame {
    /// Linkage name, else short name; `None` when the DIE has neither (LLVM `<invalid>`).
    pub name: Option<String>,
    /// Source line (0 when unknown).
    pub line: u32,
    /// Source column (0 when unknown).
    pub column: u32,
    /// `DW_AT_decl_line` of the frame's subprogram.
    pub start_line: u32,
    /// File of `line` as the line table or call site names it (may be empty).
    pub file: String,
}

#[derive(Clone, Copy, Debug)]
struct Node {
    name: Option<u32>,
    decl_line: u32,
    call_line: u32,
    call_column: u32,
    call_file: Option<u32>,
    parent: Option<u32>,
    is_subprogram: bool,
}

#[derive(Clone, Copy, Debug)]
struct Row {
    address: u64,
    line: u32,
    column: u32,
    file: Option<u32>,
}

#[derive(Clone, Debug)]
struct Sequence {
    low: u64,
    high: u64,
    rows: Vec<Row>,
}

#[derive(Clone, Debug, Default)]
struct Unit {
    nodes: Vec<Node>,
    die_map: IntervalMap<u32>,
    sequences: Vec<Sequence>,
}

/// DWARF facts for MemProf symbolization; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct MemProfDwarf {
    strings: Vec<String>,
    units: Vec<Unit>,
    unit_map: IntervalMap<u32>,
}

impl MemProfDwarf {
    /// Loads the DWARF of `file` (compressed sections are decompressed); a binary without
    /// DWARF gives an empty table (every lookup then returns no frame).
    pub fn load<'data>(file: &impl Object<'data>, path: &Path) -> Result<Self, SymbolizerError> {
        let endian = if file.is_little_endian() {
            RunTimeEndian::Little
        } else {
            RunTimeEndian::Big
        };
        let mut data: HashMap<gimli::SectionId, Cow<'data, [u8]>> = HashMap::new();
        for id in SECTIONS {
            if let Some(section) = file.section_by_name(id.name()) {
                let bytes = crate::dwarf::info::debug_section_data(&section, path)?;
                data.insert(id, bytes);
            }
        }
        let dwarf = gimli::Dwarf::load(|id| -> Result<Slice<'_>, gimli::Error> {
            Ok(EndianSlice::new(
                data.get(&id).map_or(&[][..], |c| &c[..]),
                endian,
            ))
        })
        .map_err(|e| dwarf_error(path, e))?;
        let mut loader = Loader {
            dwarf: &dwarf,
            units: Vec::new(),
            interned: HashMap::new(),
            out: MemProfDwarf::default(),
        };
        loader.run().map_err(|e| dwarf_error(path, e))?;
        Ok(loader.out)
    }

    /// The inline frames at `addr`, innermost first; empty when no subprogram covers it.
    pub fn frames(&self, addr: u64) -> Vec<DwarfFrame> {
        let Some(unit) = self
            .unit_map
            .get(addr)
            .and_then(|u| self.units.get(u as usize))
        else {
            return Vec::new();
        };
        let Some(mut id) = unit.die_map.get(addr) else {
            return Vec::new();
        };
        let row = unit.row_at(addr);
        let mut out = Vec::new();
        let mut inner: Option<Node> = None;
        while out.len() < MAX_INLINE_DEPTH {
            let Some(node) = unit.nodes.get(id as usize).copied() else {
                break;
            };
            let (line, column, file) = match inner {
                None => row.map_or((0, 0, None), |r| (r.line, r.column, r.file)),
                Some(callee) => (callee.call_line, callee.call_column, callee.call_file),
            };
            out.push(DwarfFrame {
                name: node.name.map(|n| self.string(n).to_string()),
                line,
                column,
                start_line: node.decl_line,
                file: file.map(|f| self.string(f).to_string()).unwrap_or_default(),
            });
            match (node.is_subprogram, node.parent) {
                (false, Some(p)) => {
                    inner = Some(node);
                    id = p;
                }
                _ => break,
            }
        }
        out
    }

    fn string(&self, id: u32) -> &str {
        self.strings.get(id as usize).map_or("", String::as_str)
    }
}

impl Unit {
    fn row_at(&self, addr: u64) -> Option<Row> {
        let i = self.sequences.partition_point(|s| s.high <= addr);
        let seq = self.sequences.get(i)?;
        if seq.low > addr {
            return None;
        }
        let j = seq
            .rows
            .partition_point(|r| r.address <= addr)
            .checked_sub(1)?;
        seq.rows.get(j).copied()
    }
}

const SECTIONS: [gimli::SectionId; 12] = [
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
];

fn dwarf_error(path: &Path, e: gimli::Error) -> SymbolizerError {
    SymbolizerError::Dwarf {
        path: path.to_path_buf(),
        what: e.to_string(),
    }
}

struct Loader<'a, 'd> {
    dwarf: &'a gimli::Dwarf<Slice<'d>>,
    units: Vec<gimli::Unit<Slice<'d>>>,
    interned: HashMap<String, u32>,
    out: MemProfDwarf,
}

impl<'d> Loader<'_, 'd> {
    fn run(&mut self) -> Result<(), gimli::Error> {
        let mut headers = self.dwarf.units();
        while let Some(header) = headers.next()? {
            self.units.push(self.dwarf.unit(header)?);
        }
        let mut all_ranges = Vec::with_capacity(self.units.len());
        for index in 0..self.units.len() {
            let (unit, ranges) = self.load_unit(index)?;
            self.out.units.push(unit);
            all_ranges.push(ranges);
        }
        // Of overlapping units the lowest offset wins (DWARFDebugAranges): insert last first.
        let mut map = IntervalMapBuilder::default();
        for (index, ranges) in all_ranges.iter().enumerate().rev() {
            for &(lo, hi) in ranges {
                map.insert(lo, hi, index as u32);
            }
        }
        self.out.unit_map = map.finish();
        Ok(())
    }

    fn intern(&mut self, s: String) -> u32 {
        if let Some(&id) = self.interned.get(&s) {
            return id;
        }
        let id = self.out.strings.len() as u32;
        self.out.strings.push(s.clone());
        self.interned.insert(s, id);
        id
    }

    #[allow(clippy::type_complexity)]
    fn load_unit(&mut self, index: usize) -> Result<(Unit, Vec<(u64, u64)>), gimli::Error> {
        let dwarf = self.dwarf;
        let files = self.file_names(index);
        let mut unit = Unit::default();
        let mut die_map = IntervalMapBuilder::default();
        let mut pending: Vec<(UnitOffset, Option<u32>, bool)> = Vec::new();
        {
            let u = &self.units[index];
            let mut cursor = u.entries();
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
                    let id = pending.len() as u32;
                    if let Ok(mut iter) = dwarf.die_ranges(u, entry) {
                        while let Ok(Some(r)) = iter.next() {
                            die_map.insert(r.begin, r.end, id);
                        }
                    }
                    pending.push((entry.offset(), parent, is_subprogram));
                    ancestors.push((depth, Some(id)));
                } else {
                    ancestors.push((depth, parent));
                }
            }
        }
        for (offset, parent, is_subprogram) in pending {
            let name = self
                .find_string(
                    index,
                    offset,
                    &[gimli::DW_AT_linkage_name, gimli::DW_AT_MIPS_linkage_name],
                )
                .or_else(|| self.find_string(index, offset, &[gimli::DW_AT_name]));
            let decl_line = self.find_udata(index, offset, gimli::DW_AT_decl_line);
            let entry = self.units[index].entry(offset)?;
            let udata = |at| entry.attr(at).and_then(|a| a.udata_value()).unwrap_or(0);
            let (call_line, call_column, call_file) = (
                udata(gimli::DW_AT_call_line),
                udata(gimli::DW_AT_call_column),
                entry
                    .attr(gimli::DW_AT_call_file)
                    .and_then(|a| a.udata_value()),
            );
            let call_file = call_file.and_then(|f| files.get(&f).cloned());
            let name = name.map(|n| self.intern(n));
            let call_file = call_file.map(|f| self.intern(f));
            unit.nodes.push(Node {
                name,
                decl_line: clamp(decl_line.unwrap_or(0)),
                call_line: clamp(call_line),
                call_column: clamp(call_column),
                call_file,
                parent,
                is_subprogram,
            });
        }
        unit.die_map = die_map.finish();
        unit.sequences = self.sequences(index, &files)?;
        let mut ranges = Vec::new();
        if let Ok(mut iter) = dwarf.unit_ranges(&self.units[index]) {
            while let Ok(Some(r)) = iter.next() {
                if r.begin < r.end {
                    ranges.push((r.begin, r.end));
                }
            }
        }
        if ranges.is_empty() {
            ranges = unit
                .die_map
                .entries()
                .iter()
                .map(|(l, h, _)| (*l, *h))
                .collect();
        }
        Ok((unit, ranges))
    }

    /// File index → file name (as written, directory not joined) of unit `index`'s line table.
    fn file_names(&self, index: usize) -> HashMap<u64, String> {
        let unit = &self.units[index];
        let mut out = HashMap::new();
        let Some(program) = &unit.line_program else {
            return out;
        };
        let header = program.header();
        let base = if header.version() >= 5 { 0 } else { 1 };
        for (i, file) in header.file_names().iter().enumerate() {
            if let Ok(s) = self.dwarf.attr_string(unit, file.path_name()) {
                out.insert(base + i as u64, s.to_string_lossy().into_owned());
            }
        }
        out
    }

    fn sequences(
        &mut self,
        index: usize,
        files: &HashMap<u64, String>,
    ) -> Result<Vec<Sequence>, gimli::Error> {
        let Some(program) = self.units[index].line_program.clone() else {
            return Ok(Vec::new());
        };
        let mut file_ids: HashMap<u64, u32> = HashMap::new();
        for (k, v) in files {
            let id = self.intern(v.clone());
            file_ids.insert(*k, id);
        }
        let mut rows = program.rows();
        let mut out = Vec::new();
        let mut current: Vec<Row> = Vec::new();
        while let Some((_, row)) = rows.next_row()? {
            if row.end_sequence() {
                if let Some(first) = current.first() {
                    if first.address < row.address() {
                        out.push(Sequence {
                            low: first.address,
                            high: row.address(),
                            rows: std::mem::take(&mut current),
                        });
                    }
                }
                current.clear();
                continue;
            }
            let column = match row.column() {
                gimli::ColumnType::LeftEdge => 0,
                gimli::ColumnType::Column(c) => clamp(c.get()),
            };
            current.push(Row {
                address: row.address(),
                line: clamp(row.line().map_or(0, |l| l.get())),
                column,
                file: file_ids.get(&row.file_index()).copied(),
            });
        }
        out.sort_by_key(|s| s.high);
        Ok(out)
    }

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
                let target = match entry.attr_value(link) {
                    Some(AttributeValue::UnitRef(o)) => Some((u, o)),
                    Some(AttributeValue::DebugInfoRef(dio)) => {
                        let i = self
                            .units
                            .partition_point(|x| x.header.offset().0 <= dio.0)
                            .checked_sub(1);
                        i.and_then(|i| dio.to_unit_offset(&self.units[i].header).map(|o| (i, o)))
                    }
                    _ => None,
                };
                if let Some(t) = target {
                    if !seen.contains(&t) {
                        seen.push(t);
                        work.push(t);
                    }
                }
            }
        }
        None
    }

    fn find_string(&self, unit: usize, offset: UnitOffset, attrs: &[DwAt]) -> Option<String> {
        let (u, value) = self.find_recursive(unit, offset, attrs)?;
        let s = self.dwarf.attr_string(&self.units[u], value).ok()?;
        Some(s.to_string_lossy().into_owned())
    }

    fn find_udata(&self, unit: usize, offset: UnitOffset, attr: DwAt) -> Option<u64> {
        self.find_recursive(unit, offset, &[attr])?.1.udata_value()
    }
}

fn clamp(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

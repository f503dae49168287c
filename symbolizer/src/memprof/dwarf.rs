//! [`MemProfDwarf`]: the DWARF lookups MemProf symbolization needs, extracted once at load.
//! It reproduces what LLVM's `RawMemProfReader` gets from `symbolizeInlinedCode` with linkage
//! names and raw file names: for an address, its inline frames innermost first, each with
//! linkage name, line, **column**, the subprogram's declaration line and the file name. The
//! innermost frame's line/column/file come from the line table row covering the address; each
//! outer frame's from the `DW_AT_call_line` / `DW_AT_call_column` / `DW_AT_call_file` of the
//! frame inside it (LLVM `DWARFContext::getInliningInfoForAddress`).
//!
//! The sample-profile side ([`crate::dwarf::DwarfInfo`]) needs discriminators but no columns or
//! files; MemProf needs columns and files but no discriminators, hence a loader of its own.
//! Both read the sections ([`crate::dwarf::sections`]) and walk the units
//! (`crate::dwarf::unit_set`) the same way and keep different facts of each DIE and row.

use std::collections::HashMap;
use std::path::Path;

use object::Object;

use crate::dwarf::interval::{IntervalMap, IntervalMapBuilder};
use crate::dwarf::sections::DebugSections;
use crate::dwarf::unit_set::{dwarf_error, row_at, unit_map, LineSequence, UnitSet};
use crate::error::SymbolizerError;

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
    line: u32,
    column: u32,
    file: Option<u32>,
}

#[derive(Clone, Debug, Default)]
struct Unit {
    nodes: Vec<Node>,
    die_map: IntervalMap<u32>,
    sequences: Vec<LineSequence<Row>>,
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
        let sections = DebugSections::load(file, path)?;
        let dwarf = sections.dwarf().map_err(|e| dwarf_error(path, e, None))?;
        let mut loader = Loader {
            units: UnitSet::read(&dwarf, path)?,
            interned: HashMap::new(),
            out: MemProfDwarf::default(),
        };
        loader.run(path)?;
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
        let row = row_at(&unit.sequences, addr).copied();
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

struct Loader<'a, 'd> {
    units: UnitSet<'a, 'd>,
    interned: HashMap<String, u32>,
    out: MemProfDwarf,
}

impl Loader<'_, '_> {
    fn run(&mut self, path: &Path) -> Result<(), SymbolizerError> {
        let mut all_ranges = Vec::with_capacity(self.units.len());
        for index in 0..self.units.len() {
            let (unit, ranges) = self
                .load_unit(index)
                .map_err(|e| dwarf_error(path, e, Some(self.units.unit_offset(index))))?;
            self.out.units.push(unit);
            all_ranges.push(ranges);
        }
        self.out.unit_map = unit_map(&all_ranges);
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
        let files = self.file_names(index);
        let mut unit = Unit::default();
        let mut die_map = IntervalMapBuilder::default();
        for (id, die) in self.units.subroutines(index)?.into_iter().enumerate() {
            for &(lo, hi) in &die.ranges {
                die_map.insert(lo, hi, id as u32);
            }
            let units = &self.units;
            let name = units
                .find_string(
                    index,
                    die.offset,
                    &[gimli::DW_AT_linkage_name, gimli::DW_AT_MIPS_linkage_name],
                )
                .or_else(|| units.find_string(index, die.offset, &[gimli::DW_AT_name]));
            let decl_line = units.find_udata(index, die.offset, gimli::DW_AT_decl_line);
            let entry = units.entry(index, die.offset)?;
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
                parent: die.parent,
                is_subprogram: die.is_subprogram,
            });
        }
        unit.die_map = die_map.finish();
        let mut file_ids: HashMap<u64, u32> = HashMap::new();
        for (k, v) in &files {
            let id = self.intern(v.clone());
            file_ids.insert(*k, id);
        }
        unit.sequences = self.units.line_sequences(index, |row| Row {
            line: clamp(row.line().map_or(0, |l| l.get())),
            column: match row.column() {
                gimli::ColumnType::LeftEdge => 0,
                gimli::ColumnType::Column(c) => clamp(c.get()),
            },
            file: file_ids.get(&row.file_index()).copied(),
        })?;
        let ranges = self.units.address_ranges(index, &unit.die_map);
        Ok((unit, ranges))
    }

    /// File index → file name (as written, directory not joined) of unit `index`'s line table.
    fn file_names(&self, index: usize) -> HashMap<u64, String> {
        let unit = self.units.unit(index);
        let mut out = HashMap::new();
        let Some(program) = &unit.line_program else {
            return out;
        };
        let header = program.header();
        let base = if header.version() >= 5 { 0 } else { 1 };
        for (i, file) in header.file_names().iter().enumerate() {
            if let Ok(s) = self.units.dwarf().attr_string(unit, file.path_name()) {
                out.insert(base + i as u64, s.to_string_lossy().into_owned());
            }
        }
        out
    }
}

fn clamp(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

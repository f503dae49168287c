//! [`DwarfInfo`]: what pgo-agent needs from DWARF, extracted once at load time so lookups need
//! no parsing:
//!
//! * subprograms with names and ranges (llvm-profgen's `loadSymbolsFromDWARFUnit`);
//! * per unit, the subroutine DIEs (`DW_TAG_subprogram`, `DW_TAG_inlined_subroutine`) with
//!   their name, `DW_AT_decl_line`, `DW_AT_call_line`, `DW_AT_GNU_discriminator` and parent,
//!   plus an address → deepest-DIE map (LLVM `DWARFUnit::updateAddressDieMap`): kept from
//!   load, or ([`DwarfInfo::load_lazy_lines`] of a file whose `.debug_info` is neither
//!   compressed nor split) read at load for the functions and unit ranges and read again
//!   from the file's memory map when inline frames are first asked for (a profile from
//!   pseudo probes never asks);
//! * per unit, the line table's sequences (address, line, discriminator): read at load, or
//!   ([`DwarfInfo::load_lazy_lines`]) checked at load and read again when an address of the
//!   unit is first looked up, from `.debug_line` in the file's memory map. A line table
//!   costs 16 bytes a row read, about ten times its encoded size, and a profile looks up
//!   the units of the code samples reach.
//!
//! [`DwarfInfo::inlining_info`] then reproduces LLVM 19 `DWARFContext::getInliningInfoForAddress`
//! with linkage names: innermost frame first; the innermost frame's line and discriminator come
//! from the line table row covering the address, each outer frame's from the call site
//! attributes of the frame inside it; each frame's start line is its subprogram's decl line.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use object::Object;

use super::interval::{IntervalMap, IntervalMapBuilder};
use super::sections::{DebugSections, SectionBytes};
use super::split::{SplitDwarf, SplitFiles};
use super::unit_set::{dwarf_error, row_at, sequences_of, unit_map, LineSequence, UnitSet};
use crate::binary::SharedBytes;
use crate::decoded_bytes::Cache;
use crate::error::SymbolizerError;

/// Most frames [`DwarfInfo::inlining_info`] returns for one address (innermost first). Real
/// inline chains are a few dozen deep; a crafted DIE tree nesting thousands of inlined
/// subroutines over the same code would otherwise cost depth × instructions frames in
/// the per-instruction frame cache.
pub const MAX_INLINE_DEPTH: usize = 1024;

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

/// A named subprogram and its address ranges.
type Subprogram = (String, Vec<(u64, u64)>);

/// A subroutine DIE: 24 bytes, as there is one per subprogram and inlined subroutine of
/// every unit. Lines are 32-bit as LLVM keeps them (`DILineInfo::StartLine`, the
/// `CallLine` of `DWARFDie::getCallerFrame`).
#[derive(Clone, Copy, Debug)]
struct Subroutine {
    /// Interned name, [`NONE`] for none.
    name: u32,
    decl_line: u32,
    call_line: u32,
    call_discriminator: u32,
    /// The parent subroutine's index in the unit, [`NONE`] for none.
    parent: u32,
    is_subprogram: bool,
}

/// No name or parent in a [`Subroutine`].
const NONE: u32 = u32::MAX;

impl Subroutine {
    fn name(&self) -> Option<u32> {
        (self.name != NONE).then_some(self.name)
    }

    fn parent(&self) -> Option<u32> {
        (self.parent != NONE).then_some(self.parent)
    }
}

/// A line-table row as LLVM keeps it (`DWARFDebugLine::Row`: 32-bit line and
/// discriminator): 8 bytes, as there is one per row of every unit.
#[derive(Clone, Copy, Debug)]
struct Row {
    line: u32,
    discriminator: u32,
}

/// A unit's subroutine DIEs and its address → deepest-DIE map.
#[derive(Clone, Debug, Default)]
struct UnitDies {
    nodes: Vec<Subroutine>,
    die_map: IntervalMap<u32>,
}

/// What [`DwarfInfo::inlining_info`] reads: every unit's [`UnitDies`] (by unit index) and
/// the names they intern.
#[derive(Debug, Default)]
struct InlineDies {
    units: Vec<UnitDies>,
    names: Vec<String>,
}

/// Where the DIEs are read again on first use ([`DwarfInfo::inline_dies`]): the file's
/// memory map (the file the DWARF came from) and its path.
#[derive(Clone)]
struct DieSource {
    owner: SharedBytes,
    path: std::path::PathBuf,
}

impl std::fmt::Debug for DieSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DieSource")
            .field("path", &self.path)
            .finish()
    }
}

#[derive(Clone, Debug, Default)]
struct UnitInfo {
    /// Sorted by high PC (LLVM `Sequence::orderByHighPC`); set at load, or on first use
    /// from [`DwarfInfo::lines`].
    sequences: OnceLock<Vec<LineSequence<Row>>>,
    /// Where the line program is in [`LineSource::debug_line`] (lazy lines only).
    program: Option<(gimli::DebugLineOffset, u8)>,
}

/// The `.debug_line` section the lazily read line tables come from.
#[derive(Debug)]
struct LineSource {
    debug_line: SectionBytes,
    endian: gimli::RunTimeEndian,
}

fn line_row(row: &gimli::LineRow) -> Row {
    Row {
        line: row.line().map_or(0, |l| l.get() as u32),
        discriminator: row.discriminator() as u32,
    }
}

/// DWARF facts of one binary; see the module docs.
#[derive(Debug, Default)]
pub struct DwarfInfo {
    subprograms: Vec<Subprogram>,
    /// Set at load, or (with `die_source`) on first use.
    dies: OnceLock<InlineDies>,
    die_source: Option<DieSource>,
    units: Vec<UnitInfo>,
    unit_map: IntervalMap<u32>,
    lines: Option<Arc<LineSource>>,
    missing_split_units: usize,
}

impl DwarfInfo {
    /// Extracts everything from the DWARF sections of `file` (compressed sections are
    /// decompressed). A binary without DWARF gives an empty `DwarfInfo`.
    pub fn load<'data>(
        file: &impl Object<'data>,
        path: &Path,
    ) -> Result<DwarfInfo, SymbolizerError> {
        Self::load_from(file, path, None, None, false)
    }

    /// [`DwarfInfo::load`], with the line tables read when first used (see the module
    /// docs) from `owner`, the memory map of `file`'s bytes (a compressed `.debug_line` is
    /// kept decompressed). Every line table is still read once at load, so a malformed one
    /// fails here as in [`DwarfInfo::load`].
    pub fn load_lazy_lines<'data>(
        file: &impl Object<'data>,
        path: &Path,
        owner: &SharedBytes,
    ) -> Result<DwarfInfo, SymbolizerError> {
        Self::load_from(file, path, Some(owner), None, false)
    }

    /// [`DwarfInfo::load`] ([`DwarfInfo::load_lazy_lines`] with `owner`), reading the
    /// split units of skeleton units (`-gsplit-dwarf`) from the DWARF package or the
    /// `.dwo` files `split` leads to (see [`super::split`]). A binary without skeleton
    /// units reads no other file. With `release_checked_lines` (`owner` must then be a
    /// read-only file mapping), the pages of each line table checked at load are given
    /// back once it is checked: a large binary's `.debug_line` (tens of megabytes) is not
    /// resident all at once.
    pub fn load_split<'data>(
        file: &impl Object<'data>,
        path: &Path,
        owner: Option<&SharedBytes>,
        split: &SplitDwarf,
        release_checked_lines: bool,
    ) -> Result<DwarfInfo, SymbolizerError> {
        Self::load_from(file, path, owner, Some(split), release_checked_lines)
    }

    /// Skeleton units whose split unit was in no package or `.dwo` file: their functions
    /// and inline frames are unknown (llvm-profgen 19 warns "DWO debug information was not
    /// loaded for N modules").
    pub fn missing_split_units(&self) -> usize {
        self.missing_split_units
    }

    fn load_from<'data>(
        file: &impl Object<'data>,
        path: &Path,
        owner: Option<&SharedBytes>,
        split: Option<&SplitDwarf>,
        release_checked_lines: bool,
    ) -> Result<DwarfInfo, SymbolizerError> {
        let sections = DebugSections::load(file, path)?;
        let dwarf = sections.dwarf().map_err(|e| dwarf_error(path, e, None))?;
        // Declared before the units, which borrow from them.
        let (split_files, split_sections, split_units);
        let mut units = UnitSet::read(&dwarf, path)?;
        if let Some(split) = split {
            split_files = SplitFiles::open(&units, path, split)?;
            split_sections = split_files.sections()?;
            split_units = split_sections.units()?;
            units.attach_split_units(&split_units)?;
        }
        let lines = owner.and_then(|owner| {
            Some(Arc::new(LineSource {
                debug_line: sections.keep(gimli::SectionId::DebugLine, owner)?,
                endian: sections.endian(),
            }))
        });
        let missing_split_units = units.missing_split_units();
        // Only a range of the file's mapping may be given back (a copy's pages would read
        // back as zeros).
        let release_lines = release_checked_lines
            && lines
                .as_ref()
                .is_some_and(|l| matches!(l.debug_line, SectionBytes::Mapped(..)));
        // The DIEs are read again when first asked for, from the file's map: when
        // `.debug_info` lies in it (the map is the file the sections come from, and they
        // need no decompression) and no unit is split (its DIEs are in other files).
        let die_source = owner
            .filter(|owner| {
                sections.lies_in(gimli::SectionId::DebugInfo, owner)
                    && units.skeletons().next().is_none()
            })
            .map(|owner| DieSource {
                owner: owner.clone(),
                path: path.to_path_buf(),
            });
        Loader {
            units,
            path,
            release_lines,
            names: Names::default(),
            dies: Vec::new(),
            keep_dies: die_source.is_none(),
            info: {
                let mut info = DwarfInfo::default();
                info.lines = lines;
                info.missing_split_units = missing_split_units;
                info.die_source = die_source;
                info
            },
        }
        .run()
    }

    /// The line sequences of unit `u`, read on first use when the lines are lazy.
    fn lines<'s>(&'s self, u: &'s UnitInfo) -> &'s [LineSequence<Row>] {
        u.sequences.get_or_init(|| {
            let (Some(source), Some((offset, address_size))) = (&self.lines, u.program) else {
                return Vec::new();
            };
            let debug_line = gimli::DebugLine::new(source.debug_line.bytes(), source.endian);
            // Read once already at load: an error cannot arise here.
            let sequences = debug_line
                .program(offset, address_size, None, None)
                .and_then(|program| sequences_of(program, line_row))
                .unwrap_or_default();
            Cache::LineTables.add(sequences.iter().map(LineSequence::heap_bytes).sum());
            sequences
        })
    }

    /// Bytes of the line tables read on first use.
    /// Bytes held by the line tables read on first use (0 when read whole at load).
    pub fn lazy_line_bytes(&self) -> usize {
        if self.lines.is_none() {
            return 0;
        }
        self.units
            .iter()
            .filter_map(|u| u.sequences.get())
            .flat_map(|s| s.iter().map(LineSequence::heap_bytes))
            .sum()
    }

    /// True when the subroutine DIEs are in memory (read at load, or on first use).
    pub fn dies_read(&self) -> bool {
        self.dies.get().is_some()
    }

    /// Units whose line table has been read.
    pub fn units_with_lines(&self) -> usize {
        self.units
            .iter()
            .filter(|u| u.sequences.get().is_some())
            .count()
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
        self.inline_dies()
            .names
            .get(id as usize)
            .map_or("", String::as_str)
    }

    /// True when the binary has no compilation unit with code.
    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }

    /// LLVM `getInliningInfoForAddress`: frames innermost first; empty when no unit or no
    /// subroutine DIE covers `addr` (LLVM then returns one nameless frame, which llvm-profgen
    /// discards).
    pub fn inlining_info(&self, addr: u64) -> Vec<RawFrame> {
        let Some(index) = self.unit_map.get(addr) else {
            return Vec::new();
        };
        let (Some(unit), Some(dies)) = (
            self.units.get(index as usize),
            self.inline_dies().units.get(index as usize),
        ) else {
            return Vec::new();
        };
        let Some(mut node_id) = dies.die_map.get(addr) else {
            return Vec::new();
        };
        let mut frames = Vec::new();
        let mut inner: Option<&Subroutine> = None;
        loop {
            let node = &dies.nodes[node_id as usize];
            let (line, discriminator) = match inner {
                None => row_at(self.lines(unit), addr)
                    .map_or((0, 0), |r| (u64::from(r.line), r.discriminator)),
                Some(callee) => (u64::from(callee.call_line), callee.call_discriminator),
            };
            frames.push(RawFrame {
                name: node.name(),
                line,
                start_line: u64::from(node.decl_line),
                discriminator,
            });
            if node.is_subprogram || frames.len() >= MAX_INLINE_DEPTH {
                break;
            }
            match node.parent() {
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

impl DwarfInfo {
    /// The units' subroutine DIEs: kept from load, or read again from the file on first
    /// use. A profile from pseudo probes never asks for them, and they are the largest
    /// part of what DWARF leaves in memory (a node per subprogram and inlined subroutine,
    /// an interval per address range of each).
    fn inline_dies(&self) -> &InlineDies {
        self.dies.get_or_init(|| {
            let Some(source) = &self.die_source else {
                return InlineDies::default();
            };
            // The same bytes were read at load without error: none can arise here.
            read_dies(source).unwrap_or_default()
        })
    }
}

/// Every unit's subroutine DIEs of the file `source` maps, read as the load reads them.
fn read_dies(source: &DieSource) -> Option<InlineDies> {
    let bytes: &[u8] = (*source.owner).as_ref();
    let file = object::File::parse(bytes).ok()?;
    let sections = DebugSections::load(&file, &source.path).ok()?;
    let dwarf = sections.dwarf().ok()?;
    let units = UnitSet::read(&dwarf, &source.path).ok()?;
    let mut names = Names::default();
    let dies = (0..units.len())
        .map(|index| unit_dies(&units, index, Some(&mut names), None))
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    Some(InlineDies {
        units: dies,
        names: names.into_vec(),
    })
}

/// Interned DIE names.
#[derive(Default)]
struct Names(HashMap<String, u32>);

impl Names {
    fn intern(&mut self, name: String) -> u32 {
        let next = self.0.len() as u32;
        *self.0.entry(name).or_insert(next)
    }

    fn into_vec(self) -> Vec<String> {
        let mut names: Vec<(String, u32)> = self.0.into_iter().collect();
        names.sort_by_key(|(_, id)| *id);
        names.into_iter().map(|(n, _)| n).collect()
    }
}

/// Unit `index`'s subroutine DIEs, names interned in `names` (without `names`, the nodes
/// are nameless: for a caller that keeps only the address map); with `subprograms`, each
/// named subprogram with its ranges is added to it too.
fn unit_dies(
    units: &UnitSet<'_, '_>,
    index: usize,
    mut names: Option<&mut Names>,
    mut subprograms: Option<&mut Vec<Subprogram>>,
) -> Result<UnitDies, gimli::Error> {
    let mut info = UnitDies::default();
    let mut die_map = IntervalMapBuilder::default();
    let dies = units.subroutines(index)?;
    info.nodes.reserve_exact(dies.len());
    // Names and lines may follow references into other units.
    for (id, die) in dies.into_iter().enumerate() {
        let name = units
            .find_string(
                index,
                die.offset,
                &[gimli::DW_AT_MIPS_linkage_name, gimli::DW_AT_linkage_name],
            )
            .or_else(|| units.find_string(index, die.offset, &[gimli::DW_AT_name]));
        let decl_line = units
            .find_udata(index, die.offset, gimli::DW_AT_decl_line)
            .unwrap_or(0);
        let entry = units.entry(index, die.offset)?;
        let call_line = entry
            .attr(gimli::DW_AT_call_line)
            .and_then(|a| a.udata_value())
            .unwrap_or(0);
        let call_discriminator = entry
            .attr(gimli::DW_AT_GNU_discriminator)
            .and_then(|a| a.udata_value())
            .unwrap_or(0) as u32;
        if let (true, Some(n), Some(list)) = (die.is_subprogram, &name, subprograms.as_mut()) {
            list.push((n.clone(), die.ranges.clone()));
        }
        for &(lo, hi) in &die.ranges {
            die_map.insert(lo, hi, id as u32);
        }
        let name = match (name, names.as_mut()) {
            (Some(n), Some(names)) => names.intern(n),
            _ => NONE,
        };
        info.nodes.push(Subroutine {
            name,
            decl_line: decl_line as u32,
            call_line: call_line as u32,
            call_discriminator,
            parent: die.parent.unwrap_or(NONE),
            is_subprogram: die.is_subprogram,
        });
    }
    info.die_map = die_map.finish();
    Ok(info)
}

impl Drop for DwarfInfo {
    fn drop(&mut self) {
        Cache::LineTables.sub(self.lazy_line_bytes());
    }
}

struct Loader<'a, 'd> {
    units: UnitSet<'a, 'd>,
    path: &'a Path,
    /// The line tables' `.debug_line` is the file's mapping, whose checked tables' pages
    /// are given back.
    release_lines: bool,
    names: Names,
    /// The units' DIEs read so far.
    dies: Vec<UnitDies>,
    /// Keep the DIEs (else they are read again on first use: `info.die_source`).
    keep_dies: bool,
    info: DwarfInfo,
}

impl Loader<'_, '_> {
    fn run(mut self) -> Result<DwarfInfo, SymbolizerError> {
        if let (true, Some(source)) = (self.release_lines, &self.info.lines) {
            // Reading the units read each line table's header, and a fault maps the
            // windows around the page it reads: all of a large `.debug_line` is mapped by
            // now, before a table is checked.
            source.debug_line.release_around(0..usize::MAX);
        }
        let mut unit_ranges: Vec<Vec<(u64, u64)>> = Vec::with_capacity(self.units.len());
        for index in 0..self.units.len() {
            let (info, ranges) = self
                .load_unit(index)
                .map_err(|e| dwarf_error(self.path, e, Some(self.units.unit_offset(index))))?;
            self.info.units.push(info);
            unit_ranges.push(ranges);
        }
        self.info.unit_map = unit_map(&unit_ranges);
        if self.keep_dies {
            self.info.dies = OnceLock::from(InlineDies {
                units: self.dies,
                names: self.names.into_vec(),
            });
        }
        Ok(self.info)
    }

    /// Returns the unit's info and its address ranges.
    fn load_unit(&mut self, index: usize) -> Result<(UnitInfo, Vec<(u64, u64)>), gimli::Error> {
        let mut info = UnitInfo::default();
        let dies = unit_dies(
            &self.units,
            index,
            self.keep_dies.then_some(&mut self.names),
            Some(&mut self.info.subprograms),
        )?;
        if self.info.lines.is_some() {
            self.units.check_line_rows(index)?;
            info.program = self.units.line_program_ref(index);
            if let (true, Some(source), Some(extent)) = (
                self.release_lines,
                &self.info.lines,
                self.units.line_program_extent(index),
            ) {
                // With the windows around it: a file cached in large folios maps up to
                // 2 MiB around each page read.
                source.debug_line.release_around(extent);
            }
        } else {
            info.sequences = OnceLock::from(self.units.line_sequences(index, line_row)?);
        }
        let ranges = self.units.address_ranges(index, &dies.die_map);
        // Else read again on first use, names and all.
        if self.keep_dies {
            self.dies.push(dies);
        }
        Ok((info, ranges))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A subprogram with `depth - 1` inlined subroutines nested over [0x1000, 0x1010).
    fn nested(depth: u32) -> DwarfInfo {
        let nodes = (0..depth)
            .map(|i| Subroutine {
                name: 0,
                decl_line: 1,
                call_line: 10 + i,
                call_discriminator: 0,
                parent: i.checked_sub(1).unwrap_or(NONE),
                is_subprogram: i == 0,
            })
            .collect();
        let mut die_map = IntervalMapBuilder::default();
        die_map.insert(0x1000, 0x1010, depth - 1);
        let mut unit_map = IntervalMapBuilder::default();
        unit_map.insert(0x1000, 0x1010, 0);
        DwarfInfo {
            subprograms: Vec::new(),
            dies: OnceLock::from(InlineDies {
                units: vec![UnitDies {
                    nodes,
                    die_map: die_map.finish(),
                }],
                names: vec!["f".into()],
            }),
            die_source: None,
            units: vec![UnitInfo {
                sequences: OnceLock::from(Vec::new()),
                program: None,
            }],
            unit_map: unit_map.finish(),
            lines: None,
            missing_split_units: 0,
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
            "bomb.elf: section .debug_info (#1, file offset 0x40, size 0x20): cannot read contents: \
             claims 281474976710656 \
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

//! [`DwarfInfo`]: what pgo-agent needs from DWARF, extracted once at load time so lookups need
//! no parsing:
//!
//! * subprograms with names and ranges (llvm-profgen's `loadSymbolsFromDWARFUnit`);
//! * per unit, the subroutine DIEs (`DW_TAG_subprogram`, `DW_TAG_inlined_subroutine`) with
//!   their name, `DW_AT_decl_line`, `DW_AT_call_line`, `DW_AT_GNU_discriminator` and parent,
//!   plus an address → deepest-DIE map (LLVM `DWARFUnit::updateAddressDieMap`);
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

#[derive(Clone, Debug, Default)]
struct UnitInfo {
    nodes: Vec<Subroutine>,
    die_map: IntervalMap<u32>,
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
    subprograms: Vec<(String, Vec<(u64, u64)>)>,
    names: Vec<String>,
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
        Loader {
            units,
            path,
            release_lines,
            names: HashMap::new(),
            info: {
                let mut info = DwarfInfo::default();
                info.lines = lines;
                info.missing_split_units = missing_split_units;
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
    names: HashMap<String, u32>,
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
        let mut names: Vec<(String, u32)> = self.names.into_iter().collect();
        names.sort_by_key(|(_, id)| *id);
        self.info.names = names.into_iter().map(|(n, _)| n).collect();
        Ok(self.info)
    }

    fn intern(&mut self, name: String) -> u32 {
        let next = self.names.len() as u32;
        *self.names.entry(name).or_insert(next)
    }

    /// Returns the unit's info and its address ranges.
    fn load_unit(&mut self, index: usize) -> Result<(UnitInfo, Vec<(u64, u64)>), gimli::Error> {
        let mut info = UnitInfo::default();
        let mut die_map = IntervalMapBuilder::default();
        // Names and lines may follow references into other units.
        let dies = self.units.subroutines(index)?;
        info.nodes.reserve_exact(dies.len());
        for (id, die) in dies.into_iter().enumerate() {
            let units = &self.units;
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
            if die.is_subprogram {
                if let Some(n) = &name {
                    self.info.subprograms.push((n.clone(), die.ranges.clone()));
                }
            }
            for &(lo, hi) in &die.ranges {
                die_map.insert(lo, hi, id as u32);
            }
            let name = name.map_or(NONE, |n| self.intern(n));
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
        let ranges = self.units.address_ranges(index, &info.die_map);
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
            names: vec!["f".into()],
            units: vec![UnitInfo {
                nodes,
                die_map: die_map.finish(),
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

//! [`UnitSet`]: the compilation units of a file's DWARF, and the walks over them that both
//! DWARF loaders make ([`super::DwarfInfo`] for sample profiles, `memprof::dwarf` for
//! MemProf): the subroutine DIEs of a unit, its line table's sequences, its address ranges,
//! and attributes found through `DW_AT_abstract_origin` / `DW_AT_specification`. What each
//! loader keeps of a DIE or a line row is its own.

use std::path::Path;

use gimli::{AttributeValue, DwAt, UnitOffset};

use super::interval::{IntervalMap, IntervalMapBuilder};
use super::sections::Slice;
use super::split::{SplitUnit, SplitUnits};
use crate::error::SymbolizerError;

/// Upper bound on the number of DIEs followed through `DW_AT_abstract_origin` /
/// `DW_AT_specification` when resolving one attribute (guards against reference cycles).
const MAX_REFERENCE_HOPS: usize = 16;

/// The units of one file's `.debug_info`, in section order; a skeleton unit's DIEs are
/// those of its split unit when that was found (LLVM `DWARFUnit::getNonSkeletonUnitDIE`),
/// its line table and unit ranges its own.
pub(crate) struct UnitSet<'a, 'd> {
    dwarf: &'a gimli::Dwarf<Slice<'d>>,
    units: Vec<gimli::Unit<Slice<'d>>>,
    split: Vec<Option<Box<SplitUnit<'d>>>>,
    missing_split: usize,
}

/// A `DW_TAG_subprogram` or `DW_TAG_inlined_subroutine` DIE of a unit, in depth-first order.
pub(crate) struct SubroutineDie {
    pub(crate) offset: UnitOffset,
    /// Index (in the same list) of the nearest subroutine DIE above it.
    pub(crate) parent: Option<u32>,
    pub(crate) is_subprogram: bool,
    /// Its address ranges; empty when they cannot be read (LLVM skips such DIEs too).
    pub(crate) ranges: Vec<(u64, u64)>,
}

/// One sequence of a line table: rows at ascending addresses covering `[low, high)`.
#[derive(Clone, Debug)]
pub(crate) struct LineSequence<R> {
    low: u64,
    high: u64,
    addresses: Vec<u64>,
    rows: Vec<R>,
}

impl<R> LineSequence<R> {
    /// The bytes its rows take.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.addresses.len() * 8 + self.rows.len() * std::mem::size_of::<R>()
    }
}

/// LLVM `LineTable::lookupAddress`: in `sequences` (sorted by high PC), the sequence whose
/// `[low, high)` holds `addr` (the first by high PC), then its last row at or below `addr`.
pub(crate) fn row_at<R>(sequences: &[LineSequence<R>], addr: u64) -> Option<&R> {
    let i = sequences.partition_point(|s| s.high <= addr);
    let seq = sequences.get(i)?;
    if seq.low > addr {
        return None;
    }
    let j = seq
        .addresses
        .partition_point(|&a| a <= addr)
        .checked_sub(1)?;
    seq.rows.get(j)
}

/// `program`'s rows as sequences sorted by high PC (see [`UnitSet::line_sequences`]).
pub(crate) fn sequences_of<T: gimli::Reader, R>(
    program: gimli::IncompleteLineProgram<T>,
    mut row: impl FnMut(&gimli::LineRow) -> R,
) -> Result<Vec<LineSequence<R>>, gimli::Error> {
    let mut rows = program.rows();
    let mut sequences = Vec::new();
    let mut addresses: Vec<u64> = Vec::new();
    let mut current: Vec<R> = Vec::new();
    while let Some((_, line_row)) = rows.next_row()? {
        if line_row.end_sequence() {
            if let Some(&low) = addresses.first() {
                if low < line_row.address() {
                    let (mut addresses, mut rows) =
                        (std::mem::take(&mut addresses), std::mem::take(&mut current));
                    // Kept for the binary's life: no room to grow.
                    addresses.shrink_to_fit();
                    rows.shrink_to_fit();
                    sequences.push(LineSequence {
                        low,
                        high: line_row.address(),
                        addresses,
                        rows,
                    });
                }
            }
            addresses.clear();
            current.clear();
            continue;
        }
        addresses.push(line_row.address());
        current.push(row(line_row));
    }
    sequences.sort_by_key(|s| s.high);
    Ok(sequences)
}

/// Reads every row of `program` and keeps none: the errors [`sequences_of`] would meet.
pub(crate) fn check_rows<T: gimli::Reader>(
    program: gimli::IncompleteLineProgram<T>,
) -> Result<(), gimli::Error> {
    let mut rows = program.rows();
    while rows.next_row()?.is_some() {}
    Ok(())
}

/// Address → unit index, from each unit's ranges: of overlapping units the lowest offset
/// wins (LLVM `DWARFDebugAranges`), so they are inserted last first.
pub(crate) fn unit_map(unit_ranges: &[Vec<(u64, u64)>]) -> IntervalMap<u32> {
    let mut map = IntervalMapBuilder::default();
    for (index, ranges) in unit_ranges.iter().enumerate().rev() {
        for &(lo, hi) in ranges {
            map.insert(lo, hi, index as u32);
        }
    }
    map.finish()
}

/// A DWARF error of `path`, with the offset of the unit it arose in when known.
pub(crate) fn dwarf_error(
    path: &Path,
    e: gimli::Error,
    unit_offset: Option<usize>,
) -> SymbolizerError {
    let what = match unit_offset {
        Some(off) => format!("{e} (unit at .debug_info offset {off:#x})"),
        None => e.to_string(),
    };
    SymbolizerError::Dwarf {
        path: path.to_path_buf(),
        what,
    }
}

/// The units of `dwarf` in section order, each parsed from its header (errors name `path`
/// and the unit's offset; the first error ends the walk).
pub(crate) fn units_of<'a, 'd>(
    dwarf: &'a gimli::Dwarf<Slice<'d>>,
    path: &'a Path,
) -> impl Iterator<Item = Result<gimli::Unit<Slice<'d>>, SymbolizerError>> + 'a {
    let mut headers = dwarf.units();
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed {
            return None;
        }
        let header = match headers.next() {
            Ok(Some(h)) => h,
            Ok(None) => return None,
            Err(e) => {
                failed = true;
                return Some(Err(dwarf_error(path, e, None)));
            }
        };
        let offset = header.offset().0;
        let unit = dwarf
            .unit(header)
            .map_err(|e| dwarf_error(path, e, Some(offset)));
        failed = unit.is_err();
        Some(unit)
    })
}

impl<'a, 'd> UnitSet<'a, 'd> {
    /// Parses every unit header of `dwarf` (errors name `path` and the unit's offset).
    pub(crate) fn read(
        dwarf: &'a gimli::Dwarf<Slice<'d>>,
        path: &Path,
    ) -> Result<Self, SymbolizerError> {
        let units: Vec<_> = units_of(dwarf, path).collect::<Result<_, _>>()?;
        let split = units.iter().map(|_| None).collect();
        Ok(UnitSet {
            dwarf,
            units,
            split,
            missing_split: 0,
        })
    }

    /// The skeleton units (those with a DWO id).
    pub(crate) fn skeletons(&self) -> impl Iterator<Item = &gimli::Unit<Slice<'d>>> {
        self.units.iter().filter(|u| u.dwo_id.is_some())
    }

    /// Takes the split unit of each skeleton unit from `split`; a skeleton whose split unit
    /// is in no file counts as missing.
    pub(crate) fn attach_split_units(
        &mut self,
        split: &SplitUnits<'d>,
    ) -> Result<(), SymbolizerError> {
        for (unit, slot) in self.units.iter().zip(&mut self.split) {
            if unit.dwo_id.is_some() {
                let found = split.find(self.dwarf, unit)?;
                self.missing_split += usize::from(found.is_none());
                *slot = found.map(Box::new);
            }
        }
        Ok(())
    }

    /// Skeleton units whose split unit was not found.
    pub(crate) fn missing_split_units(&self) -> usize {
        self.missing_split
    }

    /// The DWARF and unit holding unit `index`'s DIEs: its split unit, if any, else itself.
    fn die_unit(&self, index: usize) -> (&gimli::Dwarf<Slice<'d>>, &gimli::Unit<Slice<'d>>) {
        match &self.split[index] {
            Some(split) => (&split.0, &split.1),
            None => (self.dwarf, &self.units[index]),
        }
    }

    /// The DIE at `offset` of unit `index` (in its split unit, if any).
    pub(crate) fn entry(
        &self,
        index: usize,
        offset: UnitOffset,
    ) -> Result<gimli::DebuggingInformationEntry<Slice<'d>>, gimli::Error> {
        self.die_unit(index).1.entry(offset)
    }

    pub(crate) fn len(&self) -> usize {
        self.units.len()
    }

    pub(crate) fn dwarf(&self) -> &'a gimli::Dwarf<Slice<'d>> {
        self.dwarf
    }

    /// Unit `index` as the file has it (a skeleton unit, not its split unit).
    pub(crate) fn unit(&self, index: usize) -> &gimli::Unit<Slice<'d>> {
        &self.units[index]
    }

    /// Offset of unit `index` in `.debug_info`.
    pub(crate) fn unit_offset(&self, index: usize) -> usize {
        self.units[index].header.offset().0
    }

    /// The subroutine DIEs of unit `index`, each with its nearest subroutine ancestor and
    /// its ranges.
    pub(crate) fn subroutines(&self, index: usize) -> Result<Vec<SubroutineDie>, gimli::Error> {
        let (dwarf, unit) = self.die_unit(index);
        let mut out: Vec<SubroutineDie> = Vec::new();
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
                if let Ok(mut iter) = dwarf.die_ranges(unit, entry) {
                    while let Ok(Some(r)) = iter.next() {
                        ranges.push((r.begin, r.end));
                    }
                }
                let id = out.len() as u32;
                out.push(SubroutineDie {
                    offset: entry.offset(),
                    parent,
                    is_subprogram,
                    ranges,
                });
                ancestors.push((depth, Some(id)));
            } else {
                ancestors.push((depth, parent));
            }
        }
        Ok(out)
    }

    /// Unit `index`'s address ranges: from the unit DIE, else those of `dies` (its
    /// subroutines' map), as LLVM `DWARFUnit::collectAddressRanges` falls back to the DIE tree.
    pub(crate) fn address_ranges(&self, index: usize, dies: &IntervalMap<u32>) -> Vec<(u64, u64)> {
        let mut ranges = Vec::new();
        if let Ok(mut iter) = self.dwarf.unit_ranges(&self.units[index]) {
            while let Ok(Some(r)) = iter.next() {
                if r.begin < r.end {
                    ranges.push((r.begin, r.end));
                }
            }
        }
        if ranges.is_empty() {
            ranges = dies
                .entries()
                .iter()
                .map(|(lo, hi, _)| (*lo, *hi))
                .collect();
        }
        ranges
    }

    /// Unit `index`'s line table as sequences sorted by high PC (LLVM
    /// `Sequence::orderByHighPC`), each row made by `row`; empty sequences are left out.
    pub(crate) fn line_sequences<R>(
        &self,
        index: usize,
        row: impl FnMut(&gimli::LineRow) -> R,
    ) -> Result<Vec<LineSequence<R>>, gimli::Error> {
        match self.units[index].line_program.clone() {
            Some(program) => sequences_of(program, row),
            None => Ok(Vec::new()),
        }
    }

    /// Reads unit `index`'s line table and keeps nothing ([`check_rows`]).
    pub(crate) fn check_line_rows(&self, index: usize) -> Result<(), gimli::Error> {
        match self.units[index].line_program.clone() {
            Some(program) => check_rows(program),
            None => Ok(()),
        }
    }

    /// The `.debug_line` bytes of unit `index`'s line table (header and program).
    pub(crate) fn line_program_extent(&self, index: usize) -> Option<std::ops::Range<usize>> {
        let header = self.units[index].line_program.as_ref()?.header();
        let start = header.offset().0;
        // The unit length counts the bytes after the initial length field.
        let end = start
            .checked_add(usize::from(header.format().initial_length_size()))?
            .checked_add(header.unit_length())?;
        Some(start..end)
    }

    /// Where unit `index`'s line program is: its `.debug_line` offset and address size
    /// (what [`gimli::DebugLine::program`] needs to read it again without the unit).
    pub(crate) fn line_program_ref(&self, index: usize) -> Option<(gimli::DebugLineOffset, u8)> {
        let program = self.units[index].line_program.as_ref()?;
        Some((program.header().offset(), program.header().address_size()))
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
            let Ok(entry) = self.die_unit(u).1.entry(off) else {
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
            // A split unit's references stay in it.
            AttributeValue::DebugInfoRef(dio) if self.split[unit].is_some() => {
                Some((unit, dio.to_unit_offset(&self.die_unit(unit).1.header)?))
            }
            AttributeValue::DebugInfoRef(dio) => {
                let i = self
                    .units
                    .partition_point(|u| u.header.offset().0 <= dio.0)
                    .checked_sub(1)?;
                let off = dio.to_unit_offset(&self.units[i].header)?;
                Some((i, off))
            }
            _ => None,
        }
    }

    /// The first of `attrs` found from the DIE (see `find_recursive`), as a string.
    pub(crate) fn find_string(
        &self,
        unit: usize,
        offset: UnitOffset,
        attrs: &[DwAt],
    ) -> Option<String> {
        let (u, value) = self.find_recursive(unit, offset, attrs)?;
        let (dwarf, unit) = self.die_unit(u);
        let s = dwarf.attr_string(unit, value).ok()?;
        Some(s.to_string_lossy().into_owned())
    }

    /// `attr` found from the DIE (see `find_recursive`), as an unsigned number.
    pub(crate) fn find_udata(&self, unit: usize, offset: UnitOffset, attr: DwAt) -> Option<u64> {
        let (_, value) = self.find_recursive(unit, offset, &[attr])?;
        value.udata_value()
    }
}

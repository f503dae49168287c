//! [`FunctionTable`]: functions and their address ranges as llvm-profgen 19 knows them
//! (`BinaryFunctions`, `StartAddrToFuncRangeMap`): from DWARF subprograms, one
//! [`BinaryFunction`] per distinct name, one [`FuncRange`] per distinct range start.

use std::collections::HashMap;

use crate::name::canonical_function_name;

/// A function: all address ranges of all subprogram DIEs that share its (raw) name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BinaryFunction {
    /// The DWARF linkage name (else short name), not canonicalised: llvm-profgen's `FuncName`.
    pub name: String,
    /// Address ranges `[start, end)`, in DWARF order (duplicated starts included).
    pub ranges: Vec<(u64, u64)>,
}

/// One contiguous range of a function (a split function such as `foo` + `foo.cold` has two).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuncRange {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// The owning function's canonical name ([`canonical_function_name`] of the DWARF name).
    pub name: String,
    /// True when `start` is the function's real entry (not e.g. a `.cold` fragment): set when
    /// the function has one range, or a symbol in the range canonicalises to the DWARF name.
    pub is_func_entry: bool,
    /// Index of the owning function in [`FunctionTable::functions`].
    pub func_index: usize,
}

/// Functions and ranges, ranges sorted by start address.
#[derive(Clone, Debug, Default)]
pub struct FunctionTable {
    functions: Vec<BinaryFunction>,
    ranges: Vec<FuncRange>,
}

impl FunctionTable {
    /// Builds the table from subprograms `(name, ranges)` in DWARF DIE order, dropping ranges
    /// with `end <= start` or `start < preferred_base` (`loadSymbolsFromDWARFUnit`). A range
    /// whose start is already taken keeps the first function (llvm-profgen warns "Duplicated
    /// symbol start address").
    pub fn build(
        subprograms: impl IntoIterator<Item = (String, Vec<(u64, u64)>)>,
        preferred_base: u64,
    ) -> FunctionTable {
        let mut functions: Vec<BinaryFunction> = Vec::new();
        let mut by_name: HashMap<String, usize> = HashMap::new();
        let mut by_start: HashMap<u64, usize> = HashMap::new();
        let mut ranges: Vec<FuncRange> = Vec::new();
        for (name, die_ranges) in subprograms {
            if die_ranges.is_empty() {
                continue;
            }
            let func_index = *by_name.entry(name.clone()).or_insert_with(|| {
                functions.push(BinaryFunction {
                    name: name.clone(),
                    ranges: Vec::new(),
                });
                functions.len() - 1
            });
            for (start, end) in die_ranges {
                if end <= start || start < preferred_base {
                    continue;
                }
                functions[func_index].ranges.push((start, end));
                if let std::collections::hash_map::Entry::Vacant(slot) = by_start.entry(start) {
                    slot.insert(ranges.len());
                    ranges.push(FuncRange {
                        start,
                        end,
                        name: canonical_function_name(&name).to_string(),
                        is_func_entry: false,
                        func_index,
                    });
                }
            }
        }
        ranges.sort_by_key(|r| r.start);
        // Kept as long as the binary: without the growth's spare capacity.
        functions.shrink_to_fit();
        ranges.shrink_to_fit();
        FunctionTable { functions, ranges }
    }

    /// All functions, in first-seen DWARF order.
    pub fn functions(&self) -> &[BinaryFunction] {
        &self.functions
    }

    /// All ranges, sorted by start.
    pub fn ranges(&self) -> &[FuncRange] {
        &self.ranges
    }

    /// `findFuncRange`: the range with the greatest start `<= addr`, if `addr < end`.
    pub fn range_index_at(&self, addr: u64) -> Option<usize> {
        let i = self
            .ranges
            .partition_point(|r| r.start <= addr)
            .checked_sub(1)?;
        (addr < self.ranges[i].end).then_some(i)
    }

    /// `findFuncRange` returning the range.
    pub fn range_at(&self, addr: u64) -> Option<&FuncRange> {
        self.range_index_at(addr).map(|i| &self.ranges[i])
    }

    /// `findFuncRangeForStartAddr`: the range starting exactly at `addr`.
    pub fn range_starting_at(&self, addr: u64) -> Option<&FuncRange> {
        let i = self.ranges.binary_search_by_key(&addr, |r| r.start).ok()?;
        Some(&self.ranges[i])
    }

    /// `setIsFuncEntry` for an ELF symbol at `symbol_addr` named `symbol_name` (a symbol in a
    /// disassembled text section): the range containing the symbol becomes an entry if its
    /// function has exactly one range or the raw DWARF name equals the symbol's canonical name.
    pub fn note_text_symbol(&mut self, symbol_addr: u64, symbol_name: &str) {
        let Some(i) = self.range_index_at(symbol_addr) else {
            return;
        };
        let range = &self.ranges[i];
        let func = &self.functions[range.func_index];
        if func.ranges.len() == 1
            || (!range.is_func_entry && func.name == canonical_function_name(symbol_name))
        {
            self.ranges[i].is_func_entry = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> FunctionTable {
        FunctionTable::build(
            [
                ("main".to_string(), vec![(0x1100, 0x1180)]),
                ("foo".to_string(), vec![(0x1200, 0x1240), (0x1400, 0x1410)]),
                ("dead".to_string(), vec![(0x0, 0x20)]),
                ("empty".to_string(), vec![(0x1300, 0x1300)]),
                ("dup".to_string(), vec![(0x1100, 0x1120)]),
            ],
            0x1000,
        )
    }

    #[test]
    fn ranges_are_filtered_sorted_and_first_start_wins() {
        let t = table();
        let starts: Vec<(u64, &str)> = t
            .ranges()
            .iter()
            .map(|r| (r.start, r.name.as_str()))
            .collect();
        assert_eq!(starts, [(0x1100, "main"), (0x1200, "foo"), (0x1400, "foo")]);
        assert_eq!(
            t.functions()
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>(),
            ["main", "foo", "dead", "empty", "dup"]
        );
        assert_eq!(t.functions()[4].ranges, [(0x1100, 0x1120)]);
        assert_eq!(t.range_at(0x117f).unwrap().name, "main");
        assert_eq!(t.range_at(0x1180), None);
        assert_eq!(t.range_at(0x10ff), None);
        assert_eq!(t.range_starting_at(0x1400).unwrap().end, 0x1410);
    }

    #[test]
    fn func_entry_rules() {
        let mut t = table();
        t.note_text_symbol(0x1100, "main");
        t.note_text_symbol(0x1400, "foo.cold");
        t.note_text_symbol(0x1200, "foo.llvm.77");
        let entries: Vec<(u64, bool)> = t
            .ranges()
            .iter()
            .map(|r| (r.start, r.is_func_entry))
            .collect();
        assert_eq!(entries, [(0x1100, true), (0x1200, true), (0x1400, false)]);
    }
}

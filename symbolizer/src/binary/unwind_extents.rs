//! Function extents of an ELF file without a symbol table. `strip -s` removes `.symtab` and
//! DWARF but keeps `.eh_frame`, `.eh_frame_hdr` and `.dynsym` (the unwinder needs the first
//! two, the dynamic linker the third), so [`function_extents`] takes one extent per FDE and
//! adds sized `STT_FUNC` dynamic symbols that no FDE starts at. With them the code of a
//! stripped file can be decoded function by function.
//!
//! What the extents are, and are not:
//! * An FDE covers `[initial_location, initial_location + address_range)`. Compilers emit one
//!   per function, from `.cfi_startproc` to `.cfi_endproc`, so it has the function symbol's
//!   `st_value` and `st_size`.
//! * The linker gives the PLT one FDE covering all of `.plt` (and one for `.plt.got`), not one
//!   per entry. llvm-profgen does not disassemble `.plt`; callers that want functions only
//!   filter extents by the section they lie in.
//! * A function split by hot/cold splitting has a separate FDE for its `.cold` part, so the
//!   parts are separate extents.
//! * Code without CFI has no FDE: assembly without `.cfi_*` directives, and GCC's crtstuff
//!   functions (`frame_dummy`, `register_tm_clones`, `deregister_tm_clones`,
//!   `__do_global_dtors_aux`). Such code has an extent only if `.dynsym` exports it with a size.
//! * FDEs carry no names.
//!
//! `.eh_frame_hdr` (LSB Core, "Exception Frames") is a version byte, three pointer encodings
//! (`eh_frame_ptr_enc`, `fde_count_enc`, `table_enc`), `eh_frame_ptr`, `fde_count`, then
//! `fde_count` pairs `(initial_location, FDE address)` sorted by location for binary search.
//! GNU ld and lld write `01 1b 03 3b`: pc-relative sdata4, udata4, and sdata4 relative to the
//! start of `.eh_frame_hdr`, so the section is 12 + 8n bytes.

use std::collections::HashMap;
use std::path::Path;

use gimli::{
    BaseAddresses, CieOrFde, CommonInformationEntry, EhFrame, EhFrameHdr, EhFrameOffset,
    EndianSlice, Pointer, RunTimeEndian, UnwindSection,
};
use object::read::elf::{ElfFile64, SectionHeader as _};
use object::{elf, Endianness, Object, ObjectSection, ObjectSymbol};

use crate::error::{section_label, SymbolizerError};

/// One function extent `[start, end)` from an FDE or a sized `.dynsym` `STT_FUNC` symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FunctionExtent {
    /// First address of the function.
    pub start: u64,
    /// One past the last address of the function.
    pub end: u64,
    /// Where the extent comes from.
    pub source: ExtentSource,
}

/// Where a [`FunctionExtent`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExtentSource {
    /// A frame description entry of `.eh_frame`.
    Fde,
    /// A `.dynsym` `STT_FUNC` symbol with a non-zero size, at an address no FDE starts at.
    DynamicSymbol,
}

/// Function extents of an ELF file without a symbol table: every FDE of `.eh_frame` (through
/// the `.eh_frame_hdr` search table when present and well-formed, else a full walk of
/// `.eh_frame`), plus sized `STT_FUNC` `.dynsym` symbols that no FDE starts at; sorted by
/// start, one per start (the longest).
///
/// Extents of zero length and extents not wholly inside one executable (`SHF_EXECINSTR`)
/// section are left out. The FDEs covering `.plt` and `.plt.got` are kept: callers that want
/// the functions llvm-profgen disassembles filter by section.
///
/// A `.eh_frame_hdr` that cannot be used (no table, an empty table, a malformed table) is
/// ignored in favour of the walk, which reads every FDE anyway. A malformed `.eh_frame` is
/// [`SymbolizerError::MalformedSection`].
pub fn function_extents(
    file: &ElfFile64<'_, Endianness>,
    path: &Path,
) -> Result<Vec<FunctionExtent>, SymbolizerError> {
    let executable = executable_ranges(file);
    let inside_executable = |start: u64, end: u64| {
        start < end && executable.iter().any(|&(s, e)| s <= start && end <= e)
    };

    let mut extents: Vec<FunctionExtent> = Vec::new();
    if let Some(eh_frame) = file.section_by_name(".eh_frame") {
        let eh_frame_data = section_data(&eh_frame, path)?;
        let mut layout = CfiLayout {
            endian: if file.is_little_endian() {
                RunTimeEndian::Little
            } else {
                RunTimeEndian::Big
            },
            eh_frame_hdr: 0,
            eh_frame: eh_frame.address(),
            text: file.section_by_name(".text").map(|s| s.address()),
            got: file.section_by_name(".got").map(|s| s.address()),
        };
        let mut from_table = None;
        if let Some(hdr) = file.section_by_name(".eh_frame_hdr") {
            layout.eh_frame_hdr = hdr.address();
            let hdr_data = section_data(&hdr, path)?;
            from_table = fdes_from_hdr(hdr_data, eh_frame_data, &layout)
                .ok()
                .flatten();
        }
        let fdes = match from_table {
            Some(fdes) => fdes,
            None => fdes_from_walk(eh_frame_data, &layout).map_err(|m| m.into_error(path))?,
        };
        extents.extend(
            fdes.into_iter()
                .filter(|f| inside_executable(f.start, f.end))
                .map(|f| FunctionExtent {
                    start: f.start,
                    end: f.end,
                    source: ExtentSource::Fde,
                }),
        );
    }
    sort_longest_first(&mut extents);

    let mut from_symbols: Vec<FunctionExtent> = file
        .dynamic_symbols()
        .filter(|s| s.elf_symbol().st_type() == elf::STT_FUNC && !s.is_undefined())
        .filter_map(|s| {
            let start = s.address();
            let end = start.checked_add(s.size())?;
            let no_fde = extents.binary_search_by_key(&start, |e| e.start).is_err();
            (no_fde && inside_executable(start, end)).then_some(FunctionExtent {
                start,
                end,
                source: ExtentSource::DynamicSymbol,
            })
        })
        .collect();
    extents.append(&mut from_symbols);
    sort_longest_first(&mut extents);
    Ok(extents)
}

/// Sorts by start and keeps one extent per start, the longest.
fn sort_longest_first(extents: &mut Vec<FunctionExtent>) {
    extents.sort_unstable_by_key(|e| (e.start, std::cmp::Reverse(e.end)));
    extents.dedup_by_key(|e| e.start);
}

/// `[address, address + size)` of every allocated executable section with a size.
fn executable_ranges(file: &ElfFile64<'_, Endianness>) -> Vec<(u64, u64)> {
    let endian = file.endian();
    let wanted = elf::SHF_ALLOC.0 | elf::SHF_EXECINSTR.0;
    file.sections()
        .filter(|s| s.elf_section_header().sh_flags(endian).0 & wanted == wanted)
        .filter_map(|s| Some((s.address(), s.address().checked_add(s.size())?)))
        .filter(|&(start, end)| start < end)
        .collect()
}

fn section_data<'data>(
    section: &object::read::elf::ElfSection64<'data, '_, Endianness>,
    path: &Path,
) -> Result<&'data [u8], SymbolizerError> {
    section.data().map_err(|e| SymbolizerError::SectionData {
        path: path.to_path_buf(),
        section: section_label(section),
        what: e.to_string(),
    })
}

/// The address range of one FDE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FdeRange {
    start: u64,
    end: u64,
}

/// A fault in `.eh_frame` or `.eh_frame_hdr`: the section, the byte offset in it, what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Malformed {
    section: &'static str,
    offset: usize,
    what: &'static str,
}

impl Malformed {
    fn into_error(self, path: &Path) -> SymbolizerError {
        SymbolizerError::MalformedSection {
            path: path.to_path_buf(),
            section: self.section,
            offset: self.offset,
            what: self.what,
        }
    }
}

const EH_FRAME: &str = ".eh_frame";
const EH_FRAME_HDR: &str = ".eh_frame_hdr";

/// Byte order and the addresses that `DW_EH_PE_*` pointer encodings are relative to.
#[derive(Clone, Copy, Debug)]
struct CfiLayout {
    endian: RunTimeEndian,
    /// Address of `.eh_frame_hdr` (base of its pc-relative and data-relative pointers).
    eh_frame_hdr: u64,
    /// Address of `.eh_frame` (base of its pc-relative pointers).
    eh_frame: u64,
    /// Address of `.text` (base of `DW_EH_PE_textrel`).
    text: Option<u64>,
    /// Address of `.got` (base of `DW_EH_PE_datarel` in `.eh_frame`).
    got: Option<u64>,
}

type Reader<'a> = EndianSlice<'a, RunTimeEndian>;

impl CfiLayout {
    fn bases(&self) -> BaseAddresses {
        let mut bases = BaseAddresses::default()
            .set_eh_frame_hdr(self.eh_frame_hdr)
            .set_eh_frame(self.eh_frame);
        if let Some(text) = self.text {
            bases = bases.set_text(text);
        }
        if let Some(got) = self.got {
            bases = bases.set_got(got);
        }
        bases
    }

    fn eh_frame<'a>(&self, data: &'a [u8]) -> EhFrame<Reader<'a>> {
        let mut frame = EhFrame::new(data, self.endian);
        // ELF64: encoded pointers without an explicit size (DW_EH_PE_absptr) are 8 bytes.
        frame.set_address_size(8);
        frame
    }
}

/// CIEs by offset: FDEs of one compilation unit share a CIE, so each is parsed once.
#[derive(Default)]
struct CieCache<'a> {
    cies: HashMap<usize, CommonInformationEntry<Reader<'a>>>,
}

impl<'a> CieCache<'a> {
    fn get(
        &mut self,
        frame: &EhFrame<Reader<'a>>,
        bases: &BaseAddresses,
        offset: EhFrameOffset<usize>,
    ) -> gimli::Result<CommonInformationEntry<Reader<'a>>> {
        if let Some(cie) = self.cies.get(&offset.0) {
            return Ok(cie.clone());
        }
        let cie = frame.cie_from_offset(bases, offset)?;
        self.cies.insert(offset.0, cie.clone());
        Ok(cie)
    }
}

/// The FDE at `offset` of `.eh_frame`.
fn fde_at<'a>(
    frame: &EhFrame<Reader<'a>>,
    bases: &BaseAddresses,
    offset: usize,
    cies: &mut CieCache<'a>,
) -> Result<FdeRange, Malformed> {
    let bad = |what| Malformed {
        section: EH_FRAME,
        offset,
        what,
    };
    let partial = frame
        .partial_fde_from_offset(bases, EhFrameOffset(offset))
        .map_err(|e| bad(describe(e)))?;
    let fde = partial
        .parse(|f, b, o| cies.get(f, b, o))
        .map_err(|e| bad(describe(e)))?;
    fde_range(fde.initial_address(), fde.len()).ok_or(bad("FDE address range overflows"))
}

fn fde_range(start: u64, len: u64) -> Option<FdeRange> {
    Some(FdeRange {
        start,
        end: start.checked_add(len)?,
    })
}

/// Every FDE of `.eh_frame`, read through the `.eh_frame_hdr` search table, in table order.
/// `None` when the header has no table (`fde_count_enc` or `table_enc` is `DW_EH_PE_omit`, or
/// `fde_count` is 0). Each entry is checked against its FDE: the FDE must lie in `.eh_frame`
/// and start at the entry's location, and the table must be sorted.
fn fdes_from_hdr(
    hdr: &[u8],
    eh_frame: &[u8],
    layout: &CfiLayout,
) -> Result<Option<Vec<FdeRange>>, Malformed> {
    let bad = |offset, what| Malformed {
        section: EH_FRAME_HDR,
        offset,
        what,
    };
    let &[version, ptr_enc, count_enc, table_enc, ..] = hdr else {
        return Err(bad(0, "header shorter than its 4 leading bytes"));
    };
    if version != 1 {
        return Err(bad(0, "version is not 1"));
    }
    if count_enc == gimli::DW_EH_PE_omit.0 || table_enc == gimli::DW_EH_PE_omit.0 {
        return Ok(None);
    }
    let ptr_size =
        encoded_size(ptr_enc).ok_or(bad(1, "eh_frame_ptr encoding has no fixed size"))?;
    let count_size =
        encoded_size(count_enc).ok_or(bad(2, "fde_count encoding has no fixed size"))?;
    // Binary search needs entries of one size.
    let field_size = encoded_size(table_enc).ok_or(bad(3, "table encoding has no fixed size"))?;
    let entry_size = 2 * field_size;
    let count_offset = 4 + ptr_size;
    let table_offset = count_offset + count_size;
    if hdr.len() < count_offset {
        return Err(bad(4, "header ends inside eh_frame_ptr"));
    }
    if hdr.len() < table_offset {
        return Err(bad(count_offset, "header ends inside fde_count"));
    }

    let bases = layout.bases();
    let parsed = EhFrameHdr::new(hdr, layout.endian)
        .parse(&bases, 8)
        .map_err(|e| bad(1, describe(e)))?;
    if parsed.eh_frame_ptr() != Pointer::Direct(layout.eh_frame) {
        return Err(bad(4, "eh_frame_ptr is not the address of .eh_frame"));
    }
    let Some(table) = parsed.table() else {
        return Ok(None);
    };
    // `fde_count_enc` has no application bits (gimli rejects them), so fde_count is the plain
    // unsigned value of its bytes; a negative signed count reads as huge and fails the bound.
    let count = read_unsigned(&hdr[count_offset..table_offset], layout.endian);
    let room = (hdr.len() - table_offset) / entry_size;
    let count = match usize::try_from(count) {
        Ok(count) if count <= room => count,
        _ => {
            return Err(bad(
                count_offset,
                "fde_count exceeds what the section holds",
            ))
        }
    };

    let frame = layout.eh_frame(eh_frame);
    let mut cies = CieCache::default();
    let mut entries = table.iter(&bases);
    let mut fdes = Vec::with_capacity(count);
    let mut previous = 0;
    for i in 0..count {
        let entry_offset = table_offset + i * entry_size;
        let (location, fde_address) = match entries.next() {
            Ok(Some((Pointer::Direct(location), Pointer::Direct(fde)))) => (location, fde),
            Ok(Some(_)) => return Err(bad(entry_offset, "indirect pointer in the search table")),
            Ok(None) => return Err(bad(entry_offset, "table ends before fde_count entries")),
            Err(e) => return Err(bad(entry_offset, describe(e))),
        };
        if location < previous {
            return Err(bad(entry_offset, "search table is not sorted by location"));
        }
        previous = location;
        let fde_offset = fde_address
            .checked_sub(layout.eh_frame)
            .and_then(|o| usize::try_from(o).ok())
            .filter(|&o| o < eh_frame.len())
            .ok_or(bad(
                entry_offset + field_size,
                "FDE address lies outside .eh_frame",
            ))?;
        let fde = fde_at(&frame, &bases, fde_offset, &mut cies)?;
        if fde.start != location {
            return Err(bad(
                entry_offset,
                "location differs from its FDE's initial location",
            ));
        }
        fdes.push(fde);
    }
    Ok(Some(fdes))
}

/// Every FDE of `.eh_frame`, in section order, by walking its entries up to the zero
/// terminator or the end of the section. Each entry is at least 8 bytes (length and CIE
/// id/pointer), so the walk is bounded by the section size.
fn fdes_from_walk(eh_frame: &[u8], layout: &CfiLayout) -> Result<Vec<FdeRange>, Malformed> {
    let frame = layout.eh_frame(eh_frame);
    let bases = layout.bases();
    let mut cies = CieCache::default();
    let mut entries = frame.entries(&bases);
    let mut fdes = Vec::new();
    // Offset of the entry `entries.next()` parses.
    let mut next_offset = 0;
    loop {
        let bad = |what| Malformed {
            section: EH_FRAME,
            offset: next_offset,
            what,
        };
        let (offset, length) = match entries.next().map_err(|e| bad(describe(e)))? {
            None => break,
            Some(CieOrFde::Cie(cie)) => {
                let entry = (cie.offset(), cie.entry_len());
                cies.cies.insert(cie.offset(), cie);
                entry
            }
            Some(CieOrFde::Fde(partial)) => {
                let fde = partial
                    .parse(|f, b, o| cies.get(f, b, o))
                    .map_err(|e| bad(describe(e)))?;
                let range = fde_range(fde.initial_address(), fde.len())
                    .ok_or(bad("FDE address range overflows"))?;
                fdes.push(range);
                (partial.offset(), partial.entry_len())
            }
        };
        // The initial length is 4 bytes, or 0xffffffff and 8 more in the 64-bit format.
        let length_field = match eh_frame.get(offset..offset + 4) {
            Some([0xff, 0xff, 0xff, 0xff]) => 12,
            _ => 4,
        };
        next_offset = offset + length_field + length;
    }
    Ok(fdes)
}

/// Size in bytes of a value with pointer encoding `encoding` (low nibble: the format) on
/// ELF64, or `None` for the variable-length LEB128 formats and unknown formats.
fn encoded_size(encoding: u8) -> Option<usize> {
    match gimli::DwEhPe(encoding & 0x0f) {
        gimli::DW_EH_PE_absptr => Some(8),
        gimli::DW_EH_PE_udata2 | gimli::DW_EH_PE_sdata2 => Some(2),
        gimli::DW_EH_PE_udata4 | gimli::DW_EH_PE_sdata4 => Some(4),
        gimli::DW_EH_PE_udata8 | gimli::DW_EH_PE_sdata8 => Some(8),
        _ => None,
    }
}

/// The unsigned integer in `bytes` (2, 4 or 8 of them).
fn read_unsigned(bytes: &[u8], endian: RunTimeEndian) -> u64 {
    let mut buf = [0u8; 8];
    match endian {
        RunTimeEndian::Little => {
            buf[..bytes.len()].copy_from_slice(bytes);
            u64::from_le_bytes(buf)
        }
        RunTimeEndian::Big => {
            buf[8 - bytes.len()..].copy_from_slice(bytes);
            u64::from_be_bytes(buf)
        }
    }
}

/// A fixed description of a gimli error for [`SymbolizerError::MalformedSection`].
fn describe(error: gimli::Error) -> &'static str {
    use gimli::Error as E;
    match error {
        E::UnexpectedEof(_) => "entry runs past the end of the section",
        E::UnknownReservedLength(_) => "initial length is a reserved value",
        E::UnknownVersion(_) => "unknown CIE version",
        E::UnknownAugmentation => "unknown CIE augmentation",
        E::UnknownPointerEncoding(_) => "unknown pointer encoding",
        E::UnsupportedPointerEncoding(_) => "unsupported pointer encoding",
        E::CannotParseOmitPointerEncoding => "required pointer is DW_EH_PE_omit",
        E::UnsupportedIndirectPointer => "indirect pointer where a direct one is required",
        E::PcRelativePointerButSectionBaseIsUndefined
        | E::TextRelativePointerButTextBaseIsUndefined
        | E::DataRelativePointerButDataBaseIsUndefined
        | E::FuncRelativePointerInBadContext => "pointer relative to an unknown base",
        E::NotCieId(_) | E::NotCiePointer(_) => "CIE pointer does not point at a CIE",
        E::NoEntryAtGivenOffset(_) | E::OffsetOutOfBounds(_) => "offset outside the section",
        E::UnsupportedAddressSize(_) => "unsupported address size",
        E::UnsupportedSegmentSize(_) => "unsupported segment selector size",
        E::BadUnsignedLeb128 | E::BadSignedLeb128 => "malformed LEB128 number",
        E::AddressOverflow => "address computation overflows",
        _ => "malformed call frame information",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::path::PathBuf;
    use std::process::Command;

    const LAYOUT: CfiLayout = CfiLayout {
        endian: RunTimeEndian::Little,
        eh_frame_hdr: 0x2000,
        eh_frame: 0x2100,
        text: None,
        got: None,
    };

    /// A CIE (version 1, "zR", FDE pointers pc-relative sdata4) at offset 0, one FDE per
    /// `(start, len)` after it, then the zero terminator; FDE `i` is at offset 24 + 20i.
    fn eh_frame_bytes(fdes: &[(u64, u32)]) -> Vec<u8> {
        let mut b = vec![
            0x14, 0, 0, 0, 0, 0, 0, 0, 1, b'z', b'R', 0, 1, 0x78, 0x10, 1, 0x1b,
        ];
        // DW_CFA_def_cfa rsp+8, DW_CFA_offset rip at cfa-8, two DW_CFA_nop.
        b.extend_from_slice(&[0x0c, 0x07, 0x08, 0x90, 0x01, 0, 0]);
        assert_eq!(b.len(), 24);
        for &(start, len) in fdes {
            let offset = b.len();
            b.extend_from_slice(&16u32.to_le_bytes());
            b.extend_from_slice(&(offset as u32 + 4).to_le_bytes());
            let field = LAYOUT.eh_frame + offset as u64 + 8;
            b.extend_from_slice(&(start.wrapping_sub(field) as u32).to_le_bytes());
            b.extend_from_slice(&len.to_le_bytes());
            b.extend_from_slice(&[0, 0, 0, 0]);
        }
        b.extend_from_slice(&[0, 0, 0, 0]);
        b
    }

    /// `01 1b 03 3b` header; `count` as written; entries `(location, FDE offset)`.
    fn hdr_bytes(count: u32, entries: &[(u64, usize)]) -> Vec<u8> {
        let mut b = vec![1, 0x1b, 0x03, 0x3b];
        let ptr = LAYOUT.eh_frame.wrapping_sub(LAYOUT.eh_frame_hdr + 4);
        b.extend_from_slice(&(ptr as u32).to_le_bytes());
        b.extend_from_slice(&count.to_le_bytes());
        for &(location, offset) in entries {
            let location = location.wrapping_sub(LAYOUT.eh_frame_hdr) as u32;
            let fde = (LAYOUT.eh_frame + offset as u64 - LAYOUT.eh_frame_hdr) as u32;
            b.extend_from_slice(&location.to_le_bytes());
            b.extend_from_slice(&fde.to_le_bytes());
        }
        b
    }

    fn range(start: u64, end: u64) -> FdeRange {
        FdeRange { start, end }
    }

    fn malformed(section: &'static str, offset: usize, what: &'static str) -> Malformed {
        Malformed {
            section,
            offset,
            what,
        }
    }

    #[test]
    fn walk_and_table_read_synthetic_fdes() {
        let eh = eh_frame_bytes(&[(0x1000, 0x40), (0x1040, 0), (0x1080, 0x13)]);
        let expected = vec![
            range(0x1000, 0x1040),
            range(0x1040, 0x1040),
            range(0x1080, 0x1093),
        ];
        assert_eq!(fdes_from_walk(&eh, &LAYOUT), Ok(expected.clone()));
        let hdr = hdr_bytes(3, &[(0x1000, 24), (0x1040, 44), (0x1080, 64)]);
        assert_eq!(hdr.len(), 12 + 8 * 3);
        assert_eq!(fdes_from_hdr(&hdr, &eh, &LAYOUT), Ok(Some(expected)));
        // No table: fde_count 0, or table_enc DW_EH_PE_omit.
        assert_eq!(fdes_from_hdr(&hdr_bytes(0, &[]), &eh, &LAYOUT), Ok(None));
        let mut omitted = hdr_bytes(0, &[]);
        omitted[3] = 0xff;
        assert_eq!(fdes_from_hdr(&omitted[..8], &eh, &LAYOUT), Ok(None));
    }

    #[test]
    fn malformed_eh_frame_names_section_and_offset() {
        let eh = eh_frame_bytes(&[(0x1000, 0x40), (0x1080, 0x13)]);
        // Cut inside the second FDE (offset 44, 20 bytes long).
        assert_eq!(
            fdes_from_walk(&eh[..50], &LAYOUT),
            Err(malformed(
                EH_FRAME,
                44,
                "entry runs past the end of the section"
            ))
        );
        // CIE version 9.
        let mut bad_version = eh.clone();
        bad_version[8] = 9;
        assert_eq!(
            fdes_from_walk(&bad_version, &LAYOUT),
            Err(malformed(EH_FRAME, 0, "unknown CIE version"))
        );
        // The second FDE's CIE pointer points at the first FDE.
        let mut bad_cie = eh.clone();
        bad_cie[48..52].copy_from_slice(&(48u32 - 24).to_le_bytes());
        assert_eq!(
            fdes_from_walk(&bad_cie, &LAYOUT),
            Err(malformed(
                EH_FRAME,
                44,
                "CIE pointer does not point at a CIE"
            ))
        );
        // Garbage: an initial length far past the end.
        assert_eq!(
            fdes_from_walk(&[0xfe, 0xff, 0xff, 0x7f, 0, 0, 0, 0], &LAYOUT),
            Err(malformed(
                EH_FRAME,
                0,
                "entry runs past the end of the section"
            ))
        );
        // Through the table, the FDE's own offset is named.
        let hdr = hdr_bytes(2, &[(0x1000, 24), (0x1080, 44)]);
        assert_eq!(
            fdes_from_hdr(&hdr, &bad_cie, &LAYOUT),
            Err(malformed(
                EH_FRAME,
                44,
                "CIE pointer does not point at a CIE"
            ))
        );
    }

    #[test]
    fn malformed_eh_frame_hdr_names_section_and_offset() {
        let eh = eh_frame_bytes(&[(0x1000, 0x40), (0x1080, 0x13)]);
        let hdr = hdr_bytes(2, &[(0x1000, 24), (0x1080, 44)]);
        let check = |bytes: &[u8], offset, what| {
            assert_eq!(
                fdes_from_hdr(bytes, &eh, &LAYOUT),
                Err(malformed(EH_FRAME_HDR, offset, what)),
                "{bytes:02x?}"
            );
        };
        check(&[], 0, "header shorter than its 4 leading bytes");
        check(&hdr[..3], 0, "header shorter than its 4 leading bytes");
        check(&hdr[..6], 4, "header ends inside eh_frame_ptr");
        check(&hdr[..10], 8, "header ends inside fde_count");
        check(&[2, 0x1b, 0x03, 0x3b], 0, "version is not 1");
        check(&[0xff; 16], 0, "version is not 1");
        check(
            &[1, 0x1b, 0x01, 0x3b, 0, 0, 0, 0, 1],
            2,
            "fde_count encoding has no fixed size",
        );
        // A table cut inside its last entry, and a count of 2^32 - 1 over one entry.
        check(&hdr[..27], 8, "fde_count exceeds what the section holds");
        let mut huge = hdr.clone();
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        check(&huge, 8, "fde_count exceeds what the section holds");
        let mut elsewhere = hdr.clone();
        elsewhere[4..8].copy_from_slice(&0x10u32.to_le_bytes());
        check(
            &elsewhere,
            4,
            "eh_frame_ptr is not the address of .eh_frame",
        );
        check(
            &hdr_bytes(2, &[(0x1080, 44), (0x1000, 24)]),
            20,
            "search table is not sorted by location",
        );
        check(
            &hdr_bytes(2, &[(0x1000, 24), (0x1080, 4000)]),
            24,
            "FDE address lies outside .eh_frame",
        );
        check(
            &hdr_bytes(2, &[(0x1000, 24), (0x1090, 44)]),
            20,
            "location differs from its FDE's initial location",
        );
    }

    #[test]
    fn errors_carry_the_path() {
        let err = malformed(EH_FRAME_HDR, 8, "fde_count exceeds what the section holds")
            .into_error(Path::new("/bin/x"));
        assert_eq!(
            err.to_string(),
            "/bin/x: section .eh_frame_hdr: malformed at byte offset 0x8: \
             fde_count exceeds what the section holds"
        );
    }

    // Real binaries built with clang-19 and GNU binutils.

    fn tools_available(test: &str) -> bool {
        let missing: Vec<&str> = ["clang-19", "strip", "objcopy"]
            .into_iter()
            .filter(|tool| Command::new(tool).arg("--version").output().is_err())
            .collect();
        if missing.is_empty() {
            return true;
        }
        eprintln!(
            "SKIPPED {test}: missing {} (apt-get install clang-19 binutils)",
            missing.join(", ")
        );
        false
    }

    fn temp_dir(test: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("symbolizer-extents-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn run(program: &str, args: &[&std::ffi::OsStr]) {
        let out = Command::new(program).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn compile(dir: &Path, name: &str, source: &str, extra: &[&str]) -> PathBuf {
        let src = dir.join(format!("{name}.c"));
        std::fs::write(&src, source).unwrap();
        let out = dir.join(name);
        let mut args: Vec<&std::ffi::OsStr> = ["-O2", "-fno-omit-frame-pointer"]
            .iter()
            .chain(extra)
            .map(|a| a.as_ref())
            .collect();
        args.extend([src.as_os_str(), "-o".as_ref(), out.as_os_str()]);
        run("clang-19", &args);
        out
    }

    /// `strip -s input -o input.stripped`: no `.symtab`, no DWARF.
    fn stripped(input: &Path) -> PathBuf {
        let out = input.with_extension("stripped");
        run(
            "strip",
            &[
                "-s".as_ref(),
                input.as_os_str(),
                "-o".as_ref(),
                out.as_os_str(),
            ],
        );
        out
    }

    fn extents_of(path: &Path) -> Vec<FunctionExtent> {
        let data = std::fs::read(path).unwrap();
        let file = ElfFile64::<Endianness>::parse(&*data).unwrap();
        function_extents(&file, path).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `(name, start, size, section name)` of every defined `STT_FUNC` symbol of `.symtab`.
    fn symtab_functions(path: &Path) -> Vec<(String, u64, u64, String)> {
        let data = std::fs::read(path).unwrap();
        let file = ElfFile64::<Endianness>::parse(&*data).unwrap();
        file.symbols()
            .filter(|s| s.elf_symbol().st_type() == elf::STT_FUNC && !s.is_undefined())
            .map(|s| {
                let section = s
                    .section_index()
                    .and_then(|i| file.section_by_index(i).ok())
                    .map(|sec| sec.name().unwrap().to_string())
                    .unwrap_or_default();
                (
                    s.name().unwrap().to_string(),
                    s.address(),
                    s.size(),
                    section,
                )
            })
            .collect()
    }

    fn section_range(path: &Path, name: &str) -> Option<(u64, u64)> {
        let data = std::fs::read(path).unwrap();
        let file = ElfFile64::<Endianness>::parse(&*data).unwrap();
        let s = file.section_by_name(name)?;
        Some((s.address(), s.address() + s.size()))
    }

    const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) static int square(int x) { return x * x; }
__attribute__((noinline)) int sum_squares(int n) {
  int s = 0;
  for (int i = 0; i < n; i++) s += square(i + n);
  return s;
}
__attribute__((noinline)) long fib(long n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
__attribute__((noinline)) void report(const char *what, long v) { printf("%s=%ld\n", what, v); }
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 10;
  report("sum", sum_squares(n));
  report("fib", fib(n));
  return 0;
}
"#;

    /// Unstripped: every sized `.text` function symbol has an FDE extent with exactly its
    /// start and end, and `.text` has no other extents; the `.text` functions without one are
    /// exactly GCC's crtstuff functions; the other extents are the PLT sections, one each.
    /// Stripped: the same extents; stripped without `.eh_frame_hdr`: the same again.
    #[test]
    fn extents_match_symbols_and_survive_strip() {
        if !tools_available("extents_match_symbols_and_survive_strip") {
            return;
        }
        let dir = temp_dir("program");
        let binary = compile(&dir, "prog", PROGRAM, &[]);
        let extents = extents_of(&binary);
        let text = section_range(&binary, ".text").unwrap();
        let functions = symtab_functions(&binary);

        let sized: BTreeSet<(u64, u64)> = functions
            .iter()
            .filter(|(_, _, size, section)| *size > 0 && section == ".text")
            .map(|&(_, start, size, _)| (start, start + size))
            .collect();
        let in_text: BTreeSet<(u64, u64)> = extents
            .iter()
            .filter(|e| text.0 <= e.start && e.end <= text.1)
            .inspect(|e| assert_eq!(e.source, ExtentSource::Fde, "{e:x?}"))
            .map(|e| (e.start, e.end))
            .collect();
        assert_eq!(in_text, sized);
        let names: BTreeSet<&str> = functions
            .iter()
            .filter(|f| sized.contains(&(f.1, f.1 + f.2)))
            .map(|f| f.0.as_str())
            .collect();
        for name in ["_start", "main", "fib", "report", "sum_squares", "square"] {
            assert!(names.contains(name), "{name} missing from {names:?}");
        }

        let misses: BTreeSet<&str> = functions
            .iter()
            .filter(|(_, start, _, section)| {
                section == ".text" && !in_text.iter().any(|e| e.0 == *start)
            })
            .map(|f| f.0.as_str())
            .collect();
        let crtstuff = BTreeSet::from([
            "__do_global_dtors_aux",
            "deregister_tm_clones",
            "frame_dummy",
            "register_tm_clones",
        ]);
        assert_eq!(misses, crtstuff);

        let plt: Vec<(u64, u64)> = [".plt", ".plt.got", ".plt.sec"]
            .iter()
            .filter_map(|name| section_range(&binary, name))
            .collect();
        let outside: Vec<(u64, u64)> = extents
            .iter()
            .filter(|e| !(text.0 <= e.start && e.end <= text.1))
            .map(|e| (e.start, e.end))
            .collect();
        assert!(!outside.is_empty());
        for range in &outside {
            assert!(
                plt.contains(range),
                "{range:x?} is not a PLT section {plt:x?}"
            );
        }

        let stripped = stripped(&binary);
        assert!(symtab_functions(&stripped).is_empty());
        assert_eq!(extents_of(&stripped), extents);

        let no_hdr = dir.join("prog.nohdr");
        run(
            "objcopy",
            &[
                "--remove-section".as_ref(),
                ".eh_frame_hdr".as_ref(),
                stripped.as_os_str(),
                no_hdr.as_os_str(),
            ],
        );
        assert_eq!(section_range(&no_hdr, ".eh_frame_hdr"), None);
        assert_eq!(extents_of(&no_hdr), extents);
        std::fs::remove_dir_all(&dir).ok();
    }

    /// The search table of a real binary lists the same FDEs as the walk, in address order.
    #[test]
    fn table_and_walk_agree_on_a_real_binary() {
        if !tools_available("table_and_walk_agree_on_a_real_binary") {
            return;
        }
        let dir = temp_dir("table");
        let binary = compile(&dir, "prog", PROGRAM, &[]);
        let data = std::fs::read(&binary).unwrap();
        let file = ElfFile64::<Endianness>::parse(&*data).unwrap();
        let eh = file.section_by_name(".eh_frame").unwrap();
        let hdr = file.section_by_name(".eh_frame_hdr").unwrap();
        let hdr_data = hdr.data().unwrap();
        assert_eq!(&hdr_data[..4], &[0x01, 0x1b, 0x03, 0x3b]);
        let layout = CfiLayout {
            endian: RunTimeEndian::Little,
            eh_frame_hdr: hdr.address(),
            eh_frame: eh.address(),
            text: None,
            got: None,
        };
        let table = fdes_from_hdr(hdr_data, eh.data().unwrap(), &layout)
            .unwrap()
            .unwrap();
        let mut walk = fdes_from_walk(eh.data().unwrap(), &layout).unwrap();
        assert_eq!(hdr_data.len(), 12 + 8 * walk.len());
        walk.sort_by_key(|f| f.start);
        assert_eq!(table, walk);
        assert!(table.len() >= 6, "{table:x?}");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A corrupted CIE in a real binary is reported with the path and `.eh_frame` offset 0
    /// (the table path fails at the FDE, then the walk at the CIE).
    #[test]
    fn corrupt_eh_frame_of_a_real_binary_is_an_error() {
        if !tools_available("corrupt_eh_frame_of_a_real_binary_is_an_error") {
            return;
        }
        let dir = temp_dir("corrupt");
        let binary = compile(&dir, "prog", PROGRAM, &[]);
        let mut data = std::fs::read(&binary).unwrap();
        let (offset, _) = {
            let file = ElfFile64::<Endianness>::parse(&*data).unwrap();
            file.section_by_name(".eh_frame")
                .unwrap()
                .file_range()
                .unwrap()
        };
        // The first entry is a CIE; its version byte follows length and CIE id.
        data[offset as usize + 8] = 9;
        let file = ElfFile64::<Endianness>::parse(&*data).unwrap();
        match function_extents(&file, &binary) {
            Err(SymbolizerError::MalformedSection {
                path,
                section,
                offset,
                what,
            }) => {
                assert_eq!(path, binary);
                assert_eq!(
                    (section, offset, what),
                    (EH_FRAME, 0, "unknown CIE version")
                );
            }
            other => panic!("{other:x?}"),
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    const LIBRARY: &str = r#"
__asm__(".text\n"
        ".globl add_nocfi\n"
        ".type add_nocfi,@function\n"
        "add_nocfi:\n"
        "  leaq (%rdi,%rsi), %rax\n"
        "  ret\n"
        ".size add_nocfi, .-add_nocfi\n");
__attribute__((noinline)) long scale(long x, long k) { return x * k + 1; }
long combine(long a, long b) { return scale(a, 3) ^ scale(b, 5); }
"#;

    /// A stripped shared library: the exported function written in assembly without CFI has
    /// no FDE and comes from `.dynsym` (5 bytes: `lea (%rdi,%rsi),%rax; ret`); the C functions
    /// come from their FDEs.
    #[test]
    fn dynamic_symbols_fill_in_functions_without_fdes() {
        if !tools_available("dynamic_symbols_fill_in_functions_without_fdes") {
            return;
        }
        let dir = temp_dir("library");
        let library = compile(&dir, "lib.so", LIBRARY, &["-shared", "-fPIC"]);
        let functions = symtab_functions(&library);
        let symbol = |name: &str| {
            let f = functions.iter().find(|f| f.0 == name).unwrap();
            (f.1, f.1 + f.2)
        };
        let stripped = stripped(&library);
        let extents = extents_of(&stripped);

        let from_dynsym: Vec<(u64, u64)> = extents
            .iter()
            .filter(|e| e.source == ExtentSource::DynamicSymbol)
            .map(|e| (e.start, e.end))
            .collect();
        let (start, end) = symbol("add_nocfi");
        assert_eq!(from_dynsym, vec![(start, start + 5)]);
        assert_eq!(end, start + 5);

        let data = std::fs::read(&stripped).unwrap();
        let file = ElfFile64::<Endianness>::parse(&*data).unwrap();
        let text = file.section_by_name(".text").unwrap();
        let at = (start - text.address()) as usize;
        assert_eq!(
            &text.data().unwrap()[at..at + 5],
            &[0x48, 0x8d, 0x04, 0x37, 0xc3]
        );

        for name in ["scale", "combine"] {
            let (start, end) = symbol(name);
            assert!(end > start);
            let extent = FunctionExtent {
                start,
                end,
                source: ExtentSource::Fde,
            };
            assert!(extents.contains(&extent), "{name}: {extents:x?}");
        }
        // Sorted by start, one per start.
        assert!(extents.windows(2).all(|w| w[0].start < w[1].start));
        std::fs::remove_dir_all(&dir).ok();
    }

    /// The HTTP store's load of a stripped library names the extents its exported
    /// functions start at (pprof, flame graphs); counting's load leaves them unnamed, and
    /// both stay address-only. The names are read from the file when asked, not kept.
    #[test]
    fn exports_name_a_stripped_library_s_extents_when_asked() {
        use crate::binary::{LoadOptions, NameSource, ProfiledBinary};
        if !tools_available("exports_name_a_stripped_library_s_extents_when_asked") {
            return;
        }
        let dir = temp_dir("exports");
        let library = compile(&dir, "lib.so", LIBRARY, &["-shared", "-fPIC"]);
        let functions = symtab_functions(&library);
        let start_of = |name: &str| functions.iter().find(|f| f.0 == name).unwrap().1;
        let stripped = stripped(&library);
        let load = |symbol_functions_without_dwarf| {
            ProfiledBinary::load_with(
                &stripped,
                &LoadOptions {
                    symbol_functions_without_dwarf,
                    lazy_code: true,
                    ..LoadOptions::default()
                },
            )
            .unwrap()
        };
        let (named, counting) = (load(true), load(false));
        for name in ["add_nocfi", "scale", "combine"] {
            let start = start_of(name);
            assert_eq!(named.function_label(start + 1), name);
            assert_eq!(counting.function_label(start + 1), format!("0x{start:x}"));
        }
        assert_eq!(*named.name_source(), NameSource::AddressOnly);
        assert_eq!(*counting.name_source(), NameSource::AddressOnly);
        std::fs::remove_dir_all(&dir).ok();
    }
}

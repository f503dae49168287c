//! What the finder needs to know about an ELF file: its GNU build id, its `.gnu_debuglink`
//! and whether it carries symbols or DWARF. Read through [`object::ReadRef`], so a candidate
//! file is read with bounded reads of the headers and of the few sections looked at (a
//! [`object::ReadCache`] over the open file), never whole.

use std::ffi::OsString;

use object::elf;
use object::read::elf::{FileHeader, SectionHeader};
use object::{FileKind, ReadRef};

use super::debuglink::parse_debuglink;

/// Note sections larger than this are not read (a build-id note is 36 bytes for SHA-1).
const MAX_NOTE_SECTION_BYTES: u64 = 1 << 20;
/// A `.gnu_debuglink` larger than this is malformed (a base name, padding and 4 bytes).
const MAX_DEBUGLINK_BYTES: u64 = 4096;

/// The facts about one ELF file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ElfFacts {
    /// The `NT_GNU_BUILD_ID` note's descriptor, when there is one.
    pub build_id: Option<Vec<u8>>,
    /// The `.gnu_debuglink` (debug file base name, CRC-32), when present and well formed.
    pub debuglink: Option<(OsString, u32)>,
    /// A `.symtab` with more than the null symbol, or a `.debug_info` with bytes in the file.
    pub symbols_or_dwarf: bool,
}

/// Reads the facts of `data`; an error says why it is not a readable ELF file.
pub(crate) fn elf_facts<'data, R: ReadRef<'data>>(data: R) -> Result<ElfFacts, String> {
    match FileKind::parse(data) {
        Ok(FileKind::Elf32) => facts_of::<elf::FileHeader32<object::Endianness>, R>(data),
        Ok(FileKind::Elf64) => facts_of::<elf::FileHeader64<object::Endianness>, R>(data),
        Ok(_) | Err(_) => Err("not an ELF file".to_string()),
    }
}

fn facts_of<'data, Elf, R>(data: R) -> Result<ElfFacts, String>
where
    Elf: FileHeader<Endian = object::Endianness>,
    R: ReadRef<'data>,
{
    let bad = |e: object::read::Error| format!("malformed ELF file: {e}");
    let header = Elf::parse(data).map_err(bad)?;
    let endian = header.endian().map_err(bad)?;
    let sections = header.sections(endian, data).map_err(bad)?;
    let file_len = data
        .len()
        .map_err(|()| "cannot read its length".to_string())?;
    let in_file = |offset: u64, size: u64| offset.checked_add(size).is_some_and(|e| e <= file_len);

    let mut facts = ElfFacts::default();
    for section in sections.iter() {
        let sh_type = section.sh_type(endian);
        let size: u64 = section.sh_size(endian).into();
        let offset: u64 = section.sh_offset(endian).into();
        let has_bytes = sh_type != elf::SHT_NOBITS && size > 0 && in_file(offset, size);
        if sh_type == elf::SHT_NOTE && facts.build_id.is_none() {
            if has_bytes && size <= MAX_NOTE_SECTION_BYTES {
                facts.build_id = build_id_note::<Elf, R>(section, endian, data);
            }
            continue;
        }
        if sh_type == elf::SHT_SYMTAB {
            // Entry 0 is the null symbol: a table of only that is empty.
            let entsize: u64 = section.sh_entsize(endian).into();
            if has_bytes && size > entsize.max(1) {
                facts.symbols_or_dwarf = true;
            }
            continue;
        }
        let Ok(name) = sections.section_name(endian, section) else {
            continue;
        };
        match name {
            // `.zdebug_info` is the GNU-compressed spelling of the same section.
            b".debug_info" | b".zdebug_info" if has_bytes => facts.symbols_or_dwarf = true,
            b".gnu_debuglink" if has_bytes && size <= MAX_DEBUGLINK_BYTES => {
                facts.debuglink = section
                    .data(endian, data)
                    .ok()
                    .and_then(|bytes| parse_debuglink(bytes, endian));
            }
            _ => {}
        }
    }
    Ok(facts)
}

fn build_id_note<'data, Elf, R>(
    section: &Elf::SectionHeader,
    endian: object::Endianness,
    data: R,
) -> Option<Vec<u8>>
where
    Elf: FileHeader<Endian = object::Endianness>,
    R: ReadRef<'data>,
{
    let mut notes = section.notes(endian, data).ok()??;
    while let Ok(Some(note)) = notes.next() {
        if note.name() == elf::ELF_NOTE_GNU
            && note.n_type(endian) == elf::NT_GNU_BUILD_ID
            && !note.desc().is_empty()
        {
            return Some(note.desc().to_vec());
        }
    }
    None
}

//! [`ProgramHeader`]s of an ELF image, read with `object`'s ELF parser for 32- and 64-bit
//! images of either byte order, and the arithmetic of `PT_LOAD` segments: the byte at virtual
//! address `v` of a segment with `p_vaddr ≤ v < p_vaddr + p_filesz` lies at file offset
//! `v − p_vaddr + p_offset`.

use collector::BuildId;
use object::elf::{FileHeader32, FileHeader64, ELF_NOTE_GNU, NT_GNU_BUILD_ID};
use object::read::elf::{FileHeader, ProgramHeader as _};
use object::{Endianness, FileKind};

/// ELF `PT_LOAD`.
pub const PT_LOAD: u32 = 1;
/// ELF `PF_X`.
pub const PF_X: u32 = 1;

/// One program header, reduced to the fields pgo-agent uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgramHeader {
    /// `p_type`.
    pub p_type: u32,
    /// `p_flags`.
    pub p_flags: u32,
    /// `p_vaddr`.
    pub p_vaddr: u64,
    /// `p_offset`.
    pub p_offset: u64,
    /// `p_filesz`.
    pub p_filesz: u64,
}

impl ProgramHeader {
    /// True for a `PT_LOAD`.
    pub fn is_load(&self) -> bool {
        self.p_type == PT_LOAD
    }

    /// True for a `PT_LOAD` with `PF_X`.
    pub fn is_executable_load(&self) -> bool {
        self.is_load() && self.p_flags & PF_X != 0
    }

    /// The file offset of virtual address `vaddr` when this segment's file bytes hold it.
    pub fn file_offset_of(&self, vaddr: u64) -> Option<u64> {
        (vaddr >= self.p_vaddr && vaddr - self.p_vaddr < self.p_filesz)
            .then(|| vaddr - self.p_vaddr + self.p_offset)
    }

    /// The virtual address of file offset `offset` when this segment maps it.
    pub fn vaddr_of(&self, offset: u64) -> Option<u64> {
        (offset >= self.p_offset && offset - self.p_offset < self.p_filesz)
            .then(|| offset - self.p_offset + self.p_vaddr)
    }
}

/// The program headers of the ELF image `data`, in file order; `Err` with the parser's
/// message for bytes that are not an ELF image or whose headers lie outside them.
pub fn program_headers(data: &[u8]) -> Result<Vec<ProgramHeader>, String> {
    fn read<H: FileHeader<Endian = Endianness>>(data: &[u8]) -> Result<Vec<ProgramHeader>, String> {
        let header = H::parse(data).map_err(|e| e.to_string())?;
        let endian = header.endian().map_err(|e| e.to_string())?;
        let headers = header
            .program_headers(endian, data)
            .map_err(|e| e.to_string())?;
        Ok(headers
            .iter()
            .map(|ph| ProgramHeader {
                p_type: ph.p_type(endian).0,
                p_flags: ph.p_flags(endian).0,
                p_vaddr: ph.p_vaddr(endian).into(),
                p_offset: ph.p_offset(endian).into(),
                p_filesz: ph.p_filesz(endian).into(),
            })
            .collect())
    }
    match FileKind::parse(data).map_err(|e| e.to_string())? {
        FileKind::Elf32 => read::<FileHeader32<Endianness>>(data),
        FileKind::Elf64 => read::<FileHeader64<Endianness>>(data),
        kind => Err(format!("not an ELF image ({kind:?})")),
    }
}

/// The file offset of `vaddr` in the `PT_LOAD` whose file bytes hold it, if any.
pub fn vaddr_to_file_offset(headers: &[ProgramHeader], vaddr: u64) -> Option<u64> {
    headers
        .iter()
        .filter(|h| h.is_load())
        .find_map(|h| h.file_offset_of(vaddr))
}

/// The inverse: the virtual address of file offset `offset`, if a `PT_LOAD` maps it.
pub fn file_offset_to_vaddr(headers: &[ProgramHeader], offset: u64) -> Option<u64> {
    headers
        .iter()
        .filter(|h| h.is_load())
        .find_map(|h| h.vaddr_of(offset))
}

/// The GNU build id in the `PT_NOTE` segments of an ELF image, found by reading only the
/// ELF header, the program headers and the notes (in a linked file these lie at its start,
/// usually within its first page, so a memory-mapped file has no other page read).
/// `None` for bytes that are not ELF and for images without such a note or with an empty
/// one (a build id only in a section is found by [`super::ElfFacts::parse`]).
pub fn build_id_from_program_headers(data: &[u8]) -> Option<BuildId> {
    fn find<H: FileHeader<Endian = Endianness>>(data: &[u8]) -> Option<BuildId> {
        let header = H::parse(data).ok()?;
        let endian = header.endian().ok()?;
        for ph in header.program_headers(endian, data).ok()? {
            let Ok(Some(mut notes)) = ph.notes(endian, data) else {
                continue;
            };
            while let Ok(Some(note)) = notes.next() {
                if note.name() == ELF_NOTE_GNU
                    && note.n_type(endian) == NT_GNU_BUILD_ID
                    && !note.desc().is_empty()
                {
                    return Some(BuildId(note.desc().to_vec()));
                }
            }
        }
        None
    }

    match FileKind::parse(data).ok()? {
        FileKind::Elf32 => find::<FileHeader32<Endianness>>(data),
        FileKind::Elf64 => find::<FileHeader64<Endianness>>(data),
        _ => None,
    }
}

/// How much of a file [`build_id_of_file_head`] reads: the headers and notes of a linked
/// file lie well within it.
pub const BUILD_ID_HEAD_BYTES: u64 = 64 << 10;

/// [`build_id_from_program_headers`] of the first [`BUILD_ID_HEAD_BYTES`] of the regular
/// file at `path`: a build id checked without loading the file. `Ok(None)` when the head
/// has no such note (or is not ELF); an error when the file cannot be read or is not a
/// regular file.
pub fn build_id_of_file_head(path: &std::path::Path) -> std::io::Result<Option<BuildId>> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut head = Vec::new();
    file.by_ref()
        .take(BUILD_ID_HEAD_BYTES)
        .read_to_end(&mut head)?;
    Ok(build_id_from_program_headers(&head))
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object, ObjectSegment};

    #[test]
    fn the_head_of_a_file_gives_the_whole_file_s_build_id() {
        let exe = std::env::current_exe().unwrap();
        let whole = build_id_from_program_headers(&std::fs::read(&exe).unwrap());
        assert_eq!(build_id_of_file_head(&exe).unwrap(), whole);
        let dir = exe.parent().unwrap();
        assert_eq!(
            build_id_of_file_head(dir).unwrap_err().kind(),
            std::io::ErrorKind::InvalidInput
        );
        let text = std::env::temp_dir().join(format!("not-elf-{}", std::process::id()));
        std::fs::write(&text, b"#!/bin/sh\n").unwrap();
        assert_eq!(build_id_of_file_head(&text).unwrap(), None);
        std::fs::remove_file(&text).unwrap();
    }

    #[test]
    fn the_headers_are_the_segments_object_reads() {
        // This test executable.
        let data = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let headers = program_headers(&data).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let loads: Vec<(u64, u64, u64)> = headers
            .iter()
            .filter(|h| h.is_load())
            .map(|h| (h.p_vaddr, h.p_offset, h.p_filesz))
            .collect();
        let theirs: Vec<(u64, u64, u64)> = file
            .segments()
            .map(|s| (s.address(), s.file_range().0, s.file_range().1))
            .collect();
        assert_eq!(loads, theirs);
        assert!(headers.iter().any(ProgramHeader::is_executable_load));
        assert!(program_headers(b"#!/bin/sh\n").is_err());
        assert!(program_headers(&data[..40]).is_err());
    }

    #[test]
    fn addresses_and_offsets_of_load_segments() {
        let headers = [
            ProgramHeader {
                p_type: 6, // PT_PHDR: never used for the arithmetic
                p_vaddr: 0,
                p_offset: 0x40,
                p_filesz: 0x1000,
                ..ProgramHeader::default()
            },
            ProgramHeader {
                p_type: PT_LOAD,
                p_flags: 5,
                p_vaddr: 0x401000,
                p_offset: 0x1000,
                p_filesz: 0x500,
            },
        ];
        assert_eq!(vaddr_to_file_offset(&headers, 0x401234), Some(0x1234));
        assert_eq!(vaddr_to_file_offset(&headers, 0x401500), None);
        assert_eq!(vaddr_to_file_offset(&headers, 0x10), None);
        assert_eq!(file_offset_to_vaddr(&headers, 0x14ff), Some(0x4014ff));
        assert_eq!(file_offset_to_vaddr(&headers, 0x40), None);
    }

    #[test]
    fn the_build_id_of_the_program_headers_is_the_one_of_the_sections() {
        // This test executable: linked with a GNU build id (the toolchain's default).
        let data = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let id = BuildId(file.build_id().unwrap().unwrap().to_vec());
        assert_eq!(build_id_from_program_headers(&data), Some(id));
        assert_eq!(build_id_from_program_headers(b"#!/bin/sh\n"), None);
        assert_eq!(build_id_from_program_headers(&data[..40]), None);
    }
}

//! [`MapsEntry`]: one line of `/proc/PID/maps`, and its conversion to the
//! `PERF_RECORD_MMAP2` the kernel would have emitted for it ([`crate::Mmap2Event`]).
//!
//! Also reads the facts the ground truth needs about a mapped ELF file: its GNU build id
//! (the `NT_GNU_BUILD_ID` note, read with `object`) and its load bias.

use std::path::Path;

use object::{Object, ObjectSegment};

use super::RecorderError;
use crate::{BuildId, Mmap2Event};

/// `PROT_READ`.
pub const PROT_READ: u32 = 1;
/// `PROT_WRITE`.
pub const PROT_WRITE: u32 = 2;
/// `PROT_EXEC`.
pub const PROT_EXEC: u32 = 4;
/// `MAP_SHARED`.
pub const MAP_SHARED: u32 = 1;
/// `MAP_PRIVATE`.
pub const MAP_PRIVATE: u32 = 2;

/// The largest ELF file whose build id and segments we read (they drive one allocation).
pub const MAX_ELF_BYTES: u64 = 1 << 30;

/// One `/proc/PID/maps` line: `start-end perms offset maj:min inode [path]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MapsEntry {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `PROT_*` bits from `rwx`.
    pub prot: u32,
    /// True for `s` (shared), false for `p` (private).
    pub shared: bool,
    /// File offset of `start`.
    pub offset: u64,
    /// Device major (hex in the file).
    pub maj: u32,
    /// Device minor (hex in the file).
    pub min: u32,
    /// Inode (0 for anonymous and special mappings).
    pub ino: u64,
    /// Path, `[vdso]`, `[stack]`..., or empty for anonymous memory.
    pub path: String,
}

impl MapsEntry {
    /// True when the mapping is executable.
    pub fn is_executable(&self) -> bool {
        self.prot & PROT_EXEC != 0
    }

    /// True when `addr` lies inside the mapping.
    pub fn contains(&self, addr: u64) -> bool {
        (self.start..self.end).contains(&addr)
    }

    /// The name perf reports for the mapping: the path, or `//anon` for anonymous memory.
    pub fn perf_filename(&self) -> String {
        if self.path.is_empty() {
            "//anon".to_string()
        } else {
            self.path.clone()
        }
    }

    /// The MMAP2 event the kernel emits for this mapping in task `pid`/`tid`.
    pub fn to_mmap2(&self, pid: i32, tid: i32) -> Mmap2Event {
        Mmap2Event {
            pid,
            tid,
            addr: self.start,
            len: self.end - self.start,
            pgoff: self.offset,
            prot: self.prot,
            flags: if self.shared { MAP_SHARED } else { MAP_PRIVATE },
            maj: self.maj,
            min: self.min,
            ino: self.ino,
            ino_generation: 0,
            build_id: None,
            filename: self.perf_filename(),
        }
    }
}

/// Parses the whole text of a maps file; `path` names it in errors.
pub fn parse_maps(text: &str, path: &Path) -> Result<Vec<MapsEntry>, RecorderError> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            parse_line(line).ok_or_else(|| RecorderError::BadMapsLine {
                path: path.to_path_buf(),
                line: i + 1,
                text: line.chars().take(200).collect(),
            })
        })
        .collect()
}

/// Reads and parses `/proc/<pid>/maps`.
pub fn read_maps(pid: i32) -> Result<Vec<MapsEntry>, RecorderError> {
    let path = std::path::PathBuf::from(format!("/proc/{pid}/maps"));
    let text = std::fs::read_to_string(&path).map_err(|source| RecorderError::Io {
        path: path.clone(),
        source,
    })?;
    parse_maps(&text, &path)
}

fn parse_line(line: &str) -> Option<MapsEntry> {
    // Five space-separated fields, then the path (which may contain spaces) after padding.
    let mut rest = line;
    let mut fields = [""; 5];
    for field in fields.iter_mut() {
        rest = rest.trim_start_matches(' ');
        let end = rest.find(' ').unwrap_or(rest.len());
        *field = &rest[..end];
        rest = &rest[end..];
    }
    let path = rest.trim_start_matches(' ').to_string();
    let (start, end) = fields[0].split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    if end < start {
        return None;
    }
    let perms = fields[1].as_bytes();
    if perms.len() != 4 {
        return None;
    }
    let mut prot = 0;
    if perms[0] == b'r' {
        prot |= PROT_READ;
    }
    if perms[1] == b'w' {
        prot |= PROT_WRITE;
    }
    if perms[2] == b'x' {
        prot |= PROT_EXEC;
    }
    let shared = perms[3] == b's';
    let offset = u64::from_str_radix(fields[2], 16).ok()?;
    let (maj, min) = fields[3].split_once(':')?;
    let maj = u32::from_str_radix(maj, 16).ok()?;
    let min = u32::from_str_radix(min, 16).ok()?;
    let ino = fields[4].parse().ok()?;
    Some(MapsEntry {
        start,
        end,
        prot,
        shared,
        offset,
        maj,
        min,
        ino,
        path,
    })
}

/// What the recorder knows about one mapped ELF image.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ElfFacts {
    /// The GNU build id, empty when the file has none or could not be read.
    pub build_id: BuildId,
    /// `(p_vaddr - p_offset, p_offset & !0xfff, p_offset + p_filesz)` of each loadable segment:
    /// turns a file offset into its link-time virtual address.
    pub segments: Vec<(u64, u64, u64)>,
}

impl ElfFacts {
    /// Parses an ELF image (a file's bytes, or the vdso read from memory). Non-ELF bytes give
    /// empty facts: the recorder still records the mapping, only without build id.
    pub fn parse(data: &[u8]) -> ElfFacts {
        let Ok(file) = object::File::parse(data) else {
            return ElfFacts::default();
        };
        let build_id = file
            .build_id()
            .ok()
            .flatten()
            .map(|b| BuildId(b.to_vec()))
            .unwrap_or_default();
        let segments = file
            .segments()
            .map(|seg| {
                let (offset, size) = seg.file_range();
                (
                    seg.address().wrapping_sub(offset),
                    offset & !0xfff,
                    offset.saturating_add(size),
                )
            })
            .collect();
        ElfFacts { build_id, segments }
    }

    /// Reads the facts of the ELF file at `path`.
    pub fn read(path: &Path) -> Result<ElfFacts, RecorderError> {
        let io = |source| RecorderError::Io {
            path: path.to_path_buf(),
            source,
        };
        let len = std::fs::metadata(path).map_err(io)?.len();
        if len > MAX_ELF_BYTES {
            return Err(RecorderError::LimitExceeded {
                what: "ELF file size",
                value: len,
                max: MAX_ELF_BYTES,
            });
        }
        let data = std::fs::read(path).map_err(io)?;
        Ok(ElfFacts::parse(&data))
    }

    /// The load bias of a mapping of this file (runtime address minus link-time vaddr), from
    /// the mapping's start address and file offset. Falls back to `start - offset` when no
    /// segment covers the offset.
    pub fn load_bias(&self, start: u64, offset: u64) -> u64 {
        // A page can hold the end of one segment and the start of the next: the segment
        // whose page-aligned start is exactly the mapping's offset is the one mapped there.
        let delta = self
            .segments
            .iter()
            .rev()
            .find(|&&(_, lo, _)| lo == offset)
            .or_else(|| {
                self.segments
                    .iter()
                    .find(|&&(_, lo, hi)| offset >= lo && offset < hi)
            })
            .map(|&(delta, _, _)| delta)
            .unwrap_or(0);
        start.wrapping_sub(offset.wrapping_add(delta))
    }
}

/// The GNU build id in the `PT_NOTE` segments of an ELF image, found by reading only the
/// ELF header, the program headers and the notes (in a linked file these lie at its start,
/// usually within its first page, so a memory-mapped file has no other page read).
/// `None` for bytes that are not ELF and for images without such a note or with an empty
/// one (a build id only in a section is found by [`ElfFacts::parse`]).
pub fn build_id_from_program_headers(data: &[u8]) -> Option<BuildId> {
    use object::elf::{FileHeader32, FileHeader64, ELF_NOTE_GNU, NT_GNU_BUILD_ID};
    use object::read::elf::{FileHeader, ProgramHeader};
    use object::{Endianness, FileKind};

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

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d4a7e00000-55d4a7e01000 r--p 00000000 fe:01 1835033                    /work/a b/prog
55d4a7e01000-55d4a7e02000 r-xp 00001000 fe:01 1835033                    /work/a b/prog
7ffd1c9f6000-7ffd1c9f8000 r-xp 00000000 00:00 0                          [vdso]
7f0000000000-7f0000001000 rwxs 00000000 00:00 0 
";

    #[test]
    fn the_build_id_of_the_program_headers_is_the_one_of_the_sections() {
        // This test executable: linked with a GNU build id (the toolchain's default).
        let data = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let facts = ElfFacts::parse(&data);
        assert!(!facts.build_id.is_empty());
        assert_eq!(build_id_from_program_headers(&data), Some(facts.build_id));
        assert_eq!(build_id_from_program_headers(b"#!/bin/sh\n"), None);
        assert_eq!(build_id_from_program_headers(&data[..40]), None);
    }

    #[test]
    fn parses_maps_lines() {
        let maps = parse_maps(MAPS, Path::new("maps")).unwrap();
        assert_eq!(maps.len(), 4);
        assert_eq!(
            maps[1],
            MapsEntry {
                start: 0x55d4a7e01000,
                end: 0x55d4a7e02000,
                prot: PROT_READ | PROT_EXEC,
                shared: false,
                offset: 0x1000,
                maj: 0xfe,
                min: 1,
                ino: 1835033,
                path: "/work/a b/prog".into(),
            }
        );
        assert!(!maps[0].is_executable());
        assert_eq!(maps[2].path, "[vdso]");
        assert_eq!(maps[3].perf_filename(), "//anon");
        assert!(maps[3].shared);
        let ev = maps[1].to_mmap2(7, 8);
        assert_eq!(
            (ev.pid, ev.tid, ev.addr, ev.len, ev.pgoff, ev.prot, ev.flags),
            (7, 8, 0x55d4a7e01000, 0x1000, 0x1000, 5, 2)
        );
        assert_eq!((ev.maj, ev.min, ev.ino), (0xfe, 1, 1835033));
    }

    #[test]
    fn rejects_bad_lines_with_their_position() {
        let err = parse_maps("0-1 r-xp 0 00:00 0\nzzz\n", Path::new("m")).unwrap_err();
        assert!(
            matches!(err, RecorderError::BadMapsLine { line: 2, .. }),
            "{err}"
        );
        assert!(parse_line("2000-1000 r-xp 0 00:00 0").is_none());
        assert!(parse_line("1000-2000 r-x 0 00:00 0").is_none());
    }

    #[test]
    fn load_bias_from_segments() {
        // A PIE text segment: p_offset 0x1a40, p_vaddr 0x2a40 (delta 0x1000), mapped at
        // 0x5555_5555_6000 from file offset 0x1000: link vaddr of offset 0x1000 is 0x2000.
        let facts = ElfFacts {
            build_id: BuildId::default(),
            segments: vec![(0, 0, 0x1a40), (0x1000, 0x1000, 0x3000)],
        };
        assert_eq!(facts.load_bias(0x5555_5555_6000, 0x1000), 0x5555_5555_4000);
        // A non-PIE segment mapped at its link address has bias 0.
        let facts = ElfFacts {
            build_id: BuildId::default(),
            segments: vec![(0x400000, 0, 0x2000)],
        };
        assert_eq!(facts.load_bias(0x401000, 0x1000), 0);
    }
}

//! [`ElfFacts`]: what the recorder and the daemon need of a mapped ELF image: its GNU build
//! id and, from its `PT_LOAD` segments, the load bias of a mapping of it.

use std::path::Path;

use collector::BuildId;
use object::Object;

use super::program_headers::program_headers;
use crate::SymbolizerError;

/// The largest ELF file whose build id and segments are read whole (they drive one
/// allocation).
pub const MAX_ELF_BYTES: u64 = 1 << 30;

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
        let build_id = object::File::parse(data)
            .ok()
            .and_then(|file| file.build_id().ok().flatten().map(|b| BuildId(b.to_vec())))
            .unwrap_or_default();
        let segments = program_headers(data)
            .unwrap_or_default()
            .iter()
            .filter(|h| h.is_load())
            .map(|h| {
                (
                    h.p_vaddr.wrapping_sub(h.p_offset),
                    h.p_offset & !0xfff,
                    h.p_offset.saturating_add(h.p_filesz),
                )
            })
            .collect();
        ElfFacts { build_id, segments }
    }

    /// Reads the facts of the ELF file at `path` (at most [`MAX_ELF_BYTES`]).
    pub fn read(path: &Path) -> Result<ElfFacts, SymbolizerError> {
        let io = |source| SymbolizerError::Io {
            path: path.to_path_buf(),
            source,
        };
        let len = std::fs::metadata(path).map_err(io)?.len();
        if len > MAX_ELF_BYTES {
            return Err(SymbolizerError::TooLarge {
                path: path.to_path_buf(),
                what: "the ELF file",
                size: len,
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn facts_of_this_executable() {
        let path = std::env::current_exe().unwrap();
        let facts = ElfFacts::read(&path).unwrap();
        assert!(!facts.build_id.is_empty());
        assert!(!facts.segments.is_empty());
        assert_eq!(ElfFacts::parse(b"#!/bin/sh\n"), ElfFacts::default());
    }
}

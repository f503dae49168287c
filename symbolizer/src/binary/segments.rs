//! [`LoadSegments`]: where the binary wants to be loaded, by llvm-profgen 19's rules
//! (`ProfiledBinary::setPreferredTextSegmentAddresses`, 4 KiB pages assumed):
//!
//! * `FirstLoadableAddress`: the first *non-zero* page-aligned `p_vaddr` of a `PT_LOAD` (the
//!   code tests `if (!FirstLoadableAddress)`, so a PIE's first segment at 0 does not stick);
//! * for each `PT_LOAD` with `PF_X`: `p_vaddr & ~0xfff` is a preferred text segment address and
//!   `p_offset & ~0xfff` a text segment offset;
//! * the preferred base is the first preferred text segment address; none is an error
//!   ("no executable segment found").
//!
//! The 2026 change to `p_vaddr - p_offset` (llvm-project PR 217887) is deliberately not applied.

/// llvm-profgen's assumed page size.
pub const PAGE_SIZE: u64 = 0x1000;

pub use crate::elf_image::{ProgramHeader, PF_X, PT_LOAD};

/// The preferred load layout of a binary's executable segments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadSegments {
    /// Page-aligned vaddr of the first loadable segment (see the module docs for the quirk).
    pub first_loadable_address: u64,
    /// Page-aligned vaddr of each executable `PT_LOAD`, in program-header order.
    pub preferred_text_segment_addresses: Vec<u64>,
    /// Page-aligned file offset of each executable `PT_LOAD`, in program-header order.
    pub text_segment_offsets: Vec<u64>,
}

impl LoadSegments {
    /// Applies the rules to the program headers; `None` when no executable `PT_LOAD` exists.
    pub fn from_program_headers(
        headers: impl IntoIterator<Item = ProgramHeader>,
    ) -> Option<LoadSegments> {
        let mask = !(PAGE_SIZE - 1);
        let mut segments = LoadSegments {
            first_loadable_address: 0,
            preferred_text_segment_addresses: Vec::new(),
            text_segment_offsets: Vec::new(),
        };
        for ph in headers {
            if ph.p_type != PT_LOAD {
                continue;
            }
            if segments.first_loadable_address == 0 {
                segments.first_loadable_address = ph.p_vaddr & mask;
            }
            if ph.p_flags & PF_X != 0 {
                segments
                    .preferred_text_segment_addresses
                    .push(ph.p_vaddr & mask);
                segments.text_segment_offsets.push(ph.p_offset & mask);
            }
        }
        (!segments.preferred_text_segment_addresses.is_empty()).then_some(segments)
    }

    /// The preferred base: the first executable segment's page-aligned vaddr.
    pub fn preferred_base(&self) -> u64 {
        self.preferred_text_segment_addresses[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(p_flags: u32, p_vaddr: u64, p_offset: u64) -> ProgramHeader {
        ProgramHeader {
            p_type: PT_LOAD,
            p_flags,
            p_vaddr,
            p_offset,
            p_filesz: 0x100,
        }
    }

    #[test]
    fn lld_pie_layout() {
        // ld.lld-19 -pie: R at 0, R E at 0x1740 (offset 0x740), RW at 0x2xxx.
        let segs = LoadSegments::from_program_headers([
            ProgramHeader {
                p_type: 6,
                p_flags: 4,
                p_vaddr: 0x40,
                p_offset: 0x40,
                p_filesz: 0x1c0,
            }, // PT_PHDR
            load(4, 0x0, 0x0),
            load(5, 0x1740, 0x740),
            load(6, 0x2970, 0x970),
        ])
        .unwrap();
        assert_eq!(segs.preferred_base(), 0x1000);
        assert_eq!(segs.text_segment_offsets, [0x0]);
        // The first PT_LOAD is at 0, so FirstLoadableAddress takes the next one.
        assert_eq!(segs.first_loadable_address, 0x1000);
    }

    #[test]
    fn non_pie_and_missing_exec() {
        let segs =
            LoadSegments::from_program_headers([load(4, 0x400000, 0), load(5, 0x401000, 0x1000)])
                .unwrap();
        assert_eq!(segs.first_loadable_address, 0x400000);
        assert_eq!(segs.preferred_text_segment_addresses, [0x401000]);
        assert_eq!(
            LoadSegments::from_program_headers([load(4, 0x400000, 0)]),
            None
        );
    }
}

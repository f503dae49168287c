//! [`BinaryPlacement`]: where the profiled binary is loaded, from MMAP2 events, and the
//! rebasing of process addresses (AVMA) to the binary's preferred addresses (SVMA).
//!
//! llvm-profgen 19 (`PerfScriptReader::updateBinaryAddress`) keeps one base address per
//! binary, initialised to the preferred base; events are matched by the basename of the
//! mapped path, optionally by `--pid`; the mapping of the first executable segment sets
//! the base ("latest mapping wins", a binary can be unloaded and reloaded); mappings of
//! other executable segments, or of later parts of a segment, must be consecutive.

use collector::Mmap2Event;

use crate::UnwindError;

/// What placement needs to know about the binary (the symbolizer's `ProfiledBinary` fills
/// it; kept here so the unwinder does not depend on the symbolizer).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct BinaryLoadInfo {
    /// The binary's file name (basename), compared with the basename of mapped paths.
    pub name: String,
    /// The preferred (link-time) base: the page-aligned vaddr of the first executable
    /// `PT_LOAD`.
    pub preferred_base: u64,
    /// Page-aligned file offsets of the executable `PT_LOAD`s, ascending.
    pub text_segment_offsets: Vec<u64>,
    /// Page-aligned vaddrs of the same segments.
    pub preferred_text_segment_addresses: Vec<u64>,
    /// The binary is the kernel image (llvm-profgen's `--kernel`): it is placed by the
    /// `[kernel.kallsyms]` mmap events ([`KERNEL_IMAGE_NAMES`]), whatever their offset, not
    /// by its file name.
    pub kernel: bool,
}

/// The mapped names of the kernel image in perf's events (`perf script` prints
/// `PERF_RECORD_MMAP -1/0: [0xffffffff81000000(…) @ 0xffffffff81000000]: x
/// [kernel.kallsyms]_text`); llvm-profgen 19's `ProfiledBinary::isKernelImageName`.
pub const KERNEL_IMAGE_NAMES: [&str; 3] = [
    "[kernel.kallsyms]",
    "[kernel.kallsyms]_stext",
    "[kernel.kallsyms]_text",
];

/// What an MMAP2 event did to the placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmapOutcome {
    /// Another file, or another process than `--pid`.
    Ignored,
    /// The binary mapped at the current base, or another segment consistent with it.
    Confirmed,
    /// The first executable segment mapped at a new base.
    Rebased,
}

/// The profiled binary's current load base and the rebasing rule.
#[derive(Clone, Debug)]
pub struct BinaryPlacement {
    load: BinaryLoadInfo,
    pid_filter: Option<u32>,
    base: u64,
    loaded_by_mmap: bool,
}

/// The file name part of a path, as `llvm::sys::path::filename` gives it on Linux.
fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

impl BinaryPlacement {
    /// Placement at the preferred base until an MMAP2 event says otherwise.
    pub fn new(load: BinaryLoadInfo, pid_filter: Option<u32>) -> Result<Self, UnwindError> {
        if load.text_segment_offsets.is_empty() {
            return Err(UnwindError::NoExecutableSegment { binary: load.name });
        }
        if load.text_segment_offsets.len() != load.preferred_text_segment_addresses.len() {
            return Err(UnwindError::InconsistentLoadInfo {
                offsets: load.text_segment_offsets.len(),
                addresses: load.preferred_text_segment_addresses.len(),
                binary: load.name,
            });
        }
        Ok(BinaryPlacement {
            base: load.preferred_base,
            load,
            pid_filter,
            loaded_by_mmap: false,
        })
    }

    /// The binary's load description.
    pub fn load(&self) -> &BinaryLoadInfo {
        &self.load
    }

    /// The current runtime base of the first executable segment.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// True once an MMAP2 event of the binary was seen (else the preferred base is used).
    pub fn is_loaded_by_mmap(&self) -> bool {
        self.loaded_by_mmap
    }

    /// The binary's preferred address for a process address: `addr − base + preferred`
    /// (wrapping, like llvm-profgen's unsigned arithmetic).
    pub fn canonical(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.base)
            .wrapping_add(self.load.preferred_base)
    }

    /// True when `event` maps the binary: its file name, or for the kernel one of
    /// [`KERNEL_IMAGE_NAMES`].
    pub fn maps_the_binary(&self, event: &Mmap2Event) -> bool {
        let name = basename(&event.filename);
        if self.load.kernel {
            KERNEL_IMAGE_NAMES.contains(&name)
        } else {
            name == self.load.name
        }
    }

    /// Applies one MMAP2 event (llvm-profgen's `updateBinaryAddress`).
    pub fn observe(&mut self, event: &Mmap2Event) -> Result<MmapOutcome, UnwindError> {
        if !self.maps_the_binary(event) {
            return Ok(MmapOutcome::Ignored);
        }
        if let Some(pid) = self.pid_filter {
            if event.pid != pid as i32 {
                return Ok(MmapOutcome::Ignored);
            }
        }
        if event.addr == self.base {
            self.loaded_by_mmap = true;
            return Ok(MmapOutcome::Confirmed);
        }
        let offsets = &self.load.text_segment_offsets;
        // The kernel image's mapping sets the base whatever its offset (perf gives the
        // kernel's start address there).
        if self.load.kernel || event.pgoff == offsets[0] {
            self.base = event.addr;
            self.loaded_by_mmap = true;
            return Ok(MmapOutcome::Rebased);
        }
        let index = offsets.partition_point(|&o| o < event.pgoff);
        let delta = event.addr.wrapping_sub(self.base);
        let err = |make: fn(i32, u64, u64, String) -> UnwindError| {
            Err(make(
                event.pid,
                event.addr,
                event.pgoff,
                event.filename.clone(),
            ))
        };
        if index < offsets.len() && offsets[index] == event.pgoff {
            let expected = self.load.preferred_text_segment_addresses[index]
                .wrapping_sub(self.load.preferred_base);
            if expected != delta {
                return err(
                    |pid, addr, pgoff, filename| UnwindError::SegmentsNotConsecutive {
                        pid,
                        addr,
                        pgoff,
                        filename,
                    },
                );
            }
        } else if index == 0 {
            return err(
                |pid, addr, pgoff, filename| UnwindError::FileOffsetNotFound {
                    pid,
                    addr,
                    pgoff,
                    filename,
                },
            );
        } else if event.pgoff - offsets[index - 1] != delta {
            return err(
                |pid, addr, pgoff, filename| UnwindError::SegmentNotConsecutiveMmaps {
                    pid,
                    addr,
                    pgoff,
                    filename,
                },
            );
        }
        // llvm-profgen leaves IsLoadedByMMap unchanged for these events.
        Ok(MmapOutcome::Confirmed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load() -> BinaryLoadInfo {
        BinaryLoadInfo {
            name: "prog".into(),
            preferred_base: 0x1000,
            text_segment_offsets: vec![0x1000, 0x5000],
            preferred_text_segment_addresses: vec![0x1000, 0x7000],
            kernel: false,
        }
    }

    fn mmap(path: &str, pid: i32, addr: u64, pgoff: u64) -> Mmap2Event {
        Mmap2Event {
            pid,
            tid: pid,
            addr,
            len: 0x1000,
            pgoff,
            prot: 5,
            filename: path.into(),
            ..Mmap2Event::default()
        }
    }

    #[test]
    fn preferred_base_until_mapped() {
        let p = BinaryPlacement::new(load(), None).unwrap();
        assert_eq!(p.canonical(0x1234), 0x1234);
        assert!(!p.is_loaded_by_mmap());
    }

    #[test]
    fn first_text_segment_rebases_latest_wins() {
        let mut p = BinaryPlacement::new(load(), None).unwrap();
        let ev = mmap("/tmp/x/prog", 7, 0x5555_5555_5000, 0x1000);
        assert_eq!(p.observe(&ev).unwrap(), MmapOutcome::Rebased);
        assert_eq!(p.canonical(0x5555_5555_5123), 0x1123);
        let ev = mmap("/other/prog", 8, 0x7000_0000_0000, 0x1000);
        assert_eq!(p.observe(&ev).unwrap(), MmapOutcome::Rebased);
        assert_eq!(p.canonical(0x7000_0000_0010), 0x1010);
        // External addresses wrap, as in llvm-profgen.
        assert_eq!(
            p.canonical(0x10),
            0x10u64.wrapping_sub(0x7000_0000_0000) + 0x1000
        );
    }

    #[test]
    fn the_kernel_is_placed_by_its_image_names_whatever_the_offset() {
        let kernel = BinaryLoadInfo {
            name: "vmlinux".into(),
            kernel: true,
            ..load()
        };
        let mut p = BinaryPlacement::new(kernel, None).unwrap();
        // Its own file name does not place it; perf's names for the image do.
        let by_name = mmap("/boot/vmlinux", -1, 0xffff_ffff_8100_0000, 0x1000);
        assert_eq!(p.observe(&by_name).unwrap(), MmapOutcome::Ignored);
        let text = mmap(
            "[kernel.kallsyms]_text",
            -1,
            0xffff_ffff_8100_0000,
            0xffff_ffff_8100_0000,
        );
        assert_eq!(p.observe(&text).unwrap(), MmapOutcome::Rebased);
        assert!(p.is_loaded_by_mmap());
        assert_eq!(p.canonical(0xffff_ffff_8100_0123), 0x1123);
        for (i, name) in (1..).zip(KERNEL_IMAGE_NAMES) {
            let ev = mmap(name, -1, 0xffff_ffff_8100_0000 + i * 0x10_0000, 0);
            assert_eq!(p.observe(&ev).unwrap(), MmapOutcome::Rebased, "{name}");
        }
        // A user binary ignores the kernel's events.
        let mut user = BinaryPlacement::new(load(), None).unwrap();
        assert_eq!(user.observe(&text).unwrap(), MmapOutcome::Ignored);
    }

    #[test]
    fn name_and_pid_filters() {
        let mut p = BinaryPlacement::new(load(), Some(9)).unwrap();
        assert_eq!(
            p.observe(&mmap("/lib/libc.so", 9, 0x9000, 0x1000)).unwrap(),
            MmapOutcome::Ignored
        );
        assert_eq!(
            p.observe(&mmap("/bin/prog2", 9, 0x9000, 0x1000)).unwrap(),
            MmapOutcome::Ignored
        );
        assert_eq!(
            p.observe(&mmap("/bin/prog", 8, 0x9000, 0x1000)).unwrap(),
            MmapOutcome::Ignored
        );
        assert_eq!(
            p.observe(&mmap("prog", 9, 0x9000, 0x1000)).unwrap(),
            MmapOutcome::Rebased
        );
        assert_eq!(p.base(), 0x9000);
    }

    #[test]
    fn same_base_confirms() {
        let mut p = BinaryPlacement::new(load(), None).unwrap();
        // Mapped at the preferred base: any offset is accepted and marks it loaded.
        assert_eq!(
            p.observe(&mmap("prog", 1, 0x1000, 0x0)).unwrap(),
            MmapOutcome::Confirmed
        );
        assert!(p.is_loaded_by_mmap());
    }

    #[test]
    fn other_segments_must_be_consecutive() {
        let mut p = BinaryPlacement::new(load(), None).unwrap();
        p.observe(&mmap("prog", 1, 0x40_0000, 0x1000)).unwrap();
        // Second text segment: preferred distance 0x6000.
        assert_eq!(
            p.observe(&mmap("prog", 1, 0x40_6000, 0x5000)).unwrap(),
            MmapOutcome::Confirmed
        );
        assert!(matches!(
            p.observe(&mmap("prog", 1, 0x40_7000, 0x5000)),
            Err(UnwindError::SegmentsNotConsecutive { pgoff: 0x5000, .. })
        ));
        // A later part of the first segment mapped by its own mmap.
        assert_eq!(
            p.observe(&mmap("prog", 1, 0x40_2000, 0x3000)).unwrap(),
            MmapOutcome::Confirmed
        );
        assert!(matches!(
            p.observe(&mmap("prog", 1, 0x40_3000, 0x3000)),
            Err(UnwindError::SegmentNotConsecutiveMmaps { .. })
        ));
        assert!(matches!(
            p.observe(&mmap("prog", 1, 0x3f_0000, 0x0)),
            Err(UnwindError::FileOffsetNotFound { pgoff: 0, .. })
        ));
    }

    #[test]
    fn rejects_binary_without_text() {
        let mut l = load();
        l.text_segment_offsets.clear();
        l.preferred_text_segment_addresses.clear();
        assert!(matches!(
            BinaryPlacement::new(l, None),
            Err(UnwindError::NoExecutableSegment { .. })
        ));
    }
}

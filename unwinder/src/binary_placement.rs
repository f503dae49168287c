//! [`BinaryPlacement`]: where the profiled binary is loaded, from MMAP2 events, and the
//! rebasing of process addresses (AVMA) to the binary's preferred addresses (SVMA).
//!
//! llvm-profgen 19 (`PerfScriptReader::updateBinaryAddress`) keeps one base address per
//! binary, initialised to the preferred base; events are matched by the basename of the
//! mapped path, optionally by `--pid`; the mapping of the first executable segment sets
//! the base ("latest mapping wins", a binary can be unloaded and reloaded); mappings of
//! other executable segments, or of later parts of a segment, must be consecutive.
//!
//! Two departures, both for inputs llvm-profgen 19 mishandles and equal to it otherwise:
//! - Each process that mapped the binary keeps its own base, and its samples are rebased
//!   by it ([`BinaryPlacement::rebase_for`]): a recording of several processes of one PIE
//!   (`perf record -a`, a build running the same compiler again and again) has them at
//!   different addresses under ASLR, where one base for all misplaces every sample of the
//!   other processes. A sample of a process that mapped nothing (a forked child, or perf
//!   script text without pids) is rebased by the latest mapping, as llvm-profgen rebases
//!   every sample.
//! - A mapping known not to be executable (`r--p`, `rw-p`: the data mappings
//!   `perf record --call-graph dwarf` or `-d` records) places nothing: it is not code, and
//!   its file offset is no text segment's.

use std::collections::HashMap;

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
    /// The base the latest mapping set (llvm-profgen's one base).
    base: u64,
    /// The base each process's own latest mapping set.
    process_bases: HashMap<i32, u64>,
    /// True once two processes' bases differed: samples then differ by their process.
    bases_differ: bool,
    loaded_by_mmap: bool,
}

/// How one process's addresses map to the binary's preferred addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rebase {
    base: u64,
    preferred_base: u64,
}

impl Rebase {
    /// The binary's preferred address for a process address: `addr − base + preferred`
    /// (wrapping, like llvm-profgen's unsigned arithmetic).
    #[inline]
    pub fn canonical(self, addr: u64) -> u64 {
        addr.wrapping_sub(self.base)
            .wrapping_add(self.preferred_base)
    }
}

/// `PROT_EXEC`.
const PROT_EXEC: u32 = 4;

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
            process_bases: HashMap::new(),
            bases_differ: false,
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

    /// The rebasing of the latest mapping (llvm-profgen's, for every sample).
    pub fn rebase(&self) -> Rebase {
        Rebase {
            base: self.base,
            preferred_base: self.load.preferred_base,
        }
    }

    /// The rebasing of process `pid`'s samples: by its own latest mapping of the binary,
    /// else by the latest mapping.
    #[inline]
    pub fn rebase_for(&self, pid: u32) -> Rebase {
        if !self.bases_differ {
            return self.rebase();
        }
        Rebase {
            base: self.base_of(pid as i32),
            preferred_base: self.load.preferred_base,
        }
    }

    /// The base of process `pid`'s own latest mapping, else (a process that mapped
    /// nothing) the latest one.
    fn base_of(&self, pid: i32) -> u64 {
        self.process_bases.get(&pid).copied().unwrap_or(self.base)
    }

    /// True when processes mapped the binary at different bases: the same address then
    /// stands for different code in different processes.
    pub fn bases_differ(&self) -> bool {
        self.bases_differ
    }

    /// The binary's preferred address for an address of the latest mapping's process.
    pub fn canonical(&self, addr: u64) -> u64 {
        self.rebase().canonical(addr)
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
        // A prot of 0 is taken as unknown (events made by hand); a known one without
        // PROT_EXEC maps no code.
        if event.prot != 0 && event.prot & PROT_EXEC == 0 {
            return Ok(MmapOutcome::Ignored);
        }
        let base = self.base_of(event.pid);
        let offsets = &self.load.text_segment_offsets;
        // The kernel image's mapping sets the base whatever its offset (perf gives the
        // kernel's start address there).
        if self.load.kernel || event.pgoff == offsets[0] {
            let moved = event.addr != self.base;
            self.set_base(event.pid, event.addr);
            return Ok(if moved {
                MmapOutcome::Rebased
            } else {
                MmapOutcome::Confirmed
            });
        }
        if event.addr == base {
            self.loaded_by_mmap = true;
            return Ok(MmapOutcome::Confirmed);
        }
        let index = offsets.partition_point(|&o| o < event.pgoff);
        let delta = event.addr.wrapping_sub(base);
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

    /// The first executable segment of process `pid` mapped at `addr`: the latest base.
    fn set_base(&mut self, pid: i32, addr: u64) {
        self.base = addr;
        self.loaded_by_mmap = true;
        if self
            .process_bases
            .insert(pid, addr)
            .is_none_or(|b| b != addr)
            && !self.bases_differ
        {
            self.bases_differ = self.process_bases.values().any(|&b| b != addr);
        }
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
    fn each_process_is_rebased_by_its_own_mapping() {
        let mut p = BinaryPlacement::new(load(), None).unwrap();
        p.observe(&mmap("/x/prog", 7, 0x5555_0000_0000, 0x1000))
            .unwrap();
        // A second process of the same file at the same base: nothing differs.
        p.observe(&mmap("/x/prog", 9, 0x5555_0000_0000, 0x1000))
            .unwrap();
        assert!(!p.bases_differ());
        // A third elsewhere (ASLR), with its second segment where its own first puts it.
        assert_eq!(
            p.observe(&mmap("/x/prog", 8, 0x6666_0000_0000, 0x1000))
                .unwrap(),
            MmapOutcome::Rebased
        );
        assert_eq!(
            p.observe(&mmap("/x/prog", 8, 0x6666_0000_6000, 0x5000))
                .unwrap(),
            MmapOutcome::Confirmed
        );
        assert!(p.bases_differ());
        assert_eq!(p.rebase_for(7).canonical(0x5555_0000_0123), 0x1123);
        assert_eq!(p.rebase_for(9).canonical(0x5555_0000_0123), 0x1123);
        assert_eq!(p.rebase_for(8).canonical(0x6666_0000_0123), 0x1123);
        // A process that mapped nothing (a forked child), and the one-base view: the
        // latest mapping's, as llvm-profgen's.
        assert_eq!(p.rebase_for(10).canonical(0x6666_0000_0123), 0x1123);
        assert_eq!(p.canonical(0x6666_0000_0123), 0x1123);
        // Process 7's second segment is checked against its own first.
        assert_eq!(
            p.observe(&mmap("/x/prog", 7, 0x5555_0000_6000, 0x5000))
                .unwrap(),
            MmapOutcome::Confirmed
        );
        assert!(p
            .observe(&mmap("/x/prog", 7, 0x6666_0000_6000, 0x5000))
            .is_err());
    }

    #[test]
    fn a_mapping_known_not_executable_places_nothing() {
        let mut p = BinaryPlacement::new(load(), None).unwrap();
        p.observe(&mmap("/x/prog", 7, 0x5555_0000_0000, 0x1000))
            .unwrap();
        // `perf record --call-graph dwarf` records the data mappings too: read-only at
        // offset 0, read-write past the text.
        for (prot, addr, pgoff) in [
            (1, 0x5555_0000_0000 - 0x1000, 0),
            (3, 0x5555_0001_0000, 0x9000),
        ] {
            let data = Mmap2Event {
                prot,
                ..mmap("/x/prog", 7, addr, pgoff)
            };
            assert_eq!(p.observe(&data).unwrap(), MmapOutcome::Ignored);
        }
        assert_eq!(p.canonical(0x5555_0000_0123), 0x1123);
        // A prot of 0 is unknown: such an event still places the binary.
        let unknown = Mmap2Event {
            prot: 0,
            ..mmap("/x/prog", 7, 0x7777_0000_0000, 0x1000)
        };
        assert_eq!(p.observe(&unknown).unwrap(), MmapOutcome::Rebased);
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

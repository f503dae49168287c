//! The probed allocator functions and the `perf_event_attr` of one uprobe.
//!
//! Registers: `sample_regs_user` bits follow `enum perf_event_x86_regs`
//! (arch/x86/include/uapi/asm/perf_regs.h): AX 0, BX 1, CX 2, DX 3, SI 4, DI 5, BP 6, SP 7,
//! IP 8, ... R15 23. The kernel dumps the selected registers in ascending bit order. At a
//! function's first instruction the System V x86-64 arguments are still in RDI, RSI, RDX.
//!
//! Uprobe PMU (`/sys/bus/event_source/devices/uprobe/`): `type` is the dynamic PMU type,
//! `format/retprobe` is `config:0`; `config1` is a pointer to the NUL-terminated path of the
//! probed file, `config2` the probe's file offset (perf_event.h: `uprobe_path`,
//! `probe_offset`).

use std::ffi::CString;
use std::path::Path;

use perf_event_open_sys::bindings::perf_event_attr;

use super::UprobeError;
use collector::record::{sample_type, SampleLayout};

/// `PERF_REG_X86_AX`.
pub const PERF_REG_X86_AX: u32 = 0;
/// `PERF_REG_X86_SI`.
pub const PERF_REG_X86_SI: u32 = 4;
/// `PERF_REG_X86_DI`.
pub const PERF_REG_X86_DI: u32 = 5;
pub use collector::sample::PERF_REG_X86_SP;
/// `sample_regs_user`: AX (a uretprobe's returned pointer), SI, DI (the arguments), SP.
/// Samples carry them as `regs[0] = AX, [1] = SI, [2] = DI, [3] = SP`.
pub const SAMPLE_REGS_USER: u64 =
    1 << PERF_REG_X86_AX | 1 << PERF_REG_X86_SI | 1 << PERF_REG_X86_DI | 1 << PERF_REG_X86_SP;
/// Index of AX in a sample's user registers.
pub const REG_AX: usize = 0;
/// Index of SI.
pub const REG_SI: usize = 1;
/// Index of DI.
pub const REG_DI: usize = 2;
/// `sample_stack_user`: the 8 bytes at the stack pointer (the return address at a
/// function's entry).
pub const SAMPLE_STACK_USER: u32 = 8;
pub use collector::record::PERF_SAMPLE_REGS_ABI_64;
/// What every probe samples.
pub const SAMPLE_TYPE: u64 = sample_type::IDENTIFIER
    | sample_type::IP
    | sample_type::TID
    | sample_type::TIME
    | sample_type::CALLCHAIN
    | sample_type::REGS_USER
    | sample_type::STACK_USER;
/// Where the kernel publishes the uprobe PMU's type.
pub const UPROBE_PMU_TYPE: &str = "/sys/bus/event_source/devices/uprobe/type";

/// A probed allocator function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AllocFn {
    /// `void *malloc(size_t size)`: size in RDI.
    Malloc,
    /// `void *calloc(size_t n, size_t size)`: `n · size` (RDI · RSI).
    Calloc,
    /// `void *realloc(void *p, size_t size)`: the new size in RSI (counted as an
    /// allocation of that size, the pprof convention).
    Realloc,
}

impl AllocFn {
    /// Every probed function.
    pub const ALL: [AllocFn; 3] = [AllocFn::Malloc, AllocFn::Calloc, AllocFn::Realloc];

    /// The symbol name in libc.
    pub fn symbol(self) -> &'static str {
        match self {
            AllocFn::Malloc => "malloc",
            AllocFn::Calloc => "calloc",
            AllocFn::Realloc => "realloc",
        }
    }

    /// The requested size, from the sampled registers `[AX, SI, DI, SP]`; `None` when the
    /// sample has no registers.
    pub fn size(self, regs: &[u64]) -> Option<u64> {
        let (si, di) = (*regs.get(REG_SI)?, *regs.get(REG_DI)?);
        Some(match self {
            AllocFn::Malloc => di,
            AllocFn::Calloc => di.saturating_mul(si),
            AllocFn::Realloc => si,
        })
    }
}

/// What a probe reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// The entry of an allocation function (size in the argument registers).
    Alloc(AllocFn),
    /// Its return (a uretprobe; the pointer in AX).
    Return(AllocFn),
    /// The entry of `free(void *p)` (the pointer in RDI).
    Free,
}

impl ProbeKind {
    /// The probed symbol.
    pub fn symbol(self) -> &'static str {
        match self {
            ProbeKind::Alloc(f) | ProbeKind::Return(f) => f.symbol(),
            ProbeKind::Free => "free",
        }
    }

    /// True for a uretprobe (`config` bit 0, `format/retprobe` = `config:0`).
    pub fn is_return(self) -> bool {
        matches!(self, ProbeKind::Return(_))
    }
}

/// Where one function is probed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeTarget {
    /// The probe.
    pub kind: ProbeKind,
    /// The probed file (as the kernel should open it).
    pub path: CString,
    /// File offset of the function's first instruction.
    pub offset: u64,
}

impl ProbeTarget {
    /// The entry probes of every [`AllocFn`] in `libc`.
    pub fn for_libc(libc: &Path) -> Result<Vec<ProbeTarget>, UprobeError> {
        Self::in_file(libc, &AllocFn::ALL.map(ProbeKind::Alloc))
    }

    /// The lifetime probes in `libc`: the return of every [`AllocFn`] and `free`'s entry.
    pub fn lifetimes_for_libc(libc: &Path) -> Result<Vec<ProbeTarget>, UprobeError> {
        let mut kinds: Vec<ProbeKind> = AllocFn::ALL.map(ProbeKind::Return).to_vec();
        kinds.push(ProbeKind::Free);
        Self::in_file(libc, &kinds)
    }

    fn in_file(libc: &Path, kinds: &[ProbeKind]) -> Result<Vec<ProbeTarget>, UprobeError> {
        let names: Vec<&str> = kinds.iter().map(|k| k.symbol()).collect();
        let offsets = super::symbol::function_file_offsets(libc, &names)?;
        let path = CString::new(libc.as_os_str().as_encoded_bytes()).map_err(|_| {
            UprobeError::NoSymbol {
                path: libc.to_path_buf(),
                function: String::new(),
                what: "path contains a NUL byte",
            }
        })?;
        let mut out = Vec::new();
        for (k, off) in kinds.iter().zip(offsets) {
            let offset = off.ok_or_else(|| UprobeError::NoSymbol {
                path: libc.to_path_buf(),
                function: k.symbol().to_string(),
                what: "no defined function symbol in a PT_LOAD",
            })?;
            out.push(ProbeTarget {
                kind: *k,
                path: path.clone(),
                offset,
            });
        }
        Ok(out)
    }

    /// The kernel attr of this probe: every hit sampled (`sample_period = 1`), user
    /// registers and 8 stack bytes, the call chain. `side_band` adds MMAP2/COMM/TASK
    /// records (with `sample_id_all`), `enable_on_exec` starts it at the target's exec.
    ///
    /// Not `inherit`: the kernel would create each new thread's or child's copy of the
    /// event in `clone` (kernel/events/core.c `inherit_event` → `perf_event_alloc` → the
    /// uprobe PMU's `perf_uprobe_init`), which reads the path again from `config1` with
    /// `strndup_user` in the *target's* address space, where our pointer means nothing:
    /// `clone` then fails with EFAULT (seen on 6.18: `pthread_create` returned 14 in a
    /// sampled program). Threads created after the probes are opened are therefore not
    /// sampled. (A copied event would also lack the BPF filter, which is attached to each
    /// event's own local trace event.)
    ///
    /// The attr holds a pointer to `self.path`: `self` must outlive the `perf_event_open`.
    pub fn to_kernel(
        &self,
        pmu_type: u32,
        side_band: bool,
        enable_on_exec: bool,
    ) -> perf_event_attr {
        let mut a = perf_event_attr {
            type_: pmu_type,
            size: std::mem::size_of::<perf_event_attr>() as u32,
            config: u64::from(self.kind.is_return()),
            sample_type: SAMPLE_TYPE,
            sample_regs_user: SAMPLE_REGS_USER,
            sample_stack_user: SAMPLE_STACK_USER,
            ..Default::default()
        };
        a.__bindgen_anon_1.sample_period = 1;
        a.__bindgen_anon_3.config1 = self.path.as_ptr() as u64;
        a.__bindgen_anon_4.config2 = self.offset;
        a.set_exclude_kernel(1);
        a.set_exclude_hv(1);
        a.set_exclude_callchain_kernel(1);
        a.set_disabled(1);
        a.set_enable_on_exec(u64::from(enable_on_exec));
        if side_band {
            a.set_mmap(1);
            a.set_mmap2(1);
            a.set_comm(1);
            a.set_comm_exec(1);
            a.set_task(1);
            a.set_sample_id_all(1);
            // MMAP2 records in the build-id form (5.12+). Also required for consistent
            // records: the kernel ORs PERF_RECORD_MISC_MMAP_BUILD_ID into the mmap event's
            // header shared by every listening event (kernel/events/core.c
            // `perf_event_mmap_output`), so while any other event on the system asks for
            // build ids, an inode-form record can arrive flagged as build-id form (seen on
            // 6.18: `build_id_size = 254`, the low byte of a device number).
            a.set_build_id(1);
        }
        a
    }
}

/// The record layout of the probes' rings (`sample_id_all` set: side band shares them).
pub fn layout() -> SampleLayout {
    SampleLayout::new(SAMPLE_TYPE, 0, 0, true).with_regs(SAMPLE_REGS_USER, 0)
}

/// The uprobe PMU's type.
pub fn uprobe_pmu_type() -> Result<u32, UprobeError> {
    let text = std::fs::read_to_string(UPROBE_PMU_TYPE)
        .map_err(|e| UprobeError::NoPmu(format!("{UPROBE_PMU_TYPE}: {e}")))?;
    text.trim()
        .parse()
        .map_err(|_| UprobeError::NoPmu(format!("{UPROBE_PMU_TYPE}: {:?}", text.trim())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use collector::live::attr::attr_bytes;

    #[test]
    fn sizes_come_from_the_argument_registers() {
        let regs = [0x5555_0000, 3, 4096, 0x7ffd_0000];
        assert_eq!(AllocFn::Malloc.size(&regs), Some(4096));
        assert_eq!(AllocFn::Calloc.size(&regs), Some(3 * 4096));
        assert_eq!(AllocFn::Realloc.size(&regs), Some(3));
        assert_eq!(AllocFn::Calloc.size(&[0, u64::MAX, 2, 0]), Some(u64::MAX));
        assert_eq!(AllocFn::Malloc.size(&[1, 2]), None);
        assert_eq!(SAMPLE_REGS_USER, 0xb1);
        assert_eq!(ProbeKind::Free.symbol(), "free");
        assert_eq!(ProbeKind::Return(AllocFn::Calloc).symbol(), "calloc");
    }

    #[test]
    fn attr_bytes_follow_perf_event_h() {
        let t = ProbeTarget {
            kind: ProbeKind::Alloc(AllocFn::Malloc),
            path: CString::new("/lib/x86_64-linux-gnu/libc.so.6").unwrap(),
            offset: 0x9a0e0,
        };
        let b = attr_bytes(&t.to_kernel(8, true, true));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        assert_eq!(u32::from_le_bytes(b[0..4].try_into().unwrap()), 8);
        assert_eq!(u64_at(16), 1); // sample_period
        assert_eq!(u64_at(24), 0x1_3027); // IDENTIFIER|STACK_USER|REGS_USER|CALLCHAIN|TIME|TID|IP
                                          // disabled 0, exclude_kernel 5, exclude_hv 6, mmap 8, comm 9, enable_on_exec
                                          // 12, task 13, sample_id_all 18, mmap2 23, comm_exec 24, exclude_callchain_kernel 21,
                                          // build_id 34.
        let flags = 1
            | 1 << 5
            | 1 << 6
            | 1 << 8
            | 1 << 9
            | 1 << 12
            | 1 << 13
            | 1 << 18
            | 1 << 21
            | 1 << 23
            | 1 << 24
            | 1 << 34;
        assert_eq!(u64_at(40), flags);
        assert_eq!(u64_at(56), t.path.as_ptr() as u64); // config1 = uprobe_path
        assert_eq!(u64_at(64), 0x9a0e0); // config2 = probe_offset
        assert_eq!(u64_at(8), 0); // config: an entry probe
        assert_eq!(u64_at(80), 0xb1); // sample_regs_user
        assert_eq!(u32::from_le_bytes(b[88..92].try_into().unwrap()), 8); // sample_stack_user
        let ret = ProbeTarget {
            kind: ProbeKind::Return(AllocFn::Malloc),
            ..t.clone()
        };
        let b = attr_bytes(&ret.to_kernel(8, false, false));
        assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 1); // config:0 retprobe
    }
}

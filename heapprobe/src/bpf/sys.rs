//! The `bpf(2)` commands the byte filter uses, called directly (`syscall(SYS_bpf, cmd,
//! &attr, size)`), and the attachment of a program to a perf event.
//!
//! Each command's `union bpf_attr` member (include/uapi/linux/bpf.h) is a `#[repr(C)]`
//! prefix of it; the size passed is the prefix's, which the kernel accepts (it zero-fills
//! the fields it knows beyond `size`, `bpf_check_uarg_tail_zero`). Commands: `BPF_MAP_CREATE`
//! 0, `BPF_MAP_LOOKUP_ELEM` 1, `BPF_MAP_UPDATE_ELEM` 2, `BPF_PROG_LOAD` 5 (`enum bpf_cmd`).

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::insn::{program_bytes, Insn};
use super::BpfError;

/// `BPF_MAP_CREATE`.
pub const BPF_MAP_CREATE: i32 = 0;
/// `BPF_MAP_LOOKUP_ELEM`.
pub const BPF_MAP_LOOKUP_ELEM: i32 = 1;
/// `BPF_MAP_UPDATE_ELEM`.
pub const BPF_MAP_UPDATE_ELEM: i32 = 2;
/// `BPF_PROG_LOAD`.
pub const BPF_PROG_LOAD: i32 = 5;
/// `BPF_MAP_TYPE_HASH`.
pub const BPF_MAP_TYPE_HASH: u32 = 1;
/// `BPF_MAP_TYPE_ARRAY`.
pub const BPF_MAP_TYPE_ARRAY: u32 = 2;
/// `BPF_MAP_TYPE_PERCPU_ARRAY`.
pub const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
/// `BPF_PROG_TYPE_KPROBE`: the program type the kernel runs for kprobe and uprobe perf
/// events (`trace_call_bpf` with the probe's `struct pt_regs *` as context).
pub const BPF_PROG_TYPE_KPROBE: u32 = 2;
/// `BPF_ANY` flag of `BPF_MAP_UPDATE_ELEM`.
pub const BPF_ANY: u64 = 0;
/// Bytes of verifier log kept when a load fails.
pub const VERIFIER_LOG_BYTES: usize = 64 * 1024;
/// The largest program accepted here (`BPF_MAXINSNS`, the unprivileged limit).
pub const MAX_INSNS: usize = 4096;

/// `union bpf_attr` for `BPF_MAP_CREATE` (up to `map_name`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MapCreateAttr {
    /// `enum bpf_map_type`.
    pub map_type: u32,
    /// Key bytes.
    pub key_size: u32,
    /// Value bytes.
    pub value_size: u32,
    /// Entries.
    pub max_entries: u32,
    /// `BPF_F_*` flags.
    pub map_flags: u32,
    /// Inner map fd (map-in-map only).
    pub inner_map_fd: u32,
    /// NUMA node (with `BPF_F_NUMA_NODE`).
    pub numa_node: u32,
    /// NUL-padded name (shown by bpftool).
    pub map_name: [u8; 16],
}

/// `union bpf_attr` for the `BPF_MAP_*_ELEM` commands.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MapElemAttr {
    /// The map.
    pub map_fd: u32,
    /// Padding (`key` is `__aligned_u64`).
    pub pad: u32,
    /// Pointer to the key.
    pub key: u64,
    /// Pointer to the value.
    pub value: u64,
    /// `BPF_ANY`, `BPF_NOEXIST`, `BPF_EXIST`.
    pub flags: u64,
}

/// `union bpf_attr` for `BPF_PROG_LOAD` (up to `prog_name`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ProgLoadAttr {
    /// `enum bpf_prog_type`.
    pub prog_type: u32,
    /// Instructions.
    pub insn_cnt: u32,
    /// Pointer to the instructions.
    pub insns: u64,
    /// Pointer to the NUL-terminated license.
    pub license: u64,
    /// Verifier log level (1: the failing path).
    pub log_level: u32,
    /// Log buffer bytes.
    pub log_size: u32,
    /// Pointer to the log buffer.
    pub log_buf: u64,
    /// Unused since 5.0 (kprobe programs once had to match the running kernel).
    pub kern_version: u32,
    /// `BPF_F_*` load flags.
    pub prog_flags: u32,
    /// NUL-padded name.
    pub prog_name: [u8; 16],
}

fn name16(name: &str) -> [u8; 16] {
    let mut b = [0u8; 16];
    // Names are [A-Za-z0-9_.], at most 15 bytes (BPF_OBJ_NAME_LEN with the NUL).
    for (d, s) in b.iter_mut().zip(name.bytes().take(15)) {
        *d = if s.is_ascii_alphanumeric() || s == b'_' || s == b'.' {
            s
        } else {
            b'_'
        };
    }
    b
}

fn sys_bpf<T>(cmd: i32, attr: &mut T) -> libc::c_long {
    // SAFETY: `attr` is a live, fully initialised `#[repr(C)]` prefix of `union bpf_attr`
    // for `cmd`; every pointer it holds is the caller's to keep valid across the call.
    unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    }
}

fn owned_fd(r: libc::c_long, what: &'static str) -> Result<OwnedFd, BpfError> {
    if r < 0 {
        return Err(BpfError::Syscall {
            what,
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: a fresh fd returned by bpf(2), owned from here on.
    Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
}

/// `BPF_MAP_CREATE`: a map of `max_entries` entries of `key_size`-byte keys and
/// `value_size`-byte values.
pub fn map_create(
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    name: &str,
) -> Result<OwnedFd, BpfError> {
    let mut attr = MapCreateAttr {
        map_type,
        key_size,
        value_size,
        max_entries,
        map_name: name16(name),
        ..MapCreateAttr::default()
    };
    owned_fd(sys_bpf(BPF_MAP_CREATE, &mut attr), "BPF_MAP_CREATE")
}

/// `BPF_MAP_UPDATE_ELEM` (`BPF_ANY`). For a per-CPU map `value` holds one value per
/// possible CPU, each rounded up to 8 bytes.
pub fn map_update(map: BorrowedFd<'_>, key: &[u8], value: &[u8]) -> Result<(), BpfError> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value: value.as_ptr() as u64,
        flags: BPF_ANY,
        ..MapElemAttr::default()
    };
    if sys_bpf(BPF_MAP_UPDATE_ELEM, &mut attr) < 0 {
        return Err(BpfError::Syscall {
            what: "BPF_MAP_UPDATE_ELEM",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// `BPF_MAP_LOOKUP_ELEM` into `value` (sized as for [`map_update`]).
pub fn map_lookup(map: BorrowedFd<'_>, key: &[u8], value: &mut [u8]) -> Result<(), BpfError> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value: value.as_mut_ptr() as u64,
        ..MapElemAttr::default()
    };
    if sys_bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) < 0 {
        return Err(BpfError::Syscall {
            what: "BPF_MAP_LOOKUP_ELEM",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// `BPF_PROG_LOAD` of `insns`. Loads without a log first (the common case); when the
/// kernel refuses, loads again with `log_level` 1 so the error carries the verifier's
/// explanation.
pub fn prog_load(
    prog_type: u32,
    insns: &[Insn],
    license: &CStr,
    name: &str,
) -> Result<OwnedFd, BpfError> {
    if insns.is_empty() || insns.len() > MAX_INSNS {
        return Err(BpfError::ProgramSize(insns.len()));
    }
    let bytes = program_bytes(insns);
    let load = |log: &mut [u8]| {
        let mut attr = ProgLoadAttr {
            prog_type,
            insn_cnt: insns.len() as u32,
            insns: bytes.as_ptr() as u64,
            license: license.as_ptr() as u64,
            prog_name: name16(name),
            ..ProgLoadAttr::default()
        };
        if !log.is_empty() {
            attr.log_level = 1;
            attr.log_size = log.len() as u32;
            attr.log_buf = log.as_mut_ptr() as u64;
        }
        let r = sys_bpf(BPF_PROG_LOAD, &mut attr);
        (r, std::io::Error::last_os_error())
    };
    let (r, err) = load(&mut []);
    if r >= 0 {
        return owned_fd(r, "BPF_PROG_LOAD");
    }
    let mut log = vec![0u8; VERIFIER_LOG_BYTES];
    let (r2, err2) = load(&mut log);
    if r2 >= 0 {
        // Loaded the second time (a transient failure): keep it.
        return owned_fd(r2, "BPF_PROG_LOAD");
    }
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let log = String::from_utf8_lossy(&log[..end]).trim_end().to_string();
    Err(BpfError::Load {
        source: if err2.raw_os_error().is_some() {
            err2
        } else {
            err
        },
        log,
    })
}

/// `PERF_EVENT_IOC_SET_BPF`: the kernel runs `prog` for each hit of the probe `event`
/// before writing its sample, and writes it only when the program returns non-zero
/// (kernel/trace/trace_uprobe.c `__uprobe_perf_func`: `ret = trace_call_bpf(call, regs);
/// if (!ret) return;`). The event holds its own reference to the program.
pub fn attach_to_perf_event(event: BorrowedFd<'_>, prog: BorrowedFd<'_>) -> Result<(), BpfError> {
    // SAFETY: two valid fds; SET_BPF takes the program fd by value.
    let r =
        unsafe { perf_event_open_sys::ioctls::SET_BPF(event.as_raw_fd(), prog.as_raw_fd() as u32) };
    if r < 0 {
        return Err(BpfError::Syscall {
            what: "PERF_EVENT_IOC_SET_BPF",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Number of possible CPUs (the per-CPU map value count): one more than the highest id
/// in `/sys/devices/system/cpu/possible` (`0-3`, `0,2-5`).
pub fn possible_cpus() -> Result<usize, BpfError> {
    const PATH: &str = "/sys/devices/system/cpu/possible";
    let text = std::fs::read_to_string(PATH).map_err(|source| BpfError::Syscall {
        what: "reading /sys/devices/system/cpu/possible",
        source,
    })?;
    parse_cpu_list_count(&text).ok_or_else(|| BpfError::CpuList(text.trim().to_string()))
}

/// `max id + 1` of a kernel CPU list; `None` when it does not parse or exceeds 65536.
pub fn parse_cpu_list_count(text: &str) -> Option<usize> {
    let mut max = None;
    for part in text.trim().split(',') {
        let last = part.rsplit('-').next()?;
        let v: usize = last.trim().parse().ok()?;
        max = Some(max.map_or(v, |m: usize| m.max(v)));
    }
    max.filter(|&m| m < 65536).map(|m| m + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn attr_layouts_follow_bpf_h() {
        assert_eq!(offset_of!(MapCreateAttr, max_entries), 12);
        assert_eq!(offset_of!(MapCreateAttr, numa_node), 24);
        assert_eq!(offset_of!(MapCreateAttr, map_name), 28);
        assert_eq!(size_of::<MapCreateAttr>(), 44);
        assert_eq!(offset_of!(MapElemAttr, key), 8);
        assert_eq!(offset_of!(MapElemAttr, value), 16);
        assert_eq!(size_of::<MapElemAttr>(), 32);
        assert_eq!(offset_of!(ProgLoadAttr, insns), 8);
        assert_eq!(offset_of!(ProgLoadAttr, license), 16);
        assert_eq!(offset_of!(ProgLoadAttr, log_level), 24);
        assert_eq!(offset_of!(ProgLoadAttr, log_buf), 32);
        assert_eq!(offset_of!(ProgLoadAttr, kern_version), 40);
        assert_eq!(offset_of!(ProgLoadAttr, prog_name), 48);
        assert_eq!(size_of::<ProgLoadAttr>(), 64);
    }

    #[test]
    fn names_and_cpu_lists() {
        assert_eq!(&name16("pgo_bytes-filter")[..16], b"pgo_bytes_filte\0");
        assert_eq!(parse_cpu_list_count("0-1\n"), Some(2));
        assert_eq!(parse_cpu_list_count("0"), Some(1));
        assert_eq!(parse_cpu_list_count("0,2-5"), Some(6));
        assert_eq!(parse_cpu_list_count("x"), None);
        assert_eq!(parse_cpu_list_count("0-99999"), None);
    }

    #[test]
    fn empty_program_is_refused_before_the_kernel() {
        let e = prog_load(BPF_PROG_TYPE_KPROBE, &[], c"GPL", "x").unwrap_err();
        assert!(matches!(e, BpfError::ProgramSize(0)), "{e}");
    }
}

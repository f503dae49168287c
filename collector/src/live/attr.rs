//! [`EventAttr`]: the `perf_event_attr` pgo-agent opens, as plain fields, and its encoding
//! into the kernel struct (`perf_event_open_sys::bindings::perf_event_attr`, 144 bytes,
//! `PERF_ATTR_SIZE_VER9`; flag bit positions at byte 40 as in perf_event.h).

use perf_event_open_sys::bindings::perf_event_attr;

use crate::record::{sample_type, SampleLayout};

/// `PERF_TYPE_HARDWARE`.
pub const PERF_TYPE_HARDWARE: u32 = 0;
/// `PERF_TYPE_SOFTWARE`.
pub const PERF_TYPE_SOFTWARE: u32 = 1;
/// `PERF_TYPE_RAW`.
pub const PERF_TYPE_RAW: u32 = 4;
/// `PERF_COUNT_SW_CPU_CLOCK`.
pub const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
/// `PERF_COUNT_HW_CPU_CYCLES`.
pub const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
/// `BR_INST_RETIRED.NEAR_TAKEN` on Intel big cores (event 0xC4, umask 0x20).
pub const INTEL_NEAR_TAKEN: u64 = 0x20c4;
/// `BR_INST_RETIRED.NEAR_TAKEN` on Intel Atom / E-cores (umask 0xC0).
pub const INTEL_ATOM_NEAR_TAKEN: u64 = 0xc0c4;

/// How often to sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleRate {
    /// Every `n` events (`sample_period`, `freq = 0`). For cpu-clock, `n` is nanoseconds.
    Period(u64),
    /// `n` samples per second (`sample_freq`, `freq = 1`); the kernel retunes the period.
    Frequency(u64),
}

/// The fields of one `perf_event_attr` (everything else is zero).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventAttr {
    /// A name for reports (`cpu-clock`, `cpu/r20c4/uppp`).
    pub label: String,
    /// `type`.
    pub type_: u32,
    /// `config`.
    pub config: u64,
    /// `sample_period` or `sample_freq`.
    pub rate: SampleRate,
    /// `sample_type`.
    pub sample_type: u64,
    /// `branch_sample_type` (0 without PERF_SAMPLE_BRANCH_STACK).
    pub branch_sample_type: u64,
    /// `sample_regs_user` (0 without PERF_SAMPLE_REGS_USER).
    pub sample_regs_user: u64,
    /// `sample_stack_user`: bytes of user stack per sample (0 without
    /// PERF_SAMPLE_STACK_USER; a multiple of 8).
    pub sample_stack_user: u32,
    /// `precise_ip` (0..=3).
    pub precise_ip: u8,
    /// `exclude_kernel` and `exclude_hv`: user-space samples only.
    pub user_only: bool,
    /// `mmap`, `mmap2`, `comm`, `comm_exec`, `task`: this event carries the side band.
    pub side_band: bool,
    /// `build_id` (5.12+): MMAP2 records carry build ids.
    pub build_id: bool,
    /// `sample_max_stack` (0 = the kernel's default).
    pub max_stack: u16,
    /// `disabled`: opened stopped, enabled with an ioctl once every ring is mapped.
    pub disabled: bool,
    /// `watermark` + `wakeup_watermark`: a `poll` on the event returns once this many
    /// bytes of records are unread (0: neither is set, the kernel's default).
    pub wakeup_watermark: u32,
}

impl EventAttr {
    /// The record shape this attr produces (`sample_id_all` is set with the side band).
    pub fn layout(&self) -> SampleLayout {
        SampleLayout::new(self.sample_type, self.branch_sample_type, 0, self.side_band)
            .with_regs(self.sample_regs_user, 0)
    }

    /// True when samples carry a branch stack.
    pub fn has_branch_stack(&self) -> bool {
        self.sample_type & sample_type::BRANCH_STACK != 0
    }

    /// Encodes the kernel struct; `size` is the struct's size (extra zero bytes are
    /// accepted by older kernels).
    pub fn to_kernel(&self) -> perf_event_attr {
        let mut a = perf_event_attr {
            type_: self.type_,
            size: std::mem::size_of::<perf_event_attr>() as u32,
            config: self.config,
            sample_type: self.sample_type,
            branch_sample_type: self.branch_sample_type,
            sample_regs_user: self.sample_regs_user,
            sample_stack_user: self.sample_stack_user,
            sample_max_stack: self.max_stack,
            ..Default::default()
        };
        match self.rate {
            SampleRate::Period(p) => a.__bindgen_anon_1.sample_period = p,
            SampleRate::Frequency(f) => {
                a.__bindgen_anon_1.sample_freq = f;
                a.set_freq(1);
            }
        }
        a.set_disabled(u64::from(self.disabled));
        if self.wakeup_watermark > 0 {
            a.set_watermark(1);
            a.__bindgen_anon_2.wakeup_watermark = self.wakeup_watermark;
        }
        a.set_precise_ip(u64::from(self.precise_ip.min(3)));
        if self.user_only {
            a.set_exclude_kernel(1);
            a.set_exclude_hv(1);
        }
        if self.side_band {
            a.set_mmap(1);
            a.set_mmap2(1);
            a.set_comm(1);
            a.set_comm_exec(1);
            a.set_task(1);
            a.set_sample_id_all(1);
            a.set_build_id(u64::from(self.build_id));
        }
        a
    }
}

/// The bytes of a kernel attr (for tests and logs).
pub fn attr_bytes(a: &perf_event_attr) -> Vec<u8> {
    let len = std::mem::size_of::<perf_event_attr>();
    // SAFETY: perf_event_attr is a plain C struct without padding holes that matter
    // (bindgen lays it out as the kernel does; every byte is initialised by Default).
    unsafe { std::slice::from_raw_parts((a as *const perf_event_attr).cast::<u8>(), len).to_vec() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::branch_sample_type as bst;

    fn u64_at(b: &[u8], off: usize) -> u64 {
        u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
    }

    #[test]
    fn intel_lbr_attr_bytes() {
        use sample_type::*;
        let attr = EventAttr {
            label: "cpu/r20c4/uppp".into(),
            type_: PERF_TYPE_RAW,
            config: INTEL_NEAR_TAKEN,
            rate: SampleRate::Period(200003),
            sample_type: IDENTIFIER | IP | TID | TIME | CPU | PERIOD | CALLCHAIN | BRANCH_STACK,
            branch_sample_type: bst::USER | bst::ANY | bst::HW_INDEX,
            sample_regs_user: 0x1c0,
            sample_stack_user: 16,
            precise_ip: 3,
            user_only: true,
            side_band: true,
            build_id: true,
            max_stack: 127,
            disabled: true,
            wakeup_watermark: 65536,
        };
        let b = attr_bytes(&attr.to_kernel());
        assert_eq!(b.len(), 144);
        assert_eq!(u32::from_le_bytes(b[0..4].try_into().unwrap()), 4);
        assert_eq!(u32::from_le_bytes(b[4..8].try_into().unwrap()), 144);
        assert_eq!(u64_at(&b, 8), 0x20c4);
        assert_eq!(u64_at(&b, 16), 200003);
        assert_eq!(u64_at(&b, 24), 0x109a7);
        // disabled 0, exclude_kernel 5, exclude_hv 6, mmap 8, comm 9, task 13,
        // watermark 14, precise_ip 15-16 = 3, sample_id_all 18, mmap2 23, comm_exec 24,
        // build_id 34.
        let flags = 1
            | 1 << 5
            | 1 << 6
            | 1 << 8
            | 1 << 9
            | 1 << 13
            | 1 << 14
            | 3 << 15
            | 1 << 18
            | 1 << 23
            | 1 << 24
            | 1 << 34;
        assert_eq!(u64_at(&b, 40), flags);
        // wakeup_events / wakeup_watermark: the u32 at offset 48.
        assert_eq!(u32::from_le_bytes(b[48..52].try_into().unwrap()), 65536);
        assert_eq!(u64_at(&b, 72), 1 | 1 << 3 | 1 << 17);
        assert_eq!(u16::from_le_bytes(b[108..110].try_into().unwrap()), 127);
        // sample_regs_user at 80 (bp, sp, ip), sample_stack_user at 88.
        assert_eq!(u64_at(&b, 80), 0x1c0);
        assert_eq!(u32::from_le_bytes(b[88..92].try_into().unwrap()), 16);
        assert_eq!(attr.layout().regs_user_index(8), Some(2));
    }

    #[test]
    fn cpu_clock_frequency_sets_freq_bit() {
        let attr = EventAttr {
            label: "cpu-clock".into(),
            type_: PERF_TYPE_SOFTWARE,
            config: PERF_COUNT_SW_CPU_CLOCK,
            rate: SampleRate::Frequency(999),
            sample_type: sample_type::IP | sample_type::CALLCHAIN,
            branch_sample_type: 0,
            sample_regs_user: 0,
            sample_stack_user: 0,
            precise_ip: 0,
            user_only: false,
            side_band: false,
            build_id: false,
            max_stack: 0,
            disabled: false,
            wakeup_watermark: 0,
        };
        let b = attr_bytes(&attr.to_kernel());
        assert_eq!(u64_at(&b, 16), 999);
        assert_eq!(u64_at(&b, 40), 1 << 10);
        assert_eq!(u32::from_le_bytes(b[48..52].try_into().unwrap()), 0);
        assert!(!attr.has_branch_stack());
        assert!(!attr.layout().sample_id_all);
    }
}

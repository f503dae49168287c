//! [`AllocCall`]: one probe hit, decoded from a parsed SAMPLE record.
//!
//! The kernel's user call chain (`perf_callchain_user`, arch/x86/events/core.c) is the
//! sampled IP followed by the return addresses found by walking the frame-pointer chain from
//! `regs->bp`. At a function's first instruction `rbp` still is the caller's frame pointer,
//! so the walk yields the caller's *caller* first: the direct caller's return address is
//! the word at `rsp` (pushed by `call`), which the probes sample as 8 bytes of
//! PERF_SAMPLE_STACK_USER. [`AllocCall::from_record`] puts it back as the second frame.

use collector::record::SampleRecord;

use super::probe::{AllocFn, PERF_SAMPLE_REGS_ABI_64, REG_AX, REG_DI};

/// One allocation call seen by a probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocCall {
    /// The function called.
    pub function: AllocFn,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Time (perf clock).
    pub time: u64,
    /// Requested bytes.
    pub size: u64,
    /// The call chain, leaf (the allocator's entry) first, then return addresses.
    pub stack: Vec<u64>,
}

impl AllocCall {
    /// Decodes a probe's sample; `function` is the probe whose event id the record
    /// carries. `None` when the sample has no 64-bit user registers (not a user-mode hit).
    pub fn from_record(function: AllocFn, r: &SampleRecord) -> Option<AllocCall> {
        if r.regs_user_abi != PERF_SAMPLE_REGS_ABI_64 {
            return None;
        }
        let size = function.size(&r.regs_user)?;
        let mut stack = Vec::with_capacity(r.sample.callchain.len() + 1);
        let mut chain = r.sample.callchain.iter().copied();
        stack.push(chain.next().unwrap_or(r.sample.ip));
        if let Some(ret) = r.stack_user.get(..8) {
            let ret = u64::from_le_bytes(ret.try_into().expect("8 bytes"));
            if ret != 0 {
                stack.push(ret);
            }
        }
        stack.extend(chain);
        Some(AllocCall {
            function,
            pid: r.sample.pid,
            tid: r.sample.tid,
            time: r.sample.time,
            size,
            stack,
        })
    }
}

/// A pointer seen by a lifetime probe: returned by an allocation function (AX at its
/// uretprobe) or passed to `free` (RDI at its entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointerEvent {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Time (perf clock).
    pub time: u64,
    /// The pointer.
    pub ptr: u64,
}

impl PointerEvent {
    /// The returned pointer of a uretprobe sample.
    pub fn returned(r: &SampleRecord) -> Option<PointerEvent> {
        Self::from_reg(r, REG_AX)
    }

    /// The argument of a `free` entry sample.
    pub fn freed(r: &SampleRecord) -> Option<PointerEvent> {
        Self::from_reg(r, REG_DI)
    }

    fn from_reg(r: &SampleRecord, reg: usize) -> Option<PointerEvent> {
        if r.regs_user_abi != PERF_SAMPLE_REGS_ABI_64 {
            return None;
        }
        Some(PointerEvent {
            pid: r.sample.pid,
            tid: r.sample.tid,
            time: r.sample.time,
            ptr: *r.regs_user.get(reg)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use collector::Sample;

    #[test]
    fn return_address_becomes_the_second_frame() {
        let r = SampleRecord {
            sample: Sample {
                pid: 10,
                tid: 11,
                time: 5,
                ip: 0x7f00_0000_1000,
                callchain: vec![0x7f00_0000_1000, 0x40_2000, 0x40_3000],
                count: 1,
                ..Sample::default()
            },
            regs_user_abi: 2,
            regs_user: vec![0x5555_1000, 16, 4, 0x7ffd_0000],
            stack_user: 0x40_1111u64.to_le_bytes().to_vec(),
            ..SampleRecord::default()
        };
        let c = AllocCall::from_record(AllocFn::Calloc, &r).unwrap();
        assert_eq!(c.size, 64);
        assert_eq!((c.pid, c.tid, c.time), (10, 11, 5));
        assert_eq!(
            c.stack,
            vec![0x7f00_0000_1000, 0x40_1111, 0x40_2000, 0x40_3000]
        );
        let none = SampleRecord {
            regs_user_abi: 0,
            ..r
        };
        assert_eq!(AllocCall::from_record(AllocFn::Malloc, &none), None);
        assert_eq!(PointerEvent::freed(&none), None);
    }

    #[test]
    fn pointers_come_from_ax_at_return_and_di_at_free() {
        let r = SampleRecord {
            sample: Sample {
                pid: 10,
                tid: 11,
                time: 5,
                ..Sample::default()
            },
            regs_user_abi: 2,
            regs_user: vec![0x5555_1000, 16, 0x5555_2000, 0x7ffd_0000],
            ..SampleRecord::default()
        };
        let at = |ptr| PointerEvent {
            pid: 10,
            tid: 11,
            time: 5,
            ptr,
        };
        assert_eq!(PointerEvent::returned(&r), Some(at(0x5555_1000)));
        assert_eq!(PointerEvent::freed(&r), Some(at(0x5555_2000)));
    }
}

//! [`SampleLayout`]: what a `perf_event_attr` says about the shape of its records, computed
//! once per attr and used for every SAMPLE body and every `sample_id` trailer.

use linux_perf_data::linux_perf_event_reader::{AttrFlags, PerfEventAttr};

/// `perf_event_attr.sample_type` bits (`enum perf_event_sample_format`, perf_event.h).
pub mod sample_type {
    /// `PERF_SAMPLE_IP`: u64 ip.
    pub const IP: u64 = 1 << 0;
    /// `PERF_SAMPLE_TID`: u32 pid, tid.
    pub const TID: u64 = 1 << 1;
    /// `PERF_SAMPLE_TIME`: u64 time.
    pub const TIME: u64 = 1 << 2;
    /// `PERF_SAMPLE_ADDR`: u64 addr.
    pub const ADDR: u64 = 1 << 3;
    /// `PERF_SAMPLE_READ`: read_format values.
    pub const READ: u64 = 1 << 4;
    /// `PERF_SAMPLE_CALLCHAIN`: u64 nr, u64 ips[nr].
    pub const CALLCHAIN: u64 = 1 << 5;
    /// `PERF_SAMPLE_ID`: u64 id.
    pub const ID: u64 = 1 << 6;
    /// `PERF_SAMPLE_CPU`: u32 cpu, res.
    pub const CPU: u64 = 1 << 7;
    /// `PERF_SAMPLE_PERIOD`: u64 period.
    pub const PERIOD: u64 = 1 << 8;
    /// `PERF_SAMPLE_STREAM_ID`: u64 stream_id.
    pub const STREAM_ID: u64 = 1 << 9;
    /// `PERF_SAMPLE_RAW`: u32 size, u8 data[size].
    pub const RAW: u64 = 1 << 10;
    /// `PERF_SAMPLE_BRANCH_STACK`: u64 nr, [u64 hw_idx], perf_branch_entry lbr[nr], [u64 cntr[nr]].
    pub const BRANCH_STACK: u64 = 1 << 11;
    /// `PERF_SAMPLE_REGS_USER`: u64 abi, u64 regs[popcount(sample_regs_user)].
    pub const REGS_USER: u64 = 1 << 12;
    /// `PERF_SAMPLE_STACK_USER`: u64 size, u8 data[size], u64 dyn_size.
    pub const STACK_USER: u64 = 1 << 13;
    /// `PERF_SAMPLE_WEIGHT`: u64 weight.
    pub const WEIGHT: u64 = 1 << 14;
    /// `PERF_SAMPLE_DATA_SRC`: u64 data_src.
    pub const DATA_SRC: u64 = 1 << 15;
    /// `PERF_SAMPLE_IDENTIFIER`: u64 id, first in SAMPLE, last in sample_id.
    pub const IDENTIFIER: u64 = 1 << 16;
    /// `PERF_SAMPLE_TRANSACTION`: u64 transaction.
    pub const TRANSACTION: u64 = 1 << 17;
    /// `PERF_SAMPLE_REGS_INTR`: u64 abi, u64 regs[popcount(sample_regs_intr)].
    pub const REGS_INTR: u64 = 1 << 18;
    /// `PERF_SAMPLE_PHYS_ADDR`: u64 phys_addr.
    pub const PHYS_ADDR: u64 = 1 << 19;
    /// `PERF_SAMPLE_AUX`: u64 size, u8 data[size].
    pub const AUX: u64 = 1 << 20;
    /// `PERF_SAMPLE_CGROUP`: u64 cgroup.
    pub const CGROUP: u64 = 1 << 21;
    /// `PERF_SAMPLE_DATA_PAGE_SIZE`: u64.
    pub const DATA_PAGE_SIZE: u64 = 1 << 22;
    /// `PERF_SAMPLE_CODE_PAGE_SIZE`: u64.
    pub const CODE_PAGE_SIZE: u64 = 1 << 23;
    /// `PERF_SAMPLE_WEIGHT_STRUCT`: u64 (u32 var1_dw, u16 var2_w, u16 var3_w).
    pub const WEIGHT_STRUCT: u64 = 1 << 24;
    /// Every bit this crate can parse (or parse and skip): bits 0..=24 (`PERF_SAMPLE_MAX` is 1 << 25 in 6.1).
    pub const SUPPORTED: u64 = (1 << 25) - 1;
}

/// `perf_event_attr.branch_sample_type` bits (`enum perf_branch_sample_type`).
pub mod branch_sample_type {
    /// `PERF_SAMPLE_BRANCH_USER`: user-space branch targets.
    pub const USER: u64 = 1 << 0;
    /// `PERF_SAMPLE_BRANCH_KERNEL`.
    pub const KERNEL: u64 = 1 << 1;
    /// `PERF_SAMPLE_BRANCH_HV`.
    pub const HV: u64 = 1 << 2;
    /// `PERF_SAMPLE_BRANCH_ANY`: every branch type.
    pub const ANY: u64 = 1 << 3;
    /// `PERF_SAMPLE_BRANCH_HW_INDEX`: a u64 hw_idx precedes the entries.
    pub const HW_INDEX: u64 = 1 << 17;
    /// `PERF_SAMPLE_BRANCH_COUNTERS`: a u64 per entry follows the entries (6.8+).
    pub const COUNTERS: u64 = 1 << 19;
}

/// `perf_event_attr.read_format` bits (`enum perf_event_read_format`).
pub mod read_format {
    /// `PERF_FORMAT_TOTAL_TIME_ENABLED`.
    pub const TOTAL_TIME_ENABLED: u64 = 1 << 0;
    /// `PERF_FORMAT_TOTAL_TIME_RUNNING`.
    pub const TOTAL_TIME_RUNNING: u64 = 1 << 1;
    /// `PERF_FORMAT_ID`.
    pub const ID: u64 = 1 << 2;
    /// `PERF_FORMAT_GROUP`.
    pub const GROUP: u64 = 1 << 3;
    /// `PERF_FORMAT_LOST` (6.0+).
    pub const LOST: u64 = 1 << 4;
}

/// The record shape one `perf_event_attr` implies: the fields a SAMPLE body carries and the
/// `sample_id` trailer other records carry. Compute it once per attr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SampleLayout {
    /// `perf_event_attr.sample_type`.
    pub sample_type: u64,
    /// `perf_event_attr.branch_sample_type` (HW_INDEX and COUNTERS change the branch stack layout).
    pub branch_sample_type: u64,
    /// `perf_event_attr.read_format` (shape of PERF_SAMPLE_READ).
    pub read_format: u64,
    /// Number of registers in PERF_SAMPLE_REGS_USER: popcount(`sample_regs_user`).
    pub regs_user_count: u32,
    /// `perf_event_attr.sample_regs_user`: which registers PERF_SAMPLE_REGS_USER dumps, in
    /// ascending bit order.
    pub regs_user_mask: u64,
    /// Number of registers in PERF_SAMPLE_REGS_INTR: popcount(`sample_regs_intr`).
    pub regs_intr_count: u32,
    /// `perf_event_attr.sample_id_all`: non-SAMPLE records end with a `sample_id` trailer.
    pub sample_id_all: bool,
}

impl SampleLayout {
    /// The layout for the given attr fields.
    pub fn new(
        sample_type: u64,
        branch_sample_type: u64,
        read_format: u64,
        sample_id_all: bool,
    ) -> Self {
        SampleLayout {
            sample_type,
            branch_sample_type,
            read_format,
            sample_id_all,
            ..Default::default()
        }
    }

    /// Sets the register masks (PERF_SAMPLE_REGS_USER / REGS_INTR dump popcount(mask) registers).
    pub fn with_regs(mut self, sample_regs_user: u64, sample_regs_intr: u64) -> Self {
        self.regs_user_count = sample_regs_user.count_ones();
        self.regs_user_mask = sample_regs_user;
        self.regs_intr_count = sample_regs_intr.count_ones();
        self
    }

    /// The layout of an attr parsed by linux-perf-event-reader (perf.data attrs section).
    pub fn from_attr(attr: &PerfEventAttr) -> Self {
        SampleLayout::new(
            attr.sample_format.bits(),
            attr.branch_sample_format.bits(),
            attr.read_format.bits(),
            attr.flags.contains(AttrFlags::SAMPLE_ID_ALL),
        )
        .with_regs(attr.sample_regs_user, attr.sample_regs_intr)
    }

    /// True when `sample_type` has all the bits of `bits`.
    pub fn has(&self, bits: u64) -> bool {
        self.sample_type & bits == bits
    }

    /// The index of register `bit` (`enum perf_event_x86_regs`) among the PERF_SAMPLE_REGS_USER
    /// values, when the mask dumps it: the count of mask bits below it.
    pub fn regs_user_index(&self, bit: u32) -> Option<usize> {
        if bit >= 64 || self.regs_user_mask & (1 << bit) == 0 {
            return None;
        }
        Some((self.regs_user_mask & ((1u64 << bit) - 1)).count_ones() as usize)
    }

    /// True when the branch stack carries `hw_idx` before its entries.
    pub fn has_hw_idx(&self) -> bool {
        self.branch_sample_type & branch_sample_type::HW_INDEX != 0
    }

    /// True when the branch stack carries one counters word per entry after the entries.
    pub fn has_branch_counters(&self) -> bool {
        self.branch_sample_type & branch_sample_type::COUNTERS != 0
    }

    /// Length of the `sample_id` trailer of non-SAMPLE records (0 without `sample_id_all`).
    ///
    /// `struct sample_id` (perf_event.h): `{ u32 pid, tid; } && PERF_SAMPLE_TID`,
    /// `{ u64 time; } && TIME`, `{ u64 id; } && ID`, `{ u64 stream_id; } && STREAM_ID`,
    /// `{ u32 cpu, res; } && CPU`, `{ u64 id; } && IDENTIFIER`: 8 bytes each.
    pub fn sample_id_len(&self) -> usize {
        if !self.sample_id_all {
            return 0;
        }
        use sample_type::*;
        [TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER]
            .iter()
            .filter(|&&b| self.has(b))
            .count()
            * 8
    }

    /// Bytes of one PERF_SAMPLE_READ value for a non-group read_format: value plus the
    /// optional time_enabled, time_running, id, lost words.
    pub(crate) fn read_value_words(&self) -> usize {
        use read_format::*;
        1 + [TOTAL_TIME_ENABLED, TOTAL_TIME_RUNNING, ID, LOST]
            .iter()
            .filter(|&&b| self.read_format & b != 0)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_id_len_counts_trailer_fields() {
        use sample_type::*;
        let l = SampleLayout::new(IP | TID | TIME | CALLCHAIN | BRANCH_STACK, 0, 0, true);
        assert_eq!(l.sample_id_len(), 16);
        let l = SampleLayout::new(
            IDENTIFIER | IP | TID | TIME | ID | STREAM_ID | CPU | PERIOD,
            0,
            0,
            true,
        );
        assert_eq!(l.sample_id_len(), 48);
        let l = SampleLayout::new(IDENTIFIER | TID, 0, 0, false);
        assert_eq!(l.sample_id_len(), 0);
    }

    #[test]
    fn regs_count_is_popcount() {
        let l = SampleLayout::new(0, 0, 0, false).with_regs(0x1c0, 0xff);
        assert_eq!((l.regs_user_count, l.regs_intr_count), (3, 8));
        // Mask 0x1c0 = bp (6), sp (7), ip (8): indexes 0, 1, 2; si (4) is not dumped.
        assert_eq!(
            [6, 7, 8, 4, 64].map(|b| l.regs_user_index(b)),
            [Some(0), Some(1), Some(2), None, None]
        );
        let l = l.with_regs(1 << 4 | 1 << 5 | 1 << 7 | 1 << 8, 0);
        assert_eq!([7, 8].map(|b| l.regs_user_index(b)), [Some(2), Some(3)]);
    }
}

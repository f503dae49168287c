//! [`RecordWriter`]: encodes kernel records (header and body) for one attr's layout; the
//! inverse of this module's parsers. Used by the perf.data writer, the software recorder and
//! the round-trip tests.

use super::error::RecordParseError;
use super::layout::{read_format, sample_type, SampleLayout};
use super::lost::{LostEvent, LostSamplesEvent};
use super::misc;
use super::record_type;
use super::sample::SampleRecord;
use super::sample_id::{write_sample_id, SampleId};
use crate::sample::PERF_CONTEXT_USER;
use crate::{CommEvent, Mmap2Event, TaskEvent};

/// Size of `struct perf_event_header`.
pub const HEADER_SIZE: usize = 8;

/// Encodes records for one attr: SAMPLE bodies follow its `sample_type`, other records get its
/// `sample_id` trailer. Each `write_*` appends one whole record (header included) to `out`.
#[derive(Clone, Copy, Debug)]
pub struct RecordWriter {
    layout: SampleLayout,
}

impl RecordWriter {
    /// A writer for records of the attr with this layout.
    pub fn new(layout: SampleLayout) -> Self {
        RecordWriter { layout }
    }

    /// The layout records are written with.
    pub fn layout(&self) -> &SampleLayout {
        &self.layout
    }

    /// Appends a PERF_RECORD_SAMPLE. The call chain is written as the kernel writes a user
    /// chain (`PERF_CONTEXT_USER` then the addresses; `nr = 0` when empty). Fields the
    /// pipeline does not keep are written empty: READ as zero values, RAW as 4 zero bytes,
    /// REGS_USER and STACK_USER as the record holds them (abi NONE and size 0 by default),
    /// REGS_INTR as ABI_64 with zero registers, AUX as size 0,
    /// branch counters as 0.
    pub fn write_sample(
        &self,
        out: &mut Vec<u8>,
        header_misc: u16,
        r: &SampleRecord,
    ) -> Result<(), RecordParseError> {
        use sample_type::*;
        let l = &self.layout;
        let s = &r.sample;
        self.record(out, record_type::SAMPLE, header_misc, |b| {
            if l.has(IDENTIFIER) {
                put64(b, r.id);
            }
            if l.has(IP) {
                put64(b, s.ip);
            }
            if l.has(TID) {
                put32(b, s.pid);
                put32(b, s.tid);
            }
            if l.has(TIME) {
                put64(b, s.time);
            }
            if l.has(ADDR) {
                put64(b, r.addr);
            }
            if l.has(ID) {
                put64(b, r.id);
            }
            if l.has(STREAM_ID) {
                put64(b, r.stream_id);
            }
            if l.has(CPU) {
                put32(b, r.cpu);
                put32(b, 0);
            }
            if l.has(PERIOD) {
                put64(b, r.period);
            }
            if l.has(READ) {
                if l.read_format & read_format::GROUP != 0 {
                    put64(b, 0); // nr
                    let times = l.read_format
                        & (read_format::TOTAL_TIME_ENABLED | read_format::TOTAL_TIME_RUNNING);
                    for _ in 0..times.count_ones() {
                        put64(b, 0);
                    }
                } else {
                    for _ in 0..l.read_value_words() {
                        put64(b, 0);
                    }
                }
            }
            if l.has(CALLCHAIN) {
                if s.callchain.is_empty() {
                    put64(b, 0);
                } else {
                    put64(b, s.callchain.len() as u64 + 1);
                    put64(b, PERF_CONTEXT_USER);
                    for &ip in &s.callchain {
                        put64(b, ip);
                    }
                }
            }
            if l.has(RAW) {
                put32(b, 4);
                put32(b, 0);
            }
            if l.has(BRANCH_STACK) {
                put64(b, s.lbr.len() as u64);
                if l.has_hw_idx() {
                    put64(b, r.hw_idx.unwrap_or(0));
                }
                for e in &s.lbr {
                    put64(b, e.from);
                    put64(b, e.to);
                    put64(b, e.flags);
                }
                if l.has_branch_counters() {
                    for _ in &s.lbr {
                        put64(b, 0);
                    }
                }
            }
            if l.has(REGS_USER) {
                // The record's registers (abi NONE: none), zero-padded to the mask's count.
                put64(b, r.regs_user_abi);
                if r.regs_user_abi != 0 {
                    for i in 0..l.regs_user_count as usize {
                        put64(b, r.regs_user.get(i).copied().unwrap_or(0));
                    }
                }
            }
            if l.has(STACK_USER) {
                // `size, data[size], dyn_size` with size rounded up to 8; size 0 when empty.
                let size = r.stack_user.len().div_ceil(8) * 8;
                put64(b, size as u64);
                if size != 0 {
                    b.extend_from_slice(&r.stack_user);
                    b.resize(b.len() + size - r.stack_user.len(), 0);
                    put64(b, r.stack_user.len() as u64);
                }
            }
            let words = [WEIGHT | WEIGHT_STRUCT, DATA_SRC, TRANSACTION];
            for w in words {
                if l.sample_type & w != 0 {
                    put64(b, 0);
                }
            }
            if l.has(REGS_INTR) {
                put64(b, 2);
                for _ in 0..l.regs_intr_count {
                    put64(b, 0);
                }
            }
            for w in [PHYS_ADDR, CGROUP, DATA_PAGE_SIZE, CODE_PAGE_SIZE, AUX] {
                if l.has(w) {
                    put64(b, 0);
                }
            }
        })
    }

    /// Appends a PERF_RECORD_MMAP2; `misc` is USER (KERNEL for pid -1), plus MMAP_BUILD_ID
    /// when the event carries a build id (at most 20 bytes).
    pub fn write_mmap2(
        &self,
        out: &mut Vec<u8>,
        e: &Mmap2Event,
        id: &SampleId,
    ) -> Result<(), RecordParseError> {
        let mut header_misc = if e.pid == -1 {
            misc::KERNEL
        } else {
            misc::USER
        };
        if let Some(build_id) = &e.build_id {
            if build_id.0.len() > 20 {
                let value = build_id.0.len() as u64;
                return Err(RecordParseError::CountTooLarge {
                    field: "build_id_size",
                    offset: 32,
                    value,
                    max: 20,
                });
            }
            header_misc |= misc::MMAP_BUILD_ID;
        }
        self.record(out, record_type::MMAP2, header_misc, |b| {
            put32(b, e.pid as u32);
            put32(b, e.tid as u32);
            put64(b, e.addr);
            put64(b, e.len);
            put64(b, e.pgoff);
            match &e.build_id {
                Some(build_id) => {
                    b.push(build_id.0.len() as u8);
                    b.extend_from_slice(&[0; 3]);
                    let mut bytes = [0u8; 20];
                    bytes[..build_id.0.len()].copy_from_slice(&build_id.0);
                    b.extend_from_slice(&bytes);
                }
                None => {
                    put32(b, e.maj);
                    put32(b, e.min);
                    put64(b, e.ino);
                    put64(b, e.ino_generation);
                }
            }
            put32(b, e.prot);
            put32(b, e.flags);
            put_c_string(b, &e.filename);
            write_sample_id(b, &self.layout, id);
        })
    }

    /// Appends a legacy PERF_RECORD_MMAP (no prot, flags, inode or build id).
    pub fn write_mmap(
        &self,
        out: &mut Vec<u8>,
        e: &Mmap2Event,
        id: &SampleId,
    ) -> Result<(), RecordParseError> {
        let header_misc = if e.pid == -1 {
            misc::KERNEL
        } else {
            misc::USER
        };
        self.record(out, record_type::MMAP, header_misc, |b| {
            put32(b, e.pid as u32);
            put32(b, e.tid as u32);
            put64(b, e.addr);
            put64(b, e.len);
            put64(b, e.pgoff);
            put_c_string(b, &e.filename);
            write_sample_id(b, &self.layout, id);
        })
    }

    /// Appends a PERF_RECORD_COMM (`misc` COMM_EXEC when [`CommEvent::exec`]).
    pub fn write_comm(
        &self,
        out: &mut Vec<u8>,
        e: &CommEvent,
        id: &SampleId,
    ) -> Result<(), RecordParseError> {
        let header_misc = if e.exec { misc::COMM_EXEC } else { 0 };
        self.record(out, record_type::COMM, header_misc, |b| {
            put32(b, e.pid);
            put32(b, e.tid);
            put_c_string(b, &e.comm);
            write_sample_id(b, &self.layout, id);
        })
    }

    /// Appends a PERF_RECORD_FORK.
    pub fn write_fork(
        &self,
        out: &mut Vec<u8>,
        e: &TaskEvent,
        id: &SampleId,
    ) -> Result<(), RecordParseError> {
        self.write_task(out, record_type::FORK, e, id)
    }

    /// Appends a PERF_RECORD_EXIT.
    pub fn write_exit(
        &self,
        out: &mut Vec<u8>,
        e: &TaskEvent,
        id: &SampleId,
    ) -> Result<(), RecordParseError> {
        self.write_task(out, record_type::EXIT, e, id)
    }

    fn write_task(
        &self,
        out: &mut Vec<u8>,
        ty: u32,
        e: &TaskEvent,
        id: &SampleId,
    ) -> Result<(), RecordParseError> {
        self.record(out, ty, 0, |b| {
            put32(b, e.pid);
            put32(b, e.ppid);
            put32(b, e.tid);
            put32(b, e.ptid);
            put64(b, e.time);
            write_sample_id(b, &self.layout, id);
        })
    }

    /// Appends a PERF_RECORD_LOST.
    pub fn write_lost(
        &self,
        out: &mut Vec<u8>,
        e: &LostEvent,
        id: &SampleId,
    ) -> Result<(), RecordParseError> {
        self.record(out, record_type::LOST, 0, |b| {
            put64(b, e.id);
            put64(b, e.lost);
            write_sample_id(b, &self.layout, id);
        })
    }

    /// Appends a PERF_RECORD_LOST_SAMPLES.
    pub fn write_lost_samples(
        &self,
        out: &mut Vec<u8>,
        e: &LostSamplesEvent,
        id: &SampleId,
    ) -> Result<(), RecordParseError> {
        self.record(out, record_type::LOST_SAMPLES, 0, |b| {
            put64(b, e.lost);
            write_sample_id(b, &self.layout, id);
        })
    }

    /// Appends a PERF_RECORD_FINISHED_ROUND (perf.data only; a bare header).
    pub fn write_finished_round(&self, out: &mut Vec<u8>) {
        put32(out, record_type::FINISHED_ROUND);
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&(HEADER_SIZE as u16).to_le_bytes());
    }

    /// Writes a header placeholder, the body, then patches the size; undoes the write when
    /// the record does not fit the u16 size.
    fn record(
        &self,
        out: &mut Vec<u8>,
        ty: u32,
        header_misc: u16,
        body: impl FnOnce(&mut Vec<u8>),
    ) -> Result<(), RecordParseError> {
        let start = out.len();
        put32(out, ty);
        out.extend_from_slice(&header_misc.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        body(out);
        let size = out.len() - start;
        debug_assert_eq!(size % 8, 0, "record bodies are 8-byte multiples");
        if size > u16::MAX as usize {
            out.truncate(start);
            return Err(RecordParseError::RecordTooLarge {
                len: size - HEADER_SIZE,
            });
        }
        out[start + 6..start + 8].copy_from_slice(&(size as u16).to_le_bytes());
        Ok(())
    }
}

fn put64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_le_bytes());
}

fn put32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}

/// A NUL-terminated string padded with zeros to a multiple of 8 bytes (as the kernel pads
/// MMAP filenames and COMM names).
fn put_c_string(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(s.as_bytes());
    let padded = (s.len() + 1).div_ceil(8) * 8;
    b.resize(b.len() + padded - s.len(), 0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::layout::branch_sample_type as bst;
    use crate::record::{parse_record, parse_sample_id, Record};
    use crate::{BuildId, LbrEntry, Sample};
    use sample_type::*;

    fn split(record: &[u8]) -> (u32, u16, &[u8]) {
        let ty = u32::from_le_bytes(record[0..4].try_into().unwrap());
        let misc = u16::from_le_bytes(record[4..6].try_into().unwrap());
        let size = u16::from_le_bytes(record[6..8].try_into().unwrap()) as usize;
        assert_eq!(size, record.len());
        (ty, misc, &record[8..])
    }

    fn sample_record() -> SampleRecord {
        SampleRecord {
            sample: Sample {
                pid: 7,
                tid: 8,
                time: 99,
                ip: 0x401000,
                callchain: vec![0x401000, 0x402000, 0x403000],
                lbr: (0..32u64)
                    .map(|i| LbrEntry {
                        from: 0x1000 + i,
                        to: 0x2000 + i,
                        flags: i << 4,
                    })
                    .collect(),
                count: 1,
                user_stack: None,
            },
            id: 17,
            stream_id: 18,
            addr: 0xdead,
            cpu: 1,
            period: 1009,
            hw_idx: None,
            ..SampleRecord::default()
        }
    }

    #[test]
    fn sample_round_trip_over_sample_types() {
        let combos: &[(u64, u64, u64)] = &[
            (
                IP | TID | TIME | CALLCHAIN | BRANCH_STACK,
                bst::USER | bst::ANY,
                0,
            ),
            (
                IP | TID | TIME | PERIOD | BRANCH_STACK,
                bst::USER | bst::ANY,
                0,
            ),
            (
                IDENTIFIER | IP | TID | TIME | CPU | PERIOD | CALLCHAIN | BRANCH_STACK,
                bst::ANY | bst::HW_INDEX,
                0,
            ),
            (
                IP | TID
                    | TIME
                    | ADDR
                    | ID
                    | STREAM_ID
                    | CPU
                    | PERIOD
                    | READ
                    | CALLCHAIN
                    | RAW
                    | BRANCH_STACK,
                bst::ANY,
                0,
            ),
            (
                IP | TID | READ | BRANCH_STACK | REGS_USER | STACK_USER | WEIGHT,
                bst::ANY | bst::COUNTERS,
                read_format::GROUP | read_format::ID | read_format::TOTAL_TIME_ENABLED,
            ),
            (
                IP | TID
                    | READ
                    | BRANCH_STACK
                    | DATA_SRC
                    | TRANSACTION
                    | REGS_INTR
                    | PHYS_ADDR
                    | CGROUP
                    | DATA_PAGE_SIZE
                    | CODE_PAGE_SIZE
                    | AUX,
                bst::ANY | bst::HW_INDEX,
                read_format::ID | read_format::LOST,
            ),
            (IP | TID | TIME | CALLCHAIN, 0, 0),
        ];
        for &(st, bt, rf) in combos {
            let layout = SampleLayout::new(st, bt, rf, true).with_regs(0x1c0, 0x3);
            let w = RecordWriter::new(layout);
            let mut r = sample_record();
            if layout.has_hw_idx() {
                r.hw_idx = Some(5);
            }
            let mut out = Vec::new();
            w.write_sample(&mut out, misc::USER | misc::EXACT_IP, &r)
                .unwrap();
            let (ty, m, body) = split(&out);
            assert_eq!((ty, m), (record_type::SAMPLE, misc::USER | misc::EXACT_IP));
            let back = match parse_record(ty, m, body, &layout).unwrap() {
                Record::Sample(s) => s,
                other => panic!("{other:?}"),
            };
            // Fields the layout does not carry come back as 0.
            let mut want = r.clone();
            let keep = |bit: u64, v: u64| if layout.has(bit) { v } else { 0 };
            want.sample.ip = keep(IP, want.sample.ip);
            want.sample.time = keep(TIME, want.sample.time);
            want.addr = keep(ADDR, want.addr);
            want.stream_id = keep(STREAM_ID, want.stream_id);
            want.cpu = keep(CPU, want.cpu.into()) as u32;
            want.period = keep(PERIOD, want.period);
            want.id = if layout.sample_type & (ID | IDENTIFIER) != 0 {
                want.id
            } else {
                0
            };
            if !layout.has(CALLCHAIN) {
                want.sample.callchain.clear();
            }
            if !layout.has(BRANCH_STACK) {
                want.sample.lbr.clear();
            }
            assert_eq!(back, want, "sample_type {st:#x} branch_sample_type {bt:#x}");
        }
    }

    #[test]
    fn sample_record_too_large() {
        let layout = SampleLayout::new(IP | CALLCHAIN, 0, 0, false);
        let mut r = sample_record();
        r.sample.callchain = vec![1; 9000];
        let mut out = vec![1, 2, 3];
        assert_eq!(
            RecordWriter::new(layout).write_sample(&mut out, 0, &r),
            Err(RecordParseError::RecordTooLarge {
                len: 8 + 8 + 9001 * 8
            })
        );
        assert_eq!(out, vec![1, 2, 3]);
    }

    #[test]
    fn side_band_round_trip() {
        let layout = SampleLayout::new(IDENTIFIER | IP | TID | TIME | CPU, 0, 0, true);
        let w = RecordWriter::new(layout);
        let id = SampleId {
            pid: 7,
            tid: 8,
            time: 50,
            id: 3,
            stream_id: 0,
            cpu: 1,
        };
        let mmap = Mmap2Event {
            pid: 7,
            tid: 8,
            addr: 0x400000,
            len: 0x1000,
            pgoff: 0,
            prot: 5,
            flags: 2,
            maj: 8,
            min: 2,
            ino: 77,
            ino_generation: 1,
            build_id: None,
            filename: "/usr/bin/eight-ch".into(),
        };
        let with_build_id = Mmap2Event {
            build_id: Some(BuildId(vec![0xab; 20])),
            maj: 0,
            min: 0,
            ino: 0,
            ino_generation: 0,
            ..mmap.clone()
        };
        let comm = CommEvent {
            pid: 7,
            tid: 8,
            comm: "prog".into(),
            exec: true,
        };
        let task = TaskEvent {
            pid: 7,
            ppid: 1,
            tid: 9,
            ptid: 7,
            time: 40,
        };
        let mut out = Vec::new();
        w.write_mmap2(&mut out, &mmap, &id).unwrap();
        w.write_mmap2(&mut out, &with_build_id, &id).unwrap();
        w.write_comm(&mut out, &comm, &id).unwrap();
        w.write_fork(&mut out, &task, &id).unwrap();
        w.write_exit(&mut out, &task, &id).unwrap();
        w.write_lost(&mut out, &LostEvent { id: 3, lost: 12 }, &id)
            .unwrap();
        w.write_lost_samples(&mut out, &LostSamplesEvent { lost: 4 }, &id)
            .unwrap();
        w.write_finished_round(&mut out);
        let legacy_start = out.len();
        w.write_mmap(&mut out, &mmap, &id).unwrap();
        let mut records = Vec::new();
        let mut pos = 0;
        while pos < out.len() {
            let size = u16::from_le_bytes(out[pos + 6..pos + 8].try_into().unwrap()) as usize;
            let (ty, m, body) = split(&out[pos..pos + size]);
            if ty != record_type::FINISHED_ROUND {
                assert_eq!(
                    parse_sample_id(body, &layout).unwrap(),
                    Some(id),
                    "record type {ty}"
                );
            }
            records.push(parse_record(ty, m, body, &layout).unwrap());
            pos += size;
        }
        assert_eq!(
            records,
            vec![
                Record::Mmap2(mmap.clone()),
                Record::Mmap2(with_build_id),
                Record::Comm(comm),
                Record::Fork(task.clone()),
                Record::Exit(task),
                Record::Lost(LostEvent { id: 3, lost: 12 }),
                Record::LostSamples(LostSamplesEvent { lost: 4 }),
                Record::Other(record_type::FINISHED_ROUND),
                Record::Mmap2(Mmap2Event {
                    prot: 5,
                    flags: 0,
                    maj: 0,
                    min: 0,
                    ino: 0,
                    ino_generation: 0,
                    ..mmap
                }),
            ]
        );
        // "/usr/bin/eight-ch" is 17 bytes: NUL-padded to 24; header 8 + fixed 64 + 24 + trailer 32.
        assert_eq!(
            u16::from_le_bytes(out[6..8].try_into().unwrap()),
            8 + 64 + 24 + 32
        );
        assert_eq!(out.len() - legacy_start, 8 + 32 + 24 + 32);
    }
}

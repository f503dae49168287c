//! PERF_RECORD_SAMPLE bodies: [`parse_sample_record`] / [`parse_sample`], and
//! [`parse_sample_record_into`], the same parser reusing a record's vectors (the live
//! readers parse into recycled samples: no allocation per sample).
//!
//! Field order, as the kernel writes it in `perf_output_sample()` (kernel/events/core.c; the
//! uapi comment misplaces CGROUP and AUX): IDENTIFIER, IP, TID, TIME, ADDR, ID, STREAM_ID,
//! CPU, PERIOD, READ, CALLCHAIN, RAW, BRANCH_STACK, REGS_USER, STACK_USER, WEIGHT /
//! WEIGHT_STRUCT, DATA_SRC, TRANSACTION, REGS_INTR, PHYS_ADDR, CGROUP, DATA_PAGE_SIZE,
//! CODE_PAGE_SIZE, AUX.

use super::cursor::ByteCursor;
use super::error::RecordParseError;
use super::layout::{read_format, sample_type, SampleLayout};
use crate::sample::{
    LbrEntry, Sample, UserStack, PERF_CONTEXT_MAX, PERF_CONTEXT_USER, PERF_REG_X86_BP,
    PERF_REG_X86_IP, PERF_REG_X86_SP, USER_STACK_WORDS,
};

/// `PERF_SAMPLE_REGS_ABI_64`: the registers are the 64-bit set.
pub const PERF_SAMPLE_REGS_ABI_64: u64 = 2;

/// Size of one `struct perf_branch_entry`: u64 from, u64 to, u64 flag bits.
pub const BRANCH_ENTRY_SIZE: usize = 24;

/// A parsed SAMPLE: the shared [`Sample`] plus the fields the pipeline does not keep but a
/// reader may need (to find the attr, or to write the record back). Fields the layout does
/// not carry are 0 (`hw_idx`: `None`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SampleRecord {
    /// IP, pid/tid, time, user call chain, branch stack; `count` is 1.
    pub sample: Sample,
    /// Event id (PERF_SAMPLE_IDENTIFIER, else PERF_SAMPLE_ID).
    pub id: u64,
    /// PERF_SAMPLE_STREAM_ID.
    pub stream_id: u64,
    /// PERF_SAMPLE_ADDR.
    pub addr: u64,
    /// PERF_SAMPLE_CPU.
    pub cpu: u32,
    /// PERF_SAMPLE_PERIOD.
    pub period: u64,
    /// The branch stack's `hw_idx` (PERF_SAMPLE_BRANCH_HW_INDEX), when present.
    pub hw_idx: Option<u64>,
    /// PERF_SAMPLE_REGS_USER `abi` (`PERF_SAMPLE_REGS_ABI_NONE` = 0: no registers,
    /// `_32` = 1, `_64` = 2).
    pub regs_user_abi: u64,
    /// PERF_SAMPLE_REGS_USER values, in ascending bit order of `sample_regs_user` (empty
    /// when the abi is NONE). Used by the uprobe allocation sampler to read arguments.
    pub regs_user: Vec<u64>,
    /// PERF_SAMPLE_STACK_USER bytes copied from the user stack pointer up (`dyn_size` of
    /// them are valid; the rest is cut off). Empty when not sampled.
    pub stack_user: Vec<u8>,
}

impl SampleRecord {
    /// Fills the PERF_SAMPLE_REGS_USER / STACK_USER fields from the sample's
    /// [`UserStack`] for `layout`'s register mask (ip, sp, bp at their places, every other
    /// register 0), as the kernel would have written them; without a [`UserStack`], abi
    /// NONE and no stack bytes.
    pub fn set_user_registers(&mut self, layout: &SampleLayout) {
        self.regs_user.clear();
        self.stack_user.clear();
        let Some(u) = self.sample.user_stack else {
            self.regs_user_abi = 0;
            return;
        };
        self.regs_user_abi = PERF_SAMPLE_REGS_ABI_64;
        let mut mask = layout.regs_user_mask;
        while mask != 0 {
            let bit = mask.trailing_zeros();
            mask &= mask - 1;
            self.regs_user.push(match bit {
                PERF_REG_X86_IP => u.ip,
                PERF_REG_X86_SP => u.sp,
                PERF_REG_X86_BP => u.bp,
                _ => 0,
            });
        }
        self.stack_user = u.stack_bytes();
    }
}

/// Parses a SAMPLE body into the shared [`Sample`] (see [`parse_sample_record`]).
pub fn parse_sample(body: &[u8], layout: &SampleLayout) -> Result<Sample, RecordParseError> {
    parse_sample_record(body, layout).map(|r| r.sample)
}

/// Parses a SAMPLE body (the bytes after `perf_event_header`) with the attr's layout.
///
/// Every field up to AUX is parsed or skipped; unknown `sample_type` bits (25 and up) are an
/// error. The call chain keeps only user-space addresses (those after `PERF_CONTEXT_USER`, or
/// all of them when the chain has no context marker), markers removed: what `perf script`
/// prints for a user-only recording.
pub fn parse_sample_record(
    body: &[u8],
    layout: &SampleLayout,
) -> Result<SampleRecord, RecordParseError> {
    let mut r = SampleRecord::default();
    parse_sample_record_into(body, layout, &mut r)?;
    Ok(r)
}

/// [`parse_sample_record`] into `r`: every field is overwritten, and `r`'s vectors (call
/// chain, branch stack, registers, stack bytes) are cleared and refilled, keeping their
/// capacity. After an error `r` holds a partly parsed record.
pub fn parse_sample_record_into(
    body: &[u8],
    layout: &SampleLayout,
    r: &mut SampleRecord,
) -> Result<(), RecordParseError> {
    use sample_type::*;
    let unsupported = layout.sample_type & !SUPPORTED;
    if unsupported != 0 {
        let bit = unsupported.trailing_zeros();
        return Err(RecordParseError::UnsupportedSampleType {
            bit,
            mask: 1 << bit,
            record: "SAMPLE",
        });
    }
    let mut c = ByteCursor::new(body);
    reset(r);
    if layout.has(IDENTIFIER) {
        r.id = c.u64("id (IDENTIFIER)")?;
    }
    if layout.has(IP) {
        r.sample.ip = c.u64("ip")?;
    }
    if layout.has(TID) {
        r.sample.pid = c.u32("pid")?;
        r.sample.tid = c.u32("tid")?;
    }
    if layout.has(TIME) {
        r.sample.time = c.u64("time")?;
    }
    if layout.has(ADDR) {
        r.addr = c.u64("addr")?;
    }
    if layout.has(ID) {
        r.id = c.u64("id")?;
    }
    if layout.has(STREAM_ID) {
        r.stream_id = c.u64("stream_id")?;
    }
    if layout.has(CPU) {
        r.cpu = c.u32("cpu")?;
        c.u32("res")?;
    }
    if layout.has(PERIOD) {
        r.period = c.u64("period")?;
    }
    if layout.has(READ) {
        skip_read(&mut c, layout)?;
    }
    if layout.has(CALLCHAIN) {
        let nr = c.count("callchain.nr", 8)?;
        let ips = c.bytes(nr * 8, "callchain.ips")?;
        user_callchain_into(
            ips.chunks_exact(8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8"))),
            &mut r.sample.callchain,
        );
    }
    if layout.has(RAW) {
        let size = c.u32("raw.size")? as usize;
        c.skip(size, "raw.data")?;
    }
    if layout.has(BRANCH_STACK) {
        let nr_offset = c.pos();
        let nr = c.u64("branch_stack.nr")?;
        if nr == 0 && layout.has_hw_idx() {
            // The kernel writes a bare `nr = 0` (no hw_idx) when no stack was captured, but
            // `nr = 0, hw_idx` when an empty stack was: take the reading that ends exactly at
            // the end of the body.
            let mut with_idx = c;
            let hw_idx = with_idx.u64("branch_stack.hw_idx");
            if let Ok(hw_idx) = hw_idx {
                if read_tail(&mut with_idx, layout, r).is_ok() && with_idx.remaining() == 0 {
                    r.hw_idx = Some(hw_idx);
                    return Ok(());
                }
            }
            return read_tail(&mut c, layout, r);
        }
        if layout.has_hw_idx() {
            r.hw_idx = Some(c.u64("branch_stack.hw_idx")?);
        }
        let entry_size = BRANCH_ENTRY_SIZE + if layout.has_branch_counters() { 8 } else { 0 };
        let max = (c.remaining() / entry_size) as u64;
        if nr > max {
            return Err(RecordParseError::CountTooLarge {
                field: "branch_stack.nr",
                offset: nr_offset,
                value: nr,
                max,
            });
        }
        let entries = c.bytes(nr as usize * BRANCH_ENTRY_SIZE, "branch_stack.entries")?;
        extend_branch_entries(&mut r.sample.lbr, entries);
        if layout.has_branch_counters() {
            c.skip(nr as usize * 8, "branch_stack.counters")?;
        }
    }
    read_tail(&mut c, layout, r)
}

/// Appends the `perf_branch_entry` records of `bytes` (whole entries, little-endian) to
/// `out`.
fn extend_branch_entries(out: &mut Vec<LbrEntry>, bytes: &[u8]) {
    let n = bytes.len() / BRANCH_ENTRY_SIZE;
    debug_assert_eq!(bytes.len(), n * BRANCH_ENTRY_SIZE);
    #[cfg(target_endian = "little")]
    {
        const _: () = assert!(std::mem::size_of::<LbrEntry>() == BRANCH_ENTRY_SIZE);
        out.reserve(n);
        // SAFETY: `LbrEntry` is `repr(C)` with three `u64` fields and no padding (its size
        // is the entry's, asserted above), so its bytes are the entry's words in the host's
        // (little-endian) order and any bytes are a valid value; `reserve` made room for
        // `n` entries past the length, and a record never overlaps a vector's spare room.
        unsafe {
            let len = out.len();
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                out.as_mut_ptr().add(len).cast::<u8>(),
                n * BRANCH_ENTRY_SIZE,
            );
            out.set_len(len + n);
        }
    }
    #[cfg(not(target_endian = "little"))]
    out.extend(bytes.chunks_exact(BRANCH_ENTRY_SIZE).map(|e| LbrEntry {
        from: u64::from_le_bytes(e[0..8].try_into().expect("8")),
        to: u64::from_le_bytes(e[8..16].try_into().expect("8")),
        flags: u64::from_le_bytes(e[16..24].try_into().expect("8")),
    }));
}

/// Empties `r` for [`parse_sample_record_into`], keeping the vectors' capacity.
fn reset(r: &mut SampleRecord) {
    // Destructured without `..`: a new field must be reset here too.
    let SampleRecord {
        sample,
        id,
        stream_id,
        addr,
        cpu,
        period,
        hw_idx,
        regs_user_abi,
        regs_user,
        stack_user,
    } = r;
    let Sample {
        pid,
        tid,
        time,
        ip,
        callchain,
        lbr,
        count,
        user_stack,
    } = sample;
    (*pid, *tid, *time, *ip, *count) = (0, 0, 0, 0, 1);
    *user_stack = None;
    callchain.clear();
    lbr.clear();
    (*id, *stream_id, *addr, *cpu, *period) = (0, 0, 0, 0, 0);
    *hw_idx = None;
    *regs_user_abi = 0;
    regs_user.clear();
    stack_user.clear();
}

/// Keeps the user part of a raw kernel call chain, context markers removed.
pub fn user_callchain(ips: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut out = Vec::new();
    user_callchain_into(ips, &mut out);
    out
}

/// [`user_callchain`] into `out` (cleared first), so a caller can reuse one buffer.
pub fn user_callchain_into(ips: impl Iterator<Item = u64>, out: &mut Vec<u64>) {
    out.clear();
    // One allocation at most: at most every entry is kept.
    out.reserve(ips.size_hint().0);
    // Before any marker the context is unknown: keep those entries (synthetic chains).
    let mut user = true;
    for ip in ips {
        if ip >= PERF_CONTEXT_MAX {
            user = ip == PERF_CONTEXT_USER;
        } else if user {
            out.push(ip);
        }
    }
}

/// Skips a PERF_SAMPLE_READ value (`read_format`, perf_event.h):
/// `!GROUP: { u64 value; [time_enabled]; [time_running]; [id]; [lost] }`,
/// `GROUP: { u64 nr; [time_enabled]; [time_running]; { u64 value; [id]; [lost] } cntr[nr] }`.
fn skip_read(c: &mut ByteCursor<'_>, layout: &SampleLayout) -> Result<(), RecordParseError> {
    let rf = layout.read_format;
    if rf & read_format::GROUP == 0 {
        return c.skip(layout.read_value_words() * 8, "read");
    }
    let per_counter = 8
        * (1 + [read_format::ID, read_format::LOST]
            .iter()
            .filter(|&&b| rf & b != 0)
            .count());
    let nr_offset = c.pos();
    let nr = c.u64("read.nr")?;
    let times = [
        read_format::TOTAL_TIME_ENABLED,
        read_format::TOTAL_TIME_RUNNING,
    ]
    .iter()
    .filter(|&&b| rf & b != 0)
    .count();
    c.skip(times * 8, "read.time")?;
    let max = (c.remaining() / per_counter) as u64;
    if nr > max {
        return Err(RecordParseError::CountTooLarge {
            field: "read.nr",
            offset: nr_offset,
            value: nr,
            max,
        });
    }
    c.skip(nr as usize * per_counter, "read.cntr")
}

/// Reads `{ u64 abi; u64 regs[count] }` (no regs when abi is PERF_SAMPLE_REGS_ABI_NONE = 0)
/// into `regs` (cleared first); returns the abi.
fn read_regs(
    c: &mut ByteCursor<'_>,
    count: u32,
    field: &'static str,
    regs: &mut Vec<u64>,
) -> Result<u64, RecordParseError> {
    regs.clear();
    let abi = c.u64(field)?;
    if abi == 0 {
        return Ok(0);
    }
    let bytes = c.bytes(count as usize * 8, field)?;
    regs.extend(
        bytes
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8"))),
    );
    Ok(abi)
}

/// The sample's [`UserStack`]: 64-bit user registers with ip, sp and bp, and the first
/// words of the PERF_SAMPLE_STACK_USER bytes (none when the layout has no STACK_USER).
fn user_stack(layout: &SampleLayout, r: &SampleRecord) -> Option<UserStack> {
    if r.regs_user_abi != PERF_SAMPLE_REGS_ABI_64 {
        return None;
    }
    let reg = |bit| r.regs_user.get(layout.regs_user_index(bit)?).copied();
    let mut stack = UserStack {
        ip: reg(PERF_REG_X86_IP)?,
        sp: reg(PERF_REG_X86_SP)?,
        bp: reg(PERF_REG_X86_BP)?,
        ..UserStack::default()
    };
    for (slot, bytes) in stack
        .words
        .iter_mut()
        .zip(r.stack_user.chunks_exact(8).take(USER_STACK_WORDS))
    {
        *slot = u64::from_le_bytes(bytes.try_into().expect("8"));
        stack.len += 1;
    }
    Some(stack)
}

/// Skips `{ u64 abi; u64 regs[count] }` (no regs when abi is PERF_SAMPLE_REGS_ABI_NONE = 0).
fn skip_regs(
    c: &mut ByteCursor<'_>,
    count: u32,
    field: &'static str,
) -> Result<(), RecordParseError> {
    let abi = c.u64(field)?;
    if abi != 0 {
        c.skip(count as usize * 8, field)?;
    }
    Ok(())
}

/// Reads the fields after BRANCH_STACK: REGS_USER and STACK_USER into `r`, the rest skipped.
fn read_tail(
    c: &mut ByteCursor<'_>,
    layout: &SampleLayout,
    r: &mut SampleRecord,
) -> Result<(), RecordParseError> {
    use sample_type::*;
    r.sample.user_stack = None;
    if layout.has(REGS_USER) {
        r.regs_user_abi = read_regs(c, layout.regs_user_count, "regs_user", &mut r.regs_user)?;
    }
    if layout.has(STACK_USER) {
        r.stack_user.clear();
        // `u64 size; u8 data[size]; u64 dyn_size` — with size 0 there is no dyn_size.
        let offset = c.pos();
        let size = c.u64("stack_user.size")?;
        if size > c.remaining() as u64 {
            let max = c.remaining() as u64;
            return Err(RecordParseError::CountTooLarge {
                field: "stack_user.size",
                offset,
                value: size,
                max,
            });
        }
        if size != 0 {
            let data = c.bytes(size as usize, "stack_user.data")?;
            let dyn_size = c.u64("stack_user.dyn_size")?;
            r.stack_user
                .extend_from_slice(&data[..(dyn_size.min(size) as usize)]);
        }
    }
    r.sample.user_stack = user_stack(layout, r);
    if layout.sample_type & (WEIGHT | WEIGHT_STRUCT) != 0 {
        c.u64("weight")?;
    }
    for (bit, field) in [(DATA_SRC, "data_src"), (TRANSACTION, "transaction")] {
        if layout.has(bit) {
            c.u64(field)?;
        }
    }
    if layout.has(REGS_INTR) {
        skip_regs(c, layout.regs_intr_count, "regs_intr")?;
    }
    for (bit, field) in [
        (PHYS_ADDR, "phys_addr"),
        (CGROUP, "cgroup"),
        (DATA_PAGE_SIZE, "data_page_size"),
        (CODE_PAGE_SIZE, "code_page_size"),
    ] {
        if layout.has(bit) {
            c.u64(field)?;
        }
    }
    if layout.has(AUX) {
        let offset = c.pos();
        let size = c.u64("aux.size")?;
        if size > c.remaining() as u64 {
            let max = c.remaining() as u64;
            return Err(RecordParseError::CountTooLarge {
                field: "aux.size",
                offset,
                value: size,
                max,
            });
        }
        c.skip(size as usize, "aux.data")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::layout::branch_sample_type;
    use sample_type::*;

    /// IP|TID|TIME|CALLCHAIN|BRANCH_STACK, what the recorder and `perf record -b -g` write.
    #[rustfmt::skip]
    const SAMPLE_BODY: [u8; 112] = [
        0x00, 0x11, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, // ip = 0x401100
        0xe8, 0x03, 0x00, 0x00,                         // pid = 1000
        0xe9, 0x03, 0x00, 0x00,                         // tid = 1001
        0x15, 0xcd, 0x5b, 0x07, 0x00, 0x00, 0x00, 0x00, // time = 123456789
        0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // callchain.nr = 4
        0x80, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // ips[0] = PERF_CONTEXT_KERNEL
        0x00, 0x00, 0x00, 0x81, 0xff, 0xff, 0xff, 0xff, // ips[1] = 0xffffffff81000000 (kernel, dropped)
        0x00, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // ips[2] = PERF_CONTEXT_USER
        0x00, 0x11, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, // ips[3] = 0x401100
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // branch_stack.nr = 1
        0xf0, 0x10, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, // lbr[0].from = 0x4010f0
        0x00, 0x11, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, // lbr[0].to = 0x401100
        0x32, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // lbr[0].flags: predicted, cycles = 3
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // (end of fields; padding for the test)
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // (padding)
    ];

    #[test]
    fn ip_tid_time_callchain_branch_stack() {
        let layout = SampleLayout::new(IP | TID | TIME | CALLCHAIN | BRANCH_STACK, 0, 0, true);
        let s = parse_sample(&SAMPLE_BODY, &layout).unwrap();
        assert_eq!(
            s,
            Sample {
                pid: 1000,
                tid: 1001,
                time: 123456789,
                ip: 0x401100,
                callchain: vec![0x401100],
                lbr: vec![LbrEntry {
                    from: 0x4010f0,
                    to: 0x401100,
                    flags: 0x32
                }],
                count: 1,
                user_stack: None,
            }
        );
        assert!(s.lbr[0].predicted() && !s.lbr[0].mispredicted());
    }

    /// Branch entries are read as the kernel's little-endian words (each word's bytes
    /// differ, so a swapped or shifted word shows), appended after what the vector holds.
    #[test]
    fn branch_entries_are_the_records_words() {
        let words: [u64; 6] = [
            0x0011_2233_4455_6677,
            0x8899_aabb_ccdd_eeff,
            0x0000_0000_0003_0032,
            0xffff_ffff_ff60_0000,
            0x0102_0304_0506_0708,
            u64::MAX,
        ];
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let first = LbrEntry {
            from: 1,
            to: 2,
            flags: 3,
        };
        let mut lbr = vec![first];
        extend_branch_entries(&mut lbr, &bytes);
        extend_branch_entries(&mut lbr, &[]);
        assert_eq!(
            lbr,
            [
                first,
                LbrEntry {
                    from: words[0],
                    to: words[1],
                    flags: words[2],
                },
                LbrEntry {
                    from: words[3],
                    to: words[4],
                    flags: words[5],
                },
            ]
        );
    }

    #[test]
    fn too_short_at_each_length_field() {
        let layout = SampleLayout::new(IP | TID | TIME | CALLCHAIN | BRANCH_STACK, 0, 0, true);
        // callchain.nr larger than what follows.
        let mut bad = SAMPLE_BODY;
        bad[24] = 100;
        assert_eq!(
            parse_sample(&bad, &layout),
            Err(RecordParseError::CountTooLarge {
                field: "callchain.nr",
                offset: 24,
                value: 100,
                max: 10
            })
        );
        // branch_stack.nr larger than what follows.
        let mut bad = SAMPLE_BODY;
        bad[64] = 2;
        assert_eq!(
            parse_sample(&bad, &layout),
            Err(RecordParseError::CountTooLarge {
                field: "branch_stack.nr",
                offset: 64,
                value: 2,
                max: 1
            })
        );
        // Body cut in the middle of the branch entry.
        assert_eq!(
            parse_sample(&SAMPLE_BODY[..80], &layout),
            Err(RecordParseError::CountTooLarge {
                field: "branch_stack.nr",
                offset: 64,
                value: 1,
                max: 0
            })
        );
        // Body cut in the middle of the time.
        assert_eq!(
            parse_sample(&SAMPLE_BODY[..20], &layout),
            Err(RecordParseError::TooShort {
                field: "time",
                offset: 16,
                needed: 8,
                len: 20
            })
        );
    }

    #[test]
    fn raw_size_and_stack_user_size_too_large() {
        #[rustfmt::skip]
        let raw: [u8; 16] = [
            0x10, 0x00, 0x00, 0x00,                         // raw.size = 16 (only 12 bytes follow)
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // raw.data ...
            0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(
            parse_sample(&raw, &SampleLayout::new(RAW, 0, 0, false)),
            Err(RecordParseError::TooShort {
                field: "raw.data",
                offset: 4,
                needed: 16,
                len: 16
            })
        );
        #[rustfmt::skip]
        let stack: [u8; 16] = [
            0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // stack_user.size = 64 (8 follow)
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // data ...
        ];
        assert_eq!(
            parse_sample(&stack, &SampleLayout::new(STACK_USER, 0, 0, false)),
            Err(RecordParseError::CountTooLarge {
                field: "stack_user.size",
                offset: 0,
                value: 64,
                max: 8
            })
        );
        #[rustfmt::skip]
        let read_group: [u8; 16] = [
            0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // read.nr = 5 (GROUP)
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // cntr[0].value
        ];
        assert_eq!(
            parse_sample(
                &read_group,
                &SampleLayout::new(READ, 0, read_format::GROUP, false)
            ),
            Err(RecordParseError::CountTooLarge {
                field: "read.nr",
                offset: 0,
                value: 5,
                max: 1
            })
        );
    }

    #[test]
    fn aux_size_and_regs_too_short() {
        #[rustfmt::skip]
        let aux: [u8; 16] = [
            0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // aux.size = 16 (8 follow)
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // aux.data ...
        ];
        assert_eq!(
            parse_sample(&aux, &SampleLayout::new(AUX, 0, 0, false)),
            Err(RecordParseError::CountTooLarge {
                field: "aux.size",
                offset: 0,
                value: 16,
                max: 8
            })
        );
        #[rustfmt::skip]
        let regs: [u8; 16] = [
            0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // regs_user.abi = PERF_SAMPLE_REGS_ABI_64
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // regs[0] (the mask asks for 3)
        ];
        let layout = SampleLayout::new(REGS_USER, 0, 0, false).with_regs(0x1c0, 0);
        assert_eq!(
            parse_sample(&regs, &layout),
            Err(RecordParseError::TooShort {
                field: "regs_user",
                offset: 8,
                needed: 24,
                len: 16
            })
        );
        // abi = 0 (PERF_SAMPLE_REGS_ABI_NONE): no registers follow.
        let mut none = regs;
        none[0] = 0;
        assert!(parse_sample(&none[..8], &layout).is_ok());
    }

    #[test]
    fn hw_idx_precedes_entries() {
        let layout = SampleLayout::new(
            IP | BRANCH_STACK,
            branch_sample_type::ANY | branch_sample_type::HW_INDEX,
            0,
            false,
        );
        #[rustfmt::skip]
        let body: [u8; 48] = [
            0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // ip = 0x1000
            0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // branch_stack.nr = 1
            0x1f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // hw_idx = 31
            0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // lbr[0].from = 0x10
            0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // lbr[0].to = 0x20
            0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // lbr[0].flags = mispred
        ];
        let r = parse_sample_record(&body, &layout).unwrap();
        assert_eq!(r.hw_idx, Some(31));
        assert_eq!(
            r.sample.lbr,
            vec![LbrEntry {
                from: 0x10,
                to: 0x20,
                flags: 1
            }]
        );
        // No stack captured: the kernel writes a bare nr = 0 without hw_idx.
        let mut empty = [0u8; 16];
        empty[..8].copy_from_slice(&body[..8]); // ip; then branch_stack.nr = 0 and nothing else
        let r = parse_sample_record(&empty, &layout).unwrap();
        assert_eq!((r.hw_idx, r.sample.lbr.len()), (None, 0));
    }

    /// IP|TID|CALLCHAIN|REGS_USER|STACK_USER with `sample_regs_user` = bp, sp, ip (bits 6,
    /// 7, 8) and `sample_stack_user` = 16, what the live sessions and the recorder write:
    /// perf_event.h `{ u64 abi; u64 regs[weight(mask)]; } && PERF_SAMPLE_REGS_USER`,
    /// `{ u64 size; char data[size]; u64 dyn_size; } && PERF_SAMPLE_STACK_USER`.
    #[rustfmt::skip]
    const USER_STACK_BODY: [u8; 104] = [
        0x00, 0x11, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, // ip = 0x401100
        0xe8, 0x03, 0x00, 0x00,                         // pid = 1000
        0xe8, 0x03, 0x00, 0x00,                         // tid = 1000
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // callchain.nr = 2
        0x00, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // ips[0] = PERF_CONTEXT_USER
        0x00, 0x11, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, // ips[1] = 0x401100
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // regs_user.abi = PERF_SAMPLE_REGS_ABI_64
        0xf0, 0xdf, 0xff, 0xff, 0xff, 0x7f, 0x00, 0x00, // regs[0] = bp = 0x7fffffffdff0
        0xc8, 0xdf, 0xff, 0xff, 0xff, 0x7f, 0x00, 0x00, // regs[1] = sp = 0x7fffffffdfc8
        0x00, 0x11, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, // regs[2] = ip = 0x401100
        0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // stack_user.size = 16
        0x34, 0x12, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, // data[0..8] = [sp] = 0x401234
        0xf0, 0xdf, 0xff, 0xff, 0xff, 0x7f, 0x00, 0x00, // data[8..16] = [sp + 8]
        0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // stack_user.dyn_size = 16
    ];

    fn user_stack_layout() -> SampleLayout {
        SampleLayout::new(IP | TID | CALLCHAIN | REGS_USER | STACK_USER, 0, 0, false)
            .with_regs(crate::sample::USER_STACK_REGS_MASK, 0)
    }

    #[test]
    fn user_stack_from_regs_and_stack_bytes() {
        let layout = user_stack_layout();
        assert_eq!(layout.regs_user_mask, 0x1c0);
        let r = parse_sample_record(&USER_STACK_BODY, &layout).unwrap();
        let want = UserStack {
            ip: 0x401100,
            sp: 0x7fff_ffff_dfc8,
            bp: 0x7fff_ffff_dff0,
            words: [0x401234, 0x7fff_ffff_dff0],
            len: 2,
        };
        assert_eq!(r.sample.user_stack, Some(want));
        assert_eq!(want.word_at(0), Some(0x401234));
        assert_eq!(want.word_at(8), Some(0x7fff_ffff_dff0));
        assert_eq!((want.word_at(16), want.word_at(4)), (None, None));

        // The writer puts the same bytes back from the UserStack alone.
        let mut from_stack = SampleRecord {
            sample: r.sample.clone(),
            ..SampleRecord::default()
        };
        from_stack.set_user_registers(&layout);
        let mut out = Vec::new();
        super::super::RecordWriter::new(layout)
            .write_sample(&mut out, 2, &from_stack)
            .unwrap();
        assert_eq!(&out[8..], &USER_STACK_BODY[..]);

        // dyn_size 8: the kernel copied only [sp]; the second word is not known.
        let mut short = USER_STACK_BODY;
        short[96] = 8;
        let s = parse_sample(&short, &layout).unwrap().user_stack.unwrap();
        assert_eq!(
            (s.len, s.word_at(0), s.word_at(8)),
            (1, Some(0x401234), None)
        );

        // stack_user.size 0 (nothing copied): no data and no dyn_size follow.
        let mut empty = USER_STACK_BODY[..72].to_vec();
        empty.extend_from_slice(&0u64.to_le_bytes());
        let s = parse_sample(&empty, &layout).unwrap().user_stack.unwrap();
        assert_eq!((s.len, s.sp), (0, 0x7fff_ffff_dfc8));

        // abi NONE (a kernel thread, or no user regs): no registers, no UserStack.
        let mut none = USER_STACK_BODY[..40].to_vec();
        none.extend_from_slice(&0u64.to_le_bytes());
        none.extend_from_slice(&USER_STACK_BODY[72..]);
        assert_eq!(parse_sample(&none, &layout).unwrap().user_stack, None);

        // A mask without bp (si, sp, ip): no UserStack, registers kept.
        let no_bp = layout.with_regs(1 << 4 | 1 << 7 | 1 << 8, 0);
        let r = parse_sample_record(&USER_STACK_BODY, &no_bp).unwrap();
        assert_eq!((r.sample.user_stack, r.regs_user.len()), (None, 3));

        // Cut in the middle of the stack bytes: an error naming the field.
        assert_eq!(
            parse_sample(&USER_STACK_BODY[..88], &layout),
            Err(RecordParseError::CountTooLarge {
                field: "stack_user.size",
                offset: 72,
                value: 16,
                max: 8
            })
        );
        assert_eq!(
            parse_sample(&USER_STACK_BODY[..100], &layout),
            Err(RecordParseError::TooShort {
                field: "stack_user.dyn_size",
                offset: 96,
                needed: 8,
                len: 100
            })
        );
    }

    #[test]
    fn unknown_sample_type_bit_is_an_error() {
        let layout = SampleLayout::new(IP | (1 << 30), 0, 0, false);
        assert_eq!(
            parse_sample(&[0; 16], &layout),
            Err(RecordParseError::UnsupportedSampleType {
                bit: 30,
                mask: 1 << 30,
                record: "SAMPLE"
            })
        );
    }

    #[test]
    fn callchain_without_markers_is_kept() {
        assert_eq!(user_callchain([1, 2, 3].into_iter()), vec![1, 2, 3]);
        let kernel_only = [PERF_CONTEXT_USER, 5, crate::sample::PERF_CONTEXT_KERNEL, 6];
        assert_eq!(user_callchain(kernel_only.into_iter()), vec![5]);
    }

    /// IDENTIFIER|IP|TID|CALLCHAIN|REGS_USER|STACK_USER, what the uprobe allocation sampler
    /// opens: regs SI, DI, SP (sample_regs_user bits 4, 5, 7) and 8 stack bytes.
    #[test]
    fn regs_user_and_stack_user_are_kept() {
        let mut body = Vec::new();
        for w in [
            9u64,                // identifier
            0x7f00_0000_1000,    // ip
            (1001 << 32) | 1000, // pid 1000, tid 1001
            2,                   // callchain.nr
            PERF_CONTEXT_USER,   // marker
            0x7f00_0000_1000,    // ips[1]
            2,                   // regs abi = PERF_SAMPLE_REGS_ABI_64
            3,                   // SI
            4096,                // DI
            0x7ffd_0000_0000,    // SP
            8,                   // stack_user.size
            0x40_1234,           // stack word: return address
            8,                   // dyn_size
        ] {
            body.extend_from_slice(&w.to_le_bytes());
        }
        let layout = SampleLayout::new(
            IDENTIFIER | IP | TID | CALLCHAIN | REGS_USER | STACK_USER,
            0,
            0,
            false,
        )
        .with_regs(1 << 4 | 1 << 5 | 1 << 7, 0);
        let r = parse_sample_record(&body, &layout).unwrap();
        assert_eq!(r.id, 9);
        assert_eq!(r.sample.callchain, vec![0x7f00_0000_1000]);
        assert_eq!(r.regs_user_abi, 2);
        assert_eq!(r.regs_user, vec![3, 4096, 0x7ffd_0000_0000]);
        assert_eq!(r.stack_user, 0x40_1234u64.to_le_bytes().to_vec());
        // A dyn_size below size keeps only the valid bytes; abi NONE has no registers.
        let n = body.len();
        body[n - 8..].copy_from_slice(&4u64.to_le_bytes());
        let r = parse_sample_record(&body, &layout).unwrap();
        assert_eq!(r.stack_user, vec![0x34, 0x12, 0x40, 0]);
        let layout = layout.with_regs(0, 0);
        let mut none = body[..48].to_vec();
        none.extend_from_slice(&0u64.to_le_bytes());
        none.extend_from_slice(&0u64.to_le_bytes());
        let r = parse_sample_record(&none, &layout).unwrap();
        assert_eq!(
            (r.regs_user_abi, r.regs_user.len(), r.stack_user.len()),
            (0, 0, 0)
        );

        // Parsing into a used record (regs, stack bytes, a longer chain) leaves nothing
        // of it behind and keeps its vectors' allocations.
        let mut reused =
            parse_sample_record(&body, &layout.with_regs(1 << 4 | 1 << 5 | 1 << 7, 0)).unwrap();
        reused.sample.callchain.extend([1, 2, 3, 4, 5]);
        reused.sample.lbr.push(LbrEntry::default());
        reused.hw_idx = Some(3);
        let chain = reused.sample.callchain.as_ptr();
        parse_sample_record_into(&none, &layout, &mut reused).unwrap();
        assert_eq!(reused, parse_sample_record(&none, &layout).unwrap());
        assert_eq!(reused.sample.callchain.as_ptr(), chain);
        let branch = SampleLayout::new(IP | TID | TIME | CALLCHAIN | BRANCH_STACK, 0, 0, true);
        parse_sample_record_into(&SAMPLE_BODY, &branch, &mut reused).unwrap();
        assert_eq!(reused, parse_sample_record(&SAMPLE_BODY, &branch).unwrap());
        assert_eq!(reused.sample.callchain.as_ptr(), chain);
        assert_eq!(reused.sample.lbr.len(), 1);
    }
}

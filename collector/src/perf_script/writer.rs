//! Writes samples as `perf script -F ip,brstack --show-mmap-events` text with call stacks.
//!
//! The layout is what Debian's perf 6.1 prints for a perf.data recorded with
//! `perf record -b -g` (and what llvm-profgen's hybrid reader parses):
//!
//! * each executable mapping, in stream order, as
//!   `PERF_RECORD_MMAP2 PID/TID: [0xADDR(0xLEN) @ PGOFF MAJ:MIN INO INO_GEN]: rwxp PATH`
//!   (`perf_event__fprintf_mmap2`: addresses with `%#lx`, so a zero offset prints as `0`;
//!   `%02x:%02x` device; decimal inode and generation; the last prot letter is `s` for
//!   `MAP_SHARED`, else `p`);
//! * each sample as an empty line (perf writes `'\n'` before a sample with a call chain),
//!   one line per call chain entry, leaf first, `\t%16lx` (no `0x`, right-aligned in 16
//!   columns), then the branch stack newest first, each entry
//!   ` 0xFROM/0xTO/P/-/-/CYCLES/TYPE ` with `P`/`M`/`-` for predicted/mispredicted/unknown,
//!   `X` for in-transaction, `A` for abort, and the branch type name (`""` for an unknown
//!   type, perf 6.1 `get_branch_type`), and a final newline.
//!
//! COMM/FORK/EXIT events are not printed (`--show-task-events` is not part of the command).

use std::io::{self, Write};

use crate::{LbrEntry, Mmap2Event, PerfEvent, Recording, Sample, SideBandEvent};

/// Writes the whole recording as perf script text.
pub fn write_perf_script(out: &mut impl Write, recording: &Recording) -> io::Result<()> {
    for event in &recording.events {
        match event {
            PerfEvent::SideBand(SideBandEvent::Mmap2(m)) if m.is_executable() => {
                write_mmap2(out, m)?
            }
            PerfEvent::SideBand(_) => {}
            PerfEvent::Sample(s) => write_sample(out, s)?,
        }
    }
    Ok(())
}

/// Renders the whole recording as a string.
pub fn perf_script_string(recording: &Recording) -> String {
    let mut buf = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = write_perf_script(&mut buf, recording);
    String::from_utf8_lossy(&buf).into_owned()
}

/// C's `%#lx`: `0x`-prefixed hex, except that zero prints as plain `0`.
fn alt_hex(v: u64) -> String {
    if v == 0 {
        "0".to_string()
    } else {
        format!("{v:#x}")
    }
}

/// One `PERF_RECORD_MMAP2` line.
pub fn write_mmap2(out: &mut impl Write, m: &Mmap2Event) -> io::Result<()> {
    let prot = |bit: u32, c: char| if m.prot & bit != 0 { c } else { '-' };
    let detail = match &m.build_id {
        Some(id) => format!("<{}>", id.to_hex()),
        None => format!("{:02x}:{:02x} {} {}", m.maj, m.min, m.ino, m.ino_generation),
    };
    writeln!(
        out,
        "PERF_RECORD_MMAP2 {}/{}: [{}({}) @ {} {}]: {}{}{}{} {}",
        m.pid,
        m.tid,
        alt_hex(m.addr),
        alt_hex(m.len),
        alt_hex(m.pgoff),
        detail,
        prot(1, 'r'),
        prot(2, 'w'),
        prot(4, 'x'),
        if m.flags & 1 != 0 { 's' } else { 'p' },
        m.filename
    )
}

/// One sample: blank line, call stack lines, branch stack line.
pub fn write_sample(out: &mut impl Write, s: &Sample) -> io::Result<()> {
    writeln!(out)?;
    for ip in &s.callchain {
        writeln!(out, "\t{ip:16x}")?;
    }
    let mut line = String::with_capacity(s.lbr.len() * 40);
    for e in &s.lbr {
        push_branch(&mut line, e);
    }
    writeln!(out, "{line}")
}

fn push_branch(line: &mut String, e: &LbrEntry) {
    use std::fmt::Write as _;
    let pred = if e.predicted() {
        'P'
    } else if e.mispredicted() {
        'M'
    } else {
        '-'
    };
    let in_tx = if e.flags & 4 != 0 { 'X' } else { '-' };
    let abort = if e.flags & 8 != 0 { 'A' } else { '-' };
    let cycles = (e.flags >> 4) & 0xffff;
    let _ = write!(
        line,
        " {:#x}/{:#x}/{pred}/{in_tx}/{abort}/{cycles}/{} ",
        e.from,
        e.to,
        branch_type_name((e.flags >> 20) & 0xf)
    );
}

/// perf's `branch_type_name` for `PERF_BR_*` (util/branch.c); unknown (0) prints as empty.
fn branch_type_name(t: u64) -> &'static str {
    match t {
        1 => "COND",
        2 => "UNCOND",
        3 => "IND",
        4 => "CALL",
        5 => "IND_CALL",
        6 => "RET",
        7 => "SYSCALL",
        8 => "SYSRET",
        9 => "COND_CALL",
        10 => "COND_RET",
        11 => "ERET",
        12 => "IRQ",
        13 => "SERROR",
        14 => "NO_TX",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BuildId, EventDescription};

    fn recording(events: Vec<PerfEvent>) -> Recording {
        Recording {
            event: EventDescription::intel_taken_branches(1009, false),
            build_ids: vec![],
            events,
            cmdline: vec![],
        }
    }

    #[test]
    fn writes_mmap_and_hybrid_sample_lines() {
        let mmap = Mmap2Event {
            pid: 2113428,
            tid: 2113428,
            addr: 0x7fd4efb57000,
            len: 0x204000,
            pgoff: 0,
            prot: 5,
            flags: 2,
            maj: 8,
            min: 4,
            ino: 19532229,
            ino_generation: 3585508847,
            build_id: None,
            filename: "/usr/lib64/libdl-2.17.so".into(),
        };
        let data = Mmap2Event {
            prot: 3,
            ..mmap.clone()
        };
        let sample = Sample {
            pid: 1,
            tid: 1,
            time: 5,
            ip: 0x30179e,
            callchain: vec![0x30179e, 0x3017f9, 0x7f83e84e7793, 0x5541f689495641d7],
            lbr: vec![
                LbrEntry {
                    from: 0x3017cf,
                    to: 0x30179e,
                    flags: 2,
                },
                LbrEntry {
                    from: 0x30177f,
                    to: 0x3017c4,
                    flags: 1 | (7 << 4) | (4 << 20),
                },
            ],
            count: 1,
            user_stack: None,
        };
        let text = perf_script_string(&recording(vec![
            PerfEvent::SideBand(SideBandEvent::Mmap2(mmap)),
            PerfEvent::SideBand(SideBandEvent::Mmap2(data)),
            PerfEvent::Sample(sample),
        ]));
        assert_eq!(
            text,
            "PERF_RECORD_MMAP2 2113428/2113428: [0x7fd4efb57000(0x204000) @ 0 08:04 19532229 3585508847]: r-xp /usr/lib64/libdl-2.17.so\n\
             \n\
             \t          30179e\n\
             \t          3017f9\n\
             \t    7f83e84e7793\n\
             \t5541f689495641d7\n \
             0x3017cf/0x30179e/P/-/-/0/  0x30177f/0x3017c4/M/-/-/7/CALL \n"
        );
    }

    #[test]
    fn build_id_mmap_form() {
        let m = Mmap2Event {
            pid: 1,
            tid: 1,
            addr: 0x1000,
            len: 0x1000,
            pgoff: 0x2000,
            prot: 4,
            flags: 1,
            build_id: Some(BuildId(vec![0xab, 0xcd])),
            filename: "x".into(),
            ..Mmap2Event::default()
        };
        let mut out = Vec::new();
        write_mmap2(&mut out, &m).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "PERF_RECORD_MMAP2 1/1: [0x1000(0x1000) @ 0x2000 <abcd>]: --xs x\n"
        );
    }
}

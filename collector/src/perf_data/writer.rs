//! [`write_perf_data`]: a [`Recording`] as a perf.data file (PERFILE2, file mode) that
//! Debian's perf 6.1 reads without a warning (`perf script`, `perf report`).
//!
//! File layout written: header (104 bytes) | the attr's id array | attrs | data | feature
//! section table | feature sections. One attr; its ids array holds [`EVENT_ID`].
//! Records: COMM / MMAP2 / FORK / EXIT / SAMPLE in recording order, each non-sample record
//! with a `sample_id` trailer (TID, TIME), and a FINISHED_ROUND every [`ROUND_RECORDS`]
//! records and at the end.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use super::error::PerfDataError;
use super::features::{
    write_build_id_event, write_event_desc, write_nrcpus, write_string, write_string_list,
};
use super::header::{
    attr_flag, feature, FileHeader, FileSection, RawAttr, ATTR_SIZE, FILE_HEADER_SIZE,
};
use crate::record::{
    branch_sample_type, misc, sample_type, RecordWriter, SampleId, SampleLayout, SampleRecord,
};
use crate::sample::{USER_STACK_BYTES, USER_STACK_REGS_MASK};
use crate::{PerfEvent, Recording, SideBandEvent};

/// The one event id written (attr ids array and EVENT_DESC).
pub const EVENT_ID: u64 = 1;
/// Records between two FINISHED_ROUND records (perf writes one per ring-buffer pass).
pub const ROUND_RECORDS: usize = 4096;
/// A pre-aggregated sample (count > 1) is written `count` times; larger counts are refused.
pub const MAX_SAMPLE_REPEAT: u64 = 1 << 20;
/// The `cpuid` written: Skylake-SP (family 6, model 85), the microarchitecture whose
/// BR_INST_RETIRED.NEAR_TAKEN (raw 0x20c4) the recording stands for.
pub const CPUID: &str = "GenuineIntel,6,85,4";

/// The attr a recording is written with: its event's type, config, period and precise_ip;
/// sample_type IP|TID|TIME (+CALLCHAIN, +BRANCH_STACK, +REGS_USER|STACK_USER as the event
/// says: registers bp, sp, ip and [`USER_STACK_BYTES`] of stack); branch_sample_type ANY|USER; user-only; the side-band bits `perf record` sets (mmap, comm, task, mmap2,
/// comm_exec, sample_id_all).
pub fn recording_attr(recording: &Recording) -> RawAttr {
    let e = &recording.event;
    let mut st = sample_type::IP | sample_type::TID | sample_type::TIME;
    if e.callchain {
        st |= sample_type::CALLCHAIN;
    }
    if e.branch_stack {
        st |= sample_type::BRANCH_STACK;
    }
    if e.user_stack {
        st |= sample_type::REGS_USER | sample_type::STACK_USER;
    }
    let flags = attr_flag::DISABLED
        | attr_flag::INHERIT
        | attr_flag::EXCLUDE_KERNEL
        | attr_flag::EXCLUDE_HV
        | attr_flag::MMAP
        | attr_flag::COMM
        | attr_flag::ENABLE_ON_EXEC
        | attr_flag::TASK
        | (u64::from(e.precise_ip & 3) << attr_flag::PRECISE_IP_SHIFT)
        | attr_flag::SAMPLE_ID_ALL
        | attr_flag::EXCLUDE_GUEST
        | attr_flag::MMAP2
        | attr_flag::COMM_EXEC;
    RawAttr {
        type_: e.attr_type,
        size: ATTR_SIZE as u32,
        config: e.config,
        sample_period: e.sample_period,
        sample_type: st,
        read_format: 0,
        flags,
        branch_sample_type: if e.branch_stack {
            branch_sample_type::ANY | branch_sample_type::USER
        } else {
            0
        },
        sample_regs_user: if e.user_stack {
            USER_STACK_REGS_MASK
        } else {
            0
        },
        sample_stack_user: if e.user_stack { USER_STACK_BYTES } else { 0 },
    }
}

/// Writes `recording` to `path` as a perf.data file.
pub fn write_perf_data(path: &Path, recording: &Recording) -> Result<(), PerfDataError> {
    let io = |source| PerfDataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::create(path).map_err(io)?;
    // In large writes: see `large_writes`.
    let mut w = crate::large_writes::large_writer(file);
    let attr = recording_attr(recording);
    let layout = SampleLayout::new(attr.sample_type, attr.branch_sample_type, 0, true)
        .with_regs(attr.sample_regs_user, 0);
    let writer = RecordWriter::new(layout);

    // Header placeholder, then the ids array and the attrs array.
    w.write_all(&[0u8; FILE_HEADER_SIZE as usize]).map_err(io)?;
    let ids = FileSection {
        offset: FILE_HEADER_SIZE,
        size: 8,
    };
    w.write_all(&EVENT_ID.to_le_bytes()).map_err(io)?;
    let attrs = FileSection {
        offset: ids.end(),
        size: (ATTR_SIZE + 16) as u64,
    };
    let mut buf = Vec::with_capacity(1 << 16);
    attr.write(&mut buf);
    ids.write(&mut buf);
    w.write_all(&buf).map_err(io)?;

    // Data section.
    let data_offset = attrs.end();
    let mut data_size = 0u64;
    let mut records = 0usize;
    let mut last_time = 0u64;
    buf.clear();
    let encode = |source| PerfDataError::Encode {
        path: path.to_path_buf(),
        source,
    };
    for event in &recording.events {
        match event {
            PerfEvent::Sample(s) => {
                if s.count > MAX_SAMPLE_REPEAT {
                    return Err(PerfDataError::Unsupported {
                        path: path.to_path_buf(),
                        what: format!("sample count {} above {MAX_SAMPLE_REPEAT}", s.count),
                    });
                }
                let mut record = SampleRecord {
                    sample: s.clone(),
                    period: attr.sample_period,
                    ..SampleRecord::default()
                };
                record.set_user_registers(&layout);
                for _ in 0..s.count.max(1) {
                    writer
                        .write_sample(&mut buf, misc::USER | misc::EXACT_IP, &record)
                        .map_err(encode)?;
                    records += 1;
                }
                last_time = last_time.max(s.time);
            }
            PerfEvent::SideBand(sb) => {
                // Side-band records carry no time of their own (except FORK/EXIT): they get the
                // time of the sample before them, so perf's time ordering keeps them in place.
                match sb {
                    SideBandEvent::Mmap2(e) => {
                        let id = SampleId {
                            pid: e.pid as u32,
                            tid: e.tid as u32,
                            time: last_time,
                            ..SampleId::default()
                        };
                        writer.write_mmap2(&mut buf, e, &id).map_err(encode)?;
                    }
                    SideBandEvent::Comm(e) => {
                        let id = SampleId {
                            pid: e.pid,
                            tid: e.tid,
                            time: last_time,
                            ..SampleId::default()
                        };
                        writer.write_comm(&mut buf, e, &id).map_err(encode)?;
                    }
                    SideBandEvent::Fork(e) => {
                        let id = SampleId {
                            pid: e.pid,
                            tid: e.tid,
                            time: e.time,
                            ..SampleId::default()
                        };
                        writer.write_fork(&mut buf, e, &id).map_err(encode)?;
                    }
                    SideBandEvent::Exit(e) => {
                        let id = SampleId {
                            pid: e.pid,
                            tid: e.tid,
                            time: e.time,
                            ..SampleId::default()
                        };
                        writer.write_exit(&mut buf, e, &id).map_err(encode)?;
                    }
                }
                records += 1;
            }
        }
        if records >= ROUND_RECORDS {
            writer.write_finished_round(&mut buf);
            records = 0;
        }
        if buf.len() >= 1 << 16 {
            w.write_all(&buf).map_err(io)?;
            data_size += buf.len() as u64;
            buf.clear();
        }
    }
    writer.write_finished_round(&mut buf);
    w.write_all(&buf).map_err(io)?;
    data_size += buf.len() as u64;
    let data = FileSection {
        offset: data_offset,
        size: data_size,
    };

    // Feature sections, in ascending bit order, after the section table.
    let sections = feature_sections(recording, &attr);
    let table_size = 16 * sections.len() as u64;
    let mut offset = data.end() + table_size;
    let mut table = Vec::with_capacity(table_size as usize);
    let mut features = [0u64; 4];
    for (bit, body) in &sections {
        features[(*bit / 64) as usize] |= 1 << (bit % 64);
        FileSection {
            offset,
            size: body.len() as u64,
        }
        .write(&mut table);
        offset += body.len() as u64;
    }
    w.write_all(&table).map_err(io)?;
    for (_, body) in &sections {
        w.write_all(body).map_err(io)?;
    }

    let header = FileHeader {
        attr_size: (ATTR_SIZE + 16) as u64,
        attrs,
        data,
        event_types: FileSection::default(),
        features,
    };
    let mut hbytes = Vec::with_capacity(FILE_HEADER_SIZE as usize);
    header.write(&mut hbytes);
    w.seek(SeekFrom::Start(0)).map_err(io)?;
    w.write_all(&hbytes).map_err(io)?;
    w.flush().map_err(io)?;
    Ok(())
}

/// The feature sections, ascending by bit.
fn feature_sections(recording: &Recording, attr: &RawAttr) -> Vec<(u32, Vec<u8>)> {
    let mut out = Vec::new();
    let mut s = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for entry in &recording.build_ids {
        // One entry per (build id, file), however many processes mapped it.
        if !seen.insert((&entry.build_id, &entry.filename)) {
            continue;
        }
        // perf keys build ids by machine: pid -1 is the host (HOST_KERNEL_ID); any other pid
        // would make perf look for a guest machine. Only the kernel image is cpumode KERNEL
        // ([vdso] is a user-space DSO).
        let cpumode = if entry.filename.starts_with("[kernel") {
            misc::KERNEL
        } else {
            misc::USER
        };
        write_build_id_event(&mut s, cpumode, -1, &entry.build_id, &entry.filename);
    }
    out.push((feature::BUILD_ID, std::mem::take(&mut s)));
    let host = HostInfo::current();
    write_string(&mut s, &host.hostname);
    out.push((feature::HOSTNAME, std::mem::take(&mut s)));
    write_string(&mut s, &host.os_release);
    out.push((feature::OSRELEASE, std::mem::take(&mut s)));
    write_string(&mut s, concat!("pgo-agent ", env!("CARGO_PKG_VERSION")));
    out.push((feature::VERSION, std::mem::take(&mut s)));
    write_string(&mut s, std::env::consts::ARCH);
    out.push((feature::ARCH, std::mem::take(&mut s)));
    write_nrcpus(&mut s, host.nr_cpus, host.nr_cpus);
    out.push((feature::NRCPUS, std::mem::take(&mut s)));
    write_string(&mut s, "pgo-agent software LBR (Intel Skylake-compatible)");
    out.push((feature::CPUDESC, std::mem::take(&mut s)));
    write_string(&mut s, CPUID);
    out.push((feature::CPUID, std::mem::take(&mut s)));
    s.extend_from_slice(&host.total_mem_kb.to_le_bytes());
    out.push((feature::TOTAL_MEM, std::mem::take(&mut s)));
    if !recording.cmdline.is_empty() {
        write_string_list(&mut s, &recording.cmdline);
        out.push((feature::CMDLINE, std::mem::take(&mut s)));
    }
    write_event_desc(
        &mut s,
        &[(*attr, recording.event.name.as_str(), &[EVENT_ID])],
    );
    out.push((feature::EVENT_DESC, std::mem::take(&mut s)));
    if recording.event.branch_stack {
        out.push((feature::BRANCH_STACK, Vec::new()));
    }
    out
}

/// What the writing machine reports about itself (for HOSTNAME, OSRELEASE, NRCPUS, TOTAL_MEM).
struct HostInfo {
    hostname: String,
    os_release: String,
    nr_cpus: u32,
    total_mem_kb: u64,
}

impl HostInfo {
    fn current() -> HostInfo {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into())
        };
        let total_mem_kb = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0);
        HostInfo {
            hostname: read("/proc/sys/kernel/hostname"),
            os_release: read("/proc/sys/kernel/osrelease"),
            nr_cpus: std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(1),
            total_mem_kb,
        }
    }
}

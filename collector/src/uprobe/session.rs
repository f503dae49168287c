//! [`UprobeSession`]: the allocator probes of one process, opened per thread and CPU
//! (`inherit` set, so threads and children created later are followed), their records
//! funnelled into one ring per CPU (`PERF_EVENT_IOC_SET_OUTPUT`; the kernel refuses to
//! mmap an inherited per-task event opened on all CPUs, kernel/events/core.c `perf_mmap`).
//!
//! Every record is parsed by [`crate::record::parse_record`]; samples become
//! [`AllocCall`]s (the probe told apart by the event id, PERF_SAMPLE_IDENTIFIER), MMAP2
//! records are handed on for symbolization.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::live::{PerfEventFd, RingBuffer};
use crate::record::{parse_record, Record, SampleLayout};
use crate::Mmap2Event;

use super::call::AllocCall;
use super::probe::{layout, uprobe_pmu_type, AllocFn, ProbeTarget};
use super::UprobeError;

/// Session settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UprobeSettings {
    /// Data pages of each CPU's ring (a power of two).
    pub ring_pages: usize,
    /// Start at the target's next exec (`enable_on_exec`, for a launched child), instead of
    /// at [`UprobeSession::enable`].
    pub enable_on_exec: bool,
}

impl Default for UprobeSettings {
    fn default() -> Self {
        UprobeSettings {
            ring_pages: 1024,
            enable_on_exec: false,
        }
    }
}

/// Counters of a session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// Records read.
    pub records: u64,
    /// Probe hits decoded into allocation calls.
    pub calls: u64,
    /// MMAP2 records.
    pub mmaps: u64,
    /// Records the kernel could not write (PERF_RECORD_LOST `lost` sums).
    pub lost: u64,
    /// Samples without 64-bit user registers or a known event id.
    pub bad_records: u64,
    /// Records that did not parse.
    pub parse_errors: u64,
    /// The first parse error, for the report.
    pub first_parse_error: Option<String>,
    /// Ring corruptions that forced a resynchronisation.
    pub ring_resyncs: u64,
}

/// The opened probes; see the module docs.
pub struct UprobeSession {
    fds: Vec<PerfEventFd>,
    rings: Vec<RingBuffer>,
    ids: HashMap<u64, AllocFn>,
    layout: SampleLayout,
    scratch: Vec<u8>,
    stats: SessionStats,
}

impl std::fmt::Debug for UprobeSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UprobeSession")
            .field("events", &self.fds.len())
            .field("rings", &self.rings.len())
            .field("stats", &self.stats)
            .finish()
    }
}

/// The libc mapped by `pid` (from `/proc/PID/maps`), as a path this process can open
/// (`/proc/PID/root/...` when the plain path does not exist here, e.g. in a container).
pub fn libc_of_process(pid: i32) -> Result<PathBuf, UprobeError> {
    let maps = format!("/proc/{pid}/maps");
    let text = std::fs::read_to_string(&maps).map_err(|source| UprobeError::Io {
        path: maps.into(),
        source,
    })?;
    let path = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| is_libc(p))
        .ok_or(UprobeError::NoLibc { pid })?;
    let plain = Path::new(path);
    if plain.exists() {
        Ok(plain.to_path_buf())
    } else {
        Ok(Path::new(&format!("/proc/{pid}/root")).join(path.trim_start_matches('/')))
    }
}

/// True for a glibc path (`.../libc.so.6`, `.../libc-2.31.so`).
pub fn is_libc(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("libc.so") || (name.starts_with("libc-") && name.ends_with(".so"))
}

/// The threads of `pid` (`/proc/PID/task`).
pub fn threads_of(pid: i32) -> Result<Vec<i32>, UprobeError> {
    let dir = format!("/proc/{pid}/task");
    let rd = std::fs::read_dir(&dir).map_err(|source| UprobeError::Io {
        path: dir.into(),
        source,
    })?;
    let mut tids: Vec<i32> = rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

impl UprobeSession {
    /// Opens a probe on each of `targets` for each thread in `tids` on each CPU in `cpus`.
    pub fn open(
        targets: &[ProbeTarget],
        tids: &[i32],
        cpus: &[u32],
        settings: UprobeSettings,
    ) -> Result<UprobeSession, UprobeError> {
        let pmu = uprobe_pmu_type()?;
        let mut s = UprobeSession {
            fds: Vec::new(),
            rings: Vec::new(),
            ids: HashMap::new(),
            layout: layout(),
            scratch: Vec::new(),
            stats: SessionStats::default(),
        };
        for &cpu in cpus {
            let mut leader: Option<usize> = None;
            for &tid in tids {
                for (i, t) in targets.iter().enumerate() {
                    // `t.path` (config1's target) lives across the call.
                    let mut raw = t.to_kernel(pmu, i == 0, settings.enable_on_exec);
                    let label = format!("uprobe:{}+{:#x}", t.function.symbol(), t.offset);
                    let fd = PerfEventFd::open_raw(&mut raw, &label, tid, cpu as i32)?;
                    s.ids.insert(fd.id()?, t.function);
                    match leader {
                        None => {
                            use std::os::fd::AsFd;
                            s.rings.push(RingBuffer::map(
                                fd.as_fd(),
                                settings.ring_pages,
                                cpu as i32,
                            )?);
                            leader = Some(s.fds.len());
                        }
                        Some(l) => fd.set_output(&s.fds[l])?,
                    }
                    s.fds.push(fd);
                }
            }
        }
        Ok(s)
    }

    /// Enables every probe (`PERF_EVENT_IOC_ENABLE`).
    pub fn enable(&self) -> Result<(), UprobeError> {
        for fd in &self.fds {
            fd.enable()?;
        }
        Ok(())
    }

    /// Disables every probe; errors are ignored (the target may be gone).
    pub fn disable(&self) {
        for fd in &self.fds {
            let _ = fd.disable();
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> SessionStats {
        self.stats.clone()
    }

    /// Drains every ring: allocation calls to `on_call`, MMAP2 records to `on_mmap`.
    /// Returns the records read.
    pub fn poll(
        &mut self,
        mut on_call: impl FnMut(AllocCall),
        mut on_mmap: impl FnMut(Mmap2Event),
    ) -> u64 {
        let mut n = 0;
        let (layout, ids, stats) = (&self.layout, &self.ids, &mut self.stats);
        for ring in &mut self.rings {
            let r = ring.drain(&mut self.scratch, u64::MAX, |h, body| {
                n += 1;
                stats.records += 1;
                match parse_record(h.record_type, h.misc, body, layout) {
                    Ok(Record::Sample(rec)) => {
                        match ids
                            .get(&rec.id)
                            .and_then(|f| AllocCall::from_record(*f, &rec))
                        {
                            Some(c) => {
                                stats.calls += 1;
                                on_call(c);
                            }
                            None => stats.bad_records += 1,
                        }
                    }
                    Ok(Record::Mmap2(m)) => {
                        stats.mmaps += 1;
                        on_mmap(m);
                    }
                    Ok(Record::Lost(l)) => stats.lost += l.lost,
                    Ok(_) => {}
                    Err(e) => {
                        stats.parse_errors += 1;
                        if stats.first_parse_error.is_none() {
                            stats.first_parse_error =
                                Some(format!("record type {}: {e}", h.record_type));
                        }
                    }
                }
            });
            if r.is_err() {
                stats.ring_resyncs += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libc_names() {
        assert!(is_libc("/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(is_libc("/lib64/libc-2.17.so"));
        assert!(!is_libc("/usr/lib/libcrypt.so.1"));
        assert!(!is_libc("/usr/lib/libc++.so.1"));
    }

    #[test]
    fn this_process_has_threads_and_a_libc() {
        let me = std::process::id() as i32;
        assert!(threads_of(me).unwrap().contains(&me));
        if let Ok(p) = libc_of_process(me) {
            assert!(p.exists());
        }
    }
}

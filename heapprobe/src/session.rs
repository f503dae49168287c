//! [`UprobeSession`]: the allocator probes of one process, opened per thread on any CPU
//! (`cpu = -1`; threads created later are not followed: no `inherit`, see
//! [`ProbeTarget::to_kernel`]), the records of a thread's probes funnelled into one ring
//! (`PERF_EVENT_IOC_SET_OUTPUT`; the kernel only redirects a `cpu = −1` event into a ring
//! of the same task, kernel/events/core.c `perf_event_set_output`).
//!
//! Per thread rather than per (thread, CPU): each opened event is its own consumer of the
//! uprobe, and on every hit the kernel runs every consumer whose process matches
//! (kernel/events/uprobes.c `handler_chain`, kernel/trace/trace_uprobe.c
//! `uprobe_perf_func`), including its BPF program, before finding that only the event
//! scheduled on this CPU writes. Per CPU, a hit would cost (CPUs × threads) handler runs.
//!
//! Every record is parsed by [`collector::record::parse_record`]; samples become
//! [`AllocCall`]s (the probe told apart by the event id, PERF_SAMPLE_IDENTIFIER), MMAP2
//! records are handed on for symbolization.
//!
//! Sampling ([`SamplingMode`]): with a non-zero interval the session first tries the
//! in-kernel byte filter ([`super::bpf::ByteFilter`], one program per probe event): only
//! sampled calls then become records, and the calls seen come from the filter's per-CPU
//! counters. When the filter cannot be set up (no BPF, no CAP_BPF/CAP_SYS_ADMIN, an old
//! kernel, a verifier refusal) the probes are opened without it, every call is recorded
//! and the caller samples in user space ([`crate::ByteSampler`]); the reason is
//! kept in the mode.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::bpf::{ByteFilter, FilterCounters};
use collector::live::{PerfEventFd, RingBuffer};
use collector::record::{parse_record, Record, SampleLayout};
use collector::Mmap2Event;

use super::call::{AllocCall, PointerEvent};
use super::probe::{layout, uprobe_pmu_type, ProbeKind, ProbeTarget};
use super::UprobeError;

/// Session settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UprobeSettings {
    /// Data pages of each CPU's ring (a power of two).
    pub ring_pages: usize,
    /// Start at the target's next exec (`enable_on_exec`, for a launched child), instead of
    /// at [`UprobeSession::enable`].
    pub enable_on_exec: bool,
    /// Mean sampling interval in bytes; 0 records every call (no filter).
    pub sample_interval_bytes: u64,
    /// Try the in-kernel byte filter (false: always sample in user space).
    pub kernel_filter: bool,
    /// Seed of the filter's initial countdowns.
    pub seed: u64,
    /// Open the lifetime probes among the targets (returns and `free`) for free matching;
    /// needs the kernel filter (without it they are left out, see [`FreeMatching`]).
    pub lifetimes: bool,
}

impl Default for UprobeSettings {
    fn default() -> Self {
        UprobeSettings {
            ring_pages: 1024,
            enable_on_exec: false,
            sample_interval_bytes: super::DEFAULT_SAMPLE_INTERVAL_BYTES,
            kernel_filter: true,
            seed: 1,
            lifetimes: false,
        }
    }
}

/// Whether the frees of sampled allocations are matched (inuse figures).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum FreeMatching {
    /// Not asked for.
    #[default]
    Off,
    /// Return and `free` probes with their BPF programs are attached.
    On,
    /// Asked for but not possible (the kernel filter did not load, or the interval is 0):
    /// the lifetime probes were not opened.
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// What a probe record says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionEvent {
    /// An allocation call (sampled by the kernel filter, or every call).
    Alloc(AllocCall),
    /// The pointer returned by a sampled allocation call of this thread.
    Returned(PointerEvent),
    /// A live sampled pointer passed to `free`.
    Freed(PointerEvent),
}

/// Where the byte sampling of a session happens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SamplingMode {
    /// Interval 0: every call is recorded and kept.
    #[default]
    All,
    /// The in-kernel filter: records are the sampled calls only; do not sample them again.
    Kernel,
    /// Every call is recorded; the caller samples in user space. `reason`: why the kernel
    /// filter is not used.
    UserSpace {
        /// The reason (the error of the filter's setup, or "disabled").
        reason: String,
    },
}

impl SamplingMode {
    /// A short name: `all`, `kernel`, `user-space`.
    pub fn name(&self) -> &'static str {
        match self {
            SamplingMode::All => "all",
            SamplingMode::Kernel => "kernel",
            SamplingMode::UserSpace { .. } => "user-space",
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
    /// Where the sampling happened.
    pub sampling: SamplingMode,
    /// With the kernel filter: the calls it saw (sampled or not) and sampled, summed over
    /// CPUs (`None` otherwise, or when the counters could not be read).
    pub kernel: Option<FilterCounters>,
    /// Whether frees are matched.
    pub free_matching: FreeMatching,
    /// Records of returned pointers.
    pub returns: u64,
    /// Records of frees of sampled pointers.
    pub frees: u64,
}

/// The opened probes; see the module docs.
pub struct UprobeSession {
    fds: Vec<PerfEventFd>,
    rings: Vec<RingBuffer>,
    ids: HashMap<u64, ProbeKind>,
    layout: SampleLayout,
    scratch: Vec<u8>,
    stats: SessionStats,
    filter: Option<ByteFilter>,
}

impl std::fmt::Debug for UprobeSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UprobeSession")
            .field("events", &self.fds.len())
            .field("rings", &self.rings.len())
            .field("stats", &self.stats)
            .field("filter", &self.filter)
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

/// Smallest ring of one thread, in pages.
pub const MIN_RING_PAGES: usize = 16;

/// Data pages of each thread's ring: `total` (a power of two) shared by `threads`, at
/// least [`MIN_RING_PAGES`] (with the kernel filter records are rare; without it a ring
/// per thread still drains every 2 ms).
pub fn ring_pages_per_thread(total: usize, threads: usize) -> usize {
    (total / threads.max(1).next_power_of_two()).max(MIN_RING_PAGES)
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
    /// Opens a probe on each of `targets` for each thread in `tids` (on any CPU), with the
    /// in-kernel filter when `settings` asks for sampling and the kernel takes it
    /// (see the module docs; [`UprobeSession::sampling`] tells which mode runs).
    pub fn open(
        targets: &[ProbeTarget],
        tids: &[i32],
        settings: UprobeSettings,
    ) -> Result<UprobeSession, UprobeError> {
        let interval = settings.sample_interval_bytes;
        let filter = if interval == 0 {
            Err(SamplingMode::All)
        } else if !settings.kernel_filter {
            Err(SamplingMode::UserSpace {
                reason: "disabled".into(),
            })
        } else {
            ByteFilter::new(interval, settings.seed, settings.lifetimes).map_err(|e| {
                SamplingMode::UserSpace {
                    reason: e.to_string(),
                }
            })
        };
        let entries: Vec<ProbeTarget> = targets
            .iter()
            .filter(|t| matches!(t.kind, ProbeKind::Alloc(_)))
            .cloned()
            .collect();
        let unavailable = |mode: &SamplingMode| {
            if !settings.lifetimes {
                return FreeMatching::Off;
            }
            FreeMatching::Unavailable {
                reason: match mode {
                    SamplingMode::All => "needs a sampling interval (the kernel filter)".into(),
                    SamplingMode::UserSpace { reason } => {
                        format!("needs the kernel filter, which is not used: {reason}")
                    }
                    SamplingMode::Kernel => String::new(),
                },
            }
        };
        let fallback = |mode: SamplingMode| -> Result<UprobeSession, UprobeError> {
            let mut s = Self::open_with(&entries, tids, settings, None)?;
            s.stats.free_matching = unavailable(&mode);
            s.stats.sampling = mode;
            Ok(s)
        };
        match filter {
            Ok(f) => {
                let lifetimes = f.has_lifetimes();
                let chosen: Vec<ProbeTarget> = if lifetimes {
                    targets.to_vec()
                } else {
                    entries.clone()
                };
                match Self::open_with(&chosen, tids, settings, Some(f)) {
                    Err(UprobeError::Bpf(e)) => fallback(SamplingMode::UserSpace {
                        reason: e.to_string(),
                    }),
                    Ok(mut s) => {
                        if lifetimes {
                            s.stats.free_matching = FreeMatching::On;
                        }
                        Ok(s)
                    }
                    Err(e) => Err(e),
                }
            }
            Err(mode) => fallback(mode),
        }
    }

    fn open_with(
        targets: &[ProbeTarget],
        tids: &[i32],
        settings: UprobeSettings,
        mut filter: Option<ByteFilter>,
    ) -> Result<UprobeSession, UprobeError> {
        use std::os::fd::AsFd;
        let pmu = uprobe_pmu_type()?;
        let mut s = UprobeSession {
            fds: Vec::new(),
            rings: Vec::new(),
            ids: HashMap::new(),
            layout: layout(),
            scratch: Vec::new(),
            stats: SessionStats {
                sampling: if filter.is_some() {
                    SamplingMode::Kernel
                } else {
                    SamplingMode::All
                },
                ..SessionStats::default()
            },
            filter: None,
        };
        let ring_pages = ring_pages_per_thread(settings.ring_pages, tids.len());
        for &tid in tids {
            let mut leader: Option<usize> = None;
            for (i, t) in targets.iter().enumerate() {
                // `t.path` (config1's target) lives across the call.
                let mut raw = t.to_kernel(pmu, i == 0, settings.enable_on_exec);
                let label = format!("uprobe:{}+{:#x}", t.kind.symbol(), t.offset);
                let fd = PerfEventFd::open_raw(&mut raw, &label, tid, -1)?;
                s.ids.insert(fd.id()?, t.kind);
                if let Some(f) = filter.as_mut() {
                    f.attach(fd.as_fd(), t.kind, tid as u32)?;
                }
                match leader {
                    None => {
                        s.rings.push(RingBuffer::map(fd.as_fd(), ring_pages, -1)?);
                        leader = Some(s.fds.len());
                    }
                    Some(l) => fd.set_output(&s.fds[l])?,
                }
                s.fds.push(fd);
            }
        }
        s.filter = filter;
        Ok(s)
    }

    /// Where the sampling happens.
    pub fn sampling(&self) -> &SamplingMode {
        &self.stats.sampling
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

    /// The counters so far (with the kernel filter's, read now).
    pub fn stats(&self) -> SessionStats {
        let mut s = self.stats.clone();
        s.kernel = self.filter.as_ref().and_then(|f| f.counters().ok());
        s
    }

    /// Drains every ring: probe records to `on_event`, MMAP2 records to `on_mmap`.
    /// Returns the records read.
    pub fn poll(
        &mut self,
        mut on_event: impl FnMut(SessionEvent),
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
                        let event = match ids.get(&rec.id) {
                            Some(ProbeKind::Alloc(f)) => {
                                AllocCall::from_record(*f, &rec).map(SessionEvent::Alloc)
                            }
                            Some(ProbeKind::Return(_)) => {
                                PointerEvent::returned(&rec).map(SessionEvent::Returned)
                            }
                            Some(ProbeKind::Free) => {
                                PointerEvent::freed(&rec).map(SessionEvent::Freed)
                            }
                            None => None,
                        };
                        match event {
                            Some(e) => {
                                match &e {
                                    SessionEvent::Alloc(_) => stats.calls += 1,
                                    SessionEvent::Returned(_) => stats.returns += 1,
                                    SessionEvent::Freed(_) => stats.frees += 1,
                                }
                                on_event(e);
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
    fn sampling_mode_names_and_default_settings() {
        assert_eq!(SamplingMode::default().name(), "all");
        assert_eq!(SamplingMode::Kernel.name(), "kernel");
        let u = SamplingMode::UserSpace {
            reason: "disabled".into(),
        };
        assert_eq!(u.name(), "user-space");
        let d = UprobeSettings::default();
        assert_eq!(
            (d.sample_interval_bytes, d.kernel_filter),
            (512 * 1024, true)
        );
    }

    #[test]
    fn rings_are_shared_out_between_threads() {
        assert_eq!(ring_pages_per_thread(1024, 1), 1024);
        assert_eq!(ring_pages_per_thread(1024, 3), 256);
        assert_eq!(ring_pages_per_thread(1024, 200), 16);
        assert_eq!(ring_pages_per_thread(1024, 0), 1024);
    }

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

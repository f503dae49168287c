//! [`LiveSession`]: the opened sampling plan — one ring per CPU, each fed by the plan's
//! events on that CPU — and the choice of plan at start.

use super::capability::{candidate_plans, PlanSettings, PmuCapabilities, SamplingPlan};
use super::{LiveError, PerfEventFd, RecordDecoder, RingBuffer};
use crate::record::branch_sample_type as bst;

/// One CPU's events and ring.
pub struct CpuStream {
    /// The CPU.
    pub cpu: u32,
    /// The events (the first owns the ring; the others are redirected into it).
    pub events: Vec<PerfEventFd>,
    /// The ring, until a reader thread takes it.
    pub ring: Option<RingBuffer>,
    /// The decoder for this ring's records.
    pub decoder: RecordDecoder,
}

/// The plan that opened and its per-CPU streams.
pub struct LiveSession {
    /// The plan in use.
    pub plan: SamplingPlan,
    /// One stream per online CPU.
    pub streams: Vec<CpuStream>,
    /// The startup report: what was detected, what was ruled out or failed, what was chosen.
    pub report: Vec<String>,
}

/// The online CPUs (`/sys/devices/system/cpu/online`, e.g. `0-3,6`), or 0..available
/// parallelism when that file cannot be read.
pub fn online_cpus() -> Vec<u32> {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| parse_cpu_list(&s))
        .unwrap_or_else(|| {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            (0..n as u32).collect()
        })
}

/// Parses a kernel CPU list (`0-3,6`).
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 65536 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

fn open_plan(
    plan: &mut SamplingPlan,
    cpus: &[u32],
    ring_pages: usize,
) -> Result<Vec<CpuStream>, LiveError> {
    let mut streams = Vec::with_capacity(cpus.len());
    for &cpu in cpus {
        let mut events = Vec::new();
        for i in 0..plan.events.len() {
            let fd = open_with_fallbacks(&mut plan.events[i], cpu as i32)?;
            if let Some(first) = events.first() {
                fd.set_output(first)?;
            }
            events.push(fd);
        }
        let ring = RingBuffer::map(std::os::fd::AsFd::as_fd(&events[0]), ring_pages, cpu as i32)?;
        streams.push(CpuStream {
            cpu,
            events,
            ring: Some(ring),
            decoder: RecordDecoder::new(plan.events[0].layout()),
        });
    }
    Ok(streams)
}

/// Opens `attr` on `cpu`, dropping optional features the kernel rejects (EINVAL: the
/// build_id side-band bit, then HW_INDEX; EOPNOTSUPP: lower precise_ip), and updates
/// `attr` to what opened, so every CPU opens the same attr.
fn open_with_fallbacks(
    attr: &mut crate::live::EventAttr,
    cpu: i32,
) -> Result<PerfEventFd, LiveError> {
    loop {
        let err = match PerfEventFd::open(attr, -1, cpu) {
            Ok(fd) => return Ok(fd),
            Err(e) => e,
        };
        let errno = match &err {
            LiveError::Open { source, .. } => source.raw_os_error(),
            _ => None,
        };
        match errno {
            Some(libc::EINVAL) if attr.side_band && attr.build_id => attr.build_id = false,
            Some(libc::EINVAL) if attr.branch_sample_type & bst::HW_INDEX != 0 => {
                attr.branch_sample_type &= !bst::HW_INDEX
            }
            Some(libc::EOPNOTSUPP) if attr.precise_ip > 0 => attr.precise_ip -= 1,
            _ => return Err(err),
        }
    }
}

impl LiveSession {
    /// Detects capabilities, then opens the first candidate plan that opens on every CPU
    /// in `cpus` with rings of `ring_pages` data pages. Events are opened disabled; call
    /// [`LiveSession::enable`] once readers run.
    pub fn open(
        settings: &PlanSettings,
        cpus: &[u32],
        ring_pages: usize,
    ) -> Result<LiveSession, LiveError> {
        let caps = PmuCapabilities::detect();
        let mut report = vec![format!(
            "perf_event_paranoid={}, PMUs: {}",
            caps.paranoid.map_or("absent".into(), |p| p.to_string()),
            caps.all_pmus.join(" ")
        )];
        let (plans, skipped) = candidate_plans(&caps, settings);
        report.extend(skipped.into_iter().map(|s| format!("ruled out {s}")));
        let mut failures = Vec::new();
        let mut permission_denied = false;
        for mut plan in plans {
            match open_plan(&mut plan, cpus, ring_pages) {
                Ok(streams) => {
                    report.push(format!(
                        "sampling mode {} ({}) on {} CPUs: {}",
                        plan.mode.name(),
                        plan.why,
                        streams.len(),
                        plan.events
                            .iter()
                            .map(|e| e.label.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                    return Ok(LiveSession {
                        plan,
                        streams,
                        report,
                    });
                }
                Err(e) => {
                    permission_denied |= e.permission_denied();
                    let line = format!("{} failed to open: {e}", plan.mode.name());
                    report.push(line.clone());
                    failures.push(line);
                }
            }
        }
        Err(LiveError::NoMode {
            tried: if failures.is_empty() {
                report.join("; ")
            } else {
                failures.join("; ")
            },
            permission_denied,
        })
    }

    /// Enables every event.
    pub fn enable(&self) -> Result<(), LiveError> {
        for s in &self.streams {
            for e in &s.events {
                e.enable()?;
            }
        }
        Ok(())
    }

    /// Disables every event (rings stay readable for the final drain).
    pub fn disable(&self) {
        for s in &self.streams {
            for e in &s.events {
                let _ = e.disable();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,6\n"), Some(vec![0, 1, 2, 3, 6]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }
}

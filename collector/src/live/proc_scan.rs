//! The initial scan of `/proc`: processes that were running before the events were opened
//! get no MMAP2/COMM records from the kernel, so we synthesise them from
//! `/proc/PID/{comm,maps}` (what `perf record -a` does with `perf_event__synthesize_*`).

use std::path::{Path, PathBuf};

use crate::process_maps::parse_maps;
use crate::{CommEvent, PerfEvent, SideBandEvent};

/// What a scan found.
#[derive(Clone, Debug, Default)]
pub struct ProcScan {
    /// COMM then MMAP2 (executable, file-backed or `[vdso]`) events, per process.
    pub events: Vec<PerfEvent>,
    /// Processes scanned.
    pub processes: u64,
    /// Processes whose files could not be read (exited meanwhile, or no permission).
    pub unreadable: u64,
}

/// Scans `proc` (normally `/proc`), skipping `skip_pid` (the daemon itself).
pub fn scan_processes(proc: &Path, skip_pid: Option<u32>) -> ProcScan {
    let mut scan = ProcScan::default();
    let Ok(dir) = std::fs::read_dir(proc) else {
        return scan;
    };
    let mut pids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&p| Some(p) != skip_pid)
        .collect();
    pids.sort_unstable();
    for pid in pids {
        scan.processes += 1;
        if !scan_one(proc, pid, &mut scan.events) {
            scan.unreadable += 1;
        }
    }
    scan
}

fn scan_one(proc: &Path, pid: u32, out: &mut Vec<PerfEvent>) -> bool {
    let base = proc.join(pid.to_string());
    let Ok(comm) = std::fs::read_to_string(base.join("comm")) else {
        return false;
    };
    let maps_path: PathBuf = base.join("maps");
    let Ok(text) = std::fs::read_to_string(&maps_path) else {
        return false;
    };
    let Ok(maps) = parse_maps(&text, &maps_path) else {
        return false;
    };
    out.push(PerfEvent::SideBand(SideBandEvent::Comm(CommEvent {
        pid,
        tid: pid,
        comm: comm.trim_end_matches('\n').to_string(),
        exec: false,
    })));
    for m in maps.iter().filter(|m| m.is_executable()) {
        if !(m.path.starts_with('/') || m.path == "[vdso]") {
            continue;
        }
        out.push(PerfEvent::SideBand(SideBandEvent::Mmap2(
            m.to_mmap2(pid as i32, pid as i32),
        )));
    }
    true
}

/// Where to open the file behind a mapping of `pid`, best first:
/// `/proc/PID/map_files/START-END` (works for deleted files and across mount namespaces
/// while the mapping exists), `/proc/PID/root/PATH` (containers), `/proc/ANCESTOR/root/PATH`
/// for each of `ancestors` (nearest first: a shell or container init that outlives a
/// short-lived child in a private mount namespace sees the file there), then the path
/// itself.
pub fn binary_candidates(
    proc: &Path,
    pid: i32,
    start: u64,
    end: u64,
    path: &str,
    ancestors: &[u32],
) -> Vec<PathBuf> {
    let mut out = Vec::with_capacity(3 + ancestors.len());
    let rel = path
        .strip_suffix(" (deleted)")
        .unwrap_or(path)
        .strip_prefix('/');
    if pid > 0 {
        let base = proc.join(pid.to_string());
        out.push(base.join("map_files").join(format!("{start:x}-{end:x}")));
        if let Some(rel) = rel {
            out.push(base.join("root").join(rel));
        }
    }
    if let Some(rel) = rel {
        for a in ancestors.iter().filter(|&&a| a > 0 && a as i32 != pid) {
            out.push(proc.join(a.to_string()).join("root").join(rel));
        }
    }
    if path.starts_with('/') {
        out.push(PathBuf::from(path));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Mmap2Event;

    #[test]
    fn synthesises_comm_and_exec_mappings() {
        let dir = std::env::temp_dir().join(format!("pgo-procscan-{}", std::process::id()));
        let p = dir.join("4242");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("comm"), "spin\n").unwrap();
        std::fs::write(
            p.join("maps"),
            "55d0c0000000-55d0c0001000 r--p 00000000 08:01 1234 /usr/bin/spin\n\
             55d0c0001000-55d0c0002000 r-xp 00001000 08:01 1234 /usr/bin/spin\n\
             7ffd1000-7ffd3000 r-xp 00000000 00:00 0 [vdso]\n\
             7ffe0000-7ffe1000 rw-p 00000000 00:00 0 [stack]\n",
        )
        .unwrap();
        std::fs::create_dir_all(dir.join("self-not-a-pid")).unwrap();
        let scan = scan_processes(&dir, None);
        assert_eq!((scan.processes, scan.unreadable), (1, 0));
        assert_eq!(scan.events.len(), 3);
        assert_eq!(
            scan.events[1],
            PerfEvent::SideBand(SideBandEvent::Mmap2(Mmap2Event {
                pid: 4242,
                tid: 4242,
                addr: 0x55d0c0001000,
                len: 0x1000,
                pgoff: 0x1000,
                prot: 5,
                flags: 2,
                maj: 8,
                min: 1,
                ino: 1234,
                filename: "/usr/bin/spin".into(),
                ..Mmap2Event::default()
            }))
        );
        assert_eq!(scan_processes(&dir, Some(4242)).processes, 0);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn candidates_prefer_map_files() {
        let c = binary_candidates(
            Path::new("/proc"),
            12,
            0x1000,
            0x3000,
            "/opt/app (deleted)",
            &[],
        );
        assert_eq!(
            c,
            vec![
                PathBuf::from("/proc/12/map_files/1000-3000"),
                PathBuf::from("/proc/12/root/opt/app"),
                PathBuf::from("/opt/app (deleted)"),
            ]
        );
    }

    #[test]
    fn candidates_go_through_the_ancestors_roots_before_the_path() {
        let c = binary_candidates(
            Path::new("/p"),
            30,
            0x1000,
            0x2000,
            "/t/prog",
            &[20, 0, 30, 1],
        );
        assert_eq!(
            c,
            vec![
                PathBuf::from("/p/30/map_files/1000-2000"),
                PathBuf::from("/p/30/root/t/prog"),
                PathBuf::from("/p/20/root/t/prog"),
                PathBuf::from("/p/1/root/t/prog"),
                PathBuf::from("/t/prog"),
            ]
        );
        // No process view (pid 0), or no absolute path (nothing to look up in a root).
        assert_eq!(
            binary_candidates(Path::new("/p"), 0, 0, 1, "/t/prog", &[20]),
            vec![PathBuf::from("/p/20/root/t/prog"), PathBuf::from("/t/prog")]
        );
        assert_eq!(
            binary_candidates(Path::new("/p"), 30, 0, 1, "[vdso]", &[20]),
            vec![PathBuf::from("/p/30/map_files/0-1")]
        );
    }
}

//! [`ProcessTable`]: the router's view of every process — name and executable mappings —
//! kept from MMAP2/COMM/FORK/EXIT records and the initial `/proc` scan.

use std::collections::HashMap;

use collector::{Mmap2Event, SideBandEvent};
use rustc_hash::FxBuildHasher;

/// One process.
#[derive(Clone, Debug, Default)]
pub struct Process {
    /// Name (COMM).
    pub comm: String,
    /// Executable file mappings, sorted by address, non-overlapping.
    pub mappings: Vec<Mmap2Event>,
    /// The filter's verdict, once computed (cleared on exec and on reload).
    pub sampled: Option<bool>,
    /// Set by EXIT; the entry is dropped at the next [`ProcessTable::collect_exited`].
    pub exited: bool,
    /// The EXIT's time (perf clock), when `exited`.
    pub exit_time: u64,
    /// /proc/PID/maps was already read for its current image (after a sample the side
    /// band could not place); an exec clears it.
    pub rescanned: bool,
    /// An exec was seen (its mappings are the new image's, not the parent's).
    pub execed: bool,
    /// The parent's pid from the FORK record; 0 when unknown (a process from the /proc
    /// scan, or one whose FORK has not been read).
    pub ppid: u32,
}

impl Process {
    /// The mapping containing `addr`.
    pub fn mapping_at(&self, addr: u64) -> Option<&Mmap2Event> {
        let i = self.mappings.partition_point(|m| m.addr <= addr);
        let m = self.mappings.get(i.checked_sub(1)?)?;
        (addr < m.addr.saturating_add(m.len)).then_some(m)
    }

    /// True when some mapping overlaps `[start, end)`.
    pub fn overlaps(&self, start: u64, end: u64) -> bool {
        let i = self.mappings.partition_point(|o| o.addr < start);
        self.mappings[..i]
            .last()
            .is_some_and(|o| o.addr.saturating_add(o.len) > start)
            || self.mappings.get(i).is_some_and(|o| o.addr < end)
    }
}

/// Every known process.
#[derive(Clone, Debug, Default)]
pub struct ProcessTable {
    /// By pid; looked up for every sample routed, so hashed with Fx, not SipHash (pids
    /// are not chosen by an adversary who could make them collide).
    processes: HashMap<u32, Process, FxBuildHasher>,
}

impl ProcessTable {
    /// The process `pid`.
    pub fn get(&self, pid: u32) -> Option<&Process> {
        self.processes.get(&pid)
    }

    /// The process `pid`, created empty if unknown.
    pub fn entry(&mut self, pid: u32) -> &mut Process {
        self.processes.entry(pid).or_default()
    }

    /// Number of processes.
    pub fn len(&self) -> usize {
        self.processes.len()
    }

    /// True when no process is known.
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty()
    }

    /// The ancestors of `pid` the FORK records name, nearest first, at most `max`, skipping
    /// those known to have exited; `parent_of` gives the parent of a process whose FORK
    /// was not seen (0 when it is not known either: the walk stops there).
    pub fn ancestors(
        &self,
        pid: u32,
        max: usize,
        mut parent_of: impl FnMut(u32) -> u32,
    ) -> Vec<u32> {
        let mut out = Vec::new();
        let mut cur = pid;
        // Each step moves one generation up; a cycle (pids reused) ends at a pid seen.
        for _ in 0..max.saturating_mul(4) {
            let known = self.processes.get(&cur);
            let parent = match known.map_or(0, |p| p.ppid) {
                0 => parent_of(cur),
                p => p,
            };
            if parent == 0 || parent == pid || out.contains(&parent) {
                break;
            }
            if !self.processes.get(&parent).is_some_and(|p| p.exited) {
                out.push(parent);
                if out.len() == max {
                    break;
                }
            }
            cur = parent;
        }
        out
    }

    /// Forgets every filter verdict (SIGHUP).
    pub fn clear_verdicts(&mut self) {
        for p in self.processes.values_mut() {
            p.sampled = None;
        }
    }

    /// Drops processes that exited.
    pub fn collect_exited(&mut self) {
        self.processes.retain(|_, p| !p.exited);
    }

    /// Applies one side-band event.
    pub fn apply(&mut self, event: &SideBandEvent) {
        match event {
            SideBandEvent::Mmap2(m) => {
                // `//anon` (perf's name for anonymous memory) is not a file.
                if m.pid <= 0
                    || !m.is_executable()
                    || !m.filename.starts_with('/')
                    || m.filename.starts_with("//")
                {
                    return;
                }
                let p = self.entry(m.pid as u32);
                let end = m.addr.saturating_add(m.len);
                // A new mapping replaces whatever it overlaps.
                p.mappings
                    .retain(|o| o.addr.saturating_add(o.len) <= m.addr || o.addr >= end);
                let i = p.mappings.partition_point(|o| o.addr < m.addr);
                p.mappings.insert(i, m.clone());
            }
            SideBandEvent::Comm(c) => {
                if c.pid != c.tid && !c.exec {
                    return; // a thread renamed itself
                }
                let p = self.entry(c.pid);
                p.comm = c.comm.clone();
                if c.exec {
                    // The new image's MMAP2 records follow the exec's COMM, on the CPU the
                    // exec ran on; one read from another CPU's ring may come first, so
                    // the maps may be read from /proc again for the new image.
                    p.mappings.clear();
                    p.exited = false;
                    p.execed = true;
                    p.rescanned = false;
                }
                p.sampled = None;
            }
            SideBandEvent::Fork(t) => {
                if t.pid == t.ppid {
                    return; // a new thread
                }
                let parent = self.processes.get(&t.ppid).cloned().unwrap_or_default();
                // Each CPU has its own ring, and the FORK is written on the parent's CPU
                // while the child (often a vfork child that execs at once) runs on
                // another: the child's own records may have been read first.
                match self.processes.get_mut(&t.pid) {
                    // Its EXIT came first: it is gone, and a copy of its parent would never
                    // be collected. (An EXIT older than the FORK is another process that
                    // had the pid: replaced below.)
                    Some(child) if child.exited && child.exit_time >= t.time => {
                        child.ppid = t.ppid;
                    }
                    // Its COMM/MMAP2 came first: they are newer than the parent's state;
                    // take from the parent only what the child has not replaced.
                    Some(child) if !child.exited => {
                        child.ppid = t.ppid;
                        if child.comm.is_empty() {
                            child.comm = parent.comm;
                        }
                        if !child.execed {
                            for m in parent.mappings {
                                if !child.overlaps(m.addr, m.addr.saturating_add(m.len)) {
                                    let i = child.mappings.partition_point(|o| o.addr < m.addr);
                                    child.mappings.insert(i, m);
                                }
                            }
                        }
                    }
                    _ => {
                        self.processes.insert(
                            t.pid,
                            Process {
                                comm: parent.comm,
                                mappings: parent.mappings,
                                sampled: parent.sampled,
                                ppid: t.ppid,
                                ..Process::default()
                            },
                        );
                    }
                }
            }
            SideBandEvent::Exit(t) => {
                if t.pid == t.tid {
                    // Kept (until the next collection) even for an unknown process: its
                    // FORK, from another CPU's ring, may still come.
                    let p = self.entry(t.pid);
                    p.exited = true;
                    p.exit_time = t.time;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use collector::{CommEvent, TaskEvent};

    fn mmap(pid: i32, addr: u64, len: u64, path: &str) -> SideBandEvent {
        SideBandEvent::Mmap2(Mmap2Event {
            pid,
            tid: pid,
            addr,
            len,
            prot: 5,
            filename: path.into(),
            ..Default::default()
        })
    }

    #[test]
    fn mappings_fork_exec_exit() {
        let mut t = ProcessTable::default();
        t.apply(&mmap(10, 0x1000, 0x1000, "/bin/a"));
        t.apply(&mmap(10, 0x5000, 0x2000, "/lib/c.so"));
        t.apply(&mmap(10, 0x9000, 0x1000, "//anon"));
        let p = t.get(10).unwrap();
        assert_eq!(p.mappings.len(), 2);
        assert_eq!(p.mapping_at(0x6fff).unwrap().filename, "/lib/c.so");
        assert!(p.mapping_at(0x7000).is_none());
        assert!(p.mapping_at(0x500).is_none());
        // Overlapping remap replaces.
        t.apply(&mmap(10, 0x5800, 0x100, "/lib/d.so"));
        assert_eq!(t.get(10).unwrap().mappings.len(), 2);
        t.apply(&SideBandEvent::Fork(TaskEvent {
            pid: 11,
            ppid: 10,
            tid: 11,
            ptid: 10,
            time: 0,
        }));
        assert_eq!(
            t.get(11).unwrap().mapping_at(0x1000).unwrap().filename,
            "/bin/a"
        );
        t.apply(&SideBandEvent::Comm(CommEvent {
            pid: 11,
            tid: 11,
            comm: "b".into(),
            exec: true,
        }));
        assert!(t.get(11).unwrap().mappings.is_empty());
        t.apply(&SideBandEvent::Exit(TaskEvent {
            pid: 10,
            ppid: 1,
            tid: 10,
            ptid: 1,
            time: 0,
        }));
        t.collect_exited();
        assert!(t.get(10).is_none());
        assert_eq!(t.len(), 1);
    }

    fn fork(pid: u32, ppid: u32) -> SideBandEvent {
        fork_at(pid, ppid, 0)
    }

    /// The file names of `pid`'s mappings, by address.
    fn mapped(t: &ProcessTable, pid: u32) -> Vec<&str> {
        t.get(pid)
            .unwrap()
            .mappings
            .iter()
            .map(|m| &m.filename[..])
            .collect()
    }

    fn fork_at(pid: u32, ppid: u32, time: u64) -> SideBandEvent {
        SideBandEvent::Fork(TaskEvent {
            pid,
            ppid,
            tid: pid,
            ptid: ppid,
            time,
        })
    }

    fn exit_at(pid: u32, time: u64) -> SideBandEvent {
        SideBandEvent::Exit(TaskEvent {
            pid,
            ppid: 1,
            tid: pid,
            ptid: 1,
            time,
        })
    }

    fn exec(pid: u32, comm: &str) -> SideBandEvent {
        SideBandEvent::Comm(CommEvent {
            pid,
            tid: pid,
            comm: comm.into(),
            exec: true,
        })
    }

    #[test]
    fn ancestors_from_fork_records_then_from_the_fallback() {
        // 1 ← 5 (from the /proc scan: no FORK) ← 10 ← 20 (exited) ← 30 ← 40.
        let mut t = ProcessTable::default();
        t.entry(5).comm = "init".into();
        t.apply(&fork(10, 5));
        t.apply(&fork(20, 10));
        t.apply(&fork(30, 20));
        t.apply(&fork(40, 30));
        t.apply(&exit_at(20, 1));
        t.apply(&exit_at(40, 2));
        let asked = std::cell::RefCell::new(Vec::new());
        let parent_of = |p: u32| {
            asked.borrow_mut().push(p);
            match p {
                5 => 1,
                _ => 0,
            }
        };
        // An exited process still has its ancestors; an exited ancestor is skipped.
        assert_eq!(t.ancestors(40, 8, parent_of), [30, 10, 5, 1]);
        assert_eq!(*asked.borrow(), [5, 1]);
        assert_eq!(t.ancestors(40, 2, parent_of), [30, 10]);
        // A process the table does not know: the fallback only.
        assert_eq!(t.ancestors(5, 8, parent_of), [1]);
        assert!(t.ancestors(77, 8, parent_of).is_empty());
        // A FORK read after the child's own records, or after its EXIT, still names the
        // parent.
        t.apply(&exec(50, "tool"));
        t.apply(&fork(50, 30));
        t.apply(&exit_at(60, 9));
        t.apply(&fork_at(60, 50, 3));
        assert_eq!(t.ancestors(60, 8, |_| 0), [50, 30, 10, 5]);
        // Reused pids that form a cycle end the walk.
        t.apply(&fork(70, 71));
        t.apply(&fork(71, 70));
        assert_eq!(t.ancestors(70, 8, |_| 0), [71]);
    }

    #[test]
    fn a_fork_read_after_the_childs_own_records_does_not_undo_them() {
        // The parent is known and excluded by the filter.
        let mut t = ProcessTable::default();
        t.apply(&mmap(10, 0x1000, 0x1000, "/bin/harness"));
        t.entry(10).comm = "harness".into();
        t.entry(10).sampled = Some(false);

        // A vfork child that exec'd at once on another CPU: its COMM and MMAP2 are read
        // from that CPU's ring before the FORK from the parent's.
        t.apply(&exec(11, "spin"));
        t.apply(&mmap(11, 0x5000, 0x1000, "/bin/spin"));
        t.apply(&fork(11, 10));
        let child = t.get(11).unwrap();
        assert_eq!(child.comm, "spin");
        assert_eq!(child.sampled, None);
        assert_eq!(mapped(&t, 11), ["/bin/spin"]);

        // A child that mapped a library before its FORK was read, and never exec'd, still
        // has the parent's image where the library does not overlap it.
        t.apply(&mmap(12, 0x1800, 0x1000, "/lib/plugin.so"));
        t.apply(&mmap(12, 0x9000, 0x1000, "/lib/late.so"));
        t.apply(&fork(12, 10));
        let child = t.get(12).unwrap();
        assert_eq!(child.comm, "harness");
        assert_eq!(mapped(&t, 12), ["/lib/plugin.so", "/lib/late.so"]);
        t.apply(&mmap(13, 0x3000, 0x1000, "/lib/apart.so"));
        t.apply(&fork(13, 10));
        assert_eq!(mapped(&t, 13), ["/bin/harness", "/lib/apart.so"]);

        // A pid reused after an exit is a new process: the FORK replaces the old entry.
        t.apply(&exit_at(11, 5));
        t.apply(&fork_at(11, 10, 9));
        assert_eq!(t.get(11).unwrap().comm, "harness");
        assert_eq!(t.get(11).unwrap().sampled, Some(false));
        assert!(!t.get(11).unwrap().exited);

        // A short-lived child whose EXIT was read before its FORK stays gone: collected
        // at the next collection, not brought back as a copy of its parent.
        t.apply(&exit_at(14, 20));
        t.apply(&fork_at(14, 10, 15));
        assert!(t.get(14).unwrap().exited);
        t.collect_exited();
        assert!(t.get(14).is_none());

        // An exec forgets that the maps were read for the old image.
        t.entry(12).rescanned = true;
        t.apply(&exec(12, "tool"));
        assert!(!t.get(12).unwrap().rescanned);
        assert!(t.get(12).unwrap().mappings.is_empty());
    }
}

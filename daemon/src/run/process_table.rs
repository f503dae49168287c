//! [`ProcessTable`]: the router's view of every process — name and executable mappings —
//! kept from MMAP2/COMM/FORK/EXIT records and the initial `/proc` scan.

use std::collections::HashMap;

use collector::{Mmap2Event, SideBandEvent};

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
    /// /proc/PID/maps was already read for it after a sample of an unknown process.
    pub rescanned: bool,
}

impl Process {
    /// The mapping containing `addr`.
    pub fn mapping_at(&self, addr: u64) -> Option<&Mmap2Event> {
        let i = self.mappings.partition_point(|m| m.addr <= addr);
        let m = self.mappings.get(i.checked_sub(1)?)?;
        (addr < m.addr.saturating_add(m.len)).then_some(m)
    }
}

/// Every known process.
#[derive(Clone, Debug, Default)]
pub struct ProcessTable {
    processes: HashMap<u32, Process>,
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
                    // The new image's MMAP2 records follow the exec's COMM.
                    p.mappings.clear();
                    p.exited = false;
                }
                p.sampled = None;
            }
            SideBandEvent::Fork(t) => {
                if t.pid == t.ppid {
                    return; // a new thread
                }
                let parent = self.processes.get(&t.ppid).cloned().unwrap_or_default();
                self.processes.insert(
                    t.pid,
                    Process {
                        comm: parent.comm,
                        mappings: parent.mappings,
                        sampled: parent.sampled,
                        exited: false,
                        rescanned: false,
                    },
                );
            }
            SideBandEvent::Exit(t) => {
                if t.pid == t.tid {
                    if let Some(p) = self.processes.get_mut(&t.pid) {
                        p.exited = true;
                    }
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
}

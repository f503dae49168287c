//! [`ProcessFilter`]: which processes are sampled (executable path glob, comm, cgroup),
//! from `[filters]`; re-read on SIGHUP.

use std::path::Path;

use crate::config::FilterConfig;

/// The filter; empty lists match everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessFilter {
    config: FilterConfig,
}

/// What the filter looks at for one process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessFacts {
    /// `/proc/PID/exe` (or the first mapped file), if known.
    pub exe: Option<String>,
    /// The process name.
    pub comm: String,
    /// cgroup paths from `/proc/PID/cgroup`.
    pub cgroups: Vec<String>,
}

impl ProcessFacts {
    /// Reads what `/proc/PID` says; `comm` is the name the side band reported.
    pub fn read(proc: &Path, pid: u32, comm: &str) -> ProcessFacts {
        let base = proc.join(pid.to_string());
        let exe = std::fs::read_link(base.join("exe"))
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        let cgroups = std::fs::read_to_string(base.join("cgroup"))
            .map(|t| {
                t.lines()
                    .filter_map(|l| l.splitn(3, ':').nth(2).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        ProcessFacts {
            exe,
            comm: comm.to_string(),
            cgroups,
        }
    }
}

impl ProcessFilter {
    /// The filter of a `[filters]` table.
    pub fn new(config: FilterConfig) -> ProcessFilter {
        ProcessFilter { config }
    }

    /// True when every list is empty.
    pub fn matches_all(&self) -> bool {
        let c = &self.config;
        c.exe_path_globs.is_empty() && c.comms.is_empty() && c.cgroup_prefixes.is_empty()
    }

    /// True when the process passes every non-empty list.
    pub fn matches(&self, p: &ProcessFacts) -> bool {
        let c = &self.config;
        let exe_ok = c.exe_path_globs.is_empty()
            || p.exe
                .as_deref()
                .is_some_and(|e| c.exe_path_globs.iter().any(|g| glob_match(g, e)));
        let comm_ok = c.comms.is_empty() || c.comms.contains(&p.comm);
        let cgroup_ok = c.cgroup_prefixes.is_empty()
            || p.cgroups.iter().any(|g| {
                c.cgroup_prefixes
                    .iter()
                    .any(|pre| g.starts_with(pre.as_str()))
            });
        exe_ok && comm_ok && cgroup_ok
    }
}

/// Shell-style glob: `*` matches any run of characters (`/` included), `?` one character.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("/usr/bin/*", "/usr/bin/nginx"));
        assert!(glob_match("*/spin", "/tmp/x/spin"));
        assert!(glob_match("/a/?b*", "/a/xbcd"));
        assert!(!glob_match("/usr/bin/*", "/usr/sbin/nginx"));
        assert!(!glob_match("/a/?b", "/a/b"));
    }

    #[test]
    fn every_non_empty_list_must_match() {
        let f = ProcessFilter::new(FilterConfig {
            exe_path_globs: vec!["*/spin".into()],
            comms: vec![],
            cgroup_prefixes: vec!["/system.slice/".into()],
        });
        let mut p = ProcessFacts {
            exe: Some("/tmp/spin".into()),
            comm: "spin".into(),
            cgroups: vec!["/system.slice/app.service".into()],
        };
        assert!(f.matches(&p));
        p.cgroups = vec!["/user.slice".into()];
        assert!(!f.matches(&p));
        assert!(ProcessFilter::default().matches(&ProcessFacts::default()));
    }
}

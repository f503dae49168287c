//! The production service: the systemd unit, restart safety of the state
//! directory, disk full, the memory budget, and least privilege.
//!
//! * `systemd-analyze verify` needs ExecStart's binary to exist: the test verifies a copy
//!   of `systemd/pgo-agent.service` whose ExecStart names this test executable (any
//!   existing executable would do; nothing is started). `systemd-analyze security
//!   --offline=true` on that copy must rate the unit at most 2.0.
//! * The daemon runs as a child process (it must be SIGKILLed and run under setpriv): an
//!   [`e2e::agent::DaemonProcess`], this test executable re-executed on `cli_process`,
//!   which runs `pgo-agent` with the daemon's arguments (the same code as the binary).
//!
//! The live tests need root (system-wide perf events, mount, setpriv) and clang-19; they
//! are skipped with a message otherwise. They run one at a time (they sample the machine).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use daemon::run::persist::{read_state, PersistedState};
use e2e::agent::{run_args, DaemonProcess as Daemon};
use e2e::corpus;
use e2e::http::http_get_ok;
use e2e::support::{build_id_hex, free_port};

const UNIT: &str = include_str!("../../../../systemd/pgo-agent.service");

fn can_sample(test: &str) -> bool {
    e2e::support::can_sample(test, &["clang-19"])
}

fn work_dir(name: &str) -> PathBuf {
    e2e::support::scratch_dir("service", name)
}

/// The set-up of a test that runs the daemon: a scratch directory with an empty `state/`
/// in it.
struct Fixture {
    dir: PathBuf,
    state: PathBuf,
}

impl Fixture {
    /// `None` (after a SKIPPED message) when `test` cannot sample here.
    fn new(test: &str, name: &str) -> Option<Fixture> {
        if !can_sample(test) {
            return None;
        }
        let dir = work_dir(name);
        let state = dir.join("state");
        std::fs::create_dir_all(&state).unwrap();
        Some(Fixture { dir, state })
    }

    /// [`write_config`] in the scratch directory.
    fn config(&self, extra: &str) -> PathBuf {
        write_config(&self.dir, extra)
    }

    /// The daemon with `config` over the state for at most `secs` seconds, serving HTTP on
    /// `port` (a free one when `None`), its log in `d.log`.
    fn daemon(&self, config: &Path, port: Option<u16>, secs: u64) -> Daemon {
        Daemon::spawn(
            &run_args(config, &self.state, port, secs),
            &self.dir.join("d.log"),
        )
    }

    /// [`Fixture::daemon`] on a free port, once it samples: the daemon and its port.
    fn sampling(&self, config: &Path, secs: u64) -> (Daemon, u16) {
        let port = free_port();
        let mut d = self.daemon(config, Some(port), secs);
        d.wait_for_log("sampling ");
        (d, port)
    }

    /// Removes the scratch directory (a failed test leaves it for a look).
    fn remove(self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Builds a C program (frame pointers, pseudo probes, build id) into target/service.
fn build_c(name: &str, source: &str) -> PathBuf {
    let dir = corpus::target_dir().join("service");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("{name}-{}.c", std::process::id()));
    std::fs::write(&src, source).unwrap();
    let out = dir.join(format!("{name}-{}", std::process::id()));
    e2e::support::build_program(&src, &out, &["-fno-optimize-sibling-calls"])
}

fn spin_binary() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let src = std::fs::read_to_string(corpus::sources_dir().join("live/spin.c")).unwrap();
            build_c("spin", &src)
        })
        .clone()
}

/// A small deterministic generator (xorshift64*), seeded from the clock; the seed is
/// printed so a failing run can be repeated with PGO_AGENT_SERVICE_SEED.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = std::env::var("PGO_AGENT_SERVICE_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
                    | 1
            });
        eprintln!("seed: {seed}");
        Rng(seed)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// A cpu-clock config with `extra`; unless `extra` has its own `[filters]`, only spin is
/// sampled (the build machine runs other jobs whose binaries would slow the daemon down).
fn write_config(dir: &Path, extra: &str) -> PathBuf {
    let p = dir.join("pgo-agent.toml");
    let filters = if extra.contains("[filters]") {
        ""
    } else {
        "[filters]\nexe_path_globs = [\"*/spin-*\"]\n"
    };
    let text = format!("[sampling]\nmodes = [\"cpu_clock\"]\n{extra}\n{filters}");
    std::fs::write(&p, text).unwrap();
    p
}

/// GET `path` of the daemon on 127.0.0.1:`port`: the body of a `200 OK`.
fn http_get(port: u16, path: &str) -> Result<String, String> {
    http_get_ok(&format!("http://127.0.0.1:{port}{path}"))
}

/// The value of a metric line `name` (exact series text) in the exposition, 0 if absent.
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// Every counter of a state, keyed by (window, context, is_branch, from, to).
type Flat = BTreeMap<(u64, Vec<u64>, bool, u64, u64), u64>;

fn flatten(s: &PersistedState) -> Flat {
    let mut out = Flat::new();
    for w in &s.windows {
        for (k, c) in &w.counters.contexts {
            for (&(a, b), &n) in &c.ranges {
                out.insert((w.start_secs, k.clone(), false, a, b), n);
            }
            for (&(a, b), &n) in &c.branches {
                out.insert((w.start_secs, k.clone(), true, a, b), n);
            }
        }
    }
    out
}

/// Every `*.state` file of `dir` reads back with a valid checksum; returns them by name.
fn verify_all_states(dir: &Path) -> BTreeMap<String, PersistedState> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            !name.contains(".corrupt-"),
            "a state file was set aside: {name}"
        );
        if name.ends_with(".state") {
            let s = read_state(&p).unwrap_or_else(|e| panic!("{name}: {e}"));
            out.insert(name, s);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// The unit file.

#[test]
fn unit_verifies_and_rates_at_most_2() {
    let _machine = e2e::support::machine_lock();
    if corpus::find_tool("systemd-analyze").is_none() {
        eprintln!("SKIPPED unit_verifies_and_rates_at_most_2: no systemd-analyze");
        return;
    }
    let dir = work_dir("unit");
    let exe = std::env::current_exe().unwrap();
    // verify checks that ExecStart's binary exists: point it at this executable.
    let unit = UNIT.replace(
        "ExecStart=/usr/local/bin/pgo-agent ",
        &format!("ExecStart={} ", exe.display()),
    );
    assert_ne!(unit, UNIT, "the unit's ExecStart changed: update this test");
    let path = dir.join("pgo-agent.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "systemd-analyze verify failed:\n{text}"
    );
    assert_eq!(text.trim(), "", "systemd-analyze verify is not clean");

    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("no overall exposure in:\n{text}"));
    // "→ Overall exposure level for pgo-agent.service: 1.8 OK 🙂"
    let score: f64 = line
        .rsplit(": ")
        .next()
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("cannot parse {line:?}"));
    eprintln!("{line}");
    assert!(score <= 2.0, "exposure {score} > 2.0:\n{text}");
    // The unit grants exactly the documented capabilities, bounding set included.
    let caps = unit_capabilities();
    assert_eq!(
        caps,
        [
            "CAP_PERFMON",
            "CAP_SYS_PTRACE",
            "CAP_DAC_READ_SEARCH",
            "CAP_CHECKPOINT_RESTORE"
        ]
    );
    assert!(UNIT.contains(&format!("CapabilityBoundingSet={}", caps.join(" "))));
    for needed in [
        "Type=notify",
        "WatchdogSec=",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "StateDirectory=pgo-agent",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "RestrictAddressFamilies=",
        "SystemCallFilter=",
        "MemoryMax=",
        "User=pgo-agent",
    ] {
        assert!(UNIT.contains(needed), "the unit lacks {needed}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

fn unit_capabilities() -> Vec<String> {
    UNIT.lines()
        .find_map(|l| l.strip_prefix("AmbientCapabilities="))
        .expect("AmbientCapabilities= in the unit")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Under systemd (`JOURNAL_STREAM` names stderr) each log line starts with its syslog
/// priority; `[log] level` and `RUST_LOG` choose what is logged.
#[test]
fn logs_carry_journald_priorities_and_follow_the_level() {
    let _machine = e2e::support::machine_lock();
    if !can_sample("logs_carry_journald_priorities_and_follow_the_level") {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let dir = work_dir("journald");
    let run = |extra: &str, rust_log: Option<&str>| -> String {
        let config = write_config(&dir, extra);
        let log = dir.join("daemon.log");
        std::fs::write(&log, "").unwrap();
        let m = std::fs::metadata(&log).unwrap();
        let env = [
            ("JOURNAL_STREAM", Some(format!("{}:{}", m.dev(), m.ino()))),
            ("RUST_LOG", rust_log.map(str::to_string)),
        ];
        let args = run_args(&config, &dir.join("state"), None, 1);
        let d = Daemon::spawn_with(&args, &[], &log, &env);
        let (ok, text) = d.wait();
        assert!(ok, "daemon failed:\n{text}");
        text
    };
    let info = run("", None);
    assert!(
        info.lines()
            .any(|l| l.starts_with("<6>serving HTTP on http://127.0.0.1:")),
        "{info}"
    );
    assert!(
        info.lines().any(|l| l.starts_with("<6>state: restored")),
        "{info}"
    );
    assert!(
        info.lines()
            .all(|l| ["<3>", "<4>", "<6>"].iter().any(|p| l.starts_with(p))),
        "every line carries a priority:\n{info}"
    );
    // The config's level, then RUST_LOG over it.
    let warn = run("[log]\nlevel = \"warn\"\n", None);
    assert!(!warn.contains("<6>"), "info lines at level warn:\n{warn}");
    let env_info = run("[log]\nlevel = \"warn\"\n", Some("info"));
    assert!(env_info.contains("<6>serving HTTP"), "{env_info}");
}

#[test]
fn install_script_stages_binary_unit_and_config() {
    let _machine = e2e::support::machine_lock();
    let root = work_dir("install");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let exe = std::env::current_exe().unwrap();
    let status = Command::new("sh")
        .arg(repo.join("scripts/install.sh"))
        .args(["--binary"])
        .arg(&exe)
        .args(["--prefix", "/opt/pgo"])
        .env("DESTDIR", &root)
        .status()
        .unwrap();
    assert!(status.success());
    let unit = std::fs::read_to_string(root.join("etc/systemd/system/pgo-agent.service")).unwrap();
    assert!(unit
        .contains("ExecStart=/opt/pgo/bin/pgo-agent run --config /etc/pgo-agent/pgo-agent.toml"));
    let config = std::fs::read_to_string(root.join("etc/pgo-agent/pgo-agent.toml")).unwrap();
    assert_eq!(config, daemon::config::DEFAULT_CONFIG);
    assert_eq!(
        std::fs::read(root.join("opt/pgo/bin/pgo-agent"))
            .unwrap()
            .len(),
        std::fs::read(&exe).unwrap().len()
    );
    let status = Command::new("sh")
        .arg(repo.join("scripts/uninstall.sh"))
        .args(["--prefix", "/opt/pgo", "--purge"])
        .env("DESTDIR", &root)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(!root.join("opt/pgo/bin/pgo-agent").exists());
    assert!(!root.join("etc/systemd/system/pgo-agent.service").exists());
    assert!(!root.join("etc/pgo-agent").exists());
    let _ = std::fs::remove_dir_all(root);
}

// ---------------------------------------------------------------------------------------
// Restart safety.

#[test]
fn sigkill_at_random_points_never_loses_a_completed_flush() {
    let _machine = e2e::support::machine_lock();
    let Some(fx) = Fixture::new(
        "sigkill_at_random_points_never_loses_a_completed_flush",
        "crash",
    ) else {
        return;
    };
    let (dir, state) = (&fx.dir, &fx.state);
    // Flush every second; one long window, so nothing expires during the test.
    let config =
        fx.config("[output]\nflush_interval_secs = 1\n[aggregation]\nwindow_secs = 3600\n");
    let spin = spin_binary();
    let spin_state = format!("{}.state", build_id_hex(&spin));
    let mut workload = Command::new(&spin).arg("120").spawn().unwrap();
    let mut rng = Rng::new();
    let mut last: Option<PersistedState> = None;
    let mut during_flush = 0;
    let rounds = 8;
    for round in 0..rounds {
        let log = dir.join(format!("daemon-{round}.log"));
        let expected = format!("restored {} binaries", verify_all_states(state).len());
        let mut d = Daemon::spawn(&run_args(&config, state, None, 120), &log);
        d.wait_for_log("state: restored");
        assert!(d.log().contains(&expected), "{}", d.log());
        d.wait_for_log("sampling ");
        let how = if round % 2 == 1 {
            // Kill while a flush is writing: after a random delay, the moment a temporary
            // file appears.
            std::thread::sleep(Duration::from_millis(rng.below(2500)));
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut writing = false;
            while !writing && Instant::now() < deadline {
                writing = std::fs::read_dir(state)
                    .unwrap()
                    .filter_map(|e| e.ok())
                    .any(|e| e.file_name().to_string_lossy().ends_with(".tmp"));
                // No sleep: a flush of small files lasts well under a millisecond.
            }
            if writing {
                during_flush += 1;
                "during a flush"
            } else {
                "after waiting for a flush in vain"
            }
        } else {
            std::thread::sleep(Duration::from_millis(800 + rng.below(3000)));
            "at a random point"
        };
        let log_text = d.sigkill();
        let states = verify_all_states(state);
        let now = states.get(&spin_state).cloned();
        eprintln!(
            "round {round}: SIGKILL {how}: spin state {} samples ({} state files)",
            now.as_ref().map_or(0, |s| s.samples()),
            states.len()
        );
        if let (Some(prev), Some(now)) = (&last, &now) {
            // Never less than the last completed flush before this run: every counter.
            let (p, n) = (flatten(prev), flatten(now));
            for (k, v) in &p {
                let got = n.get(k).copied().unwrap_or(0);
                assert!(
                    got >= *v,
                    "round {round}: {k:?} went from {v} to {got}\n{log_text}"
                );
            }
            assert!(now.samples() >= prev.samples());
        }
        if last.is_some() {
            assert!(now.is_some(), "round {round}: the spin state file vanished");
        }
        if now.is_some() {
            last = now;
        }
    }
    assert!(during_flush >= 2, "only {during_flush} kills hit a flush");
    let last = last.expect("the daemon flushed spin at least once");
    // Under heavy load from other jobs spin may get little CPU; any sample will do.
    assert!(last.samples() > 0);

    // A final restart serves the restored counters over HTTP (before any new flush).
    let port = free_port();
    let log = dir.join("daemon-final.log");
    let mut d = Daemon::spawn(&run_args(&config, state, Some(port), 120), &log);
    d.wait_for_log("serving HTTP");
    // The files a SIGKILL may have left one flush behind the state are rewritten by the
    // first flush of the restored aggregate.
    let id = build_id_hex(&spin);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let body = http_get(port, "/api/v1/profiles").unwrap();
        let list: serde_json::Value = serde_json::from_str(&body).unwrap();
        let served = list["profiles"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["build_id"] == id.as_str())
            .and_then(|p| p["samples"].as_u64());
        if served.is_some_and(|n| n >= last.samples()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "restored counters not served: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (ok, text) = d.stop();
    assert!(ok, "{text}");
    let after = verify_all_states(state)[&spin_state].clone();
    assert!(after.samples() >= last.samples());
    let _ = workload.kill();
    let _ = workload.wait();
    fx.remove();
}

/// Restoring a damaged or foreign file: set aside with a reason, counted, empty start.
#[test]
fn corrupt_and_foreign_state_files_are_set_aside() {
    let _machine = e2e::support::machine_lock();
    let Some(fx) = Fixture::new("corrupt_and_foreign_state_files_are_set_aside", "corrupt") else {
        return;
    };
    let state = &fx.state;
    let config = fx.config("[output]\nflush_interval_secs = 1\n");
    std::fs::write(
        state.join("aaaa.state"),
        b"PGOSTATE\x09\x00\x00\x00future format",
    )
    .unwrap();
    std::fs::write(state.join("bbbb.state"), b"garbage").unwrap();
    let port = free_port();
    let mut d = fx.daemon(&config, Some(port), 60);
    d.wait_for_log("serving HTTP");
    let metrics = http_get(port, "/metrics").unwrap();
    let (ok, log) = d.stop();
    assert!(ok, "{log}");
    assert!(
        log.contains("state file set aside (version): aaaa.state: format version 9"),
        "{log}"
    );
    assert!(
        log.contains("state file set aside (magic): bbbb.state"),
        "{log}"
    );
    assert_eq!(
        metric(
            &metrics,
            "pgo_agent_state_files_set_aside_total{reason=\"version\"}"
        ),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            "pgo_agent_state_files_set_aside_total{reason=\"magic\"}"
        ),
        1.0
    );
    let names: Vec<String> = std::fs::read_dir(state)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("aaaa.state.corrupt-")),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n.starts_with("bbbb.state.corrupt-")),
        "{names:?}"
    );
    assert!(!names.iter().any(|n| n == "aaaa.state" || n == "bbbb.state"));
    fx.remove();
}

// ---------------------------------------------------------------------------------------
// Disk full.

/// A tmpfs of `size` mounted on `dir` for `test`, unmounted when the guard goes; `None`
/// (after a SKIPPED message) where mounting is not permitted.
fn mount_tmpfs(test: &str, dir: &Path, size: &str) -> Option<Unmount> {
    let mounted = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size},mode=0755"),
            "tmpfs",
        ])
        .arg(dir)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    if !mounted.status.success() {
        eprintln!(
            "SKIPPED {test}: mount tmpfs not permitted: {}",
            String::from_utf8_lossy(&mounted.stderr).trim()
        );
        return None;
    }
    Some(Unmount(dir.to_path_buf()))
}

/// Unmounts its directory when dropped.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn disk_full_flushes_fail_cleanly_and_the_daemon_keeps_serving() {
    let _machine = e2e::support::machine_lock();
    let Some(fx) = Fixture::new(
        "disk_full_flushes_fail_cleanly_and_the_daemon_keeps_serving",
        "diskfull",
    ) else {
        return;
    };
    let state = &fx.state;
    let test = "disk_full_flushes_fail_cleanly_and_the_daemon_keeps_serving";
    let Some(_unmount) = mount_tmpfs(test, state, "512k") else {
        return;
    };
    let config = fx.config("[output]\nflush_interval_secs = 1\n");
    let spin = spin_binary();
    let spin_state = state.join(format!("{}.state", build_id_hex(&spin)));
    let mut workload = Command::new(&spin).arg("60").spawn().unwrap();
    let (d, port) = fx.sampling(&config, 120);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !spin_state.exists() {
        assert!(Instant::now() < deadline, "no flush of spin:\n{}", d.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Fill the file system to the last byte.
    let filler = state.join("filler");
    {
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 4096];
        while f.write_all(&chunk).is_ok() {}
        while f.write_all(&[0]).is_ok() {}
        let _ = f.sync_all();
    }
    // Let any flush that was in flight finish, then take the state as it is on disk.
    std::thread::sleep(Duration::from_millis(1500));
    let before = std::fs::read(&spin_state).unwrap();
    let failures_at_fill = metric(
        &http_get(port, "/metrics").unwrap(),
        "pgo_agent_state_flush_failures_total",
    );
    // Flushes fail while the daemon keeps sampling and serving.
    let deadline = Instant::now() + Duration::from_secs(30);
    let metrics = loop {
        let m = http_get(port, "/metrics").expect("the daemon keeps serving HTTP");
        if metric(&m, "pgo_agent_state_flush_failures_total") >= failures_at_fill + 3.0 {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "flush failures not counted:\n{m}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(metric(&metrics, "pgo_agent_state_flush_failures_total") >= 3.0);
    assert_eq!(http_get(port, "/healthz").map(|_| ()), Ok(()));
    let list = http_get(port, "/api/v1/profiles").unwrap();
    assert!(list.contains(&build_id_hex(&spin)), "{list}");
    // The previous state file is intact: same bytes, checksum valid.
    assert_eq!(std::fs::read(&spin_state).unwrap(), before);
    let kept = read_state(&spin_state).unwrap();
    let leftovers: Vec<String> = std::fs::read_dir(state)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(
        leftovers.len() <= 1,
        "temporaries left behind: {leftovers:?}"
    );
    // Space again: the next flush writes what memory kept.
    std::fs::remove_file(&filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = read_state(&spin_state).unwrap();
        if now.samples() > kept.samples() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no flush after space came back:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (ok, log) = d.stop();
    assert!(ok, "{log}");
    assert!(log.contains("flush failed"), "{log}");
    let _ = workload.kill();
    let _ = workload.wait();
    drop(_unmount);
    fx.remove();
}

/// A daemon whose last flush cannot write (the state directory turned read-only) says
/// which aggregates were not written and exits non-zero: a profile lost is never reported
/// as written.
#[test]
fn a_last_flush_that_cannot_write_fails_the_exit() {
    let _machine = e2e::support::machine_lock();
    let Some(fx) = Fixture::new("a_last_flush_that_cannot_write_fails_the_exit", "rostate") else {
        return;
    };
    let state = &fx.state;
    let test = "a_last_flush_that_cannot_write_fails_the_exit";
    let Some(_unmount) = mount_tmpfs(test, state, "4m") else {
        return;
    };
    let config = fx.config("[output]\nflush_interval_secs = 1\n");
    let spin = spin_binary();
    let spin_state = state.join(format!("{}.state", build_id_hex(&spin)));
    let mut workload = Command::new(&spin).arg("60").spawn().unwrap();
    let (d, _port) = fx.sampling(&config, 120);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !spin_state.exists() {
        assert!(Instant::now() < deadline, "no flush of spin:\n{}", d.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let remounted = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(state)
        .status()
        .unwrap();
    assert!(remounted.success());
    // spin keeps running: its aggregate changes after the remount.
    std::thread::sleep(Duration::from_millis(1500));
    let (ok, log) = d.stop();
    let _ = workload.kill();
    let _ = workload.wait();
    assert!(!ok, "exit status 0 though the last flush failed:\n{log}");
    assert!(log.contains("flush failed"), "{log}");
    assert!(
        log.contains("the last flush could not write")
            && log.contains(&state.display().to_string()),
        "{log}"
    );
    drop(_unmount);
    fx.remove();
}

// ---------------------------------------------------------------------------------------
// Memory budget.

/// A program whose samples land under a huge number of distinct call paths: DEPTH levels
/// of WIDTH functions each, every level calling a random function of the next through a
/// table, the leaf spinning; each sample is (almost always) a new calling context.
fn many_paths_source(depth: usize, width: usize) -> String {
    let mut s = String::from(
        "#include <stdlib.h>\n#include <time.h>\nvolatile unsigned long sink;\n\
         static unsigned long rng = 88172645463325252UL;\n\
         static unsigned long next(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }\n\
         typedef void (*fn_t)(void);\n",
    );
    s.push_str(&format!("extern fn_t table[{depth}][{width}];\n"));
    for d in 0..depth {
        for w in 0..width {
            let body = if d + 1 == depth {
                "for (int i = 0; i < 4000; i++) sink += i * 7;".to_string()
            } else {
                format!("table[{}][next() % {width}]();", d + 1)
            };
            s.push_str(&format!(
                "__attribute__((noinline)) void f_{d}_{w}(void) {{ sink++; {body} sink++; }}\n"
            ));
        }
    }
    s.push_str(&format!("fn_t table[{depth}][{width}] = {{\n"));
    for d in 0..depth {
        let row: Vec<String> = (0..width).map(|w| format!("f_{d}_{w}")).collect();
        s.push_str(&format!("  {{{}}},\n", row.join(", ")));
    }
    s.push_str(
        "};\nstatic double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }\n\
         int main(int argc, char **argv) { double end = now() + (argc > 1 ? atof(argv[1]) : 5.0);\n\
           rng ^= (unsigned long)(now() * 1e9);\n",
    );
    s.push_str(&format!(
        "  do {{ for (int r = 0; r < 100; r++) table[0][next() % {width}](); }} while (now() < end);\n  return 0;\n}}\n"
    ));
    s
}

#[test]
fn memory_budget_evicts_the_coldest_contexts_and_bounds_rss() {
    let _machine = e2e::support::machine_lock();
    let Some(fx) = Fixture::new(
        "memory_budget_evicts_the_coldest_contexts_and_bounds_rss",
        "memory",
    ) else {
        return;
    };
    let budget: u64 = 32 << 20;
    let config = fx.config(&format!(
        // No debug directories: where libc6-dbg is installed, the C library's debug
        // file would be loaded (its DWARF, ~40 MB, is a loaded binary's: outside the
        // budget, as the config documents), and this test is about the counters.
        "cpu_clock_frequency_hz = 4000\n[output]\nflush_interval_secs = 2\ndebug_dirs = []\n\
             [aggregation]\nwindow_secs = 3600\nmemory_budget_bytes = {budget}\n\
             [filters]\nexe_path_globs = [\"*/many_paths-*\"]\n"
    ));
    let prog = build_c("many_paths", &many_paths_source(10, 4));
    let (d, _) = fx.sampling(&config, 120);
    std::thread::sleep(Duration::from_millis(500));
    let baseline = d.status_bytes("VmRSS:");
    let secs = 25;
    let mut workers: Vec<Child> = (0..2)
        .map(|_| Command::new(&prog).arg(secs.to_string()).spawn().unwrap())
        .collect();
    let mut peak = 0;
    let until = Instant::now() + Duration::from_secs(secs + 3);
    while Instant::now() < until {
        peak = peak.max(d.status_bytes("VmRSS:"));
        std::thread::sleep(Duration::from_millis(100));
    }
    let hwm = d.status_bytes("VmHWM:");
    let (ok, log) = d.stop();
    for w in &mut workers {
        let _ = w.wait();
    }
    assert!(ok, "{log}");
    // "... (totals: N contexts, M binaries)" of the last eviction.
    let evicted: u64 = log
        .lines()
        .filter_map(|l| l.split("(totals: ").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .next_back()
        .unwrap_or(0);
    let read = log.lines().rfind(|l| l.contains("flush at")).unwrap_or("");
    eprintln!(
        "baseline RSS {} KiB, peak {} KiB (HWM {} KiB), budget {} KiB; {evicted} contexts evicted; {read}",
        baseline >> 10,
        peak >> 10,
        hwm >> 10,
        budget >> 10
    );
    assert!(evicted > 0, "the workload never reached the budget:\n{log}");
    // The budget bounds the daemon's whole RSS, its baseline included.
    assert!(
        hwm.max(peak) <= budget,
        "peak RSS {} KiB (baseline {} KiB), over the {} KiB budget",
        hwm.max(peak) >> 10,
        baseline >> 10,
        budget >> 10
    );
    // What was kept is a valid state, and what stayed is the hottest part.
    let states = verify_all_states(&fx.state);
    assert!(!states.is_empty());
    fx.remove();
}

/// The per-binary sample budget cuts samples before they are unwound: the window holds at
/// most the budget, the rest is counted as over budget.
#[test]
fn per_binary_sample_budget_throttles() {
    let _machine = e2e::support::machine_lock();
    let Some(fx) = Fixture::new("per_binary_sample_budget_throttles", "throttle") else {
        return;
    };
    let state = &fx.state;
    let config =
        fx.config("[aggregation]\nwindow_secs = 3600\nmax_samples_per_binary_per_window = 300\n");
    let spin = spin_binary();
    let mut workload = Command::new(&spin).arg("5").spawn().unwrap();
    let (ok, log) = fx.daemon(&config, None, 4).wait();
    let _ = workload.wait();
    assert!(ok, "{log}");
    let id = build_id_hex(&spin);
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(state.join(format!("{id}.json"))).unwrap())
            .unwrap();
    let (samples, offered, over) = (
        meta["samples"].as_u64().unwrap(),
        meta["offered"].as_u64().unwrap(),
        meta["over_budget"].as_u64().unwrap(),
    );
    eprintln!("spin: {offered} samples offered, {samples} kept, {over} over budget");
    // A window may straddle the hour only if the test runs across one: then two windows.
    let windows = read_state(&state.join(format!("{id}.state")))
        .unwrap()
        .windows
        .len() as u64;
    assert!(samples <= 300 * windows && samples > 0, "{meta}");
    assert!(over > 0 && offered >= samples + over, "{meta}");
    fx.remove();
}

/// Real binaries nobody here built, stripped and large: `clang-19 -c` compiles under the
/// daemon with the default configuration (cpu-clock here). clang-19 spends its time in
/// libLLVM.so.19.1 (about 59 MB of code) and libclang-cpp.so.19.1, stripped by Debian:
/// their samples are counted (decoded from their `.eh_frame` extents, a function when a
/// sample first reaches it), nothing is dropped as code-less, and the daemon's peak RSS
/// stays under 128 MiB.
#[test]
fn clang_compiles_count_stripped_libraries_within_128_mib() {
    let _machine = e2e::support::machine_lock();
    let test = "clang_compiles_count_stripped_libraries_within_128_mib";
    let Some(fx) = Fixture::new(test, "clang") else {
        return;
    };
    let (dir, state) = (&fx.dir, &fx.state);
    // The default configuration: an empty file over the embedded default.
    let config = dir.join("pgo-agent.toml");
    std::fs::write(&config, "").unwrap();
    let source = dir.join("unit.c");
    let mut text = String::new();
    for i in 0..300 {
        text.push_str(&format!(
            "int f{i}(int *a, int n) {{ int s = 0; for (int i = 0; i < n; i++) \
             {{ if (a[i] % {m}) s += a[i] * {i}; else s -= a[i] >> 1; }} return s; }}\n",
            m = i % 7 + 2
        ));
    }
    std::fs::write(&source, text).unwrap();
    let (d, port) = fx.sampling(&config, 120);
    for _ in 0..5 {
        let ok = Command::new("clang-19")
            .args(["-O2", "-c", "-o", "/dev/null"])
            .arg(&source)
            .status()
            .unwrap()
            .success();
        assert!(ok, "clang-19 -c {}", source.display());
    }
    // The samples of the last compile reach the workers within a reader interval or two.
    std::thread::sleep(Duration::from_secs(2));
    let metrics = http_get(port, "/metrics").unwrap();
    let hwm = d.status_bytes("VmHWM:");
    let (ok, log) = d.stop();
    assert!(ok, "{log}");
    let code_less = metric(
        &metrics,
        "pgo_agent_events_dropped_total{reason=\"code_less_binary\",stage=\"router\"}",
    );
    let mut counted: BTreeMap<String, (u64, String)> = BTreeMap::new();
    for entry in std::fs::read_dir(state).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "json") {
            let meta: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            counted.insert(
                meta["path"].as_str().unwrap_or_default().to_string(),
                (
                    meta["samples"].as_u64().unwrap_or(0),
                    meta["names"]["source"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                ),
            );
        }
    }
    eprintln!(
        "VmHWM {} KiB; code-less drops {code_less}; {counted:?}",
        hwm >> 10
    );
    for lib in ["libLLVM.so.19", "libclang-cpp.so.19"] {
        let (samples, names) = counted
            .iter()
            .find(|(p, _)| p.contains(lib))
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("no aggregate for {lib}: {counted:?}\n{log}"));
        assert!(samples > 0, "{lib}: {counted:?}");
        // Debian ships them stripped; where their debug files are installed the names
        // come from those.
        assert!(
            names == "address_only" || names == "debug_file",
            "{lib}: {names}"
        );
    }
    assert_eq!(code_less, 0.0, "{metrics}");
    assert!(hwm > 0 && hwm < 128 << 20, "peak RSS {} KiB", hwm >> 10);
    fx.remove();
}

// ---------------------------------------------------------------------------------------
// Least privilege.

/// `CAP_PERFMON` → `perfmon` for setpriv.
fn setpriv_caps(caps: &[String]) -> String {
    caps.iter()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_ascii_lowercase()))
        .collect::<Vec<_>>()
        .join(",")
}

fn setpriv_wrapper(caps: &str) -> Vec<String> {
    [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--no-new-privs",
        &format!(
            "--inh-caps=-all{}{caps}",
            if caps.is_empty() { "" } else { "," }
        ),
        &format!(
            "--ambient-caps=-all{}{caps}",
            if caps.is_empty() { "" } else { "," }
        ),
        &format!(
            "--bounding-set=-all{}{caps}",
            if caps.is_empty() { "" } else { "," }
        ),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn unprivileged_user_with_the_units_capabilities_samples() {
    let _machine = e2e::support::machine_lock();
    if !can_sample("unprivileged_user_with_the_units_capabilities_samples") {
        return;
    }
    if corpus::find_tool("setpriv").is_none() {
        eprintln!("SKIPPED unprivileged_user_with_the_units_capabilities_samples: no setpriv");
        return;
    }
    let dir = work_dir("unprivileged");
    let config = write_config(&dir, "[output]\nflush_interval_secs = 1\n");
    let spin = spin_binary();
    // The daemon runs as nobody; it must reach this executable, the config and spin.
    for p in [&dir, &config] {
        let mode = if p.is_dir() { 0o755 } else { 0o644 };
        let perms = std::os::unix::fs::PermissionsExt::from_mode(mode);
        std::fs::set_permissions(p, perms).unwrap();
    }
    let run = |name: &str, caps: &str| -> (bool, String, PathBuf) {
        let state = dir.join(name);
        std::fs::create_dir_all(&state).unwrap();
        let status = Command::new("chown")
            .args(["65534:65534"])
            .arg(&state)
            .status()
            .unwrap();
        assert!(status.success());
        let log = dir.join(format!("{name}.log"));
        let d = Daemon::spawn_with(
            &run_args(&config, &state, None, 4),
            &setpriv_wrapper(caps),
            &log,
            &[],
        );
        let (ok, log) = d.wait();
        (ok, log, state)
    };
    // spin runs as root, the daemon as nobody: profiling another user's process.
    let mut workload = Command::new(&spin).arg("30").spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));

    let caps = setpriv_caps(&unit_capabilities());
    let (ok, log, state) = run("with-unit-caps", &caps);
    assert!(ok, "as nobody with {caps}:\n{log}");
    assert!(log.contains("cpu_clock"), "{log}");
    let id = build_id_hex(&spin);
    let meta = std::fs::read_to_string(state.join(format!("{id}.json")))
        .unwrap_or_else(|e| panic!("spin not profiled as nobody ({e}):\n{log}"));
    let meta: serde_json::Value = serde_json::from_str(&meta).unwrap();
    let samples = meta["samples"].as_u64().unwrap();
    eprintln!("as nobody with {caps}: spin (run by root) has {samples} samples");
    assert!(samples > 100, "{meta}");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(state.join(format!("{id}.state")))
            .unwrap()
            .uid(),
        65534
    );

    // Without CAP_PERFMON the perf events do not open (perf_event_paranoid >= 1).
    let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2);
    if paranoid >= 1 {
        let without: Vec<String> = unit_capabilities()
            .into_iter()
            .filter(|c| c != "CAP_PERFMON")
            .collect();
        let (ok, log, _) = run("without-perfmon", &setpriv_caps(&without));
        assert!(!ok, "sampled without CAP_PERFMON:\n{log}");
        assert!(log.contains("opening perf events"), "{log}");
    }
    let _ = workload.kill();
    let _ = workload.wait();
    let _ = std::fs::remove_dir_all(dir);
}

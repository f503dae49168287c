//! A hostile process (issue 9): it maps crafted files as executable — a truncated ELF, an
//! ELF whose `.pseudo_probe` section is garbage, an ELF whose `.debug_info` is garbage —
//! and runs hot inside them (each file carries a copy of a tiny valid code loop at the
//! file offset of its `.text`, so the cpu-clock samples land in the crafted mappings)
//! while a live daemon samples it and a well-behaved `spin` process.
//!
//! The daemon runs in a child process (this test binary re-executed on
//! [`daemon_process`]), so the test can read its log and see that it keeps running. It
//! must: not exit, keep profiling `spin` (spin's sample count grows after the hostile
//! process ran), count each crafted file in `pgo_agent_binaries_rejected_total{reason}`,
//! and name each in its log.
//!
//! Needs root (system-wide perf events) and clang-19; skipped with a message otherwise.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use daemon::config::Config;
use daemon::run::{run_daemon, RunArgs, RunControl};
use e2e::corpus;
use e2e::support::{free_port, scratch_dir, wait_for};
use object::{Object, ObjectSection};
use symbolizer::ProfiledBinary;

/// Environment variable that turns [`daemon_process`] into the daemon (its value: the
/// scratch directory); `PGO_HOSTILE_PORT` is the HTTP port.
const DAEMON_ENV: &str = "PGO_HOSTILE_DAEMON_DIR";

/// `sub rdi, 1; jnz -6; ret`: `void spin(unsigned long n)` counting down, position
/// independent, touching no memory.
const SPIN_CODE: [u8; 7] = [0x48, 0x83, 0xef, 0x01, 0x75, 0xfa, 0xc3];

/// The hostile program: `hostile SECONDS (FILE OFFSET)...` maps each FILE with
/// PROT_READ|PROT_EXEC and calls the code at OFFSET in it until SECONDS have passed.
const HOSTILE_C: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef void (*spin_fn)(unsigned long);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  spin_fn fns[8];
  int n = 0;
  for (int i = 2; i + 1 < argc && n < 8; i += 2) {
    int fd = open(argv[i], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) { perror(argv[i]); return 1; }
    char *p = mmap(0, st.st_size, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    close(fd);
    fns[n++] = (spin_fn)(p + strtoul(argv[i + 1], 0, 0));
  }
  double end = now() + atof(argv[1]);
  do {
    for (int round = 0; round < 20; round++)
      for (int k = 0; k < n; k++) fns[k](200000);
  } while (now() < end);
  return 0;
}
"#;

fn scratch(name: &str) -> PathBuf {
    scratch_dir("hostile", name)
}

fn clang(out: &Path, src: &Path, extra: &[&str]) {
    let ok = Command::new("clang-19")
        .args(["-O2", "-g", "-fno-omit-frame-pointer", "-Wl,--build-id"])
        .args(extra)
        .arg("-o")
        .arg(out)
        .arg(src)
        .status()
        .unwrap()
        .success();
    assert!(ok, "building {}", src.display());
}

/// File offset and size of section `name`.
fn section_range(data: &[u8], name: &str) -> (usize, usize) {
    let file = object::File::parse(data).unwrap();
    let (offset, size) = file
        .section_by_name(name)
        .and_then(|s| s.file_range())
        .unwrap_or_else(|| panic!("no {name}"));
    (offset as usize, size as usize)
}

/// One crafted file: its path, the offset of the code loop in it, and the
/// `binaries_rejected_total` reason the daemon must report for it.
struct Crafted {
    path: PathBuf,
    code_offset: usize,
    reason: &'static str,
}

/// Writes the three crafted files from `elf` (a probe-instrumented build of spin, with
/// DWARF and a build id).
fn craft(dir: &Path, elf: &[u8]) -> Vec<Crafted> {
    let (text, _) = section_range(elf, ".text");
    let id = object::File::parse(elf)
        .unwrap()
        .build_id()
        .unwrap()
        .unwrap()
        .to_vec();
    let id_at = elf.windows(id.len()).position(|w| w == id).unwrap();
    let mut files = 0u8;
    // The code loop at .text, and a build id of its own (a copy keeping spin's id would be
    // taken for spin, which the daemon has already loaded).
    let mut with_code = |mut b: Vec<u8>| {
        b[text..text + SPIN_CODE.len()].copy_from_slice(&SPIN_CODE);
        files += 1;
        b[id_at] ^= files;
        b
    };
    let mut out = Vec::new();

    // Truncated: the headers and the code survive, the section headers (at the end) do not.
    let truncated = dir.join("truncated.elf");
    std::fs::write(&truncated, with_code(elf[..text + 4096].to_vec())).unwrap();
    out.push(Crafted {
        path: truncated,
        code_offset: text,
        reason: "invalid_elf",
    });

    // Garbage .pseudo_probe: GUIDs that match nothing, LEB128 numbers that never end.
    let mut bad = with_code(elf.to_vec());
    let (off, size) = section_range(elf, ".pseudo_probe");
    bad[off..off + size].fill(0xff);
    let bad_probe = dir.join("bad-probe.elf");
    std::fs::write(&bad_probe, &bad).unwrap();
    out.push(Crafted {
        path: bad_probe,
        code_offset: text,
        reason: "malformed_section",
    });

    // Garbage .debug_info after the first unit header: abbreviation codes that do not exist.
    let mut bad = with_code(elf.to_vec());
    let (off, size) = section_range(elf, ".debug_info");
    bad[off + 12..off + size].fill(0x7f);
    let bad_dwarf = dir.join("bad-dwarf.elf");
    std::fs::write(&bad_dwarf, &bad).unwrap();
    out.push(Crafted {
        path: bad_dwarf,
        code_offset: text,
        reason: "dwarf",
    });
    out
}

fn http_get(url: &str) -> Option<String> {
    match ureq::get(url).timeout(Duration::from_secs(10)).call() {
        Ok(r) => r.into_string().ok(),
        Err(_) => None,
    }
}

/// The value of `pgo_agent_binaries_rejected_total{reason="<reason>"}` in `metrics`.
fn rejected(metrics: &str, reason: &str) -> Option<u64> {
    let prefix = format!("pgo_agent_binaries_rejected_total{{reason=\"{reason}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// Samples of the aggregate `hex` in `GET /api/v1/profiles`.
fn samples_of(list: &str, hex: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(list).ok()?;
    v["profiles"]
        .as_array()?
        .iter()
        .find(|p| p["build_id"] == hex)
        .and_then(|p| p["samples"].as_u64())
}

/// The daemon, when this binary is re-executed by [`hostile_process_does_not_stop_the_daemon`];
/// a no-op otherwise.
#[test]
fn daemon_process() {
    let Ok(dir) = std::env::var(DAEMON_ENV) else {
        return;
    };
    let port: u16 = std::env::var("PGO_HOSTILE_PORT").unwrap().parse().unwrap();
    let extra = std::env::var("PGO_HOSTILE_CONFIG").unwrap_or_default();
    let config = Config::parse(
        &format!(
            "[sampling]\nmodes = [\"cpu_clock\"]\ncpu_clock_frequency_hz = 997\n\
             [filters]\ncomms = [\"spin\", \"hostile\"]\n[output]\nflush_interval_secs = 1\n{extra}"
        ),
        Path::new("hostile-test.toml"),
    )
    .unwrap();
    let args = RunArgs {
        config: None,
        state_dir: Some(PathBuf::from(dir).join("state")),
        duration_secs: Some(300),
        listen: Some(format!("127.0.0.1:{port}")),
    };
    let summary = run_daemon(&config, &args, &RunControl::default()).unwrap();
    eprintln!("daemon finished: {} samples", summary.readers.samples);
}

/// Starts the daemon child with `extra` config; returns it, its HTTP base URL and its log.
fn start_daemon(dir: &Path, extra: &str) -> (KillOnDrop, String, PathBuf) {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let log_path = dir.join("daemon.log");
    let daemon = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "hostile::daemon_process",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DAEMON_ENV, dir)
            .env("PGO_HOSTILE_PORT", port.to_string())
            .env("PGO_HOSTILE_CONFIG", extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap(),
    );
    assert!(
        wait_for(Duration::from_secs(60), || http_get(&format!(
            "{base}/healthz"
        )))
        .is_some(),
        "daemon never served /healthz"
    );
    (daemon, base, log_path)
}

/// Root and clang-19, else a SKIPPED message.
fn can_run(test: &str) -> bool {
    if std::env::var(DAEMON_ENV).is_ok() {
        return false;
    }
    if !e2e::support::is_root() {
        eprintln!("SKIPPED {test}: needs root for perf events");
        return false;
    }
    corpus::tools_available(test, &["clang-19"])
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn hostile_process_does_not_stop_the_daemon() {
    let _serial = e2e::support::machine_lock();
    if !can_run("hostile_process_does_not_stop_the_daemon") {
        return;
    }
    let dir = scratch("hostile");
    let spin = dir.join("spin");
    clang(
        &spin,
        &corpus::sources_dir().join("live/spin.c"),
        &["-fpseudo-probe-for-profiling", "-fPIE", "-pie"],
    );
    let hostile_src = dir.join("hostile.c");
    std::fs::write(&hostile_src, HOSTILE_C).unwrap();
    let hostile = dir.join("hostile");
    clang(&hostile, &hostile_src, &[]);
    let crafted = craft(&dir, &std::fs::read(&spin).unwrap());
    let spin_hex = ProfiledBinary::load(&spin)
        .unwrap()
        .build_id()
        .unwrap()
        .to_hex();

    let (mut daemon, base, log_path) = start_daemon(&dir, "");

    // The hostile process and spin side by side.
    let mut args = vec!["6".to_string()];
    for c in &crafted {
        args.push(c.path.to_str().unwrap().to_string());
        args.push(c.code_offset.to_string());
    }
    let mut evil = KillOnDrop(Command::new(&hostile).args(&args).spawn().unwrap());
    let mut first = KillOnDrop(Command::new(&spin).arg("6").spawn().unwrap());
    let metrics = wait_for(Duration::from_secs(60), || {
        let m = http_get(&format!("{base}/metrics"))?;
        crafted
            .iter()
            .all(|c| rejected(&m, c.reason).is_some())
            .then_some(m)
    });
    assert!(evil.0.wait().unwrap().success(), "hostile program failed");
    assert!(first.0.wait().unwrap().success());
    let log = std::fs::read_to_string(&log_path).unwrap();
    let metrics = metrics.unwrap_or_else(|| panic!("rejections never counted; daemon log:\n{log}"));
    for c in &crafted {
        // Once per file: the router and the worker remember the verdict.
        let expected = crafted.iter().filter(|o| o.reason == c.reason).count() as u64;
        assert_eq!(rejected(&metrics, c.reason), Some(expected), "{metrics}");
        assert!(
            log.lines()
                .any(|l| l.contains("not profiling") && l.contains(c.path.to_str().unwrap())),
            "{} not in the daemon log:\n{log}",
            c.path.display()
        );
    }
    assert!(!log.contains("panicked"), "{log}");

    // Still running, still sampling: spin's aggregate grows with a second run.
    let before = wait_for(Duration::from_secs(30), || {
        samples_of(&http_get(&format!("{base}/api/v1/profiles"))?, &spin_hex)
    })
    .unwrap_or_else(|| panic!("spin never profiled; daemon log:\n{log}"));
    assert!(daemon.0.try_wait().unwrap().is_none(), "the daemon exited");
    let mut second = KillOnDrop(Command::new(&spin).arg("3").spawn().unwrap());
    assert!(second.0.wait().unwrap().success());
    let after = wait_for(Duration::from_secs(30), || {
        let n = samples_of(&http_get(&format!("{base}/api/v1/profiles"))?, &spin_hex)?;
        (n > before).then_some(n)
    });
    if after.is_none() {
        let metrics = http_get(&format!("{base}/metrics")).unwrap_or_default();
        let drops: Vec<&str> = metrics
            .lines()
            .filter(|l| l.starts_with("pgo_agent_events_dropped_total"))
            .collect();
        panic!(
            "spin's samples stayed at {before} after the hostile process; not routed: {drops:#?}"
        );
    }
    assert!(daemon.0.try_wait().unwrap().is_none(), "the daemon exited");
}

/// `aggregation.max_binary_bytes`: a binary over it is not loaded; it is counted as
/// `too_large`, logged with the limit, and the daemon goes on.
#[test]
fn binary_over_max_binary_bytes_is_skipped() {
    let _serial = e2e::support::machine_lock();
    if !can_run("binary_over_max_binary_bytes_is_skipped") {
        return;
    }
    let dir = scratch("max-bytes");
    let spin = dir.join("spin");
    clang(
        &spin,
        &corpus::sources_dir().join("live/spin.c"),
        &["-fpseudo-probe-for-profiling", "-fPIE", "-pie"],
    );
    let (mut daemon, base, log_path) =
        start_daemon(&dir, "[aggregation]\nmax_binary_bytes = 4096\n");
    let mut child = KillOnDrop(Command::new(&spin).arg("2").spawn().unwrap());
    let metrics = wait_for(Duration::from_secs(60), || {
        let m = http_get(&format!("{base}/metrics"))?;
        rejected(&m, "too_large").map(|_| m)
    });
    assert!(child.0.wait().unwrap().success());
    let log = std::fs::read_to_string(&log_path).unwrap();
    let metrics = metrics.unwrap_or_else(|| panic!("too_large never counted; log:\n{log}"));
    // spin, and the shared libraries it maps (every one is over 4 KiB).
    assert!(rejected(&metrics, "too_large") >= Some(1), "{metrics}");
    let size = std::fs::metadata(&spin).unwrap().len();
    let line = log
        .lines()
        .find(|l| l.contains("not profiling") && l.contains(spin.to_str().unwrap()))
        .unwrap_or_else(|| panic!("spin not in the log:\n{log}"));
    assert!(
        line.contains(&format!(
            "binary size (aggregation.max_binary_bytes) is {size}, over the limit of 4096"
        )),
        "{line}"
    );
    assert!(daemon.0.try_wait().unwrap().is_none(), "the daemon exited");
}

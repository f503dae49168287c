//! A hostile process (issue 9): it maps crafted files as executable — a truncated ELF, an
//! ELF whose `.pseudo_probe` section is garbage, an ELF whose `.debug_info` is garbage —
//! and runs hot inside them (each file carries a copy of a tiny valid code loop at the
//! file offset of its `.text`, so the cpu-clock samples land in the crafted mappings)
//! while a live daemon samples it and a well-behaved `spin` process.
//!
//! The daemon runs in a child process (an [`e2e::agent::DaemonProcess`]), so the test can
//! read its log and see that it keeps running. It
//! must: not exit, keep profiling `spin` (spin's sample count grows after the hostile
//! process ran), count each crafted file in `pgo_agent_binaries_rejected_total{reason}`,
//! and name each in its log.
//!
//! Needs root (system-wide perf events) and clang-19; skipped with a message otherwise.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use e2e::agent::{cpu_clock_config_text, run_args, DaemonProcess};
use e2e::http::http_get_ok;
use e2e::support::{build_id_hex, build_program, build_spin, free_port, scratch_dir, wait_for};
use object::{Object, ObjectSection};

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
    let mut crafted = |name: &str, bytes: Vec<u8>, reason| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        out.push(Crafted {
            path,
            code_offset: text,
            reason,
        });
    };

    // Truncated: the headers and the code survive, the section headers (at the end) do not.
    crafted(
        "truncated.elf",
        with_code(elf[..text + 4096].to_vec()),
        "invalid_elf",
    );

    // Garbage .pseudo_probe: GUIDs that match nothing, LEB128 numbers that never end.
    let mut bad = with_code(elf.to_vec());
    let (off, size) = section_range(elf, ".pseudo_probe");
    bad[off..off + size].fill(0xff);
    crafted("bad-probe.elf", bad, "malformed_section");

    // Garbage .debug_info after the first unit header: abbreviation codes that do not exist.
    let mut bad = with_code(elf.to_vec());
    let (off, size) = section_range(elf, ".debug_info");
    bad[off + 12..off + size].fill(0x7f);
    crafted("bad-dwarf.elf", bad, "dwarf");
    out
}

/// The body of a `200 OK` answer to GET `url`.
fn http_get(url: &str) -> Option<String> {
    http_get_ok(url).ok()
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

/// Starts the daemon child with `extra` config; returns it and its HTTP base URL.
fn start_daemon(dir: &Path, extra: &str) -> (DaemonProcess, String) {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let config = dir.join("hostile-test.toml");
    let text = cpu_clock_config_text(&format!(
        "[filters]\ncomms = [\"spin\", \"hostile\"]\n[output]\nflush_interval_secs = 1\n{extra}"
    ));
    std::fs::write(&config, text).unwrap();
    let daemon = DaemonProcess::spawn(
        &run_args(&config, &dir.join("state"), Some(port), 300),
        &dir.join("daemon.log"),
    );
    assert!(
        wait_for(Duration::from_secs(60), || http_get(&format!(
            "{base}/healthz"
        )))
        .is_some(),
        "daemon never served /healthz"
    );
    (daemon, base)
}

/// Root and clang-19, else a SKIPPED message.
fn can_run(test: &str) -> bool {
    e2e::support::can_sample(test, &["clang-19"])
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
    let _machine = e2e::support::machine_lock();
    if !can_run("hostile_process_does_not_stop_the_daemon") {
        return;
    }
    let dir = scratch_dir("hostile", "hostile");
    let spin = build_spin(&dir);
    let hostile_src = dir.join("hostile.c");
    std::fs::write(&hostile_src, HOSTILE_C).unwrap();
    let hostile = build_program(&hostile_src, &dir.join("hostile"), &[]);
    let crafted = craft(&dir, &std::fs::read(&spin).unwrap());
    let spin_hex = build_id_hex(&spin);

    let (mut daemon, base) = start_daemon(&dir, "");

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
    let log = daemon.log();
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
    assert!(daemon.is_running(), "the daemon exited");
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
    assert!(daemon.is_running(), "the daemon exited");
}

/// `aggregation.max_binary_bytes`: a binary over it is not loaded; it is counted as
/// `too_large`, logged with the limit, and the daemon goes on.
#[test]
fn binary_over_max_binary_bytes_is_skipped() {
    let _machine = e2e::support::machine_lock();
    if !can_run("binary_over_max_binary_bytes_is_skipped") {
        return;
    }
    let dir = scratch_dir("hostile", "max-bytes");
    let spin = build_spin(&dir);
    let (mut daemon, base) = start_daemon(&dir, "[aggregation]\nmax_binary_bytes = 4096\n");
    let mut child = KillOnDrop(Command::new(&spin).arg("2").spawn().unwrap());
    let metrics = wait_for(Duration::from_secs(60), || {
        let m = http_get(&format!("{base}/metrics"))?;
        rejected(&m, "too_large").map(|_| m)
    });
    assert!(child.0.wait().unwrap().success());
    let log = daemon.log();
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
    assert!(daemon.is_running(), "the daemon exited");
}

//! Set-up shared by the end-to-end tests that run the daemon or a server: ports, scratch
//! directories, polling, and the `spin` workload.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::corpus;

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("binding an ephemeral port")
        .local_addr()
        .expect("local address")
        .port()
}

/// A fresh, empty directory `target/corpus/<suite>/<name>-<pid>`, canonical (the daemon
/// logs the paths the kernel reports, which are canonical).
pub fn scratch_dir(suite: &str, name: &str) -> PathBuf {
    let dir = corpus::target_dir()
        .join(suite)
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir.canonicalize().expect("canonical scratch directory")
}

/// Calls `f` every 250 ms until it gives a value or `limit` has passed.
pub fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Builds `tests/programs/live/spin.c` (the live tests' workload) with [`build_program`]
/// into `dir/spin`.
pub fn build_spin(dir: &Path) -> PathBuf {
    build_program(
        &corpus::sources_dir().join("live/spin.c"),
        &dir.join("spin"),
        &[],
    )
}

/// Builds the C program `src` with clang-19 into `out` as the live tests want it (frame
/// pointers, pseudo probes, a PIE with a GNU build id), with `extra` flags; `out`'s
/// canonical path.
pub fn build_program(src: &Path, out: &Path, extra: &[&str]) -> PathBuf {
    let status = Command::new("clang-19")
        .args([
            "-O2",
            "-g",
            "-fno-omit-frame-pointer",
            "-mno-omit-leaf-frame-pointer",
        ])
        .args(extra)
        .args([
            "-fpseudo-probe-for-profiling",
            "-fPIE",
            "-pie",
            "-Wl,--build-id",
            "-o",
        ])
        .arg(out)
        .arg(src)
        .status()
        .expect("running clang-19");
    assert!(status.success(), "building {}", src.display());
    out.canonicalize().expect("canonical program path")
}

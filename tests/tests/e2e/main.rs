//! The end-to-end tests, one test binary with a module per area and the fixtures of
//! `e2e` (tests/src) shared:
//! - [`offline`]: tests that read and write files (corpus recordings, llvm-profgen
//!   conformance, accuracy, bad input, `record`, `verify`); they run side by side.
//! - [`host`]: tests that sample this host (the daemon, uprobes, the systemd unit,
//!   ClickHouse); each runs alone.
//!
//! Every test's first statement takes the machine ([`e2e::support::machine_share`] offline,
//! [`e2e::support::machine_lock`] on the host; checked by [`every_test_takes_the_machine_first`]).
//! The corpus is built and each corpus program recorded once per run (`e2e::corpus` caches
//! both per process).
//!
//! ```text
//! cargo test -p e2e --release --test e2e                          # everything
//! cargo test -p e2e --release --test e2e -- offline::conformance:: # one area
//! ```

mod host;
mod offline;

/// Not a test of its own: `pgo-agent` when this executable is re-executed by
/// [`e2e::support::cli_child_command`] or [`e2e::support::cli_in_child`] (a daemon child of
/// [`e2e::agent::DaemonProcess`], a CLI run); a no-op otherwise.
#[test]
fn cli_process() {
    e2e::support::cli_child();
}

/// Each `#[test]` function under `host/` starts with `machine_lock()` and each one under
/// `offline/` with `machine_share()`: a test without it could run beside a daemon that
/// samples it (or, on the host, beside tests whose processes it would sample).
#[test]
fn every_test_takes_the_machine_first() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e");
    let mut tests = 0;
    for (area, call) in [
        ("host", "e2e::support::machine_lock();"),
        ("offline", "e2e::support::machine_share();"),
    ] {
        let dir = root.join(area);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "rs"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no test files in {}", dir.display());
        for file in files {
            let text = e2e::support::read_text(&file);
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                if line.trim() != "#[test]" {
                    continue;
                }
                let head = (i + 1..lines.len())
                    .find(|&j| lines[j].trim_start().starts_with("fn "))
                    .unwrap_or_else(|| panic!("{}:{}: #[test] without fn", file.display(), i + 1));
                let first = lines.get(head + 1).map_or("", |l| l.trim());
                assert_eq!(
                    first,
                    format!("let _machine = {call}"),
                    "{}:{}: the test's first statement must take the machine",
                    file.display(),
                    head + 1
                );
                tests += 1;
            }
        }
    }
    assert!(tests > 80, "found only {tests} tests");
}

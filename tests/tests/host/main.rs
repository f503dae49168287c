//! End-to-end tests that sample this host: the daemon with perf events and uprobes, the
//! systemd unit, hostile processes, the HTTP API of a running daemon, ClickHouse. Each test
//! that samples holds [`e2e::support::machine_lock`], so they run one at a time; the offline
//! tests are another test binary, which cargo runs before or after this one, never beside it.
//!
//! One area: `cargo test -p e2e --release --test host -- live::`.

mod clickhouse;
mod heap_uprobe;
mod hostile;
mod http;
mod live;
mod service;
mod stripped_daemon;

/// Not a test of its own: `pgo-agent` when this executable is re-executed by
/// [`e2e::support::cli_child_command`] (a daemon child of [`e2e::agent::DaemonProcess`]); a
/// no-op otherwise.
#[test]
fn cli_process() {
    e2e::support::cli_child();
}

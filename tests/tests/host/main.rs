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

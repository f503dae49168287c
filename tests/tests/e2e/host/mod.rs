//! Tests that sample this host: the daemon with perf events and uprobes, the systemd unit,
//! hostile processes, the HTTP API of a running daemon, ClickHouse. Each holds
//! [`e2e::support::machine_lock`], so they run one at a time and never beside an offline
//! test (which holds [`e2e::support::machine_share`]).
//!
//! One area: `cargo test -p e2e --release --test e2e -- host::live::`.

mod clickhouse;
mod heap_uprobe;
mod hostile;
mod http;
mod live;
mod service;
mod stripped_daemon;

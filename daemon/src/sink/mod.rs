//! Sinks: where the daemon pushes each closed window besides its state dir. One today,
//! ClickHouse ([`clickhouse`]), behind a bounded on-disk [`spool::Spool`].
//!
//! ```text
//! workers ──try_send(ClosedWindow)──▶ sink thread: encode → spool file → INSERT (in order)
//!   (never block: a full queue          (retries with backoff while ClickHouse is down;
//!    drops the window, counted)          a full spool drops its oldest window, counted)
//! ```
//!
//! [`Sink`] is the whole delivery path without the thread (tests and the scale bench drive
//! it directly); [`spawn`] runs it on its own thread for `pgo-agent run`.

pub mod clickhouse;
pub mod spool;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error_chain::ErrorChain;

use anyhow::Context;
use crossbeam_channel::{bounded, RecvTimeoutError, Sender, TrySendError};
use serde::Deserialize;

use clickhouse::{
    encode_window, insert_windows, ClickHouseClient, ClickHouseError, ClickHouseTarget,
    ClosedWindow,
};
use spool::Spool;

/// Closed windows the workers may queue for the sink thread before dropping (counted).
pub const SINK_QUEUE_WINDOWS: usize = 4096;
/// First retry delay after a failed delivery; doubles up to [`MAX_RETRY_DELAY`].
pub const FIRST_RETRY_DELAY: Duration = Duration::from_secs(1);
/// Longest retry delay.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);
/// Most windows one delivery inserts together.
pub const MAX_WINDOWS_PER_INSERT: usize = 1000;

/// `[sink]` of the config.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    /// `[sink.clickhouse]`; absent: no ClickHouse sink.
    #[serde(default)]
    pub clickhouse: Option<ClickHouseSinkConfig>,
}

fn default_database() -> String {
    "pgo".into()
}
fn default_batch_rows() -> usize {
    100_000
}
fn default_timeout_ms() -> u64 {
    10_000
}
fn default_spool_max_bytes() -> u64 {
    1 << 30
}

/// `[sink.clickhouse]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ClickHouseSinkConfig {
    /// HTTP interface URL, e.g. `http://clickhouse:8123`.
    pub url: String,
    /// Database of the tables (`pgo-agent clickhouse init` creates them).
    #[serde(default = "default_database")]
    pub database: String,
    /// User (HTTP basic auth); none: ClickHouse's `default` user.
    #[serde(default)]
    pub user: Option<String>,
    /// File whose first line is the password.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Counter rows per INSERT block.
    #[serde(default = "default_batch_rows")]
    pub batch_rows: usize,
    /// Per-request timeout.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Spool directory (default `<state_dir>/clickhouse-spool`).
    #[serde(default)]
    pub spool_dir: Option<PathBuf>,
    /// Spool size limit; past it the oldest windows are dropped and counted.
    #[serde(default = "default_spool_max_bytes")]
    pub spool_max_bytes: u64,
    /// The `host` column (default: the kernel hostname).
    #[serde(default)]
    pub host: Option<String>,
    /// Insert into the `Distributed` tables (`<table>_dist`) of a cluster.
    #[serde(default)]
    pub distributed: bool,
}

/// Reads the first line of a password file.
pub fn read_password(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading password file {}", path.display()))?;
    Ok(text.lines().next().unwrap_or("").trim_end().to_string())
}

/// The kernel hostname (`/proc/sys/kernel/hostname`), `localhost` when unreadable.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

impl ClickHouseSinkConfig {
    /// The connection this config describes (reads the password file).
    pub fn target(&self) -> anyhow::Result<ClickHouseTarget> {
        Ok(ClickHouseTarget {
            url: self.url.clone(),
            database: self.database.clone(),
            user: self.user.clone(),
            password: match &self.password_file {
                Some(p) => Some(read_password(p)?),
                None => None,
            },
            timeout: Duration::from_millis(self.timeout_ms.max(1)),
            distributed: self.distributed,
        })
    }
}

/// What a sink did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SinkStats {
    /// Windows accepted into the spool.
    pub windows_spooled: u64,
    /// Windows delivered (marker inserted).
    pub windows_delivered: u64,
    /// Counter rows inserted (a retried window counts again).
    pub rows_inserted: u64,
    /// Windows dropped: spool full or bad file, or the sink queue full.
    pub windows_dropped: u64,
    /// Failed deliveries (each retry that fails counts).
    pub insert_errors: u64,
    /// Windows still in the spool when the sink thread stopped (delivered by the next
    /// start).
    pub windows_left: u64,
}

/// The delivery path: encode, spool, insert in order. See the module docs.
pub struct Sink {
    client: ClickHouseClient,
    spool: Spool,
    host: String,
    batch_rows: usize,
    queue_dropped: u64,
    stats: SinkStats,
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Sink {
    /// A sink for `config`; the spool defaults to `<state_dir>/clickhouse-spool`.
    pub fn open(config: &ClickHouseSinkConfig, state_dir: &Path) -> anyhow::Result<Sink> {
        let spool_dir = config
            .spool_dir
            .clone()
            .unwrap_or_else(|| state_dir.join("clickhouse-spool"));
        let host = config.host.clone().unwrap_or_else(hostname);
        Sink::new(
            config.target()?,
            &spool_dir,
            config.spool_max_bytes,
            config.batch_rows,
            host,
        )
    }

    /// A sink from its parts.
    pub fn new(
        target: ClickHouseTarget,
        spool_dir: &Path,
        spool_max_bytes: u64,
        batch_rows: usize,
        host: String,
    ) -> anyhow::Result<Sink> {
        let spool = Spool::open(spool_dir, spool_max_bytes)?;
        let mut sink = Sink {
            client: ClickHouseClient::new(target)?,
            spool,
            host,
            batch_rows: batch_rows.max(1),
            queue_dropped: 0,
            stats: SinkStats::default(),
        };
        sink.sync_drops();
        Ok(sink)
    }

    /// Brings `windows_dropped` and the spool gauges up to date.
    fn sync_drops(&mut self) {
        let total = self.spool.dropped() + self.queue_dropped;
        if total > self.stats.windows_dropped {
            service::metrics::sink_windows_dropped(total - self.stats.windows_dropped);
            self.stats.windows_dropped = total;
        }
        service::metrics::set_sink_spool(self.spool.depth() as u64, self.spool.bytes());
    }

    /// Encodes `w` and appends it to the spool (the oldest windows are dropped and
    /// counted when it is full).
    pub fn submit(&mut self, w: &ClosedWindow) -> anyhow::Result<()> {
        let encoded = encode_window(w, &self.host);
        self.spool.push(&encoded)?;
        self.stats.windows_spooled += 1;
        self.sync_drops();
        Ok(())
    }

    /// Delivers the spooled windows oldest first until the spool is empty (returns how
    /// many were delivered) or an insert fails (the windows stay at the head). Consecutive
    /// windows are inserted together up to `batch_rows` counter rows (and at most
    /// [`MAX_WINDOWS_PER_INSERT`]).
    pub fn deliver(&mut self) -> Result<usize, ClickHouseError> {
        let mut delivered = 0;
        while let Some(first) = self.spool.front() {
            let mut rows = first.counter_rows();
            let mut batch = vec![first];
            while batch.len() < MAX_WINDOWS_PER_INSERT {
                match self.spool.get(batch.len()) {
                    Some(Ok(w)) if rows + w.counter_rows() <= self.batch_rows as u64 => {
                        rows += w.counter_rows();
                        batch.push(w);
                    }
                    // Past the end, too many rows, or a bad file (dropped when it
                    // reaches the head).
                    _ => break,
                }
            }
            let started = Instant::now();
            let refs: Vec<&clickhouse::EncodedWindow> = batch.iter().collect();
            match insert_windows(&self.client, &refs, self.batch_rows, unix_now()) {
                Ok(rows) => {
                    service::metrics::observe_sink_insert(rows, started.elapsed());
                    self.stats.rows_inserted += rows;
                    self.stats.windows_delivered += batch.len() as u64;
                    for _ in &batch {
                        self.spool.pop_front();
                    }
                    delivered += batch.len();
                }
                Err(e) => {
                    service::metrics::sink_insert_error(e.reason());
                    self.stats.insert_errors += 1;
                    self.sync_drops();
                    return Err(e);
                }
            }
        }
        self.sync_drops();
        Ok(delivered)
    }

    /// The spool.
    pub fn spool(&self) -> &Spool {
        &self.spool
    }

    /// The client (for queries beside the sink).
    pub fn client(&self) -> &ClickHouseClient {
        &self.client
    }

    /// What the sink did.
    pub fn stats(&self) -> &SinkStats {
        &self.stats
    }

    /// Counts `n` windows dropped before they reached the spool (queue full, spool write
    /// failed).
    pub fn count_queue_drops(&mut self, n: u64) {
        self.queue_dropped += n;
        self.sync_drops();
    }
}

/// The workers' end of the sink thread: cheap to clone, never blocks.
#[derive(Clone, Debug)]
pub struct SinkHandle {
    tx: Sender<ClosedWindow>,
    epoch_unix: u64,
    queue_dropped: Arc<AtomicU64>,
}

impl SinkHandle {
    /// Unix time of the daemon's clock zero: window starts are `epoch_unix + start_secs`.
    pub fn epoch_unix(&self) -> u64 {
        self.epoch_unix
    }

    /// Queues a closed window; when the queue is full it is dropped and counted.
    pub fn offer(&self, w: ClosedWindow) {
        match self.tx.try_send(w) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.queue_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Starts the ClickHouse sink thread when `config` has one; `clock_zero` is the instant
/// the daemon's window clock counts from.
pub fn start(
    config: &SinkConfig,
    state_dir: &Path,
    clock_zero: Instant,
) -> anyhow::Result<Option<(SinkHandle, JoinHandle<SinkStats>)>> {
    let Some(c) = &config.clickhouse else {
        return Ok(None);
    };
    let sink = Sink::open(c, state_dir).context("[sink.clickhouse]")?;
    tracing::info!(
        "sink: ClickHouse {} database {}; {} windows spooled",
        c.url,
        c.database,
        sink.spool().depth()
    );
    let epoch = unix_now().saturating_sub(clock_zero.elapsed().as_secs());
    spawn(sink, epoch).map(Some)
}

/// Hands the windows of one binary that closed by `now_secs` (every window with `all`, at
/// shutdown) and start after `sent` (the newest start handed before, updated) to the sink.
/// A window handed twice (e.g. the open window at shutdown, then restored and closed by
/// the next start on the same clock) is harmless: the pull query takes the maximum per
/// (host, window, key), and a window's counts only grow.
#[allow(clippy::too_many_arguments)]
pub fn hand_closed_windows(
    sink: &SinkHandle,
    build_id: &collector::BuildId,
    preferred_base: u64,
    windows: &unwinder::window::WindowedCounters,
    window_secs: u64,
    now_secs: u64,
    all: bool,
    sent: &mut Option<u64>,
) {
    for w in windows.windows() {
        let closed = all || w.start_secs.saturating_add(window_secs.max(1)) <= now_secs;
        if !closed || sent.is_some_and(|s| w.start_secs <= s) {
            continue;
        }
        sink.offer(ClosedWindow {
            build_id: build_id.clone(),
            preferred_base,
            window_start: sink.epoch_unix.saturating_add(w.start_secs),
            samples: w.samples,
            counters: w.counters.clone(),
        });
        *sent = Some(w.start_secs);
    }
}

/// Runs `sink` on its own thread: spools each window handed through the returned
/// [`SinkHandle`] and delivers with backoff. When every handle is dropped, it tries one
/// last delivery (what stays in the spool is delivered by the next start) and returns its
/// statistics. `epoch_unix` is the Unix time of the daemon clock's zero.
pub fn spawn(
    mut sink: Sink,
    epoch_unix: u64,
) -> anyhow::Result<(SinkHandle, JoinHandle<SinkStats>)> {
    let (tx, rx) = bounded::<ClosedWindow>(SINK_QUEUE_WINDOWS);
    let queue_dropped = Arc::new(AtomicU64::new(0));
    let handle = SinkHandle {
        tx,
        epoch_unix,
        queue_dropped: queue_dropped.clone(),
    };
    let thread = std::thread::Builder::new()
        .name("pgo-sink".into())
        .spawn(move || {
            let mut delay = FIRST_RETRY_DELAY;
            let mut next_try = Instant::now();
            let mut seen_queue_drops = 0;
            let mut try_deliver = |sink: &mut Sink, next_try: &mut Instant| match sink.deliver() {
                Ok(_) => delay = FIRST_RETRY_DELAY,
                Err(e) => {
                    tracing::warn!("sink: {e}; retrying in {} s", delay.as_secs());
                    *next_try = Instant::now() + delay;
                    delay = (delay * 2).min(MAX_RETRY_DELAY);
                }
            };
            loop {
                let wait = next_try.saturating_duration_since(Instant::now());
                let wait = if sink.spool().depth() == 0 {
                    Duration::from_secs(3600)
                } else {
                    wait
                };
                let got = rx.recv_timeout(wait);
                let q = queue_dropped.load(Ordering::Relaxed);
                if q > seen_queue_drops {
                    sink.count_queue_drops(q - seen_queue_drops);
                    seen_queue_drops = q;
                }
                match got {
                    Ok(w) => {
                        if let Err(e) = sink.submit(&w) {
                            tracing::error!(
                                "sink: spooling a window failed: {chain}",
                                chain = ErrorChain(e.as_ref())
                            );
                            sink.count_queue_drops(1);
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => {
                        if sink.spool().depth() > 0 {
                            let _ = sink.deliver();
                        }
                        let mut stats = sink.stats().clone();
                        stats.windows_left = sink.spool().depth() as u64;
                        return stats;
                    }
                }
                if sink.spool().depth() > 0 && Instant::now() >= next_try {
                    try_deliver(&mut sink, &mut next_try);
                }
            }
        })?;
    Ok((handle, thread))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults() {
        let c: SinkConfig =
            toml::from_str("[clickhouse]\nurl = \"http://127.0.0.1:8123\"\n").unwrap();
        let c = c.clickhouse.unwrap();
        assert_eq!(c.database, "pgo");
        assert_eq!(c.batch_rows, 100_000);
        assert_eq!(c.timeout_ms, 10_000);
        assert_eq!(c.spool_max_bytes, 1 << 30);
        assert_eq!(c.spool_dir, None);
        let e = toml::from_str::<SinkConfig>("[clickhouse]\nurl = \"x\"\nbatch = 1\n");
        assert!(e.is_err());
    }

    #[test]
    fn unreachable_server_spools_and_counts_errors() {
        let dir = std::env::temp_dir().join(format!("pgo-sink-unreach-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // Port 9 (discard) on loopback: nothing listens there in the test environment.
        let target = ClickHouseTarget {
            url: "http://127.0.0.1:9".into(),
            database: "pgo".into(),
            user: None,
            password: None,
            timeout: Duration::from_secs(2),
            distributed: false,
        };
        let mut sink = Sink::new(target, &dir, 1 << 20, 10, "h".into()).unwrap();
        let w = ClosedWindow {
            build_id: collector::BuildId(vec![1, 2]),
            preferred_base: 0,
            window_start: 60,
            samples: 1,
            counters: unwinder::CounterSet::new(unwinder::CounterKind::Flat),
        };
        sink.submit(&w).unwrap();
        let e = sink.deliver().unwrap_err();
        assert_eq!(e.reason(), "connect");
        assert_eq!(sink.spool().depth(), 1);
        assert_eq!(sink.stats().insert_errors, 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

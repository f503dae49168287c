//! The daemon's TOML configuration. The embedded default is `systemd/pgo-agent.toml`,
//! which documents every option; a config file overrides any subset of it.

use std::path::{Path, PathBuf};

use anyhow::Context;
use collector::live::SamplingMode;
use serde::Deserialize;

/// The embedded default configuration (`systemd/pgo-agent.toml`).
pub const DEFAULT_CONFIG: &str = include_str!("../../systemd/pgo-agent.toml");

/// The whole configuration.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[sampling]`.
    pub sampling: SamplingConfig,
    /// `[collector]`.
    pub collector: CollectorConfig,
    /// `[aggregation]`.
    pub aggregation: AggregationConfig,
    /// `[filters]`.
    pub filters: FilterConfig,
    /// `[output]`.
    pub output: OutputConfig,
    /// `[sink]` (`[sink.clickhouse]`); absent by default.
    #[serde(default)]
    pub sink: crate::sink::SinkConfig,
    /// `[heap]`: the MemProf spool (disabled unless `spool_dir` is set).
    #[serde(default)]
    pub heap: HeapConfig,
    /// `[log]`: what the daemon logs.
    #[serde(default)]
    pub log: LogConfig,
}

/// `[log]`: the daemon's log filter (`RUST_LOG`, when set, takes its place).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// A `tracing` filter: `error`, `warn`, `info`, `debug`, `trace`, or per-module
    /// directives such as `info,daemon::run::worker=debug`.
    #[serde(default = "default_log_level")]
    pub level: String,
}

fn default_log_level() -> String {
    "info".to_string()
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: default_log_level(),
        }
    }
}

/// `[heap]`: raw MemProf profiles dropped in `spool_dir` are ingested by the daemon
/// (`run::heap_spool`).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HeapConfig {
    /// Spool directory watched for raw MemProf profiles; `None` disables the spool.
    #[serde(default)]
    pub spool_dir: Option<PathBuf>,
    /// How often the spool directory is scanned.
    #[serde(default = "default_heap_scan_interval_secs")]
    pub scan_interval_secs: u64,
    /// Largest raw profile read; larger files are rejected (`too_large`).
    #[serde(default = "default_heap_max_raw_file_bytes")]
    pub max_raw_file_bytes: u64,
    /// Binaries to symbolize with, matched by build id (besides `output.debug_dirs`).
    #[serde(default)]
    pub binaries: Vec<PathBuf>,
}

fn default_heap_scan_interval_secs() -> u64 {
    10
}

fn default_heap_max_raw_file_bytes() -> u64 {
    256 << 20
}

impl Default for HeapConfig {
    fn default() -> Self {
        HeapConfig {
            spool_dir: None,
            scan_interval_secs: default_heap_scan_interval_secs(),
            max_raw_file_bytes: default_heap_max_raw_file_bytes(),
            binaries: Vec::new(),
        }
    }
}

/// `[sampling]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SamplingConfig {
    /// Allowed modes, preferred first.
    pub modes: Vec<SamplingMode>,
    /// Fixed period of branch sampling.
    pub branch_period_events: u64,
    /// cpu-clock samples per second per CPU.
    pub cpu_clock_frequency_hz: u64,
    /// `sample_max_stack`.
    pub max_stack_frames: u16,
}

/// `[collector]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CollectorConfig {
    /// Data pages per ring.
    pub ring_buffer_pages: usize,
    /// Longest wait of a reader between drains.
    pub reader_poll_interval_ms: u64,
    /// Share of a ring (percent) that, once unread, wakes its reader before the interval
    /// ends (0: the interval only).
    pub ring_wakeup_percent: u32,
    /// Events per batch.
    pub reader_batch_events: usize,
    /// Reader → router channel capacity.
    pub channel_capacity_batches: usize,
    /// Sample the daemon itself.
    pub sample_self: bool,
    /// Ask the kernel for build ids in MMAP2 records (`attr.build_id`, Linux 5.12+), so a
    /// binary is known by build id even when its file is gone before it is read. While it
    /// is on, the kernel flags the MMAP2 records of every other perf session on the host
    /// as build-id form though they carry inode data (seen on 6.1 and 6.18), which crashes
    /// `perf record` 6.1 ("stack smashing detected") and misleads other readers; `false`
    /// where other profilers run beside the daemon: binaries are then known by their files
    /// (`/proc/PID/map_files`, read as the mapping is seen).
    #[serde(default = "default_mmap_build_ids")]
    pub mmap_build_ids: bool,
}

fn default_mmap_build_ids() -> bool {
    true
}

/// `[aggregation]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AggregationConfig {
    /// Worker threads.
    pub unwind_workers: usize,
    /// Window length.
    pub window_secs: u64,
    /// Windows kept.
    pub retained_windows: usize,
    /// Per-binary sample budget per window.
    pub max_samples_per_binary_per_window: u64,
    /// Memory budget of all counters.
    pub memory_budget_bytes: u64,
    /// Largest binary a worker loads for symbolization (the whole file is decoded in
    /// memory); larger ones are skipped and counted in `pgo_agent_binaries_rejected_total`.
    #[serde(default = "default_max_binary_bytes")]
    pub max_binary_bytes: u64,
    /// Repair the call chain of samples taken in a prologue or epilogue from their user
    /// registers and stack words (counted in `pgo_agent_stack_repairs_total`); `false`
    /// drops them as llvm-profgen does.
    #[serde(default = "default_stack_repair")]
    pub stack_repair: bool,
    /// Bytes the loaded binaries may hold in what they decode on demand (instructions,
    /// probes, line tables); past it, the least recently sampled binaries give theirs back.
    #[serde(default = "default_decoded_budget_bytes")]
    pub decoded_budget_bytes: u64,
}

fn default_stack_repair() -> bool {
    true
}

fn default_decoded_budget_bytes() -> u64 {
    64 << 20
}

fn default_max_binary_bytes() -> u64 {
    crate::run::worker::DEFAULT_MAX_BINARY_BYTES
}

/// `[filters]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct FilterConfig {
    /// Executable path globs.
    pub exe_path_globs: Vec<String>,
    /// Process names.
    pub comms: Vec<String>,
    /// cgroup path prefixes.
    pub cgroup_prefixes: Vec<String>,
}

/// `[output]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// State directory.
    pub state_dir: PathBuf,
    /// Flush period.
    pub flush_interval_secs: u64,
    /// HTTP listen address (the API and `/metrics`).
    pub listen_address: String,
    /// Bearer token file for the HTTP API (required for a non-loopback listen address).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// Debug directories searched by build id (and `.gnu_debuglink` names) for the debug
    /// files of stripped binaries.
    #[serde(default)]
    pub debug_dirs: Vec<PathBuf>,
    /// debuginfod servers (empty: `DEBUGINFOD_URLS` of the daemon's environment).
    #[serde(default)]
    pub debuginfod_urls: Vec<String>,
    /// Bytes the debuginfod cache (`<state_dir>/debuginfod`) may hold.
    pub debuginfod_cache_bytes: u64,
    /// Seconds one debuginfod request may take.
    pub debuginfod_timeout_secs: u64,
}

impl OutputConfig {
    /// The debuginfod client of this configuration (`debuginfod_urls`, else
    /// `DEBUGINFOD_URLS`), caching under `<state_dir>/debuginfod`; `None` without servers.
    pub fn debuginfod_client(
        &self,
        state_dir: &Path,
    ) -> Option<crate::debuginfod::DebuginfodClient> {
        let urls = if self.debuginfod_urls.is_empty() {
            crate::debuginfod::urls_from_env()
        } else {
            self.debuginfod_urls.clone()
        };
        crate::debuginfod::DebuginfodClient::from_config(
            &urls,
            state_dir.join("debuginfod"),
            self.debuginfod_cache_bytes,
            std::time::Duration::from_secs(self.debuginfod_timeout_secs),
        )
    }
}

/// A partial config as a file may give it: every table and option optional. Parsed as a
/// `toml::Table` and merged over the default, so a file names only what it changes.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

impl Config {
    /// The embedded default.
    pub fn embedded() -> Config {
        Config::parse(DEFAULT_CONFIG, Path::new("<embedded default>"))
            .expect("the embedded default config is valid (tested)")
    }

    /// Parses a config text over the embedded default; `origin` names it in errors.
    pub fn parse(text: &str, origin: &Path) -> anyhow::Result<Config> {
        let mut base: toml::Table = DEFAULT_CONFIG.parse().context("embedded default config")?;
        let over: toml::Table = text
            .parse()
            .with_context(|| format!("parsing config {}", origin.display()))?;
        merge(&mut base, over);
        let config: Config = toml::Value::Table(base)
            .try_into()
            .with_context(|| format!("config {}", origin.display()))?;
        config
            .validate()
            .with_context(|| format!("config {}", origin.display()))?;
        Ok(config)
    }

    /// Reads a config file (over the embedded default).
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config {}", path.display()))?;
        Config::parse(&text, path)
    }

    fn validate(&self) -> anyhow::Result<()> {
        let c = &self.collector;
        anyhow::ensure!(
            c.ring_buffer_pages.is_power_of_two() && c.ring_buffer_pages <= 1 << 18,
            "collector.ring_buffer_pages = {} must be a power of two up to 262144",
            c.ring_buffer_pages
        );
        anyhow::ensure!(
            c.ring_wakeup_percent <= 50,
            "collector.ring_wakeup_percent = {} must be at most 50 (0 turns wake-ups off)",
            c.ring_wakeup_percent
        );
        anyhow::ensure!(!self.sampling.modes.is_empty(), "sampling.modes is empty");
        anyhow::ensure!(
            self.sampling.branch_period_events > 0,
            "sampling.branch_period_events must be > 0"
        );
        anyhow::ensure!(
            (1..=100_000).contains(&self.sampling.cpu_clock_frequency_hz),
            "sampling.cpu_clock_frequency_hz must be in 1..=100000"
        );
        anyhow::ensure!(
            c.reader_batch_events > 0,
            "collector.reader_batch_events must be > 0"
        );
        anyhow::ensure!(
            c.channel_capacity_batches > 0,
            "collector.channel_capacity_batches must be > 0"
        );
        let a = &self.aggregation;
        anyhow::ensure!(
            (1..=64).contains(&a.unwind_workers),
            "aggregation.unwind_workers must be in 1..=64"
        );
        anyhow::ensure!(a.window_secs > 0, "aggregation.window_secs must be > 0");
        anyhow::ensure!(
            a.retained_windows > 0,
            "aggregation.retained_windows must be > 0"
        );
        anyhow::ensure!(
            self.output.flush_interval_secs > 0,
            "output.flush_interval_secs must be > 0"
        );
        anyhow::ensure!(
            self.heap.scan_interval_secs > 0,
            "heap.scan_interval_secs must be > 0"
        );
        anyhow::ensure!(
            (1..=collector::memprof::raw::MAX_RAW_PROFILE_BYTES)
                .contains(&self.heap.max_raw_file_bytes),
            "heap.max_raw_file_bytes = {} must be in 1..={}",
            self.heap.max_raw_file_bytes,
            collector::memprof::raw::MAX_RAW_PROFILE_BYTES
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_parses() {
        let c = Config::embedded();
        assert_eq!(c.sampling.modes, SamplingMode::ALL.to_vec());
        assert_eq!(c.collector.ring_buffer_pages, 64);
        assert_eq!(
            (
                c.collector.reader_poll_interval_ms,
                c.collector.ring_wakeup_percent
            ),
            (100, 25)
        );
        assert_eq!(c.output.flush_interval_secs, 60);
        assert_eq!(c.output.state_dir, PathBuf::from("/var/lib/pgo-agent"));
        assert!(c.filters.comms.is_empty());
    }

    #[test]
    fn file_overrides_a_subset() {
        let c = Config::parse(
            "[sampling]\nmodes = [\"cpu_clock\"]\n[filters]\ncomms = [\"spin\"]\n",
            Path::new("t.toml"),
        )
        .unwrap();
        assert_eq!(c.sampling.modes, vec![SamplingMode::CpuClock]);
        assert_eq!(c.filters.comms, vec!["spin".to_string()]);
        assert_eq!(c.sampling.cpu_clock_frequency_hz, 999);
    }

    #[test]
    fn unknown_option_and_bad_values_are_errors() {
        let e = Config::parse("[output]\nflush_interval = 3\n", Path::new("t.toml")).unwrap_err();
        assert!(format!("{e:#}").contains("flush_interval"), "{e:#}");
        let e =
            Config::parse("[collector]\nring_buffer_pages = 3\n", Path::new("t.toml")).unwrap_err();
        assert!(format!("{e:#}").contains("power of two"), "{e:#}");
        let e = Config::parse(
            "[collector]\nring_wakeup_percent = 60\n",
            Path::new("t.toml"),
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("at most 50"), "{e:#}");
        let e = Config::parse("[sampling]\nmodes = [\"lbr\"]\n", Path::new("t.toml")).unwrap_err();
        assert!(format!("{e:#}").contains("unknown variant"), "{e:#}");
        // A value out of range names its key.
        for (toml, key) in [
            (
                "[aggregation]\nwindow_secs = 0\n",
                "aggregation.window_secs",
            ),
            (
                "[aggregation]\nretained_windows = 0\n",
                "aggregation.retained_windows",
            ),
            (
                "[collector]\nchannel_capacity_batches = 0\n",
                "collector.channel_capacity_batches",
            ),
            (
                "[heap]\nmax_raw_file_bytes = 0\n",
                "heap.max_raw_file_bytes",
            ),
        ] {
            let e = Config::parse(toml, Path::new("t.toml")).unwrap_err();
            assert!(format!("{e:#}").contains(key), "{toml}: {e:#}");
        }
    }
}

//! [`Metrics`]: every Prometheus family of the daemon, registered in one place and named
//! `pgo_agent_<name>_<unit>[_total]`. Labels come from bounded sets only: sampling mode,
//! drop stage/reason, route template, method, status class, and the build ids of the top
//! [`TOP_BINARIES`] binaries.
//!
//! Counters the daemon keeps elsewhere (the readers' atomics, the state directory) are
//! copied in at scrape time by [`Metrics::observe_daemon`] and [`Metrics::observe_store`];
//! the text is the Prometheus exposition format 0.0.4 (`prometheus::TextEncoder`), which
//! `promtool check metrics` lints.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use unwinder::shard::{STACK_REPAIR_OUTCOMES, UNWIND_ERROR_REASONS};

use crate::sampling_guidance::DensityGuidance;
use crate::store::{ProfileQuality, ProfileSummary};

/// Per-binary series are kept for this many binaries (most samples first).
pub const TOP_BINARIES: usize = 20;
/// Quality gauges are computed for this many binaries (most samples first): each costs a
/// profile generation whenever the binary's aggregate changed.
pub const QUALITY_BINARIES: usize = 5;

/// Flush durations of every worker of this process. A process-wide histogram because the
/// workers flush on their own threads; [`Metrics::new`] registers it. Record with
/// [`observe_flush`].
static FLUSH_DURATION: LazyLock<Histogram> = LazyLock::new(|| {
    Histogram::with_opts(
        HistogramOpts::new(
            "pgo_agent_flush_duration_seconds",
            "Time to write one worker's changed aggregates to the state directory.",
        )
        .buckets(vec![0.001, 0.005, 0.02, 0.1, 0.5, 2.0, 10.0]),
    )
    .expect("static histogram options are valid")
});

/// Records one worker flush (called by the daemon's workers).
pub fn observe_flush(took: Duration) {
    FLUSH_DURATION.observe(took.as_secs_f64());
}

/// State-file flushes that failed (disk full, I/O error), process-wide like
/// [`FLUSH_DURATION`]; record with [`count_flush_failure`].
static STATE_FLUSH_FAILURES: LazyLock<IntCounter> = LazyLock::new(|| {
    IntCounter::new(
        "pgo_agent_state_flush_failures_total",
        "Worker flushes that failed to write a state file (the previous file is kept).",
    )
    .expect("static counter options are valid")
});

/// State files renamed aside at start (corrupt, foreign version), by reason.
static STATE_SET_ASIDE: LazyLock<IntCounterVec> = LazyLock::new(|| {
    IntCounterVec::new(
        Opts::new(
            "pgo_agent_state_files_set_aside_total",
            "State files renamed aside at start instead of restored, by reason.",
        ),
        &["reason"],
    )
    .expect("static counter options are valid")
});

/// Aggregates dropped from memory to stay within the memory budget, by what was dropped.
static MEMORY_EVICTIONS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    IntCounterVec::new(
        Opts::new(
            "pgo_agent_memory_evictions_total",
            "Contexts and binaries evicted (coldest first) to keep the counters within the memory budget.",
        ),
        &["what"],
    )
    .expect("static counter options are valid")
});

/// Binaries a worker refused to symbolize (too large, not a usable ELF file), by reason.
static BINARIES_REJECTED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    IntCounterVec::new(
        Opts::new(
            "pgo_agent_binaries_rejected_total",
            "Binaries that could not be loaded for symbolization (their samples are dropped), by reason.",
        ),
        &["reason"],
    )
    .expect("static counter options are valid")
});

/// Raw MemProf profiles the daemon's heap spool folded into an aggregate.
static HEAP_PROFILES_INGESTED: LazyLock<IntCounter> = LazyLock::new(|| {
    IntCounter::new(
        "pgo_agent_heap_profiles_ingested_total",
        "Raw MemProf profiles from the heap spool directory folded into an aggregate.",
    )
    .expect("static counter options are valid")
});

/// Raw MemProf profiles the heap spool moved to `rejected/`, by reason.
static HEAP_PROFILES_REJECTED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    IntCounterVec::new(
        Opts::new(
            "pgo_agent_heap_profiles_rejected_total",
            "Raw MemProf profiles from the heap spool directory rejected (moved to rejected/), by reason.",
        ),
        &["reason"],
    )
    .expect("static counter options are valid")
});

/// Counts one raw MemProf profile ingested by the heap spool.
pub fn count_heap_profile_ingested() {
    HEAP_PROFILES_INGESTED.inc();
}

/// Counts one raw MemProf profile rejected by the heap spool; `reason` comes from a fixed
/// set (`truncated`, `bad_magic`, `unsupported_version`, `corrupt`, `too_large`, `io`,
/// `no_build_id`, `binary_not_found`, `symbolize`).
pub fn count_heap_profile_rejected(reason: &str) {
    HEAP_PROFILES_REJECTED.with_label_values(&[reason]).inc();
}

/// Counts one binary rejected by a worker; `reason` comes from a fixed set (`too_large`,
/// `invalid_elf`, `unsupported`, `malformed_section`, `dwarf`, `io`, `other`).
pub fn count_binary_rejected(reason: &str) {
    BINARIES_REJECTED.with_label_values(&[reason]).inc();
}

/// Counts one failed flush of a worker's state files.
pub fn count_flush_failure() {
    STATE_FLUSH_FAILURES.inc();
}

/// Counts one state file set aside; `reason` comes from a fixed set (`checksum`,
/// `version`, `magic`, `truncated`, `malformed`, `build_id`, `io`).
pub fn count_state_file_set_aside(reason: &str) {
    STATE_SET_ASIDE.with_label_values(&[reason]).inc();
}

/// Counts `n` evictions of `what` (`context` or `binary`).
pub fn count_evictions(what: &str, n: u64) {
    MEMORY_EVICTIONS.with_label_values(&[what]).inc_by(n);
}

/// ClickHouse sink families (process-wide: the sink runs on its own thread); record with
/// the `sink_*` functions below.
struct SinkMetrics {
    rows: IntCounter,
    latency: Histogram,
    spool_windows: IntGauge,
    spool_bytes: IntGauge,
    dropped: IntCounter,
    errors: IntCounterVec,
}

static SINK: LazyLock<SinkMetrics> = LazyLock::new(|| SinkMetrics {
    rows: IntCounter::new(
        "pgo_agent_sink_rows_inserted_total",
        "Counter rows inserted into ClickHouse (a retried window counts again).",
    )
    .expect("static counter options are valid"),
    latency: Histogram::with_opts(
        HistogramOpts::new(
            "pgo_agent_sink_insert_duration_seconds",
            "Time of one delivery to ClickHouse (one or more closed windows: their \
             contexts, counter blocks and markers).",
        )
        .buckets(vec![0.005, 0.025, 0.1, 0.5, 2.0, 10.0, 60.0]),
    )
    .expect("static histogram options are valid"),
    spool_windows: IntGauge::new(
        "pgo_agent_sink_spool_windows",
        "Closed windows waiting in the ClickHouse sink's spool.",
    )
    .expect("static gauge options are valid"),
    spool_bytes: IntGauge::new(
        "pgo_agent_sink_spool_bytes",
        "Bytes of the windows waiting in the ClickHouse sink's spool.",
    )
    .expect("static gauge options are valid"),
    dropped: IntCounter::new(
        "pgo_agent_sink_windows_dropped_total",
        "Closed windows the ClickHouse sink dropped (spool full: oldest first; queue full).",
    )
    .expect("static counter options are valid"),
    errors: IntCounterVec::new(
        Opts::new(
            "pgo_agent_sink_insert_errors_total",
            "Failed window deliveries to ClickHouse, by reason (connect, timeout, \
             server_error, rejected, bad_response).",
        ),
        &["reason"],
    )
    .expect("static counter options are valid"),
});

/// Records one delivered window: `rows` counter rows inserted in `took`.
pub fn observe_sink_insert(rows: u64, took: Duration) {
    SINK.rows.inc_by(rows);
    SINK.latency.observe(took.as_secs_f64());
}

/// Counts one failed delivery; `reason` comes from a fixed set (see the family's help).
pub fn sink_insert_error(reason: &str) {
    SINK.errors.with_label_values(&[reason]).inc();
}

/// Sets the spool gauges.
pub fn set_sink_spool(windows: u64, bytes: u64) {
    SINK.spool_windows.set(windows.min(i64::MAX as u64) as i64);
    SINK.spool_bytes.set(bytes.min(i64::MAX as u64) as i64);
}

/// Counts `n` windows the sink dropped.
pub fn sink_windows_dropped(n: u64) {
    SINK.dropped.inc_by(n);
}

/// The daemon's counters at one moment, as [`Metrics::observe_daemon`] takes them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DaemonCounters {
    /// Sampling mode (`intel_lbr`, `amd_branch`, `cpu_clock`).
    pub mode: &'static str,
    /// True when the mode samples a hardware branch stack (LBR / LBRv2).
    pub branch_stack: bool,
    /// PERF_RECORD_SAMPLEs read.
    pub samples: u64,
    /// Records the kernel could not write (ring full; sum of PERF_RECORD_LOST).
    pub records_lost: u64,
    /// Samples dropped inside the kernel/PMU (PERF_RECORD_LOST_SAMPLES).
    pub samples_lost: u64,
    /// Events dropped because the reader → router channel was full.
    pub events_dropped: u64,
    /// Records that did not parse.
    pub parse_errors: u64,
    /// Samples the router passed to no worker, by reason (`filtered`, `unmapped`, ...).
    pub not_routed: Vec<(&'static str, u64)>,
}

/// See the module docs.
pub struct Metrics {
    registry: Registry,
    samples: IntCounterVec,
    records_lost: IntCounter,
    samples_lost: IntCounter,
    dropped: IntCounterVec,
    parse_errors: IntCounter,
    unwind_errors: IntCounterVec,
    stack_repairs: IntCounterVec,
    mode: IntGaugeVec,
    lbr: IntGauge,
    binaries: IntGauge,
    binary_samples: IntGaugeVec,
    over_budget: IntGauge,
    memory: IntGauge,
    decoded: IntGaugeVec,
    density: GaugeVec,
    more_sampling: GaugeVec,
    branch_ratio: GaugeVec,
    stale_share: GaugeVec,
    http_requests: IntCounterVec,
    http_duration: HistogramVec,
}

fn counter_add(c: &IntCounter, now: u64) {
    let have = c.get();
    if now > have {
        c.inc_by(now - have);
    }
}

/// Makes families and registers each in one registry as it is made (names are unique:
/// `metrics_page_lists_every_registered_family` checks every one).
struct Families<'r>(&'r Registry);

impl Families<'_> {
    fn register<C: prometheus::core::Collector + Clone + 'static>(&self, c: C) -> C {
        self.0
            .register(Box::new(c.clone()))
            .expect("metric names are unique (tested)");
        c
    }

    fn counter(&self, name: &str, help: &str) -> IntCounter {
        self.register(IntCounter::new(name, help).expect("valid"))
    }

    fn counter_vec(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.register(IntCounterVec::new(Opts::new(name, help), labels).expect("valid"))
    }

    fn gauge(&self, name: &str, help: &str) -> IntGauge {
        self.register(IntGauge::new(name, help).expect("valid"))
    }

    fn gauge_vec(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        self.register(IntGaugeVec::new(Opts::new(name, help), labels).expect("valid"))
    }

    /// A per-binary (`build_id`) floating-point gauge.
    fn binary_gauge(&self, name: &str, help: &str) -> GaugeVec {
        self.register(GaugeVec::new(Opts::new(name, help), &["build_id"]).expect("valid"))
    }

    /// The process-wide families the daemon's threads record into directly.
    fn register_process_wide(&self) {
        self.register(FLUSH_DURATION.clone());
        self.register(STATE_FLUSH_FAILURES.clone());
        self.register(STATE_SET_ASIDE.clone());
        self.register(MEMORY_EVICTIONS.clone());
        self.register(BINARIES_REJECTED.clone());
        self.register(HEAP_PROFILES_INGESTED.clone());
        self.register(HEAP_PROFILES_REJECTED.clone());
        self.register(SINK.rows.clone());
        self.register(SINK.latency.clone());
        self.register(SINK.spool_windows.clone());
        self.register(SINK.spool_bytes.clone());
        self.register(SINK.dropped.clone());
        self.register(SINK.errors.clone());
    }
}

impl Metrics {
    /// Every family, registered: the pipeline's counters, the per-binary profile gauges,
    /// HTTP, and the process-wide families.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let f = Families(&registry);
        let http_duration = f.register(
            HistogramVec::new(
                HistogramOpts::new(
                    "pgo_agent_http_request_duration_seconds",
                    "HTTP request latency by route template.",
                )
                .buckets(vec![0.001, 0.005, 0.025, 0.1, 0.5, 2.5, 10.0]),
                &["route"],
            )
            .expect("valid"),
        );
        let metrics = Metrics {
            // The sampling pipeline.
            samples: f.counter_vec(
                "pgo_agent_samples_total",
                "Samples read from the perf rings.",
                &["mode"],
            ),
            records_lost: f.counter(
                "pgo_agent_records_lost_total",
                "Records the kernel could not write because a ring was full (PERF_RECORD_LOST).",
            ),
            samples_lost: f.counter(
                "pgo_agent_pmu_samples_lost_total",
                "Samples dropped inside the kernel or PMU (PERF_RECORD_LOST_SAMPLES).",
            ),
            dropped: f.counter_vec(
                "pgo_agent_events_dropped_total",
                "Events dropped between pipeline stages.",
                &["stage", "reason"],
            ),
            parse_errors: f.counter(
                "pgo_agent_parse_errors_total",
                "Ring records that did not parse.",
            ),
            unwind_errors: f.counter_vec(
                "pgo_agent_unwind_errors_total",
                "Samples (for bogus_range: range samples) the unwinder could not use fully, by \
                 reason, summed over the tracked binaries.",
                &["reason"],
            ),
            stack_repairs: f.counter_vec(
                "pgo_agent_stack_repairs_total",
                "Samples taken in a prologue or epilogue (where the frame-pointer chain skips \
                 the caller), by outcome: repaired from their user registers and stack, or \
                 unrepairable (dropped), summed over the tracked binaries.",
                &["outcome"],
            ),
            mode: f.gauge_vec(
                "pgo_agent_sampling_mode_info",
                "1 for the sampling mode in use.",
                &["mode"],
            ),
            lbr: f.gauge(
                "pgo_agent_branch_stack_available",
                "1 when a hardware branch stack (Intel LBR or AMD LBRv2) is sampled, 0 otherwise.",
            ),
            // Binaries and memory.
            binaries: f.gauge(
                "pgo_agent_binaries_tracked",
                "Binaries with an aggregate: held by the workers or in the state directory.",
            ),
            binary_samples: f.gauge_vec(
                "pgo_agent_binary_samples",
                "Samples in the retained windows, for the binaries with the most samples.",
                &["build_id"],
            ),
            over_budget: f.gauge(
                "pgo_agent_binaries_over_top_n",
                "Tracked binaries left out of pgo_agent_binary_samples (top-N bound).",
            ),
            memory: f.gauge(
                "pgo_agent_resident_memory_bytes",
                "Resident set size of the daemon (/proc/self/statm).",
            ),
            decoded: f.gauge_vec(
                "pgo_agent_decoded_bytes",
                "Memory held by what binaries decode as samples reach them: instructions \
                 (code), pseudo probes (probes), DWARF line tables (line_tables).",
                &["cache"],
            ),
            // Profile quality, per binary.
            density: f.binary_gauge(
                "pgo_agent_profile_density",
                "llvm-profgen's profile density of the generated profile (warns below 50).",
            ),
            more_sampling: f.binary_gauge(
                "pgo_agent_profile_more_sampling_seconds",
                "Seconds of sampling at the binary's current sample rate its profile still \
                 needs to reach density 50 (0 when it has; absent when the rate is unknown).",
            ),
            branch_ratio: f.binary_gauge(
                "pgo_agent_profile_taken_branches_per_text_byte",
                "Taken branches counted per byte of function code.",
            ),
            stale_share: f.binary_gauge(
                "pgo_agent_profile_stale_sample_ratio",
                "Share of the profile's body samples in functions whose probe checksum differs \
                 from the binary's (stale; clang drops them).",
            ),
            // HTTP.
            http_requests: f.counter_vec(
                "pgo_agent_http_requests_total",
                "HTTP requests served, by route template, method and status code.",
                &["route", "method", "status"],
            ),
            http_duration,
            registry: registry.clone(),
        };
        f.register_process_wide();
        metrics
    }

    /// Copies the daemon's counters in (counters only move forward).
    pub fn observe_daemon(&self, c: &DaemonCounters) {
        if !c.mode.is_empty() {
            counter_add(&self.samples.with_label_values(&[c.mode]), c.samples);
            self.mode.with_label_values(&[c.mode]).set(1);
        }
        counter_add(&self.records_lost, c.records_lost);
        counter_add(&self.samples_lost, c.samples_lost);
        counter_add(
            &self
                .dropped
                .with_label_values(&["reader_channel", "queue_full"]),
            c.events_dropped,
        );
        for &(reason, n) in &c.not_routed {
            counter_add(&self.dropped.with_label_values(&["router", reason]), n);
        }
        counter_add(&self.parse_errors, c.parse_errors);
        self.lbr.set(i64::from(c.branch_stack));
        self.memory.set(resident_bytes() as i64);
        let held = symbolizer::decoded_bytes();
        for (cache, bytes) in [
            ("code", held.code),
            ("probes", held.probes),
            ("line_tables", held.line_tables),
        ] {
            self.decoded
                .with_label_values(&[cache])
                .set(bytes.min(i64::MAX as u64) as i64);
        }
    }

    /// Sets the per-binary gauges from the store's list (most samples first).
    pub fn observe_store(&self, list: &[ProfileSummary]) {
        self.binaries.set(list.len() as i64);
        self.binary_samples.reset();
        for p in list.iter().take(TOP_BINARIES) {
            self.binary_samples
                .with_label_values(&[p.build_id.as_str()])
                .set(p.samples.min(i64::MAX as u64) as i64);
        }
        self.over_budget
            .set(list.len().saturating_sub(TOP_BINARIES) as i64);
        let mut by_reason: std::collections::BTreeMap<&str, u64> = Default::default();
        for p in list {
            // Only the daemon's own reasons become labels (the files could say anything).
            for (reason, n) in &p.unwind_errors {
                let Some(r) = UNWIND_ERROR_REASONS.iter().find(|r| **r == reason.as_str()) else {
                    continue;
                };
                let sum = by_reason.entry(r).or_default();
                *sum = sum.saturating_add(*n);
            }
        }
        for (reason, n) in by_reason {
            counter_add(&self.unwind_errors.with_label_values(&[reason]), n);
        }
        let mut by_outcome: std::collections::BTreeMap<&str, u64> = Default::default();
        for p in list {
            for (outcome, n) in &p.stack_repairs {
                let Some(o) = STACK_REPAIR_OUTCOMES
                    .iter()
                    .find(|o| **o == outcome.as_str())
                else {
                    continue;
                };
                let sum = by_outcome.entry(o).or_default();
                *sum = sum.saturating_add(*n);
            }
        }
        for (outcome, n) in by_outcome {
            counter_add(&self.stack_repairs.with_label_values(&[outcome]), n);
        }
    }

    /// Sets the quality gauges (replacing the previous set).
    pub fn observe_quality(&self, quality: &[(String, ProfileQuality, DensityGuidance)]) {
        self.density.reset();
        self.branch_ratio.reset();
        self.stale_share.reset();
        self.more_sampling.reset();
        for (id, q, g) in quality.iter().take(QUALITY_BINARIES) {
            if let Some(more) = g.more_secs {
                self.more_sampling
                    .with_label_values(&[id.as_str()])
                    .set(more);
            }
            self.density
                .with_label_values(&[id.as_str()])
                .set(q.density);
            self.branch_ratio
                .with_label_values(&[id.as_str()])
                .set(q.taken_branches_per_text_byte);
            self.stale_share
                .with_label_values(&[id.as_str()])
                .set(q.stale_sample_share);
        }
    }

    /// Records one HTTP request (`route` is the matched route template, never the raw URI).
    pub fn observe_http(&self, route: &str, method: &str, status: u16, took: Duration) {
        self.http_requests
            .with_label_values(&[route, method, &status.to_string()])
            .inc();
        self.http_duration
            .with_label_values(&[route])
            .observe(took.as_secs_f64());
    }

    /// The exposition text (format 0.0.4).
    pub fn encode(&self) -> String {
        let mut buf = Vec::new();
        // Encoding into a Vec only fails on invalid families, which `new` rules out.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Resident set size from `/proc/self/statm` (pages × page size), 0 when unreadable.
fn resident_bytes() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_follow_the_daemon_and_names_carry_units() {
        let m = Metrics::new();
        let mut c = DaemonCounters {
            mode: "cpu_clock",
            samples: 10,
            records_lost: 2,
            not_routed: vec![("filtered", 4), ("unmapped", 0)],
            ..DaemonCounters::default()
        };
        m.observe_daemon(&c);
        c.samples = 25;
        c.not_routed[0].1 = 7;
        m.observe_daemon(&c);
        m.observe_http("/healthz", "GET", 200, Duration::from_millis(2));
        let text = m.encode();
        assert!(
            text.contains("pgo_agent_samples_total{mode=\"cpu_clock\"} 25\n"),
            "{text}"
        );
        assert!(text.contains("pgo_agent_records_lost_total 2\n"), "{text}");
        assert!(
            text.contains(
                "pgo_agent_events_dropped_total{reason=\"filtered\",stage=\"router\"} 7\n"
            ),
            "{text}"
        );
        assert!(text
            .contains("pgo_agent_events_dropped_total{reason=\"unmapped\",stage=\"router\"} 0\n"));
        assert!(text.contains("pgo_agent_sampling_mode_info{mode=\"cpu_clock\"} 1\n"));
        assert!(text.contains("pgo_agent_branch_stack_available 0\n"));
        assert!(text.contains(
            "pgo_agent_http_requests_total{method=\"GET\",route=\"/healthz\",status=\"200\"} 1\n"
        ));
        assert!(text.contains("# TYPE pgo_agent_flush_duration_seconds histogram\n"));
        assert!(text.contains("# TYPE pgo_agent_sink_insert_duration_seconds histogram\n"));
        assert!(text.contains("# TYPE pgo_agent_sink_windows_dropped_total counter\n"));
        assert!(text.contains("# TYPE pgo_agent_state_flush_failures_total counter\n"));
        for line in text.lines().filter(|l| l.starts_with("# TYPE")) {
            let name = line.split_whitespace().nth(2).unwrap();
            assert!(name.starts_with("pgo_agent_"), "{name}");
            if line.ends_with(" counter") {
                assert!(name.ends_with("_total"), "{name}");
            }
        }
    }

    #[test]
    fn unwind_errors_sum_over_binaries_and_ignore_unknown_reasons() {
        use crate::store::{Symbolization, WindowRange};
        let summary = |id: &str, errors: &[(&str, u64)]| ProfileSummary {
            build_id: id.into(),
            binary_paths: vec![],
            mode: "cpu_clock".into(),
            kind: "flat".into(),
            samples: 1,
            window: WindowRange {
                retained_secs: 0,
                last_flush_unix_secs: 0,
            },
            has_pseudo_probes: None,
            symbolization: Symbolization::BinaryNotFound,
            names: None,
            unwind_errors: errors.iter().map(|(r, n)| (r.to_string(), *n)).collect(),
            density: None,
            stack_repairs: [("repaired", 5), ("unrepairable", 1), ("made_up", 2)]
                .iter()
                .map(|(o, n)| (o.to_string(), *n))
                .collect(),
            freshness: Default::default(),
        };
        let m = Metrics::new();
        m.observe_store(&[
            summary("aa", &[("bogus_trace", 3), ("made_up", 9)]),
            summary("bb", &[("bogus_trace", 4), ("ip_not_code", 1)]),
        ]);
        let text = m.encode();
        assert!(
            text.contains("pgo_agent_unwind_errors_total{reason=\"bogus_trace\"} 7\n"),
            "{text}"
        );
        assert!(text.contains("pgo_agent_unwind_errors_total{reason=\"ip_not_code\"} 1\n"));
        assert!(text.contains("pgo_agent_stack_repairs_total{outcome=\"repaired\"} 10\n"));
        assert!(text.contains("pgo_agent_stack_repairs_total{outcome=\"unrepairable\"} 2\n"));
        assert!(!text.contains("made_up"), "{text}");
    }
}

//! `pgo-agent run`: the daemon. Wiring only:
//!
//! ```text
//! per-CPU reader threads ──try_send──▶ router ──send──▶ workers (one BinaryShard per build id)
//!   (collector::live)     EventBatch   (process table,   SampleGroup   windows; flush → state dir
//!                                       filter, binary)
//! ```
//!
//! Start: load the config, open the sampling plan (the startup report says which mode and
//! why), enable the events, scan /proc for running processes, spawn the threads. Every
//! `flush_interval_secs` the workers write each changed aggregate; between flushes, HTTP
//! serves what they hold now ([`live`]). SIGINT/SIGTERM (or
//! `--duration-secs`): disable the events, drain the rings, final flush, exit. SIGHUP:
//! re-read the config file's `[filters]`.

pub mod debug_fetches;
pub mod filters;
pub mod heap_spool;
pub mod http;
pub mod live;
pub mod persist;
pub mod process_table;
pub mod router;
pub mod worker;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use collector::live::proc_scan::scan_processes;
use collector::live::{
    run_reader_recycling, LiveSession, PlanSettings, ReaderCounts, ReaderSettings, ReaderStats,
    SampleRate, SamplingMode,
};
use crossbeam_channel::{bounded, Receiver, Sender};
use symbolizer::debug_file::DebugFileFinder;
use unwinder::shard::ShardInput;
use unwinder::window::WindowSettings;
use unwinder::{PerfContent, UnwindOptions};

use crate::config::Config;
use crate::error_chain::ErrorChain;
use filters::ProcessFilter;
use router::{RouteBy, Router, RouterStats};
use worker::{BinarySummary, WorkItem, Worker, WorkerSettings, WorkerStats};

/// What `pgo-agent run --help` adds below the flags.
const RUN_AFTER_HELP: &str = "\
Needs root, or the systemd unit's capabilities (CAP_PERFMON, CAP_SYS_PTRACE,
CAP_DAC_READ_SEARCH, CAP_CHECKPOINT_RESTORE), to sample every process. Takes the first
sampling mode of [sampling] modes the CPU offers (intel_lbr, amd_branch, cpu_clock) and
says why it ruled out the others.

Defaults (the embedded config, `systemd/pgo-agent.toml`): state dir /var/lib/pgo-agent,
flush every 60 s, API on http://127.0.0.1:9464, memory budget 256 MiB, debug files looked
up in /usr/lib/debug.

API: GET /api/v1/profiles (the list, with how each binary is symbolized),
/api/v1/profiles/BUILD_ID?format=extbinary|text|unsymbolized|pprof,
/api/v1/profiles/BUILD_ID/flamegraph.svg, /metrics (Prometheus), /healthz.

Signals: SIGTERM or SIGINT flush and stop (a second one exits at once, status 130); SIGHUP
reloads the [filters]. Exit status: 0, or 1 when the last flush could not write an
aggregate.

Examples:
  pgo-agent run                                   # the embedded default config
  pgo-agent run --state-dir /tmp/pgo --listen 127.0.0.1:9500 --duration-secs 60
  curl -s http://127.0.0.1:9464/api/v1/profiles
  curl -so app.prof 'http://127.0.0.1:9464/api/v1/profiles/BUILD_ID?format=extbinary'

Guides: GUIDE.md (the daemon, the API), docs/operations.md (systemd, budgets, metrics).";

/// `pgo-agent run` arguments.
#[derive(Debug, Clone, Args)]
#[command(after_help = RUN_AFTER_HELP)]
pub struct RunArgs {
    /// TOML config file (over the embedded default, `systemd/pgo-agent.toml`).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// State directory for the aggregates (overrides `output.state_dir`).
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Stop after this many seconds (tests and demos); default: until SIGINT/SIGTERM.
    #[arg(long)]
    pub duration_secs: Option<u64>,
    /// HTTP listen address, IP:PORT (overrides `output.listen_address`).
    // `run` serves on `output.listen_address` when this is not given; `run_daemon` called
    // directly (tests) serves only when it is set.
    #[arg(long, value_name = "IP:PORT")]
    pub listen: Option<String>,
}

/// Stop/reload requests for [`run_daemon`] (signals set them in `run`; tests directly).
#[derive(Debug, Default)]
pub struct RunControl {
    /// Stop: final flush, then return.
    pub stop: AtomicBool,
    /// Re-read the filters from the config file.
    pub reload: AtomicBool,
    /// Set once the start-up /proc scan is in the process table.
    pub scanned: AtomicBool,
    /// While set, the start waits right after the /proc scan (tests use it to start a
    /// process at that moment).
    pub hold_after_scan: AtomicBool,
}

/// What a run did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunSummary {
    /// The sampling mode used.
    pub mode: &'static str,
    /// The startup report lines.
    pub report: Vec<String>,
    /// Reader counters.
    #[serde(skip)]
    pub readers: ReaderCounts,
    /// Router counters.
    pub router: RouterStats,
    /// Worker counters, per worker.
    pub workers: Vec<WorkerStats>,
    /// One entry per binary.
    pub binaries: Vec<BinarySummary>,
}

/// Runs `pgo-agent run`.
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let config = match &args.config {
        Some(p) => Config::load(p)?,
        None => Config::embedded(),
    };
    let mut args = args;
    if args.listen.is_none() {
        args.listen = Some(config.output.listen_address.clone());
    }
    crate::signals::install()?;
    let control = Arc::new(RunControl::default());
    let watcher = {
        let control = control.clone();
        std::thread::spawn(move || loop {
            match crate::signals::pending() {
                Some(crate::signals::Signal::Shutdown) => {
                    control.stop.store(true, Ordering::SeqCst);
                    return;
                }
                Some(crate::signals::Signal::Reload) => {
                    control.reload.store(true, Ordering::SeqCst)
                }
                None => {}
            }
            if control.stop.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        })
    };
    let summary = run_daemon(&config, &args, &control)?;
    control.stop.store(true, Ordering::SeqCst);
    let _ = watcher.join();
    let unwritten: u64 = summary
        .workers
        .iter()
        .map(|w| w.unwritten_by_last_flush)
        .sum();
    tracing::info!(
        "stopped; {} samples read, {} lost (ring full), {} dropped (queue full); {} binaries written",
        summary.readers.samples,
        summary.readers.lost_events,
        summary.readers.events_dropped,
        (summary.binaries.len() as u64).saturating_sub(unwritten)
    );
    if unwritten > 0 {
        let state_dir = state_dir_of(&config, &args);
        tracing::error!(
            "the last flush could not write {unwritten} binaries' aggregates to {}: what they counted since their last written flush is lost (the flush errors above say why)",
            state_dir.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The state directory: `--state-dir`, else the config's `output.state_dir`.
fn state_dir_of(config: &Config, args: &RunArgs) -> PathBuf {
    args.state_dir
        .clone()
        .unwrap_or_else(|| config.output.state_dir.clone())
}

fn plan_settings(c: &Config) -> PlanSettings {
    PlanSettings {
        allowed: c.sampling.modes.clone(),
        branch_period: c.sampling.branch_period_events,
        cpu_clock_rate: SampleRate::Frequency(c.sampling.cpu_clock_frequency_hz),
        max_stack: c.sampling.max_stack_frames,
        wakeup_watermark: wakeup_watermark(&c.collector),
        mmap_build_ids: c.collector.mmap_build_ids,
    }
}

/// The bytes of `ring_wakeup_percent` of a ring.
fn wakeup_watermark(c: &crate::config::CollectorConfig) -> u32 {
    let ring_bytes = c.ring_buffer_pages as u64 * collector::live::ring::page_size() as u64;
    (ring_bytes * u64::from(c.ring_wakeup_percent) / 100).min(u64::from(u32::MAX)) as u32
}

/// Runs the daemon until `control.stop` or `args.duration_secs`; returns what it did.
pub fn run_daemon(
    config: &Config,
    args: &RunArgs,
    control: &RunControl,
) -> anyhow::Result<RunSummary> {
    crate::logging::init(&config.log.level)?;
    let started = Instant::now();
    // The window clock counts Unix seconds (`start` is an Instant at the Unix epoch), so
    // windows restored from the state directory keep their start times across restarts.
    let start = persist::unix_epoch_instant(started);
    let state_dir = state_dir_of(config, args);
    std::fs::create_dir_all(&state_dir)
        .with_context(|| format!("creating state dir {}", state_dir.display()))?;

    // The API's socket first: an address that cannot be served stops the daemon before
    // it samples anything.
    let listener = match &args.listen {
        Some(listen) => Some(http::bind(listen, config)?),
        None => None,
    };
    let mut session = open_session(config)?;
    let side_tasks = SideTasks::start(config, &state_dir, start)?;
    let pipeline = Pipeline::start(
        config,
        listener,
        control,
        &mut session,
        &state_dir,
        start,
        &side_tasks,
    )?;
    tracing::info!("sampling {} CPUs", session.streams.len());

    supervise(
        config,
        args,
        control,
        &session,
        &pipeline.ctl_tx,
        &pipeline.stats,
        start,
        started,
    );

    // Shutdown: stop sampling, drain the rings, final flush.
    session.disable();
    let stats = pipeline.stats.clone();
    let (router, workers, mut binaries) = pipeline.stop()?;
    side_tasks.stop();
    binaries.sort_by_key(|b| std::cmp::Reverse(b.samples));
    Ok(RunSummary {
        mode: session.plan.mode.name(),
        report: session.report.clone(),
        readers: stats.snapshot(),
        router,
        workers,
        binaries,
    })
}

/// The threads beside the sampling pipeline: the MemProf spool (`[heap] spool_dir`) and the
/// ClickHouse sink (`[sink.clickhouse]`), each optional.
struct SideTasks {
    heap_stop: Arc<AtomicBool>,
    heap_spool: Option<std::thread::JoinHandle<()>>,
    sink: Option<(
        crate::sink::SinkHandle,
        std::thread::JoinHandle<crate::sink::SinkStats>,
    )>,
}

impl SideTasks {
    fn start(config: &Config, state_dir: &Path, start: Instant) -> anyhow::Result<SideTasks> {
        let heap_stop = Arc::new(AtomicBool::new(false));
        let heap_spool = match heap_spool::HeapSpoolSettings::from_config(config, state_dir) {
            Some(s) => Some(heap_spool::spawn(s, heap_stop.clone())?),
            None => None,
        };
        // Workers hand the sink each closed window.
        let sink = crate::sink::start(&config.sink, state_dir, start)?;
        Ok(SideTasks {
            heap_stop,
            heap_spool,
            sink,
        })
    }

    /// The sink's handle for the workers, when there is a sink.
    fn sink_handle(&self) -> Option<crate::sink::SinkHandle> {
        self.sink.as_ref().map(|s| s.0.clone())
    }

    /// Stops the spool and the sink (after the workers' last windows reached it).
    fn stop(self) {
        self.heap_stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.heap_spool {
            let _ = h.join();
        }
        if let Some((handle, thread)) = self.sink {
            drop(handle);
            if let Ok(s) = thread.join() {
                tracing::info!(
                    "sink: {} windows delivered, {} left in the spool, {} dropped",
                    s.windows_delivered,
                    s.windows_left,
                    s.windows_dropped
                );
            }
        }
    }
}

/// The sampling pipeline's threads: per-CPU readers → router → workers, and the HTTP
/// server reading from the workers.
struct Pipeline {
    stop_readers: Arc<AtomicBool>,
    reader_handles: Vec<std::thread::JoinHandle<()>>,
    stats: Arc<ReaderStats>,
    ctl_tx: Sender<RouterCtl>,
    router_handle: std::thread::JoinHandle<RouterStats>,
    http_server: Option<http::HttpServer>,
    worker_handles: Vec<std::thread::JoinHandle<(Vec<BinarySummary>, WorkerStats)>>,
}

impl Pipeline {
    /// Restores the workers' states, scans the running processes into the router, and
    /// starts the workers, the router, the HTTP server (on `listener`) and the readers.
    /// Window times count from `start`.
    fn start(
        config: &Config,
        listener: Option<http::BoundListener>,
        control: &RunControl,
        session: &mut LiveSession,
        state_dir: &Path,
        start: Instant,
        side_tasks: &SideTasks,
    ) -> anyhow::Result<Pipeline> {
        let mode = session.plan.mode;
        let (route_by, input) = match mode {
            SamplingMode::CpuClock => (
                RouteBy::LeadingIp,
                ShardInput::LeadingIp {
                    has_callchain: true,
                },
            ),
            _ => (RouteBy::BranchStack, ShardInput::Lbr(PerfContent::LbrStack)),
        };
        let workers_n = config.aggregation.unwind_workers;
        let restored = restore_states(state_dir, input, workers_n);
        let router = scan_into_router(config, session, route_by, control, state_dir)?;

        // Fed samples go back to the readers through the recycler (no allocation per
        // sample, no cross-thread free).
        let recycler = collector::live::SampleRecycler::default();
        // One debuginfod client (one cache, one download at a time) for the HTTP store,
        // which waits for a fetch, and the workers, which never do.
        let debuginfod = config.output.debuginfod_client(state_dir).map(Arc::new);
        let finder = || DebugFileFinder::new(config.output.debug_dirs.clone());
        let debug_files = match &debuginfod {
            Some(client) => finder().with_remote(client.clone()),
            None => finder(),
        };
        let debug_fetches = match debuginfod {
            Some(client) => Some(debug_fetches::BackgroundFetches::start(client)?),
            None => None,
        };
        // Fresh reads: the HTTP store asks the workers what they hold now.
        let (query_txs, query_rxs) = live::query_channels(workers_n);
        let settings = worker_settings(config, input, state_dir, finder(), debug_fetches);
        let workers = spawn_workers(
            config,
            settings,
            restored,
            query_rxs,
            side_tasks.sink_handle(),
            &recycler,
        )?;

        let (batch_tx, batch_rx) = bounded(config.collector.channel_capacity_batches);
        let (ctl_tx, ctl_rx) = bounded::<RouterCtl>(16);
        let counters = http::LiveCounters::default();
        let router_handle = {
            let (worker_txs, routing) = (workers.txs.clone(), counters.routing.clone());
            std::thread::Builder::new()
                .name("pgo-router".into())
                .spawn(move || router_loop(router, batch_rx, ctl_rx, worker_txs, start, &routing))?
        };
        let WorkerThreads {
            txs: worker_txs,
            handles: worker_handles,
        } = workers;
        drop(worker_txs);

        let stats = counters.readers.clone();
        let http_server = match listener {
            Some(listener) => Some(http::start(
                listener,
                config,
                state_dir.to_path_buf(),
                debug_files,
                mode,
                counters,
                Some(live::WorkerQueries::new(query_txs, live::QUERY_TIMEOUT)),
            )?),
            None => None,
        };
        let stop_readers = Arc::new(AtomicBool::new(false));
        let reader_handles =
            spawn_readers(config, session, batch_tx, &stats, &stop_readers, &recycler)?;
        Ok(Pipeline {
            stop_readers,
            reader_handles,
            stats,
            ctl_tx,
            router_handle,
            http_server,
            worker_handles,
        })
    }

    /// Drains the readers (the events are disabled), then the router (its last batches and
    /// a final flush), stops the HTTP server and joins the workers: the router's and each
    /// worker's counters and the binaries written.
    fn stop(self) -> anyhow::Result<(RouterStats, Vec<WorkerStats>, Vec<BinarySummary>)> {
        self.stop_readers.store(true, Ordering::Release);
        for h in self.reader_handles {
            let _ = h.join();
        }
        drop(self.ctl_tx);
        let router_stats = self
            .router_handle
            .join()
            .map_err(|_| anyhow::anyhow!("router thread panicked"))?;
        if let Some(server) = self.http_server {
            server.stop();
        }
        let mut binaries = Vec::new();
        let mut worker_stats = Vec::new();
        for h in self.worker_handles {
            let (b, s) = h
                .join()
                .map_err(|_| anyhow::anyhow!("worker thread panicked"))?;
            binaries.extend(b);
            worker_stats.push(s);
        }
        Ok((router_stats, worker_stats, binaries))
    }
}

/// The workers' settings from the config.
fn worker_settings(
    config: &Config,
    input: ShardInput,
    state_dir: &Path,
    debug_dirs_only: DebugFileFinder,
    debug_fetches: Option<Arc<debug_fetches::BackgroundFetches>>,
) -> WorkerSettings {
    let a = &config.aggregation;
    WorkerSettings {
        input,
        options: UnwindOptions {
            stack_repair: a.stack_repair,
            ..UnwindOptions::default()
        },
        windows: WindowSettings {
            window_secs: a.window_secs,
            retained_windows: a.retained_windows,
        },
        max_samples_per_window: a.max_samples_per_binary_per_window,
        memory_budget_bytes: a.memory_budget_bytes / a.unwind_workers as u64,
        decoded_budget_bytes: a.decoded_budget_bytes / a.unwind_workers as u64,
        state_dir: state_dir.to_path_buf(),
        coalesce_samples: worker::COALESCE_SAMPLES,
        debug_files: match &debug_fetches {
            Some(fetches) => debug_dirs_only.with_remote(fetches.clone()),
            None => debug_dirs_only,
        },
        debug_fetches,
    }
}

fn open_session(config: &Config) -> anyhow::Result<LiveSession> {
    let cpus = collector::live::online_cpus();
    let session = LiveSession::open(
        &plan_settings(config),
        &cpus,
        config.collector.ring_buffer_pages,
    )
    .map_err(|e| {
        // The privilege hint only where the kernel refused for want of it (a mode this
        // CPU lacks is ruled out by name in the message).
        if e.permission_denied() {
            anyhow::Error::new(e).context(
                "opening perf events (needs root, or CAP_PERFMON and the unit's other \
                 capabilities: docs/operations.md)",
            )
        } else {
            anyhow::Error::new(e).context(format!(
                "opening perf events ([sampling] modes = {:?})",
                config
                    .sampling
                    .modes
                    .iter()
                    .map(|m| m.name())
                    .collect::<Vec<_>>()
            ))
        }
    })?;
    for line in &session.report {
        tracing::info!("{line}");
    }
    Ok(session)
}

/// Restart safety: the state files of the state directory, one list per worker (each
/// worker takes the build ids it owns).
fn restore_states(
    state_dir: &Path,
    input: ShardInput,
    workers_n: usize,
) -> Vec<Vec<persist::PersistedState>> {
    let restored = persist::restore_dir(state_dir, persist::mode_label(input));
    tracing::info!(
        "state: restored {} binaries ({} samples); {} files set aside; {} partial writes removed",
        restored.states.len(),
        restored.states.iter().map(|s| s.samples()).sum::<u64>(),
        restored.set_aside.len(),
        restored.temporaries_removed
    );
    let mut per_worker: Vec<Vec<persist::PersistedState>> = vec![Vec::new(); workers_n];
    for s in restored.states {
        per_worker[router::worker_for(&s.build_id, workers_n)].push(s);
    }
    per_worker
}

/// Enables the events, then puts every running process (a `/proc` scan) in a new router
/// (`state_dir` only for the log line).
fn scan_into_router(
    config: &Config,
    session: &mut LiveSession,
    route_by: RouteBy,
    control: &RunControl,
    state_dir: &Path,
) -> anyhow::Result<Router> {
    let self_pid = (!config.collector.sample_self).then(std::process::id);
    let mut router = Router::new(
        Path::new("/proc"),
        ProcessFilter::new(config.filters.clone()),
        route_by,
        config.aggregation.unwind_workers,
        self_pid,
    );
    // Enabled before the scan, so every process is in one of the two: a process that
    // forks or execs after the scan has its FORK/COMM/MMAP2 records in the rings (the
    // rings keep them until the readers start). Enabled after it, a child scanned
    // between its fork and its exec, which then exec'd before the enabling, kept its
    // parent's name and mappings with no COMM record to correct them: a comm filter
    // rejected it for its whole life.
    session.enable().context("enabling perf events")?;
    let scan = scan_processes(Path::new("/proc"), self_pid);
    router.apply_all(&scan.events);
    control.scanned.store(true, Ordering::SeqCst);
    while control.hold_after_scan.load(Ordering::SeqCst) && !control.stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(5));
    }
    tracing::info!(
        "/proc scan: {} processes ({} unreadable); state dir {}; flush every {} s",
        scan.processes,
        scan.unreadable,
        state_dir.display(),
        config.output.flush_interval_secs
    );
    Ok(router)
}

/// The worker threads and their queues.
struct WorkerThreads {
    txs: Vec<Sender<WorkItem>>,
    handles: Vec<std::thread::JoinHandle<(Vec<BinarySummary>, WorkerStats)>>,
}

/// Starts one worker thread per `[aggregation] unwind_workers`, each with its restored
/// states, its query channel and the sink.
fn spawn_workers(
    config: &Config,
    settings: WorkerSettings,
    restored: Vec<Vec<persist::PersistedState>>,
    query_rxs: Vec<Receiver<live::Query>>,
    sink: Option<crate::sink::SinkHandle>,
    recycler: &collector::live::SampleRecycler,
) -> anyhow::Result<WorkerThreads> {
    let mut threads = WorkerThreads {
        txs: Vec::new(),
        handles: Vec::new(),
    };
    let mut restored = restored.into_iter();
    for queries in query_rxs {
        let (tx, rx) = bounded::<WorkItem>(1024);
        let states = restored.next().unwrap_or_default();
        let settings = settings.clone();
        let sink = sink.clone();
        let max_binary_bytes = config.aggregation.max_binary_bytes;
        let recycler = recycler.clone();
        threads.txs.push(tx);
        threads.handles.push(
            std::thread::Builder::new()
                .name("pgo-worker".into())
                .spawn(move || {
                    let mut w = Worker::new(settings).with_recycler(recycler);
                    w.set_max_binary_bytes(max_binary_bytes);
                    w.restore(states, persist::unix_secs());
                    if let Some(s) = sink {
                        w = w.with_sink(s);
                    }
                    live::serve(&mut w, rx, queries);
                    w.hand_windows(u64::MAX, true);
                    (w.summaries(), w.stats().clone())
                })?,
        );
    }
    Ok(threads)
}

/// Starts one reader thread per CPU ring, each sending batches to the router.
fn spawn_readers(
    config: &Config,
    session: &mut LiveSession,
    batch_tx: Sender<collector::live::EventBatch>,
    stats: &Arc<ReaderStats>,
    stop: &Arc<AtomicBool>,
    recycler: &collector::live::SampleRecycler,
) -> anyhow::Result<Vec<std::thread::JoinHandle<()>>> {
    let reader_settings = ReaderSettings {
        batch_events: config.collector.reader_batch_events,
        poll_interval: Duration::from_millis(config.collector.reader_poll_interval_ms.max(1)),
        ..ReaderSettings::default()
    };
    let mut handles = Vec::new();
    for s in session.streams.iter_mut() {
        let ring = s.ring.take().context("ring already taken")?;
        let (cpu, decoder, tx, stats, stop, recycler) = (
            s.cpu,
            s.decoder,
            batch_tx.clone(),
            stats.clone(),
            stop.clone(),
            recycler.clone(),
        );
        handles.push(
            std::thread::Builder::new()
                .name(format!("pgo-reader-{cpu}"))
                .spawn(move || {
                    run_reader_recycling(
                        cpu,
                        ring,
                        decoder,
                        tx,
                        stats,
                        stop,
                        reader_settings,
                        recycler,
                    )
                })?,
        );
    }
    Ok(handles)
}

/// The main thread while sampling: flushes every `flush_interval_secs`, re-reads the
/// filters on SIGHUP, tells systemd it is alive; returns on stop or at the deadline.
#[allow(clippy::too_many_arguments)]
fn supervise(
    config: &Config,
    args: &RunArgs,
    control: &RunControl,
    session: &LiveSession,
    ctl_tx: &Sender<RouterCtl>,
    stats: &Arc<ReaderStats>,
    start: Instant,
    started: Instant,
) {
    let now_secs = || start.elapsed().as_secs();
    let flush_every = Duration::from_secs(config.output.flush_interval_secs);
    let mut next_flush = Instant::now() + flush_every;
    let deadline = args.duration_secs.map(|d| started + Duration::from_secs(d));
    let mut notifier = crate::notify::Notifier::from_env();
    notifier.ready(&format!(
        "sampling {} CPUs in {} mode",
        session.streams.len(),
        session.plan.mode.name()
    ));
    loop {
        if control.stop.load(Ordering::SeqCst) || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if control.reload.swap(false, Ordering::SeqCst) {
            match &args.config {
                Some(p) => match Config::load(p) {
                    Ok(c) => {
                        let _ = ctl_tx.send(RouterCtl::Reload(ProcessFilter::new(c.filters)));
                        tracing::info!("SIGHUP: filters reloaded from {}", p.display());
                    }
                    Err(e) => tracing::warn!(
                        "SIGHUP: keeping the old filters: {chain}",
                        chain = ErrorChain(e.as_ref())
                    ),
                },
                None => tracing::warn!("SIGHUP: no --config file; filters unchanged"),
            }
        }
        if Instant::now() >= next_flush {
            next_flush += flush_every;
            let _ = ctl_tx.send(RouterCtl::Flush(now_secs()));
            let r = stats.snapshot();
            tracing::info!(
                "flush at {} s: {} samples, {} lost records ({} events), {} batches dropped",
                now_secs(),
                r.samples,
                r.lost_records,
                r.lost_events,
                r.batches_dropped
            );
        }
        notifier.tick(Instant::now());
        std::thread::sleep(Duration::from_millis(50));
    }
    notifier.stopping();
}

enum RouterCtl {
    Flush(u64),
    Reload(ProcessFilter),
}

fn router_loop(
    mut router: Router,
    batches: Receiver<collector::live::EventBatch>,
    ctl: Receiver<RouterCtl>,
    workers: Vec<Sender<WorkItem>>,
    start: Instant,
    published: &Mutex<RouterStats>,
) -> RouterStats {
    let flush_all = |now_secs| {
        for w in &workers {
            let _ = w.send(WorkItem::Flush { now_secs });
        }
    };
    let mut ctl_open = true;
    loop {
        crossbeam_channel::select! {
            recv(batches) -> b => match b {
                Ok(b) => {
                    for (i, g) in router.route(b.events, start.elapsed().as_secs()) {
                        let _ = workers[i].send(WorkItem::Samples(g));
                    }
                    // For /metrics: one uncontended lock per batch.
                    published
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .clone_from(router.stats());
                }
                Err(_) => break,
            },
            recv(if ctl_open { ctl.clone() } else { crossbeam_channel::never() }) -> c => match c {
                Ok(RouterCtl::Flush(now)) => {
                    router.collect_exited();
                    flush_all(now);
                }
                Ok(RouterCtl::Reload(f)) => router.reload(f),
                Err(_) => ctl_open = false,
            },
        }
    }
    flush_all(start.elapsed().as_secs());
    router.stats().clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `run --help` states the embedded config's defaults as they are.
    #[test]
    fn the_help_states_the_embedded_defaults() {
        let c = Config::embedded();
        let help = RUN_AFTER_HELP.replace('\n', " ");
        assert!(help.contains(&format!("state dir {}", c.output.state_dir.display())));
        assert!(help.contains(&format!("flush every {} s", c.output.flush_interval_secs)));
        assert!(help.contains(&format!("http://{}", c.output.listen_address)));
        assert!(help.contains(&format!(
            "memory budget {} MiB",
            c.aggregation.memory_budget_bytes >> 20
        )));
        assert!(help.contains(&format!(
            "looked up in {}",
            c.output.debug_dirs[0].display()
        )));
    }

    #[test]
    fn the_wakeup_watermark_is_the_configured_share_of_a_ring() {
        let mut c = Config::embedded();
        let page = collector::live::ring::page_size() as u32;
        // 64 pages, 25 %.
        assert_eq!(plan_settings(&c).wakeup_watermark, 16 * page);
        c.collector.ring_wakeup_percent = 0;
        assert_eq!(plan_settings(&c).wakeup_watermark, 0);
        c.collector.ring_buffer_pages = 1;
        c.collector.ring_wakeup_percent = 50;
        assert_eq!(plan_settings(&c).wakeup_watermark, page / 2);
    }

    #[test]
    fn mmap_build_ids_are_on_unless_the_config_says_not() {
        let mut c = Config::embedded();
        assert!(plan_settings(&c).mmap_build_ids);
        c.collector.mmap_build_ids = false;
        assert!(!plan_settings(&c).mmap_build_ids);
        // A config without the key keeps the default.
        let text =
            include_str!("../../../systemd/pgo-agent.toml").replace("mmap_build_ids = true\n", "");
        assert!(!text.contains("mmap_build_ids"));
        let parsed = Config::parse(&text, std::path::Path::new("test.toml")).unwrap();
        assert!(parsed.collector.mmap_build_ids);
    }
}

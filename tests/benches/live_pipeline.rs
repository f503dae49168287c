//! Throughput of the daemon's LBR hot path (issue 4): parse + route + unwind + aggregate of
//! replayed 32-entry LBR samples, single-threaded, in samples per second of thread CPU time (per core).
//!
//! The samples are real: corpus programs recorded with the software LBR recorder
//! (`collector::recorder::record`, 32 entries per sample, frame-pointer call chains). Their
//! records are written once in the kernel's ring layout; the timed loop then replays them
//! through exactly what the daemon runs: [`RingBuffer::drain`] + [`RecordDecoder`] (the
//! record parser `convert` uses), batches of `reader_batch_events`, [`Router::route`]
//! (process table, binary lookup, grouping) and [`Worker::handle`] ([`BinaryShard::feed`]:
//! the virtual unwinder and the windowed counters). Copying the records into the ring (the
//! kernel's work) is not timed. As in the daemon, the worker hands fed samples back to the
//! reader through a [`SampleRecycler`] (the decoder parses into them), and the router stops
//! routing to a binary its worker found without decodable code (the stripped ld.so and
//! libc these recordings also touch); the `no-code` column counts those skipped routings.
//!
//! ```text
//! cargo bench -p e2e --bench live_pipeline                      # default programs
//! cargo bench -p e2e --bench live_pipeline -- recursion interp  # chosen programs
//! PGO_BENCH_SAMPLES=3000000 cargo bench -p e2e --bench live_pipeline
//! ```
//!
//! Target (issue 4): at least 1,000,000 samples/s/core.
//!
//! [`BinaryShard::feed`]: unwinder::shard::BinaryShard::feed

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;
use std::time::Duration;

use collector::live::{EventBatch, ReaderStats, RecordDecoder, RingBuffer, SampleRecycler};
use collector::record::{
    branch_sample_type as bst, sample_type as st, RecordWriter, SampleId, SampleLayout,
    SampleRecord,
};
use collector::{PerfEvent, SideBandEvent};
use daemon::run::filters::ProcessFilter;
use daemon::run::router::{RouteBy, Router};
use daemon::run::worker::{WorkItem, Worker, WorkerSettings};
use e2e::corpus::{self, Variant};
use unwinder::shard::ShardInput;
use unwinder::PerfContent;

/// Programs replayed when none are named (the probe builds: CSSPGO's main case).
const DEFAULT_PROGRAMS: &[&str] = &["loop_count", "recursion", "virtual_calls", "interp"];
/// The daemon's default `reader_batch_events`.
const BATCH_EVENTS: usize = 512;
/// The daemon's default ring: 64 data pages.
const RING_PAGES: usize = 64;

/// The attr layout of the daemon's intel_lbr mode (see `collector::live::attr`).
fn lbr_layout() -> SampleLayout {
    SampleLayout::new(
        st::IDENTIFIER
            | st::IP
            | st::TID
            | st::TIME
            | st::CPU
            | st::PERIOD
            | st::CALLCHAIN
            | st::BRANCH_STACK,
        bst::USER | bst::ANY | bst::HW_INDEX,
        0,
        true,
    )
}

/// The recording's events as kernel records.
fn encode(events: &[PerfEvent], layout: SampleLayout) -> Vec<u8> {
    let w = RecordWriter::new(layout);
    let mut bytes = Vec::new();
    let id = SampleId::default();
    for e in events {
        let r = match e {
            PerfEvent::Sample(s) => w.write_sample(
                &mut bytes,
                2,
                &SampleRecord {
                    sample: s.clone(),
                    id: 7,
                    period: 200003,
                    hw_idx: Some(31),
                    ..SampleRecord::default()
                },
            ),
            PerfEvent::SideBand(SideBandEvent::Mmap2(m)) => w.write_mmap2(&mut bytes, m, &id),
            PerfEvent::SideBand(SideBandEvent::Comm(c)) => w.write_comm(&mut bytes, c, &id),
            PerfEvent::SideBand(SideBandEvent::Fork(t)) => w.write_fork(&mut bytes, t, &id),
            PerfEvent::SideBand(SideBandEvent::Exit(t)) => w.write_exit(&mut bytes, t, &id),
        };
        r.expect("encoding a recorded event");
    }
    bytes
}

/// CPU time of the calling thread (the figure is per core even on a loaded machine).
#[derive(Clone, Copy)]
struct CpuInstant(Duration);

impl CpuInstant {
    fn now() -> CpuInstant {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec through a valid pointer.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
        CpuInstant(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }

    fn elapsed(self) -> Duration {
        CpuInstant::now().0.saturating_sub(self.0)
    }
}

/// The records of `name` (probe build) as the kernel writes them, recorded once per build
/// of the binary and cached under `target/bench/live_pipeline/` (recording single-steps the
/// program: seconds, not what is measured).
fn recorded_records(name: &str, layout: SampleLayout) -> Vec<u8> {
    let program = corpus::program(name, Variant::Probe).expect("corpus program");
    let mut h = DefaultHasher::new();
    std::fs::read(&program.binary)
        .expect("reading the corpus binary")
        .hash(&mut h);
    let dir = corpus::target_dir().join("bench").join("live_pipeline");
    let cache = dir.join(format!("{name}-probe-{:016x}.records", h.finish()));
    if let Ok(bytes) = std::fs::read(&cache) {
        return bytes;
    }
    let recorded = corpus::record(&program).expect("recording");
    let bytes = encode(&recorded.recording.events, layout);
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(&cache, &bytes);
    bytes
}

/// Thread CPU time spent per stage.
#[derive(Default)]
struct Stages {
    parse: Duration,
    route: Duration,
    aggregate: Duration,
}

impl Stages {
    fn total(&self) -> Duration {
        self.parse + self.route + self.aggregate
    }
}

struct Replay {
    samples: u64,
    stages: Stages,
    lbr_entries: u64,
    router_samples: u64,
    code_less: u64,
    counted: u64,
}

/// The daemon's LBR-mode router and one worker (the daemon's default `unwind_workers`),
/// which hands fed samples back to the reader through the daemon's recycler.
fn pipeline() -> (Router, Worker, SampleRecycler) {
    let recycler = SampleRecycler::default();
    let router = Router::new(
        Path::new("/proc"),
        ProcessFilter::default(),
        RouteBy::BranchStack,
        1,
        None,
    );
    let worker = Worker::new(WorkerSettings::unlimited(
        ShardInput::Lbr(PerfContent::LbrStack),
        std::env::temp_dir(),
    ))
    .with_recycler(recycler.clone());
    (router, worker, recycler)
}

/// Replays `bytes` through ring → decoder → `router` → `worker` until `min_samples`
/// samples were read.
fn replay(
    bytes: &[u8],
    layout: SampleLayout,
    min_samples: u64,
    router: &mut Router,
    worker: &mut Worker,
    recycler: &SampleRecycler,
) -> Replay {
    let mut ring = RingBuffer::in_memory(RING_PAGES, 4096).expect("heap ring");
    let decoder = RecordDecoder::new(layout);
    let stats = ReaderStats::default();
    let samples_before = router.stats().samples;
    let code_less_before = router.stats().code_less_binary;
    let counted_before: u64 = worker.summaries().iter().map(|b| b.counted).sum();
    let mut stages = Stages::default();
    let mut scratch = Vec::new();
    let mut spare = Vec::new();
    let mut events: Vec<PerfEvent> = Vec::with_capacity(BATCH_EVENTS);
    let mut lbr_entries = 0u64;
    let mut route_batch = |events: Vec<PerfEvent>, stages: &mut Stages, lbr: &mut u64| {
        let batch = EventBatch { cpu: 0, events };
        for e in &batch.events {
            if let PerfEvent::Sample(s) = e {
                *lbr += s.lbr.len() as u64;
            }
        }
        let t = CpuInstant::now();
        let groups = router.route(batch.events, 0);
        stages.route += t.elapsed();
        let t = CpuInstant::now();
        for (_, g) in groups {
            worker.handle(WorkItem::Samples(g));
        }
        stages.aggregate += t.elapsed();
    };
    while stats.snapshot().samples < min_samples {
        let mut offset = 0;
        while offset < bytes.len() {
            let n = ring.write_as_kernel(&bytes[offset..]);
            assert!(n > 0, "a record larger than the ring");
            offset += n;
            // Drain like the reader: batches of at most BATCH_EVENTS events.
            loop {
                let t = CpuInstant::now();
                // As `run_reader_recycling`: a batch's worth of used samples at a time.
                if spare.is_empty() {
                    recycler.take(&mut spare, BATCH_EVENTS);
                }
                let room = BATCH_EVENTS - events.len();
                // ~1 KiB per LBR sample: bound the drain so a batch is not overfilled much.
                let drained = decoder.drain_recycling(
                    &mut ring,
                    &mut scratch,
                    room as u64 * 1024,
                    &mut events,
                    &mut spare,
                    &stats,
                );
                stages.parse += t.elapsed();
                if events.len() >= BATCH_EVENTS {
                    let full = std::mem::replace(&mut events, Vec::with_capacity(BATCH_EVENTS));
                    route_batch(full, &mut stages, &mut lbr_entries);
                }
                if drained == 0 {
                    break;
                }
            }
        }
    }
    if !events.is_empty() {
        route_batch(std::mem::take(&mut events), &mut stages, &mut lbr_entries);
    }
    let t = CpuInstant::now();
    worker.feed_pending();
    stages.aggregate += t.elapsed();
    let s = stats.snapshot();
    assert_eq!(s.parse_errors, 0);
    let counted: u64 = worker.summaries().iter().map(|b| b.counted).sum();
    Replay {
        samples: s.samples,
        stages,
        lbr_entries,
        router_samples: router.stats().samples - samples_before,
        code_less: router.stats().code_less_binary - code_less_before,
        counted: counted - counted_before,
    }
}

fn per_sec(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

fn main() {
    // `cargo bench` passes `--bench`; other arguments name programs.
    let names: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let names: Vec<&str> = if names.is_empty() {
        DEFAULT_PROGRAMS.to_vec()
    } else {
        names.iter().map(String::as_str).collect()
    };
    let min_samples: u64 = std::env::var("PGO_BENCH_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    if !corpus::tools_available("live_pipeline bench", &["clang-19"]) {
        return;
    }
    let layout = lbr_layout();
    println!(
        "live LBR pipeline (ring drain + record parse + route + virtual unwind + aggregate), \
         single thread, >= {min_samples} samples per program"
    );
    println!(
        "{:<14} {:>9} {:>6} {:>12} {:>12} {:>12} {:>9} {:>9} {:>14}",
        "program",
        "samples",
        "lbr",
        "parse/s",
        "route/s",
        "aggregate/s",
        "no-code",
        "counted",
        "samples/s/core"
    );
    let mut total = Stages::default();
    let mut total_samples = 0u64;
    for name in names {
        let bytes = recorded_records(name, layout);
        // Warm-up (loads the binaries once, as the daemon does), then the measured run.
        let (mut router, mut worker, recycler) = pipeline();
        let _ = replay(&bytes, layout, 1, &mut router, &mut worker, &recycler);
        let r = replay(
            &bytes,
            layout,
            min_samples,
            &mut router,
            &mut worker,
            &recycler,
        );
        assert_eq!(r.router_samples, r.samples);
        println!(
            "{:<14} {:>9} {:>6.1} {:>12.0} {:>12.0} {:>12.0} {:>9} {:>9} {:>14.0}",
            name,
            r.samples,
            r.lbr_entries as f64 / r.samples.max(1) as f64,
            per_sec(r.samples, r.stages.parse),
            per_sec(r.samples, r.stages.route),
            per_sec(r.samples, r.stages.aggregate),
            r.code_less,
            r.counted,
            per_sec(r.samples, r.stages.total())
        );
        total_samples += r.samples;
        total.parse += r.stages.parse;
        total.route += r.stages.route;
        total.aggregate += r.stages.aggregate;
    }
    let rate = per_sec(total_samples, total.total());
    println!(
        "all: {total_samples} samples in {:.3} s: {rate:.0} samples/s/core (target >= 1000000: {})",
        total.total().as_secs_f64(),
        if rate >= 1e6 { "met" } else { "NOT met" }
    );
}

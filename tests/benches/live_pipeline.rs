//! Throughput of the daemon's LBR hot path (issues 4 and 21): parse + route + unwind +
//! aggregate of 32-entry LBR samples, single-threaded, in samples per second of thread CPU
//! time (per core), in four variants: two inputs × two program files. Docs and figures:
//! `bench/live_pipeline.md`.
//!
//! The samples come from corpus programs (probe builds) recorded with the software LBR
//! recorder (`recorder::record`, 32 entries per sample, frame-pointer call
//! chains; cached as perf.data in `target/bench/live_pipeline/`). Their records are written
//! in the kernel's ring layout; the timed loop then runs them through exactly what the
//! daemon runs: [`RingBuffer::drain`] + [`RecordDecoder`] (the record parser `convert`
//! uses), batches of `reader_batch_events`, [`Router::route`] (process table, binary
//! lookup, grouping) and [`Worker::handle`] (coalescing, the worker's binary load,
//! [`BinaryShard::feed`]: the virtual unwinder and the windowed counters). Making the
//! records and writing them into the ring (the kernel's work) are not timed. As in the
//! daemon, the worker hands fed samples back to the reader through a [`SampleRecycler`]
//! (the decoder parses into them), and the router stops routing to a binary its worker
//! found without decodable code (the `no-code` column).
//!
//! Inputs:
//! - `recorded`: the recording's samples replayed in order, again and again (a few hundred
//!   distinct samples per program, each replayed ~1000 times for 1 M samples).
//! - `hwlike`: samples as distinct as hardware's, made from the same recording, drawn at
//!   random. Each starts from a recorded sample (its leaf, call chain and newest LBR
//!   entry); every older entry is drawn among the entries the recording has just before
//!   the same branch (same source and target) under the same callers, so every linear
//!   range between two entries is one the program executed, and every context the
//!   unwinder forms is one the recording has. The callers are followed back through the
//!   calls and returns of the walk, classified by the code layouts the worker builds
//!   (`Callers`, `BranchKinds`). Every entry gets a cycle count drawn from the
//!   distribution of the real Skylake recording `../shared/corpus/propeller_sample_1/
//!   perf.data` (read with the project's perf.data reader; `bench/compare_llvm_profgen.sh`
//!   step 3 draws its hardware-like input from the same recording, from its 24 most
//!   frequent counts, which are the fallback here when the file is absent). The worker's
//!   dedup key is the process, the branch sources and targets and the call chain, not the
//!   cycles: the cycles make every sample distinct as text (as on hardware), the walk
//!   makes most of them distinct to the worker.
//!
//! Binaries (the program file the MMAP2 events name; the worker loads it as the daemon's
//! workers do, `ProfiledBinary::from_shared_bytes_with_lookup` over the router's memory
//! map with the workers' load options, and every binary is decoded lazily: a `LazyCode`
//! over the mapped file decodes the functions samples reach):
//! - `built`: the corpus binary as built (symbols, DWARF, placed pseudo probes): probe
//!   contexts named through its symbols.
//! - `stripped`: a `strip -s` copy of it (build id kept; the MMAP2 events name the copy):
//!   no symbols or DWARF, so the probes cannot be placed and the counters are kept by
//!   address (call-site contexts), decode extents from `.eh_frame`. The bench checks
//!   that the worker decodes it lazily.
//!
//! The `layout` column says what the worker built for the program (`lazy D/E`: D of its E
//! decode extents decoded). The stripped system `ld.so` and `libc.so.6` these programs
//! also run in (startup and dynamic linking: about half of their samples) are decoded
//! lazily too and, having neither DWARF nor probes, counted in line contexts.
//!
//! Columns: `uniq` is the share of the measured samples that are distinct by the worker's
//! dedup key, `uniq/grp` the mean share of distinct ones among 512 consecutive samples
//! (the daemon's coalescing: what one feed sees), `+cyc` the share distinct with their
//! cycle counts too; `counted` sums over the binaries the samples touched.
//!
//! ```text
//! cargo bench -p e2e --bench live_pipeline                      # default programs
//! cargo bench -p e2e --bench live_pipeline -- recursion interp  # chosen programs
//! PGO_BENCH_SAMPLES=3000000 cargo bench -p e2e --bench live_pipeline
//! PGO_BENCH_VARIANTS=hwlike-stripped cargo bench -p e2e --bench live_pipeline
//! PGO_BENCH_BINARIES=1 cargo bench -p e2e --bench live_pipeline  # time and counts per binary
//! PGO_BENCH_PROGRAM_ONLY=1 cargo bench -p e2e --bench live_pipeline  # no ld.so/libc samples
//! ```
//!
//! Target (issues 4 and 21): at least 1,000,000 samples/s/core in every variant.
//!
//! [`BinaryShard::feed`]: unwinder::shard::BinaryShard::feed

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use collector::live::{
    DrainLimit, EventBatch, ReaderSettings, ReaderStats, RecordDecoder, RingBuffer, SampleRecycler,
};
use collector::record::{
    branch_sample_type as bst, sample_type as st, RecordWriter, SampleId, SampleLayout,
    SampleRecord,
};
use collector::{BuildId, LbrEntry, PerfEvent, Recording, Sample, SideBandEvent};
use daemon::run::filters::ProcessFilter;
use daemon::run::router::{RouteBy, Router};
use daemon::run::worker::{WorkItem, Worker, WorkerSettings, COALESCE_SAMPLES};
use e2e::corpus::{self, Variant};
use rustc_hash::FxBuildHasher;
use std::sync::Arc;
use symbolizer::debug_file::DebugFileFinder;
use symbolizer::{LoadOptions, ProfiledBinary};
use unwinder::shard::ShardInput;
use unwinder::PerfContent;
use unwinder::{BinaryPlacement, CodeLayout};

/// Programs replayed when none are named (the probe builds: CSSPGO's main case).
const DEFAULT_PROGRAMS: &[&str] = &["loop_count", "recursion", "virtual_calls", "interp"];
/// The daemon's default `reader_batch_events`.
const BATCH_EVENTS: usize = 512;
/// The daemon's default ring: 64 data pages.
const RING_PAGES: usize = 64;
/// Samples made per chunk of the hardware-like stream (about 1 KiB of records each).
const CHUNK_SAMPLES: usize = 8192;
/// The Skylake recording whose LBR cycle counts the hardware-like input draws from.
const SKYLAKE: &str = "../shared/corpus/propeller_sample_1/perf.data";
/// `bench/compare_llvm_profgen.sh`'s table (value, count): the Skylake recording's 24 most
/// frequent cycle counts, used when the recording is not there.
const SKYLAKE_TOP24: &[(u16, u64)] = &[
    (1, 83391),
    (4, 6375),
    (3, 3317),
    (5, 2502),
    (7, 2371),
    (6, 2171),
    (9, 1642),
    (2, 1641),
    (8, 1598),
    (11, 1546),
    (12, 1395),
    (13, 1376),
    (15, 1245),
    (27, 1192),
    (10, 1036),
    (14, 981),
    (19, 706),
    (20, 705),
    (23, 523),
    (33, 503),
    (35, 500),
    (34, 421),
    (16, 388),
    (18, 335),
];

/// Where the samples come from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Input {
    /// The recording replayed in order.
    Recorded,
    /// Made from the recording, as distinct as hardware's (see the module docs).
    HardwareLike,
}

/// Which file of the program the samples name.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Binary {
    /// The binary as built: symbols, DWARF, placed pseudo probes.
    Built,
    /// Its `strip -s` copy: counted by address.
    Stripped,
}

const VARIANTS: &[(Input, Binary)] = &[
    (Input::Recorded, Binary::Built),
    (Input::Recorded, Binary::Stripped),
    (Input::HardwareLike, Binary::Built),
    (Input::HardwareLike, Binary::Stripped),
];

fn variant_name(input: Input, binary: Binary) -> &'static str {
    match (input, binary) {
        (Input::Recorded, Binary::Built) => "recorded-built",
        (Input::Recorded, Binary::Stripped) => "recorded-stripped",
        (Input::HardwareLike, Binary::Built) => "hwlike-built",
        (Input::HardwareLike, Binary::Stripped) => "hwlike-stripped",
    }
}

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

/// Appends `sample` as the kernel writes it.
fn write_sample(w: &RecordWriter, out: &mut Vec<u8>, sample: Sample) {
    w.write_sample(
        out,
        2,
        &SampleRecord {
            sample,
            id: 7,
            period: 200003,
            hw_idx: Some(31),
            ..SampleRecord::default()
        },
    )
    .expect("encoding a sample");
}

/// Appends a side-band event as the kernel writes it.
fn write_side_band(w: &RecordWriter, out: &mut Vec<u8>, e: &SideBandEvent) {
    let id = SampleId::default();
    let r = match e {
        SideBandEvent::Mmap2(m) => w.write_mmap2(out, m, &id),
        SideBandEvent::Comm(c) => w.write_comm(out, c, &id),
        SideBandEvent::Fork(t) => w.write_fork(out, t, &id),
        SideBandEvent::Exit(t) => w.write_exit(out, t, &id),
    };
    r.expect("encoding a side-band event");
}

/// The recording's events as kernel records.
fn encode(events: &[PerfEvent], layout: SampleLayout) -> Vec<u8> {
    let w = RecordWriter::new(layout);
    let mut bytes = Vec::new();
    for e in events {
        match e {
            PerfEvent::Sample(s) => write_sample(&w, &mut bytes, s.clone()),
            PerfEvent::SideBand(sb) => write_side_band(&w, &mut bytes, sb),
        }
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

/// The recording of `name` (probe build), made once per build of the binary and cached as
/// perf.data under `target/bench/live_pipeline/` (recording single-steps the program:
/// seconds, not what is measured).
fn recording(name: &str) -> (PathBuf, Recording) {
    let program = corpus::program(name, Variant::Probe).expect("corpus program");
    let mut h = DefaultHasher::new();
    std::fs::read(&program.binary)
        .expect("reading the corpus binary")
        .hash(&mut h);
    let dir = bench_dir();
    let cache = dir.join(format!("{name}-probe-{:016x}.data", h.finish()));
    if let Ok(r) = collector::perf_data::read_perf_data(&cache) {
        return (program.binary, r);
    }
    let recorded = corpus::record(&program).expect("recording");
    let _ = std::fs::create_dir_all(&dir);
    collector::perf_data::write_perf_data(&cache, &recorded.recording)
        .expect("writing the recording");
    // The cache gives back the same records.
    let back = collector::perf_data::read_perf_data(&cache).expect("reading the recording");
    assert!(
        encode(&back.events, lbr_layout()) == encode(&recorded.recording.events, lbr_layout()),
        "{}: the perf.data round trip changed the recording",
        cache.display()
    );
    (program.binary, recorded.recording)
}

fn bench_dir() -> PathBuf {
    corpus::target_dir().join("bench").join("live_pipeline")
}

/// A `strip -s` copy of `binary` (build id kept) under `target/bench/live_pipeline/stripped/`,
/// same file name.
fn stripped_copy(binary: &Path) -> PathBuf {
    let dir = bench_dir().join("stripped");
    std::fs::create_dir_all(&dir).expect("creating the stripped copies' directory");
    let out = dir.join(binary.file_name().expect("a file name"));
    let status = Command::new("strip")
        .arg("-s")
        .arg("-o")
        .arg(&out)
        .arg(binary)
        .status()
        .expect("running strip");
    assert!(status.success(), "strip -s {} failed", binary.display());
    out.canonicalize().expect("the stripped copy")
}

/// `events` with the program's MMAP2 events naming `path` instead of `binary`.
fn renamed(events: &[PerfEvent], binary: &Path, path: &Path) -> Vec<PerfEvent> {
    let (from, to) = (binary.to_string_lossy(), path.to_string_lossy());
    events
        .iter()
        .map(|e| match e {
            PerfEvent::SideBand(SideBandEvent::Mmap2(m)) if m.filename == from => {
                let mut m = m.clone();
                m.filename = to.to_string();
                PerfEvent::SideBand(SideBandEvent::Mmap2(m))
            }
            e => e.clone(),
        })
        .collect()
}

/// Cycles of an LBR entry's flag word (`perf_branch_entry.cycles`, bits 4-19).
fn cycles_of(flags: u64) -> u16 {
    ((flags >> 4) & 0xffff) as u16
}

fn with_cycles(flags: u64, cycles: u16) -> u64 {
    (flags & !(0xffff << 4)) | u64::from(cycles) << 4
}

/// Two independent 64-bit hashes of a sample: the worker's dedup key (process, branch
/// sources and targets, call chain; see `unwinder::aggregator`) and the same with the LBR
/// flag words (cycles).
fn sample_keys(s: &Sample) -> (u128, u128) {
    fn mix(h: &mut [u64; 2], w: u64) {
        h[0] = (h[0] ^ w)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
        h[1] = (h[1] ^ w)
            .wrapping_mul(0xff51_afd7_ed55_8ccd)
            .rotate_left(31);
    }
    let mut h = [0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344];
    mix(&mut h, u64::from(s.pid));
    mix(&mut h, s.callchain.len() as u64);
    for &a in &s.callchain {
        mix(&mut h, a);
    }
    mix(&mut h, s.lbr.len() as u64);
    for e in &s.lbr {
        mix(&mut h, e.from);
        mix(&mut h, e.to);
    }
    let key = u128::from(h[0]) << 64 | u128::from(h[1]);
    for e in &s.lbr {
        mix(&mut h, e.flags);
    }
    (key, u128::from(h[0]) << 64 | u128::from(h[1]))
}

/// How distinct a sample stream is (see the module docs' columns).
#[derive(Default)]
struct Distinct {
    keys: HashSet<u128, FxBuildHasher>,
    with_cycles: HashSet<u128, FxBuildHasher>,
    group: HashSet<u128, FxBuildHasher>,
    in_group: usize,
    group_distinct: u64,
    groups: u64,
    samples: u64,
}

impl Distinct {
    fn add(&mut self, (key, with_cycles): (u128, u128)) {
        self.samples += 1;
        self.keys.insert(key);
        self.with_cycles.insert(with_cycles);
        self.group.insert(key);
        self.in_group += 1;
        if self.in_group == COALESCE_SAMPLES {
            self.group_distinct += self.group.len() as u64;
            self.groups += 1;
            self.group.clear();
            self.in_group = 0;
        }
    }

    fn share(&self) -> f64 {
        self.keys.len() as f64 / self.samples.max(1) as f64
    }

    fn share_with_cycles(&self) -> f64 {
        self.with_cycles.len() as f64 / self.samples.max(1) as f64
    }

    fn group_share(&self) -> f64 {
        if self.groups == 0 {
            return self.group.len() as f64 / self.in_group.max(1) as f64;
        }
        self.group_distinct as f64 / (self.groups * COALESCE_SAMPLES as u64) as f64
    }
}

/// The distribution of LBR cycle counts the hardware-like input draws from.
struct CycleTable {
    /// Values and cumulative counts.
    values: Vec<u16>,
    cumulative: Vec<u64>,
    /// What it was read from, and what the recording's samples look like.
    about: String,
}

impl CycleTable {
    fn new(counts: &HashMap<u16, u64>, about: String) -> CycleTable {
        let mut pairs: Vec<(u16, u64)> = counts.iter().map(|(&v, &n)| (v, n)).collect();
        pairs.sort_unstable();
        let mut total = 0;
        let (values, cumulative) = pairs
            .into_iter()
            .map(|(v, n)| {
                total += n;
                (v, total)
            })
            .unzip();
        CycleTable {
            values,
            cumulative,
            about,
        }
    }

    /// The Skylake recording's distribution (every entry of every sample), or the convert
    /// bench's table of its 24 most frequent counts when the file is not there.
    fn skylake() -> CycleTable {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(SKYLAKE);
        let recording = match collector::perf_data::read_perf_data(&path) {
            Ok(r) => r,
            Err(e) => {
                let counts = SKYLAKE_TOP24.iter().copied().collect();
                return CycleTable::new(
                    &counts,
                    format!(
                        "{SKYLAKE} unreadable ({e}): the 24 most frequent counts of \
                         bench/compare_llvm_profgen.sh"
                    ),
                );
            }
        };
        let mut counts: HashMap<u16, u64> = HashMap::new();
        let mut seen = Distinct::default();
        let mut entries = 0u64;
        for e in &recording.events {
            if let PerfEvent::Sample(s) = e {
                if s.lbr.is_empty() {
                    continue;
                }
                seen.add(sample_keys(s));
                for b in &s.lbr {
                    *counts.entry(cycles_of(b.flags)).or_default() += 1;
                    entries += 1;
                }
            }
        }
        let ones = counts.get(&1).copied().unwrap_or(0);
        let about = format!(
            "{SKYLAKE}: {entries} LBR entries in {} samples ({:.0} % of entries 1 cycle, {} \
             distinct counts); its samples are {:.0} % distinct with their cycles, {:.1} % by \
             branches alone",
            seen.samples,
            100.0 * ones as f64 / entries.max(1) as f64,
            counts.len(),
            100.0 * seen.share_with_cycles(),
            100.0 * seen.share(),
        );
        CycleTable::new(&counts, about)
    }

    fn draw(&self, rng: &mut Rng) -> u16 {
        let total = *self.cumulative.last().expect("a cycle distribution");
        let r = rng.below(total);
        self.values[self.cumulative.partition_point(|&c| c <= r)]
    }
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn new(seed: &str) -> Rng {
        let mut h = DefaultHasher::new();
        seed.hash(&mut h);
        Rng(h.finish() | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }

    fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }
}

/// `(from, to, callers hash)` of an LBR entry → where the entries recorded just before it
/// are: (sample, index).
type Before = HashMap<(u64, u64, u64), Vec<(u32, u8)>, FxBuildHasher>;

/// Makes hardware-like samples from a recording (see the module docs).
struct HardwareLike<'a> {
    samples: Vec<&'a Sample>,
    /// Every LBR entry `(from, to)` with the callers it ran under ([`Callers::hash`]):
    /// where the entries recorded just before it (older) are, one per occurrence.
    before: Before,
    kinds: BranchKinds,
    cycles: &'a CycleTable,
    rng: Rng,
    time: u64,
}

impl<'a> HardwareLike<'a> {
    fn new(events: &'a [PerfEvent], cycles: &'a CycleTable, seed: &str) -> HardwareLike<'a> {
        let samples: Vec<&Sample> = events
            .iter()
            .filter_map(|e| match e {
                PerfEvent::Sample(s) if !s.lbr.is_empty() && !s.callchain.is_empty() => Some(s),
                _ => None,
            })
            .collect();
        assert!(!samples.is_empty(), "a recording without LBR samples");
        let kinds = BranchKinds::new(events, &samples);
        let mut before = Before::default();
        for (i, s) in samples.iter().enumerate() {
            let mut callers = Callers::of(s);
            for (j, newer) in s.lbr.iter().enumerate().take(s.lbr.len() - 1) {
                if !callers.undo(*newer, &kinds) {
                    break;
                }
                before
                    .entry((newer.from, newer.to, callers.hash()))
                    .or_default()
                    .push((i as u32, j as u8 + 1));
            }
        }
        HardwareLike {
            samples,
            before,
            kinds,
            cycles,
            rng: Rng::new(seed),
            time: 1,
        }
    }

    fn next_sample(&mut self) -> Sample {
        let base = self.samples[self.rng.index(self.samples.len())];
        let len = base.lbr.len();
        // The newest entry is the base's (its leaf lies after it); each older one is drawn
        // among the entries recorded just before the same branch with the same callers.
        // Where none was (callers not known that far), the sample the last entry came
        // from continues.
        let mut lbr: Vec<LbrEntry> = Vec::with_capacity(len);
        lbr.push(base.lbr[0]);
        let mut callers = Callers::of(base);
        let (mut src, mut pos) = (base, 0usize);
        while lbr.len() < len {
            let newer = lbr[lbr.len() - 1];
            let drawn = if callers.undo(newer, &self.kinds) {
                self.before
                    .get(&(newer.from, newer.to, callers.hash()))
                    .map(|places| {
                        // A few draws for one with older entries after it.
                        let mut pick = places[self.rng.index(places.len())];
                        for _ in 0..4 {
                            let (t, j) = pick;
                            if (j as usize + 1) < self.samples[t as usize].lbr.len() {
                                break;
                            }
                            pick = places[self.rng.index(places.len())];
                        }
                        pick
                    })
            } else {
                None
            };
            match drawn {
                Some((t, j)) => (src, pos) = (self.samples[t as usize], j as usize),
                None if pos + 1 < src.lbr.len() => pos += 1,
                None => break,
            }
            lbr.push(src.lbr[pos]);
        }
        for e in &mut lbr {
            e.flags = with_cycles(e.flags, self.cycles.draw(&mut self.rng));
        }
        self.time += 1000;
        Sample {
            pid: base.pid,
            tid: base.tid,
            time: self.time,
            ip: base.ip,
            callchain: base.callchain.clone(),
            lbr,
            count: 1,
            user_stack: None,
        }
    }
}

/// The return addresses above the running function while a sample's LBR is walked from
/// its newest entry to older ones, as a hash per depth (outermost first; the last is the
/// whole stack's); `None` once a call is undone with no caller left.
struct Callers(Option<Vec<u64>>);

impl Callers {
    fn of(s: &Sample) -> Callers {
        let mut c = Callers(Some(vec![0x243f_6a88_85a3_08d3]));
        for &r in s.callchain[1..].iter().rev() {
            c.push(r);
        }
        c
    }

    fn push(&mut self, r: u64) {
        if let Some(h) = &mut self.0 {
            let top = h[h.len() - 1];
            h.push(
                (top ^ r)
                    .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                    .rotate_left(27),
            );
        }
    }

    /// Steps back over `e`: before a call its callee's frame did not exist, before a
    /// return the frame it left was still there (returning to `e.to`).
    fn undo(&mut self, e: LbrEntry, kinds: &BranchKinds) -> bool {
        let Some(h) = &mut self.0 else {
            return false;
        };
        match kinds.of(e.from) {
            BranchKind::Call if h.len() == 1 => {
                self.0 = None;
                return false;
            }
            BranchKind::Call => {
                h.pop();
            }
            BranchKind::Return => self.push(e.to),
            BranchKind::Other => {}
        }
        true
    }

    fn hash(&self) -> u64 {
        self.0.as_ref().map_or(0, |h| h[h.len() - 1])
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum BranchKind {
    Call,
    Return,
    Other,
}

/// Which recorded branch sources are calls and returns, as the unwinder's code layouts
/// say: each executable file the recording maps, loaded as the daemon's workers load it.
struct BranchKinds(HashMap<u64, BranchKind, FxBuildHasher>);

impl BranchKinds {
    fn new(events: &[PerfEvent], samples: &[&Sample]) -> BranchKinds {
        type Layout = Arc<dyn CodeLayout + Send + Sync>;
        let mut files: HashMap<&str, Option<(BinaryPlacement, Layout)>> = HashMap::new();
        let mut maps: Vec<(u64, u64, &str)> = Vec::new();
        for e in events {
            let PerfEvent::SideBand(SideBandEvent::Mmap2(m)) = e else {
                continue;
            };
            if m.prot & libc::PROT_EXEC as u32 == 0 || !m.filename.starts_with('/') {
                continue;
            }
            maps.push((m.addr, m.addr + m.len, &m.filename));
            let loaded = files.entry(&m.filename).or_insert_with(|| {
                let path = Path::new(&m.filename);
                let bytes = Arc::new(std::fs::read(path).ok()?);
                let (binary, _, lazy) = ProfiledBinary::from_shared_bytes_with_lookup(
                    path,
                    bytes,
                    &DebugFileFinder::default(),
                    &LoadOptions::default(),
                )
                .ok()?;
                let placement = BinaryPlacement::new(binary.load_info(), None).ok()?;
                let layout: Layout = match lazy {
                    Some(lazy) => lazy,
                    None => Arc::new(binary),
                };
                Some((placement, layout))
            });
            if let Some((placement, _)) = loaded {
                let _ = placement.observe(m);
            }
        }
        let mut kinds = HashMap::default();
        for s in samples {
            for e in &s.lbr {
                kinds.entry(e.from).or_insert_with(|| {
                    let Some(&(_, _, file)) = maps
                        .iter()
                        .rev()
                        .find(|&&(start, end, _)| (start..end).contains(&e.from))
                    else {
                        return BranchKind::Other;
                    };
                    let Some(Some((placement, layout))) = files.get(file) else {
                        return BranchKind::Other;
                    };
                    let addr = placement.canonical(e.from);
                    if layout.is_call(addr) {
                        BranchKind::Call
                    } else if layout.is_return(addr) {
                        BranchKind::Return
                    } else {
                        BranchKind::Other
                    }
                });
            }
        }
        BranchKinds(kinds)
    }

    fn of(&self, from: u64) -> BranchKind {
        self.0.get(&from).copied().unwrap_or(BranchKind::Other)
    }
}

/// Records to write into the ring, chunk after chunk.
trait RecordSource {
    /// The next records; every sample in them is shown to `seen` (not timed).
    fn next_chunk(&mut self, seen: &mut Distinct) -> &[u8];
}

/// The recording, again and again.
struct Repeat<'a> {
    bytes: &'a [u8],
    keys: &'a [(u128, u128)],
}

impl RecordSource for Repeat<'_> {
    fn next_chunk(&mut self, seen: &mut Distinct) -> &[u8] {
        for &k in self.keys {
            seen.add(k);
        }
        self.bytes
    }
}

/// Hardware-like samples, [`CHUNK_SAMPLES`] at a time, after the recording's side-band
/// events (its exits left out: the process lives on).
struct Generated<'a> {
    maker: HardwareLike<'a>,
    side_band: Vec<&'a SideBandEvent>,
    writer: RecordWriter,
    bytes: Vec<u8>,
}

impl<'a> Generated<'a> {
    fn new(events: &'a [PerfEvent], cycles: &'a CycleTable, seed: &str) -> Generated<'a> {
        Generated {
            maker: HardwareLike::new(events, cycles, seed),
            side_band: events
                .iter()
                .filter_map(|e| match e {
                    PerfEvent::SideBand(SideBandEvent::Exit(_)) => None,
                    PerfEvent::SideBand(sb) => Some(sb),
                    PerfEvent::Sample(_) => None,
                })
                .collect(),
            writer: RecordWriter::new(lbr_layout()),
            bytes: Vec::new(),
        }
    }
}

impl RecordSource for Generated<'_> {
    fn next_chunk(&mut self, seen: &mut Distinct) -> &[u8] {
        self.bytes.clear();
        for sb in std::mem::take(&mut self.side_band) {
            write_side_band(&self.writer, &mut self.bytes, sb);
        }
        for _ in 0..CHUNK_SAMPLES {
            let s = self.maker.next_sample();
            seen.add(sample_keys(&s));
            write_sample(&self.writer, &mut self.bytes, s);
        }
        &self.bytes
    }
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
    by_binary: HashMap<String, Duration>,
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

/// Runs the records of `source` through ring → decoder → `router` → `worker` until
/// `min_samples` samples were read.
fn replay(
    source: &mut dyn RecordSource,
    seen: &mut Distinct,
    min_samples: u64,
    router: &mut Router,
    worker: &mut Worker,
    recycler: &SampleRecycler,
) -> Replay {
    let layout = lbr_layout();
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
    // Worker time per binary of the groups handled (held groups are fed with a later
    // group of the same binary; what `feed_pending` feeds at the end is not attributed).
    let mut by_binary: HashMap<String, Duration> = HashMap::new();
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
        for (_, g) in groups {
            let binary = g.binary.clone();
            let t = CpuInstant::now();
            worker.handle(WorkItem::Samples(g));
            let d = t.elapsed();
            stages.aggregate += d;
            match by_binary.get_mut(&binary.path) {
                Some(sum) => *sum += d,
                None => {
                    by_binary.insert(binary.path.clone(), d);
                }
            }
        }
    };
    while stats.snapshot().samples < min_samples {
        let bytes = source.next_chunk(seen);
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
                // As the reader: a drain fills the batch up to its events, no further.
                let limit = DrainLimit {
                    bytes: ReaderSettings::default().max_drain_bytes,
                    events: BATCH_EVENTS - events.len(),
                };
                let drained = decoder.drain_recycling(
                    &mut ring,
                    &mut scratch,
                    limit,
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
        by_binary,
        lbr_entries,
        router_samples: router.stats().samples - samples_before,
        code_less: router.stats().code_less_binary - code_less_before,
        counted: counted - counted_before,
    }
}

/// Whether the worker decodes the program mapped from `path` lazily, and a label: `eager`,
/// or `lazy D/E` (D of its E decode extents decoded so far).
fn program_layout(worker: &Worker, path: &Path) -> (bool, String) {
    let path = path.to_string_lossy();
    let summary = worker
        .summaries()
        .into_iter()
        .find(|b| b.path == path)
        .unwrap_or_else(|| panic!("the worker never loaded {path}"));
    let id = BuildId::from_hex(&summary.build_id).expect("a hex build id");
    match worker.lazy_code(&id) {
        Some(lazy) => (
            true,
            format!("lazy {}/{}", lazy.decoded_extents(), lazy.extent_count()),
        ),
        None => (false, "eager".into()),
    }
}

/// One program's inputs.
struct Program {
    name: String,
    binary: PathBuf,
    stripped: PathBuf,
    /// The recording with the program's MMAP2 naming the binary / the stripped copy.
    events: Vec<PerfEvent>,
    stripped_events: Vec<PerfEvent>,
    records: Vec<u8>,
    stripped_records: Vec<u8>,
    keys: Vec<(u128, u128)>,
}

impl Program {
    /// With `program_only`, the samples whose IP or LBR addresses lie outside the
    /// program's own mappings are left out.
    fn load(name: &str, program_only: bool) -> Program {
        let (binary, recording) = recording(name);
        let stripped = stripped_copy(&binary);
        let mut events = recording.events;
        if program_only {
            let path = binary.to_string_lossy();
            let maps: Vec<(u64, u64)> = events
                .iter()
                .filter_map(|e| match e {
                    PerfEvent::SideBand(SideBandEvent::Mmap2(m)) if m.filename == path => {
                        Some((m.addr, m.addr + m.len))
                    }
                    _ => None,
                })
                .collect();
            let inside = |a: u64| maps.iter().any(|&(start, end)| (start..end).contains(&a));
            events.retain(|e| match e {
                PerfEvent::Sample(s) => {
                    inside(s.ip) && s.lbr.iter().all(|b| inside(b.from) && inside(b.to))
                }
                PerfEvent::SideBand(_) => true,
            });
        }
        let stripped_events = renamed(&events, &binary, &stripped);
        let keys = events
            .iter()
            .filter_map(|e| match e {
                PerfEvent::Sample(s) => Some(sample_keys(s)),
                _ => None,
            })
            .collect();
        Program {
            name: name.to_string(),
            records: encode(&events, lbr_layout()),
            stripped_records: encode(&stripped_events, lbr_layout()),
            binary,
            stripped,
            events,
            stripped_events,
            keys,
        }
    }
}

struct Row {
    replay: Replay,
    seen: Distinct,
    layout: String,
    /// Per binary the worker loaded: a line saying what was counted there.
    binaries: Vec<String>,
}

/// For each binary the worker loaded: its layout, the samples counted, the contexts its
/// counters have and its share of the worker's time.
fn binaries(worker: &mut Worker, r: &Replay) -> Vec<String> {
    let total = r.stages.aggregate.as_secs_f64().max(1e-9);
    let mut lines = Vec::new();
    for b in worker.summaries() {
        let id = BuildId::from_hex(&b.build_id).expect("a hex build id");
        let layout = if worker.lazy_code(&id).is_some() {
            "lazy"
        } else {
            "eager"
        };
        let contexts = worker.counters(&id).map_or(0, |c| c.contexts.len());
        let time = r.by_binary.get(&b.path).map_or(0.0, Duration::as_secs_f64);
        lines.push(format!(
            "{:>5.1}% of aggregate time, {:>8} counted, {contexts:>6} contexts: {layout:<5} \
             {} ({})",
            100.0 * time / total,
            b.counted,
            b.path,
            b.kind
        ));
    }
    lines.sort_by(|a, b| b.cmp(a));
    lines
}

/// Warm-up (loads the binaries once, as the daemon does), then the measured run.
fn measure(p: &Program, input: Input, which: Binary, cycles: &CycleTable, min_samples: u64) -> Row {
    let (events, records, path) = match which {
        Binary::Built => (&p.events, &p.records, &p.binary),
        Binary::Stripped => (&p.stripped_events, &p.stripped_records, &p.stripped),
    };
    let mut source: Box<dyn RecordSource> = match input {
        Input::Recorded => Box::new(Repeat {
            bytes: records,
            keys: &p.keys,
        }),
        Input::HardwareLike => Box::new(Generated::new(events, cycles, &p.name)),
    };
    let (mut router, mut worker, recycler) = pipeline();
    let mut seen = Distinct::default();
    let _ = replay(
        &mut *source,
        &mut seen,
        1,
        &mut router,
        &mut worker,
        &recycler,
    );
    let mut seen = Distinct::default();
    let replay = replay(
        &mut *source,
        &mut seen,
        min_samples,
        &mut router,
        &mut worker,
        &recycler,
    );
    assert_eq!(replay.router_samples, replay.samples);
    let (lazy, layout) = program_layout(&worker, path);
    let binaries = binaries(&mut worker, &replay);
    // The daemon's workers decode every binary lazily; a stripped one (no DWARF, no placed
    // probes) never needed the eager form, so its variants measure `LazyCode` whatever
    // the worker does with the others (shown in the layout column).
    assert!(
        lazy || which == Binary::Built,
        "{}: the worker decoded the stripped copy eagerly",
        p.name
    );
    Row {
        replay,
        seen,
        layout,
        binaries,
    }
}

fn per_sec(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
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
    let variants: Vec<(Input, Binary)> = match std::env::var("PGO_BENCH_VARIANTS") {
        Ok(v) => {
            let wanted: Vec<&str> = v.split(',').map(str::trim).collect();
            for w in &wanted {
                assert!(
                    VARIANTS.iter().any(|&(i, c)| variant_name(i, c) == *w),
                    "unknown variant {w} (known: recorded-built, recorded-stripped, \
                     hwlike-built, hwlike-stripped)"
                );
            }
            VARIANTS
                .iter()
                .copied()
                .filter(|&(i, c)| wanted.contains(&variant_name(i, c)))
                .collect()
        }
        Err(_) => VARIANTS.to_vec(),
    };
    let show_binaries = std::env::var_os("PGO_BENCH_BINARIES").is_some();
    if !corpus::tools_available("live_pipeline bench", &["clang-19", "strip"]) {
        return;
    }
    let program_only = std::env::var_os("PGO_BENCH_PROGRAM_ONLY").is_some();
    let programs: Vec<Program> = names
        .iter()
        .map(|n| Program::load(n, program_only))
        .collect();
    let cycles = CycleTable::skylake();
    println!(
        "live LBR pipeline (ring drain + record parse + route + virtual unwind + aggregate), \
         single thread, >= {min_samples} samples per program and variant{}",
        if program_only {
            " (samples entirely in the program only)"
        } else {
            ""
        }
    );
    println!("hardware-like cycle counts from {}", cycles.about);
    println!("load average at start: {}", load_average());
    println!(
        "{:<17} {:<14} {:>8} {:>5} {:>6} {:>8} {:>5} {:>10} {:>10} {:>11} {:>8} {:>8} {:>11} {:>14}",
        "variant",
        "program",
        "samples",
        "lbr",
        "uniq",
        "uniq/grp",
        "+cyc",
        "parse/s",
        "route/s",
        "aggregate/s",
        "no-code",
        "counted",
        "layout",
        "samples/s/core"
    );
    let pct = |x: f64| format!("{:.1}%", 100.0 * x);
    let mut summary = Vec::new();
    for &(input, which) in &variants {
        let name = variant_name(input, which);
        let mut total = Stages::default();
        let mut total_samples = 0u64;
        for p in &programs {
            let Row {
                replay: r,
                seen,
                layout,
                binaries,
            } = measure(p, input, which, &cycles, min_samples);
            println!(
                "{:<17} {:<14} {:>8} {:>5.1} {:>6} {:>8} {:>5} {:>10.0} {:>10.0} {:>11.0} {:>8} {:>8} {:>11} {:>14.0}",
                name,
                p.name,
                r.samples,
                r.lbr_entries as f64 / r.samples.max(1) as f64,
                pct(seen.share()),
                pct(seen.group_share()),
                pct(seen.share_with_cycles()),
                per_sec(r.samples, r.stages.parse),
                per_sec(r.samples, r.stages.route),
                per_sec(r.samples, r.stages.aggregate),
                r.code_less,
                r.counted,
                layout,
                per_sec(r.samples, r.stages.total())
            );
            if show_binaries {
                for line in binaries {
                    println!("{:<19} {line}", "");
                }
            }
            total_samples += r.samples;
            total.parse += r.stages.parse;
            total.route += r.stages.route;
            total.aggregate += r.stages.aggregate;
        }
        summary.push((name, total_samples, total));
    }
    println!("load average at end: {}", load_average());
    for (name, samples, stages) in summary {
        let rate = per_sec(samples, stages.total());
        println!(
            "{name:<17}: {samples} samples in {:.3} s: {rate:.0} samples/s/core (target >= \
             1000000: {})",
            stages.total().as_secs_f64(),
            if rate >= 1e6 { "met" } else { "NOT met" }
        );
    }
}

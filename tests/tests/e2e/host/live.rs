//! The live daemon (`pgo-agent run`, issue 4) on this machine (cpu-clock mode: no PMU here),
//! and the LBR path replayed through the same ring reader and parser.
//!
//! Live tests need root (system-wide perf events) and clang-19; they are skipped with a
//! message otherwise. They run one at a time (they sample the whole machine).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;

use collector::live::{ReaderStats, RecordDecoder, RingBuffer};
use collector::record::{
    branch_sample_type as bst, sample_type as st, RecordWriter, SampleId, SampleLayout,
    SampleRecord,
};
use collector::sample::USER_STACK_REGS_MASK;
use collector::{PerfEvent, SideBandEvent};
use daemon::run::filters::ProcessFilter;
use daemon::run::router::{RouteBy, Router};
use daemon::run::worker::{
    counter_budget, WorkItem, Worker, WorkerSettings, COUNTER_SHARE_OF_BUDGET,
};
use daemon::run::{RunControl, RunSummary};
use e2e::agent::{cpu_clock_config as config, run_for, RunningDaemon, CPU_CLOCK_HZ};
use e2e::corpus::{self, Variant};
use e2e::support::{build_id_hex, build_program, pgo_agent, run_ok, scratch_dir};
use exporter::format::unsymbolized::read_unsymbolized;
use object::{Object, ObjectSymbol};
use symbolizer::ProfiledBinary;
use unwinder::shard::ShardInput;
use unwinder::{PerfContent, UnwindOptions};

fn can_sample(test: &str) -> bool {
    e2e::support::can_sample(test, &["clang-19", "perf"])
}

/// Builds `tests/programs/live/<name>.c` with [`build_program`] into a scratch directory
/// of its own (once per process).
fn live_program(name: &'static str) -> PathBuf {
    static BUILT: Mutex<BTreeMap<&str, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    built
        .entry(name)
        .or_insert_with(|| {
            let source = corpus::sources_dir().join(format!("live/{name}.c"));
            build_program(&source, &scratch_dir("live", name).join(name), &[])
        })
        .clone()
}

/// tests/programs/live/spin.c, built once per process.
fn spin_binary() -> PathBuf {
    live_program("spin")
}

/// The function the kernel's own cpu-clock samples put first for spin, by the oracle
/// `perf record -e cpu-clock` + `perf report --sort sym`. On this VM (no PMU) the
/// hrtimer-driven samples are strongly biased: hot_loop runs ~7x longer than cold_work
/// (measured with clock_gettime), yet perf puts ~99% of the samples in cold_work. The
/// daemon must agree with the kernel's samples, so the oracle names the hot function.
fn oracle_hot_function() -> String {
    let data = scratch_dir("live", "oracle").join("perf.data");
    let ok = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-o"])
        .arg(&data)
        .arg(spin_binary())
        .arg("1")
        .status()
        .unwrap()
        .success();
    assert!(ok, "perf record");
    let out = Command::new("perf")
        .args(["report", "--stdio", "--sort", "sym", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let top = text
        .lines()
        .find(|l| !l.starts_with('#') && l.contains("[.]"))
        .and_then(|l| l.split("[.]").nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| panic!("no user symbol in perf report:\n{text}"));
    let _ = std::fs::remove_file(&data);
    top
}

fn spawn_spin(secs: f64) -> Child {
    Command::new(spin_binary())
        .arg(secs.to_string())
        .spawn()
        .unwrap()
}

fn state_dir(name: &str) -> PathBuf {
    scratch_dir("live", name)
}

/// Sum of the range counts of the spin binary's profile per function symbol, read back
/// from the `<build-id>.unsymbolized` file the daemon wrote.
fn samples_per_function(summary: &RunSummary) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = binary_samples_per_function(summary, &spin_binary())
        .into_iter()
        .collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.1));
    v
}

/// The sized function symbols of `binary`: (start, end, name).
fn function_symbols(binary: &Path) -> Vec<(u64, u64, String)> {
    let data = std::fs::read(binary).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    obj.symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
        .map(|s| {
            (
                s.address(),
                s.address() + s.size(),
                s.name().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The function of `funcs` holding link-time address `a` ("?" outside every one).
fn function_of(funcs: &[(u64, u64, String)], a: u64) -> String {
    funcs
        .iter()
        .find(|f| a >= f.0 && a < f.1)
        .map_or("?".into(), |f| f.2.clone())
}

/// Sum of the range counts of `binary`'s profile per function symbol (the function of
/// each sample's IP), read back from the `<build-id>.unsymbolized` file the daemon wrote.
fn binary_samples_per_function(summary: &RunSummary, path: &Path) -> BTreeMap<String, u64> {
    let binary = ProfiledBinary::load(path).unwrap();
    let id = binary.build_id().unwrap().to_hex();
    let entry = summary
        .binaries
        .iter()
        .find(|b| b.build_id == id)
        .unwrap_or_else(|| {
            panic!(
                "no aggregate for {} ({id}): {:#?}",
                path.display(),
                summary.binaries
            )
        });
    assert_eq!(entry.kind, "probe_context");
    let text = std::fs::read_to_string(&entry.profile).unwrap();
    let base = binary.preferred_base();
    let counters = read_unsymbolized(&text, base)
        .unwrap()
        .to_counter_set(base)
        .unwrap();
    let funcs = function_symbols(path);
    let mut per = BTreeMap::new();
    for c in counters.contexts.values() {
        for (&(start, end), &n) in &c.ranges {
            // A cpu-clock range runs from the sampled block's probe to the IP, within
            // one function.
            assert!(start <= end, "{start:#x} > {end:#x}");
            let f = function_of(&funcs, end);
            assert_eq!(function_of(&funcs, start), f, "{start:#x}..{end:#x}");
            *per.entry(f).or_default() += n;
        }
    }
    per
}

#[test]
fn live_program_started_after_the_daemon() {
    let _machine = e2e::support::machine_lock();
    if !can_sample("live_program_started_after_the_daemon") {
        return;
    }
    spin_binary();
    let state = state_dir("after");
    let daemon = RunningDaemon::start(&config(""), &state, 4);
    // The daemon needs well under a second to open its events; the program runs 2.5 s of
    // the 4 s, so its exec's COMM and MMAP2 records arrive through the rings.
    std::thread::sleep(std::time::Duration::from_millis(800));
    let mut child = spawn_spin(2.5);
    let summary = daemon.join();
    assert!(child.wait().unwrap().success());
    assert_eq!(summary.mode, "cpu_clock");
    let per = samples_per_function(&summary);
    eprintln!("per function: {per:?}");
    let hot = oracle_hot_function();
    assert!(hot == "hot_loop" || hot == "cold_work", "oracle: {hot}");
    assert_eq!(per[0].0, hot, "{per:?}");
    assert!(per[0].1 > 100, "{per:?}");
}

#[test]
fn live_program_started_before_the_daemon() {
    let _machine = e2e::support::machine_lock();
    if !can_sample("live_program_started_before_the_daemon") {
        return;
    }
    spin_binary();
    let mut child = spawn_spin(4.0);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let state = state_dir("before");
    let summary = run_for(&config(""), 2, &state);
    assert!(child.wait().unwrap().success());
    let per = samples_per_function(&summary);
    eprintln!("per function: {per:?}");
    assert_eq!(per[0].0, oracle_hot_function(), "{per:?}");
}

/// A child the start-up /proc scan finds between its fork and its exec has its parent's
/// name and mappings; its exec, right after the scan, must still rename it (the events are
/// enabled before the scan, so the exec's COMM record is in a ring). With the events enabled
/// after the scan, a comm filter rejected every sample of it (CI saw it once, racing).
#[test]
fn a_child_that_execs_right_after_the_startup_scan_is_sampled() {
    let _machine = e2e::support::machine_lock();
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    if !can_sample("a_child_that_execs_right_after_the_startup_scan_is_sampled") {
        return;
    }
    let spin = spin_binary();
    // The child waits after fork, before exec, for one byte on a pipe (std's spawn would
    // wait for the exec itself).
    let (reader, mut writer) = std::io::pipe().unwrap();
    let (fd, write_fd) = (reader.as_raw_fd(), writer.as_raw_fd());
    let path = std::ffi::CString::new(spin.as_os_str().as_bytes()).unwrap();
    let secs = std::ffi::CString::new("1.5").unwrap();
    let argv = [path.as_ptr(), secs.as_ptr(), std::ptr::null()];
    // SAFETY: between fork and exec the child calls only close(2), read(2), execv(2) and
    // _exit(2), which are async-signal-safe, on memory prepared before the fork.
    let pid = unsafe {
        match libc::fork() {
            0 => {
                // Without its own copy of the write end, the child's read ends (and it
                // exits) if this test fails before writing.
                libc::close(write_fd);
                let mut byte = 0u8;
                if libc::read(fd, (&mut byte as *mut u8).cast(), 1) == 1 {
                    libc::execv(path.as_ptr(), argv.as_ptr());
                }
                libc::_exit(127)
            }
            pid => {
                assert!(pid > 0, "fork: {}", std::io::Error::last_os_error());
                pid as u32
            }
        }
    };
    let comm = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    assert_ne!(comm(pid).trim_end(), "spin", "the child has not exec'd yet");

    let state = state_dir("exec-after-scan");
    let control = Arc::new(RunControl::default());
    control.hold_after_scan.store(true, Ordering::SeqCst);
    let daemon = RunningDaemon::start_with(
        &config("[filters]\ncomms = [\"spin\"]\n"),
        &state,
        3,
        control.clone(),
    );
    let waited = Instant::now();
    while !control.scanned.load(Ordering::SeqCst) {
        assert!(waited.elapsed() < Duration::from_secs(30), "no /proc scan");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The scan saw the child under its parent's name; now it execs.
    writer.write_all(b"x").unwrap();
    while comm(pid).trim_end() != "spin" {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the child did not exec"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    control.hold_after_scan.store(false, Ordering::SeqCst);
    let summary = daemon.join();
    let mut status = 0;
    // SAFETY: pid is this process's child; status is a valid out pointer.
    let waited = unsafe { libc::waitpid(pid as i32, &mut status, 0) };
    assert_eq!(waited, pid as i32);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "spin: {status:#x}"
    );
    let per = samples_per_function(&summary);
    let total: u64 = per.iter().map(|p| p.1).sum();
    assert!(total > 300, "spin sampled {total} times: {per:?}");
}

/// A program run again and again for ~0.1 s inside a private mount namespace, from a tmpfs
/// only that namespace sees (a build sandbox, a container). The readers poll every 400 ms
/// here, so each run has exited before the router reads its first sample: its map_files
/// and root are gone, and its path does not exist in the daemon's namespace. The shell
/// that runs it stays alive in the namespace (a second after the last run, as a container's init
/// outlives its jobs), and its root serves the file.
#[test]
fn short_runs_in_a_private_mount_namespace_are_resolved() {
    let _machine = e2e::support::machine_lock();
    let name = "short_runs_in_a_private_mount_namespace_are_resolved";
    if !can_sample(name) {
        return;
    }
    if Command::new("unshare").arg("--version").output().is_err() {
        eprintln!("SKIPPED {name}: needs unshare (util-linux)");
        return;
    }
    let spin = spin_binary();
    let id = build_id_hex(&spin);
    // The mount point exists (empty) in the daemon's namespace too.
    let mnt = state_dir("ns-tmpfs");
    std::fs::create_dir_all(&mnt).unwrap();
    let runs = 30;
    let script = format!(
        "mount -t tmpfs none '{dir}' && cp '{spin}' '{dir}/' && \
         for i in $(seq {runs}); do '{dir}/spin' 0.1 || exit 1; done; sleep 1",
        dir = mnt.display(),
        spin = spin.display(),
    );
    let state = state_dir("ns");
    let cfg = config(
        "[filters]\ncomms = [\"spin\"]\n\
         [collector]\nreader_poll_interval_ms = 400\nring_wakeup_percent = 0\n",
    );
    let daemon = RunningDaemon::start(&cfg, &state, 8);
    std::thread::sleep(std::time::Duration::from_millis(800));
    let started = std::time::Instant::now();
    let status = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .status()
        .unwrap();
    let took = started.elapsed();
    let summary = daemon.join();
    assert!(status.success(), "{script}: {status}");
    assert!(
        took < std::time::Duration::from_secs(6),
        "{runs} runs took {took:?}: the daemon stopped first"
    );
    let r = &summary.router;
    let samples = summary
        .binaries
        .iter()
        .find(|b| b.build_id == id)
        .map_or(0, |b| b.samples);
    eprintln!(
        "{runs} runs in {took:?}: spin's profile {samples} samples; router: {} samples, \
         {} filtered, {} unmapped, {} unresolved_binary",
        r.samples, r.filtered, r.unmapped, r.unresolved_binary
    );
    // About 100 samples per run at 997 Hz.
    assert!(samples > 10 * runs, "spin's profile has {samples} samples");
    // Rings are per CPU: a run's FORK record can be read after its samples, and when the
    // run has exited by then its parent (whose root serves the file) is not known yet, so
    // that run's samples stay unresolved. At most a few of the 30 runs; without the
    // ancestors' roots and the lookup at MMAP2, nearly every sample is.
    assert!(
        r.unresolved_binary * 10 <= samples,
        "{} samples of unresolved binaries, {samples} in spin's profile",
        r.unresolved_binary
    );
}

#[test]
fn loss_is_counted_and_the_daemon_keeps_running() {
    let _machine = e2e::support::machine_lock();
    if !can_sample("loss_is_counted_and_the_daemon_keeps_running") {
        return;
    }
    let mut child = spawn_spin(3.0);
    let state = state_dir("loss");
    // One 4 KiB data page per CPU, the maximum rate, and a reader that sleeps 300 ms
    // (no wake-up when the ring fills): the ring is full long before it is drained.
    let cfg = config(
        "[collector]\nring_buffer_pages = 1\nreader_poll_interval_ms = 300\nring_wakeup_percent = 0\n",
    );
    let mut cfg = cfg;
    cfg.sampling.cpu_clock_frequency_hz = 50000;
    let summary = run_for(&cfg, 2, &state);
    assert!(child.wait().unwrap().success());
    eprintln!("readers: {:?}", summary.readers);
    assert!(summary.readers.lost_records > 0, "{:?}", summary.readers);
    assert!(summary.readers.lost_events > 0);
    assert!(
        summary.readers.samples > 0,
        "the daemon kept reading after the losses"
    );
}

/// LBR records from the software recorder, user registers and stack bytes included,
/// written with the kernel's layout into an in-memory ring (the first write starts 24
/// bytes before the end, so a record wraps), read back by the same ring reader and record parser as the live path, routed and
/// aggregated like the daemon's LBR mode: the counters equal `convert`'s.
#[test]
fn replayed_lbr_records_equal_convert() {
    let _machine = e2e::support::machine_lock();
    if !corpus::tools_available("replayed_lbr_records_equal_convert", &["clang-19"]) {
        return;
    }
    let program = corpus::program("recursion", Variant::Probe).unwrap();
    let recorded = corpus::record(&program).unwrap();
    let rec = &recorded.recording;

    let layout = SampleLayout::new(
        collector::live::capability::BASE_SAMPLE_TYPE | st::BRANCH_STACK,
        bst::USER | bst::ANY | bst::HW_INDEX,
        0,
        true,
    )
    .with_regs(USER_STACK_REGS_MASK, 0);
    let w = RecordWriter::new(layout);
    let mut bytes = Vec::new();
    for e in &rec.events {
        match e {
            PerfEvent::Sample(s) => {
                let mut r = SampleRecord {
                    sample: s.clone(),
                    id: 7,
                    period: 97,
                    hw_idx: Some(31),
                    ..SampleRecord::default()
                };
                r.set_user_registers(&layout);
                w.write_sample(&mut bytes, 2, &r).unwrap();
            }
            PerfEvent::SideBand(SideBandEvent::Mmap2(m)) => {
                w.write_mmap2(&mut bytes, m, &SampleId::default()).unwrap()
            }
            PerfEvent::SideBand(SideBandEvent::Comm(c)) => {
                w.write_comm(&mut bytes, c, &SampleId::default()).unwrap()
            }
            PerfEvent::SideBand(SideBandEvent::Fork(t)) => {
                w.write_fork(&mut bytes, t, &SampleId::default()).unwrap()
            }
            PerfEvent::SideBand(SideBandEvent::Exit(t)) => {
                w.write_exit(&mut bytes, t, &SampleId::default()).unwrap()
            }
        }
    }
    // 4 pages: far smaller than the recording, so the ring wraps many times.
    let mut ring = RingBuffer::in_memory(4, 4096).unwrap();
    assert!(ring.reset_position(3 * ring.data_size() - 24));
    let decoder = RecordDecoder::new(layout);
    let stats = ReaderStats::default();
    let mut events = Vec::new();
    let mut offset = 0;
    while offset < bytes.len() {
        let n = ring.write_as_kernel(&bytes[offset..]);
        assert!(n > 0, "a record larger than the ring");
        offset += n;
        decoder.drain(&mut ring, &mut Vec::new(), u64::MAX, &mut events, &stats);
    }
    let counts = stats.snapshot();
    assert!(counts.wrapped_records >= 1, "{counts:?}");
    assert_eq!(counts.parse_errors, 0);
    assert_eq!(events, rec.events, "the ring round trip is lossless");

    // The daemon's LBR path: router (by LBR addresses) → worker shard.
    let binary = ProfiledBinary::load(&program.binary).unwrap();
    let id = binary.build_id().unwrap().clone();
    let live = live_counters(
        &events,
        RouteBy::BranchStack,
        ShardInput::Lbr(PerfContent::LbrStack),
        &id,
    )
    .expect("the recursion binary was aggregated");

    let options = UnwindOptions {
        content: Some(PerfContent::LbrStack),
        ..UnwindOptions::default()
    };
    let (convert, _) =
        unwinder::unwind_samples(rec.events.clone(), &binary, &binary.load_info(), &options)
            .unwrap();
    assert_eq!(live.kind, convert.kind);
    assert!(!convert.contexts.is_empty());
    assert_eq!(live, convert);
}

/// The memory budget: counters above their share of the budget lose their coldest
/// contexts (counted in `evicted_contexts`), the kept ones unchanged; a budget too small
/// for any evicts the binary (`evicted_binaries`).
#[test]
fn memory_budget_evicts_the_coldest_contexts_and_counts() {
    let _machine = e2e::support::machine_lock();
    if !corpus::tools_available(
        "memory_budget_evicts_the_coldest_contexts_and_counts",
        &["clang-19"],
    ) {
        return;
    }
    let program = corpus::program("recursion", Variant::Probe).unwrap();
    let rec = &corpus::record(&program).unwrap().recording;
    let id = ProfiledBinary::load(&program.binary)
        .unwrap()
        .build_id()
        .unwrap()
        .clone();
    let aggregate = |name: &str, budget: u64| {
        let state = state_dir(name);
        std::fs::create_dir_all(&state).unwrap();
        let mut router = Router::new(
            Path::new("/proc"),
            ProcessFilter::default(),
            RouteBy::BranchStack,
            1,
            None,
        );
        let mut worker = Worker::new(WorkerSettings {
            memory_budget_bytes: budget,
            ..WorkerSettings::unlimited(ShardInput::Lbr(PerfContent::LbrStack), state)
        });
        // Only the program's own mappings: the C library and the loader are counted too
        // (decoded from their unwind tables), and their contexts would share the budget.
        let own: Vec<PerfEvent> = rec
            .events
            .iter()
            .filter(|e| match e {
                PerfEvent::SideBand(SideBandEvent::Mmap2(m)) => {
                    Path::new(&m.filename) == program.binary
                }
                _ => true,
            })
            .cloned()
            .collect();
        for (_, g) in router.route(own, 0) {
            worker.handle(WorkItem::Samples(g));
        }
        worker.handle(WorkItem::Flush { now_secs: 0 });
        let counters = worker.counters(&id);
        (counters, worker.stats().clone())
    };
    let heat = |c: &unwinder::ContextCounters| -> u64 {
        c.ranges.values().chain(c.branches.values()).sum()
    };
    // Unbounded: every context kept, nothing evicted.
    let (all, stats) = aggregate("budget-all", u64::MAX);
    let all = all.expect("aggregated");
    assert_eq!((stats.evicted_contexts, stats.evicted_binaries), (0, 0));
    // How many contexts depends on where the period-97 sampling falls (one phase for every
    // checkout; `PGO_AGENT_CORPUS_ENV_PAD` moves it); two are enough to evict one and keep
    // one.
    assert!(all.contexts.len() >= 2, "{}", all.contexts.len());
    let bytes: u64 = all
        .contexts
        .iter()
        .map(|(k, c)| unwinder::window::context_approx_bytes(k, c) as u64)
        .sum();
    // A budget whose eviction target is the hottest context's size: it stays, the others
    // go.
    let hottest = all
        .contexts
        .iter()
        .max_by_key(|(_, c)| heat(c))
        .map(|(k, c)| unwinder::window::context_approx_bytes(k, c) as u64)
        .unwrap();
    let budget = (1..)
        .map(|i| i * COUNTER_SHARE_OF_BUDGET)
        .find(|&b| counter_budget(b).1 >= hottest)
        .unwrap();
    assert!(
        counter_budget(budget).1 < bytes,
        "{hottest} of {bytes} bytes"
    );
    let (kept, stats) = aggregate("budget-hottest", budget);
    let kept = kept.expect("the hottest contexts stay");
    assert!(!kept.contexts.is_empty() && kept.contexts.len() < all.contexts.len());
    assert_eq!(
        stats.evicted_contexts as usize,
        all.contexts.len() - kept.contexts.len()
    );
    // Kept contexts are unchanged, and none evicted was hotter than one kept.
    let coldest_kept = kept.contexts.values().map(heat).min().unwrap();
    for (k, c) in &all.contexts {
        match kept.contexts.get(k) {
            Some(kc) => assert_eq!(kc, c),
            None => assert!(heat(c) <= coldest_kept, "evicted {k:?} ({})", heat(c)),
        }
    }
    // A budget of one byte evicts the binary entirely, and says so.
    let (none, stats) = aggregate("budget-none", 1);
    assert!(none.is_none());
    assert_eq!(stats.evicted_binaries, 1);
    assert_eq!(stats.evicted_contexts as usize, all.contexts.len());
}

/// The counters the daemon's path (router → one worker with `input`) makes of `events`
/// for the binary `id`.
fn live_counters(
    events: &[PerfEvent],
    route_by: RouteBy,
    input: ShardInput,
    id: &collector::BuildId,
) -> Option<unwinder::CounterSet> {
    let mut router = Router::new(
        Path::new("/proc"),
        ProcessFilter::default(),
        route_by,
        1,
        None,
    );
    let mut worker = Worker::new(WorkerSettings::unlimited(input, std::env::temp_dir()));
    for chunk in events.chunks(300) {
        for (_, g) in router.route(chunk.to_vec(), 0) {
            worker.handle(WorkItem::Samples(g));
        }
    }
    worker.counters(id)
}

/// Stack-only samples (`perf record -e cpu-clock:u -g`, no branch stack) of a corpus probe
/// program: `convert --perfdata` counts them by leading IP as the daemon's live path does
/// with the same samples (router → worker shard in cpu-clock mode; equal unsymbolized
/// counters), and clang-19 compiles the program with the converted profile.
#[test]
fn cpu_clock_perf_data_and_script_convert_as_the_daemon_counts() {
    let _machine = e2e::support::machine_lock();
    // Not beside a daemon of another test: while a build-id reader samples, the kernel
    // flags perf's own inode-form MMAP2 records as build-id form, and perf 6.1's `perf
    // script` aborts on them (util/build-id.c).
    if !corpus::tools_available(
        "cpu_clock_perf_data_and_script_convert_as_the_daemon_counts",
        &["clang-19", "perf"],
    ) {
        return;
    }
    let program = corpus::program("recursion", Variant::Probe).unwrap();
    let dir = state_dir("cpu-clock-convert");
    let data = dir.join("cpu-clock.data");
    record_cpu_clock_stacks(&program.binary, &data);
    let live_text = live_path_counters(&data, &program.binary);

    // convert, from the file; and from `perf script` of the same file: perf prints the
    // call-chain addresses as offsets in their file, named with `-F ip,dso`.
    let script = dir.join("cpu-clock.perfscript");
    let out = run_ok(
        Command::new("perf")
            .args(["script", "-F", "ip,dso", "--show-mmap-events", "-i"])
            .arg(&data),
    );
    std::fs::write(&script, out).unwrap();
    let convert = |input: &str, path: &Path, extra: &[&str], output: &str| {
        let output = dir.join(output);
        let (path, binary) = (
            path.display().to_string(),
            program.binary.display().to_string(),
        );
        let mut args = vec!["convert", input, &path, "--binary", &binary];
        args.extend(extra);
        let out = output.display().to_string();
        args.extend(["--output", &out]);
        pgo_agent(&args);
        output
    };
    let raw = convert(
        "--perfdata",
        &data,
        &["--skip-symbolization"],
        "convert.raw",
    );
    assert_eq!(
        std::fs::read_to_string(&raw).unwrap(),
        live_text,
        "convert and the live path count the same samples alike"
    );
    let script_raw = convert(
        "--perfscript",
        &script,
        &["--skip-symbolization"],
        "convert-script.raw",
    );
    assert_eq!(
        std::fs::read_to_string(&script_raw).unwrap(),
        live_text,
        "convert of the perf script counts the samples as the live path"
    );
    let profile = convert("--perfdata", &data, &[], "cpu-clock.extbinary");
    let script_profile = convert("--perfscript", &script, &[], "cpu-clock-script.extbinary");
    assert!(
        std::fs::read(&script_profile).unwrap() == std::fs::read(&profile).unwrap(),
        "the profiles of the perf script and of the perf.data differ"
    );
    verify_reports_stack_samples(&profile, &program.binary);
    run_ok(
        Command::new("clang-19")
            .args(["-O2", "-fpseudo-probe-for-profiling", "-c", "-o"])
            .arg(dir.join("recursion.o"))
            .arg(format!("-fprofile-sample-use={}", profile.display()))
            .arg(corpus::sources_dir().join("recursion.c")),
    );
}

/// `perf record -e cpu-clock:u -g` of many short runs of `binary` (some thousand samples)
/// into `data`.
fn record_cpu_clock_stacks(binary: &Path, data: &Path) {
    let script = format!(
        "i=0; while [ $i -lt 200 ]; do {} >/dev/null; i=$((i+1)); done",
        binary.display()
    );
    run_ok(
        Command::new("perf")
            .args([
                "record",
                "-q",
                // No build-id collection at exit: perf 6.1 aborts in it (util/build-id.c)
                // now and then once the recorded processes are gone; the samples do not
                // need it.
                "--no-buildid",
                "--no-buildid-cache",
                "-e",
                "cpu-clock:u",
                "-F",
                "20000",
                "-g",
                "-o",
            ])
            .arg(data)
            .args(["--", "sh", "-c", &script]),
    );
}

/// The daemon's path over the stack samples of `data`: the events, routed by leading IP,
/// counted by a cpu-clock worker; `binary`'s unsymbolized counters.
fn live_path_counters(data: &Path, binary_path: &Path) -> String {
    let mut reader = collector::perf_data::PerfDataReader::open(data).unwrap();
    let mut events = Vec::new();
    while let Some(e) = reader.next_event().unwrap() {
        events.push(e);
    }
    let samples = events
        .iter()
        .filter(|e| matches!(e, PerfEvent::Sample(s) if s.lbr.is_empty()))
        .count();
    assert!(samples > 200, "{samples} samples");
    let binary = ProfiledBinary::load(binary_path).unwrap();
    let id = binary.build_id().unwrap().clone();
    let live = live_counters(
        &events,
        RouteBy::LeadingIp,
        ShardInput::LeadingIp {
            has_callchain: true,
        },
        &id,
    )
    .expect("the program was counted");
    assert!(!live.contexts.is_empty());
    let mut live_text = Vec::new();
    exporter::format::unsymbolized::write_unsymbolized(
        &mut live_text,
        &live,
        binary.preferred_base(),
        None,
    )
    .unwrap();
    String::from_utf8(live_text).unwrap()
}

/// `verify` says the profile is made of stack samples and, below the threshold, how many
/// times the samples it needs.
fn verify_reports_stack_samples(profile: &Path, binary: &Path) {
    let cli = daemon::parse_args(
        [
            "pgo-agent",
            "verify",
            "--profile",
            &profile.display().to_string(),
            "--binary",
            &binary.display().to_string(),
        ]
        .map(String::from)
        .to_vec(),
    )
    .unwrap();
    let daemon::cli::Command::Verify(args) = cli.command else {
        unreachable!("a verify command line")
    };
    let report = daemon::verify::verify_files(&args).unwrap();
    let d = &report.density;
    assert!(d.stack_samples_only, "{d:?}");
    let human = daemon::verify::human_report(&args, &report);
    if d.density < 50.0 {
        assert_eq!(d.more_samples_factor(), Some(50.0 / d.density));
        assert!(
            human.contains(&format!("about {:.1}x the samples", 50.0 / d.density))
                && human.contains("no call targets: samples without branch stack"),
            "{human}"
        );
    }
}

/// tests/programs/live/sort_tiny.c, built once per process.
fn sort_tiny_binary() -> PathBuf {
    live_program("sort_tiny")
}

/// Elements per sorting round of the sort program, in the live runs and the recording.
const SORT_N: &str = "600";
/// Seconds of sorting in each live run.
const SORT_SECS: &str = "3";

/// One daemon run over the sort program.
#[derive(Default)]
struct SortRun {
    /// Samples in the sort binary offered to the unwinder.
    offered: u64,
    /// Samples of the sort process offered to the unwinder, every binary.
    process_offered: u64,
    /// Samples dropped as `unwind_errors.bad_stack`.
    bad_stack: u64,
    /// `stack_repairs` by outcome.
    repairs: BTreeMap<&'static str, u64>,
    /// Samples per function of the sort binary (the function of the IP).
    per_function: BTreeMap<String, u64>,
    /// CPU seconds the sort program used (its own `clock()`), so samples the kernel took
    /// at [`config`]'s 997 Hz are about 997 per second of it.
    cpu_secs: f64,
}

impl SortRun {
    /// Samples the kernel's cpu-clock event takes of the program at 997 Hz.
    fn expected_samples(&self) -> f64 {
        SAMPLES_PER_CPU_SEC * self.cpu_secs
    }
}

/// Samples per CPU second of a program at [`config`]'s `cpu_clock_frequency_hz`.
const SAMPLES_PER_CPU_SEC: f64 = CPU_CLOCK_HZ as f64;
/// Runs of the sort program a test makes before it calls the machine too busy to measure.
const SORT_ATTEMPTS: usize = 3;
/// The fewest samples the kernel must have taken of a run for its shares to be measured.
const SORT_MIN_EXPECTED: f64 = 300.0;

/// The sort program under the daemon with `extra` config, sorting for [`SORT_SECS`]; run
/// again (up to [`SORT_ATTEMPTS`] times) while the machine gives it too little CPU to take
/// [`SORT_MIN_EXPECTED`] samples.
fn sort_tiny_run(extra: &str, name: &str) -> SortRun {
    let mut runs = Vec::new();
    for _ in 0..SORT_ATTEMPTS {
        let run = sort_tiny_run_once(extra, name);
        if run.expected_samples() >= SORT_MIN_EXPECTED {
            // The daemon saw most of what the kernel sampled: the floor follows the CPU
            // time the program got, not a fixed count a loaded machine misses.
            assert!(
                run.process_offered as f64 >= 0.8 * run.expected_samples(),
                "{} samples offered of {:.0} expected",
                run.process_offered,
                run.expected_samples()
            );
            return run;
        }
        runs.push(run.cpu_secs);
    }
    panic!("the sort program got only {runs:?} CPU s in its runs: too few samples to measure");
}

fn sort_tiny_run_once(extra: &str, name: &str) -> SortRun {
    let binary = sort_tiny_binary();
    let state = state_dir(name);
    let cfg = config(&format!("{extra}\n[filters]\ncomms = [\"sort_tiny\"]\n"));
    let daemon = RunningDaemon::start(&cfg, &state, 5);
    std::thread::sleep(std::time::Duration::from_millis(800));
    let out = Command::new(&binary)
        .args([SORT_SECS, SORT_N])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let cpu_secs: f64 = stdout
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("sort_tiny printed {stdout:?}, not `checksum cpu-seconds`"));
    let summary = daemon.join();
    if SAMPLES_PER_CPU_SEC * cpu_secs < SORT_MIN_EXPECTED {
        eprintln!("{name}: the sort program got only {cpu_secs:.2} CPU s");
        let _ = std::fs::remove_dir_all(&state);
        return SortRun {
            cpu_secs,
            ..SortRun::default()
        };
    }
    let entry = summary
        .binaries
        .iter()
        .find(|b| b.path.ends_with("sort_tiny"))
        .unwrap_or_else(|| panic!("no aggregate for sort_tiny: {:#?}", summary.binaries));
    // With the comm filter every aggregated sample is the sort program's (its own binary,
    // libc's qsort, the loader).
    let process_offered = summary.binaries.iter().map(|b| b.offered).sum();
    let run = SortRun {
        offered: entry.offered,
        process_offered,
        bad_stack: entry.unwind_errors.get("bad_stack").copied().unwrap_or(0),
        repairs: entry.stack_repairs.clone(),
        per_function: binary_samples_per_function(&summary, &binary),
        cpu_secs,
    };
    let _ = std::fs::remove_dir_all(&state);
    eprintln!(
        "{name}: offered {} ({} in every binary), bad_stack {}, {:?}, {:.2} CPU s ({:.0} samples expected), per function {:?}",
        run.offered,
        run.process_offered,
        run.bad_stack,
        run.repairs,
        run.cpu_secs,
        run.expected_samples(),
        run.per_function
    );
    run
}

/// Shares of the total of `counts`, by key.
fn shares(counts: &BTreeMap<String, u64>) -> BTreeMap<String, f64> {
    let total: u64 = counts.values().sum();
    counts
        .iter()
        .map(|(k, &v)| (k.clone(), v as f64 / total as f64))
        .collect()
}

/// Total variation distance between two share maps: half the sum of the absolute share
/// differences over every key of either (0 equal, 1 disjoint).
fn share_distance(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>) -> f64 {
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .map(|k| (a.get(k).unwrap_or(&0.0) - b.get(k).unwrap_or(&0.0)).abs())
        .sum::<f64>()
        / 2.0
}

/// Samples per function of the sort binary by the oracle: `perf record -e cpu-clock -F 997`
/// of the same sorting, `perf report --sort sym` of its binary (every sample counted at
/// its IP, none dropped for its stack).
fn sort_tiny_perf_samples() -> BTreeMap<String, u64> {
    let binary = sort_tiny_binary();
    let data = scratch_dir("live", "sort-oracle").join("perf.data");
    let out = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-F", "997", "-o"])
        .arg(&data)
        .arg(&binary)
        .args([SORT_SECS, SORT_N])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "perf record: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new("perf")
        .args(["report", "--stdio", "--no-demangle", "--sort", "sym"])
        .args(["-F", "sample,sym", "--dsos", "sort_tiny", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&data);
    let text = String::from_utf8_lossy(&out.stdout);
    let per: BTreeMap<String, u64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (n, sym) = l.split_once("[.]")?;
            Some((sym.trim().to_string(), n.trim().parse().ok()?))
        })
        .collect();
    assert!(
        !per.is_empty(),
        "no sort_tiny symbol in perf report:\n{text}"
    );
    per
}

/// Instructions executed per function of the sort binary in one sorting round of
/// [`SORT_N`] elements, by `pgo-agent record`'s exact ground truth.
fn sort_tiny_instructions() -> BTreeMap<String, u64> {
    let binary = sort_tiny_binary();
    let argv = vec![
        binary.to_string_lossy().into_owned(),
        "0".to_string(),
        SORT_N.to_string(),
    ];
    let outcome = recorder::record(&argv, &Default::default()).unwrap();
    let truth = outcome
        .truth
        .binary("sort_tiny")
        .expect("sort_tiny in truth");
    let funcs = function_symbols(&binary);
    let mut per = BTreeMap::new();
    for (a, &n) in &truth.instructions {
        let a = collector::ground_truth::parse_hex(a).unwrap();
        *per.entry(function_of(&funcs, a)).or_default() += n;
    }
    per
}

/// Issue 24: cpu-clock samples of tiny functions taken in a prologue or epilogue. With
/// llvm-profgen's rule (`stack_repair = false`) a large share is dropped as `bad_stack`;
/// with the default repair (user registers and stack words with each sample) under 1 %.
/// The per-function sample shares move toward the instruction shares `pgo-agent record`
/// measures on the same sorting round.
#[test]
fn prologue_samples_of_tiny_functions_are_repaired_live() {
    let _machine = e2e::support::machine_lock();
    if !can_sample("prologue_samples_of_tiny_functions_are_repaired_live") {
        return;
    }
    let without = sort_tiny_run("[aggregation]\nstack_repair = false\n", "sort-norepair");
    let share_without = without.bad_stack as f64 / without.offered as f64;
    assert!(
        share_without > 0.05,
        "without repair only {:.1} % dropped: the program no longer shows the case",
        share_without * 100.0
    );
    assert!(
        without.repairs.values().all(|&n| n == 0),
        "{:?}",
        without.repairs
    );

    let with = sort_tiny_run("", "sort-repair");
    let share_with = with.bad_stack as f64 / with.offered as f64;
    assert!(
        share_with < 0.01,
        "with repair {:.2} % still dropped as bad_stack",
        share_with * 100.0
    );
    let repaired = with.repairs.get("repaired").copied().unwrap_or(0) as f64;
    assert!(
        repaired > 0.5 * share_without * with.offered as f64,
        "repairs {:?} do not account for the drops without repair ({:.1} %)",
        with.repairs,
        share_without * 100.0
    );

    // The oracle: the kernel's samples of the same sorting, every one at its IP. The
    // repaired shares match it; the unrepaired ones lack the prologue and epilogue
    // samples of the tiny functions.
    let perf = shares(&sort_tiny_perf_samples());
    let (shares_without, shares_with) = (shares(&without.per_function), shares(&with.per_function));
    let (p_without, p_with) = (
        share_distance(&shares_without, &perf),
        share_distance(&shares_with, &perf),
    );
    // The exact instruction shares of one sorting round (`pgo-agent record`). cpu-clock
    // samples weigh time, so the repaired shares keep a distance to these (a tiny
    // function's call and return take more cycles per instruction than the loops); the
    // samples the repair keeps are the tiny functions' own, and bring their shares closer.
    let instructions = sort_tiny_instructions();
    for f in with.per_function.keys() {
        assert!(
            instructions.contains_key(f),
            "samples in {f}, which the recorder never saw run: {instructions:?}"
        );
    }
    let truth = shares(&instructions);
    let (i_without, i_with) = (
        share_distance(&shares_without, &truth),
        share_distance(&shares_with, &truth),
    );
    eprintln!(
        "dropped: {:.1} % without repair, {:.2} % with\n\
         perf cpu-clock shares:        {perf:.3?}\n\
         instruction shares (record):  {truth:.3?}\n\
         sample shares without repair: {shares_without:.3?}\n\
         sample shares with repair:    {shares_with:.3?}\n\
         distance to perf: {p_without:.3} without repair, {p_with:.3} with; \
         to instruction shares: {i_without:.3} without, {i_with:.3} with",
        share_without * 100.0,
        share_with * 100.0
    );
    // Two runs of about a thousand samples each: a few hundredths apart by chance.
    assert!(
        p_with < 0.1 && p_with < p_without / 2.0,
        "repaired shares are {p_with:.3} from perf's, unrepaired {p_without:.3}"
    );
    assert!(
        i_with < i_without - 0.05,
        "repaired shares are {i_with:.3} from the instruction shares, unrepaired {i_without:.3}"
    );
}

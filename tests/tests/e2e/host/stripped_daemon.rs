//! Stripped production binaries under the live daemon (issue "Production binaries").
//!
//! Corpus programs are copied under their own file names and stripped with `strip -s` (GNU
//! strip keeps the build id, `.eh_frame` and `.pseudo_probe*`); their debug files are the
//! unstripped twins' `objcopy --only-keep-debug` output, put where one route finds them:
//!
//! | build | program         | debug file                                                   |
//! |-------|-----------------|--------------------------------------------------------------|
//! | probe | `virtual_calls` | `debug_dirs`: `D/.build-id/ab/cdef….debug`                   |
//! | lines | `interp`        | `debug_dirs`: `D/.build-id/ab/cdef….debug`                   |
//! | probe | `interp`        | `.gnu_debuglink`: `EXECDIR/interp.debug`                     |
//! | lines | `virtual_calls` | `.gnu_debuglink`: `EXECDIR/.debug/virtual_calls.debug`       |
//! | probe | `unroll`        | a real debuginfod (`debuginfod -F -d :memory:` on loopback)  |
//! | lines | `unroll`        | a real debuginfod                                            |
//! | probe | `recursion`     | none                                                         |
//! | lines | `recursion`     | none                                                         |
//!
//! The probe and lines builds of a program have different build ids, so one daemon run
//! (cpu-clock mode, a comm filter, flushes every second) covers all eight: two threads run
//! the stripped programs over and over until each has enough samples.
//!
//! What is asserted:
//! * counted, not dropped: each stripped binary has at least [`FLOOR_SAMPLES`] counted
//!   samples, the router dropped none as `code_less_binary` (its counter, and
//!   `pgo_agent_events_dropped_total{reason="code_less_binary"}` absent or 0);
//! * the names report of `/api/v1/profiles` and of the worker's `<id>.json`: `source`,
//!   the exact `route`, the `debug_file` path (for debuginfod, the daemon's cache under its
//!   state dir, holding the file the server has) and the exact `tried` list;
//! * served symbolized, equal to the unstripped twin on the same samples. Live samples
//!   differ run to run, so the twin is given the very aggregate the daemon served:
//!   - probe builds: the served text profile equals `pgo-agent merge` of the served
//!     unsymbolized aggregate with the unstripped twin, byte for byte and as canonicalised
//!     by `llvm-profdata-19 merge --sample --text`; every counted range starts where the
//!     twin puts the sampled block's probe (counted as the twin counts);
//!   - line-table builds (line contexts are kept named in the aggregate): the served
//!     aggregate equals the one written from the same counters (the `<id>.state` windows,
//!     raw addresses) with the unstripped twin, and the served text profile the one the
//!     twin makes from those contexts;
//! * no debug file: listed `address_only` with every candidate tried, served as the
//!   unsymbolized aggregate, each sample counted at an instruction of the twin's code.
//!
//! Skipped (`SKIPPED <test>: ...`) when not root or when clang-19, llvm-profdata-19,
//! debuginfod, strip or objcopy is missing.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use daemon::config::Config;
use daemon::merge::{write_counters, MergeFormat};
use daemon::run::persist::read_state;
use daemon::run::RunSummary;
use e2e::agent::RunningDaemon;
use e2e::corpus::{self, Variant};
use e2e::http::{http_get, HttpResponse};
use e2e::support::{
    build_id_hex, canonical_profile, cli, free_port, llvm as run_tool, read_text, scratch_dir,
    wait_for,
};
use exporter::format::unsymbolized::read_unsymbolized;
use object::{Object, ObjectSymbol};
use serde_json::Value;
use std::io::Read;
use symbolizer::ProfiledBinary;
use unwinder::{CodeLayout, CounterSet};

/// cpu-clock samples per second per CPU: the corpus programs run for about a millisecond
/// of their own code per run, so the daemon's default would give a few samples a second.
const FREQUENCY_HZ: u64 = 10_000;
/// A stripped program is run until its aggregate has this many samples...
const TARGET_SAMPLES: u64 = 100;
/// ...or until the loops have run this long.
const MAX_LOOP: Duration = Duration::from_secs(30);
/// Samples each stripped binary must have had counted.
const FLOOR_SAMPLES: u64 = 20;

/// How a stripped binary's debug file is to be found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    DebugDirs,
    GnuDebuglink,
    Debuginfod,
    /// No debug file anywhere.
    Nowhere,
}

impl Route {
    /// The `names.route` the daemon reports (`nowhere` names only directories and cases).
    fn label(self) -> &'static str {
        match self {
            Route::DebugDirs => "debug_dirs",
            Route::GnuDebuglink => "gnu_debuglink",
            Route::Debuginfod => "debuginfod",
            Route::Nowhere => "nowhere",
        }
    }
}

/// The binaries of the run (see the module docs).
const CASES: [(Variant, &str, Route); 8] = [
    (Variant::Probe, "virtual_calls", Route::DebugDirs),
    (Variant::Lines, "interp", Route::DebugDirs),
    (Variant::Probe, "interp", Route::GnuDebuglink),
    (Variant::Lines, "virtual_calls", Route::GnuDebuglink),
    (Variant::Probe, "unroll", Route::Debuginfod),
    (Variant::Lines, "unroll", Route::Debuginfod),
    (Variant::Probe, "recursion", Route::Nowhere),
    (Variant::Lines, "recursion", Route::Nowhere),
];

/// One stripped binary and its twin.
struct Case {
    variant: Variant,
    name: &'static str,
    route: Route,
    /// The corpus binary (unstripped).
    twin: PathBuf,
    /// The stripped copy that runs (same file name).
    stripped: PathBuf,
    /// The debug file made for it (for debuginfod: the file the server has).
    debug_file: Option<PathBuf>,
    /// Where the daemon is expected to load the debug file from.
    expected_debug_file: Option<PathBuf>,
    hex: String,
}

impl Case {
    fn label(&self) -> String {
        format!("{}/{} via {}", self.variant, self.name, self.route.label())
    }
}

/// What the daemon served for one binary, fetched while it ran.
struct Served {
    /// Its `/api/v1/profiles` entry.
    listed: Value,
    /// `?format=unsymbolized`.
    unsymbolized: String,
    /// `?format=text`: the `x-pgo-profile-format` served, and the bytes.
    text_format: String,
    text: String,
    /// `?format=pprof`.
    pprof: Vec<u8>,
    /// `/flamegraph.svg`.
    flamegraph: String,
}

/// The one daemon run all tests look at.
struct Fixture {
    dir: PathBuf,
    state: PathBuf,
    debug_dir: PathBuf,
    debuginfod_url: String,
    cases: Vec<Case>,
    served: Vec<Served>,
    /// The worker's `<id>.json` of each case, after the run.
    worker_meta: Vec<Value>,
    /// `/metrics` at the end of the run.
    metrics: String,
    summary: RunSummary,
}

impl Fixture {
    fn case(&self, variant: Variant, route: Route) -> (&Case, &Served, &Value) {
        let i = self
            .cases
            .iter()
            .position(|c| c.variant == variant && c.route == route)
            .expect("a case of this build and route");
        (&self.cases[i], &self.served[i], &self.worker_meta[i])
    }

    /// `D/.build-id/ab/cdef….debug` and `D/<hex>`: the debug_dirs candidates of `hex`.
    fn build_id_candidates(&self, hex: &str) -> [PathBuf; 2] {
        [
            self.debug_dir
                .join(".build-id")
                .join(&hex[..2])
                .join(format!("{}.debug", &hex[2..])),
            self.debug_dir.join(hex),
        ]
    }
}

/// The shared run, made by the first test that asks (the others wait for it); `None`
/// (after printing `SKIPPED test: ...`) when it cannot run here.
fn fixture(test: &str) -> Option<&'static Fixture> {
    let tools = [
        "clang-19",
        "clang++-19",
        "llvm-profdata-19",
        "debuginfod",
        "strip",
        "objcopy",
    ];
    if !e2e::support::can_sample(test, &tools) {
        return None;
    }
    static FIXTURE: OnceLock<Result<Fixture, String>> = OnceLock::new();
    let made = FIXTURE.get_or_init(|| {
        std::panic::catch_unwind(make_fixture).map_err(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into())
        })
    });
    match made {
        Ok(f) => Some(f),
        Err(e) => panic!("the daemon run shared by these tests failed: {e}"),
    }
}

/// Strips a copy of the corpus program and puts its debug file where `route` finds it.
fn prepare(dir: &Path, state: &Path, variant: Variant, name: &'static str, route: Route) -> Case {
    let twin = corpus::program(name, variant).unwrap().binary;
    let hex = build_id_hex(&twin);
    let exec_dir = dir.join("run").join(format!("{variant}-{}", route.label()));
    std::fs::create_dir_all(&exec_dir).unwrap();
    let stripped = exec_dir.join(name);
    run_tool(
        "strip",
        &[
            "-s".as_ref(),
            "-o".as_ref(),
            stripped.as_os_str(),
            twin.as_os_str(),
        ],
    );
    let keep_debug = |out: &Path| {
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        run_tool(
            "objcopy",
            &[
                "--only-keep-debug".as_ref(),
                twin.as_os_str(),
                out.as_os_str(),
            ],
        );
    };
    let (debug_file, expected) = match route {
        Route::DebugDirs => {
            let p = dir
                .join("debug/.build-id")
                .join(&hex[..2])
                .join(format!("{}.debug", &hex[2..]));
            keep_debug(&p);
            (Some(p.clone()), Some(p))
        }
        Route::GnuDebuglink => {
            // gdb's first two places: beside the binary, and in its .debug/.
            let p = match variant {
                Variant::Probe => exec_dir.join(format!("{name}.debug")),
                Variant::Lines => exec_dir.join(".debug").join(format!("{name}.debug")),
            };
            keep_debug(&p);
            run_tool(
                "objcopy",
                &[
                    format!("--add-gnu-debuglink={}", p.display()).as_ref(),
                    stripped.as_os_str(),
                ],
            );
            (Some(p.clone()), Some(p))
        }
        Route::Debuginfod => {
            let p = dir
                .join("debuginfod-files")
                .join(format!("{variant}-{name}.debug"));
            keep_debug(&p);
            (
                Some(p),
                Some(state.join("debuginfod").join(&hex).join("debuginfo")),
            )
        }
        Route::Nowhere => (None, None),
    };
    // The stripped copy keeps the build id, .eh_frame and the probes, and lacks names; the
    // debug file has them.
    assert_eq!(build_id_hex(&stripped), hex, "{}", stripped.display());
    let data = std::fs::read(&stripped).unwrap();
    assert!(symbolizer::binary::lacks_names(&data));
    let file = object::File::parse(&*data).unwrap();
    let kept = [".eh_frame", ".pseudo_probe", ".pseudo_probe_desc"];
    let kept = if variant == Variant::Probe {
        &kept[..]
    } else {
        &kept[..1]
    };
    for section in kept {
        assert!(
            file.section_by_name(section).is_some(),
            "{}: no {section}",
            stripped.display()
        );
    }
    if let Some(d) = &debug_file {
        assert_eq!(build_id_hex(d), hex, "{}", d.display());
        assert!(symbolizer::debug_file::has_symbols_or_dwarf(
            &std::fs::read(d).unwrap()
        ));
    }
    Case {
        variant,
        name,
        route,
        twin,
        stripped,
        debug_file,
        expected_debug_file: expected,
        hex,
    }
}

/// A `debuginfod` serving a directory on loopback, killed (by its pid) when dropped.
struct DebuginfodServer {
    child: Child,
    url: String,
}

impl DebuginfodServer {
    fn start(files: &Path, log: &Path) -> DebuginfodServer {
        let port = free_port();
        let log = std::fs::File::create(log).unwrap();
        let child = Command::new("debuginfod")
            .args(["-F", "-d", ":memory:", "-p", &port.to_string()])
            .args(["-t", "0", "-g", "0"])
            .arg(files)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting debuginfod");
        DebuginfodServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    fn status(&self, hex: &str) -> Option<u16> {
        http_get(&format!("{}/buildid/{hex}/debuginfo", self.url))
            .ok()
            .map(|r| r.status)
    }
}

impl Drop for DebuginfodServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET `path` of `daemon`, which must answer `200 OK`: (`x-pgo-profile-format` header,
/// body).
fn get_ok(daemon: &RunningDaemon, path: &str) -> (String, String) {
    match daemon.get(path) {
        Ok(r @ HttpResponse { status: 200, .. }) => {
            (r.header("x-pgo-profile-format").to_string(), r.body)
        }
        other => panic!("GET {path}: {other:?}"),
    }
}

/// The `/api/v1/profiles` entries by build id.
fn listed(daemon: &RunningDaemon) -> Option<HashMap<String, Value>> {
    let r = daemon.get("/api/v1/profiles").ok()?;
    let list: Value = serde_json::from_str(&r.body)
        .ok()
        .filter(|_| r.status == 200)?;
    Some(
        list["profiles"]
            .as_array()?
            .iter()
            .map(|p| (p["build_id"].as_str().unwrap_or("").to_string(), p.clone()))
            .collect(),
    )
}

fn samples_of(list: &HashMap<String, Value>, hex: &str) -> u64 {
    list.get(hex)
        .and_then(|p| p["samples"].as_u64())
        .unwrap_or(0)
}

/// Two lanes (one a core) run the stripped programs that still lack samples, in turn,
/// until each has [`TARGET_SAMPLES`] or [`MAX_LOOP`] has passed: the programs that gain
/// samples slowly get the lanes at the end. How many runs they made.
fn run_until_sampled(daemon: &RunningDaemon, cases: &[Case]) -> u64 {
    let programs: Arc<Vec<PathBuf>> = Arc::new(cases.iter().map(|c| c.stripped.clone()).collect());
    let done: Arc<Vec<AtomicBool>> =
        Arc::new(cases.iter().map(|_| AtomicBool::new(false)).collect());
    let lanes: Vec<_> = (0..2)
        .map(|lane| {
            let (programs, done) = (programs.clone(), done.clone());
            std::thread::spawn(move || {
                let mut runs = 0u64;
                let n = programs.len();
                for i in (lane * n / 2..).map(|i| i % n) {
                    if done.iter().all(|d| d.load(Ordering::SeqCst)) {
                        break;
                    }
                    if done[i].load(Ordering::SeqCst) {
                        continue;
                    }
                    let p = &programs[i];
                    let status = Command::new(p)
                        .stdout(Stdio::null())
                        .status()
                        .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                    assert!(status.success(), "{}: {status}", p.display());
                    runs += 1;
                }
                runs
            })
        })
        .collect();
    wait_for(MAX_LOOP, || {
        let list = listed(daemon)?;
        for (c, d) in cases.iter().zip(done.iter()) {
            if samples_of(&list, &c.hex) >= TARGET_SAMPLES {
                d.store(true, Ordering::SeqCst);
            }
        }
        done.iter().all(|d| d.load(Ordering::SeqCst)).then_some(())
    });
    for d in done.iter() {
        d.store(true, Ordering::SeqCst);
    }
    lanes.into_iter().map(|t| t.join().unwrap()).sum()
}

fn make_fixture() -> Fixture {
    let started = Instant::now();
    let mut phases: Vec<(&str, f64)> = Vec::new();
    let mut phase = |name: &'static str| phases.push((name, started.elapsed().as_secs_f64()));
    let dir = scratch_dir("stripped", "daemon");
    let state = dir.join("state");
    let debug_dir = dir.join("debug");
    std::fs::create_dir_all(debug_dir.join(".build-id")).unwrap();
    std::fs::create_dir_all(dir.join("debuginfod-files")).unwrap();
    let cases: Vec<Case> = CASES
        .iter()
        .map(|&(variant, name, route)| prepare(&dir, &state, variant, name, route))
        .collect();

    phase("prepared");
    let server =
        DebuginfodServer::start(&dir.join("debuginfod-files"), &dir.join("debuginfod.log"));
    for c in cases.iter().filter(|c| c.route == Route::Debuginfod) {
        wait_for(Duration::from_secs(30), || {
            (server.status(&c.hex) == Some(200)).then_some(())
        })
        .unwrap_or_else(|| {
            panic!(
                "debuginfod never served {} ({}):\n{}",
                c.label(),
                c.hex,
                read_text(&dir.join("debuginfod.log"))
            )
        });
    }
    for c in cases.iter().filter(|c| c.route != Route::Debuginfod) {
        assert_eq!(server.status(&c.hex), Some(404), "{}", c.label());
    }

    phase("debuginfod serving");
    let mut comms: Vec<&str> = cases.iter().map(|c| c.name).collect();
    comms.sort();
    comms.dedup();
    let config_text = format!(
        "[sampling]\nmodes = [\"cpu_clock\"]\ncpu_clock_frequency_hz = {FREQUENCY_HZ}\n\
         [filters]\ncomms = {comms:?}\n\
         [output]\nflush_interval_secs = 1\ndebug_dirs = [{debug_dir:?}]\n\
         debuginfod_urls = [{url:?}]\n",
        debug_dir = debug_dir.display().to_string(),
        url = server.url,
    );
    let config = Config::parse(&config_text, Path::new("stripped-daemon-test.toml")).unwrap();
    let daemon = RunningDaemon::serve(&config, &state, 120);

    phase("daemon up");
    let runs = run_until_sampled(&daemon, &cases);
    phase("loops");

    // Wait until the last samples are flushed: two listings a flush apart agree (on a busy
    // machine the daemon can be seconds behind), and no debuginfod fetch is under way.
    let mut last = None;
    let settled = wait_for(Duration::from_secs(45), || {
        std::thread::sleep(Duration::from_millis(1100));
        let list = listed(&daemon)?;
        let now: Vec<u64> = cases.iter().map(|c| samples_of(&list, &c.hex)).collect();
        let same = last.as_ref() == Some(&now);
        last = Some(now);
        let fetching = list.values().any(|p| {
            p["names"]["tried"].as_array().is_some_and(|tried| {
                tried
                    .iter()
                    .any(|t| t.as_str().is_some_and(|t| t.contains("being fetched")))
            })
        });
        (same && !fetching).then_some(list)
    })
    .expect("the aggregates never settled");
    phase("settled");
    let served: Vec<Served> = cases
        .iter()
        .map(|c| {
            let listed = settled
                .get(&c.hex)
                .unwrap_or_else(|| panic!("{} ({}) is not listed: {settled:#?}", c.label(), c.hex))
                .clone();
            let uri = format!("/api/v1/profiles/{}", c.hex);
            let (format, unsymbolized) = get_ok(&daemon, &format!("{uri}?format=unsymbolized"));
            assert_eq!(format, "unsymbolized");
            let (text_format, text) = get_ok(&daemon, &format!("{uri}?format=text"));
            let mut pprof = Vec::new();
            ureq::get(&daemon.url(&format!("{uri}?format=pprof")))
                .call()
                .unwrap_or_else(|e| panic!("GET {uri}?format=pprof: {e}"))
                .into_reader()
                .read_to_end(&mut pprof)
                .unwrap();
            let (_, flamegraph) = get_ok(&daemon, &format!("{uri}/flamegraph.svg"));
            Served {
                listed,
                unsymbolized,
                text_format,
                text,
                pprof,
                flamegraph,
            }
        })
        .collect();
    phase("served");
    let (_, metrics) = get_ok(&daemon, "/metrics");
    phase("metrics");
    let summary = daemon.stop();
    phase("stopped");
    let debuginfod_url = server.url.clone();
    drop(server);

    // The final flush wrote nothing new: the state files are what was served.
    let mut worker_meta = Vec::new();
    for (c, s) in cases.iter().zip(&served) {
        let on_disk = read_text(&state.join(format!("{}.unsymbolized", c.hex)));
        assert!(
            on_disk == s.unsymbolized,
            "{}: the aggregate changed after it was served",
            c.label()
        );
        let meta = read_text(&state.join(format!("{}.json", c.hex)));
        worker_meta.push(serde_json::from_str(&meta).unwrap());
    }
    eprintln!(
        "stripped daemon run: {runs} runs; at {}; samples: {}",
        phases
            .iter()
            .map(|(name, secs)| format!("{secs:.1} s {name}"))
            .collect::<Vec<_>>()
            .join(", "),
        cases
            .iter()
            .map(|c| format!("{} {}", c.label(), samples_of(&settled, &c.hex)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Fixture {
        dir,
        state,
        debug_dir,
        debuginfod_url,
        cases,
        served,
        worker_meta,
        metrics,
        summary,
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// The candidates the finder must report as tried before it finds `case`'s debug file
/// (or gives up), in its search order.
fn expected_tried(fx: &Fixture, case: &Case) -> Vec<String> {
    let not_found = |p: &Path| format!("{}: not found", p.display());
    let [by_id, flat] = fx.build_id_candidates(&case.hex);
    let no_link = format!("{}: has no .gnu_debuglink", case.stripped.display());
    match (case.route, case.variant) {
        (Route::DebugDirs, _) => Vec::new(),
        (Route::GnuDebuglink, Variant::Probe) => vec![not_found(&by_id), not_found(&flat)],
        (Route::GnuDebuglink, Variant::Lines) => vec![
            not_found(&by_id),
            not_found(&flat),
            not_found(&case.stripped.with_file_name(format!("{}.debug", case.name))),
        ],
        (Route::Debuginfod, _) => vec![not_found(&by_id), not_found(&flat), no_link],
        (Route::Nowhere, _) => vec![
            not_found(&by_id),
            not_found(&flat),
            no_link,
            format!("debuginfod {}: 404", fx.debuginfod_url),
        ],
    }
}

/// The canonical text form of a sample profile ([`canonical_profile`] of it, written to
/// `<label>.prof.txt`).
fn canonical(fx: &Fixture, label: &str, text: &str) -> String {
    let input = fx.dir.join(format!("{label}.prof.txt"));
    std::fs::write(&input, text).unwrap();
    canonical_profile(&input)
}

/// The names of the functions in `path`'s `.symtab`.
fn function_symbols(path: &Path) -> HashSet<String> {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text)
        .filter_map(|s| Some(s.name().ok()?.to_string()))
        .collect()
}

/// Checks what the daemon says and serves for a stripped binary whose debug file it found
/// through `route`: the names report, and a profile equal to the unstripped twin's on the
/// same samples.
fn assert_symbolized_through(fx: &Fixture, variant: Variant, route: Route) {
    let (case, served, meta) = fx.case(variant, route);
    let label = case.label();
    let listed = &served.listed;
    let probe = variant == Variant::Probe;

    // The report: a debug file, found this way, at this path, after these candidates.
    let expected_file = case
        .expected_debug_file
        .as_ref()
        .unwrap()
        .display()
        .to_string();
    let names = &listed["names"];
    assert_eq!(names["source"], "debug_file", "{label}: {listed:#}");
    assert_eq!(names["route"], route.label(), "{label}: {listed:#}");
    assert_eq!(
        names["debug_file"],
        expected_file.as_str(),
        "{label}: {listed:#}"
    );
    assert_eq!(
        strings(&names["tried"]),
        expected_tried(fx, case),
        "{label}"
    );
    assert_eq!(&meta["names"], names, "{label}: the worker's <id>.json");
    assert_eq!(meta["path"], case.stripped.display().to_string().as_str());
    if route == Route::Debuginfod {
        // The file the server has, fetched into the daemon's cache.
        let fetched = std::fs::read(case.expected_debug_file.as_ref().unwrap()).unwrap();
        let original = std::fs::read(case.debug_file.as_ref().unwrap()).unwrap();
        assert!(
            fetched == original,
            "{label}: the cached debug file differs"
        );
    }
    assert_eq!(listed["has_pseudo_probes"], probe, "{label}");
    assert_eq!(
        listed["kind"],
        if probe {
            "probe_context"
        } else {
            "line_context"
        },
        "{label}"
    );
    assert!(
        listed["samples"].as_u64().unwrap() >= FLOOR_SAMPLES,
        "{label}: {listed:#}"
    );

    if probe {
        assert_probe_profile_is_the_twins(fx, case, served);
    } else {
        assert_line_profile_is_the_twins(fx, case, served);
    }
}

/// What both twin checks start from: the served entry, symbolized and served as text, and
/// the unstripped twin with its preferred base and function names.
struct Twin<'s> {
    label: String,
    listed: &'s Value,
    twin: ProfiledBinary,
    base: u64,
    functions: HashSet<String>,
}

impl<'s> Twin<'s> {
    fn of(case: &Case, served: &'s Served) -> Twin<'s> {
        let label = case.label();
        assert_eq!(served.listed["symbolization"], "symbolized", "{label}");
        assert_eq!(served.text_format, "text", "{label}");
        let twin = ProfiledBinary::load(&case.twin).unwrap();
        Twin {
            base: twin.preferred_base(),
            functions: function_symbols(&case.twin),
            listed: &served.listed,
            label,
            twin,
        }
    }
}

/// A probe build: the served text profile is `pgo-agent merge` of the served aggregate with
/// the unstripped twin, byte for byte and canonicalised; each range is counted as the twin
/// counts it.
fn assert_probe_profile_is_the_twins(fx: &Fixture, case: &Case, served: &Served) {
    let variant = case.variant;
    let Twin {
        label,
        listed,
        twin,
        base,
        functions,
    } = Twin::of(case, served);
    // The same served aggregate, symbolized with the unstripped twin.
    let unsym = fx
        .dir
        .join(format!("{}-{}.unsymbolized", variant, case.name));
    std::fs::write(&unsym, &served.unsymbolized).unwrap();
    let twin_text = fx.dir.join(format!("{}-{}.twin.txt", variant, case.name));
    cli(&[
        "merge",
        unsym.to_str().unwrap(),
        "--binary",
        case.twin.to_str().unwrap(),
        "--build-id",
        &case.hex,
        "--format",
        "text",
        "-o",
        twin_text.to_str().unwrap(),
    ]);
    let twin_text = read_text(&twin_text);
    // Not empty: it names functions of the program, with samples.
    let named: Vec<&str> = twin_text
        .lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| {
            let mut parts = l.rsplitn(3, ':');
            let (_head, total, name) = (parts.next()?, parts.next()?, parts.next()?);
            (total.parse::<u64>().ok()? > 0).then_some(name)
        })
        .filter(|name| functions.contains(*name))
        .collect();
    assert!(!named.is_empty(), "{label}: {twin_text}");
    let tag = format!("{}-{}", variant, case.name);
    let served_canonical = canonical(fx, &format!("{tag}.served"), &served.text);
    let twin_canonical = canonical(fx, &format!("{tag}.twin"), &twin_text);
    assert!(
        served_canonical == twin_canonical,
        "{label}: the served profile differs from the twin's on the same samples:\n\
         served:\n{served_canonical}\ntwin:\n{twin_canonical}"
    );
    assert!(
        served.text == twin_text,
        "{label}: not byte-equal to the twin's"
    );
    // Counted as the twin counts: each range runs from the twin's block probe before
    // the sampled address to it. Through debuginfod, the samples a worker counted while
    // the file was being fetched are kept by address (a range of the sampled address
    // alone), the rest as the twin counts them.
    let counters = read_unsymbolized(&served.unsymbolized, base)
        .unwrap()
        .to_counter_set(base)
        .unwrap();
    let (mut total, mut anchored) = (0, 0);
    for c in counters.contexts.values() {
        for (&(start, end), &n) in &c.ranges {
            assert!(twin.is_code(end), "{label}: {end:#x} is not code");
            let anchor = twin.block_probe_anchor(end).unwrap_or(end);
            if case.route == Route::Debuginfod && start == end {
                total += n;
                continue;
            }
            assert_eq!(start, anchor, "{label}: range {start:#x}-{end:#x}");
            anchored += n;
            total += n;
        }
    }
    assert_eq!(total, listed["samples"].as_u64().unwrap(), "{label}");
    assert!(
        anchored * 2 > total,
        "{label}: most samples are counted with the debug file's names ({anchored} of {total})"
    );
}

/// A line-table build: the served text profile is the one the twin makes from the served
/// contexts, and the served aggregate the one written from the same counters with the twin.
fn assert_line_profile_is_the_twins(fx: &Fixture, case: &Case, served: &Served) {
    let Twin {
        label,
        listed: _,
        twin,
        base,
        functions,
    } = Twin::of(case, served);
    // Line contexts are kept named in the aggregate; the text profile is made from them
    // with the binary as `convert --unsymbolized-profile` makes it.
    let contexts = read_unsymbolized(&served.unsymbolized, base)
        .unwrap()
        .line_contexts()
        .expect("named line contexts");
    let profile = symbolizer::generate::generate_line_profile_of_contexts(
        &twin,
        &contexts,
        &symbolizer::generate::GenerateOptions::default(),
    );
    let mut twin_text = Vec::new();
    exporter::format::llvm_text::write(&profile, &mut twin_text).unwrap();
    assert!(
        served.text.as_bytes() == twin_text.as_slice() && !twin_text.is_empty(),
        "{label}: the served text differs from the twin's:\n{}",
        served.text
    );
    // Not empty: its contexts name functions of the program.
    let named = served
        .unsymbolized
        .lines()
        .filter_map(|l| l.strip_prefix('[')?.strip_suffix(']'))
        .flat_map(|context| context.split(" @ "))
        .filter(|frame| functions.contains(frame.split(':').next().unwrap()))
        .count();
    assert!(named > 0, "{label}: {}", served.unsymbolized);
    // The same counters (the state file's windows, raw addresses), written with the
    // unstripped twin.
    let state = read_state(&fx.state.join(format!("{}.state", case.hex))).unwrap();
    let mut counters = CounterSet::new(state.kind);
    for w in &state.windows {
        counters.merge(&w.counters);
    }
    let mut twin_profile = Vec::new();
    write_counters(
        &counters,
        Some(&twin),
        base,
        MergeFormat::Unsymbolized,
        &mut twin_profile,
    )
    .unwrap();
    let twin_profile = String::from_utf8(twin_profile).unwrap();
    assert!(
        served.unsymbolized == twin_profile,
        "{label}: the served profile differs from the twin's on the same samples:\n\
         served:\n{}\ntwin:\n{twin_profile}",
        served.unsymbolized
    );
}

#[test]
fn stripped_binaries_are_counted_not_dropped() {
    let _machine = e2e::support::machine_lock();
    let Some(fx) = fixture("stripped_binaries_are_counted_not_dropped") else {
        return;
    };
    assert_eq!(
        fx.summary.router.code_less_binary, 0,
        "{:#?}",
        fx.summary.router
    );
    let code_less: Vec<&str> = fx
        .metrics
        .lines()
        .filter(|l| l.starts_with("pgo_agent_events_dropped_total{reason=\"code_less_binary\""))
        .collect();
    assert!(code_less.iter().all(|l| l.ends_with(" 0")), "{code_less:?}");
    for c in &fx.cases {
        let b = fx
            .summary
            .binaries
            .iter()
            .find(|b| b.build_id == c.hex)
            .unwrap_or_else(|| panic!("no aggregate for {}", c.label()));
        assert_eq!(b.path, c.stripped.display().to_string());
        assert!(
            b.counted >= FLOOR_SAMPLES && b.samples >= FLOOR_SAMPLES,
            "{}: {b:#?}",
            c.label()
        );
        assert!(
            fx.metrics.contains(&format!(
                "pgo_agent_binary_samples{{build_id=\"{}\"}}",
                c.hex
            )),
            "{}",
            c.label()
        );
    }
}

/// [`assert_symbolized_through`] `route` for the probe and the line-table build, the
/// machine held (skipped when the shared run cannot run here).
fn both_builds_symbolized_through(test: &str, route: Route) {
    let Some(fx) = fixture(test) else {
        return;
    };
    for variant in Variant::ALL {
        assert_symbolized_through(fx, variant, route);
    }
}

#[test]
fn debug_file_in_debug_dirs() {
    let _machine = e2e::support::machine_lock();
    both_builds_symbolized_through("debug_file_in_debug_dirs", Route::DebugDirs);
}

#[test]
fn debug_file_by_gnu_debuglink() {
    let _machine = e2e::support::machine_lock();
    both_builds_symbolized_through("debug_file_by_gnu_debuglink", Route::GnuDebuglink);
}

#[test]
fn debug_file_from_debuginfod() {
    let _machine = e2e::support::machine_lock();
    both_builds_symbolized_through("debug_file_from_debuginfod", Route::Debuginfod);
}

#[test]
fn without_debug_file_served_by_address_with_the_reason() {
    let _machine = e2e::support::machine_lock();
    let Some(fx) = fixture("without_debug_file_served_by_address_with_the_reason") else {
        return;
    };
    for variant in Variant::ALL {
        let (case, served, meta) = fx.case(variant, Route::Nowhere);
        let label = case.label();
        let listed = &served.listed;
        assert_eq!(
            listed["symbolization"], "address_only",
            "{label}: {listed:#}"
        );
        let names = &listed["names"];
        assert_eq!(names["source"], "address_only", "{label}: {listed:#}");
        assert!(names.get("route").is_none() && names.get("debug_file").is_none());
        assert_eq!(
            strings(&names["tried"]),
            expected_tried(fx, case),
            "{label}"
        );
        assert_eq!(&meta["names"], names, "{label}: the worker's <id>.json");
        // Served as it is kept: by address.
        assert_eq!(served.text_format, "unsymbolized", "{label}");
        assert!(served.text == served.unsymbolized, "{label}");
        // Counted by address: every sample at an instruction of the twin's code.
        let samples = listed["samples"].as_u64().unwrap();
        assert!(samples >= FLOOR_SAMPLES, "{label}: {listed:#}");
        let twin = ProfiledBinary::load(&case.twin).unwrap();
        let base = twin.preferred_base();
        let profile = read_unsymbolized(&served.unsymbolized, base).unwrap();
        let mut total = 0;
        for c in profile.contexts.values() {
            for (&(_, end), &n) in &c.ranges {
                assert!(twin.is_code(end), "{label}: {end:#x} is not code");
                total += n;
            }
        }
        assert_eq!(total, samples, "{label}");
        // pprof too, by address (functions in hex), under the build id's mapping.
        let pprof = exporter::format::pprof::from_bytes(&served.pprof)
            .unwrap_or_else(|e| panic!("{label}: pprof: {e}"));
        let values: i64 = pprof.sample.iter().map(|s| s.value[0]).sum();
        assert_eq!(values as u64, samples, "{label}");
        let mapping = &pprof.mapping[0];
        assert_eq!(
            pprof.string_table[mapping.build_id as usize], case.hex,
            "{label}"
        );
        assert!(
            pprof
                .function
                .iter()
                .all(|f| pprof.string_table[f.name as usize].starts_with("0x")),
            "{label}: an address-only binary names no function"
        );
        // Each location's function is the hex start of the twin's function there (the
        // `.eh_frame` extent), so a function's samples add up under one frame.
        let function_names: std::collections::HashMap<u64, &str> = pprof
            .function
            .iter()
            .map(|f| (f.id, pprof.string_table[f.name as usize].as_str()))
            .collect();
        for loc in &pprof.location {
            let start = twin.func_range_at(loc.address).map(|r| r.start);
            assert_eq!(
                function_names[&loc.line[0].function_id],
                format!("0x{:x}", start.unwrap_or(loc.address)),
                "{label}: location {:#x}",
                loc.address
            );
        }
        assert!(
            pprof.function.len() < pprof.location.len(),
            "{label}: {} functions for {} locations",
            pprof.function.len(),
            pprof.location.len()
        );
        // The flame graph's frames are the same functions: each the start of one of the
        // twin's functions, or an address outside all of them (`_start`, which has no
        // DWARF).
        let frames: HashSet<&str> = served
            .flamegraph
            .split("<title>")
            .skip(1)
            .filter_map(|t| t.split(" (").next())
            .filter(|f| *f != "all")
            .collect();
        assert!(!frames.is_empty(), "{label}: {}", served.flamegraph);
        for f in frames {
            let start = f
                .strip_prefix("0x")
                .and_then(|h| u64::from_str_radix(h, 16).ok())
                .unwrap_or_else(|| panic!("{label}: flame graph frame {f:?}"));
            assert!(
                twin.func_range_at(start).is_none_or(|r| r.start == start),
                "{label}: flame graph frame {f} is inside a function, not its start"
            );
        }
    }
}

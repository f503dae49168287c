//! The ClickHouse sink and `pull --clickhouse` (issue 10) against Debian's
//! clickhouse-server (18.16), started by each test on loopback with its own config, ports
//! and data dir, and stopped at the end.
//!
//! * Two hosts hold disjoint halves of one recording (every other sample; side-band events
//!   in both), cut into windows; host A delivers through [`Sink`] directly, host B through
//!   the daemon's path (the worker's hand-off of closed windows to the sink thread). `pull
//!   --clickhouse` must equal `convert` of the whole recording: unsymbolized byte for
//!   byte, text and extbinary identical after `llvm-profdata-19 merge --sample --text`.
//! * Outage: the server is stopped while windows close, restarted; the pulled counters
//!   are exact. A retry of a delivered window and a half-inserted window do not count
//!   twice.
//! * Spool full: the oldest windows are dropped and counted; the rest are exact.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use collector::PerfEvent;
use daemon::sink::clickhouse::{encode_window, insert_window, ClickHouseTarget, ClosedWindow};
use daemon::sink::{hand_closed_windows, spawn, spool, Sink};
use e2e::agent::{cpu_clock_config, RunningDaemon};
use e2e::corpus::{self, Variant};
use e2e::http::http_get_within;
use e2e::support::{build_spin, canonical_profile, cli, free_port, scratch_dir};
use exporter::format::unsymbolized::write_unsymbolized;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use symbolizer::ProfiledBinary;
use unwinder::window::{WindowSettings, WindowedCounters};
use unwinder::{unwind_samples, CounterSet, UnwindOptions};

const SERVER: &str = "/usr/sbin/clickhouse-server";

fn available(test: &str) -> bool {
    if !Path::new(SERVER).is_file() {
        eprintln!("SKIPPED {test}: {SERVER} missing (apt-get install clickhouse-server)");
        return false;
    }
    corpus::tools_available(test, &["clang-19", "llvm-profdata-19"])
}

/// A clickhouse-server of our own: config, users, data, logs under `dir`; loopback only.
struct Server {
    dir: PathBuf,
    http: u16,
    child: Option<Child>,
}

impl Server {
    fn start(dir: &Path) -> Server {
        let (http, tcp) = (free_port(), free_port());
        std::fs::create_dir_all(dir.join("log")).unwrap();
        let d = dir.display();
        std::fs::write(
            dir.join("config.xml"),
            format!(
                r#"<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>{d}/log/server.log</log><errorlog>{d}/log/err.log</errorlog></logger>
  <http_port>{http}</http_port>
  <tcp_port>{tcp}</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>{d}/data/</path>
  <tmp_path>{d}/tmp/</tmp_path>
  <user_files_path>{d}/user_files/</user_files_path>
  <format_schema_path>{d}/format_schemas/</format_schema_path>
  <users_config>{d}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>67108864</mark_cache_size>
  <uncompressed_cache_size>67108864</uncompressed_cache_size>
  <max_concurrent_queries>32</max_concurrent_queries>
  <timezone>UTC</timezone>
  <remote_servers>
    <pgo_test><shard><replica><host>127.0.0.1</host><port>{tcp}</port></replica></shard></pgo_test>
  </remote_servers>
</yandex>
"#
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("users.xml"),
            r#"<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks>
    <profile>default</profile><quota>default</quota></default></users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
    <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time>
  </interval></default></quotas>
</yandex>
"#,
        )
        .unwrap();
        let mut s = Server {
            dir: dir.to_path_buf(),
            http,
            child: None,
        };
        s.restart();
        s
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http)
    }

    /// Starts the server (same config, same data) and waits until it answers.
    fn restart(&mut self) {
        assert!(self.child.is_none());
        let child = Command::new(SERVER)
            .arg(format!(
                "--config-file={}",
                self.dir.join("config.xml").display()
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        // Readiness bound, not a timing assertion: a server that never answers fails here.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let url = format!("{}/?query=SELECT%201", self.url());
            if let Ok(r) = http_get_within(&url, Duration::from_secs(2)) {
                if r.status == 200 && r.body.trim() == "1" {
                    return;
                }
            }
            if let Some(Ok(Some(st))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!(
                    "clickhouse-server exited with {st}; see {}",
                    self.dir.join("log/err.log").display()
                );
            }
            assert!(Instant::now() < deadline, "clickhouse-server did not start");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Stops the server (SIGTERM, then waits; SIGKILL if it lingers).
    fn stop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(60);
        while c.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A [`Sink`] into this server for `host`, spooling up to `spool_max_bytes` in `spool`.
    fn sink(&self, spool: &Path, spool_max_bytes: u64, batch_rows: usize, host: &str) -> Sink {
        Sink::new(
            self.target(),
            spool,
            spool_max_bytes,
            batch_rows,
            host.into(),
        )
        .unwrap()
    }

    /// A client of this server.
    fn client(&self) -> daemon::sink::clickhouse::ClickHouseClient {
        daemon::sink::clickhouse::ClickHouseClient::new(self.target()).unwrap()
    }

    fn target(&self) -> ClickHouseTarget {
        ClickHouseTarget {
            url: self.url(),
            database: "pgo".into(),
            user: None,
            password: None,
            timeout: Duration::from_secs(30),
            distributed: false,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A recorded program cut into `2 × chunks` parts: host A gets the even samples, host B
/// the odd ones, each cut into `chunks` windows (side-band events in every part).
struct Halves {
    binary: ProfiledBinary,
    bin_path: PathBuf,
    perf_script: PathBuf,
    hex: String,
    a: Vec<CounterSet>,
    b: Vec<CounterSet>,
}

fn halves(variant: Variant, chunks: usize) -> Halves {
    let prog = corpus::program("loop_count", variant).unwrap();
    let rec = corpus::record(&prog).unwrap();
    let binary = ProfiledBinary::load(&prog.binary).unwrap();
    let hex = binary.build_id().unwrap().to_hex();
    let samples = rec
        .recording
        .events
        .iter()
        .filter(|e| matches!(e, PerfEvent::Sample(_)))
        .count();
    assert!(samples > 100, "{samples} samples");
    let mut parts: Vec<Vec<PerfEvent>> = vec![Vec::new(); 2 * chunks];
    let mut n = 0usize;
    for e in &rec.recording.events {
        match e {
            PerfEvent::Sample(_) => {
                // Host = parity; windows take the host's samples round-robin (the
                // first samples may all be outside the binary, in the loader).
                let part = (n % 2) * chunks + (n / 2) % chunks;
                parts[part].push(e.clone());
                n += 1;
            }
            PerfEvent::SideBand(_) => parts.iter_mut().for_each(|p| p.push(e.clone())),
        }
    }
    let load = binary.load_info();
    let sets: Vec<CounterSet> = parts
        .into_iter()
        .map(|p| {
            unwind_samples(p, &binary, &load, &UnwindOptions::default())
                .unwrap()
                .0
        })
        .collect();
    assert!(sets.iter().all(|s| !s.contexts.is_empty()));
    let (a, b) = sets.split_at(chunks);
    Halves {
        hex,
        bin_path: prog.binary.clone(),
        perf_script: rec.perf_script.clone(),
        binary,
        a: a.to_vec(),
        b: b.to_vec(),
    }
}

fn window(h: &Halves, start: u64, counters: &CounterSet) -> ClosedWindow {
    ClosedWindow {
        build_id: collector::BuildId::from_hex(&h.hex).unwrap(),
        preferred_base: h.binary.preferred_base(),
        window_start: start,
        samples: 1,
        counters: counters.clone(),
    }
}

/// The unsymbolized text of the sum of `sets` (what a pull of exactly them must print).
fn unsymbolized_sum<'a>(h: &Halves, sets: impl IntoIterator<Item = &'a CounterSet>) -> Vec<u8> {
    let mut sum = CounterSet::new(h.a[0].kind);
    for s in sets {
        sum.merge(s);
    }
    let mut out = Vec::new();
    write_unsymbolized(&mut out, &sum, h.binary.preferred_base(), None).unwrap();
    out
}

fn pull(server: &Server, h: &Halves, out: &Path, extra: &[&str]) {
    let url = server.url();
    let mut args = vec![
        "pull",
        "--clickhouse",
        &url,
        "--build-id",
        &h.hex,
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    cli(&args);
}

/// `convert --skip-symbolization` of the whole recording into `out`: its bytes.
fn convert_unsymbolized(h: &Halves, out: &Path) -> Vec<u8> {
    cli(&[
        "convert",
        "--perfscript",
        h.perf_script.to_str().unwrap(),
        "--binary",
        h.bin_path.to_str().unwrap(),
        "--skip-symbolization",
        "-o",
        out.to_str().unwrap(),
    ]);
    std::fs::read(out).unwrap()
}

/// This process's metrics name `series`.
fn assert_metrics_contain(series: &str) {
    let text = service::metrics::Metrics::new().encode();
    assert!(text.contains(series), "no {series} in:\n{text}");
}

/// The scratch directory of test `name`, and a server of its own in it.
fn scratch_server(name: &str) -> (PathBuf, Server) {
    let dir = scratch_dir("clickhouse", name);
    let server = Server::start(&dir.join("server"));
    (dir, server)
}

fn init(server: &Server) {
    cli(&["clickhouse", "init", "--url", &server.url()]);
}

#[test]
fn pull_from_clickhouse_equals_convert_of_all() {
    let _machine = e2e::support::machine_lock();
    if !available("clickhouse pull") {
        return;
    }
    let (dir, server) = scratch_server("pull");
    init(&server);
    // Idempotent.
    init(&server);
    for variant in [Variant::Probe, Variant::Lines] {
        let h = halves(variant, 3);
        let tag = variant.dir_name();
        deliver_host_a(&server, &h, &dir.join(format!("spool-a-{tag}")));
        deliver_host_b(&server, &h, &dir.join(format!("spool-b-{tag}")));
        pull_equals_convert(&server, &h, &dir, tag);
        if variant == Variant::Probe {
            // Without a binary: the offsets as stored, the same bytes as convert.
            let pulled = dir.join("pulled-nobinary.unsymbolized");
            pull(&server, &h, &pulled, &[]);
            assert!(
                std::fs::read(&pulled).unwrap()
                    == std::fs::read(dir.join(format!("convert-{tag}.unsymbolized"))).unwrap()
            );
            // --since after host A's first window and host B's windows (which start at
            // 1_800_000_000 + 0/60/120): A's windows 2 and 3, B's window 3.
            let pulled = dir.join("pulled-since.unsymbolized");
            pull(&server, &h, &pulled, &["--since", "1800000060"]);
            let want = unsymbolized_sum(&h, [&h.a[1], &h.a[2], &h.b[1], &h.b[2]]);
            assert!(std::fs::read(&pulled).unwrap() == want, "--since");
        }
    }

    // A build id ClickHouse has no window of: pull fails (exit 1).
    let argv: Vec<String> = [
        "pgo-agent",
        "pull",
        "--clickhouse",
        &server.url(),
        "--build-id",
        "0011",
        "-o",
        dir.join("none").to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(daemon::run_cli(argv), std::process::ExitCode::from(1));
}

/// Host A: `h.a` through the [`Sink`] directly, one window per minute, spooled in `spool`.
fn deliver_host_a(server: &Server, h: &Halves, spool: &Path) {
    let mut sink = server.sink(spool, 1 << 30, 50, "host-a");
    for (i, c) in h.a.iter().enumerate() {
        sink.submit(&window(h, 1_800_000_000 + 60 * i as u64, c))
            .unwrap();
    }
    assert_eq!(sink.deliver().unwrap(), 3);
    assert_eq!(sink.spool().depth(), 0);
    let rows: u64 =
        h.a.iter()
            .flat_map(|c| c.contexts.values())
            .map(|c| (c.ranges.len() + c.branches.len()) as u64)
            .sum();
    assert_eq!(sink.stats().rows_inserted, rows);
}

/// Host B: `h.b` on the daemon's path, spooled in `spool`.
fn deliver_host_b(server: &Server, h: &Halves, spool: &Path) {
    // Host B: the daemon's path — windows of a WindowedCounters handed at each flush
    // by the worker's helper to the sink thread, delivered when the thread stops.
    let sink_b = server.sink(spool, 1 << 30, 100_000, "host-b");
    let (handle, thread) = spawn(sink_b, 1_800_000_000).unwrap();
    let settings = WindowSettings {
        window_secs: 60,
        retained_windows: 6,
    };
    let mut wc = WindowedCounters::new(h.b[0].kind, settings);
    let id = collector::BuildId::from_hex(&h.hex).unwrap();
    let mut sent = None;
    let hand = |wc: &WindowedCounters, now: u64, shutdown: bool, sent: &mut Option<u64>| {
        let base = h.binary.preferred_base();
        hand_closed_windows(&handle, &id, base, wc, 60, now, shutdown, sent);
    };
    for (i, c) in h.b.iter().enumerate() {
        let now = 60 * i as u64 + 5;
        wc.add(now, c, 1);
        hand(&wc, now, false, &mut sent);
    }
    // Two windows closed; the shutdown hand-off gives the open one.
    assert_eq!(sent, Some(60));
    hand(&wc, 125, true, &mut sent);
    assert_eq!(sent, Some(120));
    drop(handle);
    let stats = thread.join().unwrap();
    assert_eq!(
        (
            stats.windows_delivered,
            stats.windows_dropped,
            stats.windows_left
        ),
        (3, 0, 0)
    );
}

/// `pull --clickhouse` with the binary equals `convert` of the whole recording in each
/// format: unsymbolized byte for byte, text and extbinary as canonicalised.
fn pull_equals_convert(server: &Server, h: &Halves, dir: &Path, tag: &str) {
    let (ps, bin) = (
        h.perf_script.to_str().unwrap(),
        h.bin_path.to_str().unwrap(),
    );
    for (format, convert_flags) in [
        ("unsymbolized", vec!["--skip-symbolization"]),
        ("text", vec!["--format", "text"]),
        ("extbinary", vec![]),
    ] {
        let want = dir.join(format!("convert-{tag}.{format}"));
        let mut args = vec!["convert", "--perfscript", ps, "--binary", bin, "-o"];
        args.push(want.to_str().unwrap());
        args.extend(convert_flags);
        cli(&args);
        let pulled = dir.join(format!("pulled-{tag}.{format}"));
        pull(server, h, &pulled, &["--binary", bin, "--format", format]);
        let want_bytes = std::fs::read(&want).unwrap();
        assert!(!want_bytes.is_empty());
        if format == "unsymbolized" {
            assert!(
                std::fs::read(&pulled).unwrap() == want_bytes,
                "{tag}: pull --clickhouse unsymbolized differs from convert"
            );
        } else {
            let a = canonical_profile(&want);
            let b = canonical_profile(&pulled);
            assert!(!a.is_empty());
            assert!(
                a == b,
                "{tag}: pull --clickhouse {format} differs from convert"
            );
        }
    }
}

#[test]
fn outage_and_retries_never_lose_or_double_count() {
    let _machine = e2e::support::machine_lock();
    if !available("clickhouse outage") {
        return;
    }
    let (dir, mut server) = scratch_server("outage");
    init(&server);
    let h = halves(Variant::Probe, 3);
    let mut a = server.sink(&dir.join("spool-a"), 1 << 30, 7, "a");
    let mut b = server.sink(&dir.join("spool-b"), 1 << 30, 7, "b");
    let t0 = 1_800_000_000;
    a.submit(&window(&h, t0, &h.a[0])).unwrap();
    b.submit(&window(&h, t0, &h.b[0])).unwrap();
    assert_eq!(a.deliver().unwrap(), 1);
    assert_eq!(b.deliver().unwrap(), 1);

    // ClickHouse goes away while windows close: they wait in the spools, in order.
    server.stop();
    for i in 1..3 {
        a.submit(&window(&h, t0 + 60 * i as u64, &h.a[i])).unwrap();
        b.submit(&window(&h, t0 + 60 * i as u64, &h.b[i])).unwrap();
    }
    let e = a.deliver().unwrap_err();
    assert_eq!(e.reason(), "connect", "{e}");
    assert!(b.deliver().is_err());
    assert_eq!((a.spool().depth(), b.spool().depth()), (2, 2));
    assert_eq!((a.stats().insert_errors, a.stats().windows_dropped), (1, 0));
    // The spool survives a daemon restart: reopened from disk, same windows.
    drop(a);
    let mut a = server.sink(&dir.join("spool-a"), 1 << 30, 7, "a");
    assert_eq!(a.spool().depth(), 2);

    server.restart();
    assert_eq!(a.deliver().unwrap(), 2);
    assert_eq!(b.deliver().unwrap(), 2);

    let want = convert_unsymbolized(&h, &dir.join("convert.unsymbolized"));
    let pulled = dir.join("pulled.unsymbolized");
    pull(&server, &h, &pulled, &[]);
    assert!(std::fs::read(&pulled).unwrap() == want, "after the outage");

    // A retry of an already delivered window (its first attempt landed, the answer was
    // lost): inserted again, whole. The pull does not change.
    let client = server.client();
    let again = encode_window(&window(&h, t0 + 60, &h.a[1]), "a");
    insert_window(&client, &again, 3, 0).unwrap();
    // Also from the spool's bytes, as the sink would resend them.
    let from_spool = spool::deserialize(&spool::serialize(&again), "retry").unwrap();
    insert_window(&client, &from_spool, 1_000_000, 0).unwrap();
    // A window half inserted when the connection broke (contexts and one block of
    // counters, no marker) is not counted until its retry completes.
    let extra = encode_window(&window(&h, t0 + 600, &h.a[0]), "a");
    client
        .insert_tsv("pgo.contexts", extra.contexts.as_bytes())
        .unwrap();
    let first_block: String = extra
        .counters
        .lines()
        .take(5)
        .map(|l| format!("{l}\n"))
        .collect();
    client
        .insert_tsv("pgo.counters", first_block.as_bytes())
        .unwrap();
    pull(&server, &h, &pulled, &[]);
    assert!(
        std::fs::read(&pulled).unwrap() == want,
        "retry or partial window counted"
    );
    // Parts merged or not, the answer is the same.
    client.query("OPTIMIZE TABLE pgo.counters FINAL").unwrap();
    pull(&server, &h, &pulled, &[]);
    assert!(
        std::fs::read(&pulled).unwrap() == want,
        "after OPTIMIZE FINAL"
    );
    // The retry of the half window completes it: counted once.
    insert_window(&client, &extra, 4, 0).unwrap();
    pull(&server, &h, &pulled, &[]);
    let all: Vec<&CounterSet> = h.a.iter().chain(&h.b).chain([&h.a[0]]).collect();
    assert!(std::fs::read(&pulled).unwrap() == unsymbolized_sum(&h, all));

    // The metrics saw it.
    assert_metrics_contain("pgo_agent_sink_insert_errors_total{reason=\"connect\"}");
}

#[test]
fn full_spool_drops_the_oldest_windows_and_counts_them() {
    let _machine = e2e::support::machine_lock();
    if !available("clickhouse spool full") {
        return;
    }
    let (dir, mut server) = scratch_server("spoolfull");
    let h = halves(Variant::Probe, 1);
    // Five equal-sized windows (same counters, starts of equal width); room for two.
    let windows: Vec<ClosedWindow> = (1..=5)
        .map(|i| window(&h, 1_800_000_000 + 60 * i, &h.a[0]))
        .collect();
    let size = spool::serialize(&encode_window(&windows[0], "a")).len() as u64;
    init(&server);
    server.stop();
    let mut sink = server.sink(&dir.join("spool"), 2 * size, 100, "a");
    for w in &windows {
        sink.submit(w).unwrap();
        assert!(sink.deliver().is_err());
    }
    assert_eq!(sink.stats().windows_dropped, 3);
    assert_eq!((sink.spool().depth(), sink.spool().bytes()), (2, 2 * size));
    server.restart();
    assert_eq!(sink.deliver().unwrap(), 2);
    let pulled = dir.join("pulled.unsymbolized");
    pull(&server, &h, &pulled, &[]);
    assert!(std::fs::read(&pulled).unwrap() == unsymbolized_sum(&h, [&h.a[0], &h.a[0]]));
    // Only the two newest windows arrived.
    let client = server.client();
    let starts = client
        .query("SELECT window_start FROM pgo.windows ORDER BY window_start FORMAT TabSeparated")
        .unwrap();
    assert_eq!(starts, "1800000240\n1800000300\n");
    assert_metrics_contain("pgo_agent_sink_windows_dropped_total");
}

#[test]
fn init_creates_distributed_tables_and_pull_reads_them() {
    let _machine = e2e::support::machine_lock();
    if !available("clickhouse distributed") {
        return;
    }
    let (dir, server) = scratch_server("dist");
    cli(&[
        "clickhouse",
        "init",
        "--url",
        &server.url(),
        "--cluster",
        "pgo_test",
    ]);
    let h = halves(Variant::Probe, 1);
    let mut target = server.target();
    target.distributed = true;
    let mut sink = Sink::new(target, &dir.join("spool"), 1 << 30, 1000, "a".into()).unwrap();
    sink.submit(&window(&h, 1_800_000_000, &h.a[0])).unwrap();
    sink.submit(&window(&h, 1_800_000_060, &h.b[0])).unwrap();
    assert_eq!(sink.deliver().unwrap(), 2);
    // Distributed inserts are forwarded to the shard asynchronously by default (18.16 has
    // no SYSTEM FLUSH DISTRIBUTED): wait until the shard has every row.
    let client = server.client();
    let rows = sink.stats().rows_inserted.to_string();
    let count = |t: &str| {
        client
            .query(&format!("SELECT count() FROM pgo.{t} FORMAT TabSeparated"))
            .unwrap()
            .trim()
            .to_string()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while count("windows") != "2" || count("counters") != rows {
        assert!(
            Instant::now() < deadline,
            "distributed inserts never arrived"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let pulled = dir.join("pulled.unsymbolized");
    pull(&server, &h, &pulled, &["--distributed"]);
    let want = convert_unsymbolized(&h, &dir.join("convert.unsymbolized"));
    assert!(std::fs::read(&pulled).unwrap() == want);
}

/// `pgo-agent run` with `[sink.clickhouse]` (cpu_clock mode, 1 s windows): every window
/// reaches ClickHouse through the worker hook and the sink thread, so `pull --clickhouse`
/// equals the state file the daemon wrote (all windows retained).
#[test]
fn daemon_run_pushes_its_windows() {
    let _machine = e2e::support::machine_lock();
    if !e2e::support::can_sample("clickhouse daemon", &[]) || !available("clickhouse daemon") {
        return;
    }
    let (dir, server) = scratch_server("daemon");
    init(&server);
    let spin = build_spin(&dir);
    let state = dir.join("state");
    let config = cpu_clock_config(&format!(
        "[aggregation]\nwindow_secs = 1\nretained_windows = 1000\n\
         [output]\nflush_interval_secs = 1\n\
         [filters]\nexe_path_globs = [\"{}\"]\n\
         [sink.clickhouse]\nurl = \"{}\"\nhost = \"live\"\nspool_dir = \"{}\"\n",
        spin.display(),
        server.url(),
        dir.join("spool").display()
    ));
    let daemon = RunningDaemon::start(&config, &state, 5);
    std::thread::sleep(Duration::from_millis(800));
    let mut child = Command::new(&spin).arg("3").spawn().unwrap();
    let summary = daemon.join();
    assert!(child.wait().unwrap().success());
    let b = summary
        .binaries
        .iter()
        .find(|b| Path::new(&b.path) == spin)
        .unwrap_or_else(|| panic!("spin not profiled: {:?}", summary.binaries));
    assert!(b.samples > 100, "{} samples", b.samples);
    let pulled = dir.join("pulled.unsymbolized");
    let url = server.url();
    cli(&[
        "pull",
        "--clickhouse",
        &url,
        "--build-id",
        &b.build_id,
        "--binary",
        spin.to_str().unwrap(),
        "--format",
        "unsymbolized",
        "-o",
        pulled.to_str().unwrap(),
    ]);
    let want = std::fs::read(&b.profile).unwrap();
    assert!(!want.is_empty());
    assert!(
        std::fs::read(&pulled).unwrap() == want,
        "pull --clickhouse differs from the daemon's state file"
    );
    // More than one window was delivered (1 s windows over ~3 s of samples).
    let client = server.client();
    let windows = client
        .query(&format!(
            "SELECT count() FROM pgo.windows WHERE build_id = '{}' FORMAT TabSeparated",
            b.build_id
        ))
        .unwrap();
    assert!(windows.trim().parse::<u64>().unwrap() >= 2, "{windows}");
    assert_eq!(std::fs::read_dir(dir.join("spool")).unwrap().count(), 0);
}

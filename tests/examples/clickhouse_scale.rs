//! Scale check of the ClickHouse sink (run by `bench/clickhouse_scale.sh`, which starts a
//! loopback clickhouse-server): N simulated agents each deliver W closed windows of one
//! binary through [`Sink`] (the daemon's delivery path: encode, spool, INSERT), then the
//! build farm's question is timed: `pgo-agent pull --clickhouse` of that build id,
//! unsymbolized and symbolized (text). The counters are replayed from a corpus recording;
//! agent `i` counts `1 + i % 7` times them, so the expected fleet sum is known and the
//! pull is checked exactly.
//!
//! `--copies K` (default 1) makes each window K times larger: copy `j` of every context
//! gets one more outermost frame (a call-site offset no real binary has), so the rows are
//! distinct keys of realistic volume. With K > 1 only the unsymbolized pull is timed (the
//! made-up frames do not symbolize).
//!
//! ```text
//! clickhouse_scale --url URL [--agents 1000] [--windows 6] [--threads 4]
//!                  [--copies 1] [--program interp] [--dir DIR]
//! ```

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use collector::PerfEvent;
use daemon::sink::clickhouse::{ClickHouseTarget, ClosedWindow};
use daemon::sink::Sink;
use e2e::corpus::{self, Variant};
use exporter::format::unsymbolized::write_unsymbolized;
use symbolizer::ProfiledBinary;
use unwinder::{unwind_samples, CounterSet, UnwindOptions};

struct Opts {
    url: String,
    agents: usize,
    windows: usize,
    threads: usize,
    program: String,
    dir: PathBuf,
    copies: u64,
}

fn parse() -> Opts {
    let mut o = Opts {
        url: String::new(),
        agents: 1000,
        windows: 6,
        threads: 4,
        program: "interp".into(),
        dir: corpus::target_dir().join("clickhouse_scale"),
        copies: 1,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < args.len() {
        let v = args[i + 1].clone();
        match args[i].as_str() {
            "--url" => o.url = v,
            "--agents" => o.agents = v.parse().expect("--agents N"),
            "--windows" => o.windows = v.parse().expect("--windows N"),
            "--threads" => o.threads = v.parse().expect("--threads N"),
            "--program" => o.program = v,
            "--dir" => o.dir = PathBuf::from(v),
            "--copies" => o.copies = v.parse().expect("--copies K"),
            other => panic!("unknown option {other}"),
        }
        i += 2;
    }
    assert!(!o.url.is_empty(), "--url URL is required");
    o
}

fn scaled(c: &CounterSet, k: u64) -> CounterSet {
    let mut out = c.clone();
    for cc in out.contexts.values_mut() {
        cc.ranges.values_mut().for_each(|v| *v *= k);
        cc.branches.values_mut().for_each(|v| *v *= k);
    }
    out
}

fn cli(args: &[&str]) {
    let mut argv = vec!["pgo-agent".to_string()];
    argv.extend(args.iter().map(|s| s.to_string()));
    let code = daemon::run_cli(argv.clone());
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{argv:?}");
}

fn main() {
    let o = parse();
    let _ = std::fs::remove_dir_all(&o.dir);
    std::fs::create_dir_all(&o.dir).unwrap();
    let prog = corpus::program(&o.program, Variant::Probe).unwrap();
    let rec = corpus::record(&prog).unwrap();
    let binary = ProfiledBinary::load(&prog.binary).unwrap();
    let hex = binary.build_id().unwrap().to_hex();
    let load = binary.load_info();
    let events: Vec<PerfEvent> = rec.recording.events.clone();
    let (recorded, _) = unwind_samples(events, &binary, &load, &UnwindOptions::default()).unwrap();
    let mut counters = recorded.clone();
    for j in 1..o.copies.max(1) {
        let fake = binary.preferred_base() + 0x4000_0000 + 16 * j;
        for (key, c) in &recorded.contexts {
            let mut k = vec![fake];
            k.extend(key);
            counters.context_mut(&k).merge(c);
        }
    }
    let rows_per_window: usize = counters
        .contexts
        .values()
        .map(|c| c.ranges.len() + c.branches.len())
        .sum();
    println!(
        "replayed counters: {} ({}), {} contexts, {} rows per window",
        o.program,
        hex,
        counters.contexts.len(),
        rows_per_window
    );
    cli(&["clickhouse", "init", "--url", &o.url]);

    let target = ClickHouseTarget {
        url: o.url.clone(),
        database: "pgo".into(),
        user: None,
        password: None,
        timeout: Duration::from_secs(60),
        distributed: false,
    };
    let counters = Arc::new(counters);
    let rows = Arc::new(AtomicU64::new(0));
    let insert_nanos = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut handles = Vec::new();
    for t in 0..o.threads.max(1) {
        let (target, counters, rows, insert_nanos) = (
            target.clone(),
            counters.clone(),
            rows.clone(),
            insert_nanos.clone(),
        );
        let (agents, windows, threads, dir, base) = (
            o.agents,
            o.windows,
            o.threads.max(1),
            o.dir.clone(),
            binary.preferred_base(),
        );
        let id = collector::BuildId::from_hex(&hex).unwrap();
        handles.push(std::thread::spawn(move || {
            for i in (t..agents).step_by(threads) {
                let mut sink = Sink::new(
                    target.clone(),
                    &dir.join(format!("spool-{i:05}")),
                    1 << 30,
                    100_000,
                    format!("agent-{i:05}"),
                )
                .unwrap();
                let c = scaled(&counters, 1 + (i % 7) as u64);
                for w in 0..windows {
                    sink.submit(&ClosedWindow {
                        build_id: id.clone(),
                        preferred_base: base,
                        window_start: 1_800_000_000 + 600 * w as u64,
                        samples: 1,
                        counters: c.clone(),
                    })
                    .unwrap();
                }
                let t0 = Instant::now();
                assert_eq!(sink.deliver().unwrap(), windows);
                insert_nanos.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
                rows.fetch_add(sink.stats().rows_inserted, Ordering::Relaxed);
            }
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    let wall = started.elapsed().as_secs_f64();
    let rows = rows.load(Ordering::Relaxed);
    let busy = insert_nanos.load(Ordering::Relaxed) as f64 / 1e9;
    println!(
        "inserted: {} agents x {} windows = {} windows, {rows} rows in {wall:.1} s wall \
         ({} threads): {:.0} rows/s, {:.0} windows/s (spool writes included); \
         {:.0} rows/s per inserting thread (INSERTs only)",
        o.agents,
        o.windows,
        o.agents * o.windows,
        o.threads,
        rows as f64 / wall,
        (o.agents * o.windows) as f64 / wall,
        rows as f64 / busy.max(1e-9),
    );

    // The expected fleet sum: sum over agents of (1 + i % 7) × windows × counters.
    let k: u64 = (0..o.agents).map(|i| 1 + (i % 7) as u64).sum::<u64>() * o.windows as u64;
    let mut want = Vec::new();
    write_unsymbolized(
        &mut want,
        &scaled(&counters, k),
        binary.preferred_base(),
        None,
    )
    .unwrap();
    // `pull` of the build id with `extra` flags into `out`; its wall time in seconds.
    let pull = |extra: &[&str], out: &Path| {
        let t0 = Instant::now();
        let mut args = vec!["pull", "--clickhouse", &o.url, "--build-id", &hex];
        args.extend(extra);
        args.extend(["-o", out.to_str().unwrap()]);
        cli(&args);
        t0.elapsed().as_secs_f64()
    };
    let out = o.dir.join("pulled.unsymbolized");
    let pull_unsym = pull(&[], &out);
    assert!(
        std::fs::read(&out).unwrap() == want,
        "pulled counters differ from the expected fleet sum"
    );
    if o.copies > 1 {
        println!(
            "pull of one build id over {rows} rows: {pull_unsym:.2} s unsymbolized (exact: \
             equals the expected sum)"
        );
        return;
    }
    let text = o.dir.join("pulled.txt");
    let binary = prog.binary.to_str().unwrap();
    let pull_text = pull(&["--binary", binary, "--format", "text"], &text);
    println!(
        "pull of one build id over {} rows: {pull_unsym:.2} s unsymbolized (exact: equals the \
         expected sum), {pull_text:.2} s symbolized text",
        rows
    );
}

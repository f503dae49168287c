//! `pgo-agent pull` and `pgo-agent merge` (issue 5): two agents whose state dirs hold
//! disjoint halves of one recording (every other sample; side-band events in both) serve
//! their aggregates over HTTP on loopback; `pull` from both, and `merge` of the two files,
//! must equal `convert` of all samples, byte for byte, in every format.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use collector::PerfEvent;
use e2e::corpus::{self, Variant};
use e2e::http::store_app;
use e2e::support::cli;
use exporter::format::unsymbolized::write_unsymbolized;
use symbolizer::ProfiledBinary;
use unwinder::{unwind_samples, UnwindOptions};

fn scratch(name: &str) -> PathBuf {
    e2e::support::scratch_dir("pull_merge", name)
}

/// Writes `<hex>.unsymbolized` + `<hex>.json` of `events` into `dir`, as a worker would.
fn write_state(dir: &Path, binary: &ProfiledBinary, bin_path: &Path, events: Vec<PerfEvent>) {
    let load = binary.load_info();
    let (counters, _) = unwind_samples(events, binary, &load, &UnwindOptions::default()).unwrap();
    let hex = binary.build_id().unwrap().to_hex();
    let mut out = Vec::new();
    write_unsymbolized(&mut out, &counters, binary.preferred_base(), None).unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(format!("{hex}.unsymbolized")), out).unwrap();
    let meta = serde_json::json!({
        "build_id": hex, "path": bin_path, "kind": "probe_context", "samples": 1,
    });
    std::fs::write(dir.join(format!("{hex}.json")), meta.to_string()).unwrap();
}

/// Serves `state_dir` on an ephemeral loopback port (the runtime lives as long as the test).
fn serve(rt: &tokio::runtime::Runtime, state_dir: &Path) -> SocketAddr {
    let state = store_app(state_dir);
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(service::http::serve(
        listener,
        state,
        std::future::pending(),
    ));
    addr
}

#[test]
fn pull_and_merge_of_halves_equal_convert_of_all() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("pull_merge", &["clang-19"]) {
        return;
    }
    let prog = corpus::program("loop_count", Variant::Probe).unwrap();
    let rec = corpus::record(&prog).unwrap();
    let binary = ProfiledBinary::load(&prog.binary).unwrap();
    let hex = binary.build_id().unwrap().to_hex();
    let dir = scratch("halves");
    let (mut even, mut odd) = (Vec::new(), Vec::new());
    let mut n = 0usize;
    for e in &rec.recording.events {
        match e {
            PerfEvent::Sample(_) => {
                if n.is_multiple_of(2) {
                    &mut even
                } else {
                    &mut odd
                }
                .push(e.clone());
                n += 1;
            }
            PerfEvent::SideBand(_) => {
                even.push(e.clone());
                odd.push(e.clone());
            }
        }
    }
    assert!(n > 100, "{n} samples");
    let (a, b) = (dir.join("agent-a"), dir.join("agent-b"));
    write_state(&a, &binary, &prog.binary, even);
    write_state(&b, &binary, &prog.binary, odd);
    let ua = a.join(format!("{hex}.unsymbolized"));
    let ub = b.join(format!("{hex}.unsymbolized"));
    assert_ne!(std::fs::read(&ua).unwrap(), std::fs::read(&ub).unwrap());

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (sa, sb) = (serve(&rt, &a), serve(&rt, &b));
    let (ps, bin) = (
        rec.perf_script.to_str().unwrap(),
        prog.binary.to_str().unwrap(),
    );
    for (format, convert_flags) in [
        ("extbinary", vec![]),
        ("text", vec!["--format", "text"]),
        ("unsymbolized", vec!["--skip-symbolization"]),
    ] {
        let want = dir.join(format!("convert.{format}"));
        let mut args = vec!["convert", "--perfscript", ps, "--binary", bin, "-o"];
        args.push(want.to_str().unwrap());
        args.extend(convert_flags);
        cli(&args);
        let pulled = dir.join(format!("pulled.{format}"));
        let (url_a, url_b) = (format!("http://{sa}"), format!("http://{sb}"));
        cli(&[
            "pull",
            "--agent",
            &url_a,
            "--agent",
            &url_b,
            "--build-id",
            &hex,
            "--binary",
            bin,
            "--format",
            format,
            "-o",
            pulled.to_str().unwrap(),
        ]);
        let merged = dir.join(format!("merged.{format}"));
        cli(&[
            "merge",
            ua.to_str().unwrap(),
            ub.to_str().unwrap(),
            "--binary",
            bin,
            "--format",
            format,
            "-o",
            merged.to_str().unwrap(),
        ]);
        let want = std::fs::read(&want).unwrap();
        assert!(!want.is_empty());
        assert!(
            std::fs::read(&pulled).unwrap() == want,
            "pull {format} differs from convert"
        );
        assert!(
            std::fs::read(&merged).unwrap() == want,
            "merge {format} differs from convert"
        );
    }

    // Without a binary, pull writes the summed unsymbolized profile (offsets kept): the
    // same bytes as convert --skip-symbolization, whatever the agent order.
    let pulled = dir.join("pulled-nobinary.unsymbolized");
    cli(&[
        "pull",
        "--agent",
        &format!("http://{sb}"),
        "--agent",
        &format!("http://{sa}"),
        "--build-id",
        &hex,
        "-o",
        pulled.to_str().unwrap(),
    ]);
    assert!(
        std::fs::read(&pulled).unwrap() == std::fs::read(dir.join("convert.unsymbolized")).unwrap()
    );

    // merge checks the build id the state files' names carry: against another build's
    // binary, or summed with another build's aggregate, it fails (exit 1) and writes nothing.
    let other = corpus::program("recursion", Variant::Probe).unwrap();
    let other_hex = ProfiledBinary::load(&other.binary)
        .unwrap()
        .build_id()
        .unwrap()
        .to_hex();
    assert_ne!(other_hex, hex);
    let renamed = dir.join(format!("{other_hex}.window-all.unsymbolized"));
    std::fs::copy(&ub, &renamed).unwrap();
    let refused = dir.join("refused.prof");
    for inputs in [
        vec![
            ua.display().to_string(),
            "--binary".into(),
            other.binary.display().to_string(),
        ],
        vec![ua.display().to_string(), renamed.display().to_string()],
    ] {
        let mut argv = vec!["pgo-agent".to_string(), "merge".into()];
        argv.extend(inputs.iter().cloned());
        argv.extend(["-o".into(), refused.display().to_string()]);
        assert_eq!(
            daemon::run_cli(argv),
            std::process::ExitCode::from(1),
            "merge {inputs:?}"
        );
        assert!(!refused.exists(), "merge {inputs:?} wrote its output");
    }
    // Another build's binary is refused by the note in its head, before it is loaded: a
    // copy cut to its first 8 KiB (no code, no symbols) names its build id.
    let head = dir.join("other-head");
    std::fs::write(&head, &std::fs::read(&other.binary).unwrap()[..8192]).unwrap();
    let err = daemon::merge::load_binary(&head, Some(&hex)).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{} has build id {other_hex:?}, not {hex}", head.display())
    );
    // --build-id says which build the inputs are: their names are not read for one.
    let argv: Vec<String> = [
        "pgo-agent",
        "merge",
        ua.to_str().unwrap(),
        renamed.to_str().unwrap(),
        "--build-id",
        &hex,
        "-o",
        refused.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(daemon::run_cli(argv), std::process::ExitCode::SUCCESS);
    assert!(refused.exists());

    // A build id no agent has: pull fails (exit 1).
    let mut argv: Vec<String> = ["pgo-agent", "pull", "--agent"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    argv.extend([
        format!("http://{sa}"),
        "--build-id".into(),
        "0011".into(),
        "-o".into(),
        dir.join("none").display().to_string(),
    ]);
    assert_eq!(daemon::run_cli(argv), std::process::ExitCode::from(1));
}

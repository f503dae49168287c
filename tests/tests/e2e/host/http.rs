//! The daemon's HTTP API (the `service` crate).
//!
//! * `router(state).oneshot(..)` over a state directory made from a corpus recording
//!   (`convert --skip-symbolization` output + the daemon's JSON metadata): every route,
//!   formats byte-equal to `convert`, ETag/304, gzip, content-disposition, JSON 404/400,
//!   bearer token, rate limit; pprof decoded by an independent decoder (Python protobuf,
//!   tests/tests/e2e/host/decode_pprof.py) and the flame graph both name the hot function.
//! * A real daemon (`run_daemon` with `--listen 127.0.0.1:PORT`, cpu-clock mode) sampling
//!   `tests/programs/live/spin.c` built with pseudo probes: a real Prometheus (Debian
//!   package `prometheus`, installed by `.ci/run`) scrapes it on loopback; `promtool check
//!   metrics` is clean; `pgo-agent pull` fetches the extbinary profile, `llvm-profdata-19
//!   show` reads it and clang-19 compiles spin.c with it without warnings.
//! * Fresh reads (issue 24): a real daemon with the embedded default config (flush every
//!   60 s) lists and serves spin's profile from what its workers hold within 10 s of spin's
//!   start, before any flush; what it serves is byte for byte what the next flush writes,
//!   and after a restart the restored counts plus the new ones, each once.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use daemon::config::Config;
use daemon::run::RunSummary;
use e2e::agent::{cpu_clock_config, RunningDaemon};
use e2e::corpus::{self, Variant};
use e2e::http::{http_get, store_app};
use e2e::support::{build_id_hex, build_spin, cli, free_port, wait_for};
use exporter::format::{llvm_text_reader, unsymbolized::read_unsymbolized};
use service::http::{router, AppState};
use service::store::LIVE_SNAPSHOT_TTL;
use symbolizer::ProfiledBinary;
use tower::ServiceExt;

fn scratch(name: &str) -> PathBuf {
    e2e::support::scratch_dir("http", name)
}

/// A state dir holding loop_count (probe build)'s aggregate, and the `convert` outputs of
/// the same recording to compare with.
struct Fixture {
    state: PathBuf,
    hex: String,
    convert_extbinary: Vec<u8>,
    convert_text: Vec<u8>,
    /// The function with the most executed instructions, by the recorder's exact truth.
    hot_function: String,
    /// llvm-profgen-19 `--show-density` of the same recording ("1968.5"), when available.
    llvm_density: Option<String>,
}

fn fixture() -> Option<Fixture> {
    if !corpus::tools_available("http", &["clang-19"]) {
        return None;
    }
    let prog = corpus::program("loop_count", Variant::Probe).unwrap();
    let rec = corpus::record(&prog).unwrap();
    let binary = ProfiledBinary::load(&prog.binary).unwrap();
    let hex = binary.build_id().unwrap().to_hex();
    let file_name = prog.binary.file_name().unwrap().to_str().unwrap();
    let truth = rec.truth.binary(file_name).unwrap();
    let mut per_function = std::collections::BTreeMap::<String, u64>::new();
    for (addr, n) in symbolizer::quality::instruction_counts(truth).unwrap() {
        if let Some(r) = binary.func_range_at(addr) {
            *per_function.entry(r.name.clone()).or_default() += n;
        }
    }
    let hot_function = per_function.into_iter().max_by_key(|(_, n)| *n).unwrap().0;
    let state = scratch("state");
    let (ps, bin) = (
        rec.perf_script.to_str().unwrap(),
        prog.binary.to_str().unwrap(),
    );
    let unsym = state.join(format!("{hex}.unsymbolized"));
    let ext = state.join("convert.extbinary");
    let text = state.join("convert.text");
    for (flags, output) in [
        (&["--skip-symbolization"][..], &unsym),
        (&[], &ext),
        (&["--format", "text"], &text),
    ] {
        let mut args = vec!["convert", "--perfscript", ps, "--binary", bin];
        args.extend(flags);
        args.extend(["-o", output.to_str().unwrap()]);
        cli(&args);
    }
    let meta = serde_json::json!({
        "build_id": hex, "path": bin, "kind": "probe_context", "samples": 1234,
        // Counted over a minute: the samples stand for 60 s at the binary's rate.
        "counted": 1234, "sampled_secs": 60,
    });
    std::fs::write(state.join(format!("{hex}.json")), meta.to_string()).unwrap();
    let convert_extbinary = std::fs::read(&ext).unwrap();
    let convert_text = std::fs::read(&text).unwrap();
    std::fs::remove_file(ext).unwrap();
    std::fs::remove_file(text).unwrap();
    let llvm_density = corpus::find_tool("llvm-profgen-19").and_then(|tool| {
        let out = Command::new(tool)
            .arg(format!("--perfscript={ps}"))
            .arg(format!("--binary={bin}"))
            .arg(format!("--output={}", state.join("llvm.prof").display()))
            .arg("--show-density")
            .output()
            .ok()?;
        let _ = std::fs::remove_file(state.join("llvm.prof"));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let rest = text.split("Functions with density >= ").nth(1)?;
        Some(rest.split(' ').next()?.to_string())
    });
    Some(Fixture {
        state,
        hex,
        convert_extbinary,
        convert_text,
        hot_function,
        llvm_density,
    })
}

fn app(state_dir: &Path) -> AppState {
    store_app(state_dir)
}

async fn get(
    state: &AppState,
    uri: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let mut req = Request::builder().uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = router(state.clone())
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = axum::body::to_bytes(resp.into_body(), 64 << 20)
        .await
        .unwrap()
        .to_vec();
    (status, headers, body)
}

fn json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)))
}

/// The list shows aggregates with counted samples; those with none (every sample dropped,
/// e.g. a library whose samples all fell outside decoded code) are counted in `hidden`,
/// said why, and listed with `?all=true`; a malformed query is a 400.
#[tokio::test]
async fn list_hides_aggregates_without_counted_samples() {
    let dir = scratch("list-hidden");
    std::fs::create_dir_all(&dir).unwrap();
    for (hex, samples) in [("aa01", 7u64), ("bb02", 0), ("cc03", 0)] {
        let meta = serde_json::json!({
            "build_id": hex, "path": format!("/nonexistent/{hex}"), "kind": "flat",
            "samples": samples, "unwind_errors": {"ip_not_code": 3},
        });
        std::fs::write(dir.join(format!("{hex}.json")), meta.to_string()).unwrap();
    }
    let state = app(&dir);
    let (s, _, b) = get(&state, "/api/v1/profiles", &[]).await;
    assert_eq!(s, StatusCode::OK);
    let list = json(&b);
    let ids: Vec<&str> = list["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["build_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["aa01"]);
    assert_eq!(list["hidden"], 2);
    assert_eq!(list["hidden_why"], service::http::routes::HIDDEN_WHY);

    let (s, _, b) = get(&state, "/api/v1/profiles?all=true", &[]).await;
    assert_eq!(s, StatusCode::OK);
    let list = json(&b);
    assert_eq!(list["profiles"].as_array().unwrap().len(), 3);
    assert_eq!(list["hidden"], 0);
    assert!(list.get("hidden_why").is_none());

    for bad in ["?all=maybe", "?everything=1"] {
        let (s, _, _) = get(&state, &format!("/api/v1/profiles{bad}"), &[]).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{bad}");
    }
}

#[tokio::test]
async fn router_serves_the_state_dir() {
    let Some(fx) = fixture() else { return };
    let state = app(&fx.state);

    let (s, _, b) = get(&state, "/healthz", &[]).await;
    assert_eq!((s, b.as_slice()), (StatusCode::OK, &b"ok\n"[..]));
    list_entry_and_density(&state, &fx).await;
    profile_formats(&state, &fx).await;
    // The request metrics count the four bad requests of the errors.
    errors_are_json(&state, &fx).await;
    metrics_by_route_and_quality(&state, &fx).await;
    token_and_rate_limit(&state).await;
}

/// The list: the aggregate with its samples, mode, kind, window and density guidance.
async fn list_entry_and_density(state: &AppState, fx: &Fixture) {
    let hex = &fx.hex;
    let (s, _, b) = get(state, "/api/v1/profiles", &[]).await;
    assert_eq!(s, StatusCode::OK);
    let list = json(&b);
    let p = &list["profiles"][0];
    assert_eq!(list["profiles"].as_array().unwrap().len(), 1);
    assert_eq!(p["build_id"], hex.as_str());
    assert_eq!(p["samples"], 1234);
    assert_eq!(p["mode"], "intel_lbr");
    assert_eq!(p["kind"], "probe_context");
    assert_eq!(p["has_pseudo_probes"], true);
    assert_eq!(p["symbolization"], "symbolized");
    assert_eq!(p["window"]["retained_secs"], 3600);
    // Density guidance: t · 50 / d seconds in all at the binary's rate, t = 60 s.
    let g = &p["density"];
    let d = g["density"].as_f64().unwrap();
    assert!(d > 0.0, "{g}");
    assert_eq!(g["threshold"], 50.0);
    assert_eq!(g["sampled_secs"], 60.0);
    assert!(
        (g["sample_rate_hz"].as_f64().unwrap() - 1234.0 / 60.0).abs() < 1e-9,
        "{g}"
    );
    let needed = if d < 50.0 { 60.0 * 50.0 / d } else { 60.0 };
    assert!(
        (g["needed_secs"].as_f64().unwrap() - needed).abs() < 1e-6,
        "{g}"
    );
    assert!(
        (g["more_secs"].as_f64().unwrap() - (needed - 60.0)).abs() < 1e-6,
        "{g}"
    );
    assert_eq!(
        g["verdict"],
        if d < 50.0 {
            "more_samples_needed"
        } else {
            "enough"
        },
        "{g}"
    );
}

/// Every format of the profile: extbinary and text byte-equal to `convert`'s (ETag, 304,
/// gzip), unsymbolized the state file, pprof decoded independently, the flame graph.
async fn profile_formats(state: &AppState, fx: &Fixture) {
    let hex = &fx.hex;
    let uri = format!("/api/v1/profiles/{hex}");
    // Default format: extbinary, byte-equal to convert's.
    let (s, h, b) = get(state, &uri, &[]).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        b == fx.convert_extbinary,
        "extbinary differs from convert's"
    );
    assert_eq!(h["x-pgo-profile-format"], "extbinary");
    assert_eq!(
        h[header::CONTENT_DISPOSITION],
        format!("attachment; filename=\"{hex}.window-all.extbinary.prof\"").as_str()
    );
    let etag = h[header::ETAG].to_str().unwrap().to_string();
    assert!(etag.starts_with('"') && etag.len() == 34, "{etag}");

    // If-None-Match → 304, no body.
    let (s, h, b) = get(state, &uri, &[("if-none-match", &etag)]).await;
    assert_eq!((s, b.len()), (StatusCode::NOT_MODIFIED, 0));
    assert_eq!(h[header::ETAG], etag.as_str());
    // Compared weakly, as RFC 9110 wants for If-None-Match (a proxy may weaken the tag),
    // and among others.
    let weak = format!("\"other\", W/{etag}");
    let (s, _, _) = get(state, &uri, &[("if-none-match", &weak)]).await;
    assert_eq!(s, StatusCode::NOT_MODIFIED);
    let (s, _, _) = get(state, &uri, &[("if-none-match", "W/\"other\"")]).await;
    assert_eq!(s, StatusCode::OK);

    // Text, uppercase build id, gzip.
    let uri_text = format!(
        "/api/v1/profiles/{}?format=text&window=all",
        hex.to_uppercase()
    );
    let (s, h, b) = get(state, &uri_text, &[("accept-encoding", "gzip")]).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(h[header::CONTENT_ENCODING], "gzip");
    let mut plain = Vec::new();
    flate2::read::GzDecoder::new(&b[..])
        .read_to_end(&mut plain)
        .unwrap();
    assert!(plain == fx.convert_text, "text differs from convert's");
    assert_ne!(h[header::ETAG], etag.as_str());

    // Unsymbolized: the state file itself.
    let (s, h, b) = get(state, &format!("{uri}?format=unsymbolized"), &[]).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        b,
        std::fs::read(fx.state.join(format!("{hex}.unsymbolized"))).unwrap()
    );
    assert_eq!(
        h[header::CONTENT_DISPOSITION],
        format!("attachment; filename=\"{hex}.window-all.unsymbolized\"").as_str()
    );

    // pprof, decoded by an independent decoder (Python protobuf, profile.proto's
    // messages declared in tests/tests/e2e/host/decode_pprof.py).
    let (s, h, b) = get(state, &format!("{uri}?format=pprof"), &[]).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        h[header::CONTENT_DISPOSITION],
        format!("attachment; filename=\"{hex}.window-all.pb\"").as_str()
    );
    let pb = fx.state.join("profile.pb");
    std::fs::write(&pb, &b).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/host/decode_pprof.py");
    let python = ["python3", "/usr/bin/python3"].into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import google.protobuf"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    match python {
        Some(python) => {
            let out = Command::new(python).arg(&script).arg(&pb).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(text.contains("TYPE executions count\n"), "{text}");
            assert!(text.contains(&format!("BUILD_ID {hex}\n")), "{text}");
            let top = text.lines().find_map(|l| l.strip_prefix("TOP ")).unwrap();
            assert_eq!(
                top.split(' ').next(),
                Some(fx.hot_function.as_str()),
                "{text}"
            );
        }
        None => eprintln!(
            "SKIPPED pprof decode: no python3 with the protobuf package (Debian python3-protobuf)"
        ),
    }

    // Flame graph (inferno): names the hot function.
    let (s, h, b) = get(state, &format!("{uri}/flamegraph.svg"), &[]).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(h[header::CONTENT_TYPE], "image/svg+xml");
    let svg = String::from_utf8(b).unwrap();
    assert!(
        svg.starts_with("<?xml") && svg.contains(&fx.hot_function),
        "{svg}"
    );
    let (s, _, _) = get(state, "/api/v1/profiles/0011/flamegraph.svg", &[]).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

/// Errors: JSON with a code.
async fn errors_are_json(state: &AppState, fx: &Fixture) {
    let hex = &fx.hex;
    let uri = format!("/api/v1/profiles/{hex}");
    let (s, h, b) = get(state, "/api/v1/profiles/00112233", &[]).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(h[header::CONTENT_TYPE], "application/json");
    assert_eq!(json(&b)["error"], "not_found");
    for bad in [
        format!("{uri}?format=pdf"),
        format!("{uri}?window=last"),
        format!("{uri}?colour=red"),
        "/api/v1/profiles/xyz".to_string(),
    ] {
        let (s, _, b) = get(state, &bad, &[]).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(json(&b)["error"], "bad_request", "{bad}");
    }
    let (s, _, b) = get(state, "/nope", &[]).await;
    assert_eq!(
        (s, json(&b)["error"].clone()),
        (StatusCode::NOT_FOUND, "not_found".into())
    );
    // What axum answers itself (a method no route has) is JSON too.
    let resp = router(state.clone())
        .oneshot(
            Request::builder()
                .method("POST")
                .uri(&uri)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
    assert!(resp.headers().contains_key(header::ALLOW));
    let b = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    assert_eq!(json(&b)["error"], "method_not_allowed");
    assert_eq!(json(&b)["message"], "Method Not Allowed");
}

/// `/metrics`: requests by route template and the quality gauges.
async fn metrics_by_route_and_quality(state: &AppState, fx: &Fixture) {
    let hex = &fx.hex;
    // Request metrics by route template.
    let (s, h, b) = get(state, "/metrics", &[]).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        h[header::CONTENT_TYPE],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = String::from_utf8(b).unwrap();
    assert!(text.contains(
        "pgo_agent_http_requests_total{method=\"GET\",route=\"/api/v1/profiles/{build_id}\",status=\"400\"} 4\n"
    ), "{text}");
    assert!(text.contains("pgo_agent_binaries_tracked 1\n"), "{text}");
    assert!(text.contains(&format!(
        "pgo_agent_binary_samples{{build_id=\"{hex}\"}} 1234\n"
    )));

    // Quality gauges: the density agrees with llvm-profgen-19 --show-density (%.1f).
    let density_line = text
        .lines()
        .find(|l| l.starts_with(&format!("pgo_agent_profile_density{{build_id=\"{hex}\"}} ")))
        .unwrap_or_else(|| panic!("no density gauge in {text}"));
    let density: f64 = density_line.rsplit(' ').next().unwrap().parse().unwrap();
    match &fx.llvm_density {
        Some(want) => assert_eq!(&format!("{density:.1}"), want, "{density_line}"),
        None => eprintln!("SKIPPED density oracle: llvm-profgen-19 missing"),
    }
    assert!(text.contains(&format!(
        "pgo_agent_profile_taken_branches_per_text_byte{{build_id=\"{hex}\"}} "
    )));
    // The sampling still needed, as the list says (t · (50 / d − 1), 0 when enough).
    let more: f64 = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!(
                "pgo_agent_profile_more_sampling_seconds{{build_id=\"{hex}\"}} "
            ))
        })
        .unwrap_or_else(|| panic!("no more-sampling gauge in {text}"))
        .parse()
        .unwrap();
    let want = if density < 50.0 {
        60.0 * (50.0 / density - 1.0)
    } else {
        0.0
    };
    assert!((more - want).abs() < 1e-6, "{more} {want}");
    // The aggregate was made from this very binary: nothing is stale.
    assert!(
        text.contains(&format!(
            "pgo_agent_profile_stale_sample_ratio{{build_id=\"{hex}\"}} 0\n"
        )),
        "{text}"
    );
}

/// A bearer token guards the API but not `/healthz`; the rate limit answers 429.
async fn token_and_rate_limit(state: &AppState) {
    // Bearer token.
    let mut locked = state.clone();
    locked.token = Some(Arc::from("s3cret"));
    let (s, h, b) = get(&locked, "/api/v1/profiles", &[]).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(h[header::WWW_AUTHENTICATE], "Bearer");
    assert_eq!(json(&b)["error"], "unauthorized");
    for (token, status) in [
        ("Bearer wrong", StatusCode::UNAUTHORIZED),
        ("Bearer s3cret", StatusCode::OK),
    ] {
        let (s, _, _) = get(&locked, "/api/v1/profiles", &[("authorization", token)]).await;
        assert_eq!(s, status, "{token}");
    }
    let (s, _, _) = get(&locked, "/healthz", &[]).await;
    assert_eq!(s, StatusCode::OK);

    // Rate limit: a bucket of 2 at 1/s.
    let mut limited = state.clone();
    limited.rate = Arc::new(service::http::RateLimiter::new(1, 2));
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(get(&limited, "/healthz", &[]).await.0);
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
}

// ---------------------------------------------------------------------------------------
// A real daemon on loopback.

#[test]
fn live_daemon_prometheus_and_pull() {
    let _machine = e2e::support::machine_lock();
    if !e2e::support::can_sample(
        "live_daemon_prometheus_and_pull",
        &["clang-19", "llvm-profdata-19"],
    ) {
        return;
    }
    let dir = scratch("live");
    let spin = build_spin(&dir);
    let hex = build_id_hex(&spin);
    let config =
        cpu_clock_config("[filters]\ncomms = [\"spin\"]\n[output]\nflush_interval_secs = 1\n");
    let daemon = RunningDaemon::serve(&config, &dir.join("state"), 120);
    let mut child = Command::new(&spin).arg("4").spawn().unwrap();

    // The profile appears once spin has been sampled and a flush happened.
    let listed = wait_for(Duration::from_secs(60), || {
        let body = daemon.get("/api/v1/profiles").ok()?.ok().ok()?;
        body.contains(&hex).then_some(body)
    });
    let _ = child.wait();
    std::thread::sleep(Duration::from_millis(1500)); // one more flush with all of spin
    if listed.is_none() {
        let metrics = daemon.get("/metrics").map(|r| r.body);
        let drops: Vec<&str> = metrics
            .as_deref()
            .unwrap_or("")
            .lines()
            .filter(|l| l.starts_with("pgo_agent_events_dropped_total"))
            .collect();
        panic!("spin's profile never listed; samples not routed: {drops:#?}");
    }

    let metrics = daemon.get("/metrics").unwrap();
    assert_eq!(metrics.status, 200);
    let metrics = metrics.body;
    assert!(
        metrics.contains("pgo_agent_samples_total{mode=\"cpu_clock\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("pgo_agent_sampling_mode_info{mode=\"cpu_clock\"} 1"));
    assert!(
        metrics.contains("pgo_agent_events_dropped_total{reason=\"unmapped\",stage=\"router\"}"),
        "{metrics}"
    );
    assert!(metrics.contains(&format!("pgo_agent_binary_samples{{build_id=\"{hex}\"}}")));
    promtool_checks_clean(&metrics);
    prometheus_scrapes(&dir, daemon.base());

    // pull → llvm-profdata show → clang -fprofile-sample-use.
    let pulled = dir.join("spin.extbinary.prof");
    cli(&[
        "pull",
        "--agent",
        daemon.base(),
        "--build-id",
        &hex,
        "--binary",
        spin.to_str().unwrap(),
        "-o",
        pulled.to_str().unwrap(),
    ]);
    let summary = daemon.stop();
    assert!(summary.readers.samples > 0);
    // The pulled profile is what `convert` makes of the daemon's own state file.
    let state_file = dir.join("state").join(format!("{hex}.unsymbolized"));
    let converted = dir.join("converted.extbinary.prof");
    cli(&[
        "convert",
        "--unsymbolized-profile",
        state_file.to_str().unwrap(),
        "--binary",
        spin.to_str().unwrap(),
        "-o",
        converted.to_str().unwrap(),
    ]);
    assert!(std::fs::read(&pulled).unwrap() == std::fs::read(&converted).unwrap());
    pulled_profile_reads_and_compiles(&dir, &pulled);
}

/// `promtool check metrics` of the exposition: nothing to report (skipped without
/// promtool).
fn promtool_checks_clean(metrics: &str) {
    if corpus::find_tool("promtool").is_none() {
        eprintln!("SKIPPED promtool check: promtool missing (Debian package prometheus; .ci/run installs it)");
        return;
    }
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    p.stdin
        .take()
        .unwrap()
        .write_all(metrics.as_bytes())
        .unwrap();
    let out = p.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.trim().is_empty(),
        "promtool: {report}"
    );
}

/// A real Prometheus scrapes the daemon at `base`: the target is up and has cpu-clock
/// samples (skipped without prometheus).
fn prometheus_scrapes(dir: &Path, base: &str) {
    if corpus::find_tool("prometheus").is_none() {
        eprintln!("SKIPPED prometheus scrape: prometheus missing (Debian package prometheus; .ci/run installs it)");
        return;
    }
    let target = base.trim_start_matches("http://");
    let prom_port = free_port();
    let cfg = dir.join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: pgo\n    \
             static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let mut prom = Command::new("prometheus")
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let query = |q: &str| {
        let body = http_get(&format!(
            "http://127.0.0.1:{prom_port}/api/v1/query?query={q}"
        ))
        .ok()?
        .ok()
        .ok()?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let r = v["data"]["result"].get(0)?.clone();
        Some(r)
    };
    let up = wait_for(Duration::from_secs(60), || {
        query("up%7Bjob%3D%22pgo%22%7D").filter(|r| r["value"][1] == "1")
    });
    let samples = wait_for(Duration::from_secs(30), || {
        query("pgo_agent_samples_total")
            .filter(|r| r["value"][1].as_str().and_then(|v| v.parse::<f64>().ok()) > Some(0.0))
    });
    let _ = prom.kill();
    let _ = prom.wait();
    assert!(up.is_some(), "prometheus never saw the target up");
    let samples = samples.expect("prometheus has no pgo_agent_samples_total");
    assert_eq!(samples["metric"]["mode"], "cpu_clock");
}

/// `llvm-profdata-19 show` reads the pulled profile of spin cleanly, with body samples, and
/// clang-19 compiles spin.c with it without a diagnostic.
fn pulled_profile_reads_and_compiles(dir: &Path, pulled: &Path) {
    let show = Command::new("llvm-profdata-19")
        .args(["show", "--sample"])
        .arg(pulled)
        .output()
        .unwrap();
    assert!(
        show.status.success() && show.stderr.is_empty(),
        "llvm-profdata-19 show: {}",
        String::from_utf8_lossy(&show.stderr)
    );
    // cpu-clock samples reach the probes of the sampled blocks: the profile has body
    // samples. (Which of the two loops leads is not asserted: on this VM cpu-clock samples
    // are biased towards cold_work, for perf as well; see FAQ.md.)
    let listing = String::from_utf8_lossy(&show.stdout);
    let lines: Vec<&str> = listing.lines().collect();
    let total_of = |name: &str| -> u64 {
        lines
            .windows(2)
            .filter(|w| w[0].starts_with(&format!("Function: {name}:")))
            .filter_map(|w| w[1].split(',').next()?.trim().parse::<u64>().ok())
            .sum()
    };
    let (hot, cold) = (total_of("hot_loop"), total_of("cold_work"));
    assert!(
        hot + cold > 0,
        "hot_loop {hot}, cold_work {cold}:\n{listing}"
    );
    let cc = Command::new("clang-19")
        .args(["-O2", "-fpseudo-probe-for-profiling", "-c", "-o"])
        .arg(dir.join("spin.o"))
        .arg(format!("-fprofile-sample-use={}", pulled.display()))
        .arg(corpus::sources_dir().join("live/spin.c"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&cc.stderr);
    assert!(
        cc.status.success() && stderr.trim().is_empty(),
        "clang: {stderr}"
    );
}

/// The list entry of `hex` on `daemon`, if listed.
fn listed_entry(daemon: &RunningDaemon, hex: &str) -> Option<serde_json::Value> {
    let body = daemon.get("/api/v1/profiles").ok()?.ok().ok()?;
    json(body.as_bytes())["profiles"]
        .as_array()?
        .iter()
        .find(|p| p["build_id"] == hex)
        .cloned()
}

/// `GET /api/v1/profiles/{hex}?format=..` of `daemon`: the body and
/// `X-Pgo-Profile-Source`.
fn profile(daemon: &RunningDaemon, hex: &str, format: &str) -> Option<(String, String)> {
    let r = daemon
        .get(&format!("/api/v1/profiles/{hex}?format={format}"))
        .ok()
        .filter(|r| r.status == 200)?;
    let source = r.header("x-pgo-profile-source").to_string();
    Some((r.body, source))
}

/// Samples per function (the leaf frame of each top-level profile) of an LLVM text profile.
fn samples_per_function(text: &str) -> std::collections::BTreeMap<String, u64> {
    let profile = llvm_text_reader::read(text).unwrap_or_else(|e| panic!("{e}:\n{text}"));
    let mut per = std::collections::BTreeMap::new();
    for (context, f) in &profile.profiles {
        let leaf = context.frames.last().map_or("", |f| f.func.as_str());
        *per.entry(leaf.to_string()).or_default() += f.total;
    }
    per
}

/// The sum of the range counts of an unsymbolized profile (one per cpu-clock sample).
fn range_samples(text: &str) -> u64 {
    read_unsymbolized(text, 0)
        .unwrap_or_else(|e| panic!("{e}:\n{text}"))
        .contexts
        .values()
        .flat_map(|c| c.ranges.values())
        .sum()
}

#[test]
fn fresh_profile_served_within_seconds_with_the_default_config() {
    let _machine = e2e::support::machine_lock();
    let test = "fresh_profile_served_within_seconds_with_the_default_config";
    if !e2e::support::can_sample(test, &["clang-19"]) {
        return;
    }
    let dir = scratch("fresh");
    let spin = build_spin(&dir);
    let hex = build_id_hex(&spin);
    let state = dir.join("state");
    let file = |ext: &str| state.join(format!("{hex}.{ext}"));
    let config = Config::embedded();
    assert_eq!(config.output.flush_interval_secs, 60);

    // Run 1: the profile within 10 s of spin's start, with no flush yet.
    let daemon = RunningDaemon::serve(&config, &state, 300);
    let started = Instant::now();
    let mut child = Command::new(&spin).arg("4").spawn().unwrap();
    let limit = Duration::from_secs(10);
    let served = wait_for(limit, || {
        let entry = listed_entry(&daemon, &hex)?;
        let (text, source) = profile(&daemon, &hex, "text")?;
        let per = samples_per_function(&text);
        let spin_samples =
            per.get("hot_loop").copied().unwrap_or(0) + per.get("cold_work").copied().unwrap_or(0);
        (spin_samples > 0).then_some((entry, source, per, started.elapsed()))
    });
    let (entry, source, per, elapsed) = served.unwrap_or_else(|| {
        panic!(
            "spin's profile was not listed and served within {limit:?}: {:?}",
            listed_entry(&daemon, &hex)
        )
    });
    eprintln!("listed and served {elapsed:?} after spin's start: {entry}; {per:?}");
    assert!(elapsed < limit, "{elapsed:?}");
    assert_eq!(entry["source"], "workers", "{entry}");
    assert!(entry["samples"].as_u64().unwrap() > 0, "{entry}");
    assert!(entry["age_secs"].as_u64().unwrap() <= 2, "{entry}");
    assert_eq!(entry["window"]["last_flush_unix_secs"], 0, "{entry}");
    assert_eq!(entry["symbolization"], "symbolized", "{entry}");
    assert_eq!(entry["has_pseudo_probes"], true, "{entry}");
    assert_eq!(entry["names"]["source"], "binary", "{entry}");
    assert_eq!(source, "workers");
    // Served from memory: the state directory was not written.
    assert!(!file("unsymbolized").exists() && !file("json").exists());

    // Once spin has exited and its last samples are in, what is served is what the
    // (final) flush writes: the same counts, the same bytes.
    assert!(child.wait().unwrap().success());
    std::thread::sleep(Duration::from_millis(1500) + LIVE_SNAPSHOT_TTL);
    let entry = listed_entry(&daemon, &hex).unwrap();
    let samples = entry["samples"].as_u64().unwrap();
    let (unsymbolized, source) = profile(&daemon, &hex, "unsymbolized").unwrap();
    assert_eq!(source, "workers");
    assert_eq!(range_samples(&unsymbolized), samples);
    assert!(!file("unsymbolized").exists());
    let summary = daemon.stop();
    let counted = |s: &RunSummary| {
        s.binaries
            .iter()
            .find(|b| b.build_id == hex)
            .map(|b| b.counted)
            .unwrap()
    };
    assert_eq!(counted(&summary), samples);
    assert_eq!(
        std::fs::read_to_string(file("unsymbolized")).unwrap(),
        unsymbolized
    );
    let flushed = json(&std::fs::read(file("json")).unwrap());
    assert_eq!(flushed["samples"], samples);

    // Run 2, restarted over that state: the restored aggregate is served from the workers
    // at once, then the restored counts plus the new ones, each once.
    let daemon = RunningDaemon::serve(&config, &state, 300);
    let restored = wait_for(Duration::from_secs(30), || {
        listed_entry(&daemon, &hex).filter(|e| e["source"] == "workers")
    })
    .expect("the restored aggregate is served from the workers");
    assert_eq!(restored["samples"], samples, "{restored}");
    assert_eq!(
        profile(&daemon, &hex, "unsymbolized").unwrap(),
        (unsymbolized.clone(), "workers".to_string())
    );
    let mut child = Command::new(&spin).arg("3").spawn().unwrap();
    assert!(child.wait().unwrap().success());
    std::thread::sleep(Duration::from_millis(1500) + LIVE_SNAPSHOT_TTL);
    let entry = listed_entry(&daemon, &hex).unwrap();
    let both = entry["samples"].as_u64().unwrap();
    let (unsymbolized2, _) = profile(&daemon, &hex, "unsymbolized").unwrap();
    assert_eq!(range_samples(&unsymbolized2), both);
    let summary = daemon.stop();
    let new = counted(&summary);
    assert!(new > 0);
    assert_eq!(both, samples + new, "restored {samples} + counted {new}");
    assert_eq!(
        std::fs::read_to_string(file("unsymbolized")).unwrap(),
        unsymbolized2
    );
    assert_eq!(json(&std::fs::read(file("json")).unwrap())["samples"], both);
}

/// A program built without `-g` (symbols, no DWARF, no pseudo probes) under the daemon:
/// its samples are counted, it is listed `no_line_tables` (a sample profile has nothing to
/// key its counts by) without a density, text is served as the unsymbolized profile, and
/// pprof and the flame graph name its functions from its symbols, not in hex. The same
/// program built with `-g` alone (line contexts) is listed `symbolized` with its density.
#[test]
fn a_program_without_debug_info_is_listed_so_and_named_from_its_symbols() {
    let _machine = e2e::support::machine_lock();
    let test = "a_program_without_debug_info_is_listed_so_and_named_from_its_symbols";
    if !e2e::support::can_sample(test, &["clang-19"]) {
        return;
    }
    let dir = scratch("nolines");
    let build = |name: &str, debug: &[&str]| {
        let out = dir.join(name);
        let built = Command::new("clang-19")
            .args([
                "-O2",
                "-fno-omit-frame-pointer",
                "-mno-omit-leaf-frame-pointer",
            ])
            .args(debug)
            .args(["-fPIE", "-pie", "-Wl,--build-id", "-o"])
            .arg(&out)
            .arg(corpus::sources_dir().join("live/spin.c"))
            .status()
            .unwrap();
        assert!(built.success());
        out
    };
    let spin = build("spin-nog", &[]);
    let lines = build("spin-g", &["-g"]);
    let binary = ProfiledBinary::load(&spin).unwrap();
    assert!(binary.name_source().has_names() && !binary.has_line_info());
    assert!(!binary.has_pseudo_probes());
    let hex = build_id_hex(&spin);
    let lines_hex = build_id_hex(&lines);
    let mut config = Config::embedded();
    config.output.flush_interval_secs = 1;
    let daemon = RunningDaemon::serve(&config, &dir.join("state"), 120);
    let mut children = [
        Command::new(&spin).arg("3").spawn().unwrap(),
        Command::new(&lines).arg("3").spawn().unwrap(),
    ];
    let counted = |e: &serde_json::Value| e["samples"].as_u64() > Some(100);
    let entries = wait_for(Duration::from_secs(10), || {
        let entry = listed_entry(&daemon, &hex).filter(counted)?;
        let lines_entry =
            listed_entry(&daemon, &lines_hex).filter(|e| counted(e) && e["density"].is_object())?;
        Some((entry, lines_entry))
    });
    for child in &mut children {
        assert!(child.wait().unwrap().success());
    }
    let (entry, lines_entry) = entries.unwrap_or_else(|| {
        panic!(
            "{:?}\n{:?}",
            listed_entry(&daemon, &hex),
            listed_entry(&daemon, &lines_hex)
        )
    });
    assert_eq!(entry["symbolization"], "no_line_tables", "{entry:#}");
    assert_eq!(entry["names"]["source"], "binary", "{entry:#}");
    assert_eq!(entry["names"]["no_line_tables"], true, "{entry:#}");
    assert!(entry["density"].is_null(), "{entry:#}");
    assert_eq!(
        lines_entry["symbolization"], "symbolized",
        "{lines_entry:#}"
    );
    assert_eq!(lines_entry["kind"], "line_context", "{lines_entry:#}");
    assert!(
        lines_entry["density"]["density"].as_f64() > Some(0.0),
        "{lines_entry:#}"
    );

    let text = daemon
        .get(&format!("/api/v1/profiles/{hex}?format=text"))
        .unwrap();
    assert_eq!(text.status, 200);
    assert_eq!(text.header("x-pgo-profile-format"), "unsymbolized");
    assert!(range_samples(&text.body) > 100, "{}", text.body);

    let svg = daemon
        .get(&format!("/api/v1/profiles/{hex}/flamegraph.svg"))
        .unwrap()
        .ok()
        .unwrap();
    assert!(
        svg.contains("cold_work") || svg.contains("hot_loop"),
        "no function of spin named in the flame graph"
    );
    let mut pprof = Vec::new();
    ureq::get(&daemon.url(&format!("/api/v1/profiles/{hex}?format=pprof")))
        .call()
        .unwrap()
        .into_reader()
        .read_to_end(&mut pprof)
        .unwrap();
    let has = |name: &[u8]| pprof.windows(name.len()).any(|w| w == name);
    assert!(
        has(b"cold_work") || has(b"hot_loop"),
        "no function of spin named in the pprof profile"
    );
    assert!(has(b"main"), "main is not named in the pprof profile");
    daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// An API address the daemon cannot serve (a port another socket holds, a host name) stops
/// it before it opens any perf event: with only a sampling mode this machine lacks, the
/// error is still the address's, not the sampling's.
#[test]
fn an_address_that_cannot_be_served_stops_the_daemon_before_sampling() {
    let _machine = e2e::support::machine_lock();
    let dir = scratch("listen");
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let mut config = Config::embedded();
    // A mode no VM and few hosts have: sampling, if tried first, fails on it.
    config.sampling.modes = vec![collector::live::capability::SamplingMode::IntelLbr];
    for (listen, want) in [
        (
            format!("127.0.0.1:{port}"),
            format!("binding 127.0.0.1:{port}"),
        ),
        (
            "localhost:9".to_string(),
            "listen address \"localhost:9\": expected IP:PORT".to_string(),
        ),
    ] {
        let args = daemon::run::RunArgs {
            config: None,
            state_dir: Some(dir.join("state")),
            duration_secs: Some(5),
            listen: Some(listen.clone()),
        };
        let control = daemon::run::RunControl::default();
        let started = Instant::now();
        let err = match daemon::run::run_daemon(&config, &args, &control) {
            Ok(_) => panic!("{listen}: the daemon ran"),
            Err(e) => format!("{e:#}"),
        };
        assert!(err.contains(&want), "{listen}: {err}");
        assert!(started.elapsed() < Duration::from_secs(5), "{listen}");
    }
    drop(held);
    // With nothing wrong but the mode, the error says why the mode was ruled out, not
    // that privileges are missing (a root test process has them).
    let args = daemon::run::RunArgs {
        config: None,
        state_dir: Some(dir.join("state")),
        duration_secs: Some(1),
        listen: None,
    };
    match daemon::run::run_daemon(&config, &args, &daemon::run::RunControl::default()) {
        Ok(_) => eprintln!("this machine samples intel_lbr: no mode error to check"),
        Err(e) => {
            let err = format!("{e:#}");
            assert!(err.contains("intel_lbr"), "{err}");
            if nix::unistd::geteuid().is_root() {
                assert!(!err.contains("needs root"), "{err}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

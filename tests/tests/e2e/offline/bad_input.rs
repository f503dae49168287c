//! Malformed input to `pgo-agent convert`, `pgo-agent heap` and the HTTP API (issue 9).
//!
//! Command-line cases are a table: each runs the real command line (`daemon::run_cli`) in a
//! child process (this test binary re-executed on `cli_process`), and must exit non-zero
//! with a message naming the input and where in it (offset, line, section or field), with
//! no panic in the output. HTTP cases drive the router with `oneshot` and must get a 4xx
//! whose JSON body names the bad parameter.

use std::path::{Path, PathBuf};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use collector::memprof::raw::write_raw_profile;
use collector::memprof::SegmentEntry;
use collector::BuildId;
use e2e::corpus::{self, Variant};
use e2e::http::store_app;
use service::http::router;
use tower::ServiceExt;

/// Runs `pgo-agent <args>` in a child process: (exit code, stdout + stderr).
fn run(args: &[String]) -> (Option<i32>, String) {
    e2e::support::cli_in_child(args)
}

/// One command-line case: the arguments and the strings the output must contain.
struct Case {
    name: String,
    args: Vec<String>,
    expect: Vec<String>,
}

fn case(name: &str, args: &[&str], expect: &[&str]) -> Case {
    Case {
        name: name.to_string(),
        args: args.iter().map(|s| s.to_string()).collect(),
        expect: expect.iter().map(|s| s.to_string()).collect(),
    }
}

/// Runs every case; all failures are reported together.
fn check(cases: &[Case]) {
    let mut failures = Vec::new();
    for c in cases {
        let (code, out) = run(&c.args);
        let mut wrong = Vec::new();
        if code != Some(1) {
            wrong.push(format!("exit code {code:?}, expected 1"));
        }
        if out.contains("panicked") {
            wrong.push("panicked".to_string());
        }
        for e in &c.expect {
            if !out.contains(e.as_str()) {
                wrong.push(format!("no {e:?} in the output"));
            }
        }
        if !wrong.is_empty() {
            failures.push(format!("{}: {}\n{out}", c.name, wrong.join("; ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A `convert` case: `convert INPUT_FLAG INPUT --binary BINARY -o OUT`.
fn convert_case(name: &str, input: [&str; 2], binary: &str, out: &str, expect: &[&str]) -> Case {
    case(
        name,
        &["convert", input[0], input[1], "--binary", binary, "-o", out],
        expect,
    )
}

fn scratch(name: &str) -> PathBuf {
    e2e::support::suite_dir("bad-input").join(name)
}

fn write(name: &str, bytes: &[u8]) -> String {
    let p = scratch(name);
    std::fs::write(&p, bytes).unwrap();
    s(&p).to_string()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn fixture() -> (PathBuf, PathBuf) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/propeller_sample_1");
    (
        dir.join("perf.data"),
        dir.join("propeller_sample_1.bin.gen"),
    )
}

/// File offset and size of a section, from the ELF section headers.
fn section_range(data: &[u8], name: &str) -> (usize, usize) {
    use object::{Object, ObjectSection};
    let file = object::File::parse(data).unwrap();
    let section = file.section_by_name(name).unwrap();
    let (offset, size) = section.file_range().unwrap();
    (offset as usize, size as usize)
}

/// Index of a section in the ELF section header table.
fn section_index(data: &[u8], name: &str) -> usize {
    use object::{Object, ObjectSection};
    let file = object::File::parse(data).unwrap();
    file.section_by_name(name).unwrap().index().0
}

/// File offset of perf.data feature `bit`'s section (the feature table follows the data
/// section; one 16-byte `{offset, size}` per set bit, in bit order).
fn perf_data_feature(bytes: &[u8], bit: u32) -> usize {
    let le64 = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let data_end = (le64(40) + le64(48)) as usize;
    let index = (0..bit)
        .filter(|b| bytes[72 + (b / 8) as usize] & (1 << (b % 8)) != 0)
        .count();
    le64(data_end + index * 16) as usize
}

#[test]
fn convert_rejects_malformed_input() {
    let _machine = e2e::support::machine_share();
    let (data, binary) = fixture();
    let out = scratch("out.prof");
    let (data, bin, out) = (s(&data), s(&binary), s(&out));
    let mut cases = malformed_perf_data(data, bin, out);
    cases.extend(malformed_binaries(data, bin, out));
    cases.extend(malformed_text_inputs(bin, out));
    // A corrupt .pseudo_probe section (needs the corpus, built with clang-19).
    if corpus::tools_available(
        "convert_rejects_malformed_input (probe case)",
        &["clang-19"],
    ) {
        let program = corpus::program("recursion", Variant::Probe).unwrap();
        let mut bad = std::fs::read(&program.binary).unwrap();
        let (offset, size) = section_range(&bad, ".pseudo_probe");
        bad[offset..offset + size].fill(0xff);
        let p = write("recursion", &bad);
        let empty = write("empty.perfscript", b"");
        cases.push(convert_case(
            "corrupt .pseudo_probe",
            ["--perfscript", &empty],
            &p,
            out,
            &[&p, ".pseudo_probe", "offset"],
        ));
    }
    check(&cases);
}

/// perf.data truncated anywhere, with a bad magic, and with counts that would size
/// allocations.
fn malformed_perf_data(data: &str, bin: &str, out: &str) -> Vec<Case> {
    let bytes = std::fs::read(data).unwrap();
    let mut cases = Vec::new();
    for cut in [0usize, 50, 300, 100_000, bytes.len() - 7] {
        let p = write(&format!("cut-{cut}.data"), &bytes[..cut]);
        cases.push(convert_case(
            &format!("perf.data cut at {cut}"),
            ["--perfdata", &p],
            bin,
            out,
            &[&p, "offset"],
        ));
    }
    let mut magic = bytes.clone();
    magic[..8].copy_from_slice(b"PERFILE9");
    let p = write("magic.data", &magic);
    cases.push(convert_case(
        "perf.data bad magic",
        ["--perfdata", &p],
        bin,
        out,
        &[&p, "offset 0", "bad magic"],
    ));
    // Fuzz crash (perf_data target): HEADER_EVENT_DESC nr = 0xffffffff.
    let mut desc = bytes.clone();
    let at = perf_data_feature(&bytes, 12);
    desc[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let p = write("event-desc.data", &desc);
    cases.push(convert_case(
        "perf.data EVENT_DESC count",
        ["--perfdata", &p],
        bin,
        out,
        &[&p, &format!("offset {at}"), "event_desc nr 4294967295"],
    ));
    let mut attr = bytes.clone();
    attr[16..24].copy_from_slice(&8u64.to_le_bytes());
    let p = write("attr-size.data", &attr);
    cases.push(convert_case(
        "perf.data attr_size",
        ["--perfdata", &p],
        bin,
        out,
        &[&p, "offset 16", "attr_size 8"],
    ));
    cases
}

/// Binaries that are not ELF files or whose `.text` lies past their end.
fn malformed_binaries(data: &str, bin: &str, out: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    let p = write("garbage.elf", b"\x7fELF\x02\x01\x01 this is not a binary");
    cases.push(convert_case(
        "garbage ELF",
        ["--perfdata", data],
        &p,
        out,
        &[&p, "not a valid ELF"],
    ));
    // With a perf script the binary is loaded on its own thread while the script is read
    // (`profgen::samples::read_counters_while_loading`): its error must still be the one
    // reported, whether the script is good, missing or not a perf script.
    let good = write(
        "good.perfscript",
        b"\t          4005dc\n\t          4005c8\n 0x4005c8/0x4005dc/P/-/-/0  0x40062f/0x4005b0/P/-/-/0\n\n",
    );
    let junk = write("junk.perfscript", b"not a perf script\n");
    for (what, script) in [
        ("good", good.as_str()),
        ("missing", "/nonexistent/x.perfscript"),
        ("junk", junk.as_str()),
    ] {
        cases.push(convert_case(
            &format!("garbage ELF, {what} perf script"),
            ["--perfscript", script],
            &p,
            out,
            &[&p, "not a valid ELF"],
        ));
    }
    // A `.text` section header pointing past the end of the file (ELF64 little-endian:
    // e_shoff at 0x28, e_shentsize at 0x3a; sh_offset at +0x18 of a section header).
    let mut elf = std::fs::read(bin).unwrap();
    let text = section_index(&elf, ".text");
    let le = |b: &[u8], at: usize, n: usize| {
        (0..n).fold(0u64, |v, i| v | (b[at + i] as u64) << (8 * i)) as usize
    };
    let header = le(&elf, 0x28, 8) + text * le(&elf, 0x3a, 2);
    let past_end = elf.len() as u64 + 0x1000;
    elf[header + 0x18..header + 0x20].copy_from_slice(&past_end.to_le_bytes());
    let p = write("text-past-end.elf", &elf);
    cases.push(convert_case(
        ".text past the end of the binary",
        ["--perfdata", data],
        &p,
        out,
        &[
            &p,
            &format!(".text (#{text}, file offset {past_end:#x}, size "),
            "cannot read contents",
        ],
    ));
    // A directory or a device given as the binary.
    for not_a_file in ["/tmp", "/dev/null"] {
        cases.push(convert_case(
            &format!("{not_a_file} as the binary"),
            ["--perfdata", data],
            not_a_file,
            out,
            &[not_a_file, "not a regular file"],
        ));
    }
    cases
}

/// A missing input, perf scripts and unsymbolized profiles that do not parse.
fn malformed_text_inputs(bin: &str, out: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    let missing = "/nonexistent/perf.data";
    cases.push(convert_case(
        "missing input",
        ["--perfdata", missing],
        bin,
        out,
        &[missing],
    ));

    // A stack-only perf script (cpu-clock `-F ip,dso`) whose MMAP line maps the binary's
    // code at a file offset no text segment has: the error names the script.
    let p = write(
        "bad-mmap.stack.perfscript",
        b"PERF_RECORD_MMAP2 7/7: [0x555555554000(0x1000) @ 0x123000 fe:00 1 0]: r-xp \
          /x/propeller_sample_1.bin.gen\n     555555554190 (/x/propeller_sample_1.bin.gen)\n",
    );
    cases.push(convert_case(
        "stack-only perf script with an inconsistent mapping",
        ["--perfscript", &p],
        bin,
        out,
        &[
            &format!("unwinding samples of {p}"),
            "mmap of /x/propeller_sample_1.bin.gen",
        ],
    ));

    // perf script: a hybrid sample without its branch-stack line; not a perf script.
    let p = write(
        "no-lbr.perfscript",
        b"\t          4005dc\n\t          4005c8\n 0x4005c8/0x4005dc/P/-/-/0  0x40062f/0x4005b0/P/-/-/0\n\n\t          4005dc\n\t          4005c8\n",
    );
    cases.push(convert_case(
        "perf script missing LBR line",
        ["--perfscript", &p],
        bin,
        out,
        &[&format!("{p}:5:"), "No LBR sample line"],
    ));
    let p = write("text.perfscript", b"not a perf script\n");
    cases.push(convert_case(
        "not a perf script",
        ["--perfscript", &p],
        bin,
        out,
        &[&p, "Invalid perf script input"],
    ));

    // Unsymbolized profiles: a bad range line, a count past the lines that follow.
    let p = write("bad.raw", b"2\n8d0-8e3:10\nzz-8f4:5\n0\n");
    cases.push(convert_case(
        "unsymbolized bad range",
        ["--unsymbolized-profile", &p],
        bin,
        out,
        &[&p, "line 3"],
    ));
    let p = write("count.raw", b"99999999999\n8d0-8e3:10\n");
    cases.push(convert_case(
        "unsymbolized huge count",
        ["--unsymbolized-profile", &p],
        bin,
        out,
        &[&p, "line"],
    ));
    cases
}

/// Input `convert` can still use, with parts it cannot: it converts it (exit 0) and says
/// what it skipped, how many of each kind, naming the input; nothing is dropped unsaid.
#[test]
fn convert_says_what_it_skips() {
    let _machine = e2e::support::machine_share();
    let (_, binary) = fixture();
    let out = scratch("skips.prof");
    // Three hybrid samples: a good one, one whose branch stack ends at a malformed entry
    // (its first entry is used), one with a call-stack line that is not hex (dropped).
    let script = write(
        "skips.perfscript",
        b"\t          4005dc\n\t          4005c8\n 0x4005c8/0x4005dc/P/-/-/0  0x40062f/0x4005b0/P/-/-/0\n\n\
          \t          4005dc\n\t          4005c8\n 0x4005c8/0x4005dc/P/-/-/0  0x40062f/zz/P/-/-/0\n\n\
          \t          4005dc\n\t          zz4005c8\n 0x4005c8/0x4005dc/P/-/-/0  0x40062f/0x4005b0/P/-/-/0\n\n",
    );
    let args: Vec<String> = [
        "convert",
        "--perfscript",
        &script,
        "--binary",
        s(&binary),
        "-o",
    ]
    .iter()
    .map(|a| a.to_string())
    .chain([s(&out).to_string()])
    .collect();
    let (code, text) = run(&args);
    assert_eq!(code, Some(0), "{text}");
    for expect in [
        format!(
            "warning: {script}: 1 branch-stack line(s) end at a malformed entry (llvm-profgen: \
             \"Invalid address in LBR record\")"
        ),
        format!("warning: {script}: 1 sample(s) dropped for malformed text"),
    ] {
        assert!(text.contains(&expect), "no {expect:?} in:\n{text}");
    }
}

/// A perf.data recorded from another build of the binary (its build-id table names the
/// binary's file with another build id) gets a warning naming both ids; the recording's
/// own binary gets none.
#[test]
fn convert_warns_of_a_recording_of_another_build() {
    let _machine = e2e::support::machine_share();
    let (data, binary) = fixture();
    let other = scratch("other-build");
    std::fs::create_dir_all(&other).unwrap();
    let other = other.join("propeller_sample_1.bin.gen");
    // The same binary with another build id (its 8-byte GNU build-id note changed).
    let mut elf = std::fs::read(&binary).unwrap();
    let id = [0x57, 0x2a, 0xc7, 0x24, 0x87, 0xae, 0x19, 0x66];
    let at = elf
        .windows(id.len())
        .position(|w| w == id)
        .expect("the build id's bytes");
    elf[at] ^= 0xff;
    std::fs::write(&other, &elf).unwrap();
    let convert = |bin: &Path, out: &str| {
        let args = ["convert", "--perfdata", s(&data), "--binary", s(bin), "-o"];
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.push(s(&scratch(out)).to_string());
        run(&args).1
    };
    let warning = "the samples are of another build";
    let own = convert(&binary, "own-build.prof");
    assert!(!own.contains(warning), "{own}");
    let text = convert(&other, "other-build.prof");
    assert!(
        text.contains(warning)
            && text.contains("build id of propeller_sample_1.bin.gen is 572ac72487ae1966")
            && text.contains("the binary's is a82ac72487ae1966")
            && !text.contains("panicked"),
        "{text}"
    );
}

/// An error's cause is printed once, even where the error shows its cause in its own
/// message and also returns it as its source.
#[test]
fn convert_error_names_its_cause_once() {
    let _machine = e2e::support::machine_share();
    let (_, binary) = fixture();
    let args: Vec<String> = [
        "convert",
        "--perfdata",
        "/nonexistent/perf.data",
        "--binary",
        s(&binary),
        "-o",
        "/nonexistent/out.prof",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let (code, text) = run(&args);
    assert_eq!(code, Some(1), "{text}");
    // The output starts with the test harness's lines (the child is this test binary).
    let error = text.find("pgo-agent: error:").map_or("", |at| &text[at..]);
    assert_eq!(
        error.trim_end(),
        format!(
            "pgo-agent: error: converting samples for {} into /nonexistent/out.prof: reading \
             perf.data: /nonexistent/perf.data: No such file or directory (os error 2)",
            s(&binary)
        )
    );
}

#[test]
fn heap_rejects_malformed_raw_profiles() {
    let _machine = e2e::support::machine_share();
    let (_, binary) = fixture();
    let bin = s(&binary);
    let out = scratch("heap.yaml");
    let out = s(&out);
    let id = BuildId(vec![0x57, 0x2a, 0xc7, 0x24, 0x87, 0xae, 0x19, 0x66]);
    let segment = |id: BuildId| SegmentEntry {
        start: 0x1000,
        end: 0x2000,
        offset: 0,
        build_id: id,
    };
    let good = write_raw_profile(4, &[segment(id.clone())], &[], &[]);
    let mut cases = Vec::new();
    for cut in [0usize, 7, 40, good.len() - 1] {
        let p = write(&format!("cut-{cut}.memprofraw"), &good[..cut]);
        cases.push(case(
            &format!("raw profile cut at {cut}"),
            &["heap", "--profraw", &p, "--binary", bin, "-o", out],
            &[&format!("rejected {p}: {p}: offset"), "truncated"],
        ));
    }
    let mut magic = good.clone();
    magic[0] ^= 0xff;
    let p = write("magic.memprofraw", &magic);
    cases.push(case(
        "raw profile bad magic",
        &["heap", "--profraw", &p, "--binary", bin, "-o", out],
        &[&p, "offset 0", "bad magic"],
    ));
    let mut version = good.clone();
    version[8..16].copy_from_slice(&99u64.to_le_bytes());
    let p = write("version.memprofraw", &version);
    cases.push(case(
        "raw profile version",
        &["heap", "--profraw", &p, "--binary", bin, "-o", out],
        &[&p, "offset 8", "unsupported raw MemProf version 99"],
    ));
    let other = write_raw_profile(4, &[segment(BuildId(vec![1, 2, 3, 4]))], &[], &[]);
    let p = write("other.memprofraw", &other);
    cases.push(case(
        "raw profile of another binary",
        &["heap", "--profraw", &p, "--binary", bin, "-o", out],
        &[&p, "01020304"],
    ));
    let p = write("garbage-heap.elf", b"\x7fELF garbage");
    let raw = write("good.memprofraw", &good);
    cases.push(case(
        "heap garbage binary",
        &["heap", "--profraw", &raw, "--binary", &p, "-o", out],
        &[&p],
    ));
    check(&cases);
}

#[tokio::test]
async fn http_rejects_malformed_requests_with_4xx() {
    let state = scratch("http-state");
    std::fs::create_dir_all(&state).unwrap();
    let hex = "0123456789abcdef";
    std::fs::write(
        state.join(format!("{hex}.json")),
        format!("{{\"build_id\":\"{hex}\",\"path\":\"/nonexistent\",\"kind\":\"lbr_only\",\"samples\":1}}"),
    )
    .unwrap();
    std::fs::write(state.join(format!("{hex}.unsymbolized")), "0\n0\n").unwrap();
    let app = store_app(&state);
    let long = "a".repeat(300);
    let cases: Vec<(String, StatusCode, &str)> = vec![
        (
            "/nonexistent".into(),
            StatusCode::NOT_FOUND,
            "no such route: /nonexistent",
        ),
        (
            "/api/v1/profiles/xyz".into(),
            StatusCode::BAD_REQUEST,
            "invalid build id \\\"xyz\\\"",
        ),
        (
            "/api/v1/profiles/abc".into(),
            StatusCode::BAD_REQUEST,
            "invalid build id",
        ),
        (
            format!("/api/v1/profiles/{long}"),
            StatusCode::BAD_REQUEST,
            "invalid build id",
        ),
        (
            format!("/api/v1/profiles/{hex}?format=gcov"),
            StatusCode::BAD_REQUEST,
            "format",
        ),
        (
            format!("/api/v1/profiles/{hex}?window=1h"),
            StatusCode::BAD_REQUEST,
            "window",
        ),
        (
            format!("/api/v1/profiles/{hex}?colour=red"),
            StatusCode::BAD_REQUEST,
            "colour",
        ),
        (
            format!("/api/v1/profiles/{hex}?format=text&format=pprof"),
            StatusCode::BAD_REQUEST,
            "format",
        ),
        (
            format!("/api/v1/profiles/{hex}?format=%ff%fe"),
            StatusCode::BAD_REQUEST,
            "format",
        ),
        (
            "/api/v1/profiles/fedcba9876543210".into(),
            StatusCode::NOT_FOUND,
            "fedcba9876543210",
        ),
        (
            "/api/v1/profiles/zz/flamegraph.svg".into(),
            StatusCode::BAD_REQUEST,
            "invalid build id",
        ),
        ("/api/v2/nothing".into(), StatusCode::NOT_FOUND, "not_found"),
    ];
    let mut failures = Vec::new();
    for (uri, status, needle) in cases {
        let resp = router(app.clone())
            .oneshot(Request::builder().uri(&uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let got = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        let body = String::from_utf8_lossy(&body);
        if got != status || !body.contains(needle) || !body.starts_with('{') {
            failures.push(format!(
                "{uri}: {got} {body} (expected {status} naming {needle:?})"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn convert_rejects_bad_debug_files() {
    let _machine = e2e::support::machine_share();
    let (data, binary) = fixture();
    let (data, bin) = (s(&data), s(&binary));
    let out = scratch("debug-out.prof");
    let out = s(&out);
    let bytes = std::fs::read(&binary).unwrap();
    let mut cases = Vec::new();
    let with_debug = |debug: &str| -> Vec<String> {
        [
            "convert",
            "--perfdata",
            data,
            "--binary",
            bin,
            "--debug-binary",
            debug,
            "-o",
            out,
        ]
        .iter()
        .map(|a| a.to_string())
        .collect()
    };
    let garbage = write(
        "garbage.debug",
        b"\x7fELF\x02\x01\x01 not really an ELF file",
    );
    let cut = write("cut.debug", &bytes[..bytes.len() / 3]);
    // Another build: this test executable (it has a GNU build id of its own).
    let other = std::env::current_exe().unwrap();
    for (name, debug, expect) in [
        ("garbage debug file", garbage.clone(), vec![garbage.clone()]),
        ("truncated debug file", cut.clone(), vec![cut.clone()]),
        (
            "debug file of another build",
            s(&other).to_string(),
            vec![s(&other).to_string(), "has build id".to_string()],
        ),
    ] {
        let args = with_debug(&debug);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let expect: Vec<&str> = expect.iter().map(String::as_str).collect();
        cases.push(case(name, &args, &expect));
    }

    // A stripped binary whose `.eh_frame` (its only function extents) is corrupt: the CIE
    // version byte (offset 8 of the first CIE) set to 9.
    if corpus::find_tool("strip").is_some() {
        let stripped = scratch("stripped").join(binary.file_name().unwrap());
        std::fs::create_dir_all(stripped.parent().unwrap()).unwrap();
        let ok = std::process::Command::new("strip")
            .args(["-s", "-o", s(&stripped), bin])
            .status()
            .unwrap();
        assert!(ok.success());
        let mut elf = std::fs::read(&stripped).unwrap();
        let (at, _) = section_range(&elf, ".eh_frame");
        elf[at + 8] = 9;
        std::fs::write(&stripped, &elf).unwrap();
        cases.push(case(
            "corrupt .eh_frame of a stripped binary",
            &[
                "convert",
                "--perfdata",
                data,
                "--binary",
                s(&stripped),
                "--skip-symbolization",
                "-o",
                out,
            ],
            &[s(&stripped), ".eh_frame", "offset 0x0", "CIE version"],
        ));
    }
    check(&cases);
    assert!(!Path::new(out).exists(), "no profile is written");
}

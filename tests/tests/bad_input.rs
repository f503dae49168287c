//! Malformed input to `pgo-agent convert`: every case fails with an error that names the
//! input and where in it (offset, line or section), and never panics.
//!
//! Each case runs the real command line in-process (`daemon::parse_args` +
//! `daemon::execute`); a panic would fail the test.

use std::path::{Path, PathBuf};

use e2e::corpus::{self, Variant};

/// Runs `pgo-agent convert <args>` and returns its error message (`{:#}`, the chain the
/// binary prints); panics if it succeeds.
fn convert_error(args: &[&str]) -> String {
    let mut argv = vec!["pgo-agent".to_string(), "convert".to_string()];
    argv.extend(args.iter().map(|s| s.to_string()));
    let cli = daemon::parse_args(argv).expect("arguments parse");
    match daemon::execute(cli) {
        Ok(_) => panic!("convert {} succeeded on bad input", args.join(" ")),
        Err(e) => format!("{e:#}"),
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = corpus::target_dir()
        .join("bad-input")
        .join(std::process::id().to_string());
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
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

#[test]
fn truncated_perf_data_names_the_file_and_offset() {
    let (data, binary) = fixture();
    let bytes = std::fs::read(&data).unwrap();
    for cut in [50usize, 300, 100_000, bytes.len() - 7] {
        let path = scratch(&format!("cut-{cut}.data"));
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let out = scratch("out.raw");
        let msg = convert_error(&[
            "--perfdata",
            s(&path),
            "--binary",
            s(&binary),
            "--skip-symbolization",
            "-o",
            s(&out),
        ]);
        assert!(msg.contains(s(&path)), "cut at {cut}: {msg}");
        assert!(msg.contains("offset"), "cut at {cut}: {msg}");
    }
}

#[test]
fn garbage_elf_names_the_binary() {
    let (data, _) = fixture();
    let binary = scratch("garbage.elf");
    std::fs::write(&binary, b"\x7fELF\x02\x01\x01 this is not a binary").unwrap();
    let msg = convert_error(&[
        "--perfdata",
        s(&data),
        "--binary",
        s(&binary),
        "-o",
        s(&scratch("o")),
    ]);
    assert!(msg.contains(s(&binary)), "{msg}");
}

#[test]
fn corrupt_pseudo_probe_section_names_section_and_offset() {
    if !corpus::tools_available("corrupt_pseudo_probe", &["clang-19"]) {
        return;
    }
    let program = corpus::program("recursion", Variant::Probe).unwrap();
    let bytes = std::fs::read(&program.binary).unwrap();
    // Overwrite the whole .pseudo_probe section with 0xff: GUIDs that match no descriptor
    // and LEB128 numbers that never end.
    let (offset, size) = section_range(&bytes, ".pseudo_probe");
    let mut bad = bytes.clone();
    bad[offset..offset + size].fill(0xff);
    let binary = scratch("recursion");
    std::fs::write(&binary, &bad).unwrap();
    let script = scratch("empty.perfscript");
    std::fs::write(&script, "").unwrap();
    let msg = convert_error(&[
        "--perfscript",
        s(&script),
        "--binary",
        s(&binary),
        "-o",
        s(&scratch("o")),
    ]);
    assert!(msg.contains(s(&binary)), "{msg}");
    assert!(msg.contains(".pseudo_probe"), "{msg}");
    assert!(msg.contains("offset"), "{msg}");
}

/// File offset and size of a section, from the ELF section headers.
fn section_range(data: &[u8], name: &str) -> (usize, usize) {
    use object::{Object, ObjectSection};
    let file = object::File::parse(data).unwrap();
    let section = file.section_by_name(name).unwrap();
    let (offset, size) = section.file_range().unwrap();
    (offset as usize, size as usize)
}

#[test]
fn malformed_perf_script_names_the_line() {
    let (_, binary) = fixture();
    let script = scratch("no-lbr.perfscript");
    // A hybrid sample whose stack lines (lines 5 and 6) are followed by the end of the
    // file instead of its branch-stack line (with a blank line after the stack,
    // llvm-profgen only skips the sample; so do we).
    std::fs::write(
        &script,
        "\t          4005dc\n\t          4005c8\n 0x4005c8/0x4005dc/P/-/-/0  0x40062f/0x4005b0/P/-/-/0\n\n\t          4005dc\n\t          4005c8\n",
    )
    .unwrap();
    let msg = convert_error(&[
        "--perfscript",
        s(&script),
        "--binary",
        s(&binary),
        "-o",
        s(&scratch("o")),
    ]);
    assert!(msg.contains(&format!("{}:5:", s(&script))), "{msg}");
    assert!(msg.contains("No LBR sample line"), "{msg}");

    let empty = scratch("empty.perfscript");
    std::fs::write(&empty, "not a perf script\n").unwrap();
    let msg = convert_error(&[
        "--perfscript",
        s(&empty),
        "--binary",
        s(&binary),
        "-o",
        s(&scratch("o")),
    ]);
    assert!(msg.contains(s(&empty)), "{msg}");
    assert!(msg.contains("Invalid perf script input"), "{msg}");
}

#[test]
fn malformed_unsymbolized_profile_names_the_line() {
    let (_, binary) = fixture();
    let raw = scratch("bad.raw");
    std::fs::write(&raw, "2\n8d0-8e3:10\nzz-8f4:5\n0\n").unwrap();
    let msg = convert_error(&[
        "--unsymbolized-profile",
        s(&raw),
        "--binary",
        s(&binary),
        "-o",
        s(&scratch("o")),
    ]);
    assert!(msg.contains(s(&raw)), "{msg}");
    assert!(msg.contains("line 3"), "{msg}");
}

#[test]
fn missing_input_file_is_named() {
    let (_, binary) = fixture();
    let msg = convert_error(&[
        "--perfdata",
        "/nonexistent/perf.data",
        "--binary",
        s(&binary),
        "-o",
        s(&scratch("o")),
    ]);
    assert!(msg.contains("/nonexistent/perf.data"), "{msg}");
}

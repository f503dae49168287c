//! `convert` on stripped binaries with their symbols and DWARF in a separate file, against
//! llvm-profgen 19 and against the unstripped build, on every corpus program and build.
//!
//! From each corpus binary: a `strip --strip-debug` copy (symbols kept), a `strip -s` copy
//! (symbols gone; GNU strip keeps `.eh_frame`, `.pseudo_probe` and the build id) and the
//! `objcopy --only-keep-debug` file. Each copy keeps the program's file name (the perf
//! MMAP events name it). Then, for the context-sensitive and the flat (`--ignore-stack-samples`)
//! profile with llvm-profgen's default flags, text format, canonicalised by
//! `llvm-profdata-19 merge --sample --text`:
//!
//! * `--binary <strip-debug> --debug-binary <.debug>`: ours equals llvm-profgen-19's with
//!   the same flags;
//! * `--binary <strip -s> --debug-binary <.debug>`: ours equals llvm-profgen-19's on the
//!   unstripped build (llvm-profgen 19 itself writes an empty profile for this pair: it
//!   decodes only what the binary's own `.symtab` names);
//! * the same `strip -s` binary found its debug file through `.gnu_debuglink` without
//!   `--debug-binary`;
//! * the `--strip-debug` binary alone (no debug file found): a probe build's profile, its
//!   functions taken from its symbols, equals the unstripped build's (llvm-profgen 19
//!   writes an empty one); a line-table build's is empty, as llvm-profgen-19's;
//! * counting needs no names: `--skip-symbolization` of the `strip -s` binary alone equals
//!   that of the unstripped one for probe builds (contexts are call-site addresses), and
//!   for line-table builds keeps contexts as addresses that the unstripped build turns
//!   into the profile it makes from the samples; a
//!   `strip -s` binary without a debug file is refused for a symbolized profile, with the
//!   candidates tried in the message.

use std::path::{Path, PathBuf};

use e2e::corpus::{self, Variant};
use e2e::support::{canonical_profile as canonical, llvm, pgo_agent, read_text};

const TOOLS: &[&str] = &[
    "clang-19",
    "llvm-profgen-19",
    "llvm-profdata-19",
    "strip",
    "objcopy",
];

/// The copies of one corpus binary: `<dir>/{full,strip-debug,strip-all,debuglink}/<name>`
/// and `<dir>/<name>.debug`.
struct Copies {
    full: PathBuf,
    strip_debug: PathBuf,
    strip_all: PathBuf,
    debuglink: PathBuf,
    debug: PathBuf,
}

fn copies(binary: &Path, dir: &Path) -> Copies {
    let name = binary.file_name().unwrap();
    let at = |sub: &str| {
        let d = dir.join(sub);
        std::fs::create_dir_all(&d).unwrap();
        d.join(name)
    };
    let c = Copies {
        full: at("full"),
        strip_debug: at("strip-debug"),
        strip_all: at("strip-all"),
        debuglink: at("debuglink"),
        debug: dir.join(format!("{}.debug", name.to_string_lossy())),
    };
    let s = |p: &Path| p.to_str().unwrap().to_string();
    std::fs::copy(binary, &c.full).unwrap();
    llvm::<&str>(
        "strip",
        &["--strip-debug", "-o", &s(&c.strip_debug), &s(binary)],
    );
    llvm::<&str>("strip", &["-s", "-o", &s(&c.strip_all), &s(binary)]);
    llvm::<&str>("objcopy", &["--only-keep-debug", &s(binary), &s(&c.debug)]);
    // The debuglink copy finds `<name>.debug` beside it.
    let beside = c.debuglink.with_file_name(c.debug.file_name().unwrap());
    std::fs::copy(&c.debug, &beside).unwrap();
    llvm::<&str>(
        "objcopy",
        &[
            &format!("--add-gnu-debuglink={}", s(&beside)),
            &s(&c.strip_all),
            &s(&c.debuglink),
        ],
    );
    c
}

fn assert_same(what: &str, ours: &str, theirs: &str) {
    assert!(
        ours == theirs,
        "{what}: profiles differ\n--- expected\n{theirs}\n--- pgo-agent\n{ours}"
    );
}

/// The recording plus two samples at the ELF entry point (`_start`, entered from the
/// dynamic linker), in its first and second instruction: `_start` has an FDE but no DWARF,
/// so the unstripped build has no function there and keeps them, and so must the `strip -s`
/// binary alone. A recording catches them only when a sample falls in the first few
/// branches of the process.
fn with_entry_point_samples(script: &Path, binary: &Path, dir: &Path) -> PathBuf {
    use object::{Object, ObjectSection};
    let text = read_text(script);
    let bytes = std::fs::read(binary).unwrap();
    let elf = object::File::parse(&*bytes).unwrap();
    let entry = elf.entry();
    // The executable mapping of the binary: `[0x<start>(0x<len>) @ 0x<pgoff> ...]: r-xp <path>`.
    let name = binary.to_str().unwrap();
    let mmap = text
        .lines()
        .find(|l| l.contains("r-xp") && l.ends_with(name))
        .unwrap_or_else(|| panic!("{}: no executable mapping of {name}", script.display()));
    let field = |after: &str| {
        let rest = &mmap[mmap.find(after).unwrap() + after.len()..];
        let hex: String = rest.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
        u64::from_str_radix(&hex, 16).unwrap()
    };
    let (start, pgoff) = (field("[0x"), field("@ 0x"));
    let text_section = elf
        .sections()
        .find(|s| s.address() <= entry && entry < s.address() + s.size())
        .unwrap();
    let (addr, offset) = text_section
        .file_range()
        .map(|(o, _)| (text_section.address(), o))
        .unwrap();
    let runtime = |vaddr: u64| start + (vaddr - addr + offset) - pgoff;
    // The second instruction: `_start` begins with `xor %ebp,%ebp` (2 bytes) on x86-64.
    assert_eq!(
        &bytes[offset as usize + (entry - addr) as usize..][..2],
        &[0x31, 0xed]
    );
    let ld_so = 0x7fff_f7fe_37b8u64;
    let mut out = text;
    for leaf in [entry, entry + 2] {
        out.push_str(&format!(
            "\n\t    {:x}\n 0x{ld_so:x}/0x{:x}/P/-/-/0/ \n",
            runtime(leaf),
            runtime(entry)
        ));
    }
    let path = dir.join("with-entry.perfscript");
    std::fs::write(&path, out).unwrap();
    path
}

fn split_debug(name: &str, variant: Variant) {
    if !corpus::tools_available("split_debug", TOOLS) {
        return;
    }
    let program = corpus::program(name, variant).expect("corpus builds");
    let rec = corpus::record(&program).expect("recorder runs");
    let dir = e2e::support::scratch_dir("split-debug", &format!("{name}-{variant}"));
    let c = copies(&program.binary, &dir);
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let script = s(&with_entry_point_samples(
        &rec.perf_script,
        &program.binary,
        &dir,
    ));

    for (mode, extra) in [("cs", None), ("flat", Some("--ignore-stack-samples"))] {
        let out = |stem: &str| dir.join(format!("{stem}.{mode}.txt"));
        let args = |binary: &Path, debug: Option<&Path>, output: &Path| -> Vec<String> {
            let mut v = vec![
                "--perfscript".to_string(),
                script.clone(),
                "--binary".into(),
                s(binary),
                "--format=text".into(),
                "--output".into(),
                s(output),
            ];
            if let Some(d) = debug {
                v.extend(["--debug-binary".into(), s(d)]);
            }
            v.extend(extra.map(str::to_string));
            v
        };
        let ours = |binary: &Path, debug: Option<&Path>, output: &Path| {
            let mut v = vec!["convert".to_string()];
            v.extend(args(binary, debug, output));
            pgo_agent(&v);
            canonical(output)
        };
        let theirs = |binary: &Path, debug: Option<&Path>, output: &Path| {
            llvm("llvm-profgen-19", &args(binary, debug, output));
            canonical(output)
        };

        let unstripped = theirs(&c.full, None, &out("llvm.full"));
        assert!(
            !unstripped.trim().is_empty(),
            "{name} ({variant}, {mode}): llvm-profgen-19 wrote an empty profile"
        );
        let what = |case: &str| format!("{name} ({variant}, {mode}) {case}");
        assert_same(
            &what("--strip-debug binary + --debug-binary, against llvm-profgen-19"),
            &ours(&c.strip_debug, Some(&c.debug), &out("ours.strip-debug")),
            &theirs(&c.strip_debug, Some(&c.debug), &out("llvm.strip-debug")),
        );
        assert_same(
            &what("strip -s binary + --debug-binary, against the unstripped build"),
            &ours(&c.strip_all, Some(&c.debug), &out("ours.strip-all")),
            &unstripped,
        );
        assert_same(
            &what("strip -s binary with .gnu_debuglink, against the unstripped build"),
            &ours(&c.debuglink, None, &out("ours.debuglink")),
            &unstripped,
        );
        // The `--strip-debug` binary alone, no debug file found: a probe build's functions
        // come from its symbols (which place its probes), so its profile is the unstripped
        // build's (llvm-profgen 19 writes an empty one); a line-table build's has no lines
        // to name, empty as llvm-profgen-19's.
        match variant {
            // The pre-inliner's size of an inlined function comes from DWARF inline stacks,
            // which only the debug file has: where a pre-inlining decision hinges on such a
            // size (a context whose count sits near the threshold at some sampling phase),
            // the nested profiles part. The contexts and their counts are compared without
            // the pre-inliner.
            Variant::Probe if mode == "cs" => {
                let no_preinliner = |binary: &Path, output: &Path| {
                    let mut v = args(binary, None, output);
                    v.push("--csspgo-preinliner=false".into());
                    v
                };
                let (o, t) = (
                    out("ours.strip-debug-alone"),
                    out("llvm.full-no-preinliner"),
                );
                let mut v = vec!["convert".to_string()];
                v.extend(no_preinliner(&c.strip_debug, &o));
                pgo_agent(&v);
                llvm("llvm-profgen-19", &no_preinliner(&c.full, &t));
                assert_same(
                    &what("--strip-debug probe binary alone, against the unstripped build"),
                    &canonical(&o),
                    &canonical(&t),
                );
            }
            Variant::Probe => assert_same(
                &what("--strip-debug probe binary alone, against the unstripped build"),
                &ours(&c.strip_debug, None, &out("ours.strip-debug-alone")),
                &unstripped,
            ),
            Variant::Lines => {
                // Both empty: compared as written (an empty file has no canonical form).
                let (o, t) = (out("ours.strip-debug-alone"), out("llvm.strip-debug-alone"));
                let mut v = vec!["convert".to_string()];
                v.extend(args(&c.strip_debug, None, &o));
                pgo_agent(&v);
                llvm("llvm-profgen-19", &args(&c.strip_debug, None, &t));
                assert_eq!(
                    (read_text(&o), read_text(&t)),
                    (String::new(), String::new()),
                    "{}",
                    what("--strip-debug line binary alone, against llvm-profgen-19")
                );
            }
        }
    }

    counting_needs_no_names(name, variant, &dir, &c, &script);

    // Without a debug file a symbolized profile is refused, naming what was tried.
    let argv: Vec<String> = [
        "pgo-agent",
        "convert",
        "--perfscript",
        &script,
        "--binary",
        &s(&c.strip_all),
        "--output",
        &s(&dir.join("refused.prof")),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let err = daemon::execute(daemon::parse_args(argv).unwrap()).unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("has no symbol table and no debug file was found")
            && msg.contains(".gnu_debuglink")
            && msg.contains("/usr/lib/debug/.build-id/"),
        "{msg}"
    );
    assert!(!dir.join("refused.prof").exists());
}

/// Counting by address needs no names: the unsymbolized counters of the `strip -s` binary
/// alone equal the unstripped build's (probe builds), or keep line contexts as addresses
/// that give the unstripped build's profile once converted where the DWARF is.
fn counting_needs_no_names(name: &str, variant: Variant, dir: &Path, c: &Copies, script: &str) {
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let raw = |binary: &Path, stem: &str| {
        let output = dir.join(format!("{stem}.raw"));
        pgo_agent(&[
            "convert",
            "--perfscript",
            script,
            "--binary",
            &s(binary),
            "--skip-symbolization",
            "--output",
            &s(&output),
        ]);
        output
    };
    let stripped_raw = raw(&c.strip_all, "strip-all");
    if variant == Variant::Probe {
        // The unsymbolized counters of the strip -s binary alone equal the unstripped
        // build's (probe contexts are call-site addresses).
        let full = read_text(&raw(&c.full, "full"));
        assert!(full.lines().count() > 3, "{name}: {full}");
        assert_same(
            &format!("{name} ({variant}) unsymbolized counters of the strip -s binary alone"),
            &read_text(&stripped_raw),
            &full,
        );
    } else {
        // Without DWARF, line contexts are kept as call-site addresses (`[0x7f4 @ 0x7bf]`,
        // not `[main:7 @ quick]`, which needs the DWARF); converted where the DWARF is,
        // they give the profile the unstripped build gives from the samples.
        let text = read_text(&stripped_raw);
        assert!(
            text.contains("[0x"),
            "{name}: address contexts expected:\n{text}"
        );
        for shape in [
            &[][..],
            &["--csspgo-preinliner=false", "--gen-cs-nested-profile=false"][..],
        ] {
            let convert = |input: &[&str], stem: &str| {
                let output = dir.join(format!("{stem}.{}.txt", shape.len()));
                let mut argv = vec!["convert"];
                argv.extend_from_slice(input);
                let full = s(&c.full);
                argv.extend_from_slice(&["--binary", &full]);
                argv.extend_from_slice(shape);
                let out = s(&output);
                argv.extend_from_slice(&["--format=text", "--output", &out]);
                pgo_agent(&argv);
                canonical(&output)
            };
            let direct = convert(&["--perfscript", script], "ours.direct");
            assert!(!direct.trim().is_empty());
            assert_same(
                &format!("{name} ({variant}) address line contexts symbolized later {shape:?}"),
                &convert(&["--unsymbolized-profile", &s(&stripped_raw)], "ours.later"),
                &direct,
            );
        }
    }
}

e2e::corpus_tests!(split_debug; loop_count, recursion, inline_tail, virtual_calls, interp,
    unroll, shlib_user);

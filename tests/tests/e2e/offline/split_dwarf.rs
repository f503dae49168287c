//! `convert` on split-DWARF binaries (`-gsplit-dwarf`): the skeleton units in the binary
//! keep the line tables, the functions and inline frames are in the `.dwo` files or the
//! DWARF package `llvm-dwp-19` makes of them. Line-table corpus programs with inlining are
//! built with the corpus flags plus `-gsplit-dwarf` (DWARF 5) and `-gdwarf-4 -gsplit-dwarf`
//! (the GNU extension), recorded, and converted by both tools, CS with llvm-profgen's
//! defaults and flat (`--ignore-stack-samples`), text format, canonicalised by
//! `llvm-profdata-19 merge --sample --text`:
//!
//! * the `.dwo` files beside the objects, no package: ours equals llvm-profgen-19's;
//! * the package at another path with `--dwp F` (the `.dwo` files gone): ours equals
//!   llvm-profgen-19's with `--dwp F`;
//! * the package at `<binary>.dwp`, no flag: ours equals llvm-profgen-19's;
//! * each of these equals llvm-profgen-19's profile of the corpus's own build (no split
//!   DWARF) of the program, when llvm-profgen-19's split one does;
//! * neither package nor `.dwo` files: both tools know no function (the skeleton units
//!   have none) and write empty profiles, unlike with them (so the split units are read);
//! * a corrupt package is an error naming it, never a panic.

use std::path::{Path, PathBuf};
use std::process::Command;

use e2e::corpus::{self, CorpusProgram, Variant};
use e2e::support::{
    assert_same, canonical_profile as canonical, cli_in_child, llvm, run_ok, scratch_dir,
};

const TOOLS: &[&str] = &[
    "clang-19",
    "llvm-dwp-19",
    "llvm-profgen-19",
    "llvm-profdata-19",
];

/// The corpus programs checked: both inline functions into their callers.
const PROGRAMS: &[&str] = &["inlined_calls", "inline_tail"];

/// The DWARF versions checked: name and the flags besides `-gsplit-dwarf`.
const DWARF: &[(&str, &[&str])] = &[("dwarf5", &[]), ("dwarf4", &["-gdwarf-4"])];

/// The profile shapes: CS with llvm-profgen's defaults, and flat.
const SHAPES: &[(&str, &[&str])] = &[
    ("cs", &["--format=text"]),
    ("flat", &["--format=text", "--ignore-stack-samples"]),
];

/// Builds `name` from the corpus sources into `dir/<name>` as `tests/programs/build.sh`
/// builds its line-table variant, plus `-gsplit-dwarf` and `extra`; the `.dwo` files land
/// in `dir` (the compiler runs there). Returns the binary and its `.dwo` files.
fn build_split(name: &str, dir: &Path, extra: &[&str]) -> (PathBuf, Vec<PathBuf>) {
    let source = corpus::sources_dir().join(format!("{name}.c"));
    run_ok(
        Command::new("clang-19")
            .current_dir(dir)
            .args(corpus::CORPUS_CFLAGS)
            .arg("-gsplit-dwarf")
            .args(extra)
            .args(corpus::PIE_LINK_FLAGS)
            .arg("-o")
            .arg(name)
            .arg(&source),
    );
    let dwo: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "dwo"))
        .collect();
    assert!(
        !dwo.is_empty(),
        "{name}: clang-19 wrote no .dwo file in {}",
        dir.display()
    );
    (dir.join(name).canonicalize().unwrap(), dwo)
}

/// `llvm-dwp-19 -e binary -o package`: the DWARF package of `binary`'s `.dwo` files.
fn make_package(binary: &Path, package: &Path) {
    llvm(
        "llvm-dwp-19",
        &[
            "-e",
            binary.to_str().unwrap(),
            "-o",
            package.to_str().unwrap(),
        ],
    );
}

/// One split build, recorded: runs both tools on its recording.
struct Split {
    what: String,
    binary: PathBuf,
    perf_script: PathBuf,
    out: PathBuf,
}

impl Split {
    /// Canonical profiles of llvm-profgen-19 and of `convert` with `flags`, written as
    /// `<stem>.llvm` and `<stem>.ours`.
    fn profiles(&self, stem: &str, flags: &[&str]) -> (String, String) {
        let (theirs, ours) = (
            self.out.join(format!("{stem}.llvm")),
            self.out.join(format!("{stem}.ours")),
        );
        let s = |p: &Path| p.to_str().unwrap().to_string();
        let input = [
            "--perfscript".to_string(),
            s(&self.perf_script),
            "--binary".to_string(),
            s(&self.binary),
        ];
        let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
        llvm(
            "llvm-profgen-19",
            &[&input[..], &flags, &["--output".into(), s(&theirs)]].concat(),
        );
        let args = [
            &["convert".to_string()][..],
            &input,
            &flags,
            &["--output".into(), s(&ours)],
        ]
        .concat();
        let (code, text) = cli_in_child(&args);
        assert_eq!(
            code,
            Some(0),
            "{}: pgo-agent {}: {text}",
            self.what,
            args.join(" ")
        );
        (canon(&theirs), canon(&ours))
    }

    /// Both tools agree with `flags` in every shape; returns llvm-profgen-19's profiles
    /// (not empty unless `case` is "none").
    fn same(&self, case: &str, flags: &[&str]) -> Vec<String> {
        SHAPES
            .iter()
            .map(|(shape, shape_flags)| {
                let (theirs, ours) =
                    self.profiles(&format!("{case}-{shape}"), &[flags, shape_flags].concat());
                assert!(
                    case == "none" || !theirs.trim().is_empty(),
                    "{} {case} {shape}: llvm-profgen-19 wrote an empty profile",
                    self.what
                );
                assert_same(&format!("{} {case} {shape}", self.what), &ours, &theirs);
                theirs
            })
            .collect()
    }
}

/// The canonical text of `profile`; empty for an empty file (what llvm-profgen-19 writes
/// when no function has samples, which llvm-profdata-19 does not read).
fn canon(profile: &Path) -> String {
    if std::fs::metadata(profile).unwrap().len() == 0 {
        return String::new();
    }
    canonical(profile)
}

/// llvm-profgen-19's profiles of the corpus's own line-table build of `name`, per shape.
fn unsplit_profiles(name: &str, out: &Path) -> Vec<String> {
    let program = corpus::program(name, Variant::Lines).expect("corpus builds");
    let rec = corpus::record(&program).expect("recorder runs");
    SHAPES
        .iter()
        .map(|(shape, flags)| {
            let theirs = out.join(format!("unsplit-{shape}.llvm"));
            let args = [
                &[
                    "--perfscript",
                    rec.perf_script.to_str().unwrap(),
                    "--binary",
                    program.binary.to_str().unwrap(),
                    "--output",
                    theirs.to_str().unwrap(),
                ][..],
                flags,
            ]
            .concat();
            llvm("llvm-profgen-19", &args);
            canonical(&theirs)
        })
        .collect()
}

#[test]
fn split_dwarf_matches_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("split-dwarf", TOOLS) {
        return;
    }
    let mut equal_to_unsplit = 0;
    for name in PROGRAMS {
        for (version, extra) in DWARF {
            let what = format!("{name} ({version} split)");
            let dir = scratch_dir("split_dwarf", &format!("{name}-{version}"));
            let build = dir.join("build");
            let out = dir.join("out");
            std::fs::create_dir_all(&build).unwrap();
            std::fs::create_dir_all(&out).unwrap();
            let (binary, dwo) = build_split(name, &build, extra);
            let program = CorpusProgram {
                name: Box::leak(format!("{name}-split-{version}").into_boxed_str()),
                variant: Variant::Lines,
                binary: binary.clone(),
                args: Vec::new(),
            };
            let rec = corpus::record(&program).expect("recorder runs");
            let split = Split {
                what: what.clone(),
                binary: binary.clone(),
                perf_script: rec.perf_script.clone(),
                out,
            };
            let unsplit = unsplit_profiles(name, &split.out);

            // The .dwo files where the binary names them.
            let with_dwo = split.same("dwo", &[]);

            // The package elsewhere, given with --dwp; the .dwo files gone.
            let package = dir.join("package").join(format!("{name}.dwp"));
            std::fs::create_dir_all(package.parent().unwrap()).unwrap();
            make_package(&binary, &package);
            for f in &dwo {
                std::fs::remove_file(f).unwrap();
            }
            let dwp_flag = format!("--dwp={}", package.display());
            let with_flag = split.same("dwp-flag", &[&dwp_flag]);

            // Neither package nor .dwo files: the inline frames are lost.
            let without = split.same("none", &[]);

            // The package at <binary>.dwp, found without the flag.
            let mut beside = binary.clone().into_os_string();
            beside.push(".dwp");
            std::fs::copy(&package, &beside).unwrap();
            let with_default = split.same("dwp-default", &[]);

            for (i, (shape, _)) in SHAPES.iter().enumerate() {
                assert_eq!(
                    with_flag[i], with_dwo[i],
                    "{what} {shape}: the package and the .dwo files give different profiles"
                );
                assert_eq!(with_default[i], with_flag[i], "{what} {shape}");
                assert_ne!(
                    without[i], with_flag[i],
                    "{what} {shape}: the profile does not depend on the split units"
                );
                if with_flag[i] == unsplit[i] {
                    equal_to_unsplit += 1;
                }
            }
        }
    }
    // Ours equals llvm-profgen's in every case above, so ours equals the unsplit build's
    // profile wherever llvm-profgen's does. How often depends on the recordings: the split
    // and unsplit builds are different files at different paths, and a path's length moves
    // the tracee's stack, so their samples can differ; a figure, not a check.
    eprintln!(
        "split DWARF: llvm-profgen-19's split profiles equal the unsplit build's in \
         {equal_to_unsplit} of {} cases",
        PROGRAMS.len() * SHAPES.len() * 2
    );
}

/// A package that is there but cannot be read is an error naming it; a package missing
/// at the path `--dwp` gives falls back to the `.dwo` files, as in llvm-profgen 19.
#[test]
fn corrupt_package_is_an_error_naming_it() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("split-dwarf-corrupt", TOOLS) {
        return;
    }
    let dir = scratch_dir("split_dwarf", "corrupt");
    let (binary, _) = build_split("inlined_calls", &dir, &[]);
    let package = dir.join("inlined_calls.good.dwp");
    make_package(&binary, &package);
    let bytes = std::fs::read(&package).unwrap();
    let program = corpus::program("inlined_calls", Variant::Lines).expect("corpus builds");
    let rec = corpus::record(&program).expect("recorder runs");
    // Truncated, cut in its section headers; the binary itself (no unit index).
    let truncated = dir.join("truncated.dwp");
    std::fs::write(&truncated, &bytes[..bytes.len() - 100]).unwrap();
    let not_package = dir.join("binary-as.dwp");
    std::fs::copy(&binary, &not_package).unwrap();
    for (bad, expect) in [(&truncated, ""), (&not_package, "not a DWARF package")] {
        let args: Vec<String> = [
            "convert",
            "--perfscript",
            rec.perf_script.to_str().unwrap(),
            "--binary",
            binary.to_str().unwrap(),
            "--dwp",
            bad.to_str().unwrap(),
            "--format=text",
            "--output",
            dir.join("out.txt").to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let (code, text) = cli_in_child(&args);
        assert_eq!(code, Some(1), "{}: {text}", bad.display());
        assert!(
            text.contains(bad.to_str().unwrap()) && text.contains(expect),
            "{}: the error does not name the package: {text}",
            bad.display()
        );
        assert!(!text.contains("panicked"), "{text}");
    }
}

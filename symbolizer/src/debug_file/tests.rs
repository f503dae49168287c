//! The finder against real files: a program built with `clang-19 -g`, its `strip -s` copy,
//! its `objcopy --only-keep-debug` debug file and a copy carrying `.gnu_debuglink`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use collector::BuildId;

use super::elf_facts::elf_facts;
use super::*;

const SOURCE: &str = r#"
#include <stdio.h>
static int helper(int x) { return x * 3 + 1; }
#ifdef OTHER
int other_variant(void) { return 7; }
#endif
int main(int argc, char **argv) { (void)argv; printf("%d\n", helper(argc)); return 0; }
"#;

/// The built files, shared by every test of the process.
struct Fixture {
    /// Unstripped, with DWARF.
    prog: PathBuf,
    /// `strip -s` of `prog`: neither `.symtab` nor DWARF.
    stripped: PathBuf,
    /// `objcopy --only-keep-debug` of `prog`.
    debug: PathBuf,
    /// `stripped` with `objcopy --add-gnu-debuglink=k.debug` (k.debug being `debug`).
    linked: PathBuf,
    /// Built with `-DOTHER`: unstripped, another build id.
    other: PathBuf,
    id: BuildId,
    other_id: BuildId,
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// The fixture, or `None` after printing a SKIPPED line when a tool is missing.
fn fixture(test: &str) -> Option<&'static Fixture> {
    static FIXTURE: OnceLock<Result<Fixture, String>> = OnceLock::new();
    let missing: Vec<&str> = ["clang-19", "strip", "objcopy"]
        .into_iter()
        .filter(|t| !on_path(t))
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "SKIPPED {test}: missing {} (apt-get install clang-19 binutils)",
            missing.join(", ")
        );
        return None;
    }
    match FIXTURE.get_or_init(build_fixture) {
        Ok(f) => Some(f),
        Err(e) => panic!("building the fixture: {e}"),
    }
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

fn build_fixture() -> Result<Fixture, String> {
    let dir = scratch("fixture");
    std::fs::write(dir.join("prog.c"), SOURCE).map_err(|e| e.to_string())?;
    let clang = |out: &str, extra: &[&str]| {
        run(Command::new("clang-19")
            .current_dir(&dir)
            .args(["-g", "-O1", "-Wl,--build-id=sha1", "-o", out, "prog.c"])
            .args(extra))
    };
    clang("prog", &[])?;
    clang("other", &["-DOTHER"])?;
    run(Command::new("strip")
        .current_dir(&dir)
        .args(["-s", "prog", "-o", "prog.stripped"]))?;
    run(Command::new("objcopy").current_dir(&dir).args([
        "--only-keep-debug",
        "prog",
        "prog.debug",
    ]))?;
    std::fs::copy(dir.join("prog.debug"), dir.join("k.debug")).map_err(|e| e.to_string())?;
    run(Command::new("objcopy").current_dir(&dir).args([
        "--add-gnu-debuglink=k.debug",
        "prog.stripped",
        "k",
    ]))?;
    let id_of = |name: &str| -> Result<BuildId, String> {
        let data = std::fs::read(dir.join(name)).map_err(|e| e.to_string())?;
        let facts = elf_facts(&data[..])?;
        facts
            .build_id
            .map(BuildId)
            .ok_or(format!("{name} has no build id"))
    };
    let id = id_of("prog")?;
    let other_id = id_of("other")?;
    assert_ne!(id, other_id, "-DOTHER gives another build id");
    assert_eq!(id_of("prog.stripped")?, id);
    assert_eq!(id_of("prog.debug")?, id);
    assert_eq!(id_of("k")?, id);
    Ok(Fixture {
        prog: dir.join("prog"),
        stripped: dir.join("prog.stripped"),
        debug: dir.join("prog.debug"),
        linked: dir.join("k"),
        other: dir.join("other"),
        id,
        other_id,
    })
}

/// An empty directory of the test's own, with symbolic links resolved (the finder makes
/// paths absolute; the expected lines are compared as text).
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pgo-debug-file-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::canonicalize(&d).unwrap()
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(from, to).unwrap();
}

fn build_id_path(dir: &Path, id: &BuildId) -> PathBuf {
    let hex = id.to_hex();
    dir.join(".build-id")
        .join(&hex[..2])
        .join(format!("{}.debug", &hex[2..]))
}

/// `dir/bin/k` (the debuglinked stripped binary) and its bytes.
fn linked_binary(f: &Fixture, dir: &Path) -> (PathBuf, Vec<u8>) {
    let path = dir.join("bin").join("k");
    copy(&f.linked, &path);
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

fn crc_of(path: &Path) -> u32 {
    crc32fast::hash(&std::fs::read(path).unwrap())
}

#[test]
fn debuglink_parser_reads_objcopy_byte_layouts() {
    use object::Endianness::{Big, Little};
    let k: [u8; 12] = *b"k.debug\0\x78\x56\x34\x12";
    assert_eq!(
        parse_debuglink(&k, Little),
        Some(("k.debug".into(), 0x1234_5678))
    );
    assert_eq!(
        parse_debuglink(&k, Big),
        Some(("k.debug".into(), 0x7856_3412))
    );
    let kk: [u8; 16] = *b"kk.debug\0\0\0\0\xef\xbe\xad\xde";
    assert_eq!(
        parse_debuglink(&kk, Little),
        Some(("kk.debug".into(), 0xdead_beef))
    );
    // Malformed: no NUL, CRC cut short, empty name, a name that is not a base name.
    assert_eq!(parse_debuglink(b"k.debug", Little), None);
    assert_eq!(parse_debuglink(&k[..11], Little), None);
    assert_eq!(parse_debuglink(&k[..8], Little), None);
    assert_eq!(parse_debuglink(&kk[..15], Little), None);
    assert_eq!(parse_debuglink(&kk[..12], Little), None);
    assert_eq!(parse_debuglink(b"", Little), None);
    assert_eq!(parse_debuglink(b"\0\0\0\0\x01\x02\x03\x04", Little), None);
    assert_eq!(
        parse_debuglink(b"../x\0\0\0\0\x01\x02\x03\x04", Little),
        None
    );
    assert_eq!(parse_debuglink(b"..\0\0\x01\x02\x03\x04", Little), None);
}

#[test]
fn objcopy_debuglink_names_the_file_and_its_crc() {
    let Some(f) = fixture("objcopy_debuglink_names_the_file_and_its_crc") else {
        return;
    };
    let linked = std::fs::read(&f.linked).unwrap();
    let facts = elf_facts(&linked[..]).unwrap();
    assert_eq!(facts.debuglink, Some(("k.debug".into(), crc_of(&f.debug))));
    assert_eq!(file_crc32(&f.debug).unwrap(), crc_of(&f.debug));
    let prog = std::fs::read(&f.prog).unwrap();
    assert_eq!(elf_facts(&prog[..]).unwrap().debuglink, None);
}

#[test]
fn file_crc32_equals_crc32fast_over_the_whole_file() {
    let dir = scratch("crc");
    let bytes: Vec<u8> = (0..200_003u32).map(|i| (i * 7 + i / 251) as u8).collect();
    std::fs::write(dir.join("f"), &bytes).unwrap();
    assert_eq!(file_crc32(&dir.join("f")).unwrap(), crc32fast::hash(&bytes));
    std::fs::write(dir.join("e"), b"").unwrap();
    assert_eq!(file_crc32(&dir.join("e")).unwrap(), 0);
    // zlib.crc32(b"123456789"), the CRC-32 check value.
    std::fs::write(dir.join("c"), b"123456789").unwrap();
    assert_eq!(file_crc32(&dir.join("c")).unwrap(), 0xcbf4_3926);
}

#[test]
fn has_symbols_or_dwarf_tells_debug_files_from_stripped_ones() {
    let Some(f) = fixture("has_symbols_or_dwarf_tells_debug_files_from_stripped_ones") else {
        return;
    };
    let read = |p: &Path| std::fs::read(p).unwrap();
    assert!(has_symbols_or_dwarf(&read(&f.prog)));
    assert!(has_symbols_or_dwarf(&read(&f.debug)));
    assert!(!has_symbols_or_dwarf(&read(&f.stripped)));
    assert!(!has_symbols_or_dwarf(&read(&f.linked)));
    assert!(!has_symbols_or_dwarf(b"garbage"));
    assert!(!has_symbols_or_dwarf(b""));
    let prog = read(&f.prog);
    for cut in [4, 16, 64, 100, 4096, prog.len() / 2, prog.len() - 1] {
        // The section headers are at the end: every prefix is malformed, none panics.
        assert!(!has_symbols_or_dwarf(&prog[..cut]), "prefix of {cut} bytes");
    }
}

#[test]
fn build_id_directory_comes_first() {
    let Some(f) = fixture("build_id_directory_comes_first") else {
        return;
    };
    let dir = scratch("build-id-first");
    let debug_dir = dir.join("debug");
    let (binary, bytes) = linked_binary(f, &dir);
    copy(&f.debug, &build_id_path(&debug_dir, &f.id));
    copy(&f.debug, &dir.join("bin").join("k.debug"));
    let lookup = DebugFileFinder::new(vec![debug_dir.clone()]).find(&f.id, &binary, &bytes);
    assert_eq!(
        lookup,
        DebugLookup {
            found: Some(DebugFile {
                path: build_id_path(&debug_dir, &f.id),
                route: DebugRoute::DebugDir
            }),
            tried: vec![],
        }
    );
    assert_eq!(DebugRoute::DebugDir.to_string(), "debug_dirs");
    assert_eq!(DebugRoute::GnuDebuglink.to_string(), "gnu_debuglink");
    assert_eq!(DebugRoute::Debuginfod.to_string(), "debuginfod");
}

#[test]
fn flat_hex_layout_is_a_debug_dir_candidate() {
    let Some(f) = fixture("flat_hex_layout_is_a_debug_dir_candidate") else {
        return;
    };
    let dir = scratch("flat");
    let debug_dir = dir.join("debug");
    let flat = debug_dir.join(f.id.to_hex());
    copy(&f.debug, &flat);
    let binary = dir.join("bin").join("prog");
    copy(&f.stripped, &binary);
    let bytes = std::fs::read(&binary).unwrap();
    let lookup = DebugFileFinder::new(vec![debug_dir.clone()]).find(&f.id, &binary, &bytes);
    assert_eq!(
        lookup.found,
        Some(DebugFile {
            path: flat,
            route: DebugRoute::DebugDir
        })
    );
    assert_eq!(
        lookup.tried,
        vec![format!(
            "{}: not found",
            build_id_path(&debug_dir, &f.id).display()
        )]
    );
}

#[test]
fn gnu_debuglink_beside_the_binary() {
    let Some(f) = fixture("gnu_debuglink_beside_the_binary") else {
        return;
    };
    let dir = scratch("beside");
    let debug_dir = dir.join("debug");
    let (binary, bytes) = linked_binary(f, &dir);
    let beside = dir.join("bin").join("k.debug");
    copy(&f.debug, &beside);
    let lookup = DebugFileFinder::new(vec![debug_dir.clone()]).find(&f.id, &binary, &bytes);
    assert_eq!(
        lookup.found,
        Some(DebugFile {
            path: beside,
            route: DebugRoute::GnuDebuglink
        })
    );
    assert_eq!(
        lookup.tried,
        vec![
            format!("{}: not found", build_id_path(&debug_dir, &f.id).display()),
            format!("{}: not found", debug_dir.join(f.id.to_hex()).display()),
        ]
    );
}

#[test]
fn gnu_debuglink_below_a_debug_dir() {
    let Some(f) = fixture("gnu_debuglink_below_a_debug_dir") else {
        return;
    };
    let dir = scratch("below");
    let debug_dir = dir.join("debug");
    let (binary, bytes) = linked_binary(f, &dir);
    // D/EXECDIR/NAME: the binary's absolute directory appended below the debug directory.
    let below = debug_dir
        .join(dir.strip_prefix("/").unwrap())
        .join("bin")
        .join("k.debug");
    copy(&f.debug, &below);
    let lookup = DebugFileFinder::new(vec![debug_dir.clone()]).find(&f.id, &binary, &bytes);
    assert_eq!(
        lookup.found,
        Some(DebugFile {
            path: below,
            route: DebugRoute::GnuDebuglink
        })
    );
    assert_eq!(
        lookup.tried[2..],
        [
            format!("{}: not found", dir.join("bin/k.debug").display()),
            format!("{}: not found", dir.join("bin/.debug/k.debug").display()),
        ]
    );
}

#[test]
fn wrong_crc_is_rejected_and_the_search_goes_on() {
    let Some(f) = fixture("wrong_crc_is_rejected_and_the_search_goes_on") else {
        return;
    };
    let dir = scratch("crc-mismatch");
    let (binary, bytes) = linked_binary(f, &dir);
    // The unstripped program: same build id, symbols and DWARF, but not the file linked.
    copy(&f.prog, &dir.join("bin/k.debug"));
    copy(&f.debug, &dir.join("bin/.debug/k.debug"));
    let lookup = DebugFileFinder::new(vec![]).find(&f.id, &binary, &bytes);
    assert_eq!(
        lookup.found,
        Some(DebugFile {
            path: dir.join("bin/.debug/k.debug"),
            route: DebugRoute::GnuDebuglink
        })
    );
    assert_ne!(crc_of(&f.prog), crc_of(&f.debug));
    assert_eq!(
        lookup.tried,
        vec![format!(
            "{}: CRC 0x{:08x} differs from .gnu_debuglink's 0x{:08x}",
            dir.join("bin/k.debug").display(),
            crc_of(&f.prog),
            crc_of(&f.debug)
        )]
    );
}

#[test]
fn another_build_id_is_rejected() {
    let Some(f) = fixture("another_build_id_is_rejected") else {
        return;
    };
    let dir = scratch("other-id");
    let debug_dir = dir.join("debug");
    let (binary, bytes) = linked_binary(f, &dir);
    copy(&f.other, &build_id_path(&debug_dir, &f.id));
    copy(&f.other, &dir.join("bin/k.debug"));
    let lookup = DebugFileFinder::new(vec![debug_dir.clone()]).find(&f.id, &binary, &bytes);
    assert_eq!(lookup.found, None);
    let differs = format!("build id {} differs from the binary's {}", f.other_id, f.id);
    assert_eq!(
        lookup.tried[0],
        format!("{}: {differs}", build_id_path(&debug_dir, &f.id).display())
    );
    assert_eq!(
        lookup.tried[2],
        format!("{}: {differs}", dir.join("bin/k.debug").display())
    );
}

#[test]
fn a_stripped_candidate_is_rejected() {
    let Some(f) = fixture("a_stripped_candidate_is_rejected") else {
        return;
    };
    let dir = scratch("stripped-candidate");
    let debug_dir = dir.join("debug");
    let binary = dir.join("bin/prog");
    copy(&f.stripped, &binary);
    copy(&f.stripped, &build_id_path(&debug_dir, &f.id));
    let bytes = std::fs::read(&binary).unwrap();
    let lookup = DebugFileFinder::new(vec![debug_dir.clone()]).find(&f.id, &binary, &bytes);
    assert_eq!(
        lookup,
        DebugLookup {
            found: None,
            tried: vec![
                format!(
                    "{}: has neither .symtab nor DWARF",
                    build_id_path(&debug_dir, &f.id).display()
                ),
                format!("{}: not found", debug_dir.join(f.id.to_hex()).display()),
                format!("{}: has no .gnu_debuglink", binary.display()),
            ]
        }
    );
}

#[test]
fn nothing_found_lists_every_candidate() {
    let Some(f) = fixture("nothing_found_lists_every_candidate") else {
        return;
    };
    let dir = scratch("nothing");
    let (d1, d2) = (dir.join("d1"), dir.join("d2"));
    let (binary, bytes) = linked_binary(f, &dir);
    let lookup = DebugFileFinder::new(vec![d1.clone(), d2.clone()]).find(&f.id, &binary, &bytes);
    let below = |d: &Path| d.join(dir.strip_prefix("/").unwrap()).join("bin/k.debug");
    let expected: Vec<String> = [
        build_id_path(&d1, &f.id),
        d1.join(f.id.to_hex()),
        build_id_path(&d2, &f.id),
        d2.join(f.id.to_hex()),
        dir.join("bin/k.debug"),
        dir.join("bin/.debug/k.debug"),
        below(&d1),
        below(&d2),
    ]
    .iter()
    .map(|p| format!("{}: not found", p.display()))
    .collect();
    assert_eq!(
        lookup,
        DebugLookup {
            found: None,
            tried: expected
        }
    );
}

#[test]
fn the_binary_itself_is_skipped() {
    let Some(f) = fixture("the_binary_itself_is_skipped") else {
        return;
    };
    let dir = scratch("itself");
    // The unstripped program stored in the flat layout and profiled from there.
    let binary = dir.join(f.id.to_hex());
    copy(&f.prog, &binary);
    let bytes = std::fs::read(&binary).unwrap();
    let lookup = DebugFileFinder::new(vec![dir.clone()]).find(&f.id, &binary, &bytes);
    assert_eq!(lookup.found, None);
    assert_eq!(
        lookup.tried[1],
        format!("{}: is the binary itself", binary.display())
    );
    // A hard link is the same file under another name.
    std::fs::create_dir_all(build_id_path(&dir, &f.id).parent().unwrap()).unwrap();
    std::fs::hard_link(&binary, build_id_path(&dir, &f.id)).unwrap();
    let lookup = DebugFileFinder::new(vec![dir.clone()]).find(&f.id, &binary, &bytes);
    assert_eq!(
        lookup.tried[0],
        format!(
            "{}: is the binary itself",
            build_id_path(&dir, &f.id).display()
        )
    );
}

#[test]
fn a_symlinked_binary_is_also_searched_beside_its_target() {
    let Some(f) = fixture("a_symlinked_binary_is_also_searched_beside_its_target") else {
        return;
    };
    let dir = scratch("symlink");
    let (target, bytes) = linked_binary(f, &dir);
    copy(&f.debug, &dir.join("bin/k.debug"));
    std::fs::create_dir_all(dir.join("links")).unwrap();
    let link = dir.join("links/app");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let lookup = DebugFileFinder::new(vec![]).find(&f.id, &link, &bytes);
    assert_eq!(
        lookup.found,
        Some(DebugFile {
            path: dir.join("bin/k.debug"),
            route: DebugRoute::GnuDebuglink
        })
    );
    assert_eq!(
        lookup.tried,
        vec![
            format!("{}: not found", dir.join("links/k.debug").display()),
            format!("{}: not found", dir.join("links/.debug/k.debug").display()),
        ]
    );
}

#[test]
fn garbage_candidates_are_rejected_without_panicking() {
    let Some(f) = fixture("garbage_candidates_are_rejected_without_panicking") else {
        return;
    };
    let dir = scratch("garbage");
    let debug_dir = dir.join("debug");
    let (binary, bytes) = linked_binary(f, &dir);
    std::fs::create_dir_all(build_id_path(&debug_dir, &f.id)).unwrap();
    std::fs::write(debug_dir.join(f.id.to_hex()), b"not an ELF file at all").unwrap();
    let prog = std::fs::read(&f.prog).unwrap();
    std::fs::write(dir.join("bin/k.debug"), &prog[..prog.len() / 2]).unwrap();
    std::fs::create_dir_all(dir.join("bin/.debug")).unwrap();
    std::fs::write(dir.join("bin/.debug/k.debug"), b"").unwrap();
    let lookup = DebugFileFinder::new(vec![debug_dir.clone()]).find(&f.id, &binary, &bytes);
    assert_eq!(lookup.found, None);
    assert_eq!(
        lookup.tried[..2],
        [
            format!(
                "{}: not a regular file",
                build_id_path(&debug_dir, &f.id).display()
            ),
            format!(
                "{}: not an ELF file",
                debug_dir.join(f.id.to_hex()).display()
            ),
        ]
    );
    assert!(
        lookup.tried[2].starts_with(&format!(
            "{}: malformed ELF file: ",
            dir.join("bin/k.debug").display()
        )),
        "{}",
        lookup.tried[2]
    );
    assert_eq!(
        lookup.tried[3],
        format!(
            "{}: not an ELF file",
            dir.join("bin/.debug/k.debug").display()
        )
    );
    // A binary that is not ELF: its debuglink cannot be read, the build-id search still runs.
    let lookup = DebugFileFinder::new(vec![debug_dir]).find(&f.id, &binary, b"\x7fELF junk");
    assert_eq!(
        lookup.tried.last().unwrap(),
        &format!(
            "{}: not an ELF file; its .gnu_debuglink was not read",
            binary.display()
        )
    );
}

/// A remote source answering from a fixed list, counting the questions.
struct FakeRemote {
    answer: Result<Option<PathBuf>, String>,
    asked: Mutex<Vec<BuildId>>,
}

impl RemoteDebugSource for FakeRemote {
    fn fetch_debuginfo(&self, id: &BuildId) -> Result<Option<PathBuf>, String> {
        self.asked.lock().unwrap().push(id.clone());
        self.answer.clone()
    }
    fn describe(&self) -> String {
        "debuginfod http://fake:1".to_string()
    }
}

fn fake(answer: Result<Option<PathBuf>, String>) -> Arc<FakeRemote> {
    Arc::new(FakeRemote {
        answer,
        asked: Mutex::new(Vec::new()),
    })
}

#[test]
fn the_remote_source_is_asked_last() {
    let Some(f) = fixture("the_remote_source_is_asked_last") else {
        return;
    };
    let dir = scratch("remote");
    let binary = dir.join("bin/prog");
    copy(&f.stripped, &binary);
    let bytes = std::fs::read(&binary).unwrap();
    let cached = dir.join("cache").join(f.id.to_hex()).join("debuginfo");
    copy(&f.debug, &cached);
    let local = vec![
        format!(
            "{}: not found",
            build_id_path(&dir.join("d"), &f.id).display()
        ),
        format!("{}: not found", dir.join("d").join(f.id.to_hex()).display()),
        format!("{}: has no .gnu_debuglink", binary.display()),
    ];
    let finder = DebugFileFinder::new(vec![dir.join("d")]);

    let remote = fake(Ok(Some(cached.clone())));
    let lookup = finder
        .clone()
        .with_remote(remote.clone())
        .find(&f.id, &binary, &bytes);
    assert_eq!(
        lookup,
        DebugLookup {
            found: Some(DebugFile {
                path: cached,
                route: DebugRoute::Debuginfod
            }),
            tried: local.clone(),
        }
    );
    assert_eq!(*remote.asked.lock().unwrap(), vec![f.id.clone()]);

    let remote = fake(Ok(None));
    let lookup = finder
        .clone()
        .with_remote(remote)
        .find(&f.id, &binary, &bytes);
    assert_eq!(lookup.found, None);
    assert_eq!(lookup.tried[..3], local[..]);
    assert_eq!(
        lookup.tried[3..],
        ["debuginfod http://fake:1: 404".to_string()]
    );

    let remote = fake(Err("http://fake:1: connection refused".into()));
    let lookup = finder
        .clone()
        .with_remote(remote)
        .find(&f.id, &binary, &bytes);
    assert_eq!(
        lookup.tried[3..],
        ["debuginfod http://fake:1: http://fake:1: connection refused".to_string()]
    );

    // What the remote returns is checked like any candidate.
    let remote = fake(Ok(Some(f.other.clone())));
    let lookup = finder
        .clone()
        .with_remote(remote)
        .find(&f.id, &binary, &bytes);
    assert_eq!(lookup.found, None);
    assert_eq!(
        lookup.tried[3..],
        [format!(
            "{}: build id {} differs from the binary's {}",
            f.other.display(),
            f.other_id,
            f.id
        )]
    );

    // Not asked when a local candidate is the debug file.
    copy(&f.debug, &dir.join("d").join(f.id.to_hex()));
    let remote = fake(Ok(None));
    let lookup = finder
        .with_remote(remote.clone())
        .find(&f.id, &binary, &bytes);
    assert_eq!(lookup.found.map(|d| d.route), Some(DebugRoute::DebugDir));
    assert!(remote.asked.lock().unwrap().is_empty());
}

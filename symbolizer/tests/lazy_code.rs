//! [`LazyCode`] against the eager [`ProfiledBinary`]: for stripped binaries (one built here
//! with clang-19 and `strip -s`, and this machine's C library), every
//! [`CodeLayout`]/[`RangeChecks`] answer of the on-demand layout equals the eager one, and
//! a query decodes only the extents it reaches.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use object::{Object, ObjectSection, SectionKind};
use symbolizer::{LazyCode, LoadOptions, ProfiledBinary, SharedBytes};
use unwinder::{CodeLayout, RangeChecks, EXTERNAL_ADDR};

/// Functions of several shapes: leaves, loops, calls, tail calls, a `noreturn` ending,
/// a switch (jump table), recursion.
fn program() -> String {
    let mut src = String::from(
        "#include <stdio.h>\n#include <stdlib.h>\n\
         __attribute__((noreturn, noinline)) void die(int c) { fprintf(stderr, \"%d\\n\", c); exit(c); }\n\
         __attribute__((noinline)) int rec(int n) { return n < 2 ? n : rec(n - 1) + rec(n - 2); }\n\
         __attribute__((noinline)) int sw(int k) { switch (k & 7) { case 0: return 3; case 1: return rec(k);\n\
           case 2: return k * 9; case 3: return k ^ 5; case 4: return rec(k & 3) + 1; case 5: return 11;\n\
           case 6: return k - 1; default: die(k); } }\n",
    );
    for i in 0..40 {
        src.push_str(&format!(
            "__attribute__((noinline)) int f{i}(int *a, int n) {{ int t = {i};\n\
             for (int j = 0; j < n; j++) t += a[j] * {m} + sw(j + {i});\n\
             if (t == {i}) die(t);\n\
             return t; }}\n",
            m = i * 3 + 1
        ));
    }
    src.push_str("int main(int argc, char **argv) { int n = argc > 1 ? atoi(argv[1]) : 10;\n");
    src.push_str("  int *a = calloc(n, sizeof(int)); long s = 0;\n");
    for i in 0..40 {
        src.push_str(&format!("  s += f{i}(a, n);\n"));
    }
    src.push_str("  printf(\"%ld\\n\", s); return 0; }\n");
    src
}

/// The stripped binary built with clang-19, or `None` (test skipped) without clang-19.
fn stripped_binary() -> Option<PathBuf> {
    // A directory per call: the tests run on parallel threads of one process.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "symbolizer-lazy-code-{}-{call}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("prog.c");
    std::fs::write(&src, program()).unwrap();
    let out = dir.join("prog");
    let status = match Command::new("clang-19")
        .args(["-O2", "-g", "-fno-omit-frame-pointer"])
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
    {
        Ok(s) => s,
        Err(_) => {
            eprintln!("SKIPPED: clang-19 not found");
            return None;
        }
    };
    assert!(status.success(), "clang-19 failed");
    let stripped = dir.join("prog.stripped");
    let status = Command::new("strip")
        .arg("-s")
        .arg(&out)
        .arg("-o")
        .arg(&stripped)
        .status()
        .expect("strip runs");
    assert!(status.success());
    Some(stripped)
}

/// The eager and the lazy load of `path`, without a debug file lookup. The lazy one reads a
/// mapping of the file and gives back the pages it decoded (as the daemon does): the
/// answers must not change when they are read again from the file.
fn both(path: &Path) -> (ProfiledBinary, Arc<LazyCode>) {
    let bytes = std::fs::read(path).unwrap();
    let eager = ProfiledBinary::from_bytes(path, &bytes, &LoadOptions::default()).unwrap();
    let file = std::fs::File::open(path).unwrap();
    // SAFETY: a read-only map of a test file nothing truncates.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    let shared: SharedBytes = Arc::new(map);
    let options = LoadOptions {
        release_decoded_pages: true,
        ..LoadOptions::default()
    };
    let (binary, lazy) = ProfiledBinary::from_shared_bytes(path, shared, &options).unwrap();
    assert!(binary.code().is_empty());
    assert_eq!(binary.preferred_base(), eager.preferred_base());
    assert_eq!(binary.name_source(), eager.name_source());
    let lazy = lazy.expect("no DWARF, no probes: lazy");
    assert!(!lazy.is_empty());
    assert!(!eager.code().is_empty());
    (eager, lazy)
}

/// The executable sections of `path` other than `.plt`: `[address, end)`.
fn code_sections(path: &Path) -> Vec<(u64, u64)> {
    let bytes = std::fs::read(path).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    file.sections()
        .filter(|s| s.kind() == SectionKind::Text && s.name() != Ok(".plt"))
        .map(|s| (s.address(), s.address() + s.size()))
        .collect()
}

/// Compares the point queries at `addr` (those a lazy layout remembers, twice: the
/// second answer is the remembered one).
fn same_at<L: CodeLayout + RangeChecks>(eager: &ProfiledBinary, lazy: &L, addr: u64) {
    for _ in 0..2 {
        assert_eq!(lazy.is_code(addr), eager.is_code(addr), "is_code {addr:#x}");
        assert_eq!(
            lazy.call_before_return_address(addr),
            eager.call_before_return_address(addr),
            "call_before_return_address {addr:#x}"
        );
    }
    assert_eq!(lazy.is_call(addr), eager.is_call(addr), "is_call {addr:#x}");
    assert_eq!(
        lazy.is_return(addr),
        eager.is_return(addr),
        "is_return {addr:#x}"
    );
    assert_eq!(
        lazy.is_transfer(addr),
        eager.is_transfer(addr),
        "is_transfer {addr:#x}"
    );
    assert_eq!(
        lazy.previous_instruction(addr),
        eager.previous_instruction(addr),
        "previous_instruction {addr:#x}"
    );
    assert_eq!(
        lazy.is_prolog_or_epilog(addr),
        eager.is_prolog_or_epilog(addr),
        "is_prolog_or_epilog {addr:#x}"
    );
    assert_eq!(
        lazy.function_range(addr),
        eager.function_range(addr),
        "function_range {addr:#x}"
    );
    assert_eq!(
        lazy.inline_context_equal(addr, addr),
        eager.inline_context_equal(addr, addr),
        "inline_context_equal {addr:#x}"
    );
    assert_eq!(
        lazy.block_probe_anchor(addr),
        eager.block_probe_anchor(addr)
    );
}

/// Spans (bytes) of the `range_crosses_uncond_branch` checks.
const SPANS: &[u64] = &[1, 2, 3, 5, 8, 16, 40, 100, 256, 1000, 4096];

fn same_ranges_from<L: CodeLayout>(eager: &ProfiledBinary, lazy: &L, addr: u64) {
    for &k in SPANS {
        assert_eq!(
            lazy.range_crosses_uncond_branch(addr, addr + k),
            eager.range_crosses_uncond_branch(addr, addr + k),
            "range_crosses_uncond_branch({addr:#x}, +{k})"
        );
        assert_eq!(
            lazy.is_valid_fall_through_range(addr, addr + k),
            eager.is_valid_fall_through_range(addr, addr + k),
        );
    }
    assert_eq!(
        lazy.range_crosses_uncond_branch(addr, addr),
        eager.range_crosses_uncond_branch(addr, addr)
    );
}

fn same_everywhere_else<L: CodeLayout + RangeChecks>(eager: &ProfiledBinary, lazy: &L) {
    assert_eq!(lazy.has_pseudo_probes(), eager.has_pseudo_probes());
    assert!(lazy.code_bitmap().is_none());
    assert!(lazy.range_checks().is_some());
    assert_eq!(
        lazy.call_before_return_address(EXTERNAL_ADDR),
        Some(EXTERNAL_ADDR)
    );
    for addr in [0, 1, 2, u64::MAX, u64::MAX - 1] {
        same_at(eager, lazy, addr);
    }
    let addrs = eager.code().addresses();
    let (first, last) = (addrs[0], *addrs.last().unwrap());
    for addr in [first - 1, first, last, last + 1, last + 100] {
        same_at(eager, lazy, addr);
        same_ranges_from(eager, lazy, addr);
    }
    for r in eager.function_table().ranges() {
        same_at(eager, lazy, r.start);
        same_at(eager, lazy, r.end);
    }
}

#[test]
fn stripped_clang_binary_matches_the_eager_layout_at_every_address() {
    let Some(path) = stripped_binary() else {
        return;
    };
    let (eager, lazy) = both(&path);
    let sections = code_sections(&path);
    assert!(!sections.is_empty());
    let mut checked = 0u64;
    for &(lo, hi) in &sections {
        for addr in lo.saturating_sub(16)..hi + 16 {
            same_at(&eager, &*lazy, addr);
            same_ranges_from(&eager, &*lazy, addr);
            checked += 1;
        }
    }
    same_everywhere_else(&eager, &*lazy);
    assert!(checked > 1000, "{checked}");
    // Every extent was reached: all instructions decoded, as many as eagerly.
    assert_eq!(lazy.decoded_instructions(), eager.code().len());
    assert!(!eager.prolog_epilog_addresses().is_empty());
    assert!(eager.function_table().ranges().len() > 40);

    // The unstripped binary has DWARF: loaded eagerly, no lazy layout.
    let full = path.with_file_name("prog");
    let bytes: SharedBytes = Arc::new(std::fs::read(&full).unwrap());
    let (binary, lazy) =
        ProfiledBinary::from_shared_bytes(&full, bytes, &LoadOptions::default()).unwrap();
    assert!(lazy.is_none());
    assert!(!binary.code().is_empty());
}

/// `LoadOptions::lazy_code` (the command-line tools' load): a binary with DWARF, and one
/// with pseudo probes too, decoded on demand inside the `ProfiledBinary`, answer every
/// code, range, instruction and inline-frame query as the eager load does, and read only
/// the line tables of the units asked about.
#[test]
fn lazy_code_binaries_with_dwarf_and_probes_match_the_eager_load() {
    let Some(stripped) = stripped_binary() else {
        return;
    };
    let dwarf = stripped.with_file_name("prog");
    let probes = build_beside(&stripped, "prog.probes", "-fpseudo-probe-for-profiling");
    // Compressed debug sections: the line tables are read from a decompressed copy, whose
    // pages must not be given back as the file's are (they would read back as zeros).
    let compressed = build_beside(&stripped, "prog.gz", "-gz=zlib");
    for path in [dwarf, probes, compressed] {
        let eager = ProfiledBinary::load(&path).unwrap();
        let lazy_options = LoadOptions {
            lazy_code: true,
            release_decoded_pages: true,
            ..LoadOptions::default()
        };
        let lazy = ProfiledBinary::load_split(&path, None, &lazy_options).unwrap();
        assert!(lazy.code().is_empty() && !eager.code().is_empty());
        let code = lazy.lazy_code().expect("decoded on demand");
        assert_eq!(code.decoded_instructions(), 0, "{path:?}");
        // The DIEs are read again from the file when inline frames are first asked for
        // (compressed ones are kept from load: they would be decompressed again).
        let deferred = !path.to_string_lossy().ends_with(".gz");
        assert!(eager.dwarf_dies_read(), "{path:?}");
        assert_eq!(lazy.dwarf_dies_read(), !deferred, "{path:?}");
        assert_eq!(lazy.has_pseudo_probes(), eager.has_pseudo_probes());
        assert_eq!(lazy.probes(), eager.probes());
        // One function's queries decode one extent and read one unit's lines.
        let f = eager.function_table().ranges()[3].clone();
        same_at(&eager, &lazy, f.start);
        assert_eq!(lazy.inline_frames(f.start), eager.inline_frames(f.start));
        assert!(!eager.inline_frames(f.start).is_empty(), "{path:?}");
        assert!(lazy.dwarf_dies_read());
        // (The prolog check looks at the instructions before the start: one more extent.)
        assert!(code.decoded_extents() <= 3, "{}", code.decoded_extents());
        assert_eq!(lazy.dwarf_units_with_lines(), 1);
        for &(lo, hi) in &code_sections(&path) {
            for addr in lo.saturating_sub(16)..hi + 16 {
                same_at(&eager, &lazy, addr);
                same_ranges_from(&eager, &lazy, addr);
                assert_eq!(lazy.inline_frames(addr), eager.inline_frames(addr));
                assert_eq!(lazy.instruction_size(addr), eager.instruction_size(addr));
                assert_eq!(lazy.instruction_kind(addr), eager.instruction_kind(addr));
                let (a, b): (Vec<_>, Vec<_>) = (
                    lazy.instructions_in(addr, addr + 40).collect(),
                    eager.instructions_in(addr, addr + 40).collect(),
                );
                assert_eq!(a, b, "instructions_in({addr:#x}, +40)");
            }
            let (a, b): (Vec<_>, Vec<_>) = (
                lazy.instructions_in(lo, hi).collect(),
                eager.instructions_in(lo, hi).collect(),
            );
            assert_eq!(a, b);
        }
        same_everywhere_else(&eager, &lazy);
        assert_eq!(code.decoded_instructions(), eager.code().len());
        // Ranges over many functions are decoded, not guessed, for an exact answer.
        let (first, last) = (
            eager.code().addresses()[0],
            *eager.code().addresses().last().unwrap(),
        );
        assert_eq!(
            lazy.range_crosses_uncond_branch(first, last),
            eager.range_crosses_uncond_branch(first, last)
        );
    }
}

/// `prog.c` beside `stripped` built with `-O2 -g -fno-omit-frame-pointer` and `flag`, as
/// `name` in the same directory.
fn build_beside(stripped: &Path, name: &str, flag: &str) -> PathBuf {
    let out = stripped.with_file_name(name);
    let status = Command::new("clang-19")
        .args(["-O2", "-g", "-fno-omit-frame-pointer", flag])
        .arg(stripped.with_file_name("prog.c"))
        .arg("-o")
        .arg(&out)
        .status()
        .expect("clang-19 runs");
    assert!(status.success());
    out
}

const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";

#[test]
fn stripped_libc_matches_the_eager_layout() {
    let path = Path::new(LIBC);
    if !path.exists() {
        eprintln!("SKIPPED: no {LIBC}");
        return;
    }
    let (eager, lazy) = both(path);
    if eager.name_source().has_names() {
        eprintln!("note: {LIBC} has symbols here");
    }
    let text = code_sections(path)
        .into_iter()
        .max_by_key(|(lo, hi)| hi - lo)
        .unwrap();
    // A contiguous 256 KiB window in the middle of the largest code section.
    let mid = text.0 + (text.1 - text.0) / 2;
    let window = mid.saturating_sub(128 << 10)..(mid + (128 << 10)).min(text.1);
    for addr in window {
        same_at(&eager, &*lazy, addr);
        if addr % 4 == 0 {
            same_ranges_from(&eager, &*lazy, addr);
        }
    }
    // Every instruction start, and the byte after it.
    for &addr in eager.code().addresses() {
        same_at(&eager, &*lazy, addr);
        same_at(&eager, &*lazy, addr + 1);
        for k in [1, 7, 64, 2048] {
            assert_eq!(
                lazy.range_crosses_uncond_branch(addr, addr + k),
                eager.range_crosses_uncond_branch(addr, addr + k),
                "range_crosses_uncond_branch({addr:#x}, +{k})"
            );
        }
    }
    same_everywhere_else(&eager, &*lazy);
    assert_eq!(lazy.decoded_instructions(), eager.code().len());
}

#[test]
fn a_query_decodes_only_the_extents_it_reaches() {
    let path = Path::new(LIBC);
    if !path.exists() {
        eprintln!("SKIPPED: no {LIBC}");
        return;
    }
    let (eager, lazy) = both(path);
    let total = eager.code().len();
    assert!(total > 100_000, "{total}");
    assert!(lazy.extent_count() > 1000, "{}", lazy.extent_count());
    assert_eq!(lazy.decoded_instructions(), 0);
    let addrs = eager.code().addresses();
    let probe = addrs[addrs.len() / 2];
    assert!(lazy.is_code(probe));
    assert_eq!(lazy.decoded_extents(), 1);
    let one = lazy.decoded_instructions();
    assert!(one > 0 && one < total / 100, "{one} of {total}");
    // A neighbouring query in the same function decodes nothing more.
    let next = addrs[addrs.len() / 2 + 1];
    if lazy.function_range(probe) == lazy.function_range(next) {
        assert!(lazy.is_code(next));
        assert_eq!(lazy.decoded_instructions(), one);
    }
    assert!(lazy.previous_instruction(probe).is_some());
    assert!(lazy.decoded_extents() <= 2);
    assert!(lazy.decoded_instructions() < total / 50);
}

/// A binary loaded again with the debug file a lookup found before
/// (`from_shared_bytes_with_debug_file`, what the daemon does to give a binary's decoded
/// code back) is the binary `load_split` makes of the same two files: the same names, the
/// same functions; without one it is the stripped file alone.
#[test]
fn loading_with_a_known_debug_file_equals_load_split() {
    let Some(stripped) = stripped_binary() else {
        return;
    };
    let debug = stripped.with_file_name("prog");
    let options = LoadOptions {
        lazy_code: true,
        ..LoadOptions::default()
    };
    let file = std::fs::File::open(&stripped).unwrap();
    // SAFETY: a read-only map of a test file nothing truncates.
    let shared: SharedBytes = Arc::new(unsafe { memmap2::Mmap::map(&file) }.unwrap());
    let names = |b: &ProfiledBinary| -> Vec<(String, Vec<(u64, u64)>)> {
        let mut f: Vec<_> = b
            .functions()
            .map(|f| (f.name.clone(), f.ranges.clone()))
            .collect();
        f.sort();
        f
    };

    let (again, _) = ProfiledBinary::from_shared_bytes_with_debug_file(
        &stripped,
        shared.clone(),
        Some(&debug),
        &options,
    )
    .unwrap();
    let split = ProfiledBinary::load_split(&stripped, Some(&debug), &options).unwrap();
    assert_eq!(
        again.name_source(),
        &symbolizer::binary::NameSource::DebugFile(debug.clone())
    );
    assert_eq!(again.name_source(), split.name_source());
    let named = names(&again);
    assert!(named.iter().any(|(n, _)| n == "f39"), "{named:?}");
    assert_eq!(named, names(&split));

    let (alone, _) =
        ProfiledBinary::from_shared_bytes_with_debug_file(&stripped, shared, None, &options)
            .unwrap();
    assert!(!alone.name_source().has_names());
}

//! The binary model against the LLVM 19 tools as oracles: llvm-profgen-19's own disassembly
//! listing (`--show-disassembly-only`), its symbolization (`--show-source-locations`), its
//! probe decoding (`--show-pseudo-probe`), and llvm-readelf-19 for segments. The test programs
//! are built with clang-19 into a temporary directory.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use symbolizer::{ProfiledBinary, SymbolizerError};
use unwinder::CodeLayout;

/// Inlining (helper → work, atoi → main), a vectorised + unrolled loop (duplication factors),
/// a leaf called directly and indirectly, a tail-call candidate.
const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>

static int __attribute__((noinline)) leaf(int x) { return x * 3 + 1; }

static inline int helper(int a, int b) {
  int s = 0;
  for (int i = 0; i < a; i++)
    s += leaf(i) ^ b;
  return s;
}

int __attribute__((noinline)) work(int n, int *arr) {
  int t = 0;
  for (int i = 0; i < n; i++)
    t += arr[i] * 7;
  t += helper(n, t);
  return t;
}

typedef int (*fp_t)(int);
fp_t pick(int k) { return k ? leaf : 0; }

int __attribute__((noinline)) tail(int k) { return leaf(k + 1); }

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 1000;
  int *arr = malloc(sizeof(int) * n);
  for (int i = 0; i < n; i++) arr[i] = i;
  long total = 0;
  for (int r = 0; r < 100; r++) {
    total += work(n, arr);
    fp_t f = pick(r & 1);
    if (f) total += f(r);
    total += tail(r);
  }
  printf("%ld\n", total);
  return 0;
}
"#;

const FLAGS: &[&str] = &[
    "-O2",
    "-g",
    "-fno-omit-frame-pointer",
    "-mno-omit-leaf-frame-pointer",
    "-fdebug-info-for-profiling",
];

struct Built {
    line: PathBuf,
    probe: PathBuf,
}

fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("symbolizer-binary-model-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("prog.c");
        std::fs::write(&src, PROGRAM).unwrap();
        let compile = |out: &str, extra: &[&str]| {
            let out = dir.join(out);
            let status = Command::new("clang-19")
                .args(FLAGS)
                .args(extra)
                .arg(&src)
                .arg("-o")
                .arg(&out)
                .status()
                .expect("clang-19 runs");
            assert!(status.success(), "clang-19 failed for {out:?}");
            out
        };
        Built {
            line: compile("prog_line", &[]),
            probe: compile("prog_probe", &["-fpseudo-probe-for-profiling"]),
        }
    })
}

fn load(path: &Path) -> ProfiledBinary {
    ProfiledBinary::load(path).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs llvm-profgen-19 in its disassembly-listing mode with `extra` flags.
fn profgen_listing(binary: &Path, extra: &[&str]) -> String {
    let out = Command::new("llvm-profgen-19")
        .arg("--show-disassembly-only")
        .args(extra)
        .arg(format!("--binary={}", binary.display()))
        .args(["--perfscript=/dev/null", "--output=/dev/null"])
        .output()
        .expect("llvm-profgen-19 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Parses an instruction line `"    1160:\tpushq\t%rbp ..."` into (address, rest).
fn instruction_line(line: &str) -> Option<(u64, &str)> {
    if line.len() < 9 || line.as_bytes()[8] != b':' {
        return None;
    }
    let addr = u64::from_str_radix(line[..8].trim_start(), 16).ok()?;
    Some((addr, &line[9..]))
}

/// The shared corpus (tests/programs, built by its own script into a temporary directory):
/// every binary of both variants, including the shared library.
fn corpus() -> &'static [PathBuf] {
    static CORPUS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/programs/build.sh");
        let out = std::env::temp_dir().join(format!("symbolizer-corpus-{}", std::process::id()));
        let status = Command::new("bash")
            .arg(&script)
            .arg(&out)
            .output()
            .expect("build.sh runs");
        assert!(
            status.status.success(),
            "{}",
            String::from_utf8_lossy(&status.stderr)
        );
        let mut all = Vec::new();
        for variant in ["lines", "probe"] {
            let mut files: Vec<PathBuf> = std::fs::read_dir(out.join(variant))
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            files.sort();
            all.extend(files);
        }
        all
    })
}

fn check_disassembly(path: &Path) {
    let bin = load(path);
    let listing = profgen_listing(path, &[]);
    // Instructions LLVM could not decode are listed as "<unknown>" but not recorded.
    let expected: Vec<u64> = listing
        .lines()
        .filter_map(instruction_line)
        .filter(|(_, rest)| !rest.contains("<unknown>"))
        .map(|(a, _)| a)
        .collect();
    assert!(expected.len() > 50, "{}", path.display());
    assert_eq!(bin.code().addresses(), &expected[..], "{}", path.display());

    // Calls, returns and direct jumps as the listing spells them.
    for (addr, rest) in listing.lines().filter_map(instruction_line) {
        let mnemonic = rest.split_whitespace().next().unwrap_or("");
        let is_call = mnemonic.starts_with("call");
        let is_ret = mnemonic.starts_with("ret");
        let is_direct_jmp = mnemonic == "jmp" && !rest.contains('*');
        assert_eq!(bin.is_call(addr), is_call, "{addr:#x} {rest}");
        assert_eq!(bin.is_return(addr), is_ret, "{addr:#x} {rest}");
        let uncond = is_call || is_ret || is_direct_jmp;
        assert_eq!(
            bin.range_crosses_uncond_branch(addr, addr + 1),
            uncond,
            "{addr:#x} {rest}"
        );
    }
}

#[test]
fn disassembly_matches_llvm_profgen_listing() {
    check_disassembly(&built().line);
    check_disassembly(&built().probe);
}

#[test]
fn corpus_matches_llvm_profgen() {
    for path in corpus() {
        check_disassembly(path);
        if load(path).has_pseudo_probes() {
            check_locations(
                path,
                &["--show-source-locations", "--show-pseudo-probe"],
                true,
            );
            check_locations(path, &["--show-source-locations"], false);
            check_probes(path);
        } else {
            check_locations(path, &["--show-source-locations"], false);
        }
    }
}

#[test]
fn segments_match_llvm_readelf() {
    let bin = load(&built().line);
    let out = Command::new("llvm-readelf-19")
        .arg("-lW")
        .arg(&built().line)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut first_loadable = 0u64;
    let mut exec = Vec::new();
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("LOAD "))
    {
        let f: Vec<&str> = line.split_whitespace().collect();
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        let (offset, vaddr) = (hex(f[1]), hex(f[2]));
        if first_loadable == 0 {
            first_loadable = vaddr & !0xfff;
        }
        if line.contains(" R E ") {
            exec.push((vaddr & !0xfff, offset & !0xfff));
        }
    }
    assert_eq!(bin.preferred_base(), exec[0].0);
    assert_eq!(bin.first_loadable_address(), first_loadable);
    assert_eq!(
        bin.preferred_text_segment_addresses(),
        exec.iter().map(|e| e.0).collect::<Vec<_>>()
    );
    assert_eq!(
        bin.text_segment_offsets(),
        exec.iter().map(|e| e.1).collect::<Vec<_>>()
    );
    assert_eq!(bin.name(), "prog_line");
    assert!(bin.build_id().is_some_and(|b| b.0.len() == 20));
    assert!(!bin.has_pseudo_probes());
    assert!(!bin.uses_fs_discriminator());
}

/// llvm-profgen's `getReversedLocWithContext`: leaf first, `func:offset[.disc]` joined by " @ ".
fn reversed_location(frames: &[symbolizer::FrameLocation]) -> String {
    frames
        .iter()
        .rev()
        .map(|f| {
            if f.discriminator != 0 {
                format!("{}:{}.{}", f.func_name, f.line_offset, f.discriminator)
            } else {
                format!("{}:{}", f.func_name, f.line_offset)
            }
        })
        .collect::<Vec<_>>()
        .join(" @ ")
}

/// Compares each listed instruction's source location with ours. The location starts at
/// column 49 when the instruction text is shorter than 40 columns, else right after it.
fn check_locations(path: &Path, extra: &[&str], probe_mode: bool) -> usize {
    let bin = load(path);
    let listing = profgen_listing(path, extra);
    let mut checked = 0;
    for line in listing.lines() {
        let Some((addr, _)) = instruction_line(line) else {
            continue;
        };
        let ours = if probe_mode {
            bin.symbolize(addr, true)
        } else {
            bin.inline_frames(addr).to_vec()
        };
        let expected = reversed_location(&ours);
        if line.len() > 49 && line.as_bytes()[48] == b' ' {
            assert_eq!(&line[49..], expected, "{}: {line}", path.display());
        } else if line.len() >= 49 {
            assert!(
                line.ends_with(&expected),
                "{}: {line} vs {expected}",
                path.display()
            );
        } else {
            assert_eq!(expected, "", "{line}");
        }
        checked += 1;
    }
    checked
}

#[test]
fn inline_frames_match_llvm_profgen_symbolization() {
    let bin = load(&built().line);
    assert!(check_locations(&built().line, &["--show-source-locations"], false) > 100);
    // Some frames are inlined and some carry duplication-factor discriminators.
    let addrs: Vec<u64> = bin.code().addresses().to_vec();
    assert!(addrs.iter().any(|&a| bin.inline_frames(a).len() > 1));
    assert!(addrs.iter().any(|&a| bin
        .inline_frames(a)
        .iter()
        .any(|f| symbolizer::discriminator::duplication_factor(f.discriminator, false) > 1)));
}

#[test]
fn probe_discriminator_symbolization_matches_llvm_profgen() {
    assert!(
        check_locations(
            &built().probe,
            &["--show-source-locations", "--show-pseudo-probe"],
            true
        ) > 100
    );
}

#[test]
fn func_ranges_entries_and_prolog() {
    let bin = load(&built().line);
    let names: BTreeSet<&str> = bin.functions().map(|f| f.name.as_str()).collect();
    for n in ["main", "work", "pick", "tail", "leaf"] {
        assert!(names.contains(n), "{n} missing from {names:?}");
    }
    let main = bin.functions().find(|f| f.name == "main").unwrap();
    let (start, end) = main.ranges[0];
    assert_eq!(bin.func_entry_name(start), Some("main"));
    assert_eq!(bin.func_range_at(end - 1).unwrap().start, start);
    assert!(bin.func_range_at(end).is_none_or(|r| r.start == end));
    // Prolog: the entry and the next instruction; epilog: each ret and the one before.
    let second = bin.instructions_in(start + 1, end).next().unwrap().0;
    assert!(bin.is_prolog_or_epilog(start) && bin.is_prolog_or_epilog(second));
    let third = bin.instructions_in(second + 1, end).next().unwrap().0;
    assert!(!bin.is_prolog_or_epilog(third));
    for (addr, _) in bin.instructions_in(start, end - 1) {
        if bin.is_return(addr) {
            assert!(bin.is_prolog_or_epilog(addr));
            assert!(bin.is_prolog_or_epilog(bin.previous_instruction(addr).unwrap()));
        }
    }
}

/// `[Probe]:` lines of the listing, attached to the next instruction's address.
/// Probe lines per address, and the desc records (GUID → (name, hash)).
type ListedProbes = (BTreeMap<u64, Vec<String>>, BTreeMap<u64, (String, u64)>);

fn listed_probes(listing: &str) -> ListedProbes {
    let mut probes: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut descs = BTreeMap::new();
    let mut pending = Vec::new();
    let mut lines = listing.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(rest) = line.strip_prefix("GUID: ") {
            let (guid, name) = rest.split_once(" Name: ").unwrap();
            let hash = lines.next().unwrap().strip_prefix("Hash: ").unwrap();
            descs.insert(
                guid.parse().unwrap(),
                (name.to_string(), hash.parse().unwrap()),
            );
        } else if let Some(rest) = line.strip_prefix(" [Probe]:\t") {
            pending.push(rest.to_string());
        } else if let Some((addr, _)) = instruction_line(line) {
            if !pending.is_empty() {
                probes.insert(addr, std::mem::take(&mut pending));
            }
        }
    }
    (probes, descs)
}

/// MCDecodedPseudoProbe::print with names.
fn format_probe(bin: &ProfiledBinary, p: &symbolizer::PseudoProbe) -> String {
    let name = |g: u64| bin.probe_desc(g).map_or(String::new(), |d| d.name.clone());
    let mut s = format!("FUNC: {} Index: {}  ", name(p.guid), p.index);
    if p.discriminator != 0 {
        s += &format!("Discriminator: {}  ", p.discriminator);
    }
    s += &format!("Type: {}  ", p.kind.as_str());
    // getInlineContextStr: every inline site, caller → callee, no clearing.
    let mut ctx = Vec::new();
    let mut node = bin.probe_inline_node(p);
    while let Some(parent) = node.parent {
        let caller = bin.probe_inline_tree().node(parent);
        ctx.push(format!("{}:{}", name(caller.guid), node.site));
        node = caller;
    }
    ctx.reverse();
    if !ctx.is_empty() {
        s += &format!("Inlined: @ {}", ctx.join(" @ "));
    }
    s
}

fn check_probes(path: &Path) -> ProfiledBinary {
    let bin = load(path);
    assert!(bin.has_pseudo_probes());
    let listing = profgen_listing(path, &["--show-pseudo-probe"]);
    let (probes, descs) = listed_probes(&listing);
    assert!(probes.len() > 3, "{}", path.display());
    let ours: BTreeMap<u64, (String, u64)> = bin
        .probe_descs()
        .values()
        .map(|d| (d.guid, (d.name.clone(), d.hash)))
        .collect();
    assert_eq!(ours, descs);
    for (addr, expected) in &probes {
        let got: Vec<String> = bin
            .probes_at(*addr)
            .iter()
            .map(|p| format_probe(&bin, p))
            .collect();
        assert_eq!(&got, expected, "probes at {addr:#x}");
    }
    // Every decoded probe at an instruction start was listed.
    for p in bin.probes() {
        if bin.is_code(p.address) {
            assert!(
                probes.contains_key(&p.address),
                "unlisted probe at {:#x}",
                p.address
            );
        }
    }
    bin
}

#[test]
fn pseudo_probes_match_llvm_profgen_decoding() {
    let bin = check_probes(&built().probe);
    // An inlined call probe: context caller → callee, leaf appended on request.
    let probes = bin.probes();
    let inlined = probes
        .iter()
        .find(|p| p.kind.is_call() && bin.probe_inline_node(p).parent.is_some())
        .expect("an inlined call probe");
    let ctx = bin.probe_inline_context(inlined, true);
    let leaf = ctx.last().unwrap();
    assert_eq!(leaf.probe_index, inlined.index);
    assert_eq!(bin.probe_desc(inlined.guid).unwrap().name, leaf.func_name);
    assert_eq!(
        bin.probe_inline_context(inlined, false).len(),
        ctx.len() - 1
    );
    assert_eq!(
        bin.call_probe_at(inlined.address).map(|p| p.index),
        Some(inlined.index)
    );
}

/// Patches the `sh_size` of the section called `name` in a copy of the ELF bytes.
fn with_section_size(data: &[u8], name: &str, size: impl Fn(u64) -> u64) -> (Vec<u8>, u64) {
    use object::read::elf::{ElfFile64, FileHeader, SectionHeader};
    use object::{Object, ObjectSection};
    let file = ElfFile64::<object::Endianness>::parse(data).unwrap();
    let endian = file.endian();
    let section = file.section_by_name(name).unwrap();
    let old = section.elf_section_header().sh_size(endian);
    let shoff = file.elf_header().e_shoff(endian) as usize;
    let at = shoff + section.index().0 * 64 + 32;
    let mut out = data.to_vec();
    out[at..at + 8].copy_from_slice(&size(old).to_le_bytes());
    (out, old)
}

#[test]
fn truncated_probe_sections_name_file_section_and_offset() {
    let path = &built().probe;
    let data = std::fs::read(path).unwrap();
    let opts = symbolizer::LoadOptions::default();
    let (cut, old) = with_section_size(&data, ".pseudo_probe", |s| s - 3);
    match ProfiledBinary::from_bytes(path, &cut, &opts) {
        Err(
            e @ SymbolizerError::MalformedSection {
                section: ".pseudo_probe",
                offset,
                ..
            },
        ) => {
            assert!(offset <= (old - 3) as usize);
            let msg = e.to_string();
            assert!(
                msg.contains("prog_probe") && msg.contains(".pseudo_probe"),
                "{msg}"
            );
        }
        other => panic!("expected a malformed .pseudo_probe error, got {other:?}"),
    }
    let (cut, old) = with_section_size(&data, ".pseudo_probe_desc", |s| s - 1);
    match ProfiledBinary::from_bytes(path, &cut, &opts) {
        Err(SymbolizerError::MalformedSection {
            section: ".pseudo_probe_desc",
            offset,
            what,
            ..
        }) => {
            assert!(offset < old as usize);
            assert_eq!(what, "name bytes");
        }
        other => panic!("expected a malformed .pseudo_probe_desc error, got {other:?}"),
    }
}

#[test]
fn garbage_is_rejected_with_the_file_name() {
    let path = Path::new("/nonexistent/garbage.bin");
    let err = ProfiledBinary::from_bytes(path, b"\x7fELF\x02\x01\x01garbage", &Default::default())
        .unwrap_err();
    assert!(matches!(err, SymbolizerError::InvalidElf { .. }), "{err:?}");
    assert!(err.to_string().contains("garbage.bin"));
    let err =
        ProfiledBinary::from_bytes(path, b"not an elf at all", &Default::default()).unwrap_err();
    assert!(
        err.to_string().starts_with("/nonexistent/garbage.bin: "),
        "{err}"
    );
    let err = ProfiledBinary::load(path).unwrap_err();
    assert!(matches!(err, SymbolizerError::Io { .. }));
    // A truncated but valid-looking header.
    let data = std::fs::read(&built().line).unwrap();
    let err = ProfiledBinary::from_bytes(path, &data[..100], &Default::default()).unwrap_err();
    assert!(matches!(err, SymbolizerError::InvalidElf { .. }), "{err:?}");
}

fn compile_in_temp(name: &str, source: &str, flags: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("symbolizer-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let out = dir.join(name);
    let status = Command::new("clang-19")
        .args(flags)
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    out
}

/// llvm-profgen 19 keys body samples by the raw DWARF linkage name and call targets by the
/// canonical name: with a linkage name `foo.llvm.123`, its text profile reads
/// `foo.llvm.123:16:0` with a call target `foo:2` in `main` (checked by hand with a
/// two-sample perf script). Frames therefore keep raw names; entry names are canonical.
#[test]
fn frames_keep_raw_linkage_names_entries_are_canonical() {
    let src = r#"
int __attribute__((noinline)) foo(int x) __asm__("foo.llvm.123");
int __attribute__((noinline)) foo(int x) { int s = 0; for (int i = 0; i < x; i++) s += i * x; return s; }
int main(int argc, char **argv) { int t = 0; for (int i = 0; i < 1000; i++) t += foo(argc + i); return t & 1; }
"#;
    let path = compile_in_temp("canon", src, FLAGS);
    let bin = load(&path);
    let foo = bin
        .functions()
        .find(|f| f.name == "foo.llvm.123")
        .expect("raw DWARF name");
    let start = foo.ranges[0].0;
    assert_eq!(bin.func_entry_name(start), Some("foo"));
    assert_eq!(bin.func_range_at(start).unwrap().name, "foo");
    let frames = bin.inline_frames(start);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].func_name, "foo.llvm.123");
    assert_eq!(frames[0].line_offset, 0);
}

#[test]
fn symbol_fallback_is_opt_in() {
    let path = compile_in_temp("nodebug", PROGRAM, &["-O2", "-fno-omit-frame-pointer"]);
    let bin = load(&path);
    assert_eq!(bin.functions().count(), 0);
    assert!(bin.code().len() > 100);
    let opts = symbolizer::LoadOptions {
        load_functions_from_symbols: true,
        ..Default::default()
    };
    let bin = ProfiledBinary::load_with(&path, &opts).unwrap();
    let names: BTreeSet<&str> = bin.functions().map(|f| f.name.as_str()).collect();
    for n in ["main", "work", "pick", "tail", "leaf"] {
        assert!(names.contains(n), "{n} missing from {names:?}");
    }
    let main = bin.functions().find(|f| f.name == "main").unwrap();
    assert_eq!(bin.func_entry_name(main.ranges[0].0), Some("main"));
    assert!(bin.inline_frames(main.ranges[0].0).is_empty());
}

#[test]
fn profiled_binary_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<ProfiledBinary>();
}

#[test]
fn load_info_for_the_unwinder() {
    let bin = load(&built().probe);
    let info = bin.load_info();
    assert_eq!(info.name, "prog_probe");
    assert_eq!(info.preferred_base, bin.preferred_base());
    assert_eq!(info.text_segment_offsets, bin.text_segment_offsets());
    assert_eq!(
        info.preferred_text_segment_addresses,
        bin.preferred_text_segment_addresses()
    );
}

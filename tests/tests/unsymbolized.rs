//! Conformance of the unsymbolized counters (`--skip-symbolization`) with llvm-profgen 19.
//!
//! Every corpus program, both variants, is recorded once with the software LBR recorder;
//! llvm-profgen-19 converts the recorder's perf script text, we convert the same recording
//! (its events, in order, exactly what the text was written from), and the two
//! unsymbolized profiles must be byte-identical:
//!
//! * context-sensitive (hybrid samples, default options): address contexts
//!   `[0x7f4 @ 0x7bf]` for probe binaries, symbolized contexts `[main:1 @ foo]` for
//!   line-table binaries (the symbolizer's `expand_line_context` prints them);
//! * flat (`--ignore-stack-samples`) for both variants;
//! * LBR-only input (the recording without call chains) for both variants.
//!
//! Each comparison runs twice: with the symbolizer's `ProfiledBinary` as the code layout
//! (the product path), and, for probe and flat counters, with a layout read from
//! `llvm-objdump-19 -d` (test-only, an oracle independent of the symbolizer's decoder), so
//! a difference tells whether the unwinder or the binary model is at fault. The warning
//! summary ([`unwinder::UnwindStats::warnings`]) must equal llvm-profgen's stderr warnings. On a mismatch
//! our output is written next to llvm-profgen's under `target/corpus/recordings/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use collector::PerfEvent;
use e2e::corpus::{self, Variant, PROGRAM_NAMES};
use exporter::format::unsymbolized::{write_unsymbolized, LineContextFormatter};
use symbolizer::generate::cs::expand_line_context;
use symbolizer::generate::GenerateOptions;
use symbolizer::profile::SampleContext;
use symbolizer::ProfiledBinary;
use unwinder::{unwind_samples, BinaryLoadInfo, CodeLayout, CounterKind, UnwindOptions};

/// x86 instruction classes llvm-profgen distinguishes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    Other,
    Call,
    Return,
    Jump,
    CondBranch,
}

/// A [`CodeLayout`] from `llvm-objdump -d` text (test oracle): instruction starts and
/// classes of every executable section but `.plt`, function starts from symbol labels.
struct ObjdumpLayout {
    insts: BTreeMap<u64, Class>,
    prolog_epilog: BTreeSet<u64>,
    probes: bool,
}

impl ObjdumpLayout {
    fn load(binary: &Path) -> ObjdumpLayout {
        let out = Command::new("llvm-objdump-19")
            .args(["-d", "--no-show-raw-insn"])
            .arg(binary)
            .output()
            .expect("llvm-objdump-19");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut insts = BTreeMap::new();
        let mut starts = Vec::new();
        // llvm-profgen disassembles from each symbol-table symbol to the next, in every
        // text section but `.plt`; `name@plt` labels are objdump's own (synthesised from
        // PLT relocations, e.g. in `.plt.got`), so their code is not decoded by it.
        let (mut plt_section, mut synthetic) = (false, false);
        for line in text.lines() {
            if let Some(sec) = line.strip_prefix("Disassembly of section ") {
                plt_section = sec.trim_end_matches(':') == ".plt";
                synthetic = false;
                continue;
            }
            // "0000000000001710 <foo>:"
            if let Some((addr, rest)) = line.split_once(' ') {
                if rest.starts_with('<') && rest.ends_with(">:") {
                    synthetic = rest.ends_with("@plt>:");
                    if let (Ok(a), false, false) =
                        (u64::from_str_radix(addr, 16), synthetic, plt_section)
                    {
                        starts.push(a);
                    }
                    continue;
                }
            }
            if plt_section || synthetic {
                continue;
            }
            // "    1764:      \tcallq\t0x1710 <foo>"
            let Some((addr, rest)) = line.trim_start().split_once(':') else {
                continue;
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            let mnemonic = rest.split_whitespace().next().unwrap_or("");
            if mnemonic.is_empty() || mnemonic == "..." {
                continue;
            }
            let class = if mnemonic.starts_with("call") {
                Class::Call
            } else if mnemonic.starts_with("ret") {
                Class::Return
            } else if mnemonic.starts_with("jmp") {
                Class::Jump
            } else if mnemonic.starts_with('j') {
                Class::CondBranch
            } else {
                Class::Other
            };
            insts.insert(addr, class);
        }
        let addrs: Vec<u64> = insts.keys().copied().collect();
        let mut prolog_epilog = BTreeSet::new();
        for s in starts {
            if let Ok(i) = addrs.binary_search(&s) {
                prolog_epilog.insert(s);
                if let Some(n) = addrs.get(i + 1) {
                    prolog_epilog.insert(*n);
                }
            }
        }
        for (i, a) in addrs.iter().enumerate() {
            if insts[a] == Class::Return {
                prolog_epilog.insert(*a);
                if i > 0 {
                    prolog_epilog.insert(addrs[i - 1]);
                }
            }
        }
        let sections = Command::new("llvm-readelf-19")
            .arg("-SW")
            .arg(binary)
            .output()
            .expect("llvm-readelf-19");
        let sections = String::from_utf8_lossy(&sections.stdout);
        let probes = sections.contains(".pseudo_probe_desc") && sections.contains(".pseudo_probe ");
        ObjdumpLayout {
            insts,
            prolog_epilog,
            probes,
        }
    }
}

impl CodeLayout for ObjdumpLayout {
    fn is_code(&self, addr: u64) -> bool {
        self.insts.contains_key(&addr)
    }
    fn is_call(&self, addr: u64) -> bool {
        self.insts.get(&addr) == Some(&Class::Call)
    }
    fn is_return(&self, addr: u64) -> bool {
        self.insts.get(&addr) == Some(&Class::Return)
    }
    fn range_crosses_uncond_branch(&self, start: u64, end: u64) -> bool {
        start < end
            && self
                .insts
                .range(start..end)
                .any(|(_, c)| matches!(c, Class::Call | Class::Return | Class::Jump))
    }
    fn previous_instruction(&self, addr: u64) -> Option<u64> {
        self.insts.range(..addr).next_back().map(|(a, _)| *a)
    }
    fn is_prolog_or_epilog(&self, addr: u64) -> bool {
        self.prolog_epilog.contains(&addr)
    }
    fn has_pseudo_probes(&self) -> bool {
        self.probes
    }
    fn inline_context_equal(&self, _a: u64, _b: u64) -> bool {
        false
    }
}

/// The load description from the program headers (llvm-profgen's
/// `setPreferredTextSegmentAddresses`: executable PT_LOADs, page-aligned).
fn load_info(binary: &Path) -> BinaryLoadInfo {
    use object::read::elf::{ElfFile64, ProgramHeader};
    let data = std::fs::read(binary).unwrap();
    let elf = ElfFile64::<object::Endianness>::parse(&*data).unwrap();
    let endian = elf.endian();
    let mut offsets = Vec::new();
    let mut addrs = Vec::new();
    for ph in elf.elf_program_headers() {
        if ph.p_type(endian) == object::elf::PT_LOAD
            && ph.p_flags(endian) & object::elf::PF_X != object::elf::ProgramFlags(0)
        {
            offsets.push(ph.p_offset(endian) & !0xfff);
            addrs.push(ph.p_vaddr(endian) & !0xfff);
        }
    }
    BinaryLoadInfo {
        name: binary.file_name().unwrap().to_string_lossy().into_owned(),
        preferred_base: addrs[0],
        text_segment_offsets: offsets,
        preferred_text_segment_addresses: addrs,
    }
}

/// Runs llvm-profgen-19; returns the unsymbolized profile and its warnings (stderr lines
/// without the "warning: " prefix).
fn llvm_profgen(script: &Path, binary: &Path, extra: &[&str], out: &Path) -> (String, Vec<String>) {
    let output = Command::new("llvm-profgen-19")
        .arg(format!("--perfscript={}", script.display()))
        .arg(format!("--binary={}", binary.display()))
        .arg("--skip-symbolization")
        .arg(format!("--output={}", out.display()))
        .args(extra)
        .output()
        .expect("llvm-profgen-19");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "llvm-profgen-19 failed: {stderr}");
    let warnings = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("warning: "))
        .map(str::to_string)
        .collect();
    (std::fs::read_to_string(out).unwrap(), warnings)
}

fn first_difference(a: &str, b: &str) -> String {
    for (i, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        if x != y {
            return format!("line {}: llvm-profgen `{x}` vs ours `{y}`", i + 1);
        }
    }
    format!(
        "lengths differ: {} vs {} lines",
        a.lines().count(),
        b.lines().count()
    )
}

/// Our unsymbolized profile of `recorded` with the binary described by `layout`/`load`,
/// and our warning summary.
fn ours(
    events: &[PerfEvent],
    layout: &dyn CodeLayout,
    load: &BinaryLoadInfo,
    ignore_stack: bool,
    line_context: Option<LineContextFormatter<'_>>,
) -> Result<(String, Vec<String>), String> {
    let options = UnwindOptions {
        ignore_stack_samples: ignore_stack,
        ..UnwindOptions::default()
    };
    let (counters, mut stats) = unwind_samples(events.iter().cloned(), layout, load, &options)
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    write_unsymbolized(&mut out, &counters, load.preferred_base, line_context)
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8(out).unwrap();
    let cs = counters.kind != CounterKind::Flat;
    // llvm-profgen counts symbolized line contexts: the printed ones.
    stats.contexts = text.lines().filter(|l| l.starts_with('[')).count() as u64;
    Ok((text, stats.warnings(cs)))
}

fn compare(theirs: &str, ours: &str, what: &str, raw: &Path) -> Result<(), String> {
    if ours == theirs {
        return Ok(());
    }
    let mine = raw.with_extension(format!("{}.ours", what.replace('/', "-")));
    std::fs::write(&mine, ours).unwrap();
    Err(format!(
        "{what}: {} ({} vs {})",
        first_difference(theirs, ours),
        raw.display(),
        mine.display()
    ))
}

fn check(name: &str, variant: Variant, ignore_stack: bool) -> Result<(), String> {
    let program = corpus::program(name, variant)?;
    let recorded = corpus::record(&program)?;
    let raw = recorded
        .perf_script
        .with_extension(if ignore_stack { "flat.raw" } else { "cs.raw" });
    let extra: &[&str] = if ignore_stack {
        &["--ignore-stack-samples"]
    } else {
        &[]
    };
    let (theirs, their_warnings) =
        llvm_profgen(&recorded.perf_script, &program.binary, extra, &raw);
    let what = format!(
        "{name}/{variant}/{}",
        if ignore_stack { "flat" } else { "cs" }
    );

    // The product path: the symbolizer's binary model and context strings.
    let binary = ProfiledBinary::load(&program.binary).map_err(|e| format!("{what}: {e}"))?;
    let generate = GenerateOptions::default();
    let format = |key: &[u64]| {
        SampleContext::from_frames(expand_line_context(&binary, key, &generate).0).to_string()
    };
    let (mine, warnings) = ours(
        &recorded.recording.events,
        &binary,
        &binary.load_info(),
        ignore_stack,
        Some(&format),
    )
    .map_err(|e| format!("{what}: {e}"))?;
    compare(&theirs, &mine, &what, &raw)?;
    if warnings != their_warnings {
        return Err(format!("{what}: warnings differ:\n  llvm-profgen {their_warnings:?}\n  ours         {warnings:?}"));
    }

    // The objdump oracle (no inline frames: probe and flat counters only).
    if ignore_stack || variant == Variant::Probe {
        let layout = ObjdumpLayout::load(&program.binary);
        let (mine, _) = ours(
            &recorded.recording.events,
            &layout,
            &load_info(&program.binary),
            ignore_stack,
            None,
        )
        .map_err(|e| format!("{what}: {e}"))?;
        compare(&theirs, &mine, &format!("{what}/objdump"), &raw)?;
    }
    Ok(())
}

/// LBR-only input: the recording without call chains, written by the collector's perf
/// script writer (no leading IP: llvm-profgen then takes every token as a branch).
fn check_lbr_only(name: &str, variant: Variant) -> Result<(), String> {
    let program = corpus::program(name, variant)?;
    let recorded = corpus::record(&program)?;
    let mut recording = recorded.recording.clone();
    for event in &mut recording.events {
        if let PerfEvent::Sample(s) = event {
            s.callchain.clear();
        }
    }
    let script = recorded.perf_script.with_extension("lbr.perfscript");
    std::fs::write(
        &script,
        collector::perf_script::writer::perf_script_string(&recording),
    )
    .unwrap();
    let raw = script.with_extension("raw");
    let (theirs, their_warnings) = llvm_profgen(&script, &program.binary, &[], &raw);
    let what = format!("{name}/{variant}/lbr-only");
    let binary = ProfiledBinary::load(&program.binary).map_err(|e| format!("{what}: {e}"))?;
    let (mine, warnings) = ours(&recording.events, &binary, &binary.load_info(), false, None)
        .map_err(|e| format!("{what}: {e}"))?;
    compare(&theirs, &mine, &what, &raw)?;
    if warnings != their_warnings {
        return Err(format!("{what}: warnings differ:\n  llvm-profgen {their_warnings:?}\n  ours         {warnings:?}"));
    }
    Ok(())
}

fn run_all(variants: &[Variant], ignore_stack: bool) {
    if !corpus::tools_available(
        "unsymbolized",
        &[
            "clang-19",
            "llvm-profgen-19",
            "llvm-objdump-19",
            "llvm-readelf-19",
        ],
    ) {
        return;
    }
    let mut failures = Vec::new();
    for &variant in variants {
        for name in PROGRAM_NAMES {
            if let Err(e) = check(name, variant, ignore_stack) {
                failures.push(e);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn probe_context_sensitive_counters_match_llvm_profgen() {
    run_all(&[Variant::Probe], false);
}

#[test]
fn line_context_sensitive_counters_match_llvm_profgen() {
    run_all(&[Variant::Lines], false);
}

#[test]
fn flat_counters_match_llvm_profgen() {
    run_all(&Variant::ALL, true);
}

#[test]
fn lbr_only_counters_match_llvm_profgen() {
    if !corpus::tools_available("unsymbolized", &["clang-19", "llvm-profgen-19"]) {
        return;
    }
    let failures: Vec<String> = Variant::ALL
        .iter()
        .flat_map(|&v| PROGRAM_NAMES.iter().map(move |n| (*n, v)))
        .filter_map(|(n, v)| check_lbr_only(n, v).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

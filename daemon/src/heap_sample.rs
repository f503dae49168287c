//! `pgo-agent heap-sample`: live allocation sampling with uprobes, for binaries not built
//! for MemProf. Uprobes on `malloc`/`calloc`/`realloc` in the target's libc
//! ([`heapprobe`]) see every call with its size; a byte sampler (mean interval
//! `--sample-interval-bytes`, default 512 KiB, the pprof/tcmalloc convention) keeps a
//! sample of them with their call chains, weighted by `1/(1 − exp(−size/interval))`. The
//! sampler runs in the kernel (an eBPF program on each probe, so unsampled calls write no
//! record) when it loads, else here on every call's record (the reason is printed); the
//! call chains are symbolized with the symbolizer ([`ProfiledBinary`]: DWARF inline frames,
//! else the containing function) and written as a pprof heap profile (`alloc_objects`,
//! `alloc_space`, unsampled estimates).
//!
//! The target is a running process (`--pid`, all its threads; threads and children it
//! creates later are followed) or a command launched by the agent (`-- CMD ARGS...`,
//! sampled from its exec to its exit).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use collector::process_maps::read_maps;
use collector::Mmap2Event;
use exporter::format::pprof::{
    build_heap, build_heap_with_inuse, to_bytes, to_gzip_bytes, HeapContext, HeapFrame, HeapInuse,
    HeapMapping,
};
use heapprobe::session::libc_of_process;
use heapprobe::symbol::{file_program_headers, FunctionSymbols};
use heapprobe::{
    threads_of, AllocProfile, FreeMatching, HeldChild, ProbeTarget, SamplingMode, SessionEvent,
    SessionStats, UprobeSession, UprobeSettings, DEFAULT_SAMPLE_INTERVAL_BYTES,
};
use symbolizer::elf_image::{file_offset_to_vaddr, ProgramHeader};
use symbolizer::{LoadOptions, ProfiledBinary};

/// `pgo-agent heap-sample` arguments.
#[derive(Debug, Clone, Args)]
pub struct HeapSampleArgs {
    /// Sample this running process (all its threads). Without it, launch the command
    /// given after `--`.
    #[arg(long)]
    pub pid: Option<i32>,
    /// Stop after this many seconds (default: when the process exits).
    #[arg(long)]
    pub duration_secs: Option<u64>,
    /// Mean bytes between samples (an allocation of s bytes is kept with probability
    /// 1 − exp(−s/B)); 0 keeps every allocation.
    #[arg(long, default_value_t = DEFAULT_SAMPLE_INTERVAL_BYTES)]
    pub sample_interval_bytes: u64,
    /// Output pprof file (gzip-compressed when the name ends in `.gz`).
    #[arg(short, long)]
    pub output: PathBuf,
    /// The libc to probe (default: the one the target maps; for a launched command, the
    /// one this agent maps).
    #[arg(long)]
    pub libc: Option<PathBuf>,
    /// Ring buffer pages (a power of two), shared out between the threads sampled (one
    /// ring each, at least 16 pages).
    #[arg(long, default_value_t = 1024)]
    pub ring_pages: usize,
    /// Seed of the sampler's generator (same seed and allocations: same samples, for
    /// the user-space sampler; the kernel's uses it for the first countdowns only).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Sample in user space even when the in-kernel eBPF filter would load (every call
    /// then writes a record; for comparisons).
    #[arg(long)]
    pub user_space_sampling: bool,
    /// Match the frees of sampled allocations (uretprobes on the allocation functions and
    /// a uprobe on `free`, filtered in the kernel) and add inuse_objects/inuse_space to
    /// the profile. Needs the kernel filter; costs two more traps per allocation/free pair.
    #[arg(long)]
    pub inuse: bool,
    /// The command to launch and sample (after `--`).
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// What a sampling session collected.
#[derive(Debug)]
pub struct Sampled {
    /// The sampled allocation contexts (raw addresses).
    pub profile: AllocProfile,
    /// Executable mappings seen (kernel MMAP2 records, and `/proc/PID/maps` for `--pid`).
    pub mappings: Vec<Mmap2Event>,
    /// Session counters.
    pub stats: SessionStats,
    /// The launched command's exit status.
    pub exit_status: Option<i32>,
}

/// Runs the probes until the target exits or the duration elapses.
pub fn sample(args: &HeapSampleArgs) -> anyhow::Result<Sampled> {
    let base = UprobeSettings {
        ring_pages: args.ring_pages,
        enable_on_exec: false,
        sample_interval_bytes: args.sample_interval_bytes,
        kernel_filter: !args.user_space_sampling,
        seed: args.seed,
        lifetimes: args.inuse,
    };
    let targets_in = |libc: &Path| -> anyhow::Result<Vec<ProbeTarget>> {
        let mut t = ProbeTarget::for_libc(libc)?;
        if args.inuse {
            t.extend(ProbeTarget::lifetimes_for_libc(libc)?);
        }
        Ok(t)
    };
    let mut mappings: Vec<Mmap2Event> = Vec::new();
    let deadline = args
        .duration_secs
        .map(|s| Instant::now() + Duration::from_secs(s));
    let (mut session, mut child, pid) = match args.pid {
        Some(pid) => {
            if !args.command.is_empty() {
                bail!("give either --pid or a command after --, not both");
            }
            let libc = match &args.libc {
                Some(p) => p.clone(),
                None => libc_of_process(pid)?,
            };
            let targets = targets_in(&libc)?;
            let tids = threads_of(pid)?;
            let settings = base;
            let session = UprobeSession::open(&targets, &tids, settings)
                .with_context(|| format!("opening uprobes on {} for pid {pid}", libc.display()))?;
            // Mappings made before the probes were opened get no MMAP2 record.
            let maps = read_maps(pid).with_context(|| format!("reading /proc/{pid}/maps"))?;
            mappings.extend(
                maps.iter()
                    .filter(|m| m.is_executable())
                    .map(|m| m.to_mmap2(pid, pid)),
            );
            session.enable()?;
            (session, None, pid)
        }
        None => {
            if args.command.is_empty() {
                bail!("nothing to sample: give --pid PID or a command after --");
            }
            let libc = match &args.libc {
                Some(p) => p.clone(),
                None => libc_of_process(std::process::id() as i32)?,
            };
            let targets = targets_in(&libc)?;
            let mut child = HeldChild::spawn(&args.command)?;
            let settings = UprobeSettings {
                enable_on_exec: true,
                ..base
            };
            let pid = child.pid();
            let session = UprobeSession::open(&targets, &[pid], settings)
                .with_context(|| format!("opening uprobes on {}", libc.display()))?;
            child.release()?;
            (session, Some(child), pid)
        }
    };
    let mut profile = match session.sampling() {
        SamplingMode::Kernel => {
            eprintln!(
                "pgo-agent heap-sample: sampling in the kernel (eBPF byte filter, mean interval \
                 {} bytes)",
                args.sample_interval_bytes
            );
            AllocProfile::presampled(args.sample_interval_bytes)
        }
        SamplingMode::UserSpace { reason } => {
            eprintln!(
                "pgo-agent heap-sample: sampling in user space (every call writes a record): \
                 {reason}"
            );
            AllocProfile::new(args.sample_interval_bytes, args.seed)
        }
        SamplingMode::All => AllocProfile::new(0, args.seed),
    };
    match &session.stats().free_matching {
        FreeMatching::On => {
            eprintln!("pgo-agent heap-sample: matching frees (uretprobes and free, in the kernel)");
            profile.track_lifetimes();
        }
        FreeMatching::Unavailable { reason } => {
            eprintln!("pgo-agent heap-sample: free matching off: {reason}");
        }
        FreeMatching::Off => {}
    }
    let mut on_event = |e: SessionEvent| match e {
        SessionEvent::Alloc(c) => profile.record(&c),
        SessionEvent::Returned(p) => profile.record_return(&p),
        SessionEvent::Freed(p) => profile.record_free(&p),
    };
    let mut exit_status = None;
    loop {
        let n = session.poll(&mut on_event, |m| mappings.push(m));
        let ended = match &child {
            Some(c) => {
                exit_status = c.try_wait();
                exit_status.is_some()
            }
            // SAFETY: signal 0 only checks that the process exists.
            None => (unsafe { libc::kill(pid, 0) }) != 0,
        };
        if ended || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if n == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    session.disable();
    session.poll(&mut on_event, |m| mappings.push(m));
    profile.match_frees();
    if let Some(c) = child.take() {
        if exit_status.is_none() {
            // The duration ended first: let the command run on, unsampled.
            std::mem::forget(c);
        }
    }
    Ok(Sampled {
        profile,
        mappings: mappings.into_iter().filter(|m| m.is_executable()).collect(),
        stats: session.stats(),
        exit_status,
    })
}

/// A binary opened for symbolization: its DWARF (when it loads), its function symbols
/// (`.dynsym` too: distribution libraries are stripped), its `PT_LOAD`s.
struct Opened {
    binary: Option<ProfiledBinary>,
    symbols: FunctionSymbols,
    loads: Vec<ProgramHeader>,
}

fn open_binary(path: &Path) -> Option<Opened> {
    let options = LoadOptions {
        load_functions_from_symbols: true,
        ..LoadOptions::default()
    };
    let loads = file_program_headers(path).ok()?;
    Some(Opened {
        binary: ProfiledBinary::load_with(path, &options).ok(),
        symbols: FunctionSymbols::from_file(path).unwrap_or_default(),
        loads,
    })
}

/// The in-use estimates of the sampled contexts, in the order of [`symbolize`]'s
/// contexts (both iterate the same, unchanged profile).
pub fn inuse(sampled: &Sampled) -> Vec<HeapInuse> {
    sampled
        .profile
        .contexts()
        .map(|(_, _, c)| HeapInuse {
            inuse_objects: c.inuse_objects(),
            inuse_space: c.inuse_space(),
        })
        .collect()
}

/// Symbolizes the sampled contexts: each address is placed in the latest mapping of its
/// process containing it, turned into the binary's link-time address through the file
/// offset, and named by its DWARF inline frames (innermost first), else the containing
/// function. Return addresses are looked up at `address − 1` (the call instruction).
pub fn symbolize(sampled: &Sampled) -> (Vec<HeapMapping>, Vec<HeapContext>) {
    let mut heap_mappings: Vec<HeapMapping> = Vec::new();
    let mut mapping_index: HashMap<usize, usize> = HashMap::new();
    let mut binaries: HashMap<String, Option<Opened>> = HashMap::new();
    let mut frames_cache: HashMap<(u32, u64, bool), HeapFrame> = HashMap::new();
    let mut contexts = Vec::with_capacity(sampled.profile.len());
    for (pid, stack, counts) in sampled.profile.contexts() {
        let mut frames = Vec::with_capacity(stack.len());
        for (i, &addr) in stack.iter().enumerate() {
            let leaf = i == 0;
            if let Some(f) = frames_cache.get(&(pid, addr, leaf)) {
                frames.push(f.clone());
                continue;
            }
            let found = sampled.mappings.iter().enumerate().rev().find(|(_, m)| {
                (m.pid as u32 == pid || m.pid == -1) && addr >= m.addr && addr - m.addr < m.len
            });
            let mut frame = HeapFrame {
                mapping: None,
                address: addr,
                functions: Vec::new(),
            };
            if let Some((mi, m)) = found {
                let opened = binaries
                    .entry(m.filename.clone())
                    .or_insert_with(|| open_binary(Path::new(&m.filename)));
                let idx = *mapping_index.entry(mi).or_insert_with(|| {
                    heap_mappings.push(HeapMapping {
                        start: m.addr,
                        limit: m.addr + m.len,
                        file_offset: m.pgoff,
                        filename: m.filename.clone(),
                        build_id: m
                            .build_id
                            .as_ref()
                            .or_else(|| opened.as_ref()?.binary.as_ref()?.build_id())
                            .map(|b| b.to_hex())
                            .unwrap_or_default(),
                    });
                    heap_mappings.len() - 1
                });
                frame.mapping = Some(idx);
                let lookup = if leaf { addr } else { addr.saturating_sub(1) };
                let offset = lookup - m.addr + m.pgoff;
                if let Some(o) = opened {
                    if let Some(vaddr) = file_offset_to_vaddr(&o.loads, offset) {
                        frame.functions = function_names(o, vaddr);
                    }
                }
            }
            frames_cache.insert((pid, addr, leaf), frame.clone());
            frames.push(frame);
        }
        contexts.push(HeapContext {
            frames,
            alloc_objects: counts.alloc_objects,
            alloc_space: counts.alloc_space,
        });
    }
    (heap_mappings, contexts)
}

/// Names at a link-time address, innermost inline frame first: DWARF inline frames, else
/// the DWARF function, else the ELF symbol.
fn function_names(o: &Opened, vaddr: u64) -> Vec<String> {
    if let Some(binary) = &o.binary {
        let inline = binary.symbolize(vaddr, false);
        if !inline.is_empty() {
            return inline.into_iter().rev().map(|f| f.func_name).collect();
        }
        // An address-only binary's ranges (its unwind table's extents) have no names.
        if let Some(r) = binary.func_range_at(vaddr).filter(|r| !r.name.is_empty()) {
            return vec![r.name.clone()];
        }
    }
    o.symbols
        .name_at(vaddr)
        .map(|n| vec![n.to_string()])
        .unwrap_or_default()
}

/// Calls and bytes seen (sampled or not): the kernel filter's counters when it ran (user
/// space only receives the sampled calls then), else the records received.
pub fn seen(sampled: &Sampled) -> (String, String) {
    match (&sampled.stats.sampling, sampled.stats.kernel) {
        (SamplingMode::Kernel, Some(k)) => (k.calls.to_string(), k.bytes.to_string()),
        (SamplingMode::Kernel, None) => {
            ("(unknown: filter counters unreadable)".into(), "?".into())
        }
        _ => (
            sampled.profile.calls().to_string(),
            sampled.profile.bytes().to_string(),
        ),
    }
}

/// Runs `pgo-agent heap-sample`.
pub fn run(args: HeapSampleArgs) -> anyhow::Result<ExitCode> {
    sample_and_write(&args)?;
    Ok(ExitCode::SUCCESS)
}

/// Samples, writes the profile to `args.output`, prints the report on stderr and returns
/// what was sampled (its counters say which sampling mode ran).
pub fn sample_and_write(args: &HeapSampleArgs) -> anyhow::Result<Sampled> {
    let sampled = sample(args)?;
    let (mappings, contexts) = symbolize(&sampled);
    let lifetimes = sampled.profile.tracks_lifetimes();
    let inuse = inuse(&sampled);
    let profile = if lifetimes {
        build_heap_with_inuse(&mappings, &contexts, &inuse, sampled.profile.interval())
    } else {
        build_heap(&mappings, &contexts, sampled.profile.interval())
    };
    let mut top: Vec<(&HeapContext, &HeapInuse)> = contexts.iter().zip(&inuse).collect();
    top.sort_by(|a, b| b.0.alloc_space.total_cmp(&a.0.alloc_space));
    for (c, u) in top.iter().take(5) {
        let names: Vec<String> = c
            .frames
            .iter()
            .map(|f| {
                f.functions
                    .first()
                    .cloned()
                    .unwrap_or_else(|| format!("{:#x}", f.address))
            })
            .collect();
        let in_use = if lifetimes {
            format!(" ({:.0} bytes in use)", u.inuse_space)
        } else {
            String::new()
        };
        eprintln!(
            "pgo-agent heap-sample: {:>14.0} bytes {:>10.0} objects{in_use}  {}",
            c.alloc_space,
            c.alloc_objects,
            names.join(" <- ")
        );
    }
    let gz = args.output.extension().is_some_and(|e| e == "gz");
    let bytes = if gz {
        to_gzip_bytes(&profile)
    } else {
        to_bytes(&profile)
    };
    std::fs::write(&args.output, bytes)
        .with_context(|| format!("writing {}", args.output.display()))?;
    let s = &sampled.stats;
    let (calls, bytes) = seen(&sampled);
    let samples: u64 = sampled
        .profile
        .contexts()
        .map(|(_, _, c)| c.sampled_objects)
        .sum();
    eprintln!(
        "pgo-agent heap-sample: {calls} allocation calls ({bytes} bytes) seen, {} sampled in \
         {} contexts (interval {} bytes, sampling: {}); records {}, lost {}, bad {}, \
         unparsed {}, ring resyncs {}; wrote {}",
        samples,
        sampled.profile.len(),
        sampled.profile.interval(),
        s.sampling.name(),
        s.records,
        s.lost,
        s.bad_records,
        s.parse_errors,
        s.ring_resyncs,
        args.output.display()
    );
    if lifetimes {
        eprintln!(
            "pgo-agent heap-sample: free matching: {} returns, {} frees of sampled pointers",
            s.returns, s.frees
        );
    }
    if let Some(e) = &s.first_parse_error {
        eprintln!("pgo-agent heap-sample: first unparsed record: {e}");
    }
    if let Some(code) = sampled.exit_status {
        if code != 0 {
            eprintln!("pgo-agent heap-sample: the command exited with status {code}");
        }
    }
    Ok(sampled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Command;

    fn parse(args: &[&str]) -> HeapSampleArgs {
        let argv = std::iter::once("pgo-agent")
            .chain(args.iter().copied())
            .map(String::from)
            .collect();
        match crate::parse_args(argv).unwrap().command {
            Command::HeapSample(a) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn pid_and_command_forms_parse() {
        let a = parse(&[
            "heap-sample",
            "--pid",
            "42",
            "--duration-secs",
            "5",
            "-o",
            "h.pb.gz",
        ]);
        assert_eq!((a.pid, a.duration_secs), (Some(42), Some(5)));
        assert_eq!(a.sample_interval_bytes, 512 * 1024);
        assert!(a.command.is_empty());
        let a = parse(&[
            "heap-sample",
            "--sample-interval-bytes",
            "16384",
            "-o",
            "h.pb",
            "--",
            "./app",
            "--flag",
            "1",
        ]);
        assert_eq!(a.pid, None);
        assert_eq!(a.sample_interval_bytes, 16384);
        assert_eq!(a.command, ["./app", "--flag", "1"]);
    }

    #[test]
    fn nothing_to_sample_is_an_error() {
        let a = parse(&["heap-sample", "-o", "h.pb"]);
        let e = sample(&a).unwrap_err().to_string();
        assert!(e.contains("nothing to sample"), "{e}");
    }
}

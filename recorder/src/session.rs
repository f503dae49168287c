//! [`record`]: one recording session — spawn, single-step to the end, and assemble the
//! [`Recording`], the ground truth and the statistics.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use collector::ground_truth::{GroundTruth, Totals, TruthImage};
use collector::process_maps::{read_maps, MapsEntry};
use collector::sample::USER_STACK_BYTES;
use symbolizer::binary::branch::{self, BranchKind, DecodedInstruction, MAX_INSTRUCTION_LEN};
use symbolizer::elf_image::ElfFacts;

use crate::frame_chain::{user_frame_chain, DEFAULT_MAX_STACK};
use crate::lbr_ring::{LbrRing, MAX_LBR_DEPTH};
use crate::tracer::{resolve_program, StepOutcome, Tracee};
use crate::{RecorderError, DEFAULT_LBR_DEPTH, DEFAULT_PERIOD};
use collector::{
    BuildIdEntry, CommEvent, EventDescription, PerfEvent, Recording, Sample, SideBandEvent,
    UserStack,
};

/// Linux syscall numbers after which executable mappings may have changed.
const SYS_MMAP: u64 = 9;
const SYS_MPROTECT: u64 = 10;
const SYS_MUNMAP: u64 = 11;
const SYS_MREMAP: u64 = 25;
/// `TASK_COMM_LEN - 1`: the kernel truncates the command name to 15 bytes.
const COMM_MAX: usize = 15;

/// How to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordOptions {
    /// Emit a sample every `period` taken branches (`perf record -c`).
    pub period: u64,
    /// LBR entries per sample (1..=32).
    pub lbr_depth: usize,
    /// Maximum call chain length, IP included (`perf_event_max_stack`).
    pub max_stack: usize,
    /// Run the program with `personality(ADDR_NO_RANDOMIZE)` for reproducible addresses.
    pub disable_aslr: bool,
    /// Run the program with exactly these `NAME=value` entries as its environment; `None`
    /// passes the recorder's own. The environment sits on the program's initial stack, so
    /// its size shifts every stack address and the work the loader and libc do at start:
    /// a fixed environment makes repeated recordings sample the same branches.
    pub environment: Option<Vec<std::ffi::OsString>>,
    /// Stop with an error after this many instructions (a runaway guard).
    pub max_steps: u64,
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            period: DEFAULT_PERIOD,
            lbr_depth: DEFAULT_LBR_DEPTH,
            max_stack: DEFAULT_MAX_STACK,
            disable_aslr: true,
            environment: None,
            max_steps: 2_000_000_000,
        }
    }
}

/// How the traced program ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceeExit {
    /// Exited with this status.
    Exited(i32),
    /// Killed by this signal number.
    Killed(i32),
    /// Still running when [`RecordControl::poll`] asked to stop: the program was killed
    /// and the recording holds what was recorded until then.
    Stopped,
    /// The program did what `record` does not follow (a thread, a fork, a second exec):
    /// it was killed, and the recording holds what was recorded until then. The message
    /// says what it did.
    Refused(String),
}

/// What a session asks its caller while it runs ([`record_with`]).
pub trait RecordControl {
    /// Called every [`POLL_STEPS`] steps with the counters so far; `true` stops the
    /// recording (the program is killed, what was recorded is kept).
    fn poll(&mut self, stats: &RecordStats) -> bool;
    /// Called once the program is started under the recorder, with its pid; the program
    /// is stopped under ptrace and not reaped before this returns.
    fn started(&mut self, _pid: i32) {}
}

/// Steps between two [`RecordControl::poll`] calls (a few tens of milliseconds at the
/// recorder's speed).
pub const POLL_STEPS: u64 = 1024;

/// A control that never stops and reports nothing.
struct Unattended;

impl RecordControl for Unattended {
    fn poll(&mut self, _: &RecordStats) -> bool {
        false
    }
}

/// Counters of a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordStats {
    /// Instructions executed.
    pub steps: u64,
    /// Taken near branches.
    pub taken_branches: u64,
    /// Samples emitted.
    pub samples: u64,
    /// Wall time of the traced run.
    pub wall: Duration,
}

impl RecordStats {
    /// Single steps per second of wall time.
    pub fn steps_per_sec(&self) -> f64 {
        let secs = self.wall.as_secs_f64();
        if secs > 0.0 {
            self.steps as f64 / secs
        } else {
            0.0
        }
    }
}

/// Everything one session produced.
#[derive(Clone, Debug)]
pub struct RecordOutcome {
    /// Side-band events and samples, ready for the perf.data and perf script writers.
    pub recording: Recording,
    /// Exact execution counts.
    pub truth: GroundTruth,
    /// Counters.
    pub stats: RecordStats,
    /// How the program ended.
    pub exit: TraceeExit,
}

/// One executable mapping seen during the run, with what the truth needs.
struct KnownImage {
    entry: MapsEntry,
    facts: ElfFacts,
}

/// Mutable state of a session.
struct Session<'a> {
    tracee: Tracee,
    options: &'a RecordOptions,
    pid: i32,
    events: Vec<PerfEvent>,
    build_ids: Vec<BuildIdEntry>,
    /// Every executable mapping ever reported (identity = the whole maps line).
    seen: HashSet<MapsEntry>,
    images: Vec<KnownImage>,
    /// Current executable ranges, for the "target outside every mapping" check.
    exec_ranges: Vec<(u64, u64)>,
    facts_cache: HashMap<(String, u64), ElfFacts>,
    decoded: HashMap<u64, DecodedInstruction>,
    lbr: LbrRing,
    instructions: HashMap<u64, u64>,
    edges: HashMap<(u64, u64), u64>,
    steps: u64,
    taken: u64,
    samples: u64,
}

/// Records `args[0]` (resolved like `execvp`) with `args[1..]` until it exits.
pub fn record(args: &[String], options: &RecordOptions) -> Result<RecordOutcome, RecorderError> {
    record_with(args, options, &mut Unattended)
}

/// [`record`], asking `control` every [`POLL_STEPS`] steps whether to stop (then the
/// program is killed and the outcome, [`TraceeExit::Stopped`], holds what was recorded).
pub fn record_with(
    args: &[String],
    options: &RecordOptions,
    control: &mut dyn RecordControl,
) -> Result<RecordOutcome, RecorderError> {
    validate(options)?;
    let program = args
        .first()
        .ok_or_else(|| RecorderError::InvalidOption("no program given".into()))?;
    let path = resolve_program(program)?;
    let started = Instant::now();
    let tracee = Tracee::spawn(
        &path,
        args,
        options.environment.as_deref(),
        options.disable_aslr,
    )?;
    let pid = tracee.pid();
    // The user code segment selector of a 32-bit (compat mode) process is 0x23; 64-bit
    // code runs with 0x33.
    if tracee.regs()?.cs == 0x23 {
        return Err(RecorderError::Not64Bit {
            program: path.display().to_string(),
        });
    }
    control.started(pid);
    let mut session = Session {
        tracee,
        options,
        pid,
        events: Vec::new(),
        build_ids: Vec::new(),
        seen: HashSet::new(),
        images: Vec::new(),
        exec_ranges: Vec::new(),
        facts_cache: HashMap::new(),
        decoded: HashMap::new(),
        lbr: LbrRing::new(options.lbr_depth),
        instructions: HashMap::new(),
        edges: HashMap::new(),
        steps: 0,
        taken: 0,
        samples: 0,
    };
    session
        .events
        .push(PerfEvent::SideBand(SideBandEvent::Comm(CommEvent {
            pid: pid as u32,
            tid: pid as u32,
            comm: comm_name(&path),
            exec: true,
        })));
    session.refresh_maps()?;
    let exit = match session.run(started, control) {
        Ok(exit) => exit,
        // A program killed from outside between two ptrace calls (`record`'s stop of a
        // program waiting in a system call): the failed call is the kill's, and what was
        // recorded until then is kept.
        Err(e) => match session.tracee.killed_by() {
            Some(sig) => TraceeExit::Killed(sig as i32),
            None => return Err(e),
        },
    };
    let stats = RecordStats {
        steps: session.steps,
        taken_branches: session.taken,
        samples: session.samples,
        wall: started.elapsed(),
    };
    Ok(session.finish(args, stats, exit))
}

/// What `record` says of a program that did what it does not follow, with what to do.
fn unsupported_message(e: &RecorderError) -> String {
    let hint = match e {
        RecorderError::Unsupported {
            what: "called exec again",
            ..
        } => {
            "; a `#!` script run through `env` or a wrapper execs its interpreter: record \
             the interpreter or program itself (`record -- /usr/bin/python3 script.py`)"
        }
        _ => "; record a single-threaded program that does not fork",
    };
    format!("{e}{hint}")
}

fn validate(options: &RecordOptions) -> Result<(), RecorderError> {
    if options.period == 0 {
        return Err(RecorderError::InvalidOption(
            "--period must be at least 1".into(),
        ));
    }
    if options.lbr_depth == 0 || options.lbr_depth > MAX_LBR_DEPTH {
        return Err(RecorderError::InvalidOption(format!(
            "--lbr-depth must be 1..={MAX_LBR_DEPTH}"
        )));
    }
    Ok(())
}

/// The kernel's `comm` after exec: the file name, truncated to 15 bytes.
fn comm_name(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut end = name.len().min(COMM_MAX);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

impl Session<'_> {
    fn run(
        &mut self,
        started: Instant,
        control: &mut dyn RecordControl,
    ) -> Result<TraceeExit, RecorderError> {
        let mut regs = self.tracee.regs()?;
        // Single steps taken (a `rep` instruction's elements included): what polls and the
        // step limit count, so a long `rep movsb` neither skips them nor repeats a poll.
        let mut stepped: u64 = 0;
        loop {
            stepped += 1;
            if stepped.is_multiple_of(POLL_STEPS) {
                let stats = RecordStats {
                    steps: self.steps,
                    taken_branches: self.taken,
                    samples: self.samples,
                    wall: started.elapsed(),
                };
                if control.poll(&stats) {
                    return Ok(TraceeExit::Stopped);
                }
            }
            if stepped > self.options.max_steps {
                return Err(RecorderError::LimitExceeded {
                    what: "steps",
                    value: stepped,
                    max: self.options.max_steps,
                });
            }
            let ip = regs.rip;
            let insn = self.decode(ip)?;
            let syscall_nr = regs.rax;
            let outcome = match self.tracee.step() {
                Ok(outcome) => outcome,
                Err(e @ RecorderError::Unsupported { .. }) => {
                    return Ok(TraceeExit::Refused(unsupported_message(&e)));
                }
                Err(e) => return Err(e),
            };
            match outcome {
                StepOutcome::Stepped => {}
                StepOutcome::Signal(_) => {
                    // The signal is delivered with the next step, whose stop is at the
                    // handler (or the process dies). That transfer is not a branch and is
                    // not counted. The instruction executed when the IP moved past it (an
                    // `int3`, a system call that signalled the program itself).
                    if self.tracee.regs()?.rip != ip {
                        self.count_instruction(ip);
                    }
                    match self.tracee.step()? {
                        StepOutcome::Exited(code) => return Ok(TraceeExit::Exited(code)),
                        StepOutcome::Killed(sig) => return Ok(TraceeExit::Killed(sig as i32)),
                        _ => {}
                    }
                    regs = self.tracee.regs()?;
                    continue;
                }
                StepOutcome::Exited(code) => {
                    self.count_instruction(ip);
                    return Ok(TraceeExit::Exited(code));
                }
                StepOutcome::Killed(sig) => {
                    self.count_instruction(ip);
                    return Ok(TraceeExit::Killed(sig as i32));
                }
            }
            regs = self.tracee.regs()?;
            let next = regs.rip;
            if insn.repeats && next == ip {
                // One element of a `rep` string instruction: the instruction is counted
                // (a step, an execution) once, when its last element moves the IP past it.
                continue;
            }
            self.count_instruction(ip);
            if insn.kind == BranchKind::NotBranch {
                if insn.is_syscall
                    && matches!(
                        syscall_nr,
                        SYS_MMAP | SYS_MPROTECT | SYS_MUNMAP | SYS_MREMAP
                    )
                {
                    self.refresh_maps()?;
                }
                continue;
            }
            if !insn.is_taken(ip, next) {
                continue;
            }
            self.taken += 1;
            *self.edges.entry((ip, next)).or_insert(0) += 1;
            self.lbr.push(ip, next);
            if !self.exec_ranges.iter().any(|&(s, e)| next >= s && next < e) {
                self.refresh_maps()?;
            }
            if self.taken.is_multiple_of(self.options.period) {
                self.emit_sample(next, regs.rbp, regs.rsp);
            }
        }
    }

    fn count_instruction(&mut self, ip: u64) {
        self.steps += 1;
        *self.instructions.entry(ip).or_insert(0) += 1;
    }

    fn decode(&mut self, ip: u64) -> Result<DecodedInstruction, RecorderError> {
        if let Some(d) = self.decoded.get(&ip) {
            return Ok(*d);
        }
        let mut buf = [0u8; MAX_INSTRUCTION_LEN];
        let n = self.tracee.read_memory(ip, &mut buf);
        let d = branch::decode(&buf[..n], ip).ok_or(RecorderError::Decode {
            pid: self.pid,
            addr: ip,
        })?;
        self.decoded.insert(ip, d);
        Ok(d)
    }

    /// Emits a sample at `ip` with the registers after the branch, as the kernel sees them
    /// at the PEBS interrupt: the frame-pointer chain from `bp`, and `PERF_SAMPLE_REGS_USER`
    /// / `PERF_SAMPLE_STACK_USER` (the first [`USER_STACK_BYTES`] at `sp`; fewer when the
    /// stack ends there, as the kernel's `dyn_size`).
    fn emit_sample(&mut self, ip: u64, bp: u64, sp: u64) {
        let tracee = &self.tracee;
        let callchain = user_frame_chain(ip, bp, self.options.max_stack, |fp| {
            let mut buf = [0u8; 16];
            if tracee.read_memory(fp, &mut buf) != 16 {
                return None;
            }
            let next = u64::from_le_bytes(buf[..8].try_into().ok()?);
            let ret = u64::from_le_bytes(buf[8..].try_into().ok()?);
            Some((next, ret))
        });
        let mut top = [0u8; USER_STACK_BYTES as usize];
        let copied = tracee.read_memory(sp, &mut top) / 8;
        let mut user_stack = UserStack {
            ip,
            sp,
            bp,
            len: copied as u8,
            ..UserStack::default()
        };
        for (w, b) in user_stack
            .words
            .iter_mut()
            .zip(top.chunks_exact(8))
            .take(copied)
        {
            *w = u64::from_le_bytes(b.try_into().expect("8"));
        }
        self.samples += 1;
        self.events.push(PerfEvent::Sample(Sample {
            pid: self.pid as u32,
            tid: self.pid as u32,
            time: self.steps,
            ip,
            callchain,
            lbr: self.lbr.snapshot(),
            count: 1,
            user_stack: Some(user_stack),
        }));
    }

    /// Re-reads /proc/PID/maps and emits MMAP2 events for executable mappings not reported yet.
    fn refresh_maps(&mut self) -> Result<(), RecorderError> {
        let maps = read_maps(self.pid)?;
        // [vsyscall] is a fixed kernel gate page, not a VMA: perf never reports it.
        let exec: Vec<MapsEntry> = maps
            .into_iter()
            .filter(|m| m.is_executable() && m.path != "[vsyscall]")
            .collect();
        self.exec_ranges = exec.iter().map(|m| (m.start, m.end)).collect();
        let mut changed = false;
        for entry in exec {
            if self.seen.contains(&entry) {
                continue;
            }
            changed = true;
            let facts = self.facts(&entry);
            let filename = entry.perf_filename();
            if !facts.build_id.is_empty() && !self.build_ids.iter().any(|b| b.filename == filename)
            {
                self.build_ids.push(BuildIdEntry {
                    pid: self.pid,
                    build_id: facts.build_id.clone(),
                    filename,
                });
            }
            self.events.push(PerfEvent::SideBand(SideBandEvent::Mmap2(
                entry.to_mmap2(self.pid, self.pid),
            )));
            self.seen.insert(entry.clone());
            self.images.push(KnownImage { entry, facts });
        }
        if changed {
            // Code may have been replaced at a known address (dlclose + dlopen).
            self.decoded.clear();
        }
        Ok(())
    }

    fn facts(&mut self, entry: &MapsEntry) -> ElfFacts {
        let key = (entry.path.clone(), entry.ino);
        if let Some(f) = self.facts_cache.get(&key) {
            return f.clone();
        }
        let facts = if entry.path == "[vdso]" {
            // The vdso is a whole ELF image in memory (at most a few pages).
            let len = (entry.end - entry.start).min(1 << 20) as usize;
            let mut buf = vec![0u8; len];
            let n = self.tracee.read_memory(entry.start, &mut buf);
            ElfFacts::parse(&buf[..n])
        } else if entry.path.starts_with('/') {
            ElfFacts::read(Path::new(&entry.path)).unwrap_or_default()
        } else {
            ElfFacts::default()
        };
        self.facts_cache.insert(key, facts.clone());
        facts
    }

    fn finish(self, args: &[String], stats: RecordStats, exit: TraceeExit) -> RecordOutcome {
        let mut images: Vec<TruthImage> = Vec::new();
        for img in &self.images {
            let path = img.entry.perf_filename();
            let bias = img.facts.load_bias(img.entry.start, img.entry.offset);
            match images.iter_mut().find(|t| t.path == path) {
                Some(t) => t.ranges.push((img.entry.start, img.entry.end)),
                None => images.push(TruthImage {
                    path,
                    build_id: img.facts.build_id.to_hex(),
                    load_bias: bias,
                    ranges: vec![(img.entry.start, img.entry.end)],
                }),
            }
        }
        let totals = Totals {
            steps: stats.steps,
            taken_branches: stats.taken_branches,
            samples: stats.samples,
            period: self.options.period,
            lbr_depth: self.options.lbr_depth as u64,
        };
        let truth = GroundTruth::build(totals, &images, &self.instructions, &self.edges);
        let recording = Recording {
            event: EventDescription::intel_taken_branches(self.options.period, true),
            build_ids: self.build_ids,
            events: self.events,
            cmdline: args.to_vec(),
        };
        RecordOutcome {
            recording,
            truth,
            stats,
            exit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comm_is_truncated_to_15_bytes() {
        assert_eq!(
            comm_name(Path::new("/x/very_long_program_name")),
            "very_long_progr"
        );
        assert_eq!(comm_name(Path::new("/x/prog")), "prog");
    }

    #[test]
    fn rejects_bad_options() {
        let bad = RecordOptions {
            period: 0,
            ..RecordOptions::default()
        };
        assert!(matches!(
            validate(&bad),
            Err(RecorderError::InvalidOption(_))
        ));
        let bad = RecordOptions {
            lbr_depth: 33,
            ..RecordOptions::default()
        };
        assert!(matches!(
            validate(&bad),
            Err(RecorderError::InvalidOption(_))
        ));
        assert!(validate(&RecordOptions::default()).is_ok());
    }

    #[test]
    fn records_a_system_binary_end_to_end() {
        // /bin/true: a few hundred thousand instructions through ld.so and libc.
        let options = RecordOptions {
            period: 101,
            ..RecordOptions::default()
        };
        let out = record(&["/bin/true".to_string()], &options).unwrap();
        assert_eq!(out.exit, TraceeExit::Exited(0));
        assert!(out.stats.steps > 1000);
        assert_eq!(out.stats.samples, out.stats.taken_branches / 101);
        let samples: Vec<&Sample> = out
            .recording
            .events
            .iter()
            .filter_map(|e| {
                if let PerfEvent::Sample(s) = e {
                    Some(s)
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(samples.len() as u64, out.stats.samples);
        for s in &samples {
            // PEBS on a taken-branch event: the IP is the target of the newest LBR entry.
            assert_eq!(s.lbr[0].to, s.ip);
            assert_eq!(s.callchain[0], s.ip);
            assert_eq!(s.lbr.len(), 32);
        }
        // COMM first, then the exec-time mappings: the program, ld.so and the vdso.
        assert!(
            matches!(&out.recording.events[0], PerfEvent::SideBand(SideBandEvent::Comm(c)) if c.comm == "true" && c.exec)
        );
        let names: Vec<String> = out
            .recording
            .events
            .iter()
            .filter_map(|e| {
                if let PerfEvent::SideBand(SideBandEvent::Mmap2(m)) = e {
                    Some(m.filename.clone())
                } else {
                    None
                }
            })
            .collect();
        assert!(names.iter().any(|n| n.ends_with("/true")), "{names:?}");
        assert!(names.iter().any(|n| n.contains("ld-linux")), "{names:?}");
        assert!(names.iter().any(|n| n == "[vdso]"), "{names:?}");
        assert!(names.iter().any(|n| n.contains("libc.so")), "{names:?}");
        // Every executed instruction is accounted for in the truth.
        let total: u64 = out
            .truth
            .binaries
            .iter()
            .flat_map(|b| b.instructions.values())
            .sum::<u64>()
            + out.truth.unmapped.instructions.values().sum::<u64>();
        assert_eq!(total, out.stats.steps);
        let edges: u64 = out
            .truth
            .binaries
            .iter()
            .flat_map(|b| b.branches.iter().map(|e| e.count))
            .sum::<u64>()
            + out
                .truth
                .unmapped
                .branches
                .iter()
                .map(|e| e.count)
                .sum::<u64>();
        assert_eq!(edges, out.stats.taken_branches);
    }
}

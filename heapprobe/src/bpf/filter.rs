//! [`ByteFilter`]: byte sampling in the kernel, before a probe hit becomes a perf record.
//!
//! The program, per probe event (BPF_PROG_TYPE_KPROBE, context `struct pt_regs *`):
//!
//! 1. Gate. A probe is opened per thread, and every one of them whose process matches runs
//!    its program on each hit of any of its threads (each local uprobe event is its own
//!    consumer; `__uprobe_perf_func` runs the program *before* it finds out that only the
//!    event of the running thread, scheduled on this CPU, has somewhere to write). So each
//!    program carries its event's thread id (and CPU, for per-CPU events) and returns 0 at
//!    once for hits that are not its own: exactly one program per hit goes on.
//! 2. Size. From the probe's registers at the function's entry, System V x86-64 argument
//!    registers: `malloc(size)` RDI; `calloc(n, size)` RDI·RSI, saturated at `u64::MAX` on
//!    overflow (`AllocFn::size` does the same); `realloc(p, size)` RSI. 0 counts as 1.
//!    `struct pt_regs` offsets (arch/x86/include/uapi/asm/ptrace.h, x86-64: r15, r14, r13,
//!    r12, rbp, rbx, r11, r10, r9, r8, rax, rcx, rdx, rsi, rdi, ... each 8 bytes): RSI 104,
//!    RDI 112, RAX 80.
//! 3. Countdown. The CPU's [`FilterState`] (a one-entry `BPF_MAP_TYPE_PERCPU_ARRAY`; the
//!    program runs with preemption disabled) holds the bytes left before the next sample.
//!    While `size ≤ countdown` it subtracts and returns 0 (no record). Otherwise the call is
//!    sampled: the countdown is re-armed with a fresh draw from the exponential table
//!    ([`super::quantiles`]) and the program returns 1 (the kernel writes the record).
//!
//! This is the law of [`crate::ByteSampler`] (the tcmalloc sampler: a countdown
//! drawn from Exp(mean `I`), sampled when an allocation crosses it, re-drawn after): with a
//! real countdown `c` and integer sizes, `size > c` ⇔ `size > ⌊c⌋`, so the integer
//! countdown decides the same; the draws are the table's stratum means (mean exactly `I`).
//! An allocation of `s` bytes is thus kept with probability ≈ `1 − exp(−s/I)` and
//! [`crate::unsampling_weight`] stays its weight. The per-CPU counters (calls,
//! bytes, samples) give the calls user space no longer sees.

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::insn::{helper, AluOp, Asm, Insn, JmpOp, Reg};
use super::quantiles::{exponential_quantiles, QUANTILES};
use super::sys::{
    attach_to_perf_event, map_create, map_lookup, map_update, possible_cpus, prog_load,
    BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_PERCPU_ARRAY, BPF_PROG_TYPE_KPROBE,
};
use super::BpfError;
use crate::probe::{AllocFn, ProbeKind};
use crate::sampler::xorshift64_star;

/// `offsetof(struct pt_regs, si)` on x86-64.
pub const PT_REGS_RSI: i16 = 104;
/// `offsetof(struct pt_regs, di)` on x86-64.
pub const PT_REGS_RDI: i16 = 112;
/// `offsetof(struct pt_regs, ax)` on x86-64 (the return value at a uretprobe).
pub const PT_REGS_RAX: i16 = 80;
/// The program's license. None of the helpers used is GPL-only
/// (`bpf_map_lookup_elem`, `bpf_get_prandom_u32`, `bpf_get_smp_processor_id`,
/// `bpf_get_current_pid_tgid`), so the workspace's license is declared.
pub const LICENSE: &CStr = c"Apache-2.0";

/// One CPU's entry of the state map: four u64, in this order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterState {
    /// Bytes left before the next sample (offset 0).
    pub countdown: u64,
    /// Calls that reached the countdown (offset 8).
    pub calls: u64,
    /// Their bytes, wrapping (offset 16).
    pub bytes: u64,
    /// Calls sampled (offset 24).
    pub samples: u64,
}

/// Bytes of a [`FilterState`].
pub const STATE_BYTES: usize = 32;
const OFF_COUNTDOWN: i16 = 0;
const OFF_CALLS: i16 = 8;
const OFF_BYTES: i16 = 16;
const OFF_SAMPLES: i16 = 24;

impl FilterState {
    fn to_bytes(self) -> [u8; STATE_BYTES] {
        let mut b = [0u8; STATE_BYTES];
        for (i, v) in [self.countdown, self.calls, self.bytes, self.samples]
            .into_iter()
            .enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    fn from_bytes(b: &[u8]) -> FilterState {
        let at = |i: usize| {
            b.get(i * 8..i * 8 + 8)
                .map_or(0, |s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
        };
        FilterState {
            countdown: at(0),
            calls: at(1),
            bytes: at(2),
            samples: at(3),
        }
    }
}

/// Counters summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterCounters {
    /// Probe hits of the sampled threads (sampled or not).
    pub calls: u64,
    /// Bytes they requested (wrapping sum).
    pub bytes: u64,
    /// Hits the program let through (records written).
    pub samples: u64,
}

/// The program attached to the probe of `function` opened for thread `tid` (on `cpu`,
/// for a per-CPU event; `None` for a per-thread event on any CPU); `state` and `quantiles`
/// are the map fds.
///
/// With `marks` (free matching), a sampled call also marks its thread in that hash map
/// (key `bpf_get_current_pid_tgid()`), for [`return_program`].
pub fn filter_program(
    function: AllocFn,
    cpu: Option<u32>,
    tid: u32,
    state: i32,
    quantiles: i32,
    marks: Option<i32>,
) -> Result<Vec<Insn>, BpfError> {
    use Reg::*;
    let mut a = Asm::new();
    let (drop, sized, sample, keep) = (a.label(), a.label(), a.label(), a.label());
    a.push([Insn::mov64_reg(R6, R1)]);
    // 1. Only the event of this thread (and CPU).
    if let Some(cpu) = cpu {
        a.push([Insn::call(helper::GET_SMP_PROCESSOR_ID)]);
        a.jump(Insn::jmp_imm(JmpOp::Jne, R0, cpu as i32, 0), drop);
    }
    a.push([
        Insn::call(helper::GET_CURRENT_PID_TGID),
        Insn::alu64_imm(AluOp::Lsh, R0, 32),
        Insn::alu64_imm(AluOp::Rsh, R0, 32),
    ]);
    a.jump(Insn::jmp_imm(JmpOp::Jne, R0, tid as i32, 0), drop);
    // 2. The size, in R7.
    match function {
        AllocFn::Malloc => {
            a.push([Insn::ldx_dw(R7, R6, PT_REGS_RDI)]);
        }
        AllocFn::Realloc => {
            a.push([Insn::ldx_dw(R7, R6, PT_REGS_RSI)]);
        }
        AllocFn::Calloc => {
            let (nonzero, overflow) = (a.label(), a.label());
            a.push([
                Insn::ldx_dw(R7, R6, PT_REGS_RDI),
                Insn::ldx_dw(R2, R6, PT_REGS_RSI),
            ]);
            a.jump(Insn::jmp_imm(JmpOp::Jne, R2, 0, 0), nonzero);
            a.push([Insn::mov64_imm(R7, 0)]);
            a.jump(Insn::ja(0), sized);
            a.bind(nonzero);
            // n·size overflows iff n > u64::MAX / size.
            a.push([Insn::mov64_imm(R3, -1), Insn::alu64_reg(AluOp::Div, R3, R2)]);
            a.jump(Insn::jmp_reg(JmpOp::Jgt, R7, R3, 0), overflow);
            a.push([Insn::alu64_reg(AluOp::Mul, R7, R2)]);
            a.jump(Insn::ja(0), sized);
            a.bind(overflow);
            a.push([Insn::mov64_imm(R7, -1)]);
        }
    }
    a.bind(sized);
    let nonzero_size = a.label();
    a.jump(Insn::jmp_imm(JmpOp::Jne, R7, 0, 0), nonzero_size);
    a.push([Insn::mov64_imm(R7, 1)]);
    a.bind(nonzero_size);
    // 3. This CPU's state, in R8.
    a.push([
        Insn::st_w(R10, -4, 0),
        Insn::mov64_reg(R2, R10),
        Insn::alu64_imm(AluOp::Add, R2, -4),
    ]);
    a.push(Insn::ld_map_fd(R1, state));
    a.push([Insn::call(helper::MAP_LOOKUP_ELEM)]);
    a.jump(Insn::jmp_imm(JmpOp::Jeq, R0, 0, 0), drop);
    a.push([
        Insn::mov64_reg(R8, R0),
        Insn::ldx_dw(R1, R8, OFF_CALLS),
        Insn::alu64_imm(AluOp::Add, R1, 1),
        Insn::stx_dw(R8, OFF_CALLS, R1),
        Insn::ldx_dw(R1, R8, OFF_BYTES),
        Insn::alu64_reg(AluOp::Add, R1, R7),
        Insn::stx_dw(R8, OFF_BYTES, R1),
        Insn::ldx_dw(R1, R8, OFF_COUNTDOWN),
    ]);
    a.jump(Insn::jmp_reg(JmpOp::Jgt, R7, R1, 0), sample);
    a.push([
        Insn::alu64_reg(AluOp::Sub, R1, R7),
        Insn::stx_dw(R8, OFF_COUNTDOWN, R1),
    ]);
    a.bind(drop);
    a.push([Insn::mov64_imm(R0, 0), Insn::exit()]);
    // Sampled: re-arm with table[prandom & (N − 1)].
    a.bind(sample);
    a.push([
        Insn::call(helper::GET_PRANDOM_U32),
        Insn::alu64_imm(AluOp::And, R0, QUANTILES as i32 - 1),
        Insn::stx_w(R10, -8, R0),
        Insn::mov64_reg(R2, R10),
        Insn::alu64_imm(AluOp::Add, R2, -8),
    ]);
    a.push(Insn::ld_map_fd(R1, quantiles));
    a.push([Insn::call(helper::MAP_LOOKUP_ELEM)]);
    a.jump(Insn::jmp_imm(JmpOp::Jeq, R0, 0, 0), keep);
    a.push([Insn::ldx_dw(R1, R0, 0), Insn::stx_dw(R8, OFF_COUNTDOWN, R1)]);
    a.bind(keep);
    a.push([
        Insn::ldx_dw(R1, R8, OFF_SAMPLES),
        Insn::alu64_imm(AluOp::Add, R1, 1),
        Insn::stx_dw(R8, OFF_SAMPLES, R1),
    ]);
    if let Some(marks) = marks {
        // marks[pid_tgid] = 1 (a full map leaves the call unmatched, never unsampled).
        a.push([
            Insn::call(helper::GET_CURRENT_PID_TGID),
            Insn::stx_dw(R10, -16, R0),
            Insn::st_dw(R10, -24, 1),
            Insn::mov64_reg(R2, R10),
            Insn::alu64_imm(AluOp::Add, R2, -16),
            Insn::mov64_reg(R3, R10),
            Insn::alu64_imm(AluOp::Add, R3, -24),
            Insn::mov64_imm(R4, 0),
        ]);
        a.push(Insn::ld_map_fd(R1, marks));
        a.push([Insn::call(helper::MAP_UPDATE_ELEM)]);
    }
    a.push([Insn::mov64_imm(R0, 1), Insn::exit()]);
    a.finish().map_err(BpfError::Asm)
}

/// `r0 = tid of the current task; if r0 != tid goto drop`, with the full
/// `pid_tgid` kept in R7.
fn thread_gate(a: &mut Asm, tid: u32, drop: super::insn::Label) {
    use Reg::*;
    a.push([
        Insn::call(helper::GET_CURRENT_PID_TGID),
        Insn::mov64_reg(R7, R0),
        Insn::alu64_imm(AluOp::Lsh, R0, 32),
        Insn::alu64_imm(AluOp::Rsh, R0, 32),
    ]);
    a.jump(Insn::jmp_imm(JmpOp::Jne, R0, tid as i32, 0), drop);
}

/// The program of an allocation function's uretprobe for thread `tid`: only when the
/// thread is marked (its call was sampled) it unmarks it, adds the returned pointer (AX;
/// not NULL) to `live`, and returns 1 (a record with the pointer). Other returns write
/// nothing.
pub fn return_program(tid: u32, marks: i32, live: i32) -> Result<Vec<Insn>, BpfError> {
    use Reg::*;
    let mut a = Asm::new();
    let (drop, keep) = (a.label(), a.label());
    a.push([Insn::mov64_reg(R6, R1)]);
    thread_gate(&mut a, tid, drop);
    a.push([
        Insn::stx_dw(R10, -8, R7),
        Insn::mov64_reg(R2, R10),
        Insn::alu64_imm(AluOp::Add, R2, -8),
    ]);
    a.push(Insn::ld_map_fd(R1, marks));
    a.push([Insn::call(helper::MAP_LOOKUP_ELEM)]);
    a.jump(Insn::jmp_imm(JmpOp::Jeq, R0, 0, 0), drop);
    a.push([
        Insn::mov64_reg(R2, R10),
        Insn::alu64_imm(AluOp::Add, R2, -8),
    ]);
    a.push(Insn::ld_map_fd(R1, marks));
    a.push([
        Insn::call(helper::MAP_DELETE_ELEM),
        Insn::ldx_dw(R7, R6, PT_REGS_RAX),
    ]);
    a.jump(Insn::jmp_imm(JmpOp::Jeq, R7, 0, 0), keep);
    a.push([
        Insn::stx_dw(R10, -16, R7),
        Insn::st_dw(R10, -24, 0),
        Insn::mov64_reg(R2, R10),
        Insn::alu64_imm(AluOp::Add, R2, -16),
        Insn::mov64_reg(R3, R10),
        Insn::alu64_imm(AluOp::Add, R3, -24),
        Insn::mov64_imm(R4, 0),
    ]);
    a.push(Insn::ld_map_fd(R1, live));
    a.push([Insn::call(helper::MAP_UPDATE_ELEM)]);
    a.bind(keep);
    a.push([Insn::mov64_imm(R0, 1), Insn::exit()]);
    a.bind(drop);
    a.push([Insn::mov64_imm(R0, 0), Insn::exit()]);
    a.finish().map_err(BpfError::Asm)
}

/// The program of `free`'s entry for thread `tid`: only when the argument (RDI) is a
/// live sampled pointer it removes it from `live` and returns 1 (a record).
pub fn free_program(tid: u32, live: i32) -> Result<Vec<Insn>, BpfError> {
    use Reg::*;
    let mut a = Asm::new();
    let drop = a.label();
    a.push([Insn::mov64_reg(R6, R1)]);
    thread_gate(&mut a, tid, drop);
    a.push([Insn::ldx_dw(R7, R6, PT_REGS_RDI)]);
    a.jump(Insn::jmp_imm(JmpOp::Jeq, R7, 0, 0), drop);
    a.push([
        Insn::stx_dw(R10, -8, R7),
        Insn::mov64_reg(R2, R10),
        Insn::alu64_imm(AluOp::Add, R2, -8),
    ]);
    a.push(Insn::ld_map_fd(R1, live));
    a.push([Insn::call(helper::MAP_LOOKUP_ELEM)]);
    a.jump(Insn::jmp_imm(JmpOp::Jeq, R0, 0, 0), drop);
    a.push([
        Insn::mov64_reg(R2, R10),
        Insn::alu64_imm(AluOp::Add, R2, -8),
    ]);
    a.push(Insn::ld_map_fd(R1, live));
    a.push([
        Insn::call(helper::MAP_DELETE_ELEM),
        Insn::mov64_imm(R0, 1),
        Insn::exit(),
    ]);
    a.bind(drop);
    a.push([Insn::mov64_imm(R0, 0), Insn::exit()]);
    a.finish().map_err(BpfError::Asm)
}

/// Entries of the map of live sampled pointers (free matching): at the default 512 KiB
/// interval, 32 GiB of live sampled heap. Pointers beyond it stay unmatched (counted as
/// in use).
pub const LIVE_POINTERS: u32 = 1 << 16;
/// Entries of the map of marked threads (a sampled call waiting for its return).
pub const MARKED_THREADS: u32 = 4096;

/// The hash maps of free matching.
#[derive(Debug)]
struct LifetimeMaps {
    marks: OwnedFd,
    live: OwnedFd,
}

/// The maps and programs of the in-kernel byte sampler; see the module docs.
#[derive(Debug)]
pub struct ByteFilter {
    interval: u64,
    state: OwnedFd,
    quantiles: OwnedFd,
    lifetimes: Option<LifetimeMaps>,
    possible_cpus: usize,
    programs: Vec<OwnedFd>,
}

impl ByteFilter {
    /// Creates the maps (the exponential table for mean `interval` > 0 bytes, each CPU's
    /// countdown armed with a draw from it, generator seeded with `seed`; with
    /// `lifetimes`, the hash maps of free matching) and checks that the kernel accepts the
    /// programs (a refusal returns the verifier's log).
    pub fn new(interval: u64, seed: u64, lifetimes: bool) -> Result<ByteFilter, BpfError> {
        if interval == 0 {
            return Err(BpfError::ZeroInterval);
        }
        let possible_cpus = possible_cpus()?;
        let state = map_create(
            BPF_MAP_TYPE_PERCPU_ARRAY,
            4,
            STATE_BYTES as u32,
            1,
            "pgo_heap_state",
        )?;
        let quantiles = map_create(BPF_MAP_TYPE_ARRAY, 4, 8, QUANTILES as u32, "pgo_heap_exp")?;
        let table = exponential_quantiles(interval);
        for (k, v) in table.iter().enumerate() {
            map_update(
                quantiles.as_fd(),
                &(k as u32).to_le_bytes(),
                &v.to_le_bytes(),
            )?;
        }
        let mut rng = seed | 1;
        let mut values = Vec::with_capacity(possible_cpus * STATE_BYTES);
        for _ in 0..possible_cpus {
            let countdown = table[(xorshift64_star(&mut rng) >> 52) as usize % QUANTILES];
            values.extend(
                FilterState {
                    countdown,
                    ..FilterState::default()
                }
                .to_bytes(),
            );
        }
        map_update(state.as_fd(), &0u32.to_le_bytes(), &values)?;
        let lifetimes = if lifetimes {
            Some(LifetimeMaps {
                marks: map_create(BPF_MAP_TYPE_HASH, 8, 8, MARKED_THREADS, "pgo_heap_marks")?,
                live: map_create(BPF_MAP_TYPE_HASH, 8, 8, LIVE_POINTERS, "pgo_heap_live")?,
            })
        } else {
            None
        };
        let f = ByteFilter {
            interval,
            state,
            quantiles,
            lifetimes,
            possible_cpus,
            programs: Vec::new(),
        };
        // A verifier refusal surfaces here, before any probe is opened.
        drop(f.load(ProbeKind::Alloc(AllocFn::Calloc), Some(0), 0)?);
        if f.lifetimes.is_some() {
            drop(f.load(ProbeKind::Return(AllocFn::Malloc), None, 0)?);
            drop(f.load(ProbeKind::Free, None, 0)?);
        }
        Ok(f)
    }

    /// True when the free-matching maps exist.
    pub fn has_lifetimes(&self) -> bool {
        self.lifetimes.is_some()
    }

    fn load(&self, kind: ProbeKind, cpu: Option<u32>, tid: u32) -> Result<OwnedFd, BpfError> {
        use std::os::fd::AsRawFd;
        let marks = self.lifetimes.as_ref().map(|l| l.marks.as_raw_fd());
        let live = self.lifetimes.as_ref().map(|l| l.live.as_raw_fd());
        let insns = match (kind, marks, live) {
            (ProbeKind::Alloc(function), _, _) => filter_program(
                function,
                cpu,
                tid,
                self.state.as_raw_fd(),
                self.quantiles.as_raw_fd(),
                marks,
            )?,
            (ProbeKind::Return(_), Some(marks), Some(live)) => return_program(tid, marks, live)?,
            (ProbeKind::Free, _, Some(live)) => free_program(tid, live)?,
            _ => return Err(BpfError::NoLifetimeMaps),
        };
        prog_load(BPF_PROG_TYPE_KPROBE, &insns, LICENSE, "pgo_heap_filter")
    }

    /// Loads the program for the probe `event` of `kind` opened for thread `tid` (on any
    /// CPU) and attaches it (`PERF_EVENT_IOC_SET_BPF`). Return and `free` probes need the
    /// free-matching maps.
    pub fn attach(
        &mut self,
        event: BorrowedFd<'_>,
        kind: ProbeKind,
        tid: u32,
    ) -> Result<(), BpfError> {
        let prog = self.load(kind, None, tid)?;
        attach_to_perf_event(event, prog.as_fd())?;
        self.programs.push(prog);
        Ok(())
    }

    /// The mean sampling interval.
    pub fn interval(&self) -> u64 {
        self.interval
    }

    /// Programs attached.
    pub fn programs(&self) -> usize {
        self.programs.len()
    }

    /// Each CPU's state.
    pub fn states(&self) -> Result<Vec<FilterState>, BpfError> {
        let mut values = vec![0u8; self.possible_cpus * STATE_BYTES];
        map_lookup(self.state.as_fd(), &0u32.to_le_bytes(), &mut values)?;
        Ok(values
            .chunks_exact(STATE_BYTES)
            .map(FilterState::from_bytes)
            .collect())
    }

    /// The counters summed over CPUs.
    pub fn counters(&self) -> Result<FilterCounters, BpfError> {
        Ok(self
            .states()?
            .iter()
            .fold(FilterCounters::default(), |c, s| FilterCounters {
                calls: c.calls + s.calls,
                bytes: c.bytes.wrapping_add(s.bytes),
                samples: c.samples + s.samples,
            }))
    }
}

/// The program's arithmetic in Rust (one CPU, the gate passed), for tests of the sampling
/// law: `draw(k)` is `table[k]` for a random `k`.
#[derive(Clone, Debug)]
pub struct FilterModel {
    table: Vec<u64>,
    rng: u64,
    /// The CPU's state.
    pub state: FilterState,
}

impl FilterModel {
    /// A model with the table for `interval`, seeded.
    pub fn new(interval: u64, seed: u64) -> FilterModel {
        let table = exponential_quantiles(interval);
        let mut rng = seed | 1;
        let countdown = table[(xorshift64_star(&mut rng) >> 52) as usize % QUANTILES];
        FilterModel {
            table,
            rng,
            state: FilterState {
                countdown,
                ..FilterState::default()
            },
        }
    }

    /// What the program returns for a call of `size` bytes.
    pub fn hit(&mut self, size: u64) -> bool {
        let size = size.max(1);
        self.state.calls += 1;
        self.state.bytes = self.state.bytes.wrapping_add(size);
        if size <= self.state.countdown {
            self.state.countdown -= size;
            return false;
        }
        let k = (xorshift64_star(&mut self.rng) >> 32) as usize & (QUANTILES - 1);
        self.state.countdown = self.table[k];
        self.state.samples += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_reads_the_size_registers_and_resolves_its_jumps() {
        let m = filter_program(AllocFn::Malloc, Some(1), 4242, 7, 8, None).unwrap();
        let c = filter_program(AllocFn::Calloc, Some(1), 4242, 7, 8, None).unwrap();
        let r = filter_program(AllocFn::Realloc, Some(1), 4242, 7, 8, None).unwrap();
        // calloc has 10 more instructions (RSI load, zero test, overflow test, multiply).
        assert_eq!((m.len(), r.len(), c.len()), (46, 46, 56));
        // Gate constants: `if r0 != 1` and `if r0 != 4242`.
        assert_eq!(m[2].to_bytes(), [0x55, 0x00, m[2].off as u8, 0, 1, 0, 0, 0]);
        assert_eq!(m[6].imm, 4242);
        // r7 = *(u64 *)(r6 + 112) for malloc, + 104 for realloc.
        assert_eq!(m[7].to_bytes(), [0x79, 0x67, 112, 0, 0, 0, 0, 0]);
        assert_eq!(r[7].to_bytes(), [0x79, 0x67, 104, 0, 0, 0, 0, 0]);
        assert_eq!((c[7].off, c[8].off), (112, 104));
        // Both map fds are loaded with BPF_PSEUDO_MAP_FD.
        let maps: Vec<i32> = m
            .iter()
            .filter(|i| i.code == 0x18)
            .map(|i| {
                assert_eq!(i.src, 1);
                i.imm
            })
            .collect();
        assert_eq!(maps, [7, 8]);
        // Every jump lands inside the program; both exits return a constant.
        for p in [&m, &c, &r] {
            for (at, i) in p.iter().enumerate() {
                if i.code & 0x07 == 0x05 && i.code != 0x85 && i.code != 0x95 {
                    let to = at as i64 + 1 + i.off as i64;
                    assert!((0..p.len() as i64).contains(&to), "{at}: {i:?}");
                }
            }
            assert_eq!(p.iter().filter(|i| i.code == 0x95).count(), 2);
        }
        assert_eq!(m[m.len() - 2], Insn::mov64_imm(Reg::R0, 1));
        // Without a CPU: no processor-id call and its test, the thread gate first.
        let any = filter_program(AllocFn::Malloc, None, 4242, 7, 8, None).unwrap();
        assert_eq!(any.len(), 44);
        assert_eq!(any[1], Insn::call(helper::GET_CURRENT_PID_TGID));
        assert_eq!(any[4].imm, 4242);
        // With free matching the sampled path also marks the thread in map 9.
        let marked = filter_program(AllocFn::Malloc, None, 4242, 7, 8, Some(9)).unwrap();
        assert_eq!(marked.len(), 44 + 11);
        assert_eq!(marked[marked.len() - 5].imm, 9);
        assert_eq!(
            marked[marked.len() - 3],
            Insn::call(helper::MAP_UPDATE_ELEM)
        );
    }

    #[test]
    fn lifetime_programs_read_ax_at_return_and_di_at_free() {
        let r = return_program(4242, 9, 10).unwrap();
        // r7 = *(u64 *)(r6 + 80): RAX.
        assert!(r.contains(&Insn::ldx_dw(Reg::R7, Reg::R6, 80)));
        let maps: Vec<i32> = r.iter().filter(|i| i.code == 0x18).map(|i| i.imm).collect();
        assert_eq!(maps, [9, 9, 10]);
        let f = free_program(4242, 10).unwrap();
        assert!(f.contains(&Insn::ldx_dw(Reg::R7, Reg::R6, 112)));
        let maps: Vec<i32> = f.iter().filter(|i| i.code == 0x18).map(|i| i.imm).collect();
        assert_eq!(maps, [10, 10]);
        for p in [&r, &f] {
            assert_eq!(p[5].imm, 4242, "thread gate");
            assert_eq!(p.iter().filter(|i| i.code == 0x95).count(), 2);
        }
    }

    #[test]
    fn model_keeps_the_byte_sampling_law() {
        let mut m = FilterModel::new(64 * 1024, 42);
        crate::sampler::assert_unbiased_at_64_kib(|size| m.hit(size));
        assert_eq!(m.state.calls, 4_080_000);
        assert_eq!(m.state.bytes, 4_000_000 * 64 + 80_000 * 10_000);
        // Samples: Σ p(s) = 4e6·(1 − e^(−64/65536)) + 8e4·(1 − e^(−10000/65536)) ≈ 15223.
        let p = |s: f64| -(-s / 65536.0f64).exp_m1();
        let expect = 4_000_000.0 * p(64.0) + 80_000.0 * p(10_000.0);
        assert!((m.state.samples as f64 / expect - 1.0).abs() < 0.05);
    }

    #[test]
    fn state_bytes_round_trip() {
        let s = FilterState {
            countdown: 1,
            calls: 2,
            bytes: 3,
            samples: 4,
        };
        let b = s.to_bytes();
        assert_eq!(b[8], 2);
        assert_eq!(FilterState::from_bytes(&b), s);
    }

    #[test]
    fn loads_and_attaches_where_the_kernel_allows() {
        // Root with BPF here; elsewhere the refusal must be an error, never a panic.
        match ByteFilter::new(512 * 1024, 1, true) {
            Ok(f) => {
                let states = f.states().unwrap();
                assert!(!states.is_empty());
                assert!(states.iter().all(|s| s.countdown > 0 && s.calls == 0));
                assert_eq!(f.counters().unwrap(), FilterCounters::default());
            }
            Err(e) => eprintln!("BPF unavailable: {e}"),
        }
        assert!(matches!(
            ByteFilter::new(0, 1, false),
            Err(BpfError::ZeroInterval)
        ));
    }
}

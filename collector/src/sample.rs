//! The sample model shared by every input (live rings, perf.data, perf script text, the
//! software recorder) and every consumer (unwinder, exporters).

/// One LBR record: a taken branch from `from` to `to`.
///
/// `flags` is the third u64 of the kernel's `struct perf_branch_entry` verbatim
/// (bit 0 mispred, bit 1 predicted, bit 2 in_tx, bit 3 abort, bits 4..19 cycles,
/// bits 20..23 type, ...), so a record can be written back byte-for-byte.
///
/// `repr(C)`: laid out as the kernel's entry (three native-endian words), so the SAMPLE
/// parser copies a branch stack in one go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(C)]
pub struct LbrEntry {
    /// Address of the branch instruction.
    pub from: u64,
    /// Address the branch went to.
    pub to: u64,
    /// Raw `perf_branch_entry` flag word.
    pub flags: u64,
}

impl LbrEntry {
    /// Bit 0 of the flag word: the branch was mispredicted.
    pub fn mispredicted(&self) -> bool {
        self.flags & 1 != 0
    }
    /// Bit 1 of the flag word: the branch was predicted.
    pub fn predicted(&self) -> bool {
        self.flags & 2 != 0
    }
}

/// One sample: what `PERF_RECORD_SAMPLE` with IP|TID|TIME|CALLCHAIN|BRANCH_STACK carries,
/// in process (AVMA) addresses.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Sample {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// perf clock timestamp in nanoseconds (0 when the input has none).
    pub time: u64,
    /// The sampled instruction pointer.
    pub ip: u64,
    /// User frame-pointer call chain, leaf first: `callchain[0]` is the sampled IP, the rest
    /// are return addresses. `PERF_CONTEXT_*` markers are already removed (as `perf script`
    /// prints it). Empty when the input has no call chains.
    pub callchain: Vec<u64>,
    /// The LBR branch stack, newest branch first. Empty when the input has none.
    pub lbr: Vec<LbrEntry>,
    /// How many identical samples this one stands for (pre-aggregated perf script input
    /// carries a count line; everything else is 1).
    pub count: u64,
    /// The user registers and the top of the user stack when the sample was taken, when
    /// the input carries them (`PERF_SAMPLE_REGS_USER` with ip, sp and bp, and
    /// `PERF_SAMPLE_STACK_USER`): what settles the caller the frame-pointer chain misses
    /// at a prologue or epilogue. `None` for perf script input.
    pub user_stack: Option<UserStack>,
}

impl Sample {
    /// Asks the CPU to bring the sample's branch stack and call chain into the cache: for
    /// a loop over samples to call on the sample after the one it reads (a batch of
    /// parsed samples is larger than the cache nearest the core).
    #[inline]
    pub fn prefetch(&self) {
        crate::prefetch::prefetch_bytes(
            self.lbr.as_ptr().cast(),
            std::mem::size_of_val(self.lbr.as_slice()),
        );
        crate::prefetch::prefetch_bytes(
            self.callchain.as_ptr().cast(),
            std::mem::size_of_val(self.callchain.as_slice()),
        );
    }
}

/// x86-64 `sample_regs_user` bit of bp (`enum perf_event_x86_regs`: `PERF_REG_X86_BP`).
pub const PERF_REG_X86_BP: u32 = 6;
/// x86-64 `sample_regs_user` bit of sp (`PERF_REG_X86_SP`).
pub const PERF_REG_X86_SP: u32 = 7;
/// x86-64 `sample_regs_user` bit of ip (`PERF_REG_X86_IP`).
pub const PERF_REG_X86_IP: u32 = 8;
/// The `sample_regs_user` mask [`UserStack`] needs: bp, sp, ip.
pub const USER_STACK_REGS_MASK: u64 =
    1 << PERF_REG_X86_BP | 1 << PERF_REG_X86_SP | 1 << PERF_REG_X86_IP;
/// Stack words a [`UserStack`] keeps: `[sp]` and `[sp + 8]`, where a return address is
/// at a prologue's first two instructions and after an epilogue's `pop rbp`.
pub const USER_STACK_WORDS: usize = 2;
/// The `sample_stack_user` size (bytes) that fills a [`UserStack`].
pub const USER_STACK_BYTES: u32 = (USER_STACK_WORDS * 8) as u32;

/// User registers and the first words of the user stack at a sample (no allocation: a
/// sample's copy is a few words).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct UserStack {
    /// The user instruction pointer (the interrupted instruction).
    pub ip: u64,
    /// The user stack pointer.
    pub sp: u64,
    /// The user frame pointer (rbp).
    pub bp: u64,
    /// `words[i]` is the 8 bytes at `sp + 8 * i`; the first `len` are valid.
    pub words: [u64; USER_STACK_WORDS],
    /// How many of `words` the kernel could copy (fewer near the top of the stack).
    pub len: u8,
}

impl UserStack {
    /// The stack word at `sp + offset` (`offset` a multiple of 8), when it was copied.
    pub fn word_at(&self, offset: u64) -> Option<u64> {
        if !offset.is_multiple_of(8) {
            return None;
        }
        let i = usize::try_from(offset / 8).ok()?;
        (i < usize::from(self.len)).then(|| self.words[i])
    }

    /// The copied stack bytes as the kernel writes them (`len * 8` bytes from `sp` up).
    pub fn stack_bytes(&self) -> Vec<u8> {
        self.words[..usize::from(self.len)]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect()
    }
}

/// First value of the kernel's `enum perf_callchain_context` markers: every callchain
/// entry at or above this value (`PERF_CONTEXT_MAX` = -4095) is a context marker such as
/// `PERF_CONTEXT_USER` (-512) or `PERF_CONTEXT_KERNEL` (-128), not an address.
pub const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;
/// `PERF_CONTEXT_USER`: the following callchain entries are user-space addresses.
pub const PERF_CONTEXT_USER: u64 = (-512i64) as u64;
/// `PERF_CONTEXT_KERNEL`: the following callchain entries are kernel addresses.
pub const PERF_CONTEXT_KERNEL: u64 = (-128i64) as u64;

//! The sample model shared by every input (live rings, perf.data, perf script text, the
//! software recorder) and every consumer (unwinder, exporters).

/// One LBR record: a taken branch from `from` to `to`.
///
/// `flags` is the third u64 of the kernel's `struct perf_branch_entry` verbatim
/// (bit 0 mispred, bit 1 predicted, bit 2 in_tx, bit 3 abort, bits 4..19 cycles,
/// bits 20..23 type, ...), so a record can be written back byte-for-byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
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
}

/// First value of the kernel's `enum perf_callchain_context` markers: every callchain
/// entry at or above this value (`PERF_CONTEXT_MAX` = -4095) is a context marker such as
/// `PERF_CONTEXT_USER` (-512) or `PERF_CONTEXT_KERNEL` (-128), not an address.
pub const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;
/// `PERF_CONTEXT_USER`: the following callchain entries are user-space addresses.
pub const PERF_CONTEXT_USER: u64 = (-512i64) as u64;
/// `PERF_CONTEXT_KERNEL`: the following callchain entries are kernel addresses.
pub const PERF_CONTEXT_KERNEL: u64 = (-128i64) as u64;

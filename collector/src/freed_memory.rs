//! The memory the process holds beyond what it uses, kept small: large freed blocks and
//! huge pages ([`limit_resident_memory`]), and the heap's free pages on request
//! ([`give_back_freed_memory`]).

/// Blocks of at least this many bytes are their own mappings, and a heap's free top past
/// it is trimmed ([`limit_resident_memory`]).
pub const LARGE_BLOCK_BYTES: usize = 256 << 10;

/// Keeps the resident set near what the process uses (glibc and Linux; nothing elsewhere):
///
/// * large freed blocks go back to the kernel when they are freed (`mallopt`:
///   `M_MMAP_THRESHOLD` and `M_TRIM_THRESHOLD` at [`LARGE_BLOCK_BYTES`]). By default glibc
///   raises its mmap threshold each time a mapped block is freed (up to 32 MiB), after
///   which a phase's large buffers (a part of a perf script, counter tables, a profile's
///   maps) come from the heaps of the threads that used them and stay resident when
///   freed: the next phase's peak then sits on top of them;
/// * no transparent huge pages (`PR_SET_THP_DISABLE`): a file the page cache holds in
///   2 MiB folios (a perf script or a binary just read or written) would otherwise be
///   mapped 2 MiB at a time wherever it is read, instead of the kernel's 64 KiB
///   fault-around, and where huge pages are enabled for all anonymous memory (`always`),
///   a heap arena's 2 MiB page is resident whole however little of it is used.
///
/// Call it at start, before other threads allocate. Children inherit the huge-page flag
/// (through `fork` and `execve`): a command that runs a program clears it there
/// (`pgo-agent record`).
pub fn limit_resident_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets the allocator's parameters, and prctl this process's THP
    // flag; the values are in range.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, LARGE_BLOCK_BYTES as libc::c_int);
        libc::mallopt(libc::M_TRIM_THRESHOLD, LARGE_BLOCK_BYTES as libc::c_int);
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// Returns the heap's free pages to the kernel (glibc's `malloc_trim`; nothing elsewhere).
/// glibc keeps freed pages in the arena of the thread that allocated them: after a phase
/// whose threads freed what they held, the resident set would otherwise stay at that
/// phase's peak, and what the next phase allocates would come on top of it.
pub fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

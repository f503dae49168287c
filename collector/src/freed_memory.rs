//! The heap pages the allocator keeps after they were freed, returned to the kernel:
//! at once for large blocks ([`return_large_frees_at_once`]), and on request for the rest
//! ([`give_back_freed_memory`]).

/// Blocks of at least this many bytes are their own mappings, and a heap's free top past
/// it is trimmed ([`return_large_frees_at_once`]).
pub const LARGE_BLOCK_BYTES: usize = 256 << 10;

/// Makes the allocator give large freed blocks back to the kernel when they are freed
/// (glibc `mallopt`: `M_MMAP_THRESHOLD` and `M_TRIM_THRESHOLD` at [`LARGE_BLOCK_BYTES`];
/// nothing elsewhere). By default glibc raises its mmap threshold each time a mapped block
/// is freed (up to 32 MiB), after which a phase's large buffers (a part of a perf script,
/// counter tables, a profile's maps) come from the heaps of the threads that used them
/// and stay resident when freed: the next phase's peak then sits on top of them. Call it
/// at start, before other threads allocate.
pub fn return_large_frees_at_once() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets the allocator's parameters; the values are in range.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, LARGE_BLOCK_BYTES as libc::c_int);
        libc::mallopt(libc::M_TRIM_THRESHOLD, LARGE_BLOCK_BYTES as libc::c_int);
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

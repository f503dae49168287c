//! [`give_back_freed_memory`]: the heap pages the allocator keeps after they were freed,
//! returned to the kernel.

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

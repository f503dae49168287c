//! [`prefetch_bytes`]: asking the CPU for memory a loop is about to read.

/// Prefetches the cache lines of `len` bytes at `start` (the first 1 KiB of them).
#[inline]
pub fn prefetch_bytes(start: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    for offset in (0..len.min(1024)).step_by(64) {
        // SAFETY: SSE is part of x86_64, and a prefetch is only a hint: it reads nothing
        // into the program and never faults, whatever the address (`wrapping_add` keeps
        // the pointer arithmetic defined).
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                start.wrapping_add(offset).cast(),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, len);
}

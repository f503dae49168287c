//! Reads `perf script -F ip,brstack --show-mmap-events` text (LBR-only and hybrid stack+LBR samples).

//! Writes samples as `perf script -F ip,brstack --show-mmap-events` text with call stacks.

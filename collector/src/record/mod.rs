//! Parsers for the kernel's perf record bodies (SAMPLE, MMAP2, COMM, FORK, EXIT, LOST): one parser per
//! record type, shared by the live ring-buffer path and the perf.data reader.

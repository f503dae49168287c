//! perf.data files: the writer (used by the software recorder) and the reader (linux-perf-data for the
//! container, our own record parsers for the bodies).

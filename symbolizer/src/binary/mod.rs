//! [`ProfiledBinary`]-to-be: an ELF binary loaded for profiling (segments, code, functions), keyed by build id.

//! Format writers and readers: one module per format.

pub mod extbinary;
pub mod flamegraph;
pub mod llvm_text;
pub mod llvm_text_reader;
pub mod memprof_text;
pub mod memprof_yaml;
pub mod pprof;
pub mod unsymbolized;

//! Format writers and readers: one module per format.

pub mod extbinary;
pub mod llvm_text;
pub mod llvm_text_reader;
pub mod unsymbolized;

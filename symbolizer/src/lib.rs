//! # symbolizer — binaries and counters to sample profiles
//!
//! Stage three. It knows binaries: ELF segments and symbols, x86 decoding (it implements the
//! unwinder's [`unwinder::CodeLayout`]), `.pseudo_probe`/`.pseudo_probe_desc`, DWARF lines with
//! inline frames and discriminators. It turns [`unwinder::CounterSet`]s into sample profiles
//! (CS probe-based, CS line-based, flat line-based AutoFDO, flat probe-based) the way
//! llvm-profgen 19 does. Writing them to bytes is the exporter's job.
#![deny(missing_docs)]

pub mod binary;
pub mod dwarf;
pub mod generate;
pub mod probe;
pub mod profile;

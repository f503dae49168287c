//! The conversion: samples and binaries in, a sample profile out, as llvm-profgen 19 does.
//!
//! [`convert`] reads the input of [`ConvertOptions`] (a perf script, a perf.data file, an
//! unsymbolized profile or an LLVM sample profile), counts its samples with the unwinder,
//! generates the profile with the symbolizer and writes it with the exporter's formats.
//! [`print_listing`] is llvm-profgen's `--show-disassembly-only`; [`read_counters`] is the
//! counting alone (what `pgo-agent verify` checks a profile against). Errors are
//! [`ConvertError`]s naming the input; warnings llvm-profgen prints go to stderr as it
//! prints them.
//!
//! The crate knows nothing of command lines: `pgo-agent convert` maps its arguments into
//! [`ConvertOptions`] and prints what comes back.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod binary_loading;
mod conversion;
mod counting;
mod error;
mod event_batches;
mod options;
mod output;
pub mod phase_timer;
mod progress;
pub mod sample_profile;
mod samples;

use std::io::BufWriter;

use symbolizer::ProfiledBinary;
use unwinder::CounterSet;

pub use conversion::convert;
pub use error::{ConvertError, LoadBinaryError};
pub use options::{AddressBase, ConvertOptions, Input, OutputFormat};
pub use phase_timer::PhaseTimer;
pub use sample_profile::read_sample_profile;

/// Reads the input of `options` into counters for `binary`: unsymbolized profiles
/// directly, sample inputs through the unwinder (warnings on stderr).
pub fn read_counters(
    options: &ConvertOptions,
    binary: &ProfiledBinary,
) -> Result<CounterSet, ConvertError> {
    samples::read_counters_while_loading(options, || Ok(binary))
}

/// `--show-disassembly-only`: prints the listing of the binary on stdout (llvm-profgen 19
/// reads no samples and writes no profile then).
pub fn print_listing(options: &ConvertOptions) -> Result<(), ConvertError> {
    let binary = binary_loading::load_for(options, true)?;
    let elf = std::fs::read(&options.binary).map_err(|source| ConvertError::Read {
        path: options.binary.clone(),
        source,
    })?;
    let mut stdout = BufWriter::new(std::io::stdout().lock());
    symbolizer::listing::write_listing(
        &binary,
        &options.binary.display().to_string(),
        &elf,
        &options.listing,
        &mut stdout,
    )?;
    Ok(())
}

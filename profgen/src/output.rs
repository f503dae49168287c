//! Writing the output: the profile in the format asked for, to the output file.

use std::fs::File;
use std::io::{BufWriter, Write};

use symbolizer::profile::SampleProfile;
use symbolizer::ProfiledBinary;

use crate::options::{ConvertOptions, OutputFormat};
use crate::ConvertError;

/// The output file, created (truncated) and buffered; `-` is the standard output (as
/// llvm-profgen's `--output -`).
pub(crate) fn create_output(
    options: &ConvertOptions,
) -> Result<BufWriter<Box<dyn Write>>, ConvertError> {
    if options.output.as_os_str() == "-" {
        return Ok(BufWriter::new(Box::new(std::io::stdout())));
    }
    File::create(&options.output)
        .map(|f| BufWriter::new(Box::new(f) as Box<dyn Write>))
        .map_err(|source| ConvertError::Create {
            path: options.output.clone(),
            source,
        })
}

/// The error of writing the output.
pub(crate) fn write_error(
    options: &ConvertOptions,
) -> impl FnOnce(std::io::Error) -> ConvertError + '_ {
    |source| ConvertError::Write {
        path: options.output.clone(),
        source,
    }
}

/// Writes `profile` in the format `options` ask for, with the profile symbol list of `binary`
/// in an extbinary profile when `--populate-profile-symbol-list` is given.
pub(crate) fn write_profile(
    options: &ConvertOptions,
    binary: &ProfiledBinary,
    profile: &SampleProfile,
    out: &mut dyn Write,
) -> Result<(), ConvertError> {
    let written = match options.format {
        OutputFormat::Text | OutputFormat::Binary => {
            if options.use_md5 {
                eprintln!("warning: -use-md5 is ignored. Specify --format=extbinary to enable it");
            }
            if options.format == OutputFormat::Text {
                exporter::format::llvm_text::write(profile, out)
            } else {
                exporter::format::extbinary::write_raw_binary(profile, out)
            }
        }
        OutputFormat::Extbinary => {
            let symbols = options
                .populate_profile_symbol_list
                .then(|| profile_symbol_list(binary));
            let options = exporter::format::extbinary::WriteOptions {
                symbol_list: symbols.as_ref(),
                use_md5: options.use_md5,
                contextless_summary: options.profile_summary_contextless,
            };
            exporter::format::extbinary::write_with(profile, &options, out)
        }
    };
    written.map_err(write_error(options))
}

/// llvm-profgen 19's `populateSymbolListFromDWARF`: the DWARF name of the function of
/// every function range.
fn profile_symbol_list(binary: &ProfiledBinary) -> std::collections::BTreeSet<String> {
    let functions = binary.function_table().functions();
    binary
        .function_table()
        .ranges()
        .iter()
        .filter_map(|r| functions.get(r.func_index).map(|f| f.name.clone()))
        .collect()
}

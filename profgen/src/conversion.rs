//! The conversion: input → counters (unwound, or read) → profile (generated or
//! post-processed) → output, each phase timed.

use std::io::Write;
use std::path::Path;

use exporter::format::unsymbolized::{line_context_name, read_unsymbolized, write_unsymbolized};
use symbolizer::generate::generate_profile;
use symbolizer::profile::SampleProfile;

use crate::binary_loading::load_for;
use crate::options::{ConvertOptions, Input};
use crate::output::{create_output, write_error, write_profile};
use crate::phase_timer::PhaseTimer;
use crate::samples::{read_counters_while_loading, read_text};
use crate::ConvertError;

/// Converts the input of `options` into the output they ask for, each phase timed by
/// `timer`.
pub fn convert(options: &ConvertOptions, timer: &PhaseTimer) -> Result<(), ConvertError> {
    if let Some(Input::SampleProfile(path)) = &options.input {
        return convert_sample_profile(options, path, timer);
    }
    if let Some(Input::Unsymbolized(path)) = &options.input {
        if convert_line_contexts(options, path, timer)? {
            return Ok(());
        }
    }
    // The binary is loaded on a thread of its own while a perf script is read: reading it
    // does not need the binary, and loading it (decoding, DWARF, probes) left one core idle
    // for its first milliseconds.
    let loaded = std::sync::OnceLock::new();
    let counters = std::thread::scope(|scope| {
        let loading = scope.spawn(|| {
            timer.time("Load binary", || {
                load_for(options, !options.skip_symbolization)
            })
        });
        timer.time("Read and unwind samples", || {
            read_counters_while_loading(options, || {
                let binary = loading
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
                Ok(loaded.get_or_init(|| binary))
            })
        })
    })?;
    // Reading and unwinding freed what they held (a part's samples, the threads' frame
    // tries and counter tables) in their threads' arenas: the profile is made beside it
    // otherwise, and the peak is their sum.
    collector::freed_memory::give_back_freed_memory();
    let binary = loaded.get().expect("read_counters got the binary");
    let address_base = options.address_base.of(binary);
    let mut out = create_output(options)?;
    if options.skip_symbolization {
        let gen_opts = &options.generate;
        let line_context = |key: &[u64]| line_context_name(binary, key, address_base, gen_opts);
        timer
            .time("Write unsymbolized profile", || {
                write_unsymbolized(&mut out, &counters, address_base, Some(&line_context))
            })
            .map_err(|source| ConvertError::WriteUnsymbolized {
                path: options.output.clone(),
                source,
            })?;
    } else {
        if options.listing.pseudo_probes {
            let mut stdout = std::io::stdout().lock();
            symbolizer::listing::write_probe_descs(binary, &mut stdout)
                .and_then(|()| stdout.flush())
                .map_err(ConvertError::WriteProbeDescs)?;
        }
        let profile = timer.time("Generate profile", || {
            generate_profile(binary, &counters, &options.generate)
        });
        show_density(options, &profile);
        timer.time("Write profile", || {
            write_profile(options, binary, &profile, &mut out)
        })?;
        // A conversion is the process's last work: the process's exit returns the memory
        // at once, where dropping would free every map node one by one first.
        std::mem::forget(profile);
    }
    out.flush().map_err(write_error(options))?;
    std::mem::forget(counters);
    std::mem::forget(loaded);
    Ok(())
}

/// llvm-profgen 19's density report of the generated profile (`calculateAndShowDensity`):
/// a warning when it is empty or below `profile_density_threshold`, the figure on stdout
/// with `show_density`.
fn show_density(options: &ConvertOptions, profile: &SampleProfile) {
    let density =
        symbolizer::verify::density::profile_density(profile, options.profile_density_cutoff_hot);
    if density == 0.0 {
        eprintln!(
            "warning: The output profile is empty or the --profile-density-cutoff-hot option \
             is set too low. Please check your command."
        );
    } else if density < options.profile_density_threshold {
        eprintln!(
            "warning: Sample PGO is estimated to optimize better with {:.1}x more samples. \
             Please consider increasing sampling rate or profiling for longer duration to get \
             more samples.",
            options.profile_density_threshold / density
        );
    }
    if options.show_density {
        println!(
            "Functions with density >= {density:.1} account for {:.2}% total sample counts.",
            f64::from(options.profile_density_cutoff_hot) / 10_000.0
        );
    }
}

/// An LLVM sample profile post-processed again for the binary, as llvm-profgen 19's
/// `ProfileGenerator` does for a flat or nested input (the summary's cold threshold for
/// `--trim-cold-profile`, the ambiguous-profile filter, the density report), then written
/// as asked. Flat context-sensitive input (`[main:1 @ foo]` contexts), which llvm-profgen
/// 19 runs through its CS pre-inliner again, is refused.
fn convert_sample_profile(
    options: &ConvertOptions,
    path: &Path,
    timer: &PhaseTimer,
) -> Result<(), ConvertError> {
    let mut profile = timer.time("Read sample profile", || {
        crate::sample_profile::read_sample_profile(path)
    })?;
    if profile.is_cs {
        return Err(ConvertError::FlatCsSampleProfile {
            path: path.to_path_buf(),
        });
    }
    let binary = timer.time("Load binary", || load_for(options, true))?;
    // `ProfileGeneratorBase::create` takes the FS-discriminator mode from the binary.
    profile.is_fs = binary.uses_fs_discriminator();
    timer.time("Generate profile", || {
        symbolizer::generate::post::post_process_flat(&mut profile, &options.generate)
    });
    show_density(options, &profile);
    let mut out = create_output(options)?;
    timer.time("Write profile", || {
        write_profile(options, &binary, &profile, &mut out)
    })?;
    out.flush().map_err(write_error(options))
}

/// Converts an unsymbolized profile whose contexts are symbolized line contexts (`main:7 @
/// quick`: a binary without pseudo probes) as llvm-profgen 19 does: the contexts are
/// taken as they are, the ranges and branches symbolized with the binary. `false` (nothing
/// done) for any other unsymbolized profile.
fn convert_line_contexts(
    options: &ConvertOptions,
    path: &Path,
    timer: &PhaseTimer,
) -> Result<bool, ConvertError> {
    let text = read_text(path)?;
    let unsymbolized_error = |source| ConvertError::Unsymbolized {
        path: path.to_path_buf(),
        source,
    };
    // Line contexts carry no addresses: read with base 0 to see what the file holds.
    let profile = read_unsymbolized(&text, 0).map_err(unsymbolized_error)?;
    if profile.line_contexts().is_none() {
        return Ok(false);
    }
    let binary = timer.time("Load binary", || {
        load_for(options, !options.skip_symbolization)
    })?;
    let base = options.address_base.of(&binary);
    let profile = read_unsymbolized(&text, base).map_err(unsymbolized_error)?;
    let contexts = profile
        .line_contexts()
        .expect("line contexts, as read above");
    let mut out = create_output(options)?;
    if options.skip_symbolization {
        profile
            .write(&mut out, base)
            .map_err(|source| ConvertError::WriteUnsymbolized {
                path: options.output.clone(),
                source,
            })?;
    } else {
        let profile = timer.time("Generate profile", || {
            symbolizer::generate::generate_line_profile_of_contexts(
                &binary,
                &contexts,
                &options.generate,
            )
        });
        show_density(options, &profile);
        timer.time("Write profile", || {
            write_profile(options, &binary, &profile, &mut out)
        })?;
    }
    out.flush().map_err(write_error(options))?;
    Ok(true)
}

//! llvm-profgen's unsymbolized profile (`--skip-symbolization` output, `--unsymbolized-profile` input).

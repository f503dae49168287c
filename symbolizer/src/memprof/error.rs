//! [`MemProfSymbolizeError`]: why a raw MemProf profile could not be symbolized against a
//! binary (LLVM `RawMemProfReader` reports the same conditions).

use std::path::PathBuf;

use crate::error::SymbolizerError;

/// Errors from loading a profiled binary for MemProf or symbolizing a profile with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemProfSymbolizeError {
    /// The binary could not be read or decoded.
    #[error(transparent)]
    Binary(#[from] SymbolizerError),
    /// The binary has no GNU build id, so no profile segment can be matched to it.
    #[error("{}: no build id found in binary", path.display())]
    NoBuildId {
        /// The binary.
        path: PathBuf,
    },
    /// The binary must have exactly one executable `PT_LOAD` (LLVM: "Expect only one executable
    /// load segment in the binary").
    #[error("{}: expected exactly one executable PT_LOAD segment, found {count}", path.display())]
    ExecutableSegments {
        /// The binary.
        path: PathBuf,
        /// How many it has.
        count: usize,
    },
    /// No segment of the profile has the binary's build id.
    #[error("{}: no segment has the build id {binary} of {}; the profile's build ids: {profile}", profile_path.display(), binary_path.display())]
    BuildIdMismatch {
        /// The raw profile.
        profile_path: PathBuf,
        /// The binary.
        binary_path: PathBuf,
        /// The binary's build id (hex).
        binary: String,
        /// The profile's build ids (hex, comma separated).
        profile: String,
    },
}

//! Reading an LLVM sample profile: extbinary (recognised by its magic) or text.

use std::path::Path;

use symbolizer::profile::SampleProfile;

use crate::ConvertError;

/// Reads a sample profile: extbinary (recognised by its magic) or text.
pub fn read_sample_profile(path: &Path) -> Result<SampleProfile, ConvertError> {
    let bytes = std::fs::read(path).map_err(|source| ConvertError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if is_extbinary(&bytes) {
        return exporter::format::extbinary::reader::read(&bytes).map_err(|source| {
            ConvertError::ExtBinaryProfile {
                path: path.to_path_buf(),
                source,
            }
        });
    }
    let text = std::str::from_utf8(&bytes).map_err(|source| ConvertError::NotAProfile {
        path: path.to_path_buf(),
        source,
    })?;
    exporter::format::llvm_text_reader::read(text).map_err(|source| ConvertError::TextProfile {
        path: path.to_path_buf(),
        source,
    })
}

/// True when `bytes` start with the extbinary magic (a ULEB128 `SPMagic(SPF_Ext_Binary)`).
pub fn is_extbinary(bytes: &[u8]) -> bool {
    let mut v = 0u64;
    for (i, &b) in bytes.iter().take(10).enumerate() {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return v == exporter::format::extbinary::section::MAGIC;
        }
    }
    false
}

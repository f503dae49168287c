//! Function GUIDs: `MD5Hash(name)`, the low 64 bits of the MD5 digest read little-endian
//! (LLVM `llvm/Support/MD5.h` `MD5Hash`; `Function::getGUID` of a global name). Pseudo-probe
//! records and `.pseudo_probe_desc` key functions by this value.

use md5::{Digest, Md5};

/// The GUID LLVM gives a function named `name`: the first 8 bytes of MD5(name), little-endian.
pub fn function_guid(name: &str) -> u64 {
    let digest = Md5::digest(name.as_bytes());
    let mut low = [0u8; 8];
    low.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(low)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guids_match_llvm_pseudoprobe_decoding_test() {
        // Values from llvm/test/tools/llvm-profgen/pseudoprobe-decoding.test.
        assert_eq!(function_guid("foo"), 6699318081062747564);
        assert_eq!(function_guid("main"), 15822663052811949562);
        assert_eq!(function_guid("bar"), 16434608426314478903);
    }
}

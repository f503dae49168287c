//! [`BuildId`]: the GNU build id of an ELF file (NT_GNU_BUILD_ID), the key of every
//! per-binary aggregate. Kept as bytes; hex only at the edges (files, HTTP, logs).

use std::fmt;

/// A GNU build id: at most 20 bytes in practice (SHA-1), sometimes 16 (MD5) or 8 (xxhash).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct BuildId(pub Vec<u8>);

impl BuildId {
    /// Lower-case hex, the spelling `perf buildid-list` and `file(1)` use.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses lower- or upper-case hex with an even number of digits.
    pub fn from_hex(s: &str) -> Option<BuildId> {
        let s = s.trim();
        if s.is_empty() || !s.len().is_multiple_of(2) || s.len() > 128 {
            return None;
        }
        let bytes = (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()?;
        Some(BuildId(bytes))
    }

    /// True when no build id is known.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for BuildId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for BuildId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BuildId({})", self.to_hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let id = BuildId::from_hex("00ff1Ab2").unwrap();
        assert_eq!(id.0, vec![0x00, 0xff, 0x1a, 0xb2]);
        assert_eq!(id.to_hex(), "00ff1ab2");
        assert_eq!(BuildId::from_hex("abc"), None);
        assert_eq!(BuildId::from_hex("zz"), None);
    }
}

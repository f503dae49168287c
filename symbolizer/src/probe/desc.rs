//! `.pseudo_probe_desc`: one record per function that has probes (including inlined ones),
//! `u64 GUID, u64 CFG hash, ULEB name length, name bytes` (MCPseudoProbeDecoder
//! `buildGUID2FuncDescMap`). Of duplicate GUIDs the first record wins.

use std::collections::HashMap;

use super::reader::{ByteReader, DecodeError};

/// One function descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeDesc {
    /// MD5-based GUID of the function's (canonical) name.
    pub guid: u64,
    /// The CFG checksum, written to profiles as `!CFGChecksum`.
    pub hash: u64,
    /// The function name.
    pub name: String,
}

/// Largest name length accepted (allocation guard; real names are far shorter).
pub const MAX_NAME_LEN: u64 = 1 << 20;

/// Decodes the whole section into a GUID → descriptor map.
pub fn decode_desc_section(data: &[u8]) -> Result<HashMap<u64, ProbeDesc>, DecodeError> {
    let mut r = ByteReader::new(data);
    let mut map = HashMap::new();
    while !r.is_empty() {
        let guid = r.u64("function GUID")?;
        let hash = r.u64("function hash")?;
        let at = r.offset();
        let len = r.uleb32("name length")?;
        if u64::from(len) > MAX_NAME_LEN {
            return Err(DecodeError {
                offset: at,
                what: "name length over limit",
            });
        }
        let name = String::from_utf8_lossy(r.bytes(len as usize, "name bytes")?).into_owned();
        map.entry(guid).or_insert(ProbeDesc { guid, hash, name });
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[rustfmt::skip]
    const FOO_MAIN: [u8; 42] = [
        0xac, 0xbd, 0x18, 0xdb, 0x4c, 0xc2, 0xf8, 0x5c, // GUID of "foo" = 6699318081062747564
        0xb4, 0xc5, 0x19, 0x5a, 0x20, 0x00, 0x02, 0x00, // hash 563088904013236
        0x03, b'f', b'o', b'o',                          // name
        0xfa, 0xd5, 0x8d, 0xe7, 0x36, 0x64, 0x95, 0xdb, // GUID of "main"
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // hash 1
        0x04, b'm', b'a', b'i', b'n', 0xff,              // name + one stray byte
    ];

    #[test]
    fn decodes_records_and_reports_truncation() {
        assert_eq!(
            crate::guid::function_guid("foo").to_le_bytes(),
            FOO_MAIN[..8]
        );
        assert_eq!(
            crate::guid::function_guid("main").to_le_bytes(),
            FOO_MAIN[20..28]
        );
        let map = decode_desc_section(&FOO_MAIN[..41]).unwrap();
        assert_eq!(
            map[&6699318081062747564],
            ProbeDesc {
                guid: 6699318081062747564,
                hash: 563088904013236,
                name: "foo".into()
            }
        );
        assert_eq!(map[&15822663052811949562].name, "main");
        // The stray byte starts a record whose GUID is truncated.
        assert_eq!(
            decode_desc_section(&FOO_MAIN),
            Err(DecodeError {
                offset: 41,
                what: "function GUID"
            })
        );
        // A name cut short.
        assert_eq!(
            decode_desc_section(&FOO_MAIN[..19]),
            Err(DecodeError {
                offset: 17,
                what: "name bytes"
            })
        );
    }
}

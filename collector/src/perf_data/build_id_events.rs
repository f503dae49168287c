//! Build id events (`struct perf_record_header_build_id`): the entries of a file-mode
//! HEADER_BUILD_ID feature section and the PERF_RECORD_HEADER_BUILD_ID records of a
//! pipe-mode stream have the same layout, `{ perf_event_header; i32 pid; u8 build_id[24];
//! char filename[] }` (36 bytes + the filename).

use std::path::Path;

use super::error::PerfDataError;
use super::features::MISC_BUILD_ID_SIZE;
use super::header::le32;
use crate::{BuildId, BuildIdEntry};

/// Size of a build id event without its filename.
pub(super) const BUILD_ID_EVENT_HEAD: usize = 36;

/// Parses the HEADER_BUILD_ID section (build id events one after another) that starts at
/// file offset `section_offset`.
pub(super) fn parse_build_id_section(
    data: &[u8],
    path: &Path,
    section_offset: u64,
) -> Result<Vec<BuildIdEntry>, PerfDataError> {
    let corrupt = |offset, what| PerfDataError::Corrupt {
        path: path.to_path_buf(),
        offset,
        what,
    };
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < data.len() {
        let at = section_offset + pos as u64;
        if data.len() - pos < BUILD_ID_EVENT_HEAD {
            return Err(corrupt(
                at,
                format!(
                    "build id event of {} bytes, at least {BUILD_ID_EVENT_HEAD} needed",
                    data.len() - pos
                ),
            ));
        }
        let size = u16::from_le_bytes([data[pos + 6], data[pos + 7]]) as usize;
        if size < BUILD_ID_EVENT_HEAD || size > data.len() - pos {
            return Err(corrupt(
                at + 6,
                format!(
                    "build id event size {size} out of range [{BUILD_ID_EVENT_HEAD}, {}]",
                    data.len() - pos
                ),
            ));
        }
        out.push(parse_build_id_event(&data[pos..pos + size]));
        pos += size;
    }
    Ok(out)
}

/// Parses one build id event of `rec.len()` bytes (at least [`BUILD_ID_EVENT_HEAD`], its
/// header included). The id's length is byte 20 of the 24 when `misc &
/// PERF_RECORD_MISC_BUILD_ID_SIZE`, else 20 minus trailing all-zero 4-byte groups (what
/// linux-perf-data's build_id_event.rs does for older perf files).
pub(super) fn parse_build_id_event(rec: &[u8]) -> BuildIdEntry {
    let misc = u16::from_le_bytes([rec[4], rec[5]]);
    let pid = le32(&rec[8..12]) as i32;
    let id = &rec[12..BUILD_ID_EVENT_HEAD];
    let n = if misc & MISC_BUILD_ID_SIZE != 0 {
        (id[20] as usize).min(20)
    } else {
        let mut n = 20;
        while n >= 4 && id[n - 4..n].iter().all(|&b| b == 0) {
            n -= 4;
        }
        n
    };
    let name = &rec[BUILD_ID_EVENT_HEAD..];
    let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
    BuildIdEntry {
        pid,
        build_id: BuildId(id[..n].to_vec()),
        filename: String::from_utf8_lossy(name).into_owned(),
    }
}

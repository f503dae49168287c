//! Encoders for the perf.data feature sections this crate writes (tools/perf/util/header.c
//! `write_*` functions describe the layouts; reading goes through linux-perf-data).

use super::header::RawAttr;
use crate::BuildId;

/// perf aligns header strings to `NAME_ALIGN` = 64 bytes (tools/perf/util/header.h).
pub const NAME_ALIGN: usize = 64;
/// `PERF_RECORD_MISC_BUILD_ID_SIZE`: the build_id_event's byte 20 of the build id area is
/// its length.
pub const MISC_BUILD_ID_SIZE: u16 = 1 << 15;

/// `struct perf_header_string { u32 len; char string[len]; }` — `len` counts the NUL and the
/// zero padding up to [`NAME_ALIGN`] (perf's `do_write_string`).
pub fn write_string(out: &mut Vec<u8>, s: &str) {
    let len = (s.len() + 1).div_ceil(NAME_ALIGN) * NAME_ALIGN;
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    out.resize(out.len() + len - s.len(), 0);
}

/// `struct perf_header_string_list { u32 nr; struct perf_header_string strings[nr]; }`.
pub fn write_string_list(out: &mut Vec<u8>, list: &[String]) {
    out.extend_from_slice(&(list.len() as u32).to_le_bytes());
    for s in list {
        write_string(out, s);
    }
}

/// HEADER_NRCPUS: `u32 nr_cpus_available; u32 nr_cpus_online`.
pub fn write_nrcpus(out: &mut Vec<u8>, available: u32, online: u32) {
    out.extend_from_slice(&available.to_le_bytes());
    out.extend_from_slice(&online.to_le_bytes());
}

/// One `struct perf_record_header_build_id` of the HEADER_BUILD_ID section:
/// `{ perf_event_header header; i32 pid; u8 data[20]; u8 size; u8 res1; u16 res2;
/// char filename[] }` (36 bytes + the filename, NUL-padded to [`NAME_ALIGN`]). `header.type`
/// is 0, `header.misc` is the cpumode plus [`MISC_BUILD_ID_SIZE`]. Build ids longer than 20
/// bytes are cut to 20 (the section cannot hold more).
pub fn write_build_id_event(
    out: &mut Vec<u8>,
    cpumode: u16,
    pid: i32,
    build_id: &BuildId,
    filename: &str,
) {
    let name_len = (filename.len() + 1).div_ceil(NAME_ALIGN) * NAME_ALIGN;
    let size = 36 + name_len;
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(cpumode | MISC_BUILD_ID_SIZE).to_le_bytes());
    out.extend_from_slice(&(size as u16).to_le_bytes());
    out.extend_from_slice(&pid.to_le_bytes());
    let n = build_id.0.len().min(20);
    let mut data = [0u8; 24];
    data[..n].copy_from_slice(&build_id.0[..n]);
    data[20] = n as u8;
    out.extend_from_slice(&data);
    out.extend_from_slice(filename.as_bytes());
    out.resize(out.len() + name_len - filename.len(), 0);
}

/// HEADER_EVENT_DESC: `{ u32 nr; u32 attr_size; { attr; u32 nr_ids; string name;
/// u64 ids[nr_ids] } [nr] }`.
pub fn write_event_desc(out: &mut Vec<u8>, events: &[(RawAttr, &str, &[u64])]) {
    out.extend_from_slice(&(events.len() as u32).to_le_bytes());
    out.extend_from_slice(&(super::header::ATTR_SIZE as u32).to_le_bytes());
    for (attr, name, ids) in events {
        attr.write(out);
        out.extend_from_slice(&(ids.len() as u32).to_le_bytes());
        write_string(out, name);
        for id in ids.iter() {
            out.extend_from_slice(&id.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_is_padded_to_64() {
        let mut out = Vec::new();
        write_string(&mut out, "x86_64");
        assert_eq!(out.len(), 4 + 64);
        assert_eq!(&out[..4], &[64, 0, 0, 0]);
        assert_eq!(&out[4..11], b"x86_64\0");
        let mut out = Vec::new();
        write_string(&mut out, &"a".repeat(64));
        assert_eq!(&out[..4], &[128, 0, 0, 0]);
    }

    #[test]
    fn build_id_event_layout() {
        let mut out = Vec::new();
        write_build_id_event(&mut out, 2, -1, &BuildId(vec![0xaa, 0xbb]), "/bin/true");
        #[rustfmt::skip]
        let head: [u8; 36] = [
            0x00, 0x00, 0x00, 0x00,       // header.type = 0
            0x02, 0x80,                   // header.misc = USER | BUILD_ID_SIZE
            0x64, 0x00,                   // header.size = 36 + 64
            0xff, 0xff, 0xff, 0xff,       // pid = -1
            0xaa, 0xbb, 0, 0, 0, 0, 0, 0, // data[20] ...
            0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0,
            0x02,                         // size = 2
            0x00, 0x00, 0x00,             // reserved
        ];
        assert_eq!(&out[..36], &head);
        assert_eq!(&out[36..46], b"/bin/true\0");
        assert_eq!(out.len(), 100);
    }
}

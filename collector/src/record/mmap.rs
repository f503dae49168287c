//! PERF_RECORD_MMAP and PERF_RECORD_MMAP2 bodies into [`Mmap2Event`].

use super::cursor::ByteCursor;
use super::error::RecordParseError;
use super::layout::SampleLayout;
use super::misc;
use crate::{BuildId, Mmap2Event};

/// `PROT_READ | PROT_EXEC`: what a legacy MMAP record (no prot field) stands for unless
/// `PERF_RECORD_MISC_MMAP_DATA` is set (the kernel only reports executable mappings
/// without `attr.mmap_data`).
pub const LEGACY_MMAP_EXEC_PROT: u32 = 5;
/// `PROT_READ`: what a legacy MMAP record with `PERF_RECORD_MISC_MMAP_DATA` stands for.
pub const LEGACY_MMAP_DATA_PROT: u32 = 1;

/// Parses a PERF_RECORD_MMAP body: `u32 pid, tid; u64 addr, len, pgoff; char filename[]`
/// then the sample_id trailer. The MMAP2-only fields are 0; `prot` is [`LEGACY_MMAP_EXEC_PROT`] (or
/// [`LEGACY_MMAP_DATA_PROT`] with `PERF_RECORD_MISC_MMAP_DATA`).
pub fn parse_mmap(
    body: &[u8],
    header_misc: u16,
    layout: &SampleLayout,
) -> Result<Mmap2Event, RecordParseError> {
    let end = body.len().saturating_sub(layout.sample_id_len());
    let mut c = ByteCursor::new(body);
    let pid = c.u32("pid")? as i32;
    let tid = c.u32("tid")? as i32;
    let addr = c.u64("addr")?;
    let len = c.u64("len")?;
    let pgoff = c.u64("pgoff")?;
    let filename = c.c_string(end, "filename")?;
    let prot = if header_misc & misc::MMAP_DATA != 0 {
        LEGACY_MMAP_DATA_PROT
    } else {
        LEGACY_MMAP_EXEC_PROT
    };
    Ok(Mmap2Event {
        pid,
        tid,
        addr,
        len,
        pgoff,
        prot,
        filename,
        ..Mmap2Event::default()
    })
}

/// Parses a PERF_RECORD_MMAP2 body: `u32 pid, tid; u64 addr, len, pgoff;` then, when
/// `header_misc` has `PERF_RECORD_MISC_MMAP_BUILD_ID`, `u8 build_id_size; u8 res; u16 res;
/// u8 build_id[20]`, else `u32 maj, min; u64 ino, ino_generation`; then `u32 prot, flags;
/// char filename[]` + sample_id.
///
/// A record flagged as build-id form whose `build_id_size` is over 20 is read as the inode
/// form it is: the kernel ORs `PERF_RECORD_MISC_MMAP_BUILD_ID` into the mmap event shared
/// by every listening event while any event on the system asks for build ids
/// (`perf_event_mmap_output`), so a `perf record` running beside a build-id reader (this
/// daemon) writes inode-form records with the flag (seen on 6.1 and 6.18: size 254, the
/// low byte of a device number). Both forms are 24 bytes.
pub fn parse_mmap2(
    body: &[u8],
    header_misc: u16,
    layout: &SampleLayout,
) -> Result<Mmap2Event, RecordParseError> {
    let end = body.len().saturating_sub(layout.sample_id_len());
    let mut c = ByteCursor::new(body);
    let mut e = Mmap2Event {
        pid: c.u32("pid")? as i32,
        tid: c.u32("tid")? as i32,
        addr: c.u64("addr")?,
        len: c.u64("len")?,
        pgoff: c.u64("pgoff")?,
        ..Mmap2Event::default()
    };
    if header_misc & misc::MMAP_BUILD_ID != 0 {
        let at = c.pos();
        let size = c.u8("build_id_size")?;
        c.skip(3, "__reserved")?;
        let bytes = c.bytes(20, "build_id")?;
        if size <= 20 {
            e.build_id = Some(BuildId(bytes[..size as usize].to_vec()));
        } else {
            let mut inode = ByteCursor::new(&body[at..]);
            e.maj = inode.u32("maj")?;
            e.min = inode.u32("min")?;
            e.ino = inode.u64("ino")?;
            e.ino_generation = inode.u64("ino_generation")?;
        }
    } else {
        e.maj = c.u32("maj")?;
        e.min = c.u32("min")?;
        e.ino = c.u64("ino")?;
        e.ino_generation = c.u64("ino_generation")?;
    }
    e.prot = c.u32("prot")?;
    e.flags = c.u32("flags")?;
    e.filename = c.c_string(end, "filename")?;
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::layout::sample_type::*;

    #[rustfmt::skip]
    const MMAP2_INODE: [u8; 88] = [
        0x39, 0x30, 0x00, 0x00,                         // pid = 12345
        0x3a, 0x30, 0x00, 0x00,                         // tid = 12346
        0x00, 0x10, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, // addr = 0x401000
        0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len = 0x2000
        0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // pgoff = 0x1000
        0x08, 0x00, 0x00, 0x00,                         // maj = 8
        0x01, 0x00, 0x00, 0x00,                         // min = 1
        0x40, 0xe2, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, // ino = 123456
        0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // ino_generation = 7
        0x05, 0x00, 0x00, 0x00,                         // prot = PROT_READ|PROT_EXEC
        0x02, 0x00, 0x00, 0x00,                         // flags = MAP_PRIVATE
        b'/', b'b', b'i', b'n', b'/', b'l', b's', 0x00, // filename = "/bin/ls" + NUL (8-byte padded)
        0x39, 0x30, 0x00, 0x00,                         // sample_id.pid
        0x3a, 0x30, 0x00, 0x00,                         // sample_id.tid
        0x64, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // sample_id.time = 100
    ];

    #[rustfmt::skip]
    const MMAP2_BUILD_ID: [u8; 72] = [
        0x01, 0x00, 0x00, 0x00,                         // pid = 1
        0x01, 0x00, 0x00, 0x00,                         // tid = 1
        0x00, 0x00, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x00, // addr = 0x7f000000
        0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len = 0x1000
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // pgoff = 0
        0x04,                                           // build_id_size = 4
        0x00, 0x00, 0x00,                               // __reserved_1, __reserved_2
        0xde, 0xad, 0xbe, 0xef, 0x00, 0x00, 0x00, 0x00, // build_id[20]: deadbeef ...
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //   ... zero padding
        0x00, 0x00, 0x00, 0x00,                         //   ...
        0x04, 0x00, 0x00, 0x00,                         // prot = PROT_EXEC
        0x01, 0x00, 0x00, 0x00,                         // flags = MAP_SHARED
        b'a', 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // filename = "a"
    ];

    #[test]
    fn mmap2_with_inode() {
        let layout = SampleLayout::new(IP | TID | TIME, 0, 0, true);
        let e = parse_mmap2(&MMAP2_INODE, misc::USER, &layout).unwrap();
        assert_eq!(
            e,
            Mmap2Event {
                pid: 12345,
                tid: 12346,
                addr: 0x401000,
                len: 0x2000,
                pgoff: 0x1000,
                prot: 5,
                flags: 2,
                maj: 8,
                min: 1,
                ino: 123456,
                ino_generation: 7,
                build_id: None,
                filename: "/bin/ls".into(),
            }
        );
    }

    #[test]
    fn mmap2_with_build_id() {
        let layout = SampleLayout::new(IP | TID | TIME, 0, 0, false);
        let e = parse_mmap2(&MMAP2_BUILD_ID, misc::USER | misc::MMAP_BUILD_ID, &layout).unwrap();
        assert_eq!(e.build_id, Some(BuildId(vec![0xde, 0xad, 0xbe, 0xef])));
        assert_eq!((e.maj, e.ino, e.prot, e.flags), (0, 0, 4, 1));
        assert_eq!(e.filename, "a");
    }

    /// An inode-form record flagged as build-id form (the kernel's shared mmap event, see
    /// `parse_mmap2`): read as the inode form, as `perf script` shows it.
    #[test]
    fn mmap2_inode_form_flagged_as_build_id_form() {
        let layout = SampleLayout::new(IP | TID | TIME, 0, 0, true);
        let mut flagged = MMAP2_INODE;
        // maj = 0xfe: the low byte reads as a build_id_size of 254.
        flagged[32..36].copy_from_slice(&0xfeu32.to_le_bytes());
        let e = parse_mmap2(&flagged, misc::USER | misc::MMAP_BUILD_ID, &layout).unwrap();
        assert_eq!(e.build_id, None);
        assert_eq!(
            (e.maj, e.min, e.ino, e.ino_generation),
            (0xfe, 1, 123456, 7)
        );
        assert_eq!((e.prot, e.flags), (5, 2));
        assert_eq!(e.filename, "/bin/ls");
    }

    #[test]
    fn mmap2_too_short() {
        let layout = SampleLayout::new(IP | TID | TIME, 0, 0, true);
        assert_eq!(
            parse_mmap2(&MMAP2_INODE[..60], misc::USER, &layout),
            Err(RecordParseError::TooShort {
                field: "flags",
                offset: 60,
                needed: 4,
                len: 60
            })
        );
        // The filename's NUL is inside the sample_id trailer's range: unterminated.
        assert_eq!(
            parse_mmap2(&MMAP2_INODE[..87], misc::USER, &layout),
            Err(RecordParseError::UnterminatedString {
                field: "filename",
                offset: 64
            })
        );
    }

    #[test]
    fn legacy_mmap() {
        #[rustfmt::skip]
        let body: [u8; 48] = [
            0x02, 0x00, 0x00, 0x00,                         // pid = 2
            0x03, 0x00, 0x00, 0x00,                         // tid = 3
            0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, // addr = 0x400000
            0x00, 0x30, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len = 0x3000
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // pgoff = 0
            b'/', b'a', b'.', b'o', b'u', b't', 0x00, 0x00, // filename = "/a.out"
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // (no trailer: sample_id_all unset)
        ];
        let layout = SampleLayout::new(IP | TID, 0, 0, false);
        let e = parse_mmap(&body, misc::USER, &layout).unwrap();
        assert_eq!(
            (e.pid, e.tid, e.addr, e.len, e.pgoff),
            (2, 3, 0x400000, 0x3000, 0)
        );
        assert_eq!(
            (e.prot, e.filename.as_str()),
            (LEGACY_MMAP_EXEC_PROT, "/a.out")
        );
        assert_eq!(
            parse_mmap(&body[..30], misc::USER, &layout),
            Err(RecordParseError::TooShort {
                field: "pgoff",
                offset: 24,
                needed: 8,
                len: 30
            })
        );
    }
}

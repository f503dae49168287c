//! [`SampleId`]: the `sample_id` trailer the kernel appends to every non-SAMPLE record when
//! `perf_event_attr.sample_id_all` is set.

use super::cursor::ByteCursor;
use super::error::RecordParseError;
use super::layout::{sample_type, SampleLayout};

/// The fields of a `sample_id` trailer. Fields the layout does not carry are 0.
///
/// Kernel layout (perf_event.h, `struct sample_id`), in this order, each present when its
/// `sample_type` bit is: `{u32 pid, tid}` TID, `{u64 time}` TIME, `{u64 id}` ID,
/// `{u64 stream_id}` STREAM_ID, `{u32 cpu, res}` CPU, `{u64 id}` IDENTIFIER.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SampleId {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Timestamp.
    pub time: u64,
    /// Event id (from ID or IDENTIFIER).
    pub id: u64,
    /// Stream id.
    pub stream_id: u64,
    /// CPU number.
    pub cpu: u32,
}

/// Parses the `sample_id` trailer at the end of a non-SAMPLE record body. Returns `None` when
/// the layout has no trailer (`sample_id_all` unset, or no trailer fields in `sample_type`).
pub fn parse_sample_id(
    body: &[u8],
    layout: &SampleLayout,
) -> Result<Option<SampleId>, RecordParseError> {
    let len = layout.sample_id_len();
    if len == 0 {
        return Ok(None);
    }
    if body.len() < len {
        return Err(RecordParseError::TooShort {
            field: "sample_id",
            offset: 0,
            needed: len,
            len: body.len(),
        });
    }
    let mut c = ByteCursor::new(&body[body.len() - len..]);
    let mut id = SampleId::default();
    if layout.has(sample_type::TID) {
        id.pid = c.u32("sample_id.pid")?;
        id.tid = c.u32("sample_id.tid")?;
    }
    if layout.has(sample_type::TIME) {
        id.time = c.u64("sample_id.time")?;
    }
    if layout.has(sample_type::ID) {
        id.id = c.u64("sample_id.id")?;
    }
    if layout.has(sample_type::STREAM_ID) {
        id.stream_id = c.u64("sample_id.stream_id")?;
    }
    if layout.has(sample_type::CPU) {
        id.cpu = c.u32("sample_id.cpu")?;
        c.u32("sample_id.res")?;
    }
    if layout.has(sample_type::IDENTIFIER) {
        id.id = c.u64("sample_id.identifier")?;
    }
    Ok(Some(id))
}

/// Appends the `sample_id` trailer for `layout` (nothing without `sample_id_all`).
pub(crate) fn write_sample_id(out: &mut Vec<u8>, layout: &SampleLayout, id: &SampleId) {
    if !layout.sample_id_all {
        return;
    }
    if layout.has(sample_type::TID) {
        out.extend_from_slice(&id.pid.to_le_bytes());
        out.extend_from_slice(&id.tid.to_le_bytes());
    }
    if layout.has(sample_type::TIME) {
        out.extend_from_slice(&id.time.to_le_bytes());
    }
    if layout.has(sample_type::ID) {
        out.extend_from_slice(&id.id.to_le_bytes());
    }
    if layout.has(sample_type::STREAM_ID) {
        out.extend_from_slice(&id.stream_id.to_le_bytes());
    }
    if layout.has(sample_type::CPU) {
        out.extend_from_slice(&id.cpu.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
    }
    if layout.has(sample_type::IDENTIFIER) {
        out.extend_from_slice(&id.id.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sample_type::*;

    #[test]
    fn trailer_is_read_from_the_end() {
        let layout = SampleLayout::new(IDENTIFIER | TID | TIME | CPU, 0, 0, true);
        #[rustfmt::skip]
        let body: [u8; 40] = [
            0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, // record payload, not part of the trailer
            0x10, 0x00, 0x00, 0x00,                         // pid = 16
            0x11, 0x00, 0x00, 0x00,                         // tid = 17
            0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // time = 256
            0x03, 0x00, 0x00, 0x00,                         // cpu = 3
            0x00, 0x00, 0x00, 0x00,                         // res
            0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // identifier = 42
        ];
        let id = parse_sample_id(&body, &layout).unwrap().unwrap();
        assert_eq!(
            id,
            SampleId {
                pid: 16,
                tid: 17,
                time: 256,
                id: 42,
                stream_id: 0,
                cpu: 3
            }
        );
        let mut out = Vec::new();
        write_sample_id(&mut out, &layout, &id);
        assert_eq!(out, body[8..]);
    }

    #[test]
    fn trailer_too_short() {
        let layout = SampleLayout::new(TID | TIME, 0, 0, true);
        assert_eq!(
            parse_sample_id(&[0u8; 8], &layout),
            Err(RecordParseError::TooShort {
                field: "sample_id",
                offset: 0,
                needed: 16,
                len: 8
            })
        );
        assert_eq!(
            parse_sample_id(&[0u8; 8], &SampleLayout::new(TID | TIME, 0, 0, false)),
            Ok(None)
        );
    }
}

//! PERF_RECORD_COMM bodies into [`CommEvent`].

use super::cursor::ByteCursor;
use super::error::RecordParseError;
use super::layout::SampleLayout;
use super::misc;
use crate::CommEvent;

/// Parses a PERF_RECORD_COMM body: `u32 pid, tid; char comm[]` + sample_id.
/// `PERF_RECORD_MISC_COMM_EXEC` in `header_misc` sets [`CommEvent::exec`].
pub fn parse_comm(
    body: &[u8],
    header_misc: u16,
    layout: &SampleLayout,
) -> Result<CommEvent, RecordParseError> {
    let end = body.len().saturating_sub(layout.sample_id_len());
    let mut c = ByteCursor::new(body);
    let pid = c.u32("pid")?;
    let tid = c.u32("tid")?;
    let comm = c.c_string(end, "comm")?;
    Ok(CommEvent {
        pid,
        tid,
        comm,
        exec: header_misc & misc::COMM_EXEC != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::layout::sample_type::*;

    #[test]
    fn comm_with_trailer() {
        #[rustfmt::skip]
        let body: [u8; 32] = [
            0x0a, 0x00, 0x00, 0x00,                         // pid = 10
            0x0b, 0x00, 0x00, 0x00,                         // tid = 11
            b'b', b'e', b'n', b'c', b'h', 0x00, 0x00, 0x00, // comm = "bench"
            0x0a, 0x00, 0x00, 0x00,                         // sample_id.pid
            0x0b, 0x00, 0x00, 0x00,                         // sample_id.tid
            0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // sample_id.time = 5
        ];
        let layout = SampleLayout::new(IP | TID | TIME, 0, 0, true);
        let e = parse_comm(&body, misc::COMM_EXEC, &layout).unwrap();
        assert_eq!(
            e,
            CommEvent {
                pid: 10,
                tid: 11,
                comm: "bench".into(),
                exec: true
            }
        );
        assert_eq!(
            parse_comm(&body[..6], 0, &layout),
            Err(RecordParseError::TooShort {
                field: "tid",
                offset: 4,
                needed: 4,
                len: 6
            })
        );
    }
}

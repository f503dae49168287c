//! PERF_RECORD_FORK and PERF_RECORD_EXIT bodies into [`TaskEvent`].

use super::cursor::ByteCursor;
use super::error::RecordParseError;
use crate::TaskEvent;

/// Parses a PERF_RECORD_FORK or PERF_RECORD_EXIT body: `u32 pid, ppid, tid, ptid; u64 time`
/// then the sample_id trailer (ignored: the body carries its own time).
pub fn parse_task(body: &[u8]) -> Result<TaskEvent, RecordParseError> {
    let mut c = ByteCursor::new(body);
    Ok(TaskEvent {
        pid: c.u32("pid")?,
        ppid: c.u32("ppid")?,
        tid: c.u32("tid")?,
        ptid: c.u32("ptid")?,
        time: c.u64("time")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_body() {
        #[rustfmt::skip]
        let body: [u8; 24] = [
            0x64, 0x00, 0x00, 0x00,                         // pid = 100
            0x01, 0x00, 0x00, 0x00,                         // ppid = 1
            0x65, 0x00, 0x00, 0x00,                         // tid = 101
            0x01, 0x00, 0x00, 0x00,                         // ptid = 1
            0xe8, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // time = 1000
        ];
        assert_eq!(
            parse_task(&body),
            Ok(TaskEvent {
                pid: 100,
                ppid: 1,
                tid: 101,
                ptid: 1,
                time: 1000
            })
        );
        assert_eq!(
            parse_task(&body[..20]),
            Err(RecordParseError::TooShort {
                field: "time",
                offset: 16,
                needed: 8,
                len: 20
            })
        );
    }
}

//! PERF_RECORD_LOST and PERF_RECORD_LOST_SAMPLES bodies.

use super::cursor::ByteCursor;
use super::error::RecordParseError;

/// PERF_RECORD_LOST: the ring buffer was full and `lost` records of event `id` were dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LostEvent {
    /// Event id.
    pub id: u64,
    /// Number of records dropped.
    pub lost: u64,
}

/// PERF_RECORD_LOST_SAMPLES: samples dropped inside the kernel or the PMU (not ring overflow).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LostSamplesEvent {
    /// Number of samples dropped.
    pub lost: u64,
}

/// Parses a PERF_RECORD_LOST body: `u64 id; u64 lost` + sample_id.
pub fn parse_lost(body: &[u8]) -> Result<LostEvent, RecordParseError> {
    let mut c = ByteCursor::new(body);
    Ok(LostEvent {
        id: c.u64("id")?,
        lost: c.u64("lost")?,
    })
}

/// Parses a PERF_RECORD_LOST_SAMPLES body: `u64 lost` + sample_id.
pub fn parse_lost_samples(body: &[u8]) -> Result<LostSamplesEvent, RecordParseError> {
    let mut c = ByteCursor::new(body);
    Ok(LostSamplesEvent {
        lost: c.u64("lost")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_bodies() {
        #[rustfmt::skip]
        let body: [u8; 16] = [
            0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // id = 7
            0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // lost = 42
        ];
        assert_eq!(parse_lost(&body), Ok(LostEvent { id: 7, lost: 42 }));
        assert_eq!(
            parse_lost_samples(&body[8..]),
            Ok(LostSamplesEvent { lost: 42 })
        );
        assert_eq!(
            parse_lost(&body[..12]),
            Err(RecordParseError::TooShort {
                field: "lost",
                offset: 8,
                needed: 8,
                len: 12
            })
        );
        assert_eq!(
            parse_lost_samples(&body[..7]),
            Err(RecordParseError::TooShort {
                field: "lost",
                offset: 0,
                needed: 8,
                len: 7
            })
        );
    }
}

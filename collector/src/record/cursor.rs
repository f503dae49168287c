//! [`ByteCursor`]: bounds-checked little-endian reads over a record body, every failure
//! naming the field and the offset.

use super::error::RecordParseError;

/// Reads native-endian (x86-64: little-endian) integers from a record body, front to back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ByteCursor<'a> {
    body: &'a [u8],
    pos: usize,
}

impl<'a> ByteCursor<'a> {
    /// A cursor at offset 0 of `body`.
    pub(crate) fn new(body: &'a [u8]) -> Self {
        ByteCursor { body, pos: 0 }
    }

    /// Current offset in the body.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left after the current offset.
    pub(crate) fn remaining(&self) -> usize {
        self.body.len() - self.pos
    }

    /// Takes `n` bytes.
    pub(crate) fn bytes(
        &mut self,
        n: usize,
        field: &'static str,
    ) -> Result<&'a [u8], RecordParseError> {
        if n > self.remaining() {
            return Err(RecordParseError::TooShort {
                field,
                offset: self.pos,
                needed: n,
                len: self.body.len(),
            });
        }
        let s = &self.body[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Skips `n` bytes.
    pub(crate) fn skip(&mut self, n: usize, field: &'static str) -> Result<(), RecordParseError> {
        self.bytes(n, field).map(|_| ())
    }

    /// Reads a u64.
    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64, RecordParseError> {
        let b = self.bytes(8, field)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    /// Reads a u32.
    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, RecordParseError> {
        let b = self.bytes(4, field)?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    /// Reads a u8.
    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, RecordParseError> {
        Ok(self.bytes(1, field)?[0])
    }

    /// Reads a count of `elem_size`-byte elements and checks that they fit in what is left
    /// (so the count can size an allocation).
    pub(crate) fn count(
        &mut self,
        field: &'static str,
        elem_size: usize,
    ) -> Result<usize, RecordParseError> {
        let offset = self.pos;
        let value = self.u64(field)?;
        let max = (self.remaining() / elem_size.max(1)) as u64;
        if value > max {
            return Err(RecordParseError::CountTooLarge {
                field,
                offset,
                value,
                max,
            });
        }
        Ok(value as usize)
    }

    /// Reads a NUL-terminated string that ends before `end` (the start of the sample_id
    /// trailer); the padding after the NUL is not examined. Invalid UTF-8 is replaced.
    pub(crate) fn c_string(
        &mut self,
        end: usize,
        field: &'static str,
    ) -> Result<String, RecordParseError> {
        let offset = self.pos;
        let end = end.min(self.body.len()).max(offset);
        let area = &self.body[offset..end];
        let nul = area
            .iter()
            .position(|&b| b == 0)
            .ok_or(RecordParseError::UnterminatedString { field, offset })?;
        self.pos = end;
        Ok(String::from_utf8_lossy(&area[..nul]).into_owned())
    }
}

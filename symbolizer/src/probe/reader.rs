//! [`ByteReader`]: bounded little-endian / LEB128 reads over a section, reporting the byte
//! offset of the first byte that could not be read (MCPseudoProbeDecoder's `readUnencodedNumber`,
//! `readUnsignedNumber`, `readSignedNumber`, `readString`, with the bounds checks done first).

/// A decoding failure: where and what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// Byte offset in the section.
    pub offset: usize,
    /// What could not be read.
    pub what: &'static str,
}

/// A cursor over section bytes.
pub struct ByteReader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> ByteReader<'a> {
    /// Starts at offset 0.
    pub fn new(data: &'a [u8]) -> Self {
        ByteReader { data, pos: 0 }
    }

    /// A reader of `data` positioned at `pos` (offsets stay those of `data`).
    pub fn at(data: &'a [u8], pos: usize) -> Self {
        ByteReader { data, pos }
    }

    /// Current offset.
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// True when all bytes were consumed.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    fn fail<T>(&self, what: &'static str) -> Result<T, DecodeError> {
        Err(DecodeError {
            offset: self.pos,
            what,
        })
    }

    /// One byte.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        let Some(&b) = self.data.get(self.pos) else {
            return self.fail(what);
        };
        self.pos += 1;
        Ok(b)
    }

    /// A little-endian u64.
    pub fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        let Some(bytes) = self.data.get(self.pos..self.pos + 8) else {
            return self.fail(what);
        };
        self.pos += 8;
        let mut b = [0u8; 8];
        b.copy_from_slice(bytes);
        Ok(u64::from_le_bytes(b))
    }

    /// An unsigned LEB128 that must fit in 64 bits.
    pub fn uleb(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        let start = self.pos;
        let mut value: u64 = 0;
        let mut shift = 0u32;
        loop {
            let Some(&byte) = self.data.get(self.pos) else {
                self.pos = start;
                return self.fail(what);
            };
            self.pos += 1;
            let low = u64::from(byte & 0x7f);
            if shift >= 64 || (shift == 63 && low > 1) {
                self.pos = start;
                return self.fail(what);
            }
            value |= low << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
    }

    /// An unsigned LEB128 that must fit in 32 bits.
    pub fn uleb32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let start = self.pos;
        let v = self.uleb(what)?;
        u32::try_from(v).or_else(|_| {
            self.pos = start;
            self.fail(what)
        })
    }

    /// A signed LEB128 that must fit in 64 bits.
    pub fn sleb(&mut self, what: &'static str) -> Result<i64, DecodeError> {
        let start = self.pos;
        let mut value: i64 = 0;
        let mut shift = 0u32;
        loop {
            let Some(&byte) = self.data.get(self.pos) else {
                self.pos = start;
                return self.fail(what);
            };
            self.pos += 1;
            if shift >= 64 {
                self.pos = start;
                return self.fail(what);
            }
            value |= i64::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                if shift < 64 && byte & 0x40 != 0 {
                    value |= -1i64 << shift;
                }
                return Ok(value);
            }
        }
    }

    /// `len` raw bytes.
    pub fn bytes(&mut self, len: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let Some(end) = self.pos.checked_add(len) else {
            return self.fail(what);
        };
        let Some(bytes) = self.data.get(self.pos..end) else {
            return self.fail(what);
        };
        self.pos = end;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leb128_values_and_truncation() {
        let mut r = ByteReader::new(&[0xe5, 0x8e, 0x26, 0x7f, 0x80, 0x7f, 0x80]);
        assert_eq!(r.uleb("a"), Ok(624485));
        assert_eq!(r.sleb("b"), Ok(-1));
        assert_eq!(r.sleb("c"), Ok(-128));
        assert_eq!(
            r.uleb("d"),
            Err(DecodeError {
                offset: 6,
                what: "d"
            })
        );
        assert_eq!(r.offset(), 6);
        let mut r = ByteReader::new(&[0x80, 0x80, 0x80, 0x80, 0x10]);
        assert_eq!(
            r.uleb32("e"),
            Err(DecodeError {
                offset: 0,
                what: "e"
            })
        );
        let mut r = ByteReader::new(&[1, 2, 3]);
        assert_eq!(
            r.u64("f"),
            Err(DecodeError {
                offset: 0,
                what: "f"
            })
        );
        assert_eq!(r.bytes(2, "g"), Ok(&[1u8, 2][..]));
        assert_eq!(
            r.bytes(2, "h"),
            Err(DecodeError {
                offset: 2,
                what: "h"
            })
        );
    }
}

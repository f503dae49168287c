//! ULEB128 encoding, the integer encoding of every extbinary field outside the header table.

/// Appends `v` as ULEB128 to `out`.
pub fn write_uleb(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_magic_and_small_values() {
        let mut out = Vec::new();
        write_uleb(&mut out, 0x5350524f46343204);
        assert_eq!(out, [0x84, 0xe4, 0xd0, 0xb1, 0xf4, 0xc9, 0x94, 0xa8, 0x53]);
        out.clear();
        write_uleb(&mut out, 103);
        write_uleb(&mut out, 0);
        write_uleb(&mut out, 300);
        assert_eq!(out, [0x67, 0x00, 0xac, 0x02]);
    }
}

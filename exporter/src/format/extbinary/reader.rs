//! [`read`]: an extbinary file back into a [`SampleProfile`], the inverse of
//! [`super::writer`], following LLVM 19's `SampleProfileReaderExtBinaryBase`
//! (`readHeader`, `readOneSection`, `readFuncProfile`, `readFuncMetadata`).
//!
//! Supported: what llvm-profgen 19 and pgo-agent write — uncompressed sections, a string
//! name table, flat, CS (`SecFlagFullContext`, contexts from the CSNameTable) and nested
//! profiles, probe checksums and attributes in FuncMetadata. Profiles are read in order from
//! the LBRProfile section (the FuncOffsetTable, which only serves lazy loading, is skipped),
//! and a repeated context adds up, as LLVM's `Profiles[...]` merge does. MD5 name tables and
//! compressed sections are refused with [`ExtBinaryReadError::Unsupported`].
//!
//! Profile-wide flags: `is_cs`, `is_preinlined` and `is_fs` from the summary section's
//! flags, `is_probe_based` from FuncMetadata's `SecFlagIsProbeBased`.
//!
//! Never panics on input: every count that drives an allocation is bounded by the bytes
//! left, nesting by [`MAX_INLINE_DEPTH`], and every error names the byte offset.

use std::collections::btree_map::Entry;

use symbolizer::profile::{
    ContextFrame, FunctionSamples, LineLocation, SampleContext, SampleProfile,
};

use super::section::*;

/// Deepest inline nesting accepted.
pub const MAX_INLINE_DEPTH: usize = 1024;

/// Common flag: the section is zlib-compressed (`SecFlagCompress`).
const FLAG_COMPRESS: u64 = 1;

/// Errors of the extbinary reader.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExtBinaryReadError {
    /// The input ends inside a field.
    #[error("extbinary profile truncated at byte {offset} (reading {what})")]
    Truncated {
        /// Byte offset in the file.
        offset: usize,
        /// The field.
        what: &'static str,
    },
    /// A field has a value the format does not allow.
    #[error("invalid extbinary profile at byte {offset}: {what}")]
    Invalid {
        /// Byte offset in the file.
        offset: usize,
        /// What is wrong.
        what: &'static str,
    },
    /// A valid feature this reader does not implement.
    #[error("extbinary profile uses {what}, which this reader does not support")]
    Unsupported {
        /// The feature.
        what: &'static str,
    },
}

type Result<T> = std::result::Result<T, ExtBinaryReadError>;

/// A cursor over `data[..end]` reporting file offsets.
struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> Cursor<'a> {
    fn new(data: &'a [u8], start: usize, end: usize) -> Cursor<'a> {
        Cursor {
            data,
            pos: start,
            end,
        }
    }

    fn at_end(&self) -> bool {
        self.pos >= self.end
    }

    fn remaining(&self) -> usize {
        self.end.saturating_sub(self.pos)
    }

    fn truncated(&self, what: &'static str) -> ExtBinaryReadError {
        ExtBinaryReadError::Truncated {
            offset: self.pos,
            what,
        }
    }

    fn invalid(&self, what: &'static str) -> ExtBinaryReadError {
        ExtBinaryReadError::Invalid {
            offset: self.pos,
            what,
        }
    }

    fn uleb(&mut self, what: &'static str) -> Result<u64> {
        let mut v = 0u64;
        let mut shift = 0u32;
        loop {
            if self.pos >= self.end {
                return Err(self.truncated(what));
            }
            let b = self.data[self.pos];
            if shift >= 64 || (shift == 63 && b & 0x7e != 0) {
                return Err(self.invalid("ULEB128 value exceeds 64 bits"));
            }
            v |= u64::from(b & 0x7f) << shift;
            self.pos += 1;
            if b & 0x80 == 0 {
                return Ok(v);
            }
            shift += 7;
        }
    }

    fn u32(&mut self, what: &'static str) -> Result<u32> {
        let v = self.uleb(what)?;
        u32::try_from(v).map_err(|_| self.invalid("value exceeds 32 bits"))
    }

    fn u64_le(&mut self, what: &'static str) -> Result<u64> {
        if self.remaining() < 8 {
            return Err(self.truncated(what));
        }
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.data[self.pos..self.pos + 8]);
        self.pos += 8;
        Ok(u64::from_le_bytes(b))
    }

    /// A count of items of at least one byte each: at most the bytes left.
    fn count(&mut self, what: &'static str) -> Result<usize> {
        let n = self.uleb(what)?;
        if n > self.remaining() as u64 {
            return Err(self.invalid("count exceeds the bytes left"));
        }
        Ok(n as usize)
    }

    fn location(&mut self) -> Result<LineLocation> {
        let line = self.u32("line offset")?;
        let disc = self.u32("discriminator")?;
        Ok(LineLocation::new(line, disc))
    }

    fn c_string(&mut self) -> Result<&'a str> {
        let rest = &self.data[self.pos..self.end];
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| self.truncated("name"))?;
        let s = std::str::from_utf8(&rest[..len]).map_err(|_| self.invalid("name is not UTF-8"))?;
        self.pos += len + 1;
        Ok(s)
    }
}

/// Tables and flags gathered while reading sections in header order.
#[derive(Default)]
struct State {
    names: Vec<String>,
    contexts: Vec<SampleContext>,
}

impl State {
    fn name(&self, c: &Cursor, idx: u64) -> Result<&str> {
        usize::try_from(idx)
            .ok()
            .and_then(|i| self.names.get(i))
            .map(String::as_str)
            .ok_or_else(|| c.invalid("name index out of range"))
    }

    fn context(&self, c: &Cursor, idx: u64, is_cs: bool) -> Result<SampleContext> {
        if is_cs {
            usize::try_from(idx)
                .ok()
                .and_then(|i| self.contexts.get(i))
                .cloned()
                .ok_or_else(|| c.invalid("context index out of range"))
        } else {
            Ok(SampleContext::from_name(self.name(c, idx)?))
        }
    }
}

/// Reads an extbinary sample profile.
pub fn read(data: &[u8]) -> Result<SampleProfile> {
    let mut c = Cursor::new(data, 0, data.len());
    if c.uleb("magic")? != MAGIC {
        return Err(ExtBinaryReadError::Invalid {
            offset: 0,
            what: "not an extbinary profile (bad magic)",
        });
    }
    if c.uleb("version")? != VERSION {
        return Err(c.invalid("unsupported version (expected 103)"));
    }
    let sections = c.u64_le("section count")?;
    if sections > (c.remaining() / 32) as u64 {
        return Err(c.invalid("section count exceeds the header table"));
    }
    let mut headers = Vec::with_capacity(sections as usize);
    for _ in 0..sections {
        let ty = c.u64_le("section type")?;
        let flags = c.u64_le("section flags")?;
        let offset = c.u64_le("section offset")?;
        let size = c.u64_le("section size")?;
        let end = offset
            .checked_add(size)
            .filter(|&e| e <= data.len() as u64)
            .ok_or_else(|| c.invalid("section extends past the end of the file"))?;
        headers.push((ty, flags, offset as usize, end as usize));
    }

    let mut profile = SampleProfile::default();
    let mut state = State::default();
    for (ty, flags, start, end) in headers {
        if flags & FLAG_COMPRESS != 0 && start != end {
            return Err(ExtBinaryReadError::Unsupported {
                what: "compressed sections",
            });
        }
        let mut c = Cursor::new(data, start, end);
        match ty {
            t if t == SecType::ProfSummary as u64 => {
                profile.is_cs = flags & FLAG_FULL_CONTEXT != 0;
                profile.is_preinlined = flags & FLAG_IS_PREINLINED != 0;
                profile.is_fs = flags & FLAG_FS_DISCRIMINATOR != 0;
            }
            t if t == SecType::NameTable as u64 => {
                if flags & (FLAG_MD5_NAME | FLAG_FIXED_LENGTH_MD5) != 0 {
                    return Err(ExtBinaryReadError::Unsupported {
                        what: "an MD5 name table",
                    });
                }
                let n = c.count("name count")?;
                state.names = Vec::with_capacity(n);
                for _ in 0..n {
                    state.names.push(c.c_string()?.to_string());
                }
            }
            t if t == SecType::CsNameTable as u64 => {
                let n = c.count("context count")?;
                state.contexts = Vec::with_capacity(n);
                for _ in 0..n {
                    let frames = c.count("context size")?;
                    let mut v = Vec::with_capacity(frames);
                    for _ in 0..frames {
                        let idx = c.uleb("frame name")?;
                        let name = state.name(&c, idx)?.to_string();
                        v.push(ContextFrame::new(name, c.location()?));
                    }
                    state.contexts.push(SampleContext::from_frames(v));
                }
            }
            t if t == SecType::LbrProfile as u64 => {
                while !c.at_end() {
                    let head = c.uleb("head samples")?;
                    let idx = c.uleb("context index")?;
                    let context = state.context(&c, idx, profile.is_cs)?;
                    let mut fs = FunctionSamples::new(context);
                    fs.head = head;
                    read_body(&mut c, &state, &mut fs, 0)?;
                    match profile.profiles.entry(fs.context.clone()) {
                        Entry::Vacant(e) => {
                            e.insert(fs);
                        }
                        Entry::Occupied(mut e) => {
                            e.get_mut().merge(&fs);
                        }
                    }
                }
            }
            t if t == SecType::FuncMetadata as u64 => {
                profile.is_probe_based = flags & FLAG_IS_PROBE_BASED != 0;
                let fields = MetadataFields {
                    probe: profile.is_probe_based,
                    attributes: flags & FLAG_HAS_ATTRIBUTE != 0,
                    nested: !profile.is_cs,
                };
                while !c.at_end() {
                    let idx = c.uleb("context index")?;
                    let context = state.context(&c, idx, profile.is_cs)?;
                    let target = profile.profiles.get_mut(&context);
                    read_metadata(&mut c, &state, target, fields, 0)?;
                }
            }
            // ProfileSymbolList, FuncOffsetTable and unknown sections are not needed.
            _ => {}
        }
    }
    Ok(profile)
}

/// `readProfile` after the context index: total, body records, inlined call sites.
fn read_body(c: &mut Cursor, state: &State, fs: &mut FunctionSamples, depth: usize) -> Result<()> {
    if depth > MAX_INLINE_DEPTH {
        return Err(c.invalid("inline nesting deeper than 1024"));
    }
    fs.add_total_samples(c.uleb("total samples")?);
    let records = c.count("body record count")?;
    for _ in 0..records {
        let loc = c.location()?;
        let count = c.uleb("body count")?;
        let targets = c.count("call target count")?;
        for _ in 0..targets {
            let idx = c.uleb("call target name")?;
            let name = state.name(c, idx)?.to_string();
            let n = c.uleb("call target count")?;
            fs.add_called_target_samples(loc, &name, n);
        }
        fs.add_body_samples(loc, count);
    }
    let callsites = c.count("call site count")?;
    for _ in 0..callsites {
        let loc = c.location()?;
        let idx = c.uleb("callee name")?;
        let name = state.name(c, idx)?.to_string();
        let callee = fs.callee_mut(loc, &name);
        read_body(c, state, callee, depth + 1)?;
    }
    Ok(())
}

/// Which fields a FuncMetadata record has.
#[derive(Clone, Copy)]
struct MetadataFields {
    probe: bool,
    attributes: bool,
    nested: bool,
}

/// `readFuncMetadata` for one profile (`target`, when it exists) and, for non-CS
/// profiles, its inlined callees.
fn read_metadata(
    c: &mut Cursor,
    state: &State,
    mut target: Option<&mut FunctionSamples>,
    fields: MetadataFields,
    depth: usize,
) -> Result<()> {
    if depth > MAX_INLINE_DEPTH {
        return Err(c.invalid("inline nesting deeper than 1024"));
    }
    if fields.probe {
        let checksum = c.uleb("checksum")?;
        if let Some(fs) = target.as_deref_mut() {
            fs.checksum = checksum;
        }
    }
    if fields.attributes {
        let attributes = c.u32("attributes")?;
        if let Some(fs) = target.as_deref_mut() {
            fs.attributes = attributes;
        }
    }
    if fields.nested {
        let callsites = c.count("call site count")?;
        for _ in 0..callsites {
            let loc = c.location()?;
            let idx = c.uleb("callee name")?;
            let name = state.name(c, idx)?.to_string();
            let callee = target.as_deref_mut().map(|fs| fs.callee_mut(loc, &name));
            read_metadata(c, state, callee, fields, depth + 1)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::extbinary::to_bytes;
    use crate::format::llvm_text;
    use crate::format::llvm_text::tests::{cs_probe_profile, nested_profile};

    #[test]
    fn reads_back_what_the_writer_writes() {
        // Attributes of a non-CS profile are written only when it is pre-inlined (LLVM's
        // writer), so the nested profile is marked so.
        let mut preinlined = nested_profile();
        preinlined.is_preinlined = true;
        for profile in [cs_probe_profile(), preinlined] {
            let read = read(&to_bytes(&profile)).unwrap();
            assert_eq!(llvm_text::to_string(&read), llvm_text::to_string(&profile));
            assert_eq!(
                (read.is_cs, read.is_probe_based, read.is_preinlined),
                (profile.is_cs, profile.is_probe_based, profile.is_preinlined)
            );
            assert_eq!(read.profiles, profile.profiles);
        }
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let bytes = to_bytes(&nested_profile());
        for len in 0..bytes.len() {
            // A cut in the header is a truncated field; any later cut leaves a section
            // extending past the end of the file.
            assert!(read(&bytes[..len]).is_err(), "prefix of {len} bytes");
        }
    }

    #[test]
    fn errors_name_the_offset() {
        assert_eq!(
            read(b"main:1:1\n"),
            Err(ExtBinaryReadError::Invalid {
                offset: 0,
                what: "not an extbinary profile (bad magic)"
            })
        );
        let mut bytes = to_bytes(&nested_profile());
        // The section count (8 bytes LE after the 9-byte magic and 1-byte version).
        bytes[10..18].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(
            read(&bytes),
            Err(ExtBinaryReadError::Invalid {
                offset: 18,
                what: "section count exceeds the header table"
            })
        );
    }
}

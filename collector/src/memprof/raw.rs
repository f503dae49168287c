//! [`RawMemProfile`]: the parsed content of one raw MemProf profile file, as the compiler-rt
//! MemProf runtime writes it (`compiler-rt/lib/memprof/memprof_rawprofile.cpp`; layout in
//! LLVM `MemProfData.inc`; reader `RawMemProfReader` in `llvm/lib/ProfileData/MemProfReader.cpp`).
//!
//! A file is one or more dumps back to back. Each dump: a 48-byte header (magic, version,
//! total size, segment/MIB/stack section offsets, relative to the dump), then
//! * segments: `u64 N`, N × 64-byte `SegmentEntry {start, end, offset, build_id_size, [u8; 32]}`;
//! * MIBs: `u64 N`, N × `{u64 stack_id, MemInfoBlock (144 bytes), histogram}` where the
//!   histogram has `AccessHistogramSize` entries of `u64` (v4) or `u16` (v5);
//! * stacks: `u64 N`, N × `{u64 stack_id, u64 n_pcs, n_pcs × u64 pc}` (leaf first; PCs are
//!   already "return address − 1").
//!
//! All little-endian and packed; every section is padded to 8 bytes. This reader checks that
//! each section ends (rounded up to 8) exactly where the next begins and the last at the dump's
//! total size, and that every MIB's stack id has a stack: a bit flip in any size or count is
//! caught. Like LLVM, dumps of one file must have identical segments and their MIBs are merged
//! by stack id.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::error::MemProfRawError;
use super::histogram::decode_histogram_count;
use super::mib::{MemInfoBlock, MIB_SIZE_V4};
use crate::BuildId;

/// `MEMPROF_RAW_MAGIC_64`: `(u64)255 << 56 | 'm' << 48 | 'p' << 40 | 'r' << 32 | 'o' << 24 |
/// 'f' << 16 | 'r' << 8 | 129`.
pub const MEMPROF_RAW_MAGIC: u64 = 0xff6d_7072_6f66_7281;

/// Raw versions this reader accepts (clang 19 writes 4, clang 22 writes 5).
pub const SUPPORTED_VERSIONS: [u64; 2] = [4, 5];

/// Size of the dump header.
pub const HEADER_SIZE: u64 = 48;

/// Size of one segment entry.
pub const SEGMENT_ENTRY_SIZE: u64 = 64;

/// Largest raw profile accepted (the whole file is read into memory).
pub const MAX_RAW_PROFILE_BYTES: u64 = 1 << 30;

/// Most PCs accepted in one call stack (the runtime's `malloc_context_size` defaults to 30).
pub const MAX_STACK_DEPTH: u64 = 1 << 12;

/// Most entries accepted in one access histogram (one per 8 bytes of the allocation).
pub const MAX_HISTOGRAM_ENTRIES: u64 = 1 << 24;

/// One executable mapping of a loaded module at profiling time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentEntry {
    /// Runtime start address of the executable range.
    pub start: u64,
    /// Runtime end address.
    pub end: u64,
    /// The module's load base (`LoadedModule::base_address()`), not a file offset.
    pub offset: u64,
    /// GNU build id of the module (empty when it has none).
    pub build_id: BuildId,
}

/// One raw profile file, all dumps merged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawMemProfile {
    /// Raw format version of the (last) dump.
    pub version: u64,
    /// Executable mappings; entry 0 is the main program (`dl_iterate_phdr` order).
    pub segments: Vec<SegmentEntry>,
    /// `(stack id, statistics)` in file order, one per stack id.
    pub mibs: Vec<(u64, MemInfoBlock)>,
    /// Call stacks by stack id: PCs leaf first.
    pub stacks: HashMap<u64, Vec<u64>>,
    /// Number of dumps the file held.
    pub dumps: usize,
}

impl RawMemProfile {
    /// Reads and parses `path` (see [`RawMemProfile::parse`]).
    pub fn read(path: &Path) -> Result<RawMemProfile, MemProfRawError> {
        let io = |source| MemProfRawError::Io {
            path: path.to_path_buf(),
            source,
        };
        let len = std::fs::metadata(path).map_err(io)?.len();
        if len > MAX_RAW_PROFILE_BYTES {
            return Err(MemProfRawError::TooLarge {
                path: path.to_path_buf(),
                offset: 0,
                what: "file size",
                value: len,
                max: MAX_RAW_PROFILE_BYTES,
            });
        }
        let data = std::fs::read(path).map_err(io)?;
        Self::parse(path, &data)
    }

    /// Parses a whole raw profile; `path` only names the file in errors. Nothing is returned
    /// unless every dump is valid.
    pub fn parse(path: &Path, data: &[u8]) -> Result<RawMemProfile, MemProfRawError> {
        let mut reader = Reader {
            path: path.to_path_buf(),
            data,
        };
        let mut profile = RawMemProfile::default();
        let mut index: HashMap<u64, usize> = HashMap::new();
        let mut dump_start = 0u64;
        if data.is_empty() {
            return Err(reader.truncated(0, "dump header", HEADER_SIZE, 0));
        }
        while dump_start < data.len() as u64 {
            let dump = reader.dump(dump_start)?;
            if profile.dumps > 0 && dump.segments != profile.segments {
                return Err(reader.corrupt(
                    dump_start + HEADER_SIZE,
                    "dump has different segment information than the first dump".into(),
                ));
            }
            profile.version = dump.version;
            profile.segments = dump.segments;
            for (id, mib) in dump.mibs {
                match index.get(&id) {
                    Some(&i) => profile.mibs[i].1.merge(&mib),
                    None => {
                        index.insert(id, profile.mibs.len());
                        profile.mibs.push((id, mib));
                    }
                }
            }
            profile.stacks.extend(dump.stacks);
            profile.dumps += 1;
            dump_start += dump.total_size;
        }
        Ok(profile)
    }

    /// Build id of the main program (segment 0), if any.
    pub fn main_build_id(&self) -> Option<&BuildId> {
        self.segments.first().map(|s| &s.build_id)
    }
}

struct Dump {
    version: u64,
    total_size: u64,
    segments: Vec<SegmentEntry>,
    mibs: Vec<(u64, MemInfoBlock)>,
    stacks: HashMap<u64, Vec<u64>>,
}

struct Reader<'a> {
    path: PathBuf,
    data: &'a [u8],
}

fn align8(v: u64) -> u64 {
    v.div_ceil(8) * 8
}

impl Reader<'_> {
    fn truncated(
        &self,
        offset: u64,
        what: &'static str,
        needed: u64,
        available: u64,
    ) -> MemProfRawError {
        MemProfRawError::Truncated {
            path: self.path.clone(),
            offset,
            what,
            needed,
            available,
        }
    }

    fn corrupt(&self, offset: u64, what: String) -> MemProfRawError {
        MemProfRawError::Corrupt {
            path: self.path.clone(),
            offset,
            what,
        }
    }

    /// Bytes `[offset, offset + len)`, which must lie before `limit` (the dump's end).
    fn bytes(
        &self,
        offset: u64,
        len: u64,
        limit: u64,
        what: &'static str,
    ) -> Result<&[u8], MemProfRawError> {
        let available = limit.saturating_sub(offset);
        if len > available {
            return Err(self.truncated(offset, what, len, available));
        }
        // offset + len <= limit <= data.len(), so these fit usize.
        Ok(&self.data[offset as usize..(offset + len) as usize])
    }

    fn u64_at(&self, offset: u64, limit: u64, what: &'static str) -> Result<u64, MemProfRawError> {
        let b = self.bytes(offset, 8, limit, what)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }

    fn dump(&mut self, start: u64) -> Result<Dump, MemProfRawError> {
        let file_end = self.data.len() as u64;
        let header = self.bytes(start, HEADER_SIZE, file_end, "dump header")?;
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&header[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        let (magic, version, total_size) = (word(0), word(1), word(2));
        let (segment_offset, mib_offset, stack_offset) = (word(3), word(4), word(5));
        if magic != MEMPROF_RAW_MAGIC {
            return Err(MemProfRawError::BadMagic {
                path: self.path.clone(),
                offset: start,
                found: magic,
                expected: MEMPROF_RAW_MAGIC,
            });
        }
        if !SUPPORTED_VERSIONS.contains(&version) {
            return Err(MemProfRawError::UnsupportedVersion {
                path: self.path.clone(),
                offset: start + 8,
                version,
            });
        }
        let available = file_end - start;
        if total_size > available {
            return Err(self.truncated(start, "dump (header TotalSize)", total_size, available));
        }
        if !total_size.is_multiple_of(8) || total_size < HEADER_SIZE {
            return Err(self.corrupt(
                start + 16,
                format!("TotalSize {total_size} is not a multiple of 8 of at least {HEADER_SIZE}"),
            ));
        }
        if segment_offset != HEADER_SIZE
            || !(segment_offset < mib_offset
                && mib_offset < stack_offset
                && stack_offset < total_size)
        {
            return Err(self.corrupt(
                start + 24,
                format!(
                    "section offsets out of order or out of the dump: segments {segment_offset}, \
                     MIBs {mib_offset}, stacks {stack_offset}, total size {total_size}"
                ),
            ));
        }
        let end = start + total_size;
        let (segments, seg_end) = self.segments(start + segment_offset, end)?;
        self.expect_section_end(seg_end, start + mib_offset, "segment")?;
        let (mibs, mib_end) = self.mibs(start + mib_offset, end, version)?;
        self.expect_section_end(mib_end, start + stack_offset, "MIB")?;
        let (stacks, stack_end) = self.stacks(start + stack_offset, end)?;
        self.expect_section_end(stack_end, end, "stack")?;
        for (id, _) in &mibs {
            if !stacks.contains_key(id) {
                return Err(self.corrupt(
                    start + mib_offset,
                    format!("MIB stack id {id:#x} has no call stack in the stack section"),
                ));
            }
        }
        Ok(Dump {
            version,
            total_size,
            segments,
            mibs,
            stacks,
        })
    }

    fn expect_section_end(
        &self,
        parsed_end: u64,
        declared_end: u64,
        section: &str,
    ) -> Result<(), MemProfRawError> {
        if align8(parsed_end) != declared_end {
            return Err(self.corrupt(
                parsed_end,
                format!(
                    "{section} section ends at {} (padded) but the next starts at {declared_end}",
                    align8(parsed_end)
                ),
            ));
        }
        Ok(())
    }

    /// Reads a section's entry count, checking `count * min_entry_size` fits before `end`.
    fn count(
        &self,
        at: u64,
        end: u64,
        min_entry_size: u64,
        what: &'static str,
    ) -> Result<u64, MemProfRawError> {
        let n = self.u64_at(at, end, what)?;
        let room = end.saturating_sub(at + 8);
        if n.checked_mul(min_entry_size).is_none_or(|need| need > room) {
            return Err(self.truncated(at, what, n.saturating_mul(min_entry_size), room));
        }
        Ok(n)
    }

    fn segments(&self, at: u64, end: u64) -> Result<(Vec<SegmentEntry>, u64), MemProfRawError> {
        let n = self.count(at, end, SEGMENT_ENTRY_SIZE, "segment entries")?;
        let mut out = Vec::with_capacity(n as usize);
        let mut pos = at + 8;
        for _ in 0..n {
            let e = self.bytes(pos, SEGMENT_ENTRY_SIZE, end, "segment entry")?;
            let word = |i: usize| {
                let mut w = [0u8; 8];
                w.copy_from_slice(&e[i * 8..i * 8 + 8]);
                u64::from_le_bytes(w)
            };
            let size = word(3);
            if size > 32 {
                return Err(self.corrupt(
                    pos + 24,
                    format!("segment build id size {size} is above 32"),
                ));
            }
            out.push(SegmentEntry {
                start: word(0),
                end: word(1),
                offset: word(2),
                build_id: BuildId(e[32..32 + size as usize].to_vec()),
            });
            pos += SEGMENT_ENTRY_SIZE;
        }
        Ok((out, pos))
    }

    fn mibs(
        &self,
        at: u64,
        end: u64,
        version: u64,
    ) -> Result<(Vec<(u64, MemInfoBlock)>, u64), MemProfRawError> {
        let entry = 8 + MIB_SIZE_V4 as u64;
        let n = self.count(at, end, entry, "MIB entries")?;
        let entry_width = if version == 4 { 8 } else { 2 };
        let mut out = Vec::with_capacity(n as usize);
        let mut pos = at + 8;
        for _ in 0..n {
            let id = self.u64_at(pos, end, "MIB stack id")?;
            let block = self.bytes(pos + 8, MIB_SIZE_V4 as u64, end, "MemInfoBlock")?;
            let mut mib = MemInfoBlock::from_packed(block)
                .ok_or_else(|| self.truncated(pos + 8, "MemInfoBlock", 132, block.len() as u64))?;
            let hist_at = pos + 8 + 132;
            let hist_len = u64::from(u32::from_le_bytes(
                block[132..136].try_into().unwrap_or([0; 4]),
            ));
            if hist_len > MAX_HISTOGRAM_ENTRIES {
                return Err(MemProfRawError::TooLarge {
                    path: self.path.clone(),
                    offset: hist_at,
                    what: "AccessHistogramSize",
                    value: hist_len,
                    max: MAX_HISTOGRAM_ENTRIES,
                });
            }
            pos += entry;
            let hist = self.bytes(pos, hist_len * entry_width, end, "access histogram")?;
            mib.access_histogram = if version == 4 {
                hist.chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                    .collect()
            } else {
                hist.chunks_exact(2)
                    .map(|c| decode_histogram_count(u16::from_le_bytes([c[0], c[1]])))
                    .collect()
            };
            pos += hist_len * entry_width;
            out.push((id, mib));
        }
        Ok((out, pos))
    }

    #[allow(clippy::type_complexity)]
    fn stacks(&self, at: u64, end: u64) -> Result<(HashMap<u64, Vec<u64>>, u64), MemProfRawError> {
        let n = self.count(at, end, 16, "stack entries")?;
        let mut out = HashMap::with_capacity(n as usize);
        let mut pos = at + 8;
        for _ in 0..n {
            let id = self.u64_at(pos, end, "stack id")?;
            let depth = self.u64_at(pos + 8, end, "stack PC count")?;
            if depth > MAX_STACK_DEPTH {
                return Err(MemProfRawError::TooLarge {
                    path: self.path.clone(),
                    offset: pos + 8,
                    what: "stack PC count",
                    value: depth,
                    max: MAX_STACK_DEPTH,
                });
            }
            let pcs = self.bytes(pos + 16, depth * 8, end, "stack PCs")?;
            let pcs: Vec<u64> = pcs
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect();
            if out.insert(id, pcs).is_some() {
                return Err(self.corrupt(pos, format!("stack id {id:#x} appears twice")));
            }
            pos += 16 + depth * 8;
        }
        Ok((out, pos))
    }
}

/// Builds raw profile bytes (tests and fixtures): one dump of `version` with the given parts.
/// MIB histograms are written in the version's encoding (v5 entries must be encodable).
pub fn write_raw_profile(
    version: u64,
    segments: &[SegmentEntry],
    mibs: &[(u64, MemInfoBlock)],
    stacks: &[(u64, Vec<u64>)],
) -> Vec<u8> {
    fn pad(v: &mut Vec<u8>) {
        while !v.len().is_multiple_of(8) {
            v.push(0);
        }
    }
    let mut seg = (segments.len() as u64).to_le_bytes().to_vec();
    for s in segments {
        for w in [s.start, s.end, s.offset, s.build_id.0.len() as u64] {
            seg.extend_from_slice(&w.to_le_bytes());
        }
        let mut id = [0u8; 32];
        let n = s.build_id.0.len().min(32);
        id[..n].copy_from_slice(&s.build_id.0[..n]);
        seg.extend_from_slice(&id);
    }
    pad(&mut seg);
    let mut mib = (mibs.len() as u64).to_le_bytes().to_vec();
    for (id, m) in mibs {
        mib.extend_from_slice(&id.to_le_bytes());
        for (i, (_, v)) in m.fields().iter().enumerate() {
            if [1, 2, 3, 4, 9, 18, 19, 22].contains(&i) {
                mib.extend_from_slice(&v.to_le_bytes());
            } else {
                mib.extend_from_slice(&(*v as u32).to_le_bytes());
            }
        }
        mib.extend_from_slice(&(m.access_histogram.len() as u32).to_le_bytes());
        mib.extend_from_slice(&0u64.to_le_bytes());
        for &h in &m.access_histogram {
            if version == 4 {
                mib.extend_from_slice(&h.to_le_bytes());
            } else {
                let e = super::histogram::encode_histogram_count(h);
                mib.extend_from_slice(&e.to_le_bytes());
            }
        }
    }
    pad(&mut mib);
    let mut stk = (stacks.len() as u64).to_le_bytes().to_vec();
    for (id, pcs) in stacks {
        stk.extend_from_slice(&id.to_le_bytes());
        stk.extend_from_slice(&(pcs.len() as u64).to_le_bytes());
        for pc in pcs {
            stk.extend_from_slice(&pc.to_le_bytes());
        }
    }
    pad(&mut stk);
    let mib_offset = HEADER_SIZE + seg.len() as u64;
    let stack_offset = mib_offset + mib.len() as u64;
    let total = stack_offset + stk.len() as u64;
    let mut out = Vec::with_capacity(total as usize);
    for w in [
        MEMPROF_RAW_MAGIC,
        version,
        total,
        HEADER_SIZE,
        mib_offset,
        stack_offset,
    ] {
        out.extend_from_slice(&w.to_le_bytes());
    }
    out.extend_from_slice(&seg);
    out.extend_from_slice(&mib);
    out.extend_from_slice(&stk);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(version: u64) -> Vec<u8> {
        let seg = SegmentEntry {
            start: 0x1000,
            end: 0x2000,
            offset: 0x0,
            build_id: BuildId(vec![0xab; 20]),
        };
        let mib = MemInfoBlock {
            alloc_count: 3,
            total_size: 192,
            min_size: 64,
            max_size: 64,
            access_histogram: vec![1, 5000, 0],
            ..Default::default()
        };
        write_raw_profile(version, &[seg], &[(7, mib)], &[(7, vec![0x1234, 0x1500])])
    }

    #[test]
    fn header_bytes_and_round_trip_v4_v5() {
        for version in [4, 5] {
            let bytes = sample(version);
            assert_eq!(
                &bytes[..8],
                &[0x81, 0x72, 0x66, 0x6f, 0x72, 0x70, 0x6d, 0xff]
            );
            let p = RawMemProfile::parse(Path::new("t"), &bytes).unwrap();
            assert_eq!(p.version, version);
            assert_eq!(p.segments[0].build_id, BuildId(vec![0xab; 20]));
            assert_eq!(p.mibs.len(), 1);
            assert_eq!(p.mibs[0].1.alloc_count, 3);
            // v5 stores 5000 as mantissa 2500 << 1.
            assert_eq!(p.mibs[0].1.access_histogram, vec![1, 5000, 0]);
            assert_eq!(p.stacks[&7], vec![0x1234, 0x1500]);
        }
        // Histogram: v4 3 × 8 bytes, v5 3 × 2 bytes padded to 8.
        assert_eq!(sample(4).len() - sample(5).len(), 16);
    }

    #[test]
    fn two_dumps_merge_by_stack_id() {
        let mut bytes = sample(5);
        bytes.extend_from_slice(&sample(5));
        let p = RawMemProfile::parse(Path::new("t"), &bytes).unwrap();
        assert_eq!(p.dumps, 2);
        assert_eq!(p.mibs.len(), 1);
        assert_eq!(p.mibs[0].1.alloc_count, 6);
        assert_eq!(p.mibs[0].1.access_histogram, vec![2, 10000, 0]);
    }

    #[test]
    fn every_truncation_is_rejected() {
        let bytes = sample(4);
        for len in 0..bytes.len() {
            let err = RawMemProfile::parse(Path::new("t.raw"), &bytes[..len]).unwrap_err();
            let msg = err.to_string();
            assert!(msg.starts_with("t.raw: offset "), "{msg}");
            assert!(
                matches!(err, MemProfRawError::Truncated { .. }),
                "len {len}: {msg}"
            );
        }
    }

    #[test]
    fn bad_magic_version_and_counts_are_named() {
        let mut b = sample(5);
        b[0] ^= 1;
        let e = RawMemProfile::parse(Path::new("f"), &b).unwrap_err();
        assert!(
            matches!(e, MemProfRawError::BadMagic { offset: 0, .. }),
            "{e}"
        );

        let mut b = sample(5);
        b[8] = 3;
        let e = RawMemProfile::parse(Path::new("f"), &b).unwrap_err();
        assert_eq!(
            e.to_string(),
            "f: offset 8: unsupported raw MemProf version 3 (supported: 4 from clang 19, 5 from clang 22)"
        );

        // Histogram size 3 -> 4: the MIB section no longer ends where the stacks begin.
        let mut b = sample(4);
        let hist_size_at = 48 + 8 + 64 + 8 + 8 + 132;
        assert_eq!(b[hist_size_at], 3);
        b[hist_size_at] = 4;
        let e = RawMemProfile::parse(Path::new("f"), &b).unwrap_err();
        assert!(e.to_string().contains("MIB section ends at"), "{e}");

        // Huge segment count.
        let mut b = sample(4);
        b[48 + 7] = 0x80;
        let e = RawMemProfile::parse(Path::new("f"), &b).unwrap_err();
        assert!(
            matches!(e, MemProfRawError::Truncated { offset: 48, .. }),
            "{e}"
        );

        // Unknown stack id in a MIB.
        let mut b = sample(4);
        b[48 + 8 + 64 + 8] = 8;
        let e = RawMemProfile::parse(Path::new("f"), &b).unwrap_err();
        assert!(e.to_string().contains("has no call stack"), "{e}");
    }
}

//! Pipe-mode perf.data, as `perf record -o -` and `perf inject -o -` write it: a 16-byte
//! header (`PERFILE2`, size 16) and one stream of records. What a file-mode perf.data keeps
//! in sections comes as records of perf's own: the attrs as HEADER_ATTR, the features as
//! HEADER_FEATURE (both at the start of the stream), the build ids as HEADER_BUILD_ID
//! (`perf inject -b` writes one where a DSO is first hit), the tracing data of tracepoint
//! events after a HEADER_TRACING_DATA record.
//!
//! [`check_pipe_stream`] walks the records before linux-perf-data reads the stream. The
//! stream carries no length of its own, so a file cut inside a record fails here, with the
//! offset of that record, instead of reading as a shorter recording (a cut between two
//! records looks like the end of the stream, to perf as to us). The walk also checks what
//! drives allocation or parsing in the container reader (attr sizes, the EVENT_DESC and
//! CMDLINE counts, AUXTRACE and tracing data sizes), and collects the attrs, the build ids
//! and where the tracing data lies (bytes outside any record, which the container reader
//! must not see).

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use linux_perf_data::Feature;

use super::build_id_events::{parse_build_id_event, BUILD_ID_EVENT_HEAD};
use super::error::PerfDataError;
use super::header::{le32, le64, FileSection, RawAttr};
use super::metadata_checks::{check_attr, check_event_desc, check_string_list, EventDescEntry};
use crate::BuildIdEntry;

/// Size of `struct perf_pipe_file_header` (magic, size): what its size field says.
pub(super) const PIPE_HEADER_SIZE: u64 = 16;

/// perf's own record types (`enum perf_user_event_type`) the checks look into.
pub(super) mod user_record {
    /// PERF_RECORD_HEADER_ATTR: `perf_event_attr` + the u64 ids of its events.
    pub const HEADER_ATTR: u32 = 64;
    /// PERF_RECORD_HEADER_TRACING_DATA: `u32 size; u32 pad`, then `size` bytes of tracing
    /// data outside the record.
    pub const HEADER_TRACING_DATA: u32 = 66;
    /// PERF_RECORD_HEADER_BUILD_ID: one build id event.
    pub const HEADER_BUILD_ID: u32 = 67;
    /// PERF_RECORD_AUXTRACE: `u64 size; ...`, then `size` bytes of AUX data outside the
    /// record.
    pub const AUXTRACE: u32 = 71;
    /// PERF_RECORD_HEADER_FEATURE: `u64 feature id` + the feature section's bytes.
    pub const HEADER_FEATURE: u32 = 80;
}

/// What the walk of a pipe-mode stream found.
#[derive(Debug, Default)]
pub(super) struct PipeStream {
    /// The attrs of the HEADER_ATTR records, in stream order (linux-perf-data's order).
    pub attrs: Vec<RawAttr>,
    /// The HEADER_BUILD_ID entries, in stream order.
    pub build_ids: Vec<BuildIdEntry>,
    /// The tracing data after each HEADER_TRACING_DATA record, in file order.
    pub tracing_data: Vec<FileSection>,
    /// The events of the (last) EVENT_DESC feature record.
    pub event_desc: Vec<EventDescEntry>,
}

/// The attrs' names, as perf gives them in pipe mode (`evlist__set_event_name`): each named
/// EVENT_DESC event names the attr whose HEADER_ATTR ids (`attr_ids[i]` for attr `i`) hold
/// its first id, or the first attr when there is only one or that id is 0 or missing (as in
/// `perf inject -o -` of an older recording, whose EVENT_DESC carries no ids); an attr keeps
/// the first name it gets.
pub(super) fn event_names(events: &[EventDescEntry], attr_ids: &[&[u64]]) -> Vec<Option<String>> {
    let mut names = vec![None; attr_ids.len()];
    for event in events {
        let Some(name) = &event.name else {
            continue;
        };
        let id = event.first_id.unwrap_or(0);
        let attr = if attr_ids.len() == 1 || id == 0 {
            Some(0)
        } else {
            attr_ids.iter().position(|ids| ids.contains(&id))
        };
        if let Some(slot) = attr.and_then(|a| names.get_mut(a)) {
            slot.get_or_insert_with(|| name.clone());
        }
    }
    names
}

/// Walks the records of the pipe-mode perf.data `file` (`len` bytes, header checked) from
/// the end of its header to the end of the file.
pub(super) fn check_pipe_stream(
    path: &Path,
    file: &mut File,
    len: u64,
) -> Result<PipeStream, PerfDataError> {
    let io = |source| PerfDataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let corrupt = |offset, what| PerfDataError::Corrupt {
        path: path.to_path_buf(),
        offset,
        what,
    };
    let mut r = BufReader::with_capacity(1 << 16, &mut *file);
    r.seek(SeekFrom::Start(PIPE_HEADER_SIZE)).map_err(io)?;
    let mut stream = PipeStream::default();
    // linux-perf-data takes the attrs and features of the records before the first other
    // one; it reads later ones as records of their own.
    let mut in_prefix = true;
    let mut pos = PIPE_HEADER_SIZE;
    let mut record = Vec::new();
    while pos < len {
        let left = len - pos;
        if left < 8 {
            return Err(corrupt(
                pos,
                format!("the file ends {left} bytes into an 8-byte record header: truncated"),
            ));
        }
        let mut h = [0u8; 8];
        r.read_exact(&mut h).map_err(io)?;
        let kind = le32(&h[..4]);
        let size = u64::from(u16::from_le_bytes([h[6], h[7]]));
        if size < 8 {
            return Err(corrupt(
                pos + 6,
                format!("record size {size}, less than its 8-byte header"),
            ));
        }
        if size > left {
            return Err(corrupt(
                pos,
                format!(
                    "record of type {kind} and {size} bytes ends past the end of the \
                     {len}-byte file: truncated"
                ),
            ));
        }
        let looked_into = [
            user_record::HEADER_ATTR,
            user_record::HEADER_TRACING_DATA,
            user_record::HEADER_BUILD_ID,
            user_record::AUXTRACE,
            user_record::HEADER_FEATURE,
        ];
        if !looked_into.contains(&kind) {
            r.seek_relative(size as i64 - 8).map_err(io)?;
            in_prefix = false;
            pos += size;
            continue;
        }
        record.clear();
        record.extend_from_slice(&h);
        record.resize(size as usize, 0);
        r.read_exact(&mut record[8..]).map_err(io)?;
        let body = &record[8..];
        let body_at = pos + 8;
        // Bytes after the record that belong to it (AUX data, tracing data).
        let mut trailing = 0u64;
        match kind {
            user_record::HEADER_ATTR => {
                if !in_prefix {
                    return Err(PerfDataError::Unsupported {
                        path: path.to_path_buf(),
                        what: format!(
                            "pipe-mode HEADER_ATTR record at offset {pos} after the first event \
                             record (an event added mid-stream)"
                        ),
                    });
                }
                // The attr is `size` bytes, the ids fill the rest of the record.
                let attr_size = body.get(4..8).map_or(0, le32) as usize;
                if !(64..=body.len()).contains(&attr_size) {
                    return Err(corrupt(
                        body_at + 4,
                        format!("attr size {attr_size} out of range [64, {}]", body.len()),
                    ));
                }
                let attr = check_attr(&body[..attr_size])
                    .map_err(|(at, what)| corrupt(body_at + at, what))?;
                let ids = body.len() - attr_size;
                if !ids.is_multiple_of(8) {
                    return Err(corrupt(
                        pos,
                        format!(
                            "HEADER_ATTR record of {size} bytes: {ids} bytes of ids after the \
                             {}-byte attr, not a whole number of u64",
                            attr.size
                        ),
                    ));
                }
                stream.attrs.push(attr);
            }
            user_record::HEADER_FEATURE if in_prefix => {
                let Some(id) = body.get(..8).map(le64) else {
                    return Err(corrupt(
                        pos,
                        format!("HEADER_FEATURE record of {size} bytes, at least 16 needed"),
                    ));
                };
                // linux-perf-data sizes vectors from the counts in these two features
                // before it reads them.
                let data = &body[8..];
                let at = |(at, what)| corrupt(body_at + 8 + at, what);
                if id == u64::from(Feature::EVENT_DESC.0) {
                    stream.event_desc = check_event_desc(data).map_err(at)?;
                } else if id == u64::from(Feature::CMDLINE.0) {
                    check_string_list(data, 0).map_err(at)?;
                }
            }
            user_record::HEADER_BUILD_ID => {
                if record.len() < BUILD_ID_EVENT_HEAD {
                    return Err(corrupt(
                        pos + 6,
                        format!(
                            "HEADER_BUILD_ID record of {size} bytes, at least \
                             {BUILD_ID_EVENT_HEAD} needed"
                        ),
                    ));
                }
                stream.build_ids.push(parse_build_id_event(&record));
            }
            user_record::AUXTRACE => {
                trailing = body.get(..8).map(le64).ok_or_else(|| {
                    corrupt(
                        pos,
                        format!("AUXTRACE record of {size} bytes, at least 16 needed"),
                    )
                })?;
            }
            user_record::HEADER_TRACING_DATA => {
                trailing = body.get(..4).map(le32).map(u64::from).ok_or_else(|| {
                    corrupt(
                        pos,
                        format!("HEADER_TRACING_DATA record of {size} bytes, at least 12 needed"),
                    )
                })?;
                stream.tracing_data.push(FileSection {
                    offset: pos + size,
                    size: trailing,
                });
            }
            _ => {}
        }
        if kind != user_record::HEADER_ATTR && kind != user_record::HEADER_FEATURE {
            in_prefix = false;
        }
        let next = pos + size;
        if trailing > len - next {
            return Err(corrupt(
                body_at,
                format!(
                    "record of type {kind} followed by {trailing} bytes of data, past the end \
                     of the {len}-byte file: truncated"
                ),
            ));
        }
        r.seek_relative(trailing as i64).map_err(io)?;
        pos = next + trailing;
    }
    if stream.attrs.is_empty() {
        return Err(corrupt(
            PIPE_HEADER_SIZE,
            "pipe-mode stream without a HEADER_ATTR record before its first event record".into(),
        ));
    }
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_data::header::{FileHeader, FILE_HEADER_SIZE, MAGIC};
    use crate::perf_data::{read_perf_data, write_perf_data};
    use crate::{BuildId, CommEvent, EventDescription, LbrEntry, Mmap2Event, PerfEvent};
    use crate::{Recording, Sample, SideBandEvent};

    fn scratch(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!(
            "collector-pipe-mode-{name}-{}.data",
            std::process::id()
        ))
    }

    /// A recording with side-band records, LBR samples and a build id.
    fn recording() -> Recording {
        let base = 0x5555_5555_6000u64;
        let sample = |time: u64| Sample {
            pid: 7,
            tid: 7,
            time,
            ip: base + time,
            callchain: vec![base + time, base + 0x100],
            lbr: vec![LbrEntry {
                from: base + 0x20,
                to: base + 0x10,
                flags: 2,
            }],
            count: 1,
            user_stack: None,
        };
        Recording {
            event: EventDescription::intel_taken_branches(1009, true),
            build_ids: vec![crate::BuildIdEntry {
                pid: -1,
                build_id: BuildId(vec![0xab; 20]),
                filename: "/usr/bin/prog".into(),
            }],
            events: vec![
                PerfEvent::SideBand(SideBandEvent::Comm(CommEvent {
                    pid: 7,
                    tid: 7,
                    comm: "prog".into(),
                    exec: true,
                })),
                PerfEvent::SideBand(SideBandEvent::Mmap2(Mmap2Event {
                    pid: 7,
                    tid: 7,
                    addr: base,
                    len: 0x3000,
                    pgoff: 0,
                    prot: 5,
                    flags: 2,
                    maj: 8,
                    min: 1,
                    ino: 99,
                    ino_generation: 0,
                    build_id: None,
                    filename: "/usr/bin/prog".into(),
                })),
                PerfEvent::Sample(sample(0x40)),
                PerfEvent::Sample(sample(0x80)),
            ],
            cmdline: vec!["prog".into()],
        }
    }

    /// A perf record: `perf_event_header` (misc 0) + `body`.
    fn record(kind: u32, body: &[u8]) -> Vec<u8> {
        let mut out = kind.to_le_bytes().to_vec();
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&((8 + body.len()) as u16).to_le_bytes());
        out.extend_from_slice(body);
        out
    }

    /// The pipe-mode stream `perf inject -b -o -` writes for a file-mode perf.data: its
    /// attrs as HEADER_ATTR records, its features as HEADER_FEATURE records, its build ids
    /// as HEADER_BUILD_ID records, then its data section. Returns the stream and where the
    /// data section starts in it.
    fn pipe_of(file: &[u8]) -> (Vec<u8>, usize) {
        let header = FileHeader::parse(file[..FILE_HEADER_SIZE as usize].try_into().unwrap());
        let section = |s: FileSection| &file[s.offset as usize..s.end() as usize];
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&PIPE_HEADER_SIZE.to_le_bytes());
        for entry in section(header.attrs).chunks(header.attr_size as usize) {
            let attr_len = entry.len() - 16;
            let size = le32(&entry[4..8]) as usize;
            let mut body = entry[..size].to_vec();
            body.extend_from_slice(section(FileSection::parse(&entry[attr_len..])));
            out.extend(record(user_record::HEADER_ATTR, &body));
        }
        let mut build_ids = Vec::new();
        for (i, bit) in header.feature_bits().enumerate() {
            let at = header.data.end() as usize + i * 16;
            let data = section(FileSection::parse(&file[at..at + 16]));
            if bit == Feature::BUILD_ID.0 {
                build_ids = data.to_vec();
                continue;
            }
            let mut body = u64::from(bit).to_le_bytes().to_vec();
            body.extend_from_slice(data);
            out.extend(record(user_record::HEADER_FEATURE, &body));
        }
        let mut pos = 0;
        while pos < build_ids.len() {
            let size = u16::from_le_bytes([build_ids[pos + 6], build_ids[pos + 7]]) as usize;
            out.extend(record(
                user_record::HEADER_BUILD_ID,
                &build_ids[pos + 8..pos + size],
            ));
            let at = out.len() - size + 4;
            out[at..at + 2].copy_from_slice(&build_ids[pos + 4..pos + 6]);
            pos += size;
        }
        let data_at = out.len();
        out.extend_from_slice(section(header.data));
        (out, data_at)
    }

    fn written_pipe(name: &str) -> (Recording, Vec<u8>, usize) {
        let path = scratch(name);
        write_perf_data(&path, &recording()).unwrap();
        let file = read_perf_data(&path).unwrap();
        let (pipe, data_at) = pipe_of(&std::fs::read(&path).unwrap());
        std::fs::remove_file(&path).unwrap();
        (file, pipe, data_at)
    }

    fn read(name: &str, bytes: &[u8]) -> Result<Recording, String> {
        let path = scratch(name);
        std::fs::write(&path, bytes).unwrap();
        let read = read_perf_data(&path).map_err(|e| e.to_string());
        std::fs::remove_file(&path).unwrap();
        if let Err(e) = &read {
            assert!(e.starts_with(path.to_str().unwrap()), "{e}");
        }
        read
    }

    #[test]
    fn pipe_copy_of_a_written_file_reads_the_same() {
        let (file, pipe, _) = written_pipe("same");
        let back = read("same", &pipe).unwrap();
        assert_eq!(back.events, file.events);
        assert_eq!(back.event, file.event);
        assert_eq!(back.cmdline, file.cmdline);
        assert_eq!(back.build_ids, file.build_ids);
        assert_eq!(back.build_ids.len(), 1);
    }

    #[test]
    fn tracing_data_after_its_record_is_stepped_over() {
        let (file, pipe, data_at) = written_pipe("tracing");
        let mut with = pipe[..data_at].to_vec();
        with.extend(record(
            user_record::HEADER_TRACING_DATA,
            &[24, 0, 0, 0, 0, 0, 0, 0],
        ));
        with.extend([0xff; 24]);
        with.extend_from_slice(&pipe[data_at..]);
        assert_eq!(read("tracing", &with).unwrap().events, file.events);
        // The tracing data cut short.
        let cut = data_at + 16 + 10;
        let err = read("tracing-cut", &with[..cut]).unwrap_err();
        assert!(
            err.contains(&format!(
                "offset {}: record of type 66 followed by 24 bytes of data, past the end of \
                 the {cut}-byte file: truncated",
                data_at + 8
            )),
            "{err}"
        );
    }

    #[test]
    fn cut_inside_a_record_names_its_offset() {
        let (_, pipe, data_at) = written_pipe("cut");
        // The first data record (COMM) cut after 20 of its bytes.
        let err = read("cut", &pipe[..data_at + 20]).unwrap_err();
        assert!(
            err.contains(&format!("offset {data_at}: record of type 3 and ")),
            "{err}"
        );
        assert!(err.ends_with("truncated"), "{err}");
        let err = read("cut-header", &pipe[..data_at + 5]).unwrap_err();
        assert!(
            err.contains(&format!(
                "offset {data_at}: the file ends 5 bytes into an 8-byte record header"
            )),
            "{err}"
        );
    }

    #[test]
    fn attr_after_the_first_event_record_is_unsupported() {
        let (_, pipe, _) = written_pipe("late-attr");
        let attr_len = u16::from_le_bytes([pipe[22], pipe[23]]) as usize;
        let mut late = pipe.clone();
        late.extend_from_slice(&pipe[16..16 + attr_len]);
        let err = read("late-attr", &late).unwrap_err();
        assert!(
            err.contains(&format!(
                "unsupported: pipe-mode HEADER_ATTR record at offset {} after the first event",
                pipe.len()
            )),
            "{err}"
        );
    }

    #[test]
    fn attr_size_between_versions_is_corrupt() {
        let (_, mut pipe, _) = written_pipe("attr-size");
        pipe[16 + 8 + 4..16 + 8 + 8].copy_from_slice(&70u32.to_le_bytes());
        let err = read("attr-size", &pipe).unwrap_err();
        assert!(
            err.contains("offset 28: attr size 70 is not a perf_event_attr version size"),
            "{err}"
        );
        pipe[16 + 8 + 4..16 + 8 + 8].copy_from_slice(&4000u32.to_le_bytes());
        let err = read("attr-size", &pipe).unwrap_err();
        assert!(
            err.contains("offset 28: attr size 4000 out of range"),
            "{err}"
        );
    }

    /// The count checks of file mode apply to the feature records: an EVENT_DESC `nr` of
    /// 0xffffffff would make linux-perf-data reserve 4G attribute descriptions.
    #[test]
    fn event_desc_count_past_its_record_is_corrupt() {
        let (_, mut pipe, data_at) = written_pipe("event-desc");
        let mut pos = 16;
        while pos < data_at {
            let size = u16::from_le_bytes([pipe[pos + 6], pipe[pos + 7]]) as usize;
            if le32(&pipe[pos..]) == user_record::HEADER_FEATURE
                && le64(&pipe[pos + 8..]) == u64::from(Feature::EVENT_DESC.0)
            {
                break;
            }
            pos += size;
        }
        assert!(pos < data_at);
        pipe[pos + 16..pos + 20].copy_from_slice(&u32::MAX.to_le_bytes());
        let err = read("event-desc", &pipe).unwrap_err();
        assert!(
            err.contains(&format!("offset {}: event_desc nr 4294967295", pos + 16)),
            "{err}"
        );
    }

    /// An AUXTRACE record claiming 2^62 bytes of AUX data: linux-perf-data would size its
    /// record buffer from that.
    #[test]
    fn aux_data_past_the_file_is_corrupt() {
        let (_, mut pipe, _) = written_pipe("auxtrace");
        let at = pipe.len();
        let mut body = vec![0u8; 40];
        body[..8].copy_from_slice(&(1u64 << 62).to_le_bytes());
        pipe.extend(record(user_record::AUXTRACE, &body));
        let err = read("auxtrace", &pipe).unwrap_err();
        assert!(
            err.contains(&format!(
                "offset {}: record of type 71 followed by 4611686018427387904 bytes",
                at + 8
            )),
            "{err}"
        );
    }

    #[test]
    fn record_size_below_its_header_is_corrupt() {
        let (_, mut pipe, _) = written_pipe("size-0");
        let at = pipe.len();
        pipe.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0]);
        let err = read("size-0", &pipe).unwrap_err();
        assert!(
            err.contains(&format!("offset {}: record size 0", at + 6)),
            "{err}"
        );
    }

    #[test]
    fn event_names_follow_perfs_matching() {
        let event = |name: &str, first_id| EventDescEntry {
            name: Some(name.into()),
            first_id,
        };
        // One attr: named whatever the ids.
        assert_eq!(
            event_names(&[event("cycles:u", None)], &[&[0, 0]]),
            [Some("cycles:u".to_string())]
        );
        assert_eq!(
            event_names(&[event("cycles:u", Some(9))], &[&[1]]),
            [Some("cycles:u".to_string())]
        );
        // Two attrs: by id, in any order; id 0 names the first; an unknown id nothing.
        let attrs: [&[u64]; 2] = [&[10, 11], &[20, 21]];
        assert_eq!(
            event_names(&[event("b", Some(21)), event("a", Some(10))], &attrs),
            [Some("a".to_string()), Some("b".to_string())]
        );
        assert_eq!(
            event_names(&[event("a", Some(0)), event("x", Some(99))], &attrs),
            [Some("a".to_string()), None]
        );
        // The first name an attr gets stays.
        assert_eq!(
            event_names(&[event("a", Some(10)), event("b", Some(11))], &attrs),
            [Some("a".to_string()), None]
        );
    }

    #[test]
    fn stream_without_attrs_is_corrupt() {
        let (_, pipe, data_at) = written_pipe("no-attrs");
        let mut bare = pipe[..16].to_vec();
        bare.extend_from_slice(&pipe[data_at..]);
        let err = read("no-attrs", &bare).unwrap_err();
        assert!(
            err.contains("offset 16: pipe-mode stream without a HEADER_ATTR record"),
            "{err}"
        );
        let err = read("header-only", &pipe[..16]).unwrap_err();
        assert!(err.contains("offset 16: pipe-mode stream without"), "{err}");
    }
}

//! [`PerfDataReader`]: a perf.data file, file mode or pipe mode, as a stream of
//! [`PerfEvent`]s, and [`read_perf_data`], the whole file as a [`Recording`].
//!
//! The header and every section (file mode) or every record header (pipe mode,
//! [`super::pipe_mode`]) are checked against the file length first, so truncated or
//! garbage files fail with the offset of the first inconsistency before anything is
//! allocated from their sizes. linux-perf-data then reads the container (features, time
//! ordering with FINISHED_ROUND, zstd); each record body is parsed by [`crate::record`].

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use linux_perf_data::{Feature, PerfFile, PerfFileReader, PerfFileRecord, PerfRecordIter};

use super::build_id_events::parse_build_id_section;
use super::error::PerfDataError;
use super::header::{
    le32, FileHeader, FileSection, RawAttr, FILE_HEADER_SIZE, MAGIC, MAGIC_BIG_ENDIAN,
};
use super::metadata_checks::{check_attr, check_event_desc, check_string_list};
use super::pipe_mode::{check_pipe_stream, event_names, user_record, PipeStream, PIPE_HEADER_SIZE};
use crate::record::{parse_record, sample_type, Record, SampleLayout};
use crate::sample::USER_STACK_REGS_MASK;
use crate::{BuildIdEntry, EventDescription, PerfEvent, Recording};

/// Largest attrs section accepted (attrs drive allocations): 64 Ki attrs of 1 KiB.
pub const MAX_ATTRS_BYTES: u64 = 64 << 20;

/// An open perf.data file: metadata read, records streamed on demand.
pub struct PerfDataReader {
    path: PathBuf,
    perf_file: PerfFile,
    records: PerfRecordIter<Tracked<BufReader<File>>>,
    position: Arc<AtomicU64>,
    layouts: Vec<SampleLayout>,
    /// Per attr: its name (HEADER_EVENT_DESC), when the file has one.
    names: Vec<Option<String>>,
    event: EventDescription,
    build_ids: Vec<BuildIdEntry>,
    cmdline: Vec<String>,
    /// Per attr: are its samples kept ([`Self::keep_samples_of_events`]); `None`: all.
    kept_attrs: Option<Vec<bool>>,
}

impl std::fmt::Debug for PerfDataReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfDataReader")
            .field("path", &self.path)
            .field("event", &self.event)
            .finish_non_exhaustive()
    }
}

/// Reads a whole perf.data file into a [`Recording`] (events in time order; LOST and other
/// records the pipeline does not use are dropped).
pub fn read_perf_data(path: &Path) -> Result<Recording, PerfDataError> {
    PerfDataReader::open(path)?.into_recording()
}

impl PerfDataReader {
    /// Opens `path`, checks its structure, reads header, attrs and features. A pipe-mode
    /// file (`perf record -o - > FILE`, `perf inject -o -`) reads as the file-mode recording
    /// of the same data: same events, attrs, features, and the build ids of its
    /// HEADER_BUILD_ID records.
    pub fn open(path: &Path) -> Result<PerfDataReader, PerfDataError> {
        let io = |source| PerfDataError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let (layout, raw_attrs) = check_structure(path, &mut file, len)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        let position = Arc::new(AtomicU64::new(0));
        let tracked = Tracked {
            inner: BufReader::new(file),
            pos: position.clone(),
            gaps: match &layout {
                Layout::File(_) => VecDeque::new(),
                Layout::Pipe(stream) => stream.tracing_data.iter().copied().collect(),
            },
        };
        let container = match &layout {
            Layout::File(_) => PerfFileReader::parse_file(tracked),
            Layout::Pipe(_) => PerfFileReader::parse_pipe(tracked),
        };
        let PerfFileReader {
            perf_file,
            record_iter,
        } = container.map_err(|source| PerfDataError::Container {
            path: path.to_path_buf(),
            offset: position.load(Ordering::Relaxed),
            source,
        })?;
        let descs = perf_file.event_attributes();
        let layouts: Vec<SampleLayout> = descs
            .iter()
            .map(|d| SampleLayout::from_attr(&d.attr))
            .collect();
        // The sampling event: the first attr with a branch stack, else the first attr.
        let main = raw_attrs
            .iter()
            .position(|a| a.sample_type & sample_type::BRANCH_STACK != 0)
            .unwrap_or(0);
        let attr = raw_attrs[main];
        let names: Vec<Option<String>> = match &layout {
            Layout::File(_) => descs.iter().map(|d| d.name.clone()).collect(),
            Layout::Pipe(stream) => {
                let ids: Vec<&[u64]> = descs.iter().map(|d| d.event_ids.as_slice()).collect();
                event_names(&stream.event_desc, &ids)
            }
        };
        let name = names
            .get(main)
            .cloned()
            .flatten()
            .unwrap_or_else(|| format!("type{}/config={:#x}", attr.type_, attr.config));
        let event = EventDescription {
            name,
            attr_type: attr.type_,
            config: attr.config,
            sample_period: attr.sample_period,
            precise_ip: attr.precise_ip(),
            callchain: attr.sample_type & sample_type::CALLCHAIN != 0,
            branch_stack: attr.sample_type & sample_type::BRANCH_STACK != 0,
            user_stack: attr.sample_type & (sample_type::REGS_USER | sample_type::STACK_USER)
                == sample_type::REGS_USER | sample_type::STACK_USER
                && attr.sample_regs_user & USER_STACK_REGS_MASK == USER_STACK_REGS_MASK,
        };
        let build_ids = match (layout, perf_file.feature_section_data(Feature::BUILD_ID)) {
            (Layout::File(header), Some(data)) => {
                let offset = feature_offset(
                    &header,
                    path,
                    &mut File::open(path).map_err(io)?,
                    Feature::BUILD_ID.0,
                )?;
                parse_build_id_section(data, path, offset)?
            }
            (Layout::File(_), None) => Vec::new(),
            (Layout::Pipe(stream), _) => stream.build_ids,
        };
        let cmdline = perf_file
            .cmdline()
            .ok()
            .flatten()
            .map(|v| v.into_iter().map(str::to_string).collect())
            .unwrap_or_default();
        Ok(PerfDataReader {
            path: path.to_path_buf(),
            perf_file,
            records: record_iter,
            position,
            layouts,
            names,
            event,
            build_ids,
            cmdline,
            kept_attrs: None,
        })
    }

    /// The sampling event (the first attr with a branch stack, else the first attr).
    pub fn event(&self) -> &EventDescription {
        &self.event
    }

    /// Number of attrs (events) in the file; [`Self::next_record`] names them by index.
    pub fn attr_count(&self) -> usize {
        self.layouts.len()
    }

    /// The name of attr `index` (from HEADER_EVENT_DESC), when the file has one.
    pub fn attr_name(&self, index: usize) -> Option<&str> {
        self.names.get(index)?.as_deref()
    }

    /// Keeps only the samples of the events named in `names` (llvm-profgen's
    /// `--perf-event`): an attr's name is its HEADER_EVENT_DESC name as `perf script -F
    /// event` prints it, trailing `:` removed (`cycles:u`, `br_inst_retired.near_taken:uppp`).
    /// Samples of an attr without a name are dropped. Side-band records are all kept.
    pub fn keep_samples_of_events(&mut self, names: &[String]) {
        let kept = (0..self.attr_count())
            .map(|i| {
                self.attr_name(i)
                    .is_some_and(|n| names.iter().any(|k| k == n.trim_end_matches(':')))
            })
            .collect();
        self.kept_attrs = Some(kept);
    }

    /// The record layout of attr `index`.
    pub fn attr_layout(&self, index: usize) -> Option<&SampleLayout> {
        self.layouts.get(index)
    }

    /// The HEADER_BUILD_ID entries, in file order.
    pub fn build_ids(&self) -> &[BuildIdEntry] {
        &self.build_ids
    }

    /// The recorded command line (HEADER_CMDLINE), empty when absent.
    pub fn cmdline(&self) -> &[String] {
        &self.cmdline
    }

    /// The next kernel record in time order with the index of its attr (perf.data's attr
    /// order), or `None` at the end. perf's own user records (FINISHED_ROUND, ...) are skipped.
    pub fn next_record(&mut self) -> Result<Option<(usize, Record)>, PerfDataError> {
        loop {
            let record = self
                .records
                .next_record(&mut self.perf_file)
                .map_err(|source| PerfDataError::Container {
                    path: self.path.clone(),
                    offset: self.position.load(Ordering::Relaxed),
                    source,
                })?;
            let Some(record) = record else {
                return Ok(None);
            };
            let PerfFileRecord::EventRecord { attr_index, record } = record else {
                continue;
            };
            let layout = self.layouts.get(attr_index).copied().unwrap_or_default();
            let body = record.data.as_slice();
            let parsed = parse_record(record.record_type.0, record.misc, &body, &layout).map_err(
                |source| PerfDataError::Record {
                    path: self.path.clone(),
                    offset: self.position.load(Ordering::Relaxed),
                    source,
                },
            )?;
            return Ok(Some((attr_index, parsed)));
        }
    }

    /// The next event the pipeline uses (samples, MMAP/MMAP2, COMM, FORK, EXIT), in time order.
    pub fn next_event(&mut self) -> Result<Option<PerfEvent>, PerfDataError> {
        while let Some((attr, record)) = self.next_record()? {
            if let Some(event) = record.into_perf_event() {
                let dropped = matches!(event, PerfEvent::Sample(_))
                    && self
                        .kept_attrs
                        .as_ref()
                        .is_some_and(|k| !k.get(attr).copied().unwrap_or(false));
                if !dropped {
                    return Ok(Some(event));
                }
            }
        }
        Ok(None)
    }

    /// The events as an iterator (stops after the first error).
    pub fn events(self) -> PerfEvents {
        PerfEvents {
            reader: self,
            done: false,
        }
    }

    /// Reads every event into a [`Recording`].
    pub fn into_recording(mut self) -> Result<Recording, PerfDataError> {
        let mut events = Vec::new();
        while let Some(e) = self.next_event()? {
            events.push(e);
        }
        Ok(Recording {
            event: self.event,
            build_ids: self.build_ids,
            events,
            cmdline: self.cmdline,
        })
    }
}

/// Iterator over a [`PerfDataReader`]'s events; after an error it yields nothing more.
#[derive(Debug)]
pub struct PerfEvents {
    reader: PerfDataReader,
    done: bool,
}

impl PerfEvents {
    /// The reader (event description, build ids, command line).
    pub fn reader(&self) -> &PerfDataReader {
        &self.reader
    }
}

impl Iterator for PerfEvents {
    type Item = Result<PerfEvent, PerfDataError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.reader.next_event() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// A reader that publishes its position, so container errors can name an offset, and
/// steps over `gaps` (pipe mode: the tracing data after HEADER_TRACING_DATA records, which
/// linux-perf-data would take for records).
struct Tracked<R> {
    inner: R,
    pos: Arc<AtomicU64>,
    /// Byte ranges the container reader does not see, in file order.
    gaps: VecDeque<FileSection>,
}

impl<R: Read + Seek> Read for Tracked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut pos = self.pos.load(Ordering::Relaxed);
        let mut limit = buf.len();
        while let Some(gap) = self.gaps.front() {
            if pos < gap.offset {
                limit = (gap.offset - pos).min(limit as u64) as usize;
                break;
            }
            if pos < gap.end() {
                pos = self.inner.seek(SeekFrom::Start(gap.end()))?;
            }
            self.gaps.pop_front();
        }
        let n = self.inner.read(&mut buf[..limit])?;
        self.pos.store(pos + n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl<R: Seek> Seek for Tracked<R> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let p = self.inner.seek(to)?;
        self.pos.store(p, Ordering::Relaxed);
        Ok(p)
    }
}

fn corrupt(path: &Path, offset: u64, what: String) -> PerfDataError {
    PerfDataError::Corrupt {
        path: path.to_path_buf(),
        offset,
        what,
    }
}

fn read_at(path: &Path, file: &mut File, offset: u64, buf: &mut [u8]) -> Result<(), PerfDataError> {
    let io = |source| PerfDataError::Io {
        path: path.to_path_buf(),
        source,
    };
    file.seek(SeekFrom::Start(offset)).map_err(io)?;
    file.read_exact(buf).map_err(io)
}

/// The two layouts of a perf.data file, as the structure checks found them.
enum Layout {
    /// File mode: the header and its sections.
    File(FileHeader),
    /// Pipe mode: what the walk of the record stream found.
    Pipe(PipeStream),
}

/// Checks the header and that every section (file mode) or record (pipe mode) lies inside
/// the file; returns the layout and the attrs (our own parse: type, config, period,
/// precise_ip).
fn check_structure(
    path: &Path,
    file: &mut File,
    len: u64,
) -> Result<(Layout, Vec<RawAttr>), PerfDataError> {
    if len < 16 {
        return Err(corrupt(
            path,
            len,
            format!("file is {len} bytes, too short for a perf.data header"),
        ));
    }
    let mut head = [0u8; 16];
    read_at(path, file, 0, &mut head)?;
    let magic: [u8; 8] = head[..8].try_into().expect("8");
    let size = u64::from_le_bytes(head[8..16].try_into().expect("8"));
    if magic == MAGIC_BIG_ENDIAN {
        return Err(PerfDataError::Unsupported {
            path: path.to_path_buf(),
            what: "big-endian perf.data".into(),
        });
    }
    if magic != MAGIC {
        return Err(corrupt(
            path,
            0,
            format!("bad magic {magic:02x?}, expected \"PERFILE2\""),
        ));
    }
    if size == PIPE_HEADER_SIZE {
        let mut stream = check_pipe_stream(path, file, len)?;
        let attrs = std::mem::take(&mut stream.attrs);
        return Ok((Layout::Pipe(stream), attrs));
    }
    if size != FILE_HEADER_SIZE {
        return Err(corrupt(
            path,
            8,
            format!("header size {size}, expected {FILE_HEADER_SIZE}"),
        ));
    }
    if len < FILE_HEADER_SIZE {
        return Err(corrupt(
            path,
            len,
            format!("file is {len} bytes, shorter than the {FILE_HEADER_SIZE}-byte header"),
        ));
    }
    let mut hb = [0u8; FILE_HEADER_SIZE as usize];
    read_at(path, file, 0, &mut hb)?;
    let header = FileHeader::parse(&hb);
    let within = |s: &FileSection, what: &str, at: u64| -> Result<(), PerfDataError> {
        if s.offset.checked_add(s.size).is_none_or(|end| end > len) {
            return Err(corrupt(
                path,
                at,
                format!(
                    "{what} section [{}, +{}) extends past the end of the {len}-byte file",
                    s.offset, s.size
                ),
            ));
        }
        Ok(())
    };
    if header.attr_size < 64 + 16 || header.attr_size > 4096 {
        return Err(corrupt(
            path,
            16,
            format!("attr_size {} out of range [80, 4096]", header.attr_size),
        ));
    }
    within(&header.attrs, "attrs", 24)?;
    within(&header.data, "data", 40)?;
    if header.attrs.size == 0
        || !header.attrs.size.is_multiple_of(header.attr_size)
        || header.attrs.size > MAX_ATTRS_BYTES
    {
        return Err(corrupt(
            path,
            24,
            format!(
                "attrs section size {} is not a positive multiple of attr_size {}",
                header.attrs.size, header.attr_size
            ),
        ));
    }
    let mut attrs_bytes = vec![0u8; header.attrs.size as usize];
    read_at(path, file, header.attrs.offset, &mut attrs_bytes)?;
    let mut attrs = Vec::new();
    for (i, entry) in attrs_bytes
        .chunks_exact(header.attr_size as usize)
        .enumerate()
    {
        let at = header.attrs.offset + i as u64 * header.attr_size;
        let attr_len = entry.len() - 16;
        let attr =
            check_attr(&entry[..attr_len]).map_err(|(off, what)| corrupt(path, at + off, what))?;
        let ids = FileSection::parse(&entry[attr_len..]);
        within(&ids, "attr ids", at + attr_len as u64)?;
        attrs.push(attr);
    }
    let nfeat = header.feature_bits().count() as u64;
    let table = FileSection {
        offset: header.data.end(),
        size: nfeat * 16,
    };
    within(&table, "feature table", header.data.end())?;
    let mut tb = vec![0u8; table.size as usize];
    read_at(path, file, table.offset, &mut tb)?;
    for (i, bit) in header.feature_bits().enumerate() {
        let s = FileSection::parse(&tb[i * 16..i * 16 + 16]);
        within(&s, &format!("feature {bit}"), table.offset + i as u64 * 16)?;
        // linux-perf-data sizes vectors from the counts in these two sections before it
        // reads them: check every count against the section first.
        if bit == Feature::EVENT_DESC.0 || bit == Feature::CMDLINE.0 {
            let mut data = vec![0u8; s.size as usize];
            read_at(path, file, s.offset, &mut data)?;
            let checked = if bit == Feature::EVENT_DESC.0 {
                check_event_desc(&data).map(|_| ())
            } else {
                check_string_list(&data, 0).map(|_| ())
            };
            checked.map_err(|(at, what)| corrupt(path, s.offset + at, what))?;
        }
    }
    check_auxtrace(path, file, &header.data)?;
    if header.event_types.size != 0 {
        // Legacy event_types: `{ attr[attr_size]; ids section }[]`, read by linux-perf-data
        // when there is no EVENT_DESC feature.
        within(&header.event_types, "event_types", 56)?;
        let entry = header.attr_size + 16;
        for i in 0..header.event_types.size / entry {
            let at = header.event_types.offset + i * entry + header.attr_size;
            let mut b = [0u8; 16];
            read_at(path, file, at, &mut b)?;
            within(&FileSection::parse(&b), "event_types ids", at)?;
        }
    }
    Ok((Layout::File(header), attrs))
}

/// Walks the top-level record headers of the data section: linux-perf-data sizes a buffer
/// from a PERF_RECORD_AUXTRACE's `size` before reading the data, so that data must lie in
/// the section. Other inconsistencies stop the walk (the container reader reports them).
fn check_auxtrace(path: &Path, file: &mut File, data: &FileSection) -> Result<(), PerfDataError> {
    let io = |source| PerfDataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut r = BufReader::with_capacity(1 << 16, &mut *file);
    r.seek(SeekFrom::Start(data.offset)).map_err(io)?;
    let end = data.end();
    let mut pos = data.offset;
    let mut h = [0u8; 16];
    while pos + 16 <= end {
        if r.read_exact(&mut h).is_err() {
            break;
        }
        let size = u64::from(u16::from_le_bytes([h[6], h[7]]));
        if size < 8 {
            break;
        }
        let mut next = pos + size;
        if le32(&h[..4]) == user_record::AUXTRACE {
            let aux = u64::from_le_bytes(h[8..16].try_into().expect("8"));
            match next.checked_add(aux).filter(|&n| n <= end) {
                Some(n) => next = n,
                None => {
                    return Err(corrupt(
                        path,
                        pos + 8,
                        format!(
                        "AUXTRACE record with {aux} bytes of data past the end of the data section"
                    ),
                    ))
                }
            }
        }
        if r.seek_relative(next as i64 - (pos + 16) as i64).is_err() {
            break;
        }
        pos = next;
    }
    Ok(())
}

/// File offset of a feature section (for error messages).
fn feature_offset(
    header: &FileHeader,
    path: &Path,
    file: &mut File,
    bit: u32,
) -> Result<u64, PerfDataError> {
    let Some(i) = header.feature_bits().position(|b| b == bit) else {
        return Ok(0);
    };
    let mut b = [0u8; 16];
    read_at(path, file, header.data.end() + i as u64 * 16, &mut b)?;
    Ok(FileSection::parse(&b).offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_data::write_perf_data;

    /// A valid perf.data written by our writer (with EVENT_DESC and CMDLINE features).
    fn written(name: &str) -> (PathBuf, Vec<u8>) {
        let path = std::env::temp_dir().join(format!(
            "collector-reader-{name}-{}.data",
            std::process::id()
        ));
        let recording = Recording {
            event: EventDescription {
                name: "cpu-clock:u".into(),
                attr_type: 1,
                config: 0,
                sample_period: 10007,
                precise_ip: 0,
                callchain: true,
                branch_stack: false,
                user_stack: false,
            },
            build_ids: Vec::new(),
            events: Vec::new(),
            cmdline: vec!["prog".into(), "arg".into()],
        };
        write_perf_data(&path, &recording).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        (path, bytes)
    }

    /// File offset of feature `bit`'s section (the table follows the data section).
    fn feature_section(bytes: &[u8], bit: u32) -> usize {
        let header = FileHeader::parse(bytes[..FILE_HEADER_SIZE as usize].try_into().unwrap());
        let i = header.feature_bits().position(|b| b == bit).unwrap();
        let at = header.data.end() as usize + i * 16;
        FileSection::parse(&bytes[at..at + 16]).offset as usize
    }

    fn open_error(path: &Path, bytes: &[u8]) -> String {
        std::fs::write(path, bytes).unwrap();
        let err = PerfDataReader::open(path).unwrap_err().to_string();
        std::fs::remove_file(path).unwrap();
        err
    }

    /// Fuzz crash (perf_data target): an EVENT_DESC `nr` of 0xffffffff made linux-perf-data
    /// reserve a vector of 4G attribute descriptions (out of memory) before reading any.
    #[test]
    fn event_desc_count_past_the_section_is_corrupt() {
        let (path, mut bytes) = written("event-desc");
        assert!(PerfDataReader::open(&path).is_ok());
        let at = feature_section(&bytes, Feature::EVENT_DESC.0);
        bytes[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let err = open_error(&path, &bytes);
        assert!(
            err.contains(&format!("offset {at}: event_desc nr 4294967295")),
            "{err}"
        );
    }

    /// Fuzz OOM (perf_data target): an EVENT_DESC attr whose own size field (70) is no
    /// perf_event_attr version size: linux-perf-event-reader reads 64 bytes of it but reports
    /// 70, so the reader lost its place and took attr bytes for `nr_ids` (22 GB of ids).
    #[test]
    fn event_desc_attr_size_between_versions_is_corrupt() {
        let (path, mut bytes) = written("event-desc-attr-size");
        let at = feature_section(&bytes, Feature::EVENT_DESC.0);
        let own = at + 8 + 4;
        bytes[own..own + 4].copy_from_slice(&70u32.to_le_bytes());
        let err = open_error(&path, &bytes);
        assert!(
            err.contains(&format!(
                "offset {own}: event_desc event 0: attr size 70 is not a perf_event_attr version size"
            )),
            "{err}"
        );
    }

    /// Fuzz crash (perf_data target): a PERF_RECORD_AUXTRACE whose `size` says 2^62 bytes of
    /// AUX data follow made linux-perf-data resize its record buffer to that.
    #[test]
    fn auxtrace_past_the_data_section_is_corrupt() {
        let path = std::env::temp_dir().join(format!(
            "collector-reader-auxtrace-{}.data",
            std::process::id()
        ));
        let (_, bytes) = {
            let p = std::env::temp_dir().join(format!(
                "collector-reader-auxtrace-comm-{}.data",
                std::process::id()
            ));
            let rec = Recording {
                event: EventDescription {
                    name: "cpu-clock:u".into(),
                    attr_type: 1,
                    config: 0,
                    sample_period: 10007,
                    precise_ip: 0,
                    callchain: true,
                    branch_stack: false,
                    user_stack: false,
                },
                build_ids: Vec::new(),
                events: vec![PerfEvent::SideBand(crate::SideBandEvent::Comm(
                    crate::CommEvent {
                        pid: 7,
                        tid: 7,
                        comm: "prog".into(),
                        exec: true,
                    },
                ))],
                cmdline: Vec::new(),
            };
            write_perf_data(&p, &rec).unwrap();
            let b = std::fs::read(&p).unwrap();
            std::fs::remove_file(&p).unwrap();
            (p, b)
        };
        let mut bytes = bytes;
        let header = FileHeader::parse(bytes[..FILE_HEADER_SIZE as usize].try_into().unwrap());
        // The first record of the data section becomes an AUXTRACE claiming 2^62 bytes.
        let at = header.data.offset as usize;
        bytes[at..at + 4].copy_from_slice(&user_record::AUXTRACE.to_le_bytes());
        bytes[at + 8..at + 16].copy_from_slice(&(1u64 << 62).to_le_bytes());
        let err = open_error(&path, &bytes);
        assert!(
            err.contains(&format!(
                "offset {}: AUXTRACE record with 4611686018427387904 bytes",
                at + 8
            )),
            "{err}"
        );
    }

    /// Same for the name length inside an EVENT_DESC entry (a 4 GiB string buffer).
    #[test]
    fn event_desc_name_length_past_the_section_is_corrupt() {
        let (path, mut bytes) = written("event-desc-name");
        let at = feature_section(&bytes, Feature::EVENT_DESC.0);
        let attr_size = le32(&bytes[at + 4..at + 8]) as usize;
        let name_len = at + 8 + attr_size + 4;
        bytes[name_len..name_len + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let err = open_error(&path, &bytes);
        assert!(err.contains("name of 4294967295 bytes"), "{err}");
        assert!(err.contains(&format!("offset {}", name_len - 4)), "{err}");
    }

    /// CMDLINE `nr` of 0xffffffff: linux-perf-data reserves nr string slices.
    #[test]
    fn cmdline_count_past_the_section_is_corrupt() {
        let (path, mut bytes) = written("cmdline");
        let at = feature_section(&bytes, Feature::CMDLINE.0);
        bytes[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let err = open_error(&path, &bytes);
        assert!(err.contains("string list of 4294967295"), "{err}");
    }

    /// A legacy event_types section past the end of the file (linux-perf-data sizes a
    /// vector from it when EVENT_DESC is absent).
    #[test]
    fn event_types_past_the_file_is_corrupt() {
        let (path, mut bytes) = written("event-types");
        bytes[56..64].copy_from_slice(&104u64.to_le_bytes());
        bytes[64..72].copy_from_slice(&(1u64 << 62).to_le_bytes());
        let err = open_error(&path, &bytes);
        assert!(err.contains("offset 56: event_types section"), "{err}");
    }
}

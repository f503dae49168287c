//! pprof (`profile.proto` of github.com/google/pprof) from address counters.
//!
//! Messages are derived by hand with prost; field numbers are those of `profile.proto`:
//! `Profile { sample_type = 1, sample = 2, mapping = 3, location = 4, function = 5,
//! string_table = 6, period_type = 11, period = 12, default_sample_type = 14 }`,
//! `ValueType { type = 1, unit = 2 }`, `Sample { location_id = 1, value = 2 }`,
//! `Mapping { id = 1, memory_start = 2, memory_limit = 3, file_offset = 4, filename = 5,
//! build_id = 6, has_functions = 7 }`, `Location { id = 1, mapping_id = 2, address = 3,
//! line = 4 }`, `Line { function_id = 1, line = 2 }`, `Function { id = 1, name = 2,
//! system_name = 3, filename = 4 }`. `string_table[0]` is "".
//!
//! One sample per (context, range): the leaf location is the range's first address, then
//! the context's call sites innermost first (pprof lists the leaf first); the value is the
//! range's count (`executions`, `count`: in LBR mode how often the range ran, in cpu-clock
//! mode the samples at that address). Addresses are preferred (link-time) addresses; each
//! location names the function containing it.

use std::collections::HashMap;

use prost::Message;
use symbolizer::ProfiledBinary;
use unwinder::ContextCounters;

/// `profile.proto` `Profile` (the fields written).
#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    /// Value types of the samples.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// Mapped binaries.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// Locations (addresses).
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Functions.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// All strings; index 0 is "".
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Kind of events between sampled occurrences.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// Events between sampled occurrences.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Index of the default sample type's `type` string.
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// `ValueType`: string-table indexes.
#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    /// Type name index.
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// Unit name index.
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `Sample`.
#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    /// Location ids, leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per sample type.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
}

/// `Mapping`.
#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    /// Id (1-based).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Start address.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// Limit address.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// File offset of `memory_start`.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// File name index.
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// Build id index (hex).
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// True: locations carry functions.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
}

/// `Location`.
#[derive(Clone, PartialEq, Message)]
pub struct Location {
    /// Id (1-based).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Mapping id.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// Address.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Functions at the address (one: the containing function).
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

/// `Line`.
#[derive(Clone, PartialEq, Message)]
pub struct Line {
    /// Function id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// Source line (0: unknown).
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// `Function`.
#[derive(Clone, PartialEq, Message)]
pub struct Function {
    /// Id (1-based).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Name index.
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// System (linkage) name index.
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// File name index.
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

#[derive(Default)]
struct Builder {
    profile: Profile,
    strings: HashMap<String, i64>,
    locations: HashMap<u64, u64>,
    functions: HashMap<String, u64>,
}

impl Builder {
    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.profile.string_table.len() as i64;
        self.profile.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    /// The id of the function named `name`, added on first use.
    fn function(&mut self, name: &str) -> u64 {
        if let Some(&id) = self.functions.get(name) {
            return id;
        }
        let id = self.profile.function.len() as u64 + 1;
        let n = self.string(name);
        self.profile.function.push(Function {
            id,
            name: n,
            system_name: n,
            filename: 0,
        });
        self.functions.insert(name.to_string(), id);
        id
    }

    fn location(&mut self, binary: &ProfiledBinary, addr: u64) -> u64 {
        if let Some(&id) = self.locations.get(&addr) {
            return id;
        }
        let name = binary.function_label(addr);
        let function_id = match self.functions.get(&name) {
            Some(&id) => id,
            None => {
                let id = self.profile.function.len() as u64 + 1;
                let n = self.string(&name);
                self.profile.function.push(Function {
                    id,
                    name: n,
                    system_name: n,
                    filename: 0,
                });
                self.functions.insert(name, id);
                id
            }
        };
        let id = self.profile.location.len() as u64 + 1;
        self.profile.location.push(Location {
            id,
            mapping_id: 1,
            address: addr,
            line: vec![Line {
                function_id,
                line: 0,
            }],
        });
        self.locations.insert(addr, id);
        id
    }
}

/// Builds the pprof profile of `contexts` (call-site addresses outermost first, and their
/// counters) for `binary`.
pub fn build<'a>(
    binary: &ProfiledBinary,
    contexts: impl IntoIterator<Item = (&'a [u64], &'a ContextCounters)>,
) -> Profile {
    let mut b = Builder::default();
    b.string("");
    let (executions, count) = (b.string("executions"), b.string("count"));
    b.profile.sample_type = vec![ValueType {
        r#type: executions,
        unit: count,
    }];
    b.profile.period_type = Some(ValueType {
        r#type: executions,
        unit: count,
    });
    b.profile.period = 1;
    b.profile.default_sample_type = executions;
    let filename = b.string(&binary.path().display().to_string());
    let build_id = b.string(&binary.build_id().map(|i| i.to_hex()).unwrap_or_default());
    b.profile.mapping.push(Mapping {
        id: 1,
        memory_start: 0,
        memory_limit: u64::MAX,
        file_offset: 0,
        filename,
        build_id,
        // No names (an address-only binary): `pprof` symbolizes such a mapping itself.
        has_functions: binary.name_source().has_names(),
    });
    for (key, counters) in contexts {
        for (&(start, _end), &n) in &counters.ranges {
            let mut ids = vec![b.location(binary, start)];
            for &site in key.iter().rev() {
                ids.push(b.location(binary, site));
            }
            b.profile.sample.push(Sample {
                location_id: ids,
                value: vec![n.min(i64::MAX as u64) as i64],
            });
        }
    }
    b.profile
}

/// The encoded bytes of `profile`.
pub fn to_bytes(profile: &Profile) -> Vec<u8> {
    profile.encode_to_vec()
}

/// The encoded bytes of `profile`, gzip-compressed (what `go tool pprof` and the Go
/// runtime write as `*.pb.gz`).
pub fn to_gzip_bytes(profile: &Profile) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing into a Vec cannot fail.
    let _ = gz.write_all(&profile.encode_to_vec());
    gz.finish().unwrap_or_default()
}

/// Why [`from_bytes`] failed.
#[derive(Debug, thiserror::Error)]
pub enum PprofDecodeError {
    /// The gzip stream is corrupt.
    #[error("pprof gzip stream: {0}")]
    Gzip(std::io::Error),
    /// The protobuf message is malformed.
    #[error("pprof protobuf: {0}")]
    Proto(#[from] prost::DecodeError),
}

/// Decodes a profile (plain or gzip-compressed bytes); at most 1 GiB uncompressed.
pub fn from_bytes(bytes: &[u8]) -> Result<Profile, PprofDecodeError> {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        use std::io::Read;
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .take(1 << 30)
            .read_to_end(&mut plain)
            .map_err(PprofDecodeError::Gzip)?;
        return Ok(Profile::decode(plain.as_slice())?);
    }
    Ok(Profile::decode(bytes)?)
}

/// A mapped binary of a heap profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeapMapping {
    /// Start address in the process.
    pub start: u64,
    /// End address (exclusive).
    pub limit: u64,
    /// File offset of `start`.
    pub file_offset: u64,
    /// The file's path.
    pub filename: String,
    /// GNU build id, hex (empty when unknown).
    pub build_id: String,
}

/// One frame of a heap sample.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeapFrame {
    /// Index in the mappings passed to [`build_heap`], if the address is mapped.
    pub mapping: Option<usize>,
    /// Runtime address (the allocator's entry for the leaf, return addresses above).
    pub address: u64,
    /// Function names at the address, innermost (inlined) first; empty when unknown.
    pub functions: Vec<String>,
}

/// One allocation context with its unsampled (estimated) totals.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeapContext {
    /// Frames, leaf first.
    pub frames: Vec<HeapFrame>,
    /// Estimated allocations.
    pub alloc_objects: f64,
    /// Estimated bytes allocated.
    pub alloc_space: f64,
}

/// The in-use estimates of one [`HeapContext`] (allocated and not freed).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HeapInuse {
    /// Estimated allocations in use.
    pub inuse_objects: f64,
    /// Estimated bytes in use.
    pub inuse_space: f64,
}

/// Builds a pprof heap profile: sample types `alloc_objects/count`, `alloc_space/bytes`
/// (values already unsampled, as the Go runtime writes them), period type `space/bytes`
/// with the mean sampling interval as period. Locations are shared per (mapping, address);
/// a location's lines list its inline frames innermost first (profile.proto: the last
/// line is the caller the others were inlined into).
pub fn build_heap(mappings: &[HeapMapping], contexts: &[HeapContext], interval: u64) -> Profile {
    build_heap_profile(mappings, contexts, None, interval)
}

/// [`build_heap`] with `inuse_objects/count` and `inuse_space/bytes` after the alloc
/// values (the Go runtime's order); `inuse[i]` belongs to `contexts[i]` (missing: 0).
pub fn build_heap_with_inuse(
    mappings: &[HeapMapping],
    contexts: &[HeapContext],
    inuse: &[HeapInuse],
    interval: u64,
) -> Profile {
    build_heap_profile(mappings, contexts, Some(inuse), interval)
}

fn build_heap_profile(
    mappings: &[HeapMapping],
    contexts: &[HeapContext],
    inuse: Option<&[HeapInuse]>,
    interval: u64,
) -> Profile {
    let mut b = Builder::default();
    b.string("");
    let (objects, count) = (b.string("alloc_objects"), b.string("count"));
    let (space, bytes) = (b.string("alloc_space"), b.string("bytes"));
    b.profile.sample_type = vec![
        ValueType {
            r#type: objects,
            unit: count,
        },
        ValueType {
            r#type: space,
            unit: bytes,
        },
    ];
    if inuse.is_some() {
        let (objects, space) = (b.string("inuse_objects"), b.string("inuse_space"));
        b.profile.sample_type.extend([
            ValueType {
                r#type: objects,
                unit: count,
            },
            ValueType {
                r#type: space,
                unit: bytes,
            },
        ]);
    }
    let space_type = b.string("space");
    b.profile.period_type = Some(ValueType {
        r#type: space_type,
        unit: bytes,
    });
    b.profile.period = interval.min(i64::MAX as u64) as i64;
    b.profile.default_sample_type = space;
    for (i, m) in mappings.iter().enumerate() {
        let (filename, build_id) = (b.string(&m.filename), b.string(&m.build_id));
        b.profile.mapping.push(Mapping {
            id: i as u64 + 1,
            memory_start: m.start,
            memory_limit: m.limit,
            file_offset: m.file_offset,
            filename,
            build_id,
            has_functions: true,
        });
    }
    let mut locations: HashMap<(Option<usize>, u64), u64> = HashMap::new();
    for (ci, c) in contexts.iter().enumerate() {
        let mut ids = Vec::with_capacity(c.frames.len());
        for f in &c.frames {
            let key = (f.mapping.filter(|&m| m < mappings.len()), f.address);
            if let Some(&id) = locations.get(&key) {
                ids.push(id);
                continue;
            }
            let mut lines = Vec::with_capacity(f.functions.len());
            for name in &f.functions {
                lines.push(Line {
                    function_id: b.function(name),
                    line: 0,
                });
            }
            let id = b.profile.location.len() as u64 + 1;
            b.profile.location.push(Location {
                id,
                mapping_id: key.0.map_or(0, |m| m as u64 + 1),
                address: f.address,
                line: lines,
            });
            locations.insert(key, id);
            ids.push(id);
        }
        let round = |v: f64| v.round().clamp(0.0, i64::MAX as f64) as i64;
        let mut value = vec![round(c.alloc_objects), round(c.alloc_space)];
        if let Some(inuse) = inuse {
            let u = inuse.get(ci).copied().unwrap_or_default();
            value.extend([round(u.inuse_objects), round(u.inuse_space)]);
        }
        b.profile.sample.push(Sample {
            location_id: ids,
            value,
        });
    }
    b.profile
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_type_encodes_with_profile_proto_tags() {
        // field 1 varint 3, field 2 varint 4.
        let v = ValueType { r#type: 3, unit: 4 };
        assert_eq!(v.encode_to_vec(), [0x08, 3, 0x10, 4]);
        let s = Sample {
            location_id: vec![1, 2],
            value: vec![5],
        };
        // field 1 packed [1, 2]; field 2 packed [5].
        assert_eq!(s.encode_to_vec(), [0x0a, 2, 1, 2, 0x12, 1, 5]);
    }

    #[test]
    fn heap_profile_shares_locations_and_rounds_estimates() {
        let mappings = [HeapMapping {
            start: 0x40_0000,
            limit: 0x40_2000,
            file_offset: 0,
            filename: "/bin/prog".into(),
            build_id: "abcd".into(),
        }];
        let frame = |address, names: &[&str]| HeapFrame {
            mapping: Some(0),
            address,
            functions: names.iter().map(|s| s.to_string()).collect(),
        };
        let contexts = [
            HeapContext {
                frames: vec![
                    frame(0x40_1000, &["malloc"]),
                    frame(0x40_1100, &["inl", "f"]),
                ],
                alloc_objects: 2.4,
                alloc_space: 1000.6,
            },
            HeapContext {
                frames: vec![frame(0x40_1000, &["malloc"]), frame(0x40_1200, &["g"])],
                alloc_objects: 1.0,
                alloc_space: 8.0,
            },
        ];
        let p = build_heap(&mappings, &contexts, 524288);
        let bytes = to_gzip_bytes(&p);
        let q = from_bytes(&bytes).unwrap();
        assert_eq!(q, p);
        let st = |i: i64| q.string_table[i as usize].as_str();
        assert_eq!(st(0), "");
        let types: Vec<_> = q
            .sample_type
            .iter()
            .map(|t| (st(t.r#type), st(t.unit)))
            .collect();
        assert_eq!(
            types,
            [("alloc_objects", "count"), ("alloc_space", "bytes")]
        );
        assert_eq!(q.period, 524288);
        assert_eq!(q.location.len(), 3);
        assert_eq!(q.sample[0].location_id, vec![1, 2]);
        assert_eq!(q.sample[1].location_id, vec![1, 3]);
        assert_eq!(q.sample[0].value, vec![2, 1001]);
        let lines: Vec<_> = q.location[1]
            .line
            .iter()
            .map(|l| st(q.function[l.function_id as usize - 1].name))
            .collect();
        assert_eq!(lines, ["inl", "f"]);
        assert_eq!(
            q.mapping[0].build_id,
            q.string_table.iter().position(|s| s == "abcd").unwrap() as i64
        );

        // With in-use values: four sample types, the in-use pair after the alloc pair.
        let inuse = [HeapInuse {
            inuse_objects: 1.4,
            inuse_space: 500.5,
        }];
        let r = build_heap_with_inuse(&mappings, &contexts, &inuse, 524288);
        let st = |i: i64| r.string_table[i as usize].as_str();
        let types: Vec<_> = r
            .sample_type
            .iter()
            .map(|t| (st(t.r#type), st(t.unit)))
            .collect();
        assert_eq!(
            types,
            [
                ("alloc_objects", "count"),
                ("alloc_space", "bytes"),
                ("inuse_objects", "count"),
                ("inuse_space", "bytes")
            ]
        );
        assert_eq!(r.sample[0].value, vec![2, 1001, 1, 501]);
        assert_eq!(r.sample[1].value, vec![1, 8, 0, 0]);
        assert_eq!(r.location, q.location);
    }
}

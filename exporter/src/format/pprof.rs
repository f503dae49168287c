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

    fn location(&mut self, binary: &ProfiledBinary, addr: u64) -> u64 {
        if let Some(&id) = self.locations.get(&addr) {
            return id;
        }
        let name = binary
            .func_range_at(addr)
            .map_or_else(|| format!("0x{addr:x}"), |r| r.name.clone());
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
        has_functions: true,
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
}

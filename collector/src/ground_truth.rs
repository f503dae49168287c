//! [`GroundTruth`]: the exact execution facts of a recorded run, in binary-relative
//! addresses, written as JSON by `pgo-agent record --truth`.
//!
//! Layout (all addresses are `0x`-prefixed lower-case hex strings; maps are sorted by key as
//! strings, lists by address, so the file is byte-for-byte deterministic for a given run):
//! ```json
//! { "totals": { "steps": 1, "taken_branches": 1, "samples": 1, "period": 1009, "lbr_depth": 32 },
//!   "binaries": [ { "path": "/x/prog", "build_id": "ab..", "load_bias": "0x5555..",
//!                   "instructions": { "0x1130": 12345 },
//!                   "branches": [ { "from": "0x1140", "to": "0x1130", "count": 12344 },
//!                                 { "from": "0x1150", "to": "0x7ffff7e0a000", "count": 1,
//!                                   "to_absolute": true } ] } ],
//!   "unmapped": { "instructions": {}, "branches": [] } }
//! ```
//! A binary-relative address is the link-time virtual address (`runtime - load_bias`). A branch
//! is listed under the binary holding its source; when its target lies in another mapping
//! (a call through the PLT into libc, a return into ld.so), `to` is the absolute runtime
//! address and `to_absolute` is true. Code outside every file-backed executable mapping (none
//! in practice besides `[vdso]`, which is listed as a binary) goes to `unmapped`, absolute.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

/// The whole ground-truth file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroundTruth {
    /// Run totals.
    pub totals: Totals,
    /// One entry per mapped executable image, sorted by path.
    pub binaries: Vec<BinaryTruth>,
    /// Code outside every known mapping, in absolute addresses.
    pub unmapped: UnmappedTruth,
}

/// Totals of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Instructions executed (single steps).
    pub steps: u64,
    /// Taken near branches.
    pub taken_branches: u64,
    /// Samples emitted.
    pub samples: u64,
    /// The sampling period used.
    pub period: u64,
    /// The LBR depth used.
    pub lbr_depth: u64,
}

/// Execution counts inside one binary.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BinaryTruth {
    /// Path as mapped (`[vdso]` for the vdso).
    pub path: String,
    /// GNU build id in hex (empty when unknown).
    pub build_id: String,
    /// Runtime address minus link-time vaddr, hex.
    pub load_bias: String,
    /// Execution count per instruction address (binary-relative).
    pub instructions: BTreeMap<String, u64>,
    /// Taken count per branch edge, sorted by (from, to).
    pub branches: Vec<BranchTruth>,
}

/// Execution counts outside every mapping.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnmappedTruth {
    /// Execution count per absolute instruction address.
    pub instructions: BTreeMap<String, u64>,
    /// Taken count per branch edge (absolute).
    pub branches: Vec<BranchTruth>,
}

/// One taken branch edge and how often it was taken.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchTruth {
    /// Source (binary-relative).
    pub from: String,
    /// Target (binary-relative, or absolute when `to_absolute`).
    pub to: String,
    /// Times taken.
    pub count: u64,
    /// True when the target lies outside the source's binary and `to` is absolute.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub to_absolute: bool,
}

/// A mapped image as the truth builder sees it: its runtime range and how to rebase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TruthImage {
    /// Path as mapped.
    pub path: String,
    /// Build id hex.
    pub build_id: String,
    /// Load bias.
    pub load_bias: u64,
    /// Executable runtime ranges `[start, end)` of this image.
    pub ranges: Vec<(u64, u64)>,
}

/// Formats an address the way the truth file spells it.
pub fn hex(addr: u64) -> String {
    format!("{addr:#x}")
}

/// Parses an address as the truth file spells it.
pub fn parse_hex(text: &str) -> Option<u64> {
    u64::from_str_radix(text.strip_prefix("0x")?, 16).ok()
}

impl GroundTruth {
    /// Builds the truth from absolute per-address counts and the images that were mapped.
    pub fn build(
        totals: Totals,
        images: &[TruthImage],
        instructions: &HashMap<u64, u64>,
        branches: &HashMap<(u64, u64), u64>,
    ) -> GroundTruth {
        let mut ranges: Vec<(u64, u64, usize)> = images
            .iter()
            .enumerate()
            .flat_map(|(i, img)| img.ranges.iter().map(move |&(s, e)| (s, e, i)))
            .collect();
        ranges.sort_unstable();
        let image_of = |addr: u64| -> Option<usize> {
            let idx = ranges.partition_point(|&(s, _, _)| s <= addr);
            ranges[..idx]
                .iter()
                .rev()
                .find(|&&(s, e, _)| addr >= s && addr < e)
                .map(|&(_, _, i)| i)
        };
        let mut binaries: Vec<BinaryTruth> = images
            .iter()
            .map(|img| BinaryTruth {
                path: img.path.clone(),
                build_id: img.build_id.clone(),
                load_bias: hex(img.load_bias),
                ..BinaryTruth::default()
            })
            .collect();
        let mut unmapped = UnmappedTruth::default();
        for (&addr, &count) in instructions {
            match image_of(addr) {
                Some(i) => {
                    binaries[i]
                        .instructions
                        .insert(hex(addr.wrapping_sub(images[i].load_bias)), count);
                }
                None => {
                    unmapped.instructions.insert(hex(addr), count);
                }
            }
        }
        let mut edges: Vec<(&(u64, u64), &u64)> = branches.iter().collect();
        edges.sort_unstable();
        for (&(from, to), &count) in edges {
            match image_of(from) {
                Some(i) => {
                    let bias = images[i].load_bias;
                    let same = image_of(to) == Some(i);
                    binaries[i].branches.push(BranchTruth {
                        from: hex(from.wrapping_sub(bias)),
                        to: hex(if same { to.wrapping_sub(bias) } else { to }),
                        count,
                        to_absolute: !same,
                    });
                }
                None => unmapped.branches.push(BranchTruth {
                    from: hex(from),
                    to: hex(to),
                    count,
                    to_absolute: true,
                }),
            }
        }
        binaries.sort_by(|a, b| a.path.cmp(&b.path));
        GroundTruth {
            totals,
            binaries,
            unmapped,
        }
    }

    /// The binary whose path ends with `/name` (or equals `name`).
    pub fn binary(&self, name: &str) -> Option<&BinaryTruth> {
        self.binaries
            .iter()
            .find(|b| b.path == name || b.path.ends_with(&format!("/{name}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebases_counts_and_marks_cross_binary_edges() {
        let images = vec![
            TruthImage {
                path: "/p/prog".into(),
                build_id: "aa".into(),
                load_bias: 0x5000,
                ranges: vec![(0x6000, 0x7000)],
            },
            TruthImage {
                path: "/l/libc.so".into(),
                build_id: "bb".into(),
                load_bias: 0x7f00_0000,
                ranges: vec![(0x7f00_1000, 0x7f00_9000)],
            },
        ];
        let instructions = HashMap::from([(0x6010, 5), (0x7f00_1234, 2), (0x1, 1)]);
        let branches = HashMap::from([
            ((0x6020, 0x6010), 4),
            ((0x6030, 0x7f00_1234), 2),
            ((0x1, 0x6010), 1),
        ]);
        let totals = Totals {
            steps: 8,
            taken_branches: 7,
            samples: 0,
            period: 3,
            lbr_depth: 32,
        };
        let truth = GroundTruth::build(totals, &images, &instructions, &branches);
        assert_eq!(truth.binaries[0].path, "/l/libc.so");
        let prog = truth.binary("prog").unwrap();
        assert_eq!(prog.load_bias, "0x5000");
        assert_eq!(
            prog.instructions,
            BTreeMap::from([("0x1010".to_string(), 5)])
        );
        assert_eq!(
            prog.branches,
            vec![
                BranchTruth {
                    from: "0x1020".into(),
                    to: "0x1010".into(),
                    count: 4,
                    to_absolute: false
                },
                BranchTruth {
                    from: "0x1030".into(),
                    to: "0x7f001234".into(),
                    count: 2,
                    to_absolute: true
                },
            ]
        );
        assert_eq!(truth.binary("libc.so").unwrap().instructions["0x1234"], 2);
        assert_eq!(truth.unmapped.instructions["0x1"], 1);
        let json = serde_json::to_string(&truth).unwrap();
        assert!(
            json.contains(r#"{"from":"0x1020","to":"0x1010","count":4}"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<GroundTruth>(&json).unwrap(), truth);
        assert_eq!(parse_hex("0x1f"), Some(31));
        assert_eq!(parse_hex("1f"), None);
    }
}

//! [`Recording`]: a whole profiling session in memory — what a perf.data file or a
//! `perf script` text holds, and what the software recorder produces.

use crate::{BuildId, PerfEvent};

/// A build id known for a mapped file (perf.data's HEADER_BUILD_ID feature).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildIdEntry {
    /// Process the file was mapped in (-1 for the kernel).
    pub pid: i32,
    /// The file's build id.
    pub build_id: BuildId,
    /// The file's path as mapped.
    pub filename: String,
}

/// The sampling event a recording was made with, as far as the profile pipeline cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventDescription {
    /// Name as `perf` prints it, e.g. `br_inst_retired.near_taken:uppp`.
    pub name: String,
    /// `perf_event_attr.type`.
    pub attr_type: u32,
    /// `perf_event_attr.config`.
    pub config: u64,
    /// `perf_event_attr.sample_period` (fixed-period sampling).
    pub sample_period: u64,
    /// `perf_event_attr.precise_ip`.
    pub precise_ip: u8,
    /// True when samples carry a call chain (`PERF_SAMPLE_CALLCHAIN`).
    pub callchain: bool,
    /// True when samples carry a branch stack (`PERF_SAMPLE_BRANCH_STACK`).
    pub branch_stack: bool,
    /// True when samples carry the user registers bp, sp, ip (`PERF_SAMPLE_REGS_USER`) and
    /// the top of the user stack (`PERF_SAMPLE_STACK_USER`): [`crate::UserStack`].
    pub user_stack: bool,
}

impl EventDescription {
    /// Intel's precise taken-branch event with its branch stack and call chain, as `perf
    /// record -e BR_INST_RETIRED.NEAR_TAKEN:uppp -c PERIOD -b -g` opens it (`PERF_TYPE_RAW`,
    /// config 0x20c4, `precise_ip` 3); with `user_stack`, samples also carry the user
    /// registers and stack words.
    pub fn intel_taken_branches(sample_period: u64, user_stack: bool) -> EventDescription {
        EventDescription {
            name: "br_inst_retired.near_taken:uppp".into(),
            attr_type: crate::live::attr::PERF_TYPE_RAW,
            config: crate::live::attr::INTEL_NEAR_TAKEN,
            sample_period,
            precise_ip: 3,
            callchain: true,
            branch_stack: true,
            user_stack,
        }
    }
}

/// A profiling session: the event description, the build ids, and the events in the order
/// they were recorded (side-band events before the samples that depend on them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recording {
    /// The sampling event.
    pub event: EventDescription,
    /// Build ids of the mapped files.
    pub build_ids: Vec<BuildIdEntry>,
    /// The event stream.
    pub events: Vec<PerfEvent>,
    /// The command line that was recorded (perf.data's CMDLINE feature), if known.
    pub cmdline: Vec<String>,
}

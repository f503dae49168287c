//! [`PmuCapabilities`] (what this machine's PMUs offer, read from sysfs) and
//! [`SamplingPlan`] (which events to open, in order of preference, and why).
//!
//! Detection order (crates-and-abi.md §2.15): read `perf_event_paranoid`, then each PMU
//! under `/sys/bus/event_source/devices/{cpu,cpu_core,cpu_atom}`: `type`, `caps/pmu_name`,
//! `caps/branches` (the LBR depth; absent ⇒ no LBR), `caps/max_precise`. The plans are then
//! probed by opening them ([`super::LiveSession::open`]); the first that opens wins.

use std::path::Path;

use super::attr::*;
use crate::record::{branch_sample_type as bst, sample_type as st};
use crate::sample::{USER_STACK_BYTES, USER_STACK_REGS_MASK};

/// A sampling mode, in the order they are preferred.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SamplingMode {
    /// Intel LBR hybrid: `BR_INST_RETIRED.NEAR_TAKEN` with precise_ip, branch stack (user,
    /// any) and frame-pointer call chain; one event per core type on hybrid parts.
    IntelLbr,
    /// AMD branch sampling (Zen 4+ LBRv2): `cycles:u` with a branch stack and call chain.
    AmdBranch,
    /// Fallback without a branch stack: `cpu-clock` with call chains (leading IP + stack).
    CpuClock,
}

impl SamplingMode {
    /// Every mode, most preferred first.
    pub const ALL: [SamplingMode; 3] = [
        SamplingMode::IntelLbr,
        SamplingMode::AmdBranch,
        SamplingMode::CpuClock,
    ];

    /// The config spelling (`intel_lbr`, `amd_branch`, `cpu_clock`).
    pub fn name(self) -> &'static str {
        match self {
            SamplingMode::IntelLbr => "intel_lbr",
            SamplingMode::AmdBranch => "amd_branch",
            SamplingMode::CpuClock => "cpu_clock",
        }
    }
}

/// One PMU's capabilities.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PmuInfo {
    /// Directory name (`cpu`, `cpu_core`, `cpu_atom`).
    pub name: String,
    /// `type`, the `perf_event_attr.type` of its events.
    pub type_: u32,
    /// `caps/pmu_name` (e.g. `skylake`).
    pub pmu_name: Option<String>,
    /// `caps/branches`: the LBR depth; `None` means no branch stack.
    pub branches: Option<u32>,
    /// `caps/max_precise`.
    pub max_precise: Option<u8>,
}

/// The CPU vendor, from `/proc/cpuinfo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CpuVendor {
    /// GenuineIntel.
    Intel,
    /// AuthenticAMD.
    Amd,
    /// Anything else.
    #[default]
    Other,
}

/// What the machine offers for sampling.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PmuCapabilities {
    /// `/proc/sys/kernel/perf_event_paranoid` (`None`: no perf support in the kernel).
    pub paranoid: Option<i32>,
    /// The core PMUs found (`cpu`, `cpu_core`, `cpu_atom`).
    pub pmus: Vec<PmuInfo>,
    /// Every PMU directory name (for reports: `breakpoint msr software ...`).
    pub all_pmus: Vec<String>,
    /// The CPU vendor.
    pub vendor: CpuVendor,
}

fn read_trim(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

impl PmuCapabilities {
    /// Reads this machine's capabilities.
    pub fn detect() -> PmuCapabilities {
        Self::detect_at(
            Path::new("/sys/bus/event_source/devices"),
            Path::new("/proc"),
        )
    }

    /// Reads capabilities from a sysfs `devices` directory and a procfs root (tests pass
    /// fixture trees).
    pub fn detect_at(devices: &Path, proc: &Path) -> PmuCapabilities {
        let paranoid =
            read_trim(&proc.join("sys/kernel/perf_event_paranoid")).and_then(|s| s.parse().ok());
        let mut all_pmus: Vec<String> = std::fs::read_dir(devices)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        all_pmus.sort();
        let pmus = ["cpu", "cpu_core", "cpu_atom"]
            .iter()
            .filter_map(|name| {
                let dir = devices.join(name);
                let type_ = read_trim(&dir.join("type"))?.parse().ok()?;
                Some(PmuInfo {
                    name: name.to_string(),
                    type_,
                    pmu_name: read_trim(&dir.join("caps/pmu_name")),
                    branches: read_trim(&dir.join("caps/branches")).and_then(|s| s.parse().ok()),
                    max_precise: read_trim(&dir.join("caps/max_precise"))
                        .and_then(|s| s.parse().ok()),
                })
            })
            .collect();
        let cpuinfo = std::fs::read_to_string(proc.join("cpuinfo")).unwrap_or_default();
        let vendor = if cpuinfo.contains("GenuineIntel") {
            CpuVendor::Intel
        } else if cpuinfo.contains("AuthenticAMD") {
            CpuVendor::Amd
        } else {
            CpuVendor::Other
        };
        PmuCapabilities {
            paranoid,
            pmus,
            all_pmus,
            vendor,
        }
    }
}

/// The sampling settings the plans are built from (from the daemon's config).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanSettings {
    /// Modes the operator allows, in preference order.
    pub allowed: Vec<SamplingMode>,
    /// Fixed period for branch sampling (taken branches or cycles per sample).
    pub branch_period: u64,
    /// cpu-clock rate.
    pub cpu_clock_rate: SampleRate,
    /// `sample_max_stack`.
    pub max_stack: u16,
    /// Unread bytes that wake a reader waiting on a ring (see
    /// [`EventAttr::wakeup_watermark`]; 0: readers poll on their interval only).
    pub wakeup_watermark: u32,
    /// Ask for build ids in MMAP2 records ([`EventAttr::build_id`]).
    pub mmap_build_ids: bool,
}

/// One candidate: the events to open on every CPU (the first carries the side band; the
/// others are redirected into its ring).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SamplingPlan {
    /// The mode.
    pub mode: SamplingMode,
    /// The events (one per core PMU for Intel hybrid parts).
    pub events: Vec<EventAttr>,
    /// Why this plan is possible (for the startup report).
    pub why: String,
}

/// `IDENTIFIER | IP | TID | TIME | CPU | PERIOD | CALLCHAIN | REGS_USER | STACK_USER`:
/// every mode's sample fields. The user registers (bp, sp, ip: [`USER_STACK_REGS_MASK`])
/// and the first [`USER_STACK_BYTES`] of the user stack settle the caller the
/// frame-pointer chain misses at a prologue or epilogue.
pub const BASE_SAMPLE_TYPE: u64 = st::IDENTIFIER
    | st::IP
    | st::TID
    | st::TIME
    | st::CPU
    | st::PERIOD
    | st::CALLCHAIN
    | st::REGS_USER
    | st::STACK_USER;

fn event(label: String, type_: u32, config: u64, rate: SampleRate, s: &PlanSettings) -> EventAttr {
    EventAttr {
        label,
        type_,
        config,
        rate,
        sample_type: BASE_SAMPLE_TYPE,
        branch_sample_type: 0,
        sample_regs_user: USER_STACK_REGS_MASK,
        sample_stack_user: USER_STACK_BYTES,
        precise_ip: 0,
        user_only: true,
        side_band: false,
        build_id: s.mmap_build_ids,
        max_stack: s.max_stack,
        disabled: true,
        wakeup_watermark: s.wakeup_watermark,
    }
}

/// The plans worth probing, most preferred first, and one line per mode that was ruled
/// out without probing (e.g. "intel_lbr: no caps/branches for PMU cpu").
pub fn candidate_plans(
    caps: &PmuCapabilities,
    settings: &PlanSettings,
) -> (Vec<SamplingPlan>, Vec<String>) {
    let mut plans = Vec::new();
    let mut skipped = Vec::new();
    let no_core_pmu = || {
        format!(
            "no core PMU (cpu, cpu_core, cpu_atom) in /sys/bus/event_source/devices (found: {})",
            caps.all_pmus.join(", ")
        )
    };
    for &mode in &settings.allowed {
        match mode {
            SamplingMode::IntelLbr | SamplingMode::AmdBranch => {
                if caps.pmus.is_empty() {
                    skipped.push(format!("{}: {}", mode.name(), no_core_pmu()));
                    continue;
                }
                let want = if mode == SamplingMode::IntelLbr {
                    CpuVendor::Intel
                } else {
                    CpuVendor::Amd
                };
                if caps.vendor != want {
                    skipped.push(format!("{}: CPU vendor is {:?}", mode.name(), caps.vendor));
                    continue;
                }
                let with_lbr: Vec<&PmuInfo> =
                    caps.pmus.iter().filter(|p| p.branches.is_some()).collect();
                if with_lbr.is_empty() {
                    let names: Vec<&str> = caps.pmus.iter().map(|p| p.name.as_str()).collect();
                    skipped.push(format!(
                        "{}: LBR not available: no caps/branches for PMU {}",
                        mode.name(),
                        names.join(", ")
                    ));
                    continue;
                }
                let rate = SampleRate::Period(settings.branch_period);
                let mut events = Vec::new();
                for (i, p) in with_lbr.iter().enumerate() {
                    let mut e = if mode == SamplingMode::IntelLbr {
                        let config = if p.name == "cpu_atom" {
                            INTEL_ATOM_NEAR_TAKEN
                        } else {
                            INTEL_NEAR_TAKEN
                        };
                        let mut e = event(
                            format!("{}/r{config:x}/u", p.name),
                            p.type_,
                            config,
                            rate,
                            settings,
                        );
                        e.precise_ip = p.max_precise.unwrap_or(0).min(3);
                        e.branch_sample_type = bst::USER | bst::ANY | bst::HW_INDEX;
                        e
                    } else {
                        // AMD LBRv2 rejects NO_FLAGS/NO_CYCLES/CALL_STACK; precise_ip > 0
                        // would divert to IBS, which has no branch stack.
                        let mut e = event(
                            format!("{}/cycles/u", p.name),
                            PERF_TYPE_HARDWARE,
                            PERF_COUNT_HW_CPU_CYCLES,
                            rate,
                            settings,
                        );
                        e.branch_sample_type = bst::USER | bst::ANY;
                        e
                    };
                    e.sample_type |= st::BRANCH_STACK;
                    e.side_band = i == 0;
                    events.push(e);
                }
                let depths: Vec<String> = with_lbr
                    .iter()
                    .map(|p| format!("{} {} entries", p.name, p.branches.unwrap_or(0)))
                    .collect();
                plans.push(SamplingPlan {
                    mode,
                    events,
                    why: format!("branch stack available ({})", depths.join(", ")),
                });
            }
            SamplingMode::CpuClock => {
                let mut e = event(
                    "cpu-clock".into(),
                    PERF_TYPE_SOFTWARE,
                    PERF_COUNT_SW_CPU_CLOCK,
                    settings.cpu_clock_rate,
                    settings,
                );
                e.side_band = true;
                plans.push(SamplingPlan {
                    mode,
                    events: vec![e],
                    why: "software cpu-clock with frame-pointer call chains".into(),
                });
            }
        }
    }
    (plans, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> PlanSettings {
        PlanSettings {
            allowed: SamplingMode::ALL.to_vec(),
            branch_period: 200003,
            cpu_clock_rate: SampleRate::Frequency(1000),
            max_stack: 127,
            wakeup_watermark: 0,
            mmap_build_ids: true,
        }
    }

    fn tree(files: &[(&str, &str)]) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("pgo-caps-{}-{}", std::process::id(), files.len()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    #[test]
    fn no_pmu_falls_back_to_cpu_clock() {
        let dir = tree(&[
            ("devices/software/type", "1\n"),
            ("devices/msr/type", "9\n"),
            ("proc/sys/kernel/perf_event_paranoid", "2\n"),
            ("proc/cpuinfo", "vendor_id\t: AuthenticAMD\n"),
        ]);
        let caps = PmuCapabilities::detect_at(&dir.join("devices"), &dir.join("proc"));
        assert_eq!(caps.paranoid, Some(2));
        assert_eq!(caps.vendor, CpuVendor::Amd);
        let (plans, skipped) = candidate_plans(&caps, &settings());
        assert_eq!(plans.len(), 1);
        assert_eq!(plans[0].mode, SamplingMode::CpuClock);
        // IDENTIFIER, IP, TID, TIME, CPU, PERIOD, CALLCHAIN, REGS_USER, STACK_USER.
        assert_eq!(plans[0].events[0].sample_type, 0x131a7);
        assert_eq!(plans[0].events[0].sample_regs_user, 0x1c0);
        assert_eq!(plans[0].events[0].sample_stack_user, 16);
        assert!(plans[0].events[0].side_band);
        assert_eq!(
            skipped,
            vec![
                "intel_lbr: no core PMU (cpu, cpu_core, cpu_atom) in /sys/bus/event_source/devices (found: msr, software)".to_string(),
                "amd_branch: no core PMU (cpu, cpu_core, cpu_atom) in /sys/bus/event_source/devices (found: msr, software)".to_string(),
            ]
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn intel_hybrid_opens_core_and_atom_events() {
        let caps = PmuCapabilities {
            paranoid: Some(-1),
            pmus: vec![
                PmuInfo {
                    name: "cpu_core".into(),
                    type_: 8,
                    pmu_name: Some("alderlake_hybrid".into()),
                    branches: Some(32),
                    max_precise: Some(3),
                },
                PmuInfo {
                    name: "cpu_atom".into(),
                    type_: 10,
                    pmu_name: None,
                    branches: Some(32),
                    max_precise: Some(2),
                },
            ],
            all_pmus: vec![],
            vendor: CpuVendor::Intel,
        };
        let (plans, skipped) = candidate_plans(&caps, &settings());
        assert_eq!(skipped, vec!["amd_branch: CPU vendor is Intel".to_string()]);
        let lbr = &plans[0];
        assert_eq!(lbr.mode, SamplingMode::IntelLbr);
        assert_eq!(lbr.events.len(), 2);
        assert_eq!(
            (
                lbr.events[0].type_,
                lbr.events[0].config,
                lbr.events[0].precise_ip
            ),
            (8, 0x20c4, 3)
        );
        assert_eq!(
            (
                lbr.events[1].type_,
                lbr.events[1].config,
                lbr.events[1].precise_ip
            ),
            (10, 0xc0c4, 2)
        );
        assert!(lbr.events[0].side_band && !lbr.events[1].side_band);
        assert_eq!(lbr.events[0].branch_sample_type, 1 | 8 | 1 << 17);
        assert_eq!(lbr.events[0].rate, SampleRate::Period(200003));
        assert_eq!(plans[1].mode, SamplingMode::CpuClock);
    }

    #[test]
    fn intel_without_branches_says_why() {
        let caps = PmuCapabilities {
            paranoid: Some(2),
            pmus: vec![PmuInfo {
                name: "cpu".into(),
                type_: 4,
                ..PmuInfo::default()
            }],
            all_pmus: vec![],
            vendor: CpuVendor::Intel,
        };
        let mut s = settings();
        s.allowed = vec![SamplingMode::IntelLbr];
        let (plans, skipped) = candidate_plans(&caps, &s);
        assert!(plans.is_empty());
        assert_eq!(
            skipped,
            vec!["intel_lbr: LBR not available: no caps/branches for PMU cpu".to_string()]
        );
    }

    /// The side-band event asks for build ids in MMAP2 records as the settings say.
    #[test]
    fn mmap_build_ids_follow_the_settings() {
        let caps = PmuCapabilities {
            paranoid: Some(2),
            pmus: vec![],
            all_pmus: vec![],
            vendor: CpuVendor::Amd,
        };
        for wanted in [true, false] {
            let s = PlanSettings {
                allowed: vec![SamplingMode::CpuClock],
                mmap_build_ids: wanted,
                ..settings()
            };
            let (plans, _) = candidate_plans(&caps, &s);
            let side_band: Vec<bool> = plans
                .iter()
                .flat_map(|p| &p.events)
                .filter(|e| e.side_band)
                .map(|e| e.build_id)
                .collect();
            assert_eq!(side_band, [wanted], "{plans:?}");
        }
    }
}

//! `convert --time-profgen`: the wall time of each phase of a conversion, reported on
//! stderr when the conversion ends, in the layout of LLVM's timer-group reports (what
//! newer llvm-profgen prints for the same flag; its phases and figures are its own).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Wall-clock timers of named phases; a no-op unless enabled. Phases may run on several
/// threads and overlap (the binary loads while the samples are read).
#[derive(Debug)]
pub struct PhaseTimer {
    start: Instant,
    /// `None` when timing is off.
    phases: Option<Mutex<Vec<(&'static str, Duration)>>>,
}

impl PhaseTimer {
    /// A timer that records phases when `enabled`, counting the run's time from now.
    pub fn new(enabled: bool) -> PhaseTimer {
        PhaseTimer {
            start: Instant::now(),
            phases: enabled.then(|| Mutex::new(Vec::new())),
        }
    }

    /// Runs `f`, recording its wall time as phase `name`.
    pub fn time<T>(&self, name: &'static str, f: impl FnOnce() -> T) -> T {
        let Some(phases) = &self.phases else {
            return f();
        };
        let start = Instant::now();
        let out = f();
        let took = start.elapsed();
        // A poisoned lock only means another phase panicked; its entries are whole.
        phases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name, took));
        out
    }

    /// The report of the phases recorded so far (`None` when timing is off): each phase's
    /// wall time and its share of the run's, in the order the phases ended.
    pub fn report(&self) -> Option<String> {
        let phases = self.phases.as_ref()?;
        let phases = phases.lock().unwrap_or_else(|e| e.into_inner());
        Some(render(&phases, self.start.elapsed()))
    }

    /// Prints [`Self::report`] on stderr when timing is on.
    pub fn print_report(&self) {
        if let Some(report) = self.report() {
            eprint!("{report}");
        }
    }
}

const RULE: &str =
    "===-------------------------------------------------------------------------===";

/// The report of `phases` in a run of `total` wall time.
fn render(phases: &[(&'static str, Duration)], total: Duration) -> String {
    let title = "pgo-agent convert";
    let pad = (RULE.len().saturating_sub(title.len())) / 2;
    let mut out = format!("{RULE}\n{:pad$}{title}\n{RULE}\n", "");
    let total_s = total.as_secs_f64();
    out.push_str(&format!(
        "  Total Execution Time: {total_s:.4} seconds ({total_s:.4} wall clock)\n\n"
    ));
    out.push_str("   ---Wall Time---  --- Name ---\n");
    let share = |d: f64| {
        if total_s > 0.0 {
            d / total_s * 100.0
        } else {
            0.0
        }
    };
    for (name, took) in phases {
        let s = took.as_secs_f64();
        out.push_str(&format!("   {s:.4} ({:5.1}%)  {name}\n", share(s)));
    }
    out.push_str(&format!("   {total_s:.4} (100.0%)  Total\n\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabled_timer_records_nothing() {
        let t = PhaseTimer::new(false);
        assert_eq!(t.time("x", || 7), 7);
        assert_eq!(t.report(), None);
    }

    #[test]
    fn report_lists_each_phase_with_its_share() {
        let text = render(
            &[
                ("Read samples", Duration::from_millis(250)),
                ("Generate profile", Duration::from_millis(500)),
            ],
            Duration::from_secs(1),
        );
        assert!(text.contains("  Total Execution Time: 1.0000 seconds (1.0000 wall clock)"));
        assert!(
            text.contains("   0.2500 ( 25.0%)  Read samples\n"),
            "{text}"
        );
        assert!(
            text.contains("   0.5000 ( 50.0%)  Generate profile\n"),
            "{text}"
        );
        assert!(text.contains("   1.0000 (100.0%)  Total\n"), "{text}");
    }

    #[test]
    fn enabled_timer_records_phases_in_order() {
        let t = PhaseTimer::new(true);
        t.time("first", || ());
        t.time("second", || ());
        let report = t.report().unwrap();
        let first = report.find("first").unwrap();
        assert!(report[first..].contains("second"), "{report}");
    }
}

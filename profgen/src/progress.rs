//! A progress bar on a terminal for inputs that take more than a second.

use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Progress over the bytes of one input file. Hidden unless stderr is a terminal, and shown
/// only once the input has taken more than a second.
pub struct Progress {
    bar: ProgressBar,
    started: Instant,
}

impl Progress {
    /// Progress for reading `path` (its size is the bar's length).
    pub fn for_file(path: &Path) -> Progress {
        let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        Progress::named(bar, path)
    }

    /// `bar`, labelled with the file name of `path`, starting now.
    fn named(bar: ProgressBar, path: &Path) -> Progress {
        bar.set_message(
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
        Progress {
            bar,
            started: Instant::now(),
        }
    }

    /// Counts `n` more bytes of a [`Progress::for_file`] bar (from any thread); the bar
    /// appears on a terminal once the input has taken more than a second.
    pub fn bytes_read(&self, n: u64) {
        self.bar.inc(n);
        self.show_after_a_second();
    }

    /// Progress for an input read record by record (perf.data): a spinner counting events,
    /// shown on a terminal once the input has taken more than a second.
    pub fn for_events(path: &Path) -> Progress {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg}: {human_pos} events ({per_sec})")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        Progress::named(bar, path)
    }

    /// Counts events of a [`Progress::for_events`] bar.
    pub fn events_read(&self, count: u64) {
        if count.is_multiple_of(4096) {
            self.bar.set_position(count);
            self.show_after_a_second();
        }
    }

    fn show_after_a_second(&self) {
        if self.bar.is_hidden()
            && self.started.elapsed() > Duration::from_secs(1)
            && std::io::stderr().is_terminal()
        {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }

    /// Clears the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

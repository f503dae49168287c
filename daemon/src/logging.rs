//! The daemon's log: `tracing` events written to stderr, filtered by level.
//!
//! The filter is `RUST_LOG` when it is set, else the configuration's `[log] level` (default
//! `info`): a level, or comma-separated `target=level` directives with an optional bare
//! default level (`info,daemon::run::worker=debug`; `tracing_subscriber::filter::Targets`).
//! Two layouts:
//!
//! * under systemd (`JOURNAL_STREAM` names stderr's file), each line starts with the
//!   syslog priority prefix `<N>` that journald reads from a stream (`journalctl -p warning`
//!   then selects by level) and carries no timestamp or colour, which journald adds itself;
//! * elsewhere, a timestamp, the level and the message, coloured on a terminal.

use std::fmt;
use std::io::IsTerminal;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// Installs the global log subscriber; `level` is the configuration's filter. A second call
/// (tests run commands in one process) keeps the first subscriber.
pub fn init(level: &str) -> anyhow::Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(env) if !env.trim().is_empty() => parse_filter(&env)
            .map_err(|e| anyhow::anyhow!("RUST_LOG={env:?} is not a log filter: {e}"))?,
        _ => parse_filter(level)
            .map_err(|e| anyhow::anyhow!("[log] level = {level:?} is not a log filter: {e}"))?,
    };
    let registry = tracing_subscriber::registry().with(filter);
    let installed = if journald_stream() {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(false)
                    .event_format(JournaldFormat),
            )
            .try_init()
    } else {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::stderr().is_terminal())
                    .with_target(false),
            )
            .try_init()
    };
    // Already installed by an earlier command in this process: keep it.
    drop(installed);
    Ok(())
}

/// A filter in `Targets` syntax, stricter in two ways: the empty string is an error (not
/// "log nothing"), and a directive without `=` must be a level (`Targets` would read a
/// misspelt level such as `inf` as a target name and log nothing).
fn parse_filter(text: &str) -> Result<Targets, String> {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let text = text.trim();
    if text.is_empty() {
        return Err("empty".to_string());
    }
    for directive in text.split(',') {
        let directive = directive.trim();
        if !directive.contains('=') && !LEVELS.contains(&directive.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "{directive:?} is neither a level ({}) nor target=level",
                LEVELS.join(", ")
            ));
        }
    }
    text.parse::<Targets>().map_err(|e| e.to_string())
}

/// Whether stderr is the journal stream systemd connected (`JOURNAL_STREAM` is
/// `<device>:<inode>` of that stream, as systemd.exec(5) describes).
fn journald_stream() -> bool {
    std::env::var("JOURNAL_STREAM").is_ok_and(|v| names_stderr(&v))
}

/// Whether `value` (`<device>:<inode>`) is the file behind this process's stderr.
fn names_stderr(value: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some((dev, ino)) = value.split_once(':') else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    std::fs::metadata("/proc/self/fd/2").is_ok_and(|m| m.dev() == dev && m.ino() == ino)
}

/// The syslog priority journald gives a line that starts with `<N>` (sd-daemon(3)).
fn syslog_priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// `<N>message key=value`: the journald layout.
struct JournaldFormat;

impl<S, N> FormatEvent<S, N> for JournaldFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "<{}>", syslog_priority(event.metadata().level()))?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_follow_syslog() {
        assert_eq!(syslog_priority(&Level::ERROR), 3);
        assert_eq!(syslog_priority(&Level::WARN), 4);
        assert_eq!(syslog_priority(&Level::INFO), 6);
        assert_eq!(syslog_priority(&Level::DEBUG), 7);
    }

    #[test]
    fn filters_parse_levels_and_directives() {
        use tracing::level_filters::LevelFilter;
        let f = parse_filter("warn").unwrap();
        assert_eq!(f.default_level(), Some(LevelFilter::WARN));
        let f = parse_filter("info,daemon::run::worker=debug").unwrap();
        assert!(f.would_enable("daemon::run::worker", &Level::DEBUG));
        assert!(!f.would_enable("daemon::run::router", &Level::DEBUG));
        assert!(f.would_enable("daemon::run::router", &Level::INFO));
        assert!(parse_filter("").is_err());
        assert!(parse_filter("loud").is_err());
        assert!(parse_filter("info,daemon=lots").is_err());
    }

    #[test]
    fn journal_stream_must_name_stderr() {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata("/proc/self/fd/2").unwrap();
        assert!(names_stderr(&format!("{}:{}", m.dev(), m.ino())));
        assert!(!names_stderr(&format!("{}:{}", m.dev(), m.ino() + 1)));
        assert!(!names_stderr("garbage"));
        assert!(!names_stderr("1:x"));
    }
}

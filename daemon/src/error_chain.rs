//! [`ErrorChain`]: how `pgo-agent` prints an error with its causes.
//!
//! anyhow's alternate form (`{:#}`) joins every cause with ": ". Our error types, and
//! several of the libraries they wrap, already put their cause in their own message
//! (`"{path}: {source}"`) and also return it from `source()`, so that form says the
//! innermost cause twice. `ErrorChain` prints the same chain but leaves out a cause whose
//! text the message before it already ends with.

use std::error::Error;
use std::fmt;

/// Displays an error and its causes, joined by ": ", without repeating a cause the
/// message before it ends with. `ErrorChain(err.as_ref())` for an `anyhow::Error`.
pub struct ErrorChain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut previous: Option<String> = None;
        let mut cause = Some(self.0);
        while let Some(error) = cause {
            cause = error.source();
            let text = error.to_string();
            match &previous {
                Some(before) if before.ends_with(text.as_str()) => {}
                Some(_) => write!(f, ": {text}")?,
                None => f.write_str(&text)?,
            }
            previous = Some(text);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorChain;

    /// An error that shows its cause in its message and returns it from `source()`.
    #[derive(Debug, thiserror::Error)]
    #[error("{path}: offset {offset}: {source}")]
    struct Corrupt {
        path: &'static str,
        offset: u64,
        source: std::io::Error,
    }

    #[test]
    fn a_cause_already_in_the_message_is_printed_once() {
        let io = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "record cut short");
        let err = anyhow::Error::new(Corrupt {
            path: "x.data",
            offset: 4096,
            source: io,
        })
        .context("reading perf.data")
        .context("converting samples for app");
        assert_eq!(
            format!("{err:#}"),
            "converting samples for app: reading perf.data: x.data: offset 4096: \
             record cut short: record cut short"
        );
        assert_eq!(
            ErrorChain(err.as_ref()).to_string(),
            "converting samples for app: reading perf.data: x.data: offset 4096: \
             record cut short"
        );
    }

    #[test]
    fn a_cause_not_in_the_message_is_kept() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let err = anyhow::Error::new(io).context("reading /etc/pgo-agent.toml");
        assert_eq!(
            ErrorChain(err.as_ref()).to_string(),
            "reading /etc/pgo-agent.toml: no such file"
        );
    }
}

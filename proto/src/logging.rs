//! The log output of both binaries: `--log-format text` (the default, human-readable
//! lines) or `--log-format json` (one JSON object per line, for log collectors).
//!
//! A JSON line carries the event's fields under `fields`, the innermost span under `span`
//! and every enclosing span under `spans`, each with its fields: a reconcile's lines name
//! the object (`{"span":{"name":"reconcile","cloneset":"ns/demo"},…}`), the daemon's lines
//! about one pod name the pod.

use tracing::Subscriber;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, with the current span and its parents.
    Json,
}

/// The filter: `RUST_LOG` when it is set and valid, else `default`.
pub fn filter(default: &str) -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default))
}

/// A subscriber writing `format` lines through `writer`; text has colours only when
/// `ansi` (a terminal: in a container's log they are escape codes in every line).
pub fn subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    writer: W,
    ansi: bool,
) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        LogFormat::Text => Box::new(builder.with_ansi(ansi).finish()),
        LogFormat::Json => Box::new(
            builder
                .json()
                .with_current_span(true)
                .with_span_list(true)
                .finish(),
        ),
    }
}

/// Installs the process-wide subscriber, writing to stdout (as the text format always
/// did).
pub fn init(format: LogFormat, default_filter: &str) -> Result<(), LogInitError> {
    tracing::subscriber::set_global_default(subscriber(
        format,
        filter(default_filter),
        std::io::stdout,
        std::io::IsTerminal::is_terminal(&std::io::stdout()),
    ))
    .map_err(|_| LogInitError)
}

/// A global subscriber was installed already.
#[derive(Debug, thiserror::Error)]
#[error("a log subscriber is installed already")]
pub struct LogInitError;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_takes_text_and_json() {
        use clap::ValueEnum as _;
        assert_eq!(LogFormat::from_str("json", false), Ok(LogFormat::Json));
        assert_eq!(LogFormat::from_str("text", false), Ok(LogFormat::Text));
        assert!(LogFormat::from_str("logfmt", false).is_err());
    }
}

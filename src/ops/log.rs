//! Owns: the log output format (`--log-format text|json`) and installing the process's
//! `tracing` subscriber for it.
//!
//! - `text` (default): one human-readable line per event, as sluice has always written
//!   them: operational lines show their rendered message only (the structured parts of
//!   [`super::fields`] are left out, they are already in the message).
//! - `json`: one JSON object per line for log shippers: `timestamp`, `level`, `target`,
//!   `message`, and each part of an operational line as its own field (`code`, `vhost`,
//!   `queue`, `exchange`, `connection`, `channel`, `shard`, where the event has them).
//!
//! Does not: decide what is logged or at which level (the events do).

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};
use tracing_subscriber::EnvFilter;

use super::fields::FIELD_NAMES;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines (tracing-subscriber's default format).
    #[default]
    Text,
    /// One JSON object per line, operational parts as fields.
    Json,
}

impl LogFormat {
    /// The names accepted by `--log-format` and `[broker] log_format`.
    pub const NAMES: [&'static str; 2] = ["text", "json"];

    /// Parses `text` or `json`.
    pub fn parse(text: &str) -> Result<LogFormat, String> {
        match text {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("expected \"text\" or \"json\", got \"{other}\"")),
        }
    }
}

/// Installs the global subscriber: `filter` (a level or tracing directive; an invalid one
/// falls back to `info`) and `format`, writing to stdout.
pub fn init(filter: &str, format: LogFormat) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stdout);
    match format {
        LogFormat::Text => builder
            .fmt_fields(TextFields)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_ansi(false)
            .init(),
    }
}

/// tracing-subscriber's default field format, minus the structured parts of operational
/// lines: the text output stays what it was before they were added.
#[derive(Debug, Clone, Copy, Default)]
pub struct TextFields;

impl<'a> MakeVisitor<Writer<'a>> for TextFields {
    type Visitor = TextVisitor<'a>;

    fn make_visitor(&self, target: Writer<'a>) -> TextVisitor<'a> {
        TextVisitor(DefaultVisitor::new(target, true))
    }
}

/// A [`DefaultVisitor`] that skips the fields named in [`FIELD_NAMES`].
pub struct TextVisitor<'a>(DefaultVisitor<'a>);

fn shown(field: &Field) -> bool {
    !FIELD_NAMES.contains(&field.name())
}

impl Visit for TextVisitor<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        if shown(field) {
            self.0.record_f64(field, value);
        }
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        if shown(field) {
            self.0.record_i64(field, value);
        }
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        if shown(field) {
            self.0.record_u64(field, value);
        }
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        if shown(field) {
            self.0.record_bool(field, value);
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if shown(field) {
            self.0.record_str(field, value);
        }
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        if shown(field) {
            self.0.record_error(field, value);
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if shown(field) {
            self.0.record_debug(field, value);
        }
    }
}

impl VisitOutput<fmt::Result> for TextVisitor<'_> {
    fn finish(self) -> fmt::Result {
        self.0.finish()
    }
}

impl VisitFmt for TextVisitor<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        self.0.writer()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse() {
        assert_eq!(LogFormat::parse("text"), Ok(LogFormat::Text));
        assert_eq!(LogFormat::parse("json"), Ok(LogFormat::Json));
        assert!(LogFormat::parse("xml").is_err());
    }

    /// The text format writes an operational line's message and nothing else, as it did
    /// before the events carried fields; other events keep their fields.
    #[test]
    fn text_lines_leave_the_parts_out() {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let w = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || w.clone())
            .with_ansi(false)
            .without_time()
            .fmt_fields(TextFields)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            crate::ops::event::OpsEvent::FlowRemoved {
                subject: "con:2(guest@127.0.0.1:5000/)".into(),
                channel: 1,
            }
            .emit();
            tracing::info!(other = 7, "not an ops line");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            " INFO sluice::ops: [con:2(guest@127.0.0.1:5000/)/ch:1] CHN-1006 : Flow Control Removed\n \
             INFO sluice::ops::log::tests: not an ops line other=7\n"
        );
    }
}

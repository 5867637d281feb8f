//! Owns: [`StreamEvent`], the operational log lines of streams (`STR-` codes): a reader
//! predicted to lose its position to retention, a reader whose position retention
//! removed, a reader that skipped unreadable data, and the segments retention deleted.
//! Rendered and emitted under `sluice::ops` like every [`super::event::OpsEvent`];
//! documented in `config/log-codes.md`.
//!
//! Does not: decide when they happen (`stream` and `shard::home::streams` do).

use std::fmt;

use tracing::Level;

use super::escape::Escaped;
use super::event::thousands;
use super::fields::{LineFields, LogFields};

/// One stream event. `reader` is the consumer tag, `connection` its connection's name.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// STR-1001: a reader is predicted to lose its position to retention within the
    /// warning horizon.
    ReaderFalling {
        vhost: String,
        stream: String,
        reader: String,
        connection: String,
        lag_messages: u64,
        lag_bytes: u64,
        seconds: f64,
    },
    /// STR-1002: retention removed a reader's position: it goes on at the first offset
    /// left, `skipped` messages later.
    PositionRemoved {
        vhost: String,
        stream: String,
        reader: String,
        connection: String,
        from: u64,
        to: u64,
    },
    /// STR-1003: a reader met a chunk that does not check and goes on after its segment.
    UnreadableSkipped {
        vhost: String,
        stream: String,
        reader: String,
        segment: u32,
        from: u64,
        to: u64,
    },
    /// STR-1004: retention deleted segments.
    SegmentsRemoved {
        vhost: String,
        stream: String,
        segments: usize,
        first_offset: u64,
    },
}

impl StreamEvent {
    pub fn code(&self) -> &'static str {
        match self {
            StreamEvent::ReaderFalling { .. } => "STR-1001",
            StreamEvent::PositionRemoved { .. } => "STR-1002",
            StreamEvent::UnreadableSkipped { .. } => "STR-1003",
            StreamEvent::SegmentsRemoved { .. } => "STR-1004",
        }
    }

    /// Logs the event at its level, with its parts as fields ([`super::fields`]).
    pub fn emit(&self) {
        super::fields::emit(self);
    }
}

impl LogFields for StreamEvent {
    fn level(&self) -> Level {
        match self {
            StreamEvent::SegmentsRemoved { .. } => Level::INFO,
            StreamEvent::UnreadableSkipped { .. } => Level::ERROR,
            _ => Level::WARN,
        }
    }

    fn fields(&self) -> LineFields<'_> {
        let code = self.code();
        match self {
            StreamEvent::ReaderFalling { vhost, stream, .. }
            | StreamEvent::PositionRemoved { vhost, stream, .. }
            | StreamEvent::UnreadableSkipped { vhost, stream, .. }
            | StreamEvent::SegmentsRemoved { vhost, stream, .. } => {
                LineFields::queue(code, vhost, stream)
            }
        }
    }
}

impl fmt::Display for StreamEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self.code();
        match self {
            StreamEvent::ReaderFalling {
                vhost,
                stream,
                reader,
                connection,
                lag_messages,
                lag_bytes,
                seconds,
            } => write!(
                f,
                "[vh({vhost})/qu({stream})] {code} : Reader falling behind retention : reader '{reader}' on {connection} : {} messages, {} bytes behind : position removed in about {seconds:.0} s",
                thousands(*lag_messages),
                thousands(*lag_bytes),
                vhost = Escaped(vhost),
                stream = Escaped(stream),
                reader = Escaped(reader),
                connection = Escaped(connection),
            ),
            StreamEvent::PositionRemoved {
                vhost,
                stream,
                reader,
                connection,
                from,
                to,
            } => write!(
                f,
                "[vh({vhost})/qu({stream})] {code} : Reader position removed by retention : reader '{reader}' on {connection} : was at offset {from}, goes on at {to} : {} messages skipped",
                thousands(to.saturating_sub(*from)),
                vhost = Escaped(vhost),
                stream = Escaped(stream),
                reader = Escaped(reader),
                connection = Escaped(connection),
            ),
            StreamEvent::UnreadableSkipped {
                vhost,
                stream,
                reader,
                segment,
                from,
                to,
            } => write!(
                f,
                "[vh({vhost})/qu({stream})] {code} : Unreadable chunk skipped : reader '{reader}' : segment {segment}, offsets {from} to {to}",
                vhost = Escaped(vhost),
                stream = Escaped(stream),
                reader = Escaped(reader),
            ),
            StreamEvent::SegmentsRemoved {
                vhost,
                stream,
                segments,
                first_offset,
            } => write!(
                f,
                "[vh({vhost})/qu({stream})] {code} : Retention : {segments} segments deleted : first offset now {first_offset}",
                vhost = Escaped(vhost),
                stream = Escaped(stream),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_as_documented() {
        let e = StreamEvent::PositionRemoved {
            vhost: "/".into(),
            stream: "prices".into(),
            reader: "slow".into(),
            connection: "127.0.0.1:5000 -> 127.0.0.1:5672".into(),
            from: 10,
            to: 1_510,
        };
        assert_eq!(
            e.to_string(),
            "[vh(/)/qu(prices)] STR-1002 : Reader position removed by retention : reader 'slow' on 127.0.0.1:5000 -> 127.0.0.1:5672 : was at offset 10, goes on at 1510 : 1,500 messages skipped"
        );
        let e = StreamEvent::ReaderFalling {
            vhost: "/".into(),
            stream: "prices".into(),
            reader: "slow".into(),
            connection: "c".into(),
            lag_messages: 12_000,
            lag_bytes: 1_048_576,
            seconds: 7.4,
        };
        assert_eq!(
            e.to_string(),
            "[vh(/)/qu(prices)] STR-1001 : Reader falling behind retention : reader 'slow' on c : 12,000 messages, 1,048,576 bytes behind : position removed in about 7 s"
        );
        assert_eq!(e.level(), Level::WARN);
    }

    #[test]
    fn every_code_is_documented() {
        let doc = include_str!("../../config/log-codes.md");
        for code in ["STR-1001", "STR-1002", "STR-1003", "STR-1004"] {
            assert!(
                doc.contains(&format!("| {code} |")),
                "{code} in log-codes.md"
            );
        }
    }
}

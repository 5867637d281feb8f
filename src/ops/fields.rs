//! Owns: the structured parts of an operational line ([`LineFields`]: its code and,
//! where the event has them, vhost, queue, exchange, connection, channel and shard), the
//! [`LogFields`] trait every event type implements in its own file (its level and its
//! parts), and the one place that hands an event to `tracing` with those parts as
//! fields ([`emit`]). With `--log-format json` each part is its own JSON field next to
//! the rendered message; the text format shows the message alone (see [`super::log`]),
//! exactly as before.
//!
//! Does not: render messages (each event's `Display` does), choose levels or know any
//! event type (each event file implements [`LogFields`]).

use std::fmt;

use tracing::Level;

/// The names of the fields [`emit`] attaches; the text format leaves them out.
pub const FIELD_NAMES: [&str; 7] = [
    "code",
    "vhost",
    "queue",
    "exchange",
    "connection",
    "channel",
    "shard",
];

/// An operational line's parts. `None` parts are not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LineFields<'a> {
    pub code: &'static str,
    pub vhost: Option<&'a str>,
    pub queue: Option<&'a str>,
    pub exchange: Option<&'a str>,
    /// The connection subject, as in `[con:7(guest@127.0.0.1:51234/)]`.
    pub connection: Option<&'a str>,
    pub channel: Option<u16>,
    pub shard: Option<u16>,
}

impl<'a> LineFields<'a> {
    /// A line with its code and no other part.
    pub fn code(code: &'static str) -> Self {
        LineFields {
            code,
            ..LineFields::default()
        }
    }

    /// A line about one queue of a vhost.
    pub fn queue(code: &'static str, vhost: &'a str, queue: &'a str) -> Self {
        LineFields {
            vhost: Some(vhost),
            queue: Some(queue),
            ..LineFields::code(code)
        }
    }

    /// A line about one connection (`subject`), and one of its channels.
    pub fn connection(code: &'static str, subject: &'a str, channel: Option<u16>) -> Self {
        LineFields {
            connection: Some(subject),
            channel,
            ..LineFields::code(code)
        }
    }
}

/// An operational event as the log writes it: its message is its `Display`, and it
/// says at which level it is written and which parts it names.
pub trait LogFields: fmt::Display {
    /// The level the event's kind deserves.
    fn level(&self) -> Level;

    /// The event's code and the objects it names, for structured logs.
    fn fields(&self) -> LineFields<'_>;
}

/// Writes one operational line under the target `sluice::ops` at the event's level,
/// with its parts as tracing fields and its rendering as the message.
pub fn emit(event: &dyn LogFields) {
    let fields = event.fields();
    macro_rules! at {
        ($level:expr) => {
            tracing::event!(
                target: "sluice::ops",
                $level,
                code = fields.code,
                vhost = fields.vhost,
                queue = fields.queue,
                exchange = fields.exchange,
                connection = fields.connection,
                channel = fields.channel,
                shard = fields.shard,
                "{event}"
            )
        };
    }
    match event.level() {
        Level::ERROR => at!(Level::ERROR),
        Level::WARN => at!(Level::WARN),
        Level::INFO => at!(Level::INFO),
        Level::DEBUG => at!(Level::DEBUG),
        Level::TRACE => at!(Level::TRACE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::event::{FlowCause, OpsEvent};
    use crate::ops::store_event::StoreEvent;

    #[test]
    fn events_name_their_objects() {
        let e = OpsEvent::QueueCreate {
            vhost: "/".into(),
            queue: "q".into(),
            durable: false,
            exclusive: false,
            auto_delete: false,
        };
        assert_eq!(
            e.fields(),
            LineFields {
                code: "QUE-1001",
                vhost: Some("/"),
                queue: Some("q"),
                ..LineFields::default()
            }
        );
        let e = OpsEvent::FlowEnforced {
            subject: "con:2(guest@127.0.0.1:5000/)".into(),
            channel: 3,
            cause: FlowCause::Queue("prices".into()),
        };
        let f = e.fields();
        assert_eq!(f.code, "CHN-1005");
        assert_eq!(f.connection, Some("con:2(guest@127.0.0.1:5000/)"));
        assert_eq!(f.channel, Some(3));
        assert_eq!(f.queue, Some("prices"));
        let e = StoreEvent::Overfull {
            vhost: "/v".into(),
            size: 2,
            overfull: 1,
        };
        assert_eq!(e.fields().vhost, Some("/v"));
        assert_eq!(e.fields().code, "MST-1008");
    }
}

//! Owns: the structured parts of an operational line ([`LogFields`]: its code and, where
//! the event has them, vhost, queue, exchange, connection, channel and shard) and the one
//! place that hands an event to `tracing` with those parts as fields. With
//! `--log-format json` each part is its own JSON field next to the rendered message; the
//! text format shows the message alone (see [`super::log`]), exactly as before.
//!
//! Does not: render messages (each event's `Display` does) or choose levels (`emit`).

use std::fmt;

use tracing::Level;

use super::event::{FlowCause, OpsEvent};
use super::store_event::StoreEvent;

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
pub struct LogFields<'a> {
    pub code: &'static str,
    pub vhost: Option<&'a str>,
    pub queue: Option<&'a str>,
    pub exchange: Option<&'a str>,
    /// The connection subject, as in `[con:7(guest@127.0.0.1:51234/)]`.
    pub connection: Option<&'a str>,
    pub channel: Option<u16>,
    pub shard: Option<u16>,
}

impl<'a> LogFields<'a> {
    fn code(code: &'static str) -> Self {
        LogFields {
            code,
            ..LogFields::default()
        }
    }

    fn queue(code: &'static str, vhost: &'a str, queue: &'a str) -> Self {
        LogFields {
            vhost: Some(vhost),
            queue: Some(queue),
            ..LogFields::code(code)
        }
    }

    fn connection(code: &'static str, subject: &'a str, channel: Option<u16>) -> Self {
        LogFields {
            connection: Some(subject),
            channel,
            ..LogFields::code(code)
        }
    }
}

/// Writes one operational line under the target `sluice::ops` at `level`, with `fields`
/// as tracing fields and `message` as the message.
pub fn emit(level: Level, fields: &LogFields<'_>, message: &dyn fmt::Display) {
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
                "{message}"
            )
        };
    }
    match level {
        Level::ERROR => at!(Level::ERROR),
        Level::WARN => at!(Level::WARN),
        Level::INFO => at!(Level::INFO),
        Level::DEBUG => at!(Level::DEBUG),
        Level::TRACE => at!(Level::TRACE),
    }
}

impl OpsEvent {
    /// The event's code and the objects it names, for structured logs.
    pub fn fields(&self) -> LogFields<'_> {
        let code = self.code();
        match self {
            OpsEvent::BrokerStartup { .. }
            | OpsEvent::BrokerListening { .. }
            | OpsEvent::BrokerShuttingDown
            | OpsEvent::BrokerReady
            | OpsEvent::BrokerStopped
            | OpsEvent::MemoryAlarmSet { .. }
            | OpsEvent::MemoryAlarmCleared { .. }
            | OpsEvent::MemoryWatermarks { .. }
            | OpsEvent::FileLimit { .. }
            | OpsEvent::Panic { .. }
            | OpsEvent::NotifyFailed { .. }
            | OpsEvent::ManagementListening { .. }
            | OpsEvent::TlsListening { .. }
            | OpsEvent::TlsHandshakeFailed { .. }
            | OpsEvent::MemoryReport { .. }
            | OpsEvent::PlaintextPasswords { .. } => LogFields::code(code),
            OpsEvent::AccessRefused {
                subject, channel, ..
            } => LogFields::connection(code, subject, Some(*channel)),
            OpsEvent::VhostRefused { subject, .. } => LogFields::connection(code, subject, None),
            OpsEvent::ShardStarted { shard, .. } | OpsEvent::AcceptFailed { shard, .. } => {
                LogFields {
                    shard: Some(*shard),
                    ..LogFields::code(code)
                }
            }
            OpsEvent::ConnectionOpen { subject, .. }
            | OpsEvent::ConnectionClose { subject, .. }
            | OpsEvent::ReadingSuspended { subject, .. }
            | OpsEvent::ReadingResumed { subject } => LogFields::connection(code, subject, None),
            OpsEvent::ChannelCreate { subject, channel }
            | OpsEvent::ChannelClose {
                subject, channel, ..
            }
            | OpsEvent::FlowRemoved { subject, channel } => {
                LogFields::connection(code, subject, Some(*channel))
            }
            OpsEvent::FlowEnforced {
                subject,
                channel,
                cause,
            } => LogFields {
                queue: match cause {
                    FlowCause::Queue(queue) => Some(queue),
                    FlowCause::Memory | FlowCause::Store | FlowCause::Disk => None,
                },
                ..LogFields::connection(code, subject, Some(*channel))
            },
            OpsEvent::QueueCreate { vhost, queue, .. }
            | OpsEvent::QueueDeleted { vhost, queue }
            | OpsEvent::QueueOverfull { vhost, queue, .. }
            | OpsEvent::QueueUnderfull { vhost, queue, .. }
            | OpsEvent::QueueDiscarded { vhost, queue, .. }
            | OpsEvent::QueueRejected { vhost, queue, .. } => LogFields::queue(code, vhost, queue),
            OpsEvent::ExchangeCreate {
                vhost, exchange, ..
            }
            | OpsEvent::ExchangeDeleted { vhost, exchange } => LogFields {
                vhost: Some(vhost),
                exchange: Some(exchange),
                ..LogFields::code(code)
            },
            OpsEvent::SlowConsumerDetected(r)
            | OpsEvent::SlowConsumerPredicted(r)
            | OpsEvent::SlowConsumerExempt(r) => LogFields::queue(code, &r.vhost, &r.queue),
        }
    }
}

impl StoreEvent {
    /// The event's code and the objects it names, for structured logs.
    pub fn fields(&self) -> LogFields<'_> {
        let code = self.code();
        match self {
            StoreEvent::Location { .. }
            | StoreEvent::RecoveryStart
            | StoreEvent::RecoveryComplete { .. }
            | StoreEvent::QueuesRehomed { .. }
            | StoreEvent::Damaged { .. }
            | StoreEvent::DiskAlarmSet { .. }
            | StoreEvent::DiskAlarmCleared { .. }
            | StoreEvent::WriteFailed { .. }
            | StoreEvent::DefinitionsKept { .. } => LogFields::code(code),
            StoreEvent::Closed { shard, .. } => LogFields {
                shard: Some(*shard),
                ..LogFields::code(code)
            },
            StoreEvent::QueueRecovered { vhost, queue, .. }
            | StoreEvent::Evicted { vhost, queue, .. } => LogFields::queue(code, vhost, queue),
            StoreEvent::Overfull { vhost, .. } | StoreEvent::Underfull { vhost, .. } => LogFields {
                vhost: Some(vhost),
                ..LogFields::code(code)
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            LogFields {
                code: "QUE-1001",
                vhost: Some("/"),
                queue: Some("q"),
                ..LogFields::default()
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

//! Owns: each [`OpsEvent`]'s log level and the structured fields its line carries
//! (`LogFields`: the code, and the vhost, queue, connection or channel it names), one
//! `match` beside the event's text in `ops::event`.
//!
//! Does not: render the line's text (`ops::event`'s `Display`) or emit it.

use tracing::Level;

use super::{FlowCause, OpsEvent};
use crate::ops::fields::{LineFields, LogFields};

impl LogFields for OpsEvent {
    fn level(&self) -> Level {
        match self {
            OpsEvent::ChannelCreate { .. } | OpsEvent::ChannelClose { reason: None, .. } => {
                Level::DEBUG
            }
            OpsEvent::MemoryAlarmSet { .. }
            | OpsEvent::QueueDiscarded { .. }
            | OpsEvent::QueueRejected { .. }
            | OpsEvent::ReadingSuspended { .. }
            | OpsEvent::SlowConsumerDetected(_)
            | OpsEvent::SlowConsumerPredicted(_)
            | OpsEvent::SlowConsumerExempt(_)
            | OpsEvent::PlaintextPasswords { .. }
            | OpsEvent::AccessRefused { .. }
            | OpsEvent::VhostRefused { .. }
            | OpsEvent::NotifyFailed { .. }
            | OpsEvent::AcceptFailed { .. }
            | OpsEvent::SendRingUnavailable { .. }
            | OpsEvent::ReaderParkUnavailable { .. }
            | OpsEvent::HugePages { error: Some(_), .. }
            | OpsEvent::TlsHandshakeFailed { .. } => Level::WARN,
            OpsEvent::Panic { .. } => Level::ERROR,
            _ => Level::INFO,
        }
    }

    fn fields(&self) -> LineFields<'_> {
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
            | OpsEvent::HugePages { .. }
            | OpsEvent::Panic { .. }
            | OpsEvent::NotifyFailed { .. }
            | OpsEvent::ManagementListening { .. }
            | OpsEvent::PrometheusListening { .. }
            | OpsEvent::TlsListening { .. }
            | OpsEvent::TlsHandshakeFailed { .. }
            | OpsEvent::MemoryReport { .. }
            | OpsEvent::PlaintextPasswords { .. } => LineFields::code(code),
            OpsEvent::AccessRefused {
                subject, channel, ..
            } => LineFields::connection(code, subject, Some(*channel)),
            OpsEvent::VhostRefused { subject, .. } => LineFields::connection(code, subject, None),
            OpsEvent::ShardStarted { shard, .. }
            | OpsEvent::AcceptFailed { shard, .. }
            | OpsEvent::SendRingUnavailable { shard, .. }
            | OpsEvent::ReaderParkUnavailable { shard, .. } => LineFields {
                shard: Some(*shard),
                ..LineFields::code(code)
            },
            OpsEvent::ConnectionOpen { subject, .. }
            | OpsEvent::ConnectionClose { subject, .. }
            | OpsEvent::ReadingSuspended { subject, .. }
            | OpsEvent::ReadingResumed { subject } => LineFields::connection(code, subject, None),
            OpsEvent::ChannelCreate { subject, channel }
            | OpsEvent::ChannelClose {
                subject, channel, ..
            }
            | OpsEvent::FlowRemoved { subject, channel } => {
                LineFields::connection(code, subject, Some(*channel))
            }
            OpsEvent::FlowEnforced {
                subject,
                channel,
                cause,
            } => LineFields {
                queue: match cause {
                    FlowCause::Queue(queue) => Some(queue),
                    FlowCause::Memory | FlowCause::Store | FlowCause::Disk => None,
                },
                ..LineFields::connection(code, subject, Some(*channel))
            },
            OpsEvent::QueueCreate { vhost, queue, .. }
            | OpsEvent::QueueDeleted { vhost, queue }
            | OpsEvent::QueueOverfull { vhost, queue, .. }
            | OpsEvent::QueueUnderfull { vhost, queue, .. }
            | OpsEvent::QueueDiscarded { vhost, queue, .. }
            | OpsEvent::QueueRejected { vhost, queue, .. } => LineFields::queue(code, vhost, queue),
            OpsEvent::ExchangeCreate {
                vhost, exchange, ..
            }
            | OpsEvent::ExchangeDeleted { vhost, exchange } => LineFields {
                vhost: Some(vhost),
                exchange: Some(exchange),
                ..LineFields::code(code)
            },
            OpsEvent::SlowConsumerDetected(r)
            | OpsEvent::SlowConsumerPredicted(r)
            | OpsEvent::SlowConsumerExempt(r) => LineFields::queue(code, &r.vhost, &r.queue),
        }
    }
}

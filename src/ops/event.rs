//! Owns: [`OpsEvent`], every operational log line sluice writes, each with its Qpid-style
//! code (`BRK-1002`, `CON-1001`, `QUE-1001`, …), rendered by one formatter and emitted
//! under the `sluice::ops` tracing target. The codes are documented in
//! `config/log-codes.md`.
//!
//! Does not: format ad-hoc strings for other modules or rate-limit (callers that can
//! repeat, such as discards, keep their own minimum gap).

use std::fmt;
use std::net::SocketAddr;

/// One operational event.
#[derive(Debug, Clone, PartialEq)]
pub enum OpsEvent {
    /// BRK-1001: startup, with version and shard count.
    BrokerStartup {
        version: &'static str,
        shards: usize,
    },
    /// BRK-1002: a listener is bound.
    BrokerListening { addr: SocketAddr },
    /// BRK-1003: shutdown begins.
    BrokerShuttingDown,
    /// BRK-1004: every shard is accepting connections.
    BrokerReady,
    /// BRK-1005: the broker has stopped.
    BrokerStopped,
    /// BRK-1006: shard started (with its pinned core, if any).
    ShardStarted { shard: u16, core: Option<usize> },
    /// CON-1001: connection opened (after connection.open).
    ConnectionOpen { subject: String, client: String },
    /// CON-1002: connection closed.
    ConnectionClose { subject: String, reason: String },
    /// CHN-1001: channel created.
    ChannelCreate { subject: String, channel: u16 },
    /// CHN-1003: channel closed, with the reason if the broker closed it.
    ChannelClose {
        subject: String,
        channel: u16,
        reason: Option<String>,
    },
    /// QUE-1001: queue created.
    QueueCreate {
        vhost: String,
        queue: String,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
    },
    /// QUE-1002: queue deleted.
    QueueDeleted { vhost: String, queue: String },
    /// EXH-1001: exchange created.
    ExchangeCreate {
        vhost: String,
        exchange: String,
        kind: &'static str,
        durable: bool,
    },
    /// EXH-1002: exchange deleted.
    ExchangeDeleted { vhost: String, exchange: String },
}

impl OpsEvent {
    pub fn code(&self) -> &'static str {
        match self {
            OpsEvent::BrokerStartup { .. } => "BRK-1001",
            OpsEvent::BrokerListening { .. } => "BRK-1002",
            OpsEvent::BrokerShuttingDown => "BRK-1003",
            OpsEvent::BrokerReady => "BRK-1004",
            OpsEvent::BrokerStopped => "BRK-1005",
            OpsEvent::ShardStarted { .. } => "BRK-1006",
            OpsEvent::ConnectionOpen { .. } => "CON-1001",
            OpsEvent::ConnectionClose { .. } => "CON-1002",
            OpsEvent::ChannelCreate { .. } => "CHN-1001",
            OpsEvent::ChannelClose { .. } => "CHN-1003",
            OpsEvent::QueueCreate { .. } => "QUE-1001",
            OpsEvent::QueueDeleted { .. } => "QUE-1002",
            OpsEvent::ExchangeCreate { .. } => "EXH-1001",
            OpsEvent::ExchangeDeleted { .. } => "EXH-1002",
        }
    }

    /// Writes the event to the log at the level its kind deserves.
    pub fn emit(&self) {
        match self {
            OpsEvent::ChannelCreate { .. } | OpsEvent::ChannelClose { reason: None, .. } => {
                tracing::debug!(target: "sluice::ops", "{self}");
            }
            _ => tracing::info!(target: "sluice::ops", "{self}"),
        }
    }
}

impl fmt::Display for OpsEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self.code();
        match self {
            OpsEvent::BrokerStartup { version, shards } => {
                write!(f, "{code} : Startup : Version: {version} Shards: {shards}")
            }
            OpsEvent::BrokerListening { addr } => {
                write!(f, "{code} : Starting : Listening on TCP {addr}")
            }
            OpsEvent::BrokerShuttingDown => write!(f, "{code} : Shutting down"),
            OpsEvent::BrokerReady => write!(f, "{code} : Ready"),
            OpsEvent::BrokerStopped => write!(f, "{code} : Stopped"),
            OpsEvent::ShardStarted { shard, core } => match core {
                Some(core) => write!(f, "{code} : Shard {shard} started on core {core}"),
                None => write!(f, "{code} : Shard {shard} started"),
            },
            OpsEvent::ConnectionOpen { subject, client } => {
                write!(f, "[{subject}] {code} : Open : Client: {client}")
            }
            OpsEvent::ConnectionClose { subject, reason } => {
                write!(f, "[{subject}] {code} : Close : {reason}")
            }
            OpsEvent::ChannelCreate { subject, channel } => {
                write!(f, "[{subject}/ch:{channel}] {code} : Create")
            }
            OpsEvent::ChannelClose {
                subject,
                channel,
                reason,
            } => match reason {
                Some(reason) => write!(f, "[{subject}/ch:{channel}] {code} : Close : {reason}"),
                None => write!(f, "[{subject}/ch:{channel}] {code} : Close"),
            },
            OpsEvent::QueueCreate {
                vhost,
                queue,
                durable,
                exclusive,
                auto_delete,
            } => {
                write!(f, "[vh({vhost})/qu({queue})] {code} : Create")?;
                if *durable {
                    f.write_str(" Durable")?;
                }
                if *exclusive {
                    f.write_str(" Exclusive")?;
                }
                if *auto_delete {
                    f.write_str(" AutoDelete")?;
                }
                Ok(())
            }
            OpsEvent::QueueDeleted { vhost, queue } => {
                write!(f, "[vh({vhost})/qu({queue})] {code} : Deleted")
            }
            OpsEvent::ExchangeCreate {
                vhost,
                exchange,
                kind,
                durable,
            } => {
                write!(f, "[vh({vhost})/ex({kind}/{exchange})] {code} : Create")?;
                if *durable {
                    f.write_str(" Durable")?;
                }
                Ok(())
            }
            OpsEvent::ExchangeDeleted { vhost, exchange } => {
                write!(f, "[vh({vhost})/ex({exchange})] {code} : Deleted")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_with_code() {
        let e = OpsEvent::BrokerListening {
            addr: SocketAddr::from(([127, 0, 0, 1], 5672)),
        };
        assert_eq!(
            e.to_string(),
            "BRK-1002 : Starting : Listening on TCP 127.0.0.1:5672"
        );
        let e = OpsEvent::QueueCreate {
            vhost: "/".into(),
            queue: "q".into(),
            durable: true,
            exclusive: false,
            auto_delete: true,
        };
        assert_eq!(
            e.to_string(),
            "[vh(/)/qu(q)] QUE-1001 : Create Durable AutoDelete"
        );
    }
}

//! Owns: [`LimitRefusal`], the typed refusal of a configured limit (connections per
//! node, source address, vhost and user; channels per connection; queues per vhost;
//! consumers per channel; bindings per exchange) with its reply code and RabbitMQ's
//! wording where RabbitMQ has the limit.
//!
//! Does not: count anything or decide when a limit applies (`crate::limits` and the
//! shard's handler do).

use std::fmt;
use std::net::IpAddr;

use crate::protocol::ReplyCode;

/// A limit that refused an operation, with the evidence its reply text names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LimitRefusal {
    /// `limits.connections.max`: rabbit_reader's node connection limit.
    NodeConnections { limit: u32 },
    /// `limits.connections.per_ip` (RabbitMQ has no such limit; worded like its others).
    IpConnections { ip: IpAddr, limit: u32 },
    /// `[vhost."V"] max_connections`: RabbitMQ's vhost limit `max-connections`.
    VhostConnections {
        vhost: String,
        user: String,
        limit: u32,
    },
    /// `[limits.user."U"] max_connections`: RabbitMQ's user limit `max-connections`.
    UserConnections { user: String, limit: u32 },
    /// `[limits.user."U"] max_channels`: RabbitMQ's user limit `max-channels`, the
    /// user's channels on all its connections.
    UserChannels { user: String, limit: u32 },
    /// `channel.open` with `opened` channels already open: the negotiated channel_max.
    ChannelMax { opened: usize, max: u16 },
    /// `[vhost."V"] max_queues`: RabbitMQ's vhost limit `max-queues`.
    Queues {
        queue: String,
        vhost: String,
        limit: u32,
    },
    /// `limits.consumers_per_channel`: RabbitMQ's `consumer_max_per_channel`.
    ConsumersPerChannel { limit: u32 },
    /// `limits.bindings_per_exchange` (RabbitMQ has no such limit).
    BindingsPerExchange {
        exchange: String,
        vhost: String,
        limit: u32,
    },
}

impl LimitRefusal {
    /// 530 NOT_ALLOWED (a connection close) for connections, channels and consumers, as
    /// RabbitMQ; 406 PRECONDITION_FAILED (a channel close) for queues, as RabbitMQ, and
    /// for bindings alike.
    pub fn code(&self) -> ReplyCode {
        match self {
            LimitRefusal::Queues { .. } | LimitRefusal::BindingsPerExchange { .. } => {
                ReplyCode::PreconditionFailed
            }
            _ => ReplyCode::NotAllowed,
        }
    }

    /// The configuration key that set the limit, for log lines.
    pub fn key(&self) -> String {
        match self {
            LimitRefusal::NodeConnections { .. } => "limits.connections.max".into(),
            LimitRefusal::IpConnections { .. } => "limits.connections.per_ip".into(),
            LimitRefusal::VhostConnections { vhost, .. } => {
                format!("vhost.\"{vhost}\".max_connections")
            }
            LimitRefusal::UserConnections { user, .. } => {
                format!("limits.user.\"{user}\".max_connections")
            }
            LimitRefusal::UserChannels { user, .. } => {
                format!("limits.user.\"{user}\".max_channels")
            }
            LimitRefusal::ChannelMax { .. } => "limits.channel_max".into(),
            LimitRefusal::Queues { vhost, .. } => format!("vhost.\"{vhost}\".max_queues"),
            LimitRefusal::ConsumersPerChannel { .. } => "limits.consumers_per_channel".into(),
            LimitRefusal::BindingsPerExchange { .. } => "limits.bindings_per_exchange".into(),
        }
    }
}

impl fmt::Display for LimitRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitRefusal::NodeConnections { limit } => write!(
                f,
                "connection refused: node connection limit ({limit}) is reached"
            ),
            LimitRefusal::IpConnections { ip, limit } => write!(
                f,
                "connection refused for address {ip}: source address connection limit ({limit}) is reached"
            ),
            LimitRefusal::VhostConnections { vhost, user, limit } => write!(
                f,
                "access to vhost '{vhost}' refused for user '{user}': connection limit ({limit}) is reached"
            ),
            LimitRefusal::UserConnections { user, limit } => write!(
                f,
                "connection refused for user '{user}': user connection limit ({limit}) is reached"
            ),
            LimitRefusal::UserChannels { user, limit } => write!(
                f,
                "number of channels opened for user '{user}' has reached the maximum allowed user limit of {limit}"
            ),
            LimitRefusal::ChannelMax { opened, max } => write!(
                f,
                "number of channels opened ({opened}) has reached the negotiated channel_max ({max})"
            ),
            LimitRefusal::Queues {
                queue,
                vhost,
                limit,
            } => write!(
                f,
                "cannot declare queue '{queue}': queue limit in vhost '{vhost}' ({limit}) is reached"
            ),
            LimitRefusal::ConsumersPerChannel { limit } => {
                write!(f, "reached maximum ({limit}) of consumers per channel")
            }
            LimitRefusal::BindingsPerExchange {
                exchange,
                vhost,
                limit,
            } => write!(
                f,
                "cannot bind to exchange '{exchange}' in vhost '{vhost}': binding limit per exchange ({limit}) is reached"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_use_rabbitmq_codes_and_words() {
        let vhost = LimitRefusal::VhostConnections {
            vhost: "/".into(),
            user: "guest".into(),
            limit: 10,
        };
        assert_eq!(vhost.code(), ReplyCode::NotAllowed);
        assert_eq!(
            vhost.to_string(),
            "access to vhost '/' refused for user 'guest': connection limit (10) is reached"
        );
        let queues = LimitRefusal::Queues {
            queue: "q".into(),
            vhost: "/".into(),
            limit: 3,
        };
        assert_eq!(queues.code(), ReplyCode::PreconditionFailed);
        assert_eq!(queues.key(), "vhost.\"/\".max_queues");
        assert_eq!(
            LimitRefusal::ChannelMax { opened: 2, max: 2 }.to_string(),
            "number of channels opened (2) has reached the negotiated channel_max (2)"
        );
    }
}

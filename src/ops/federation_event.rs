//! Owns: [`FederationEvent`], the operational lines of federation links (FED-1001..1006),
//! rendered and emitted under `sluice::ops` like every [`super::event::OpsEvent`].
//! Documented in `config/log-codes.md`. A link that fails over and over writes its
//! FED-1003 at most once per report gap, with the number of failures since (`count`).
//!
//! Does not: decide when they happen (`crate::federation` does) or rate-limit.

use std::fmt;

use tracing::Level;

use super::escape::Escaped;
use super::fields::{LineFields, LogFields};

/// Which link a line is about: a federated exchange of a vhost and one of its upstreams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkName {
    pub vhost: String,
    pub exchange: String,
    pub upstream: String,
}

impl fmt::Display for LinkName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[fed:{}:{}@{}]",
            Escaped(&self.upstream),
            Escaped(&self.vhost),
            Escaped(&self.exchange)
        )
    }
}

/// One federation event.
#[derive(Debug, Clone, PartialEq)]
pub enum FederationEvent {
    /// FED-1001: a link is connecting to its upstream (`uri` without credentials).
    LinkStarting { link: LinkName, uri: String },
    /// FED-1002: a link consumes from its upstream queue and forwards.
    LinkRunning {
        link: LinkName,
        uri: String,
        queue: String,
        bindings: usize,
    },
    /// FED-1003: a link failed or lost its upstream or local connection; it retries after
    /// `retry_ms`. `count` failures since the last such line.
    LinkDown {
        link: LinkName,
        reason: String,
        retry_ms: u64,
        count: u64,
    },
    /// FED-1004: a link stopped for good (its exchange was deleted, or the broker stops).
    LinkStopped { link: LinkName, reason: String },
    /// FED-1005: the upstream has no `x-federation-upstream` exchange type (a RabbitMQ
    /// without the federation plugin): the link's upstream exchange is a fanout, and
    /// loops are cut only at this end.
    UpstreamFanout { link: LinkName },
    /// FED-1006: messages dropped by the link's loop and hop checks since the last line
    /// (acknowledged upstream, not republished).
    Dropped { link: LinkName, count: u64 },
}

impl FederationEvent {
    pub fn code(&self) -> &'static str {
        match self {
            FederationEvent::LinkStarting { .. } => "FED-1001",
            FederationEvent::LinkRunning { .. } => "FED-1002",
            FederationEvent::LinkDown { .. } => "FED-1003",
            FederationEvent::LinkStopped { .. } => "FED-1004",
            FederationEvent::UpstreamFanout { .. } => "FED-1005",
            FederationEvent::Dropped { .. } => "FED-1006",
        }
    }

    fn link(&self) -> &LinkName {
        match self {
            FederationEvent::LinkStarting { link, .. }
            | FederationEvent::LinkRunning { link, .. }
            | FederationEvent::LinkDown { link, .. }
            | FederationEvent::LinkStopped { link, .. }
            | FederationEvent::UpstreamFanout { link }
            | FederationEvent::Dropped { link, .. } => link,
        }
    }

    pub fn emit(&self) {
        super::fields::emit(self);
    }
}

impl LogFields for FederationEvent {
    fn level(&self) -> Level {
        match self {
            FederationEvent::LinkDown { .. } | FederationEvent::UpstreamFanout { .. } => {
                Level::WARN
            }
            _ => Level::INFO,
        }
    }

    fn fields(&self) -> LineFields<'_> {
        let link = self.link();
        LineFields {
            vhost: Some(&link.vhost),
            exchange: Some(&link.exchange),
            ..LineFields::code(self.code())
        }
    }
}

impl fmt::Display for FederationEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self.code();
        let link = self.link();
        match self {
            FederationEvent::LinkStarting { uri, .. } => {
                write!(f, "{link} {code} : Link starting : {}", Escaped(uri))
            }
            FederationEvent::LinkRunning {
                uri,
                queue,
                bindings,
                ..
            } => write!(
                f,
                "{link} {code} : Link running : {} : queue {} : {bindings} bindings",
                Escaped(uri),
                Escaped(queue)
            ),
            FederationEvent::LinkDown {
                reason,
                retry_ms,
                count,
                ..
            } => {
                write!(
                    f,
                    "{link} {code} : Link down : {} : retry in {retry_ms} ms",
                    Escaped(reason)
                )?;
                if *count > 1 {
                    write!(f, " : {count} failures")?;
                }
                Ok(())
            }
            FederationEvent::LinkStopped { reason, .. } => {
                write!(f, "{link} {code} : Link stopped : {}", Escaped(reason))
            }
            FederationEvent::UpstreamFanout { .. } => write!(
                f,
                "{link} {code} : Upstream has no x-federation-upstream exchange type : using fanout"
            ),
            FederationEvent::Dropped { count, .. } => write!(
                f,
                "{link} {code} : Messages dropped by the loop and hop checks : {count}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let link = LinkName {
            vhost: "/".into(),
            exchange: "amq.topic".into(),
            upstream: "root".into(),
        };
        let down = FederationEvent::LinkDown {
            link: link.clone(),
            reason: "connection refused".into(),
            retry_ms: 5000,
            count: 3,
        };
        assert_eq!(
            down.to_string(),
            "[fed:root:/@amq.topic] FED-1003 : Link down : connection refused : retry in 5000 ms : 3 failures"
        );
        let starting = FederationEvent::LinkStarting {
            link,
            uri: "amqp://root:5672/%2f".into(),
        };
        assert_eq!(
            starting.to_string(),
            "[fed:root:/@amq.topic] FED-1001 : Link starting : amqp://root:5672/%2f"
        );
    }
}

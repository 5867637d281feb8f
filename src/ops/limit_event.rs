//! Owns: [`LimitEvent`], the operational lines of the admission limits and login
//! throttling (CON-1006..1009, CON-1016, the management listener's connection cap CON-1017, CHN-1015/1016, QUE-1010, EXH-1010), rendered and emitted
//! under `sluice::ops` like every [`super::event::OpsEvent`]. Each is rate-limited by its
//! caller: the first occurrence is written, then at most one line per report gap with
//! the number of occurrences since the last line (`count`). Documented in
//! `config/log-codes.md`.
//!
//! Does not: decide when they happen, or count (`crate::limits` does).

use std::fmt;

use tracing::Level;

use super::escape::Escaped;
use super::fields::{LineFields, LogFields};

/// One limit event. `count` is how many occurrences this line reports (1 for the first).
#[derive(Debug, Clone, PartialEq)]
pub enum LimitEvent {
    /// CON-1006: `connection.open` refused by a connection limit.
    ConnectionRefused {
        subject: String,
        reason: String,
        key: String,
        count: u64,
    },
    /// CON-1007: a socket closed at accept: too many unauthenticated sockets on the shard.
    AcceptRefused {
        shard: u16,
        peer: String,
        cap: u32,
        count: u64,
    },
    /// CON-1008: a login was refused.
    LoginRefused {
        user: String,
        peer: String,
        mechanism: String,
        count: u64,
    },
    /// CON-1009: login attempts from an address dropped without a reply (too many
    /// failures).
    LoginDropped {
        peer: String,
        user: String,
        failures: u32,
        count: u64,
    },
    /// CON-1016: a failed login dropped without a reply by the broker-wide ceiling on
    /// failed logins answered, or because the shard holds its most delayed answers.
    LoginCeiling {
        peer: String,
        reason: CeilingReason,
        count: u64,
    },
    /// CON-1017: a management connection closed at accept: `http.max_connections` are
    /// open.
    ManagementRefused {
        peer: String,
        cap: usize,
        count: u64,
    },
    /// CHN-1015 (consumers per channel) / CHN-1016 (channel_max): a channel limit
    /// refused an operation; the connection is closed with 530.
    ChannelRefused {
        subject: String,
        channel: u16,
        reason: String,
        key: String,
        count: u64,
    },
    /// QUE-1010: a queue declaration refused by the vhost's queue limit.
    QueueRefused {
        vhost: String,
        queue: String,
        limit: u32,
        count: u64,
    },
    /// EXH-1010: a binding refused by the exchange's binding limit.
    BindingRefused {
        vhost: String,
        exchange: String,
        limit: u32,
        count: u64,
    },
}

impl LimitEvent {
    pub fn code(&self) -> &'static str {
        match self {
            LimitEvent::ConnectionRefused { .. } => "CON-1006",
            LimitEvent::AcceptRefused { .. } => "CON-1007",
            LimitEvent::LoginRefused { .. } => "CON-1008",
            LimitEvent::LoginDropped { .. } => "CON-1009",
            LimitEvent::LoginCeiling { .. } => "CON-1016",
            LimitEvent::ManagementRefused { .. } => "CON-1017",
            LimitEvent::ChannelRefused { key, .. } if key == "limits.channel_max" => "CHN-1016",
            LimitEvent::ChannelRefused { .. } => "CHN-1015",
            LimitEvent::QueueRefused { .. } => "QUE-1010",
            LimitEvent::BindingRefused { .. } => "EXH-1010",
        }
    }

    /// Logs the event (warn), with its parts as fields.
    pub fn emit(&self) {
        super::fields::emit(self);
    }
}

impl LogFields for LimitEvent {
    fn level(&self) -> Level {
        Level::WARN
    }

    fn fields(&self) -> LineFields<'_> {
        let code = self.code();
        let base = LineFields {
            code,
            ..LineFields::default()
        };
        match self {
            LimitEvent::ConnectionRefused { subject, .. } => LineFields {
                connection: Some(subject),
                ..base
            },
            LimitEvent::ChannelRefused {
                subject, channel, ..
            } => LineFields {
                connection: Some(subject),
                channel: Some(*channel),
                ..base
            },
            LimitEvent::AcceptRefused { shard, .. } => LineFields {
                shard: Some(*shard),
                ..base
            },
            LimitEvent::LoginRefused { .. }
            | LimitEvent::LoginDropped { .. }
            | LimitEvent::LoginCeiling { .. }
            | LimitEvent::ManagementRefused { .. } => base,
            LimitEvent::QueueRefused { vhost, queue, .. } => LineFields {
                vhost: Some(vhost),
                queue: Some(queue),
                ..base
            },
            LimitEvent::BindingRefused {
                vhost, exchange, ..
            } => LineFields {
                vhost: Some(vhost),
                exchange: Some(exchange),
                ..base
            },
        }
    }
}

/// Why a failed login got no answer (CON-1016).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CeilingReason {
    /// The broker-wide ceiling had no slot within `limits.login.max_delay_ms`.
    PerSecond(u32),
    /// The shard holds `limits.login.max_delayed` delayed answers.
    DelayedAnswers,
}

impl fmt::Display for CeilingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CeilingReason::PerSecond(rate) => write!(
                f,
                "the broker answers at most {rate} failed logins per second (limits.login.failures_per_second)"
            ),
            CeilingReason::DelayedAnswers => f.write_str(
                "too many delayed answers to failed logins are pending (limits.login.max_delayed)",
            ),
        }
    }
}

/// ` : N since the last report` when a line stands for more than one occurrence.
struct Since(u64, &'static str);

impl fmt::Display for Since {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 > 1 {
            write!(f, " : {} {} since the last report", self.0, self.1)
        } else {
            Ok(())
        }
    }
}

impl fmt::Display for LimitEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self.code();
        match self {
            LimitEvent::ConnectionRefused {
                subject,
                reason,
                key,
                count,
            } => write!(
                f,
                "[{}] {code} : Connection refused : {} ({key}){}",
                Escaped(subject),
                Escaped(reason),
                Since(*count, "refused")
            ),
            LimitEvent::AcceptRefused {
                shard,
                peer,
                cap,
                count,
            } => write!(
                f,
                "{code} : Connection from {peer} closed at accept on shard {shard} : {cap} connections have not completed connection.open (limits.connections.unauthenticated_per_shard){}",
                Since(*count, "closed")
            ),
            LimitEvent::LoginRefused {
                user,
                peer,
                mechanism,
                count,
            } => write!(
                f,
                "{code} : Login refused : user '{}' from {peer} ({}){}",
                Escaped(user),
                Escaped(mechanism),
                Since(*count, "refused")
            ),
            LimitEvent::LoginDropped {
                peer,
                user,
                failures,
                count,
            } => write!(
                f,
                "{code} : Login attempt from {peer} as user '{}' dropped without a reply : {failures} failed logins of this user from this address (limits.login.burst){}",
                Escaped(user),
                Since(*count, "dropped")
            ),
            LimitEvent::LoginCeiling {
                peer,
                reason,
                count,
            } => write!(
                f,
                "{code} : Failed login from {peer} dropped without a reply : {reason}{}",
                Since(*count, "dropped")
            ),
            LimitEvent::ManagementRefused { peer, cap, count } => write!(
                f,
                "{code} : Management connection from {peer} closed at accept : {cap} management connections are open (http.max_connections){}",
                Since(*count, "closed")
            ),
            LimitEvent::ChannelRefused {
                subject,
                channel,
                reason,
                key,
                count,
            } => write!(
                f,
                "[{}/ch:{channel}] {code} : Refused : {} ({key}){}",
                Escaped(subject),
                Escaped(reason),
                Since(*count, "refused")
            ),
            LimitEvent::QueueRefused {
                vhost,
                queue,
                limit,
                count,
            } => write!(
                f,
                "[vh({})/qu({})] {code} : Declaration refused : queue limit ({limit}) of the vhost is reached{}",
                Escaped(vhost),
                Escaped(queue),
                Since(*count, "refused")
            ),
            LimitEvent::BindingRefused {
                vhost,
                exchange,
                limit,
                count,
            } => write!(
                f,
                "[vh({})/ex({})] {code} : Binding refused : binding limit per exchange ({limit}) is reached{}",
                Escaped(vhost),
                Escaped(exchange),
                Since(*count, "refused")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_lines_escape_the_user_and_count() {
        let e = LimitEvent::LoginRefused {
            user: "bad\nCON-1001 : Open".into(),
            peer: "127.0.0.1:5000".into(),
            mechanism: "PLAIN".into(),
            count: 1,
        };
        assert_eq!(
            e.to_string(),
            "CON-1008 : Login refused : user 'bad\\nCON-1001 : Open' from 127.0.0.1:5000 (PLAIN)"
        );
        let e = LimitEvent::LoginDropped {
            peer: "127.0.0.1".into(),
            user: "a\u{2028}b".into(),
            failures: 20,
            count: 7,
        };
        assert!(e.to_string().contains("as user 'a\\u2028b'"), "{e}");
        let e2 = LimitEvent::LoginCeiling {
            peer: "127.0.0.9:4000".into(),
            reason: CeilingReason::PerSecond(100),
            count: 1,
        };
        assert_eq!(
            e2.to_string(),
            "CON-1016 : Failed login from 127.0.0.9:4000 dropped without a reply : the broker answers at most 100 failed logins per second (limits.login.failures_per_second)"
        );
        assert!(
            e.to_string()
                .ends_with(" : 7 dropped since the last report"),
            "{e}"
        );
        let e = LimitEvent::ChannelRefused {
            subject: "con:1(g@h/)".into(),
            channel: 1,
            reason: "x".into(),
            key: "limits.channel_max".into(),
            count: 1,
        };
        assert_eq!(e.code(), "CHN-1016");
    }
}

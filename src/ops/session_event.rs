//! Owns: [`SessionEvent`], the operational lines of a connection's handshake and
//! connection methods that are neither limits nor permissions — a secret updated
//! (CON-1011), a `start-ok` naming a mechanism that was not offered (CON-1012), a
//! connection closed during its handshake (CON-1013) — rendered and emitted under
//! `sluice::ops` like every [`super::event::OpsEvent`]. Documented in
//! `config/log-codes.md`.
//!
//! Does not: decide when they happen or rate-limit them (the shard's handler does, with
//! a `limits::report::Reporter` where a peer can repeat one in a loop).

use std::fmt;
use std::net::SocketAddr;

use tracing::Level;

use super::escape::Escaped;
use super::fields::{LineFields, LogFields};

/// One handshake or connection-method event.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionEvent {
    /// CON-1011: `connection.update-secret` was answered with update-secret-ok; the
    /// connection keeps the user and permissions it logged in with.
    /// Rate-limited by the handler: `suppressed` updates were not logged since the
    /// previous line.
    SecretUpdated {
        subject: String,
        user: String,
        mechanism: String,
        reason: String,
        suppressed: u64,
    },
    /// CON-1012: `start-ok` named a mechanism `connection.start` did not offer; the
    /// socket is closed without a reply after `delay_s` seconds (0: at once, the shard
    /// holding its most delayed answers). `count` lines since the last one (rate-limited).
    MechanismRefused {
        peer: SocketAddr,
        mechanism: String,
        offered: &'static str,
        delay_s: u64,
        count: u64,
    },
    /// CON-1013: the broker closed a connection before `connection.open-ok` (an unknown
    /// vhost, a refused tune): the reply code and text the client got.
    HandshakeClosed {
        peer: SocketAddr,
        reason: String,
        name: Option<String>,
    },
}

impl SessionEvent {
    pub fn code(&self) -> &'static str {
        match self {
            SessionEvent::SecretUpdated { .. } => "CON-1011",
            SessionEvent::MechanismRefused { .. } => "CON-1012",
            SessionEvent::HandshakeClosed { .. } => "CON-1013",
        }
    }

    /// Logs the event (info for a secret update, warn otherwise).
    pub fn emit(&self) {
        super::fields::emit(self);
    }
}

impl LogFields for SessionEvent {
    fn level(&self) -> Level {
        match self {
            SessionEvent::SecretUpdated { .. } => Level::INFO,
            SessionEvent::MechanismRefused { .. } | SessionEvent::HandshakeClosed { .. } => {
                Level::WARN
            }
        }
    }

    fn fields(&self) -> LineFields<'_> {
        match self {
            SessionEvent::SecretUpdated { subject, .. } => {
                LineFields::connection(self.code(), subject, None)
            }
            _ => LineFields::code(self.code()),
        }
    }
}

impl fmt::Display for SessionEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self.code();
        match self {
            SessionEvent::SecretUpdated {
                subject,
                user,
                mechanism,
                reason,
                suppressed,
            } => {
                write!(
                    f,
                    "[{}] {code} : Secret updated : user '{}' ({}) keeps its identity and permissions : reason: {}",
                    Escaped(subject),
                    Escaped(user),
                    Escaped(mechanism),
                    Escaped(reason)
                )?;
                if *suppressed > 0 {
                    write!(f, " ({suppressed} more updates not logged)")?;
                }
                Ok(())
            }
            SessionEvent::MechanismRefused {
                peer,
                mechanism,
                offered,
                delay_s,
                count,
            } => {
                write!(
                    f,
                    "{code} : Mechanism not offered : {peer} chose '{}' (offered: {offered}) : socket closed without a reply after {delay_s} s",
                    Escaped(mechanism)
                )?;
                if *count > 1 {
                    write!(f, " : {} refused since the last report", count - 1)?;
                }
                Ok(())
            }
            SessionEvent::HandshakeClosed { peer, reason, name } => {
                write!(
                    f,
                    "{code} : Closed during handshake : Client: {peer} : {}",
                    Escaped(reason)
                )?;
                match name {
                    Some(name) => write!(f, " : Name: {}", Escaped(name)),
                    None => Ok(()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let peer = SocketAddr::from(([127, 0, 0, 1], 5000));
        let e = SessionEvent::SecretUpdated {
            subject: "con:1(alice@127.0.0.1:5000/)".into(),
            user: "alice".into(),
            mechanism: "PLAIN".into(),
            reason: "refresh\nBRK-1004 : Ready".into(),
            suppressed: 0,
        };
        assert_eq!(
            e.to_string(),
            "[con:1(alice@127.0.0.1:5000/)] CON-1011 : Secret updated : user 'alice' (PLAIN) \
             keeps its identity and permissions : reason: refresh\\nBRK-1004 : Ready"
        );
        assert_eq!(e.fields().connection, Some("con:1(alice@127.0.0.1:5000/)"));
        let e = SessionEvent::MechanismRefused {
            peer,
            mechanism: "CRAM-MD5".into(),
            offered: "PLAIN AMQPLAIN",
            delay_s: 3,
            count: 3,
        };
        assert_eq!(
            e.to_string(),
            "CON-1012 : Mechanism not offered : 127.0.0.1:5000 chose 'CRAM-MD5' (offered: \
             PLAIN AMQPLAIN) : socket closed without a reply after 3 s : 2 refused since \
             the last report"
        );
        let e = SessionEvent::HandshakeClosed {
            peer,
            reason: "530 NOT_ALLOWED - vhost 'nosuch' not found".into(),
            name: Some("orders".into()),
        };
        assert_eq!(
            e.to_string(),
            "CON-1013 : Closed during handshake : Client: 127.0.0.1:5000 : 530 NOT_ALLOWED - \
             vhost 'nosuch' not found : Name: orders"
        );
    }
}

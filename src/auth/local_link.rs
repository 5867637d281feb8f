//! Owns: the credential a federation link of this broker logs in to this broker with —
//! a reserved user name and a secret drawn at start, known only to the process, accepted
//! only from a loopback address, with every permission on every vhost (RabbitMQ's
//! federation publishes over a direct, internal connection; sluice's link is a loopback
//! AMQP client of its own broker).
//!
//! Does not: open connections or decide which vhosts a link uses.

use super::password::Password;

/// The user name a link logs in with. Not a configurable user: a configured user of
/// this name can never log in while federation runs (the link's credential wins).
pub const LINK_USER: &str = "sluice-federation-link";

/// The per-process credential of this broker's own federation links.
#[derive(Debug)]
pub struct LinkCredential {
    secret: String,
    check: Password,
}

impl LinkCredential {
    /// A new random secret; `None` when the OS has no randomness to give.
    pub fn generate() -> Option<LinkCredential> {
        let mut bytes = [0u8; 32];
        getrandom::getrandom(&mut bytes).ok()?;
        let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Some(LinkCredential {
            check: Password::Plain(secret.clone()),
            secret,
        })
    }

    /// The password a link sends.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// Whether `user` / `password` is this credential (constant time in the password).
    pub fn accepts(&self, user: &str, password: &[u8]) -> bool {
        user == LINK_USER && self.check.verify(password)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_only_itself() {
        let c = LinkCredential::generate().unwrap();
        assert_eq!(c.secret().len(), 64);
        assert!(c.accepts(LINK_USER, c.secret().as_bytes()));
        assert!(!c.accepts(LINK_USER, b"guest"));
        assert!(!c.accepts("guest", c.secret().as_bytes()));
        let other = LinkCredential::generate().unwrap();
        assert!(!other.accepts(LINK_USER, c.secret().as_bytes()));
    }
}

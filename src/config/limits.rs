//! Owns: the admission limits — connections (broker-wide, per source address, per
//! virtual host, per user, unauthenticated sockets per shard), queues per virtual host,
//! consumers per channel, bindings per exchange — and login throttling: their defaults
//! ([`ResourceLimits::default`]), their file sections (`[limits]` keys,
//! `[limits.connections]`, `[limits.login]` (per (address, user), and the broker-wide
//! ceiling on failed logins answered), `[limits.user."U"]`, and `max_connections` /
//! `max_queues` of `[vhost."V"]`) and their validation. In the file a limit of 0 is
//! unlimited; the per-vhost and per-user limits in force are `Option`s (`None`: no
//! limit), because a limit set at run time may be 0 (RabbitMQ's: nothing admitted).
//!
//! Does not: count or enforce anything (`crate::limits` does).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;

use crate::session::connection::HANDSHAKE_TIMEOUT;

/// Every admission limit and the login throttle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceLimits {
    pub connections: ConnectionLimits,
    pub login: LoginThrottleSettings,
    /// Consumers one channel may hold (RabbitMQ `consumer_max_per_channel`); 0 = no limit.
    pub consumers_per_channel: u32,
    /// Bindings one exchange may have as source (to queues and exchanges); 0 = no limit.
    pub bindings_per_exchange: u32,
    /// Per-vhost limits, only for vhosts that set one.
    pub vhosts: Vec<(String, VhostLimits)>,
    /// Per-user limits, only for users that set one.
    pub users: Vec<(String, UserLimits)>,
}

/// `[limits.connections]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Open connections in the whole broker; 0 = no limit.
    pub max: u32,
    /// Open connections from one source address; 0 = no limit.
    pub per_ip: u32,
    /// Sockets per shard that have not completed `connection.open`; 0 = no limit.
    pub unauthenticated_per_shard: u32,
}

/// `[limits.login]`: failed logins slow down, then get no answer for, their (source
/// address, username) pair; a correct password is answered at once regardless.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginThrottleSettings {
    /// The delay before answering the next attempt after one failure; doubles with
    /// each further failure. Zero: no delay.
    pub initial_delay: Duration,
    /// The largest delay.
    pub max_delay: Duration,
    /// Failures after which further attempts are dropped without a reply until the
    /// address has been quiet; 0 = never dropped.
    pub burst: u32,
    /// An (address, user) pair with no failed login for this long is forgotten.
    pub quiet: Duration,
    /// Failed logins answered per second, broker-wide (every shard and the management
    /// listener); beyond it a failure waits for a slot (up to `max_delay`) or gets no
    /// answer. 0 = no ceiling.
    pub failures_per_second: u32,
    /// Delayed answers to failed logins one shard holds at once (each holds a
    /// connection); a failure whose answer would wait beyond it gets no answer.
    pub max_delayed: u32,
}

/// RabbitMQ's vhost limits `max-connections` and `max-queues` of one vhost
/// (`max_connections` and `max_queues` of `[vhost."V"]`, or set at run time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct VhostLimits {
    pub max_connections: Option<u32>,
    pub max_queues: Option<u32>,
}

/// RabbitMQ's user limits `max-connections` and `max-channels` of one user
/// (`[limits.user."U"]`, or set at run time). `max_channels` counts the user's channels
/// on all its connections together, as RabbitMQ does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct UserLimits {
    pub max_connections: Option<u32>,
    pub max_channels: Option<u32>,
}

impl Default for ResourceLimits {
    fn default() -> ResourceLimits {
        ResourceLimits {
            connections: ConnectionLimits {
                max: 0,
                per_ip: 0,
                unauthenticated_per_shard: 0,
            },
            login: LoginThrottleSettings {
                initial_delay: Duration::from_millis(100),
                max_delay: Duration::from_millis(5000),
                burst: 20,
                quiet: Duration::from_millis(60_000),
                failures_per_second: 100,
                max_delayed: 1024,
            },
            consumers_per_channel: 0,
            bindings_per_exchange: 0,
            vhosts: Vec::new(),
            users: Vec::new(),
        }
    }
}

impl ResourceLimits {
    /// A vhost's limits (none when it sets none).
    pub fn vhost(&self, name: &str) -> VhostLimits {
        self.vhosts
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, l)| *l)
            .unwrap_or_default()
    }

    /// A user's limits (none when it sets none).
    pub fn user(&self, name: &str) -> UserLimits {
        self.users
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, l)| *l)
            .unwrap_or_default()
    }

    /// Sets (or, with all fields `None`, removes) one vhost's limits.
    pub fn set_vhost(&mut self, name: &str, limits: VhostLimits) {
        self.vhosts.retain(|(n, _)| n != name);
        if limits != VhostLimits::default() {
            self.vhosts.push((name.to_owned(), limits));
        }
    }

    /// Sets (or, with all fields `None`, removes) one user's limits.
    pub fn set_user(&mut self, name: &str, limits: UserLimits) {
        self.users.retain(|(n, _)| n != name);
        if limits != UserLimits::default() {
            self.users.push((name.to_owned(), limits));
        }
    }

    /// Checks ranges; `vhosts` are the configured virtual hosts.
    pub fn validate(&self, vhosts: &[String]) -> Result<(), ConfigError> {
        let invalid = |key: String, reason: String| Err(ConfigError::Invalid { key, reason });
        let login = &self.login;
        if login.max_delay < login.initial_delay {
            return invalid(
                "limits.login.max_delay_ms".into(),
                "must be at least limits.login.initial_delay_ms".into(),
            );
        }
        // A delayed answer must come before the handshake deadline cuts the socket off.
        if login.max_delay >= HANDSHAKE_TIMEOUT {
            return invalid(
                "limits.login.max_delay_ms".into(),
                format!(
                    "must be below the handshake timeout ({} ms)",
                    HANDSHAKE_TIMEOUT.as_millis()
                ),
            );
        }
        if login.quiet.is_zero() && (login.burst > 0 || !login.initial_delay.is_zero()) {
            return invalid(
                "limits.login.quiet_ms".into(),
                "must be at least 1 ms while throttling is on".into(),
            );
        }
        for (name, _) in &self.vhosts {
            if !vhosts.contains(name) {
                return invalid(
                    format!("vhost.\"{name}\""),
                    format!("'{name}' is not in vhosts.names {vhosts:?}"),
                );
            }
        }
        Ok(())
    }
}

/// `[limits.connections]` in the file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionsSection {
    max: Option<u32>,
    per_ip: Option<u32>,
    unauthenticated_per_shard: Option<u32>,
}

/// `[limits.login]` in the file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoginSection {
    initial_delay_ms: Option<u64>,
    max_delay_ms: Option<u64>,
    burst: Option<u32>,
    quiet_ms: Option<u64>,
    failures_per_second: Option<u32>,
    max_delayed: Option<u32>,
}

/// `[limits.user."U"]` in the file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserSection {
    max_connections: Option<u32>,
    max_channels: Option<u32>,
}

/// The keys of `[limits]` this module owns.
pub struct LimitsKeys {
    pub consumers_per_channel: Option<u32>,
    pub bindings_per_exchange: Option<u32>,
    pub connections: Option<ConnectionsSection>,
    pub login: Option<LoginSection>,
    pub user: Option<BTreeMap<String, UserSection>>,
}

fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}

/// Applies the `[limits]` keys of a file.
pub fn apply(limits: &mut ResourceLimits, keys: LimitsKeys) {
    set(
        &mut limits.consumers_per_channel,
        keys.consumers_per_channel,
    );
    set(
        &mut limits.bindings_per_exchange,
        keys.bindings_per_exchange,
    );
    if let Some(c) = keys.connections {
        set(&mut limits.connections.max, c.max);
        set(&mut limits.connections.per_ip, c.per_ip);
        set(
            &mut limits.connections.unauthenticated_per_shard,
            c.unauthenticated_per_shard,
        );
    }
    if let Some(l) = keys.login {
        let ms = |v: Option<u64>| v.map(Duration::from_millis);
        set(&mut limits.login.initial_delay, ms(l.initial_delay_ms));
        set(&mut limits.login.max_delay, ms(l.max_delay_ms));
        set(&mut limits.login.burst, l.burst);
        set(&mut limits.login.quiet, ms(l.quiet_ms));
        set(&mut limits.login.failures_per_second, l.failures_per_second);
        set(&mut limits.login.max_delayed, l.max_delayed);
    }
    for (name, u) in keys.user.unwrap_or_default() {
        let current = limits.user(&name);
        let next = UserLimits {
            max_connections: file_limit(u.max_connections, current.max_connections),
            max_channels: file_limit(u.max_channels, current.max_channels),
        };
        limits.set_user(&name, next);
    }
}

/// Applies `max_connections` / `max_queues` of a `[vhost."V"]` section.
pub fn apply_vhost(
    limits: &mut ResourceLimits,
    name: &str,
    max_connections: Option<u32>,
    max_queues: Option<u32>,
) {
    let current = limits.vhost(name);
    let next = VhostLimits {
        max_connections: file_limit(max_connections, current.max_connections),
        max_queues: file_limit(max_queues, current.max_queues),
    };
    limits.set_vhost(name, next);
}

/// A file's limit over the current one: absent keeps it, 0 is no limit.
fn file_limit(value: Option<u32>, current: Option<u32>) -> Option<u32> {
    match value {
        None => current,
        Some(0) => None,
        Some(n) => Some(n),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{file, Config};

    #[test]
    fn limit_sections_parse() {
        let mut c = Config::default();
        let text = r#"
[limits]
consumers_per_channel = 3
bindings_per_exchange = 4
[limits.connections]
max = 100
per_ip = 10
unauthenticated_per_shard = 1000
[limits.login]
initial_delay_ms = 50
max_delay_ms = 400
burst = 5
quiet_ms = 2000
failures_per_second = 7
max_delayed = 8
[limits.user."app"]
max_connections = 7
max_channels = 3
[vhost."/"]
max_connections = 2
max_queues = 9
"#;
        file::apply_text(&mut c, text).expect("parses");
        c.validate().expect("valid");
        let r = &c.limits.resources;
        assert_eq!((r.consumers_per_channel, r.bindings_per_exchange), (3, 4));
        assert_eq!(
            (
                r.connections.max,
                r.connections.per_ip,
                r.connections.unauthenticated_per_shard
            ),
            (100, 10, 1000)
        );
        assert_eq!(r.login.burst, 5);
        assert_eq!(r.login.max_delay.as_millis(), 400);
        assert_eq!((r.login.failures_per_second, r.login.max_delayed), (7, 8));
        assert_eq!(r.user("app").max_connections, Some(7));
        assert_eq!(r.user("app").max_channels, Some(3));
        assert_eq!(r.vhost("/").max_connections, Some(2));
        assert_eq!(r.vhost("/").max_queues, Some(9));
        assert_eq!(r.vhost("other").max_queues, None);
    }

    #[test]
    fn bad_limits_name_their_key() {
        for (text, key) in [
            (
                "[limits.login]\ninitial_delay_ms = 500\nmax_delay_ms = 100\n",
                "limits.login.max_delay_ms",
            ),
            (
                "[limits.login]\nmax_delay_ms = 10000\n",
                "limits.login.max_delay_ms",
            ),
            ("[vhost.\"nope\"]\nmax_queues = 1\n", "vhost.\"nope\""),
        ] {
            let mut c = Config::default();
            file::apply_text(&mut c, text).expect("parses");
            let err = c.validate().expect_err(text);
            assert!(err.to_string().contains(key), "{err} should name {key}");
        }
        let mut c = Config::default();
        let err =
            file::apply_text(&mut c, "[limits.connections]\nmaxx = 1\n").expect_err("unknown key");
        assert!(err.contains("maxx"), "{err}");
    }
}

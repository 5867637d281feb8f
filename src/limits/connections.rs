//! Owns: [`ConnectionCounts`], the open-connection counts every shard shares (one `Arc`
//! made by `server::start`): broker-wide (an atomic, fixed at start), per virtual host
//! and per user, connections and channels (`super::named`: every name counted, its
//! limit changeable at run time), and per source address (a striped map whose
//! lock is taken only when a connection opens or closes, and only when
//! `limits.connections.per_ip` is set), and the broker-wide ceiling on failed logins
//! answered (`super::ceiling`, one atomic); and [`Admission`], what one open connection
//! holds of them, given back when it is dropped.
//!
//! Every count is taken with a compare-and-increment (or under its stripe's lock), so a
//! limit of N never admits N+1, even when two shards admit at the same instant.
//!
//! Does not: know about sockets, shards or AMQP beyond the refusal it returns.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use super::ceiling::FailureCeiling;
use super::named::{Counter, NamedCounts};
use crate::config::limits::ResourceLimits;
use crate::session::limit::LimitRefusal;

/// Stripes of the per-address map: connections from different addresses rarely meet
/// on one lock.
const IP_STRIPES: usize = 64;

/// The broker-wide connection counts.
pub struct ConnectionCounts {
    node: Option<Counter>,
    per_ip: u32,
    ips: Vec<Mutex<HashMap<IpAddr, u32>>>,
    /// Open connections per vhost (RabbitMQ's vhost limit `max-connections`).
    vhosts: NamedCounts,
    /// Open connections per user (the user limit `max-connections`).
    users: NamedCounts,
    /// Open channels per user, over all its connections (the user limit
    /// `max-channels`).
    user_channels: NamedCounts,
    /// The broker-wide ceiling on failed logins answered (`limits.login`), shared
    /// through this `Arc` with every shard and the management listener.
    pub failures: FailureCeiling,
}

/// The per-name limits of `limits`, as [`NamedCounts`] takes them.
fn vhost_connections(limits: &ResourceLimits) -> Vec<(String, Option<u32>)> {
    let each = limits.vhosts.iter();
    each.map(|(n, l)| (n.clone(), l.max_connections)).collect()
}

fn user_connections(limits: &ResourceLimits) -> Vec<(String, Option<u32>)> {
    let each = limits.users.iter();
    each.map(|(n, l)| (n.clone(), l.max_connections)).collect()
}

fn user_channels(limits: &ResourceLimits) -> Vec<(String, Option<u32>)> {
    let each = limits.users.iter();
    each.map(|(n, l)| (n.clone(), l.max_channels)).collect()
}

impl ConnectionCounts {
    pub fn new(limits: &ResourceLimits) -> ConnectionCounts {
        let per_ip = limits.connections.per_ip;
        ConnectionCounts {
            node: (limits.connections.max > 0).then(|| Counter::new(Some(limits.connections.max))),
            per_ip,
            ips: if per_ip > 0 {
                (0..IP_STRIPES).map(|_| Mutex::default()).collect()
            } else {
                Vec::new()
            },
            vhosts: NamedCounts::new(&vhost_connections(limits)),
            users: NamedCounts::new(&user_connections(limits)),
            user_channels: NamedCounts::new(&user_channels(limits)),
            failures: FailureCeiling::new(limits.login.failures_per_second),
        }
    }

    /// Puts the per-vhost and per-user limits of `limits` in force (a change at run
    /// time or a reload): connections and channels already open stay; the next one
    /// is checked against the new limit.
    pub fn set_limits(&self, limits: &ResourceLimits) {
        self.vhosts.set_limits(&vhost_connections(limits));
        self.users.set_limits(&user_connections(limits));
        self.user_channels.set_limits(&user_channels(limits));
    }

    /// Admits one connection opening `vhost` as `user` from `ip`, in RabbitMQ's order
    /// (node, vhost, user), then the source address; nothing is held when refused.
    pub fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        vhost: &str,
        user: &str,
    ) -> Result<Admission, LimitRefusal> {
        let mut held = Admission {
            counts: Arc::clone(self),
            node: false,
            vhost: None,
            user: None,
            ip: None,
            channels: self.user_channels.counter(user),
            channels_held: 0,
        };
        if let Some(node) = &self.node {
            node.try_take()
                .map_err(|limit| LimitRefusal::NodeConnections { limit })?;
            held.node = true;
        }
        let counter = self.vhosts.counter(vhost);
        counter
            .try_take()
            .map_err(|limit| LimitRefusal::VhostConnections {
                vhost: vhost.to_owned(),
                user: user.to_owned(),
                limit,
            })?;
        held.vhost = Some(counter);
        let counter = self.users.counter(user);
        counter
            .try_take()
            .map_err(|limit| LimitRefusal::UserConnections {
                user: user.to_owned(),
                limit,
            })?;
        held.user = Some(counter);
        if self.per_ip > 0 {
            if !self.take_ip(ip) {
                return Err(LimitRefusal::IpConnections {
                    ip,
                    limit: self.per_ip,
                });
            }
            held.ip = Some(ip);
        }
        Ok(held)
    }

    /// Open connections to `vhost` (figures and tests).
    pub fn vhost_count(&self, vhost: &str) -> u32 {
        self.vhosts.count(vhost)
    }

    /// Open channels of `user` over all its connections (figures and tests).
    pub fn user_channel_count(&self, user: &str) -> u32 {
        self.user_channels.count(user)
    }

    fn stripe(&self, ip: IpAddr) -> Option<&Mutex<HashMap<IpAddr, u32>>> {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let hash =
            BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(ip);
        self.ips.get(hash as usize % IP_STRIPES.max(1))
    }

    fn take_ip(&self, ip: IpAddr) -> bool {
        let Some(stripe) = self.stripe(ip) else {
            return true;
        };
        // A poisoned stripe (a panic aborts the process first) still holds valid counts.
        let mut map = stripe.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(ip).or_insert(0);
        if *n >= self.per_ip {
            if *n == 0 {
                map.remove(&ip);
            }
            return false;
        }
        *n += 1;
        true
    }

    fn give_ip(&self, ip: IpAddr) {
        let Some(stripe) = self.stripe(ip) else {
            return;
        };
        let mut map = stripe.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&ip);
            }
        }
    }

    /// Open connections from `ip` as counted for its limit (tests and figures).
    pub fn ip_count(&self, ip: IpAddr) -> u32 {
        self.stripe(ip).map_or(0, |s| {
            s.lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&ip)
                .copied()
                .unwrap_or(0)
        })
    }
}

/// What one open connection holds of the shared counts, its channels included; given
/// back on drop.
pub struct Admission {
    counts: Arc<ConnectionCounts>,
    node: bool,
    vhost: Option<Arc<Counter>>,
    user: Option<Arc<Counter>>,
    ip: Option<IpAddr>,
    /// The user's channel count, and how many of them this connection holds.
    channels: Arc<Counter>,
    channels_held: u32,
}

impl Admission {
    /// A channel of this connection opens: refused (RabbitMQ's 530) when its user (named
    /// `user`: the connection's, not kept here, issue 23) has `max-channels` open over all
    /// its connections.
    pub fn open_channel(&mut self, user: &str) -> Result<(), LimitRefusal> {
        self.channels
            .try_take()
            .map_err(|limit| LimitRefusal::UserChannels {
                user: user.to_owned(),
                limit,
            })?;
        self.channels_held += 1;
        Ok(())
    }

    /// A channel of this connection is gone.
    pub fn close_channel(&mut self) {
        if self.channels_held > 0 {
            self.channels_held -= 1;
            self.channels.give(1);
        }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let c = &self.counts;
        if self.node {
            if let Some(node) = &c.node {
                node.give(1);
            }
        }
        if let Some(counter) = &self.vhost {
            counter.give(1);
        }
        if let Some(counter) = &self.user {
            counter.give(1);
        }
        self.channels.give(self.channels_held);
        if let Some(ip) = self.ip {
            c.give_ip(ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::limits::{UserLimits, VhostLimits};

    fn counts(f: impl FnOnce(&mut ResourceLimits)) -> Arc<ConnectionCounts> {
        let mut l = ResourceLimits::default();
        f(&mut l);
        Arc::new(ConnectionCounts::new(&l))
    }

    const LO: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn each_limit_admits_exactly_n_and_releases_on_drop() {
        let c = counts(|l| {
            l.vhosts.push((
                "/".into(),
                VhostLimits {
                    max_connections: Some(2),
                    max_queues: None,
                },
            ))
        });
        let a = c.admit(LO, "/", "guest").expect("first");
        let b = c.admit(LO, "/", "guest").expect("second");
        assert!(matches!(
            c.admit(LO, "/", "guest"),
            Err(LimitRefusal::VhostConnections { limit: 2, .. })
        ));
        assert!(c.admit(LO, "other", "guest").is_ok());
        drop(a);
        let _c = c.admit(LO, "/", "guest").expect("slot released");
        drop(b);

        let c = counts(|l| l.connections.per_ip = 1);
        let a = c.admit(LO, "/", "u").expect("first");
        assert!(matches!(
            c.admit(LO, "/", "u"),
            Err(LimitRefusal::IpConnections { limit: 1, .. })
        ));
        let other: IpAddr = "127.0.0.2".parse().expect("ip");
        let _b = c.admit(other, "/", "u").expect("another address");
        drop(a);
        assert_eq!(c.ip_count(LO), 0);

        // A refusal by a later limit gives back what earlier ones took.
        let c = counts(|l| {
            l.connections.max = 5;
            l.users.push((
                "u".into(),
                UserLimits {
                    max_connections: Some(1),
                    max_channels: None,
                },
            ));
        });
        let _a = c.admit(LO, "/", "u").expect("first");
        assert!(c.admit(LO, "/", "u").is_err());
        let held = c.node.as_ref().map(Counter::count);
        assert_eq!(held, Some(1));
    }

    #[test]
    fn concurrent_admissions_never_exceed_the_limit() {
        let c = counts(|l| l.connections.max = 100);
        let admitted: Vec<usize> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        let mut held = Vec::new();
                        for _ in 0..1000 {
                            if let Ok(a) = c.admit(LO, "/", "u") {
                                held.push(a);
                            }
                        }
                        let n = held.len();
                        std::mem::forget(held);
                        n
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0)).collect()
        });
        assert_eq!(admitted.iter().sum::<usize>(), 100);
    }
}

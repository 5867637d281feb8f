//! Owns: [`ConnectionCounts`], the open-connection counts every shard shares (one `Arc`
//! made by `server::start`): broker-wide, per virtual host and per user (atomics, one
//! per limit that is set, fixed at start), and per source address (a striped map whose
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
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use super::ceiling::FailureCeiling;
use crate::config::limits::ResourceLimits;
use crate::session::limit::LimitRefusal;

/// Stripes of the per-address map: connections from different addresses rarely meet
/// on one lock.
const IP_STRIPES: usize = 64;

/// One limited count.
struct Counter {
    limit: u32,
    count: AtomicU32,
}

impl Counter {
    fn new(limit: u32) -> Counter {
        Counter {
            limit,
            count: AtomicU32::new(0),
        }
    }

    /// Takes one unit unless the count is at the limit.
    fn try_take(&self) -> bool {
        self.count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .is_ok()
    }

    fn give(&self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The broker-wide connection counts.
pub struct ConnectionCounts {
    node: Option<Counter>,
    per_ip: u32,
    ips: Vec<Mutex<HashMap<IpAddr, u32>>>,
    vhosts: Vec<(String, Counter)>,
    users: Vec<(String, Counter)>,
    /// The broker-wide ceiling on failed logins answered (`limits.login`), shared
    /// through this `Arc` with every shard and the management listener.
    pub failures: FailureCeiling,
}

impl ConnectionCounts {
    pub fn new(limits: &ResourceLimits) -> ConnectionCounts {
        let per_ip = limits.connections.per_ip;
        ConnectionCounts {
            node: (limits.connections.max > 0).then(|| Counter::new(limits.connections.max)),
            per_ip,
            ips: if per_ip > 0 {
                (0..IP_STRIPES).map(|_| Mutex::default()).collect()
            } else {
                Vec::new()
            },
            vhosts: limits
                .vhosts
                .iter()
                .filter(|(_, l)| l.max_connections > 0)
                .map(|(name, l)| (name.clone(), Counter::new(l.max_connections)))
                .collect(),
            users: limits
                .users
                .iter()
                .map(|(name, max)| (name.clone(), Counter::new(*max)))
                .collect(),
            failures: FailureCeiling::new(limits.login.failures_per_second),
        }
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
        };
        if let Some(node) = &self.node {
            if !node.try_take() {
                return Err(LimitRefusal::NodeConnections { limit: node.limit });
            }
            held.node = true;
        }
        if let Some(i) = self.vhosts.iter().position(|(n, _)| n == vhost) {
            let counter = &self.vhosts[i].1;
            if !counter.try_take() {
                return Err(LimitRefusal::VhostConnections {
                    vhost: vhost.to_owned(),
                    user: user.to_owned(),
                    limit: counter.limit,
                });
            }
            held.vhost = Some(i);
        }
        if let Some(i) = self.users.iter().position(|(n, _)| n == user) {
            let counter = &self.users[i].1;
            if !counter.try_take() {
                return Err(LimitRefusal::UserConnections {
                    user: user.to_owned(),
                    limit: counter.limit,
                });
            }
            held.user = Some(i);
        }
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

/// What one open connection holds of the shared counts; given back on drop.
pub struct Admission {
    counts: Arc<ConnectionCounts>,
    node: bool,
    vhost: Option<usize>,
    user: Option<usize>,
    ip: Option<IpAddr>,
}

impl Drop for Admission {
    fn drop(&mut self) {
        let c = &self.counts;
        if self.node {
            if let Some(node) = &c.node {
                node.give();
            }
        }
        if let Some(i) = self.vhost {
            c.vhosts[i].1.give();
        }
        if let Some(i) = self.user {
            c.users[i].1.give();
        }
        if let Some(ip) = self.ip {
            c.give_ip(ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::limits::VhostLimits;

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
                    max_connections: 2,
                    max_queues: 0,
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
            l.users.push(("u".into(), 1));
        });
        let _a = c.admit(LO, "/", "u").expect("first");
        assert!(c.admit(LO, "/", "u").is_err());
        let held = c.node.as_ref().map(|n| n.count.load(Ordering::Acquire));
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

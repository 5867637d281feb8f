//! Owns: [`ShardLimits`], one shard's part of the admission limits: the sockets it
//! accepted that have not completed `connection.open` (capped per shard, checked at
//! accept before anything is allocated for the socket), the [`Admission`] of each
//! connection it opened (given back when the connection is dropped), its login
//! throttle with the delayed answers it holds (at most `limits.login.max_delayed`, each
//! a [`DelayPermit`]), and the rate limits of the limit log lines.
//!
//! Does not: share anything but the `Arc<ConnectionCounts>` (whose failed-login ceiling
//! it applies); plain cells, a shard is one thread.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::connections::{Admission, ConnectionCounts};
use super::login::{Gate, LoggedThrottle};
use super::report::Reporter;
use crate::config::Config;
use crate::model::ids::ConnId;
use crate::ops::limit_event::LimitEvent;
use crate::session::limit::LimitRefusal;

/// The answer to a failed login on a shard.
#[derive(Debug)]
pub enum LoginAnswer {
    /// Answer at once.
    Now,
    /// Answer after the delay, holding the permit meanwhile.
    After(Duration, DelayPermit),
    /// Close the connection without a reply.
    Drop,
}

/// One delayed answer's place among the shard's `limits.login.max_delayed`; given back
/// when dropped (answered, or the connection went meanwhile).
pub struct DelayPermit {
    delayed: Rc<Cell<u32>>,
}

impl Drop for DelayPermit {
    fn drop(&mut self) {
        self.delayed.set(self.delayed.get().saturating_sub(1));
    }
}

impl std::fmt::Debug for DelayPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DelayPermit")
    }
}

/// One shard's admission state.
pub struct ShardLimits {
    shard: u16,
    pub counts: Arc<ConnectionCounts>,
    unauth_cap: u32,
    unauth: Cell<u32>,
    opened: RefCell<HashMap<ConnId, Admission>>,
    login: LoggedThrottle,
    /// Delayed answers to failed logins held now, and the most there may be.
    delayed: Rc<Cell<u32>>,
    max_delayed: u32,
    accept_report: Reporter,
    open_report: Reporter,
    channel_report: Reporter,
    queue_report: Reporter,
    binding_report: Reporter,
}

impl ShardLimits {
    pub fn new(shard: u16, config: &Config, counts: Arc<ConnectionCounts>) -> ShardLimits {
        let r = &config.limits.resources;
        ShardLimits {
            shard,
            counts,
            unauth_cap: r.connections.unauthenticated_per_shard,
            unauth: Cell::new(0),
            opened: RefCell::default(),
            login: LoggedThrottle::new(r.login.clone()),
            delayed: Rc::default(),
            max_delayed: r.login.max_delayed,
            accept_report: Reporter::default(),
            open_report: Reporter::default(),
            channel_report: Reporter::default(),
            queue_report: Reporter::default(),
            binding_report: Reporter::default(),
        }
    }

    /// At accept: whether the new socket is served. Refused (the caller closes it at
    /// once) when the shard already holds `unauthenticated_per_shard` sockets that have
    /// not completed `connection.open` (CON-1007). Failed logins never refuse a socket
    /// here: a correct password from any address is answered. An admitted socket counts
    /// as unauthenticated until
    /// [`ShardLimits::admit_open`] or [`ShardLimits::conn_gone`].
    pub fn admit_socket(&self, peer: SocketAddr, now: Instant) -> bool {
        let unauth = self.unauth.get();
        if self.unauth_cap > 0 && unauth >= self.unauth_cap {
            if let Some(count) = self.accept_report.note(now) {
                LimitEvent::AcceptRefused {
                    shard: self.shard,
                    peer: peer.to_string(),
                    cap: self.unauth_cap,
                    count,
                }
                .emit();
            }
            return false;
        }
        self.unauth.set(unauth + 1);
        true
    }

    /// Sockets of this shard that have not completed `connection.open`.
    pub fn unauthenticated(&self) -> u32 {
        self.unauth.get()
    }

    /// At `connection.open`: takes the connection's place in every connection limit,
    /// or says which one refused it (CON-1006, rate-limited).
    pub fn admit_open(
        &self,
        conn: ConnId,
        peer: SocketAddr,
        vhost: &str,
        user: &str,
        now: Instant,
    ) -> Result<(), LimitRefusal> {
        match self.counts.admit(peer.ip(), vhost, user) {
            Ok(admission) => {
                if self.opened.borrow_mut().insert(conn, admission).is_none() {
                    self.unauth.set(self.unauth.get().saturating_sub(1));
                }
                Ok(())
            }
            Err(refusal) => {
                if let Some(count) = self.open_report.note(now) {
                    LimitEvent::ConnectionRefused {
                        subject: format!("{user}@{peer}/{vhost}"),
                        reason: format!("{} {refusal}", refusal.code().code()),
                        key: refusal.key(),
                        count,
                    }
                    .emit();
                }
                Err(refusal)
            }
        }
    }

    /// A channel of `conn` (logged in as `user`) opens: refused when its user is at its
    /// `max-channels` over all its connections (RabbitMQ's 530). A connection not
    /// admitted (yet) holds no channel count.
    pub fn open_channel(&self, conn: ConnId, user: &str) -> Result<(), LimitRefusal> {
        match self.opened.borrow_mut().get_mut(&conn) {
            Some(admission) => admission.open_channel(user),
            None => Ok(()),
        }
    }

    /// A channel of `conn` is gone (closed by either side).
    pub fn close_channel(&self, conn: ConnId) {
        if let Some(admission) = self.opened.borrow_mut().get_mut(&conn) {
            admission.close_channel();
        }
    }

    /// A connection of this shard is gone: its admission is given back, or, if it
    /// never opened, its unauthenticated place.
    pub fn conn_gone(&self, conn: ConnId) {
        if self.opened.borrow_mut().remove(&conn).is_none() {
            self.unauth.set(self.unauth.get().saturating_sub(1));
        }
    }

    /// An admitted socket closed before it became a connection (a TLS handshake that
    /// failed or timed out): it no longer counts as unauthenticated.
    pub fn socket_gone(&self) {
        self.unauth.set(self.unauth.get().saturating_sub(1));
    }

    /// A login from `peer` as `user` was refused: remembered for throttling, logged
    /// (CON-1008, rate-limited), and its answer decided by the (address, user) throttle
    /// and the broker-wide ceiling. An answer that waits holds a [`DelayPermit`] until
    /// it is sent; with `max_delayed` held, a failure that would wait gets no answer.
    pub fn login_failed(
        &self,
        peer: SocketAddr,
        user: &str,
        mechanism: &str,
        now: Instant,
    ) -> LoginAnswer {
        let may_wait = self.delayed.get() < self.max_delayed;
        let ceiling = &self.counts.failures;
        match self
            .login
            .failed(peer, user, mechanism, now, ceiling, may_wait)
        {
            Gate::Open => LoginAnswer::Now,
            Gate::Delay(delay) => {
                self.delayed.set(self.delayed.get() + 1);
                LoginAnswer::After(
                    delay,
                    DelayPermit {
                        delayed: Rc::clone(&self.delayed),
                    },
                )
            }
            Gate::Drop { .. } => LoginAnswer::Drop,
        }
    }

    /// A place among the shard's `limits.login.max_delayed` for a connection closed
    /// without a reply after a delay (a `start-ok` with a mechanism that was not
    /// offered), or `None` when the shard holds that many (close it at once).
    pub fn hold_silent_close(&self) -> Option<DelayPermit> {
        if self.delayed.get() >= self.max_delayed {
            return None;
        }
        self.delayed.set(self.delayed.get() + 1);
        Some(DelayPermit {
            delayed: Rc::clone(&self.delayed),
        })
    }

    /// Delayed answers to failed logins this shard holds now.
    pub fn delayed_logins(&self) -> u32 {
        self.delayed.get()
    }

    /// A channel limit (channel_max, consumers per channel) refused an operation
    /// (CHN-1016 / CHN-1015, rate-limited).
    pub fn channel_refused(
        &self,
        subject: String,
        channel: u16,
        refusal: &LimitRefusal,
        now: Instant,
    ) {
        if let Some(count) = self.channel_report.note(now) {
            LimitEvent::ChannelRefused {
                subject,
                channel,
                reason: format!("{} {refusal}", refusal.code().code()),
                key: refusal.key(),
                count,
            }
            .emit();
        }
    }

    /// The control plane refused a queue or a binding for a limit (QUE-1010 /
    /// EXH-1010, rate-limited).
    pub fn object_refused(&self, refusal: &LimitRefusal, now: Instant) {
        match refusal {
            LimitRefusal::Queues {
                queue,
                vhost,
                limit,
            } => {
                if let Some(count) = self.queue_report.note(now) {
                    LimitEvent::QueueRefused {
                        vhost: vhost.clone(),
                        queue: queue.clone(),
                        limit: *limit,
                        count,
                    }
                    .emit();
                }
            }
            LimitRefusal::BindingsPerExchange {
                exchange,
                vhost,
                limit,
            } => {
                if let Some(count) = self.binding_report.note(now) {
                    LimitEvent::BindingRefused {
                        vhost: vhost.clone(),
                        exchange: exchange.clone(),
                        limit: *limit,
                        count,
                    }
                    .emit();
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delayed_answers_are_capped_and_come_back_when_answered() {
        let mut config = Config::default();
        config.limits.resources.login.max_delayed = 1;
        let counts = Arc::new(ConnectionCounts::new(&config.limits.resources));
        let limits = ShardLimits::new(0, &config, counts);
        let peer: SocketAddr = "10.0.0.1:1".parse().expect("addr");
        let now = Instant::now();
        let fail = |user: &str| limits.login_failed(peer, user, "PLAIN", now);
        assert!(matches!(fail("a"), LoginAnswer::Now));
        assert!(matches!(fail("b"), LoginAnswer::Now));
        // a's second failure waits, holding the one place.
        let held = fail("a");
        assert!(matches!(held, LoginAnswer::After(..)), "{held:?}");
        assert_eq!(limits.delayed_logins(), 1);
        // b's would wait too: no place, no answer.
        assert!(matches!(fail("b"), LoginAnswer::Drop));
        drop(held);
        assert_eq!(limits.delayed_logins(), 0);
        assert!(matches!(fail("b"), LoginAnswer::After(..)));
        assert_eq!(
            limits.delayed_logins(),
            0,
            "the permit went with the answer"
        );
    }
}

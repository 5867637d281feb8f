//! Owns: [`ShardLimits`], one shard's part of the admission limits: the sockets it
//! accepted that have not completed `connection.open` (capped per shard, checked at
//! accept before anything is allocated for the socket), the [`Admission`] of each
//! connection it opened (given back when the connection is dropped), its login
//! throttle, and the rate limits of the limit log lines.
//!
//! Does not: share anything but the `Arc<ConnectionCounts>`; plain cells, a shard is
//! one thread.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use super::connections::{Admission, ConnectionCounts};
use super::login::{Gate, LoggedThrottle};
use super::report::Reporter;
use crate::config::Config;
use crate::model::ids::ConnId;
use crate::ops::limit_event::LimitEvent;
use crate::session::limit::LimitRefusal;

/// One shard's admission state.
pub struct ShardLimits {
    shard: u16,
    pub counts: Arc<ConnectionCounts>,
    unauth_cap: u32,
    unauth: Cell<u32>,
    opened: RefCell<HashMap<ConnId, Admission>>,
    login: LoggedThrottle,
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
            accept_report: Reporter::default(),
            open_report: Reporter::default(),
            channel_report: Reporter::default(),
            queue_report: Reporter::default(),
            binding_report: Reporter::default(),
        }
    }

    /// At accept: whether the new socket is served. Refused (the caller closes it at
    /// once) when the shard already holds `unauthenticated_per_shard` sockets that have
    /// not completed `connection.open` (CON-1007), or when its address is locked out
    /// by failed logins (CON-1009). An admitted socket counts as unauthenticated until
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
        if matches!(self.login_gate(peer, now), Gate::Drop { .. }) {
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

    /// What to do with a login attempt from `peer` (CON-1009 when dropped).
    pub fn login_gate(&self, peer: SocketAddr, now: Instant) -> Gate {
        self.login.gate(peer, now)
    }

    /// A login from `peer` was refused: remembered for throttling, logged (CON-1008,
    /// rate-limited) with the username and address.
    pub fn login_failed(&self, peer: SocketAddr, user: &str, mechanism: &str, now: Instant) {
        self.login.failed(peer, user, mechanism, now);
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

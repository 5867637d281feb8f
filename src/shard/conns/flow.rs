//! Owns: producer flow control on the publishers' side of a shard (seed 001) — what a
//! publishing channel does when an overfull queue tells it to stop or go on
//! (`channel.flow`, `CHN-1005` / `CHN-1006`), blocking every publisher while the
//! broker-wide memory or disk alarm is on (`connection.blocked` to clients that announced the
//! capability, `channel.flow` to the others), counting what a stopped channel publishes
//! anyway, and the decision to stop reading a connection that goes on past its grace —
//! and, for a connection that also holds unacknowledged deliveries, to close the
//! offending channel after the enforcement timeout rather than leave its acks unread.
//!
//! Does not: read sockets (the reader holds itself when asked, see `net::reader`) or
//! judge queue sizes (the queue's home shard does, see `policy`).

use crate::model::ids::ConnId;
use crate::ops::event::{FlowCause, OpsEvent};
use crate::protocol::method::{ChannelFlow, ConnectionBlocked, ConnectionUnblocked};
use crate::protocol::{Method, ShortStr};
use crate::queue::entry::ENTRY_BYTES;
use crate::session::channel::{Channel, ChannelPhase};
use crate::session::connection::{Conn, Phase};
use crate::session::error::ChannelError;

use super::ConnSide;
use crate::shard::inbox::{FlowNotice, FlowSignal};
use crate::shard::Shard;

/// The reason sent with `connection.blocked` for the memory alarm (RabbitMQ's wording).
const LOW_ON_MEMORY: &str = "low on memory";
/// The reason sent with `connection.blocked` for the store's disk quota.
const STORE_OVERFULL: &str = "store overfull";
/// The reason sent with `connection.blocked` for the disk alarm (RabbitMQ's wording).
const LOW_ON_DISK: &str = "low on disk";

/// Sends `connection.blocked` (a resource alarm) to a client that announced the
/// capability.
fn block_connection(c: &mut Conn, cause: &FlowCause) {
    c.blocked_sent = true;
    let reason = match cause {
        FlowCause::Store => STORE_OVERFULL,
        FlowCause::Disk => LOW_ON_DISK,
        FlowCause::Memory | FlowCause::Queue(_) => LOW_ON_MEMORY,
    };
    c.out.method(
        0,
        &Method::ConnectionBlocked(ConnectionBlocked {
            reason: ShortStr::from_static(reason),
        }),
    );
}

impl ConnSide<'_> {
    /// Flow signals from queues' home shards for publishing channels on this shard.
    pub fn flow_notices(&mut self, shard: &Shard, notices: Vec<FlowNotice>) {
        for notice in notices {
            let target = notice.channel;
            let Some(c) = self.conn_mut(target.conn) else {
                continue;
            };
            let subject = c.log_subject();
            let Some(ch) = c
                .channels
                .get_mut(&target.channel)
                .filter(|ch| ch.epoch == target.epoch && ch.phase == ChannelPhase::Open)
            else {
                continue;
            };
            match notice.signal {
                FlowSignal::Block { queue, name } => {
                    if ch.publishing_mut().flow.block(queue) {
                        OpsEvent::FlowEnforced {
                            subject,
                            channel: target.channel,
                            cause: FlowCause::Queue(name.to_string()),
                        }
                        .emit();
                    }
                }
                FlowSignal::Unblock { queue } => {
                    if let Some(p) = ch.publisher_mut() {
                        p.unblock(queue);
                    }
                }
            }
            self.apply_channel_flow(shard, target.conn, target.channel);
        }
    }

    /// Tells the client when its channel's flow state changed (`channel.flow`); a
    /// released channel is logged and may let its connection be read again. The broker
    /// never waits for `flow-ok`.
    fn apply_channel_flow(&mut self, shard: &Shard, conn: ConnId, number: u16) {
        let Some(c) = self.conn_mut(conn) else {
            return;
        };
        let Some(ch) = c.channels.get_mut(&number) else {
            return;
        };
        let Some(active) = ch.publisher_mut().and_then(|p| p.transition()) else {
            return;
        };
        c.out
            .method(number, &Method::ChannelFlow(ChannelFlow { active }));
        if active {
            OpsEvent::FlowRemoved {
                subject: c.log_subject(),
                channel: number,
            }
            .emit();
        }
        self.mark_writer(conn);
        if active {
            self.reconsider_hold(shard, conn);
        }
    }

    /// Counts a completed publish of `bytes` on a channel. While the channel (or its
    /// connection) has been told to stop, it counts against the grace; past the grace
    /// the connection's reader is asked to stop reading.
    pub(super) fn note_publish(&mut self, shard: &Shard, conn: ConnId, number: u16, bytes: u64) {
        let grace = shard.config.policies.flow.grace_bytes;
        let Some(vhost) = self.conn(conn).map(|c| c.vhost) else {
            return;
        };
        let cause = self.alarm_cause(vhost);
        let alarm = cause.is_some();
        let Some(c) = self.conn_mut(conn) else {
            return;
        };
        let notify_by_flow = !c.capabilities.connection_blocked;
        if let (Some(cause), false, false) = (&cause, notify_by_flow, c.blocked_sent) {
            // A publisher that starts (or connects) during the alarm is blocked too.
            block_connection(c, cause);
            self.mark_writer(conn);
        }
        let Some(c) = self.conn_mut(conn) else {
            return;
        };
        let blocked = c.blocked_sent;
        let Some(ch) = c.channels.get_mut(&number) else {
            return;
        };
        let publisher = &mut ch.publishing_mut().flow;
        let first = !publisher.published;
        publisher.note_publish(bytes, blocked);
        let excess = publisher.excess;
        if alarm && first && notify_by_flow {
            // A channel that starts publishing during an alarm is stopped too.
            publisher.set_memory(true);
            OpsEvent::FlowEnforced {
                subject: c.log_subject(),
                channel: number,
                cause: cause.unwrap_or(FlowCause::Memory),
            }
            .emit();
            self.apply_channel_flow(shard, conn, number);
            return;
        }
        suspend_past_grace(c, number, excess, grace);
    }

    /// Lifts a read hold whose reason is gone and wakes the reader.
    fn reconsider_hold(&mut self, shard: &Shard, conn: ConnId) {
        let grace = shard.config.policies.flow.grace_bytes;
        if let Some(c) = self.conn_mut(conn) {
            if c.hold_requested && !c.over_grace(grace) {
                c.hold_requested = false;
                c.signals.resume.notify();
            }
        }
    }

    /// What blocks the publishers of vhost `vhost` now: the broker-wide memory alarm,
    /// the broker-wide disk alarm, or the store's disk quota of that vhost.
    pub fn alarm_cause(&self, vhost: usize) -> Option<FlowCause> {
        if self.conns.memory_alarm {
            Some(FlowCause::Memory)
        } else if self.conns.disk_alarm {
            Some(FlowCause::Disk)
        } else if self.conns.store_alarms.get(vhost).copied().unwrap_or(false) {
            Some(FlowCause::Store)
        } else {
            None
        }
    }

    /// Applies the broker-wide memory alarm to this shard's connections.
    pub fn apply_memory_alarm(&mut self, shard: &Shard, on: bool) {
        if self.conns.memory_alarm == on {
            return;
        }
        self.conns.memory_alarm = on;
        self.apply_alarms(shard, None);
    }

    /// Applies the broker-wide disk alarm to this shard's connections.
    pub fn apply_disk_alarm(&mut self, shard: &Shard, on: bool) {
        if self.conns.disk_alarm == on {
            return;
        }
        self.conns.disk_alarm = on;
        self.apply_alarms(shard, None);
    }

    /// Applies the vhosts' store alarms (the disk quota) as the board says them.
    pub fn apply_store_alarms(&mut self, shard: &Shard) {
        let mut changed = Vec::new();
        for vhost in 0..self.common.directory.vhost_count() {
            let on = shard.disk.alarm(vhost);
            if self.conns.store_alarms.len() <= vhost {
                self.conns.store_alarms.resize(vhost + 1, false);
            }
            if self.conns.store_alarms[vhost] != on {
                self.conns.store_alarms[vhost] = on;
                changed.push(vhost);
            }
        }
        for vhost in changed {
            self.apply_alarms(shard, Some(vhost));
        }
    }

    /// Brings the connections (of one vhost, or all) in line with their alarms: while
    /// one is on, clients that announced `connection.blocked` get it (one that connects
    /// during the alarm gets it with its first publish) and every other publishing
    /// channel gets `channel.flow(active=false)`; once none is, both are reversed.
    /// Consumers keep running.
    fn apply_alarms(&mut self, shard: &Shard, only_vhost: Option<usize>) {
        let ids: Vec<(ConnId, usize)> = self
            .conns
            .iter()
            .filter(|c| c.phase() == Phase::Open)
            .filter(|c| only_vhost.is_none_or(|v| v == c.vhost))
            .map(|c| (c.id, c.vhost))
            .collect();
        for (conn, vhost) in ids {
            let cause = self.alarm_cause(vhost);
            let on = cause.is_some();
            let Some(c) = self.conn_mut(conn) else {
                continue;
            };
            if c.capabilities.connection_blocked {
                if let (Some(cause), false) = (&cause, c.blocked_sent) {
                    block_connection(c, cause);
                } else if !on && c.blocked_sent {
                    c.blocked_sent = false;
                    c.out
                        .method(0, &Method::ConnectionUnblocked(ConnectionUnblocked {}));
                    for p in c.channels.values_mut().filter_map(Channel::publisher_mut) {
                        if !p.told_stopped() {
                            p.excess = 0;
                        }
                    }
                }
                self.mark_writer(conn);
            } else {
                let subject = c.log_subject();
                let mut changed = Vec::new();
                for ch in c.channels.values_mut() {
                    let (number, open) = (ch.number, ch.phase == ChannelPhase::Open);
                    let Some(p) = ch.publisher_mut().filter(|p| p.published && open) else {
                        continue;
                    };
                    let was = p.wants_stopped();
                    p.set_memory(on);
                    if on && !was {
                        OpsEvent::FlowEnforced {
                            subject: subject.clone(),
                            channel: number,
                            cause: cause.clone().unwrap_or(FlowCause::Memory),
                        }
                        .emit();
                    }
                    changed.push(number);
                }
                for number in changed {
                    self.apply_channel_flow(shard, conn, number);
                }
            }
            if !on {
                self.reconsider_hold(shard, conn);
            }
        }
    }

    /// The enforcement timeout passed for a held connection that also holds unacked
    /// deliveries: every channel that went on publishing past its grace is closed, so the
    /// connection can be read again (its acks with it).
    pub fn enforce_flow_timeout(&mut self, shard: &Shard, conn: ConnId) {
        let flow = &shard.config.policies.flow;
        let Some(c) = self.conn(conn) else {
            return;
        };
        let offenders: Vec<u16> = c
            .channels
            .values()
            .filter(|ch| {
                ch.publisher().is_some_and(|p| p.excess > flow.grace_bytes)
                    && ch.phase == ChannelPhase::Open
            })
            .map(|ch| ch.number)
            .collect();
        let err = ChannelError::FlowControlIgnored {
            millis: flow.enforcement_timeout.as_millis() as u64,
        };
        for number in offenders {
            self.close_channel(shard, conn, number, &err, super::handler::PUBLISH);
            if let Some(p) = self
                .conn_mut(conn)
                .and_then(|c| c.channels.get_mut(&number))
                .and_then(Channel::publisher_mut)
            {
                p.excess = 0;
            }
        }
        self.reconsider_hold(shard, conn);
    }
}

impl super::Connections {
    /// Whether the connection's reader is to stay held.
    pub fn hold_wanted(&self, shard: &Shard, conn: ConnId) -> bool {
        let grace = shard.config.policies.flow.grace_bytes;
        self.get(conn)
            .is_some_and(|c| c.hold_requested && c.over_grace(grace))
    }
}

/// Counts the queue entries a publish routed to `queues` queues (here or on other
/// shards) made beyond the first against the grace of its channel `ch`, if it (or its
/// connection, `connection_blocked`) has been told to stop, as [`ConnSide::note_publish`]
/// counts its body: a small message to a wide fan-out costs its queues far more memory
/// than its own bytes. Returns the channel's excess once it is past `grace`.
pub(super) fn charge_fanout(
    ch: &mut Channel,
    connection_blocked: bool,
    queues: usize,
    grace: u64,
) -> Option<u64> {
    let publisher = &mut ch.publishing_mut().flow;
    let copies = queues.saturating_sub(1) as u64;
    publisher.note_publish(copies * ENTRY_BYTES.unsigned_abs(), connection_blocked);
    (publisher.excess > grace).then_some(publisher.excess)
}

/// Asks the reader of `c` to stop reading once channel `number` has published more than
/// `grace` bytes after it was told to stop (`CON-1003`).
pub(super) fn suspend_past_grace(c: &mut Conn, number: u16, excess: u64, grace: u64) {
    if excess > grace && !c.hold_requested {
        c.hold_requested = true;
        OpsEvent::ReadingSuspended {
            subject: c.log_subject(),
            channel: number,
            excess,
            grace,
        }
        .emit();
    }
}

//! Owns: producer flow control on the publishers' side of a shard (seed 001) — what a
//! publishing channel does when an overfull queue tells it to stop or go on
//! (`channel.flow`, `CHN-1005` / `CHN-1006`), blocking every publisher while the
//! broker-wide memory alarm is on (`connection.blocked` to clients that announced the
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
use crate::session::channel::ChannelPhase;
use crate::session::connection::{Conn, Phase};
use crate::session::error::ChannelError;

use super::inbox::{FlowNotice, FlowSignal};
use super::{Shard, State};

/// The reason sent with `connection.blocked` (RabbitMQ's wording).
const LOW_ON_MEMORY: &str = "low on memory";

/// Sends `connection.blocked` (memory alarm) to a client that announced the capability.
fn block_connection(c: &mut Conn) {
    c.blocked_sent = true;
    c.out.method(
        0,
        &Method::ConnectionBlocked(ConnectionBlocked {
            reason: ShortStr::from_static(LOW_ON_MEMORY),
        }),
    );
}

impl State {
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
                    if ch.publisher.block(queue) {
                        OpsEvent::FlowEnforced {
                            subject,
                            channel: target.channel,
                            cause: FlowCause::Queue(name.to_string()),
                        }
                        .emit();
                    }
                }
                FlowSignal::Unblock { queue } => {
                    ch.publisher.unblock(queue);
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
        let Some(active) = ch.publisher.transition() else {
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
        let alarm = self.memory_alarm;
        let Some(c) = self.conn_mut(conn) else {
            return;
        };
        let notify_by_flow = !c.capabilities.connection_blocked;
        if alarm && !notify_by_flow && !c.blocked_sent {
            // A publisher that starts (or connects) during the alarm is blocked too.
            block_connection(c);
            self.mark_writer(conn);
        }
        let Some(c) = self.conn_mut(conn) else {
            return;
        };
        let blocked = c.blocked_sent;
        let Some(ch) = c.channels.get_mut(&number) else {
            return;
        };
        let first = !ch.publisher.published;
        ch.publisher.note_publish(bytes, blocked);
        let excess = ch.publisher.excess;
        if alarm && first && notify_by_flow {
            // A channel that starts publishing during the memory alarm is stopped too.
            ch.publisher.set_memory(true);
            OpsEvent::FlowEnforced {
                subject: c.log_subject(),
                channel: number,
                cause: FlowCause::Memory,
            }
            .emit();
            self.apply_channel_flow(shard, conn, number);
            return;
        }
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

    /// Whether the connection's reader is to stay held.
    pub fn hold_wanted(&self, shard: &Shard, conn: ConnId) -> bool {
        let grace = shard.config.policies.flow.grace_bytes;
        self.conn(conn)
            .is_some_and(|c| c.hold_requested && c.over_grace(grace))
    }

    /// Lifts a read hold whose reason is gone and wakes the reader.
    fn reconsider_hold(&mut self, shard: &Shard, conn: ConnId) {
        let grace = shard.config.policies.flow.grace_bytes;
        if let Some(c) = self.conn_mut(conn) {
            if c.hold_requested && !c.over_grace(grace) {
                c.hold_requested = false;
                c.resume.notify();
            }
        }
    }

    /// Applies the broker-wide memory alarm to this shard's connections: on, clients that
    /// announced `connection.blocked` get it (one that connects during the alarm gets it
    /// with its first publish) and every other publishing channel gets
    /// `channel.flow(active=false)`; off, both are reversed. Consumers keep running.
    pub fn apply_memory_alarm(&mut self, shard: &Shard, on: bool) {
        if self.memory_alarm == on {
            return;
        }
        self.memory_alarm = on;
        let ids: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.phase == Phase::Open)
            .map(|(_, c)| c.id)
            .collect();
        for conn in ids {
            let Some(c) = self.conn_mut(conn) else {
                continue;
            };
            if c.capabilities.connection_blocked {
                if on && !c.blocked_sent {
                    block_connection(c);
                } else if !on && c.blocked_sent {
                    c.blocked_sent = false;
                    c.out
                        .method(0, &Method::ConnectionUnblocked(ConnectionUnblocked {}));
                    for ch in c.channels.values_mut() {
                        if !ch.publisher.told_stopped() {
                            ch.publisher.excess = 0;
                        }
                    }
                }
                self.mark_writer(conn);
            } else {
                let subject = c.log_subject();
                let mut changed = Vec::new();
                for ch in c.channels.values_mut() {
                    if ch.publisher.published && ch.phase == ChannelPhase::Open {
                        ch.publisher.set_memory(on);
                        if on {
                            OpsEvent::FlowEnforced {
                                subject: subject.clone(),
                                channel: ch.number,
                                cause: FlowCause::Memory,
                            }
                            .emit();
                        }
                        changed.push(ch.number);
                    }
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
            .filter(|ch| ch.publisher.excess > flow.grace_bytes && ch.phase == ChannelPhase::Open)
            .map(|ch| ch.number)
            .collect();
        let err = ChannelError::FlowControlIgnored {
            millis: flow.enforcement_timeout.as_millis() as u64,
        };
        for number in offenders {
            self.close_channel(shard, conn, number, &err, 60, 40);
            if let Some(ch) = self
                .conn_mut(conn)
                .and_then(|c| c.channels.get_mut(&number))
            {
                ch.publisher.excess = 0;
            }
        }
        self.reconsider_hold(shard, conn);
    }
}

//! Owns: acting on what the queue side tells this shard's connections — a consumer whose
//! queue was deleted (`basic.cancel` where the client announced
//! `consumer_cancel_notify`), and the slow-consumer `delete` verdict on a consuming or
//! getting channel (506 `Consuming too slow.`). Both arrive from a home queue on this
//! shard (`home::ForConnections`) or on another (`ShardMsg::ConsumerGone`,
//! `ShardMsg::SlowConsumer`).
//!
//! Does not: decide the verdicts (the queue side does) or touch queues.

use crate::model::ids::{ConnId, ConsumerTarget, QueueId};
use crate::protocol::method::BasicCancel;
use crate::protocol::Method;
use crate::session::channel::ChannelPhase;
use crate::session::error::{ChannelError, MethodId};
use crate::shard::inbox::SlowTarget;
use crate::shard::Shard;

use super::ConnSide;

impl ConnSide<'_> {
    /// The queue under a consumer was deleted: forget the consumer and, if the client
    /// announced `consumer_cancel_notify`, send it `basic.cancel`.
    pub fn consumer_gone(&mut self, target: ConsumerTarget) {
        let Some(conn) = self.conn_mut(target.conn) else {
            return;
        };
        let notify = conn.capabilities.consumer_cancel_notify;
        let Some(ch) = conn.channels.get_mut(&target.channel) else {
            return;
        };
        let Some(consumer) = ch.remove_consumer(target.consumer) else {
            return;
        };
        if notify && ch.phase == ChannelPhase::Open {
            // A channel waiting for its own queue.delete-ok gets the cancel after it.
            let Some(consumer_tag) = ch.hold_cancel(consumer.tag) else {
                return;
            };
            conn.out.method(
                target.channel,
                &Method::BasicCancel(BasicCancel {
                    consumer_tag,
                    nowait: true,
                }),
            );
            let id = conn.id;
            self.mark_writer(id);
        }
    }

    /// Closes a channel of a slow subscription with 506 `Consuming too slow.`, if it is
    /// still the channel that consumed from `queue`. The connection stays open.
    pub fn slow_consumer_close(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        target: SlowTarget,
        queue: QueueId,
    ) {
        let Some(c) = self.conn(conn) else {
            return;
        };
        let number = match target {
            SlowTarget::Consumer { channel, consumer } => {
                let still = c.channels.get(&channel).is_some_and(|ch| {
                    ch.phase == ChannelPhase::Open
                        && ch
                            .consumers
                            .get(&consumer)
                            .is_some_and(|cons| cons.queue.id == queue)
                });
                if !still {
                    return;
                }
                channel
            }
            SlowTarget::Getter { channel, epoch } => {
                let still = c
                    .channels
                    .get(&channel)
                    .is_some_and(|ch| ch.phase == ChannelPhase::Open && ch.epoch == epoch);
                if !still {
                    return;
                }
                channel
            }
        };
        self.close_channel(
            shard,
            conn,
            number,
            &ChannelError::ConsumingTooSlow,
            MethodId::NONE,
        );
    }
}

//! Owns: a consumer as its channel sees it — consumer tag, queue, prefetch, how many of its
//! deliveries are unacknowledged, how much credit it holds at its queue — and the credit
//! rule that keeps backlog in the queue instead of in the socket buffer.
//!
//! Does not: talk to the queue (the shard sends the grants it computes).
//!
//! # The credit rule
//! A queue dispatches to a consumer only against credit the consumer's channel granted.
//! - With a prefetch limit `p` (manual ack), the channel keeps `credit + unacked <= p`:
//!   credit returns as the client acknowledges.
//! - Without one (no-ack, or prefetch 0), credit is a window of `no_ack_window`
//!   messages and `no_ack_window_bytes` bytes, topped up only while the connection's
//!   outbound buffer is below its high-water mark: a slow socket stops the queue, and the
//!   backlog stays where the slow-consumer policy can see it. Counting bytes as well keeps
//!   the window bounded when messages are large.
//! - A prefetch-limited consumer's byte credit is unlimited ([`UNLIMITED_BYTES`]): the
//!   client asked for `p` messages, whatever their size.

use crate::model::ids::QueueRef;
use crate::protocol::ShortStr;

/// Byte credit that never runs out in practice (prefetch-limited consumers).
pub const UNLIMITED_BYTES: u64 = 1 << 62;

/// Credit in messages and in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Credit {
    pub messages: u32,
    pub bytes: u64,
}

impl Credit {
    pub fn is_zero(&self) -> bool {
        self.messages == 0 && self.bytes == 0
    }
}

/// The no-ack window: how much may be in flight to a consumer without a prefetch limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub messages: u32,
    pub bytes: u64,
}

/// One consumer on one channel.
#[derive(Debug, Clone)]
pub struct ChannelConsumer {
    pub tag: ShortStr,
    pub queue: QueueRef,
    /// The queue-side key (from the queue's `add_consumer`); 0 until consume-ok.
    pub queue_key: u64,
    pub no_ack: bool,
    /// Per-consumer prefetch (0 = unlimited).
    pub prefetch: u32,
    /// Deliveries not yet acknowledged.
    pub unacked: u32,
    /// Credit granted to the queue and not yet used by a delivery.
    pub credit: u32,
    /// Byte credit granted to the queue and not yet used.
    pub credit_bytes: u64,
    /// A reader of a stream: its acks go to the stream as the acked offset
    /// (`QueueOp::StreamAck`), its nacks and rejects only return credit.
    pub stream: bool,
}

impl ChannelConsumer {
    /// A consumer just registered: nothing unacknowledged, no credit granted yet, not
    /// yet known to its queue.
    pub fn new(tag: ShortStr, queue: QueueRef, no_ack: bool, prefetch: u32) -> ChannelConsumer {
        ChannelConsumer {
            tag,
            queue,
            queue_key: 0,
            no_ack,
            prefetch,
            unacked: 0,
            credit: 0,
            credit_bytes: 0,
            stream: false,
        }
    }

    /// How much credit to grant now, given whether the socket has room and the window for
    /// unlimited consumers. Small top-ups are held back so grants are batched.
    pub fn top_up(
        &self,
        socket_has_room: bool,
        window: Window,
        global_room: Option<u32>,
    ) -> Credit {
        let (messages, bytes) = if self.no_ack || self.prefetch == 0 {
            if !socket_has_room {
                return Credit::default();
            }
            let want = window.messages.saturating_sub(self.credit);
            let want_bytes = window.bytes.saturating_sub(self.credit_bytes);
            // Refill once half the window (in messages or in bytes) is used.
            if want < window.messages / 2 && want_bytes < window.bytes / 2 {
                return Credit::default();
            }
            (want, want_bytes)
        } else {
            let in_flight = self.credit.saturating_add(self.unacked);
            let want = self.prefetch.saturating_sub(in_flight);
            let batch = (self.prefetch / 8).max(1);
            let want_bytes = if self.credit_bytes < UNLIMITED_BYTES / 2 {
                UNLIMITED_BYTES - self.credit_bytes
            } else {
                0
            };
            if want < batch && in_flight > 0 {
                return Credit {
                    messages: 0,
                    bytes: want_bytes,
                };
            }
            (want, want_bytes)
        };
        let messages = match global_room {
            Some(room) => messages.min(room),
            None => messages,
        };
        Credit { messages, bytes }
    }

    /// Tops the consumer's credit up as [`top_up`](Self::top_up) allows: the grant for
    /// its queue (queue, consumer key, credit), already added to what the consumer
    /// holds, or `None`.
    pub fn take_top_up(
        &mut self,
        socket_has_room: bool,
        window: Window,
        global_room: Option<u32>,
    ) -> Option<(QueueRef, u64, Credit)> {
        let n = self.top_up(socket_has_room, window, global_room);
        if n.is_zero() {
            return None;
        }
        self.credit += n.messages;
        self.credit_bytes += n.bytes;
        Some((self.queue, self.queue_key, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::QueueId;

    fn consumer(no_ack: bool, prefetch: u32) -> ChannelConsumer {
        let queue = QueueRef {
            id: QueueId(1),
            home: 0,
        };
        ChannelConsumer::new("c".into(), queue, no_ack, prefetch)
    }

    const W: Window = Window {
        messages: 100,
        bytes: 1 << 20,
    };

    fn n(c: Credit) -> u32 {
        c.messages
    }

    #[test]
    fn prefetch_bounds_credit_plus_unacked() {
        let mut c = consumer(false, 10);
        assert_eq!(n(c.top_up(true, W, None)), 10);
        assert_eq!(c.top_up(true, W, None).bytes, UNLIMITED_BYTES);
        c.credit = 0;
        c.unacked = 10;
        assert_eq!(n(c.top_up(true, W, None)), 0);
        c.unacked = 9;
        assert_eq!(n(c.top_up(true, W, None)), 1);
        let mut c = consumer(false, 1);
        c.unacked = 0;
        assert_eq!(n(c.top_up(true, W, None)), 1);
        c.credit = 1;
        c.credit_bytes = UNLIMITED_BYTES;
        assert!(c.top_up(true, W, None).is_zero());
    }

    #[test]
    fn no_ack_window_waits_for_socket_room() {
        let mut c = consumer(true, 0);
        assert!(c.top_up(false, W, None).is_zero());
        let first = c.top_up(true, W, None);
        assert_eq!((first.messages, first.bytes), (100, 1 << 20));
        c.credit = 60;
        c.credit_bytes = 1 << 20;
        assert!(c.top_up(true, W, None).is_zero());
        c.credit = 40;
        assert_eq!(n(c.top_up(true, W, None)), 60);
    }

    #[test]
    fn no_ack_window_counts_bytes_too() {
        let mut c = consumer(true, 0);
        c.credit = 90; // few messages used, but large ones
        c.credit_bytes = 100;
        let g = c.top_up(true, W, None);
        assert_eq!((g.messages, g.bytes), (10, (1 << 20) - 100));
    }

    #[test]
    fn global_limit_caps_grants() {
        let c = consumer(false, 50);
        assert_eq!(n(c.top_up(true, W, Some(7))), 7);
    }
}

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
//!   messages, topped up only while the connection's outbound buffer is below its
//!   high-water mark: a slow socket stops the queue, and the backlog stays where the
//!   slow-consumer policy can see it.

use crate::model::ids::QueueRef;
use crate::protocol::ShortStr;

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
}

impl ChannelConsumer {
    /// How much credit to grant now, given whether the socket has room and the window for
    /// unlimited consumers. Small top-ups are held back so grants are batched.
    pub fn top_up(&self, socket_has_room: bool, window: u32, global_room: Option<u32>) -> u32 {
        let want = if self.no_ack || self.prefetch == 0 {
            if !socket_has_room {
                return 0;
            }
            let want = window.saturating_sub(self.credit);
            // Refill once half the window is used.
            if want < window / 2 {
                return 0;
            }
            want
        } else {
            let in_flight = self.credit.saturating_add(self.unacked);
            let want = self.prefetch.saturating_sub(in_flight);
            let batch = (self.prefetch / 8).max(1);
            if want < batch && in_flight > 0 {
                return 0;
            }
            want
        };
        match global_room {
            Some(room) => want.min(room),
            None => want,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::QueueId;

    fn consumer(no_ack: bool, prefetch: u32) -> ChannelConsumer {
        ChannelConsumer {
            tag: "c".into(),
            queue: QueueRef {
                id: QueueId(1),
                home: 0,
            },
            queue_key: 1,
            no_ack,
            prefetch,
            unacked: 0,
            credit: 0,
        }
    }

    #[test]
    fn prefetch_bounds_credit_plus_unacked() {
        let mut c = consumer(false, 10);
        assert_eq!(c.top_up(true, 100, None), 10);
        c.credit = 0;
        c.unacked = 10;
        assert_eq!(c.top_up(true, 100, None), 0);
        c.unacked = 9;
        assert_eq!(c.top_up(true, 100, None), 1);
        let mut c = consumer(false, 1);
        c.unacked = 0;
        assert_eq!(c.top_up(true, 100, None), 1);
        c.credit = 1;
        assert_eq!(c.top_up(true, 100, None), 0);
    }

    #[test]
    fn no_ack_window_waits_for_socket_room() {
        let mut c = consumer(true, 0);
        assert_eq!(c.top_up(false, 100, None), 0);
        assert_eq!(c.top_up(true, 100, None), 100);
        c.credit = 60;
        assert_eq!(c.top_up(true, 100, None), 0);
        c.credit = 40;
        assert_eq!(c.top_up(true, 100, None), 60);
    }

    #[test]
    fn global_limit_caps_grants() {
        let c = consumer(false, 50);
        assert_eq!(c.top_up(true, 100, Some(7)), 7);
    }
}

//! Owns: what only a channel that publishes has ([`Publishing`], boxed by the channel at
//! its first publish: a subscriber's channel never needs it, issue 23) — producer flow
//! control as the channel experiences it (seed 001): the overfull queues it is stopped
//! on, whether the memory alarm stops it, whether the client has been told
//! (`channel.flow`), and how much it published after being told, which is what decides
//! that its connection must no longer be read — and its publish counts.
//!
//! Does not: send frames or log; the shard turns a [`PublisherFlow::transition`] into
//! `channel.flow` and the `CHN-1005` / `CHN-1006` lines.

use crate::model::ids::QueueRef;

/// A publishing channel's flow state and publish counts (`message_stats.publish`,
/// `return_unroutable`, `drop_unroutable`).
#[derive(Debug, Default)]
pub struct Publishing {
    pub flow: PublisherFlow,
    pub publish: u64,
    /// Publishes no queue took: returned (mandatory) or dropped.
    pub return_unroutable: u64,
    pub drop_unroutable: u64,
}

/// Flow state of one channel as a publisher.
#[derive(Debug, Default)]
pub struct PublisherFlow {
    /// Overfull queues this channel published to, with their names for the log.
    blocked_on: Vec<QueueRef>,
    /// Stopped by the broker-wide memory alarm (clients without `connection.blocked`).
    memory: bool,
    /// `channel.flow(active=false)` was sent and not yet reversed.
    told_stopped: bool,
    /// Bytes published since the channel (or its connection) was told to stop.
    pub excess: u64,
    /// The channel has published at least once.
    pub published: bool,
}

impl PublisherFlow {
    /// Stops the channel on an overfull queue; true if it was not stopped on it yet.
    pub fn block(&mut self, queue: QueueRef) -> bool {
        if self.blocked_on.contains(&queue) {
            return false;
        }
        self.blocked_on.push(queue);
        true
    }

    /// The queue is underfull again; true if the channel was stopped on it.
    pub fn unblock(&mut self, queue: QueueRef) -> bool {
        let before = self.blocked_on.len();
        self.blocked_on.retain(|q| *q != queue);
        before != self.blocked_on.len()
    }

    pub fn set_memory(&mut self, on: bool) {
        self.memory = on;
    }

    /// Whether the channel should be stopped now.
    pub fn wants_stopped(&self) -> bool {
        !self.blocked_on.is_empty() || self.memory
    }

    pub fn told_stopped(&self) -> bool {
        self.told_stopped
    }

    /// The `channel.flow` to send, if the channel's state changed: `Some(false)` to stop
    /// it, `Some(true)` to release it.
    pub fn transition(&mut self) -> Option<bool> {
        match (self.wants_stopped(), self.told_stopped) {
            (true, false) => {
                self.told_stopped = true;
                Some(false)
            }
            (false, true) => {
                self.told_stopped = false;
                self.excess = 0;
                Some(true)
            }
            _ => None,
        }
    }

    /// Counts a publish of `bytes`. While the channel, or its whole connection
    /// (`connection.blocked`), has been told to stop, it counts against the grace.
    pub fn note_publish(&mut self, bytes: u64, connection_blocked: bool) {
        self.published = true;
        if self.told_stopped || connection_blocked {
            self.excess = self.excess.saturating_add(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::QueueId;

    fn q(id: u64) -> QueueRef {
        QueueRef {
            id: QueueId(id),
            home: 0,
        }
    }

    #[test]
    fn stopped_until_every_queue_is_underfull() {
        let mut f = PublisherFlow::default();
        assert!(f.block(q(1)));
        assert!(!f.block(q(1)));
        assert!(f.block(q(2)));
        assert_eq!(f.transition(), Some(false));
        assert_eq!(f.transition(), None);
        f.note_publish(100, false);
        assert_eq!(f.excess, 100);
        assert!(f.unblock(q(1)));
        assert_eq!(f.transition(), None, "still blocked on queue 2");
        assert!(f.unblock(q(2)));
        assert_eq!(f.transition(), Some(true));
        assert_eq!(f.excess, 0);
        f.note_publish(100, false);
        assert_eq!(f.excess, 0, "publishing while allowed is not excess");
        f.note_publish(100, true);
        assert_eq!(f.excess, 100, "the connection was blocked");
    }
}

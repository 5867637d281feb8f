//! Owns: a publishing channel's confirms (RabbitMQ's publisher confirms) — the sequence
//! numbers handed out, which publishes still wait for the home shards of their queues,
//! which were refused (`reject-publish`), and the `basic.ack` / `basic.nack` replies that
//! can be sent, in order.
//!
//! Does not: send frames or talk to other shards; the shard feeds it outcomes and writes
//! the replies it returns.
//!
//! # Invariants
//! - `pending` is sorted by sequence number; everything at or below `settled` has been
//!   answered, and nothing above it.
//! - A reply never covers a publish that is still waiting: acks are sent for a completed
//!   prefix only, so an `ack multiple` cannot confirm an earlier publish that is not done.

use std::collections::VecDeque;

/// A publish waiting for its confirm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Waiting {
    seq: u64,
    /// Home shards yet to report.
    shards: u16,
    /// A queue refused it.
    nack: bool,
}

/// A reply for the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfirmReply {
    Ack { tag: u64, multiple: bool },
    Nack { tag: u64 },
}

/// Confirm state of one channel in confirm mode.
#[derive(Debug)]
pub struct ConfirmTracker {
    next: u64,
    pending: VecDeque<Waiting>,
    settled: u64,
}

impl Default for ConfirmTracker {
    fn default() -> Self {
        ConfirmTracker::new()
    }
}

impl ConfirmTracker {
    pub fn new() -> ConfirmTracker {
        ConfirmTracker {
            next: 1,
            pending: VecDeque::new(),
            settled: 0,
        }
    }

    /// The sequence number of the next publish.
    pub fn assign(&mut self) -> u64 {
        let seq = self.next;
        self.next += 1;
        seq
    }

    /// Records a routed publish: `shards` remote home shards still have to report; a
    /// local queue may already have refused it (`nack`).
    pub fn record(&mut self, seq: u64, shards: u16, nack: bool) {
        self.pending.push_back(Waiting { seq, shards, nack });
    }

    /// A home shard reported publishes `first..=last`.
    pub fn complete(&mut self, first: u64, last: u64, rejected: bool) {
        let start = self.pending.partition_point(|w| w.seq < first);
        for w in self.pending.range_mut(start..) {
            if w.seq > last {
                break;
            }
            w.shards = w.shards.saturating_sub(1);
            w.nack |= rejected;
        }
    }

    /// Whether replies are ready to be taken.
    pub fn has_ready(&self) -> bool {
        self.pending.front().is_some_and(|w| w.shards == 0)
    }

    /// The sequence number handed out last (0: none yet).
    pub fn last_assigned(&self) -> u64 {
        self.next - 1
    }

    /// Every publish up to this one has been answered.
    pub fn settled(&self) -> u64 {
        self.settled
    }

    /// Publishes still waiting for a reply.
    pub fn unsettled(&self) -> usize {
        self.pending.len()
    }

    /// The replies for the completed prefix, coalesced: a run of acks is one
    /// `ack multiple`, a refused publish its own `nack`.
    pub fn take_ready(&mut self, out: &mut Vec<ConfirmReply>) {
        let mut ack_upto: Option<u64> = None;
        while let Some(w) = self.pending.front().copied() {
            if w.shards > 0 {
                break;
            }
            self.pending.pop_front();
            if w.nack {
                if let Some(tag) = ack_upto.take() {
                    self.push_ack(tag, out);
                }
                out.push(ConfirmReply::Nack { tag: w.seq });
                self.settled = w.seq;
            } else {
                ack_upto = Some(w.seq);
            }
        }
        if let Some(tag) = ack_upto {
            self.push_ack(tag, out);
        }
    }

    fn push_ack(&mut self, tag: u64, out: &mut Vec<ConfirmReply>) {
        out.push(ConfirmReply::Ack {
            tag,
            multiple: tag > self.settled + 1,
        });
        self.settled = tag;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(t: &mut ConfirmTracker) -> Vec<ConfirmReply> {
        let mut out = Vec::new();
        t.take_ready(&mut out);
        out
    }

    #[test]
    fn local_publishes_coalesce_into_one_ack() {
        let mut t = ConfirmTracker::new();
        for _ in 0..3 {
            let seq = t.assign();
            t.record(seq, 0, false);
        }
        assert_eq!(
            drain(&mut t),
            vec![ConfirmReply::Ack {
                tag: 3,
                multiple: true
            }]
        );
        let seq = t.assign();
        t.record(seq, 0, false);
        assert_eq!(
            drain(&mut t),
            vec![ConfirmReply::Ack {
                tag: 4,
                multiple: false
            }]
        );
    }

    #[test]
    fn a_later_confirm_never_covers_an_earlier_waiting_one() {
        let mut t = ConfirmTracker::new();
        let a = t.assign();
        t.record(a, 1, false); // waits for a remote shard
        let b = t.assign();
        t.record(b, 0, false); // local, done
        assert_eq!(drain(&mut t), vec![]);
        t.complete(a, a, false);
        assert_eq!(
            drain(&mut t),
            vec![ConfirmReply::Ack {
                tag: 2,
                multiple: true
            }]
        );
    }

    #[test]
    fn refusals_are_nacked_in_order() {
        let mut t = ConfirmTracker::new();
        for _ in 0..5 {
            let seq = t.assign();
            t.record(seq, 2, false);
        }
        t.complete(1, 5, false);
        t.complete(1, 2, false);
        t.complete(3, 5, true); // one shard's queue refused 3..=5
        assert_eq!(
            drain(&mut t),
            vec![
                ConfirmReply::Ack {
                    tag: 2,
                    multiple: true
                },
                ConfirmReply::Nack { tag: 3 },
                ConfirmReply::Nack { tag: 4 },
                ConfirmReply::Nack { tag: 5 },
            ]
        );
        assert_eq!(t.unsettled(), 0);
    }
}

//! Owns: a queue's consumers as the queue sees them — credit in messages and in bytes,
//! rotation, exclusivity — the dispatch pass that hands ready messages to consumers with
//! credit, and the accounting of no-ack deliveries until their connection reports them
//! written.
//!
//! Does not: know where a consumer lives beyond its [`ConsumerTarget`]; the shard
//! delivers what dispatch produces.
//!
//! # Invariants
//! - `consumers` is sorted by key (keys are handed out in increasing order and slots are
//!   only appended or removed), so finding a consumer by key is a binary search.
//! - A consumer receives a dispatch only while it has message credit and byte credit;
//!   each dispatch spends one message and the message's size (saturating), so the bytes
//!   in flight exceed the byte credit by at most one message.

use std::time::Instant;

use crate::model::ids::ConsumerTarget;
use crate::model::message::LocalMessage;

use super::Queue;

/// A consumer as its queue sees it.
#[derive(Clone, Debug)]
pub struct ConsumerSlot {
    /// Unique within the queue; the consumer's channel uses it to grant credit and cancel.
    pub key: u64,
    pub target: ConsumerTarget,
    pub credit: u32,
    pub credit_bytes: u64,
    pub no_ack: bool,
    pub exclusive: bool,
    /// No-ack deliveries dispatched and not yet reported written.
    pub inflight: u64,
    pub inflight_bytes: u64,
}

/// One message handed to one consumer, produced by [`Queue::dispatch`].
#[derive(Clone, Debug)]
pub struct Dispatch {
    pub target: ConsumerTarget,
    pub seq: u64,
    pub msg: LocalMessage,
    pub redelivered: bool,
    /// No-ack consumers settle on dispatch; the entry is already gone from the queue.
    pub no_ack: bool,
}

/// Why a consumer could not be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeRefused {
    /// The queue has an exclusive consumer, or an exclusive consumer was asked for while
    /// others exist.
    ExclusiveInUse,
}

impl Queue {
    /// Adds a consumer with zero credit; credit arrives by [`Queue::grant`] once the
    /// consumer's channel has told its client `consume-ok`.
    pub fn add_consumer(
        &mut self,
        target: ConsumerTarget,
        no_ack: bool,
        exclusive: bool,
        now: Instant,
    ) -> Result<u64, ConsumeRefused> {
        if self.consumers.iter().any(|c| c.exclusive) || (exclusive && !self.consumers.is_empty()) {
            return Err(ConsumeRefused::ExclusiveInUse);
        }
        let key = self.next_consumer_key;
        self.next_consumer_key += 1;
        self.consumers.push(ConsumerSlot {
            key,
            target,
            credit: 0,
            credit_bytes: 0,
            no_ack,
            exclusive,
            inflight: 0,
            inflight_bytes: 0,
        });
        self.had_consumer = true;
        self.last_used = now;
        Ok(key)
    }

    fn forget_slot(&mut self, slot: &ConsumerSlot) {
        self.inflight -= slot.inflight;
        self.inflight_bytes -= slot.inflight_bytes;
    }

    /// Removes a consumer. Returns whether it existed.
    pub fn remove_consumer(&mut self, key: u64, now: Instant) -> bool {
        self.last_used = now;
        let Ok(pos) = self.consumer_at(key) else {
            return false;
        };
        let slot = self.consumers.remove(pos);
        self.forget_slot(&slot);
        if self.round_robin >= self.consumers.len() {
            self.round_robin = 0;
        }
        true
    }

    /// Removes every consumer matching `pred` (on connection loss).
    pub fn remove_consumers_where(&mut self, mut pred: impl FnMut(&ConsumerTarget) -> bool) {
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.consumers)
            .into_iter()
            .partition(|c| pred(&c.target));
        self.consumers = kept;
        for slot in &gone {
            self.forget_slot(slot);
        }
        if self.round_robin >= self.consumers.len() {
            self.round_robin = 0;
        }
    }

    /// All consumers, for cancel notifications when the queue is deleted.
    pub fn consumers(&self) -> &[ConsumerSlot] {
        &self.consumers
    }

    /// Where the consumer with this key is in `consumers` (O(log consumers)).
    fn consumer_at(&self, key: u64) -> Result<usize, usize> {
        self.consumers.binary_search_by_key(&key, |c| c.key)
    }

    /// Adds credit to a consumer. Unknown keys (consumer already gone) are ignored.
    pub fn grant(&mut self, key: u64, credit: u32, bytes: u64) {
        if let Some(c) = self
            .consumer_at(key)
            .ok()
            .and_then(|i| self.consumers.get_mut(i))
        {
            c.credit = c.credit.saturating_add(credit);
            c.credit_bytes = c.credit_bytes.saturating_add(bytes);
        }
    }

    /// The consumer's connection wrote `count` no-ack deliveries of `bytes`: they are no
    /// longer held, and they count as consumed.
    pub fn written(&mut self, key: u64, count: u64, bytes: u64) {
        if let Some(c) = self
            .consumer_at(key)
            .ok()
            .and_then(|i| self.consumers.get_mut(i))
        {
            let count = count.min(c.inflight);
            let bytes = bytes.min(c.inflight_bytes);
            c.inflight -= count;
            c.inflight_bytes -= bytes;
            self.inflight -= count;
            self.inflight_bytes -= bytes;
            self.counters.consumed += count;
        }
    }

    /// Whether a dispatch now could deliver anything.
    pub fn can_dispatch(&self) -> bool {
        !self.ready.is_empty()
            && !self.condemned
            && self
                .consumers
                .iter()
                .any(|c| c.credit > 0 && c.credit_bytes > 0)
    }

    /// Hands up to `budget` ready messages to consumers with credit, in rotation. Expired
    /// head messages are dropped on the way. Returns how many were dispatched.
    pub fn dispatch(&mut self, now: Instant, budget: usize, out: &mut Vec<Dispatch>) -> usize {
        if self.condemned {
            return 0;
        }
        let n = self.consumers.len();
        let mut sent = 0;
        let mut pick = self.round_robin;
        // No-ack dispatches leave the queue's entries but stay held until written; their
        // totals are applied once after the loop.
        let (mut gone, mut gone_bytes) = (0u64, 0u64);
        while sent < budget && !self.ready.is_empty() {
            // Next consumer with credit, starting at the rotation point.
            let Some(found) = (0..n)
                .map(|i| {
                    if pick + i >= n {
                        pick + i - n
                    } else {
                        pick + i
                    }
                })
                .find(|&i| self.consumers[i].credit > 0 && self.consumers[i].credit_bytes > 0)
            else {
                break;
            };
            let Some(entry) = self.pop_ready(now) else {
                break;
            };
            let size = entry.size();
            let consumer = &mut self.consumers[found];
            consumer.credit -= 1;
            consumer.credit_bytes = consumer.credit_bytes.saturating_sub(size);
            pick = if found + 1 == n { 0 } else { found + 1 };
            let (target, no_ack) = (consumer.target, consumer.no_ack);
            let (seq, redelivered) = (entry.seq, entry.redelivered);
            let msg = if no_ack {
                consumer.inflight += 1;
                consumer.inflight_bytes += size;
                gone += 1;
                gone_bytes += size;
                entry.msg
            } else {
                let msg = entry.msg.clone();
                self.hold_unacked(entry);
                msg
            };
            out.push(Dispatch {
                target,
                seq,
                msg,
                redelivered,
                no_ack,
            });
            sent += 1;
        }
        self.inflight += gone;
        self.inflight_bytes += gone_bytes;
        self.round_robin = pick;
        self.counters.delivered += sent as u64;
        if sent > 0 {
            self.last_used = now;
        }
        sent
    }
}

//! Owns: a queue's contents and consumers on its home shard — the ready list in delivery
//! order, the unacknowledged entries, O(1) accounting (message count, depth in bytes,
//! oldest entry's age), consumer rotation with per-consumer credit, message TTL at the head.
//!
//! Does not: touch sockets, other shards or the clock (every time-dependent call takes
//! `now`). It produces [`Dispatch`] records; the shard turns them into deliveries.
//!
//! # Invariants
//! - `ready` is sorted by `seq`; `ready_bytes` is the sum of `accounted_size` over `ready`.
//! - An entry is in exactly one of `ready` and `unacked`, or gone.
//! - A consumer receives a dispatch only while its `credit > 0`; each dispatch spends one.

pub mod entry;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::model::ids::{ConsumerTarget, IdMap, QueueId};
use crate::model::message::LocalMessage;
use crate::protocol::{FieldTable, ShortStr};

pub use entry::Entry;

/// Queue properties fixed at declaration.
#[derive(Clone, Debug)]
pub struct QueueSettings {
    pub durable: bool,
    pub exclusive: bool,
    pub auto_delete: bool,
    pub arguments: FieldTable,
    /// `x-message-ttl`.
    pub message_ttl: Option<Duration>,
    /// `x-expires`: delete after this long without consumers, gets or redeclares.
    pub expires: Option<Duration>,
}

/// A consumer as its queue sees it.
#[derive(Clone, Debug)]
pub struct ConsumerSlot {
    /// Unique within the queue; the consumer's channel uses it to grant credit and cancel.
    pub key: u64,
    pub target: ConsumerTarget,
    pub credit: u32,
    pub no_ack: bool,
    pub exclusive: bool,
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

/// Counters for `queue.declare-ok`, `basic.get-ok` and the management view.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub messages: u32,
    pub consumers: u32,
    pub unacked: u32,
    pub depth_bytes: u64,
}

/// A queue on its home shard.
pub struct Queue {
    pub id: QueueId,
    pub vhost_idx: usize,
    pub vhost: String,
    pub name: ShortStr,
    pub settings: QueueSettings,
    ready: VecDeque<Entry>,
    ready_bytes: u64,
    unacked: IdMap<u64, Entry>,
    next_seq: u64,
    consumers: Vec<ConsumerSlot>,
    next_consumer_key: u64,
    round_robin: usize,
    /// Whether a consumer was ever attached (auto-delete fires only after that).
    had_consumer: bool,
    last_used: Instant,
    pub expired_total: u64,
    pub enqueued_total: u64,
    pub delivered_total: u64,
}

impl Queue {
    pub fn new(
        id: QueueId,
        vhost_idx: usize,
        vhost: String,
        name: ShortStr,
        settings: QueueSettings,
        now: Instant,
    ) -> Queue {
        Queue {
            id,
            vhost_idx,
            vhost,
            name,
            settings,
            ready: VecDeque::new(),
            ready_bytes: 0,
            unacked: IdMap::default(),
            next_seq: 1,
            consumers: Vec::new(),
            next_consumer_key: 1,
            round_robin: 0,
            had_consumer: false,
            last_used: now,
            expired_total: 0,
            enqueued_total: 0,
            delivered_total: 0,
        }
    }

    /// Appends a published message. Returns its sequence number.
    pub fn enqueue(&mut self, msg: LocalMessage, now: Instant) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        let queue_ttl = self.settings.message_ttl;
        let msg_ttl = msg.ttl_ms().map(Duration::from_millis);
        let ttl = match (queue_ttl, msg_ttl) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.ready_bytes += msg.accounted_size();
        self.ready.push_back(Entry {
            seq,
            msg,
            enqueued_at: now,
            expires_at: ttl.map(|ttl| now + ttl),
            redelivered: false,
        });
        self.enqueued_total += 1;
        seq
    }

    pub fn stats(&self) -> QueueStats {
        QueueStats {
            messages: u32::try_from(self.ready.len()).unwrap_or(u32::MAX),
            consumers: u32::try_from(self.consumers.len()).unwrap_or(u32::MAX),
            unacked: u32::try_from(self.unacked.len()).unwrap_or(u32::MAX),
            depth_bytes: self.ready_bytes,
        }
    }

    pub fn ready_count(&self) -> usize {
        self.ready.len()
    }

    pub fn ready_bytes(&self) -> u64 {
        self.ready_bytes
    }

    /// Age of the oldest ready message.
    pub fn oldest_age(&self, now: Instant) -> Option<Duration> {
        self.ready
            .front()
            .map(|e| now.saturating_duration_since(e.enqueued_at))
    }

    pub fn consumer_count(&self) -> usize {
        self.consumers.len()
    }

    pub fn has_consumers(&self) -> bool {
        !self.consumers.is_empty()
    }

    /// True when an auto-delete queue has lost its last consumer.
    pub fn auto_delete_due(&self) -> bool {
        self.settings.auto_delete && self.had_consumer && self.consumers.is_empty()
    }

    /// Marks the queue as used now (for `x-expires`).
    pub fn touch(&mut self, now: Instant) {
        self.last_used = now;
    }

    /// When an unused queue with `x-expires` should be deleted, if it is unused now.
    pub fn expiry_deadline(&self) -> Option<Instant> {
        let expires = self.settings.expires?;
        if self.consumers.is_empty() {
            Some(self.last_used + expires)
        } else {
            None
        }
    }

    /// When the head message expires, if it has a TTL.
    pub fn head_expiry(&self) -> Option<Instant> {
        self.ready.front().and_then(|e| e.expires_at)
    }

    /// Drops expired messages from the head (TTL is applied at the head, as RabbitMQ does).
    /// Returns how many were dropped.
    pub fn expire_head(&mut self, now: Instant) -> usize {
        let mut dropped = 0;
        while let Some(front) = self.ready.front() {
            if !front.is_expired(now) {
                break;
            }
            if let Some(entry) = self.ready.pop_front() {
                self.ready_bytes -= entry.msg.accounted_size();
                dropped += 1;
            }
        }
        self.expired_total += dropped as u64;
        dropped
    }

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
            no_ack,
            exclusive,
        });
        self.had_consumer = true;
        self.last_used = now;
        Ok(key)
    }

    /// Removes a consumer. Returns whether it existed.
    pub fn remove_consumer(&mut self, key: u64, now: Instant) -> bool {
        let before = self.consumers.len();
        self.consumers.retain(|c| c.key != key);
        self.last_used = now;
        if self.round_robin >= self.consumers.len() {
            self.round_robin = 0;
        }
        before != self.consumers.len()
    }

    /// Removes every consumer of one connection (on connection loss).
    pub fn remove_consumers_where(&mut self, mut pred: impl FnMut(&ConsumerTarget) -> bool) {
        self.consumers.retain(|c| !pred(&c.target));
        if self.round_robin >= self.consumers.len() {
            self.round_robin = 0;
        }
    }

    /// All consumers, for cancel notifications when the queue is deleted.
    pub fn consumers(&self) -> &[ConsumerSlot] {
        &self.consumers
    }

    /// Adds credit to a consumer. Unknown keys (consumer already gone) are ignored.
    pub fn grant(&mut self, key: u64, credit: u32) {
        if let Some(c) = self.consumers.iter_mut().find(|c| c.key == key) {
            c.credit = c.credit.saturating_add(credit);
        }
    }

    /// Whether a dispatch now could deliver anything.
    pub fn can_dispatch(&self) -> bool {
        !self.ready.is_empty() && self.consumers.iter().any(|c| c.credit > 0)
    }

    /// Hands up to `budget` ready messages to consumers with credit, in rotation. Expired
    /// head messages are dropped on the way. Returns how many were dispatched.
    pub fn dispatch(&mut self, now: Instant, budget: usize, out: &mut Vec<Dispatch>) -> usize {
        let n = self.consumers.len();
        let mut sent = 0;
        let mut pick = self.round_robin;
        while sent < budget && !self.ready.is_empty() {
            // Next consumer with credit, starting at the rotation point.
            let Some(found) = (0..n)
                .map(|i| {
                    let at = pick + i;
                    if at >= n {
                        at - n
                    } else {
                        at
                    }
                })
                .find(|&i| self.consumers[i].credit > 0)
            else {
                break;
            };
            let Some(entry) = self.pop_ready(now) else {
                break;
            };
            let consumer = &mut self.consumers[found];
            consumer.credit -= 1;
            pick = if found + 1 == n { 0 } else { found + 1 };
            let (target, no_ack) = (consumer.target, consumer.no_ack);
            let (seq, redelivered) = (entry.seq, entry.redelivered);
            let msg = if no_ack {
                entry.msg
            } else {
                let msg = entry.msg.clone();
                self.unacked.insert(seq, entry);
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
        self.round_robin = pick;
        self.delivered_total += sent as u64;
        if sent > 0 {
            self.last_used = now;
        }
        sent
    }

    /// `basic.get`: takes the head message. With `no_ack` it is gone; otherwise it waits
    /// in the unacked set. Returns the entry and the count of messages still ready.
    pub fn get(&mut self, now: Instant, no_ack: bool) -> Option<(Entry, u32)> {
        self.last_used = now;
        let entry = self.pop_ready(now)?;
        if !no_ack {
            self.unacked.insert(entry.seq, entry.clone());
        }
        self.delivered_total += 1;
        let remaining = u32::try_from(self.ready.len()).unwrap_or(u32::MAX);
        Some((entry, remaining))
    }

    fn pop_ready(&mut self, now: Instant) -> Option<Entry> {
        loop {
            let entry = self.ready.pop_front()?;
            self.ready_bytes -= entry.msg.accounted_size();
            if entry.is_expired(now) {
                self.expired_total += 1;
                continue;
            }
            return Some(entry);
        }
    }

    /// Positive acknowledgement: the entry is done. Returns whether it was outstanding.
    pub fn ack(&mut self, seq: u64) -> bool {
        self.unacked.remove(&seq).is_some()
    }

    /// Negative acknowledgement without requeue: the entry is dropped (no dead-lettering).
    pub fn discard(&mut self, seq: u64) -> bool {
        self.unacked.remove(&seq).is_some()
    }

    /// Puts an unacknowledged entry back in its original position, marked redelivered.
    pub fn requeue(&mut self, seq: u64) -> bool {
        let Some(mut entry) = self.unacked.remove(&seq) else {
            return false;
        };
        entry.redelivered = true;
        self.ready_bytes += entry.msg.accounted_size();
        let at = self.ready.partition_point(|e| e.seq < entry.seq);
        self.ready.insert(at, entry);
        true
    }

    /// Removes all ready messages. Returns how many.
    pub fn purge(&mut self) -> u32 {
        let n = u32::try_from(self.ready.len()).unwrap_or(u32::MAX);
        self.ready.clear();
        self.ready_bytes = 0;
        n
    }
}

#[cfg(test)]
mod tests;

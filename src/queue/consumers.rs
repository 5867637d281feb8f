//! Owns: a queue's consumers as the queue sees them — credit in messages and in bytes,
//! rotation, exclusivity, consumer priorities (`x-priority`) and the single active
//! consumer (`x-single-active-consumer`) — the dispatch pass that hands ready messages
//! to consumers with credit (and its short form for a queue the write pass pulls,
//! [`Queue::dispatch_pulled`]), and the accounting of no-ack deliveries until their
//! connection reports them written.
//!
//! Does not: know where a consumer lives beyond its [`ConsumerTarget`]; the shard
//! delivers what dispatch produces.
//!
//! How dispatch picks a consumer ([`Pick`], RabbitMQ 3.10 semantics):
//! - `Rotation` (every consumer has the same priority): the next consumer with credit
//!   after the last one served — the plain loop, at the plain cost.
//! - `Priority`: a consumer of the highest priority among those with credit, in rotation
//!   among equals; lower ones receive only while every higher one is blocked (no credit).
//! - `Single`: only the earliest registered consumer (`consumers[0]`); when it goes, the
//!   next in registration order takes over. Consumer priorities do not choose it (as in
//!   RabbitMQ 3.10 classic queues; later versions let priority pick the active one).
//!
//! # Invariants
//! - `consumers` is sorted by key (keys are handed out in increasing order and slots are
//!   only appended or removed), so finding a consumer by key is a binary search, and it
//!   is in registration order.
//! - A consumer receives a dispatch only while it has message credit and byte credit;
//!   each dispatch spends one message and the message's size (saturating), so the bytes
//!   in flight exceed the byte credit by at most one message.
//! - `pick` and `top_consumer_priority` describe the current consumers (refreshed on
//!   every add and removal); `can_dispatch` agrees with what `dispatch` would find.

use std::time::Instant;

use crate::model::ids::{ConnId, ConsumerTarget, ShardId};
use crate::model::message::LocalMessage;

use super::entry::Entry;
use super::ready::{self, Head};
use super::{Queue, QueueSettings};

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
    /// `x-priority`: higher is served first while it has credit.
    pub priority: i64,
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

/// What [`Queue::dispatch_pulled`] handed its one consumer: the messages themselves are
/// moved to the caller's list, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PulledRun {
    pub target: ConsumerTarget,
    pub count: u32,
    /// Their sizes as the queue counts them (what the consumer's byte credit spent).
    pub bytes: u64,
    /// The run stopped, with credit and budget left, at an entry only [`Queue::dispatch`]
    /// may take (evicted, with an expiry of its own, or redelivered).
    pub general_next: bool,
}

/// Why a consumer could not be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeRefused {
    /// The queue has an exclusive consumer, an exclusive consumer was asked for while
    /// others exist, or on a single-active-consumer queue (RabbitMQ's
    /// `exclusive_consume_unavailable`).
    ExclusiveInUse,
}

/// How dispatch picks the next consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    Rotation,
    Priority,
    Single,
}

impl Pick {
    /// The pick of a queue without consumers.
    pub fn initial(settings: &QueueSettings) -> Pick {
        if settings.single_active_consumer {
            Pick::Single
        } else {
            Pick::Rotation
        }
    }
}

#[inline(always)]
fn has_credit(c: &ConsumerSlot) -> bool {
    c.credit > 0 && c.credit_bytes > 0
}

/// The next consumer with credit at or after `start`, wrapping.
#[inline(always)]
fn next_in_rotation(consumers: &[ConsumerSlot], start: usize) -> Option<usize> {
    let n = consumers.len();
    for i in 0..n {
        let at = if start + i >= n {
            start + i - n
        } else {
            start + i
        };
        if consumers.get(at).is_some_and(has_credit) {
            return Some(at);
        }
    }
    None
}

/// A consumer with credit of the highest priority among those with credit: the first
/// one at or after `start`, so equals take turns. Stops early at one of priority `top`
/// (nobody is higher).
fn next_by_priority(consumers: &[ConsumerSlot], start: usize, top: i64) -> Option<usize> {
    let n = consumers.len();
    let mut best: Option<(usize, i64)> = None;
    for i in 0..n {
        let at = if start + i >= n {
            start + i - n
        } else {
            start + i
        };
        let Some(c) = consumers.get(at).filter(|c| has_credit(c)) else {
            continue;
        };
        if c.priority == top {
            return Some(at);
        }
        if best.is_none_or(|(_, p)| c.priority > p) {
            best = Some((at, c.priority));
        }
    }
    best.map(|(at, _)| at)
}

/// The single active consumer (the earliest registered), if it has credit.
fn active_only(consumers: &[ConsumerSlot], _start: usize) -> Option<usize> {
    consumers.first().filter(|c| has_credit(c)).map(|_| 0)
}

impl Queue {
    /// Adds a consumer with zero credit; credit arrives by [`Queue::grant`] once the
    /// consumer's channel has told its client `consume-ok`.
    pub fn add_consumer(
        &mut self,
        target: ConsumerTarget,
        no_ack: bool,
        exclusive: bool,
        priority: i64,
        now: Instant,
    ) -> Result<u64, ConsumeRefused> {
        if (exclusive && self.settings.single_active_consumer)
            || self.consumers.iter().any(|c| c.exclusive)
            || (exclusive && !self.consumers.is_empty())
        {
            return Err(ConsumeRefused::ExclusiveInUse);
        }
        let key = self.next_consumer_key;
        self.next_consumer_key += 1;
        crate::model::reserve_from_one(&mut self.consumers);
        self.consumers.push(ConsumerSlot {
            key,
            target,
            credit: 0,
            credit_bytes: 0,
            no_ack,
            exclusive,
            priority,
            inflight: 0,
            inflight_bytes: 0,
        });
        self.refresh_pick();
        self.had_consumer = true;
        self.last_used = now;
        Ok(key)
    }

    /// Works out how dispatch picks a consumer from the current consumers.
    fn refresh_pick(&mut self) {
        let top = self.consumers.iter().map(|c| c.priority).max().unwrap_or(0);
        self.top_consumer_priority = top;
        self.pick = if self.settings.single_active_consumer {
            Pick::Single
        } else if self.consumers.iter().any(|c| c.priority != top) {
            Pick::Priority
        } else {
            Pick::Rotation
        };
    }

    /// Works out whether the write pass dispatches this queue (see `pull_conn`): when its
    /// only consumer is a no-ack one on shard `here` and `enabled`
    /// (`shard.dispatch_at_write`), and the queue has no limit that counts ready
    /// messages (`x-max-length`, `x-max-length-bytes`) and no queue TTL: waiting for the
    /// write pass, messages a turn's dispatch would have handed over could be dropped
    /// from the head or expire. Call after every change of consumers, limits or TTL.
    pub fn refresh_pull(&mut self, here: ShardId, enabled: bool) {
        let acts_on_ready = self.limits.max_length.is_some() || self.settings.message_ttl.is_some();
        self.pull_conn = match self.consumers.as_slice() {
            [only] if enabled && !acts_on_ready && only.no_ack && only.target.shard == here => {
                Some(only.target.conn)
            }
            _ => None,
        };
    }

    /// The connection whose write pass dispatches this queue, if any.
    pub fn pull_conn(&self) -> Option<ConnId> {
        self.pull_conn
    }

    /// The consumer that receives on a single-active-consumer queue.
    pub fn single_active(&self) -> Option<&ConsumerSlot> {
        match self.pick {
            Pick::Single => self.consumers.first(),
            _ => None,
        }
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
        self.refresh_pick();
        true
    }

    /// Removes every consumer matching `pred` (on connection loss).
    pub fn remove_consumers_where(&mut self, mut pred: impl FnMut(&ConsumerTarget) -> bool) {
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.consumers)
            .into_iter()
            .partition(|c| pred(&c.target));
        self.consumers = kept;
        // Dispatched per turn until the caller refreshes it (`refresh_pull`).
        self.pull_conn = None;
        for slot in &gone {
            self.forget_slot(slot);
        }
        if self.round_robin >= self.consumers.len() {
            self.round_robin = 0;
        }
        self.refresh_pick();
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
            && !self.head_evicted()
            && match self.pick {
                Pick::Single => self.consumers.first().is_some_and(has_credit),
                Pick::Rotation | Pick::Priority => self.consumers.iter().any(has_credit),
            }
    }

    /// [`Queue::dispatch`] for a queue the write pass pulls (`pull_conn`: its only
    /// consumer a no-ack one on this shard, no length limit or queue TTL) and whose ready
    /// list is a plain FIFO: moves up to `budget` head messages straight to `msgs` and
    /// settles the consumer's credit, the in-flight counts and the counters once for all
    /// of them, with no [`Dispatch`] record per message. Stops at an entry the general
    /// loop must see — evicted (to be read back, or dropped if expired), with an expiry
    /// of its own, or redelivered — and says so (`general_next`): [`Queue::dispatch`]
    /// then finds it at the head. `None` (nothing taken) when the queue is not such a
    /// queue.
    pub fn dispatch_pulled(
        &mut self,
        now: Instant,
        budget: usize,
        msgs: &mut Vec<LocalMessage>,
    ) -> Option<PulledRun> {
        if self.condemned || self.pull_conn.is_none() || !self.ready.is_plain() {
            return None;
        }
        let (target, mut credit, mut credit_bytes) = match self.consumers.as_slice() {
            [only] if only.no_ack => (only.target, only.credit, only.credit_bytes),
            _ => return None,
        };
        // The run is measured first, then taken off the FIFO in one drain: per message,
        // a look at the entry's flags and size, and its share moved (a take per
        // message cost ~90 instructions at 1 -> 16: issue 23).
        let (mut count, mut bytes, mut general_next, mut persistent) = (0u32, 0u64, false, 0);
        let fifo = self.ready.plain()?;
        let limit = budget.min(credit as usize);
        // Each of the FIFO's two slices as a plain slice loop; true once the run ended.
        let mut scan = |entries: &[Entry]| {
            for head in entries {
                if count as usize == limit || credit_bytes == 0 {
                    return true;
                }
                if head.evicted | head.redelivered | head.has_expiry() {
                    general_next = true;
                    return true;
                }
                let size = head.size();
                credit_bytes = credit_bytes.saturating_sub(size);
                count += 1;
                bytes += size;
                if head.persistent {
                    persistent += 1;
                    self.finished(head);
                }
            }
            false
        };
        let (front, back) = fifo.as_slices();
        if !scan(front) {
            scan(back);
        }
        credit -= count;
        self.ready.take_plain_front(count as usize, msgs);
        self.ready_bytes -= bytes;
        self.persistent -= persistent;
        if let Some(only) = self.consumers.first_mut() {
            only.credit = credit;
            only.credit_bytes = credit_bytes;
            only.inflight += u64::from(count);
            only.inflight_bytes += bytes;
        }
        self.inflight += u64::from(count);
        self.inflight_bytes += bytes;
        self.counters.delivered += u64::from(count);
        self.counters.delivered_no_ack += u64::from(count);
        if count > 0 {
            self.last_used = now;
            self.ready.trim_after_pull(count as usize);
        }
        Some(PulledRun {
            target,
            count,
            bytes,
            general_next,
        })
    }

    /// Hands up to `budget` ready messages to consumers with credit, as [`Pick`] says.
    /// Expired head messages are dropped on the way. Returns how many were dispatched.
    pub fn dispatch(&mut self, now: Instant, budget: usize, out: &mut Vec<Dispatch>) -> usize {
        if self.condemned {
            return 0;
        }
        match self.pick {
            Pick::Rotation if self.ready.is_plain() => self.dispatch_plain(now, budget, out),
            Pick::Rotation => self.dispatch_rotation(now, budget, out),
            Pick::Priority => self.dispatch_priority(now, budget, out),
            Pick::Single => self.dispatch_single(now, budget, out),
        }
    }

    /// A plain queue, consumers in rotation: the loop as it was before priorities, a
    /// function of its own with no check per message.
    fn dispatch_plain(&mut self, now: Instant, budget: usize, out: &mut Vec<Dispatch>) -> usize {
        self.dispatch_by::<ready::Fifo>(now, budget, out, next_in_rotation)
    }

    #[inline(never)]
    fn dispatch_rotation(&mut self, now: Instant, budget: usize, out: &mut Vec<Dispatch>) -> usize {
        self.dispatch_by::<ready::Any>(now, budget, out, next_in_rotation)
    }

    #[inline(never)]
    fn dispatch_priority(&mut self, now: Instant, budget: usize, out: &mut Vec<Dispatch>) -> usize {
        let top = self.top_consumer_priority;
        self.dispatch_by::<ready::Any>(now, budget, out, |c, start| next_by_priority(c, start, top))
    }

    #[inline(never)]
    fn dispatch_single(&mut self, now: Instant, budget: usize, out: &mut Vec<Dispatch>) -> usize {
        self.dispatch_by::<ready::Any>(now, budget, out, active_only)
    }

    /// The dispatch loop, with `H` reaching the head and `next` choosing the consumer
    /// for each message (inlined once per [`Pick`], so the plain rotation costs what it
    /// did before priorities).
    #[inline(always)]
    fn dispatch_by<H: Head>(
        &mut self,
        now: Instant,
        budget: usize,
        out: &mut Vec<Dispatch>,
        next: impl Fn(&[ConsumerSlot], usize) -> Option<usize>,
    ) -> usize {
        let n = self.consumers.len();
        let mut sent = 0;
        let mut pick = self.round_robin;
        // No-ack dispatches leave the queue's entries but stay held until written; their
        // totals are applied once after the loop.
        let (mut gone, mut gone_bytes, mut redeliveries) = (0u64, 0u64, 0u64);
        // Expiry is checked per message against the turn's time, converted once.
        let stamp = self.stamp(now);
        // An evicted head (its body on disk only) ends the loop: `pop_ready_by` stops
        // there and the shard reads it back.
        while sent < budget && !H::is_empty(&self.ready) {
            // Next consumer with credit, starting at the rotation point.
            let Some(found) = next(&self.consumers, pick) else {
                break;
            };
            let Some(entry) = self.pop_ready_by::<H>(stamp) else {
                break;
            };
            let size = entry.size();
            let consumer = &mut self.consumers[found];
            consumer.credit -= 1;
            consumer.credit_bytes = consumer.credit_bytes.saturating_sub(size);
            pick = if found + 1 == n { 0 } else { found + 1 };
            let (target, no_ack) = (consumer.target, consumer.no_ack);
            let (seq, redelivered) = (entry.seq, entry.redelivered);
            redeliveries += u64::from(redelivered);
            let msg = if no_ack {
                consumer.inflight += 1;
                consumer.inflight_bytes += size;
                gone += 1;
                gone_bytes += size;
                if self.settings.stored && entry.persistent {
                    crate::model::journal::gone(self.id, seq);
                }
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
        self.counters.delivered_no_ack += gone;
        self.counters.redelivered += redeliveries;
        if sent > 0 {
            self.last_used = now;
        }
        sent
    }
}

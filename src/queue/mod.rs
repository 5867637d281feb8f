//! Owns: a queue's contents and consumers on its home shard — the ready list in delivery
//! order (`ready`: one FIFO, or one per priority level for `x-max-priority`), the
//! unacknowledged entries, the no-ack deliveries not yet written, O(1) accounting of
//! everything the queue holds (messages, bytes, persistent messages, the oldest entry's
//! age), consumer rotation with per-consumer credit in messages and bytes, consumer
//! priorities and the single active consumer (`consumers`), message TTL at the head,
//! the recent `basic.get` channels, the policy state the queue carries (`limits`) and
//! its declared settings, shared with queues declared alike (`settings`).
//!
//! Does not: touch sockets, other shards or the clock (every time-dependent call takes
//! `now`), or decide policy. It produces [`Dispatch`] records; the shard turns them into
//! deliveries and acts on the policies.
//!
//! The head is the entry delivered next (in a priority queue, the oldest of the highest
//! non-empty level). TTL expiry and the rings (`x-max-length` drop-head, the cycle
//! policy's count and depth) take from the head, as RabbitMQ's `rabbit_priority_queue`
//! does: an expired low-priority message behind a live high-priority one waits, and a
//! full priority queue drops its highest-priority message first.
//!
//! # Invariants
//! - `ready` is in delivery order and sorted by `seq` (within each priority level);
//!   `ready_bytes` is the sum of entry sizes over `ready`, `unacked_bytes` over
//!   `unacked`.
//! - An entry is in exactly one of `ready` and `unacked`, or gone.
//! - `inflight` / `inflight_bytes` count no-ack dispatches not yet reported written, and
//!   equal the sums over the consumer slots.
//! - `persistent` counts the persistent entries in `ready` and `unacked`.

pub mod consumers;
pub mod dispatch_args;
pub mod entry;
pub mod limits;
pub mod paging;
pub mod ready;
pub mod settings;

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

pub use crate::model::dead_letter::DeadLetterTarget;
use crate::model::dead_letter::Reason;
use crate::model::ids::{ChannelRef, ConnId, QueueId};
use crate::model::ledger;
use crate::model::message::LocalMessage;
use crate::policy::slow_consumer::Holdings;
use crate::protocol::ShortStr;

pub use consumers::{ConsumeRefused, ConsumerSlot, Dispatch, PulledRun};
pub use entry::{Entry, Stamp};
pub use limits::QueueLimits;
pub use ready::ReadyList;
pub use settings::QueueSettings;

use ready::Head;

/// Counters for `queue.declare-ok`, `basic.get-ok` and the management view.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub messages: u32,
    pub consumers: u32,
    pub unacked: u32,
    pub depth_bytes: u64,
    /// Everything held: ready, unacknowledged and no-ack deliveries not yet written.
    pub held_bytes: u64,
}

/// Totals since the queue was created. In declaration order (`repr(C)`): the ones every
/// message counts first (see [`Queue`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct QueueCounters {
    pub enqueued: u64,
    pub delivered: u64,
    /// The management API's split of `delivered` (RabbitMQ's `deliver_no_ack`; `get`,
    /// `get_no_ack` below; `deliver` is the rest).
    pub delivered_no_ack: u64,
    /// Deliveries and gets of messages marked redelivered.
    pub redelivered: u64,
    /// Messages the subscription finished with: acked, rejected, written for no-ack,
    /// taken by `basic.get` without ack. The consumption rate counts these.
    pub consumed: u64,
    pub expired: u64,
    /// Dropped by a ring (cycle policy, `x-max-length` drop-head).
    pub discarded: u64,
    /// Refused by `x-overflow = reject-publish`.
    pub rejected: u64,
    pub got: u64,
    pub got_no_ack: u64,
    /// The management API's `ack` count.
    pub acked: u64,
}

/// How many `basic.get` channels a queue remembers (for the slow-consumer close).
const GETTERS: usize = 16;

/// A queue on its home shard.
///
/// Laid out in declaration order (`repr(C)`), the fields every enqueue, dispatch and
/// written settlement touch first, then the pointer to the (shared) settings and the
/// limits an enqueue checks (`repr(C)` too, their checked fields first), then the rest. At 10,000 subscribers
/// every line of a queue a message touches is a cache miss per message; the compiler's
/// own order spread these fields over 11 of the queue's 16 lines (it was 992 bytes;
/// 512 now: what most queues never use is boxed until first used — the slow-consumer
/// meters and policy (`SlowState`), the dead-letter target, the flow-stopped publishers
/// (`BlockedPublishers`), the `basic.get` channels, length limits and capacity — and
/// the settings are shared by queues declared alike).
#[repr(C, align(64))]
pub struct Queue {
    // First line: the ready list and its totals.
    /// Counts its own allocation in the memory ledger (its capacity, which may be twice
    /// its length: that is memory the queue holds too).
    ready: ReadyList,
    ready_bytes: u64,
    next_seq: u64,
    // Second line: the consumers and what is out with them.
    consumers: Vec<ConsumerSlot>,
    round_robin: usize,
    inflight: u64,
    inflight_bytes: u64,
    persistent: u64,
    /// Ready entries whose bodies are evicted (`paging`).
    evicted: u64,
    // Third line: state flags and the settings' pointer; the counters each
    // message counts share a line further on.
    last_used: Instant,
    /// The slow-consumer policy deleted this queue; it accepts nothing more.
    pub condemned: bool,
    /// The queue waits for dispatch: on its shard's list of queues to dispatch this
    /// turn, or (with `pull_conn`) asked of its consumer's connection for the write pass.
    pub in_dirty_list: bool,
    /// Dispatch stopped at an evicted head: the shard should read bodies back.
    pub page_in_wanted: bool,
    /// Whether a consumer was ever attached (auto-delete fires only after that).
    had_consumer: bool,
    /// How dispatch picks a consumer (kept up to date as consumers come and go).
    pick: consumers::Pick,
    /// The connection whose turn in the write pass dispatches this queue (its only
    /// consumer is a no-ack one on this shard: [`Queue::refresh_pull`]); `None`: the
    /// queue is dispatched at the end of the turn that made it dirty.
    pull_conn: Option<ConnId>,
    /// Shared with queues declared alike ([`QueueSettings::shared`]); a run-time policy
    /// that changes them replaces them (`shard::home::runtime_policy`), never changes
    /// them in place. An enqueue reads them through this pointer: one line for every
    /// queue that shares them, a line of their own for a queue that does not.
    pub settings: Rc<QueueSettings>,
    /// Messages that died here, for the shard to dead-letter. Only filled when the queue
    /// has a dead-letter exchange.
    dead: Vec<(LocalMessage, Reason)>,
    pub counters: QueueCounters,
    pub limits: QueueLimits,
    unacked: BTreeMap<u64, Entry>,
    unacked_bytes: u64,
    next_consumer_key: u64,
    /// The highest consumer priority (`x-priority`) among the consumers.
    top_consumer_priority: i64,
    /// Channels that recently took messages with `basic.get`, with when; allocated at
    /// the first get (most queues are consumed, never got from: issue 23).
    #[allow(clippy::box_collection)]
    getters: Option<Box<Vec<(ChannelRef, Instant)>>>,
    /// When the queue was made: its entries' times are [`Stamp`]s since then.
    base: Instant,
    pub id: QueueId,
    pub vhost_idx: usize,
    pub vhost: String,
    pub name: ShortStr,
}

impl Queue {
    /// `t` as a time in this queue's life (entries keep their times so).
    #[inline]
    fn stamp(&self, t: Instant) -> Stamp {
        Stamp::of(t, self.base)
    }

    /// Hints the lines an enqueue and a dispatch touch (`model::prefetch`), for a queue a
    /// few queues ahead in a loop; computes field addresses only. With the queue's layout
    /// (see [`Queue`]) those are its first three lines, the one of `dead`, the counters',
    /// and the two of the limits an enqueue checks: seven lines, where the compiler's own
    /// order needed sixteen hints over eleven.
    #[inline(always)]
    pub fn prefetch_hot(&self) {
        use crate::model::prefetch::line;
        line(&self.ready);
        line(&self.consumers);
        line(&self.last_used);
        line(&self.dead);
        line(&self.counters);
        line(&self.limits.max_length);
        line(&self.limits.slow);
    }

    /// Hints what a dispatch loads after the lines [`Queue::prefetch_hot`] hints: the
    /// ready list's head entry and the first consumer's slot, each in an allocation of
    /// its own. Reads the queue's first two lines, so call it a step after
    /// `prefetch_hot`.
    #[inline(always)]
    pub fn prefetch_dispatch(&self) {
        self.ready.prefetch_head();
        if let Some(first) = self.consumers.first() {
            crate::model::prefetch::line(first);
        }
    }

    pub fn new(
        id: QueueId,
        vhost_idx: usize,
        vhost: String,
        name: ShortStr,
        settings: QueueSettings,
        limits: QueueLimits,
        now: Instant,
    ) -> Queue {
        let pick = consumers::Pick::initial(&settings);
        Queue {
            id,
            vhost_idx,
            vhost,
            name,
            ready: ReadyList::new(settings.max_priority),
            settings: settings.shared(),
            ready_bytes: 0,
            unacked: BTreeMap::new(),
            unacked_bytes: 0,
            inflight: 0,
            inflight_bytes: 0,
            persistent: 0,
            next_seq: 1,
            consumers: Vec::new(),
            next_consumer_key: 1,
            round_robin: 0,
            pick,
            top_consumer_priority: 0,
            had_consumer: false,
            last_used: now,
            getters: None,
            base: now,
            counters: QueueCounters::default(),
            limits,
            condemned: false,
            in_dirty_list: false,
            pull_conn: None,
            dead: Vec::new(),
            evicted: 0,
            page_in_wanted: false,
        }
    }

    /// Appends a published message. Returns its sequence number.
    pub fn enqueue(&mut self, msg: LocalMessage, now: Instant) -> u64 {
        let at = self.stamp(now);
        self.enqueue_at(msg, now, at)
    }

    /// [`Queue::enqueue`] with `now` already converted to a stamp from the queue's base
    /// (the shard's clock gives it once per turn: [`Queue::with_base`]). Inlined into
    /// the shard's enqueue, which calls it once per queue a publish reaches.
    #[inline(always)]
    pub fn enqueue_at(&mut self, msg: LocalMessage, now: Instant, at: Stamp) -> u64 {
        if self.ready.is_plain() {
            self.enqueue_by::<ready::Fifo>(msg, now, at)
        } else {
            self.enqueue_by::<ready::Any>(msg, now, at)
        }
    }

    /// The queue with `base` as the start of its entries' stamps instead of its
    /// creation time: the shard's clock's start, so that the clock's stamp of the turn
    /// is this queue's too. Only for a queue that holds nothing yet.
    pub fn with_base(mut self, base: Instant) -> Queue {
        debug_assert!(self.ready.is_empty() && self.unacked.is_empty());
        self.base = base;
        self
    }

    /// [`Queue::enqueue`], compiled once for a plain queue's FIFO (the entry is built in
    /// its slot, no check per message) and once for any queue.
    #[inline(always)]
    fn enqueue_by<H: Head>(&mut self, msg: LocalMessage, now: Instant, at: Stamp) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        let queue_ttl = self.settings.message_ttl;
        let msg_ttl = msg.ttl_ms().map(Duration::from_millis);
        let ttl = match (queue_ttl, msg_ttl) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let entry = Entry::new(
            seq,
            msg,
            at,
            ttl.map_or(Stamp::NEVER, |ttl| self.stamp(now + ttl)),
        );
        self.ready_bytes += entry.size();
        if entry.persistent {
            self.persistent += 1;
        }
        H::push_back(&mut self.ready, entry);
        self.counters.enqueued += 1;
        seq
    }

    /// Puts back an entry recovered from the store, with its stored sequence number
    /// (entries come in sequence order).
    pub fn restore(&mut self, msg: LocalMessage, seq: u64, redelivered: bool, now: Instant) {
        self.next_seq = self.next_seq.max(seq + 1);
        let queue_ttl = self.settings.message_ttl;
        let msg_ttl = msg.ttl_ms().map(Duration::from_millis);
        let ttl = match (queue_ttl, msg_ttl) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut entry = Entry::new(
            seq,
            msg,
            self.stamp(now),
            ttl.map_or(Stamp::NEVER, |ttl| self.stamp(now + ttl)),
        );
        entry.redelivered = redelivered;
        self.ready_bytes += entry.size();
        if entry.persistent {
            self.persistent += 1;
        }
        self.ready.push_back(entry);
    }

    /// The persistent entries (ready or awaiting ack) with sequence numbers in `range`,
    /// at most `limit`: the store copies them forward when it compacts an old segment.
    pub fn persistent_in(
        &self,
        range: std::ops::Range<u64>,
        limit: usize,
        out: &mut Vec<(u64, LocalMessage, bool)>,
    ) {
        let start = out.len();
        // With whether it was delivered (awaiting ack, or returned): its copy must keep
        // the delivered mark.
        let mut take = |e: &Entry, delivered: bool| {
            // An evicted entry's message is a placeholder: it stays where it is.
            if e.persistent && !e.evicted && out.len() - start < limit {
                out.push((e.seq, LocalMessage::clone(&e.msg), delivered));
            }
        };
        self.ready
            .for_each_in(range.clone(), |e| take(e, e.redelivered));
        for e in self.unacked.range(range).map(|(_, e)| e) {
            take(e, true);
        }
    }

    /// An entry left the queue for good: a stored one is journaled as gone.
    #[inline(always)]
    fn finished(&self, entry: &Entry) {
        if self.settings.stored && entry.persistent {
            crate::model::journal::gone(self.id, entry.seq);
        }
    }

    pub fn stats(&self) -> QueueStats {
        QueueStats {
            messages: u32::try_from(self.ready.len()).unwrap_or(u32::MAX),
            consumers: u32::try_from(self.consumers.len()).unwrap_or(u32::MAX),
            unacked: u32::try_from(self.unacked.len()).unwrap_or(u32::MAX),
            depth_bytes: self.ready_bytes,
            held_bytes: self.held_bytes(),
        }
    }

    pub fn ready_count(&self) -> usize {
        self.ready.len()
    }

    pub fn ready_bytes(&self) -> u64 {
        self.ready_bytes
    }

    /// Whether this is a priority queue (`x-max-priority`): a new message may become the
    /// head without the queue having been empty.
    pub fn is_priority(&self) -> bool {
        self.ready.max_priority().is_some()
    }

    /// Messages held: ready, awaiting ack, and no-ack deliveries not yet written.
    pub fn held_count(&self) -> u64 {
        self.ready.len() as u64 + self.unacked.len() as u64 + self.inflight
    }

    /// Bytes held (the queue's size for capacity and the depth threshold).
    pub fn held_bytes(&self) -> u64 {
        self.ready_bytes + self.unacked_bytes + self.inflight_bytes
    }

    /// Whether any persistent message is held.
    pub fn holds_persistent(&self) -> bool {
        self.persistent > 0
    }

    /// Age of the oldest ready message.
    pub fn oldest_age(&self, now: Instant) -> Option<Duration> {
        self.ready
            .oldest_enqueued()
            .map(|at| now.saturating_duration_since(at.instant(self.base)))
    }

    /// What the queue holds, without the oldest age (the O(1) figures the count and depth
    /// thresholds read on every enqueue).
    pub fn held(&self) -> Holdings {
        Holdings {
            count: self.held_count(),
            bytes: self.held_bytes(),
            oldest_age: None,
        }
    }

    /// What the queue holds for its subscription, with the age of the oldest entry
    /// ready or awaiting ack.
    pub fn holdings(&self, now: Instant) -> Holdings {
        let unacked = self.unacked.values().next().map(|e| e.enqueued_at);
        let oldest = match (self.ready.oldest_enqueued(), unacked) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Holdings {
            count: self.held_count(),
            bytes: self.held_bytes(),
            oldest_age: oldest.map(|t| now.saturating_duration_since(t.instant(self.base))),
        }
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
        self.ready
            .front()
            .filter(|e| e.has_expiry())
            .map(|e| e.expires_at.instant(self.base))
    }

    /// Removes the head of the ready list, keeping the accounting.
    #[inline(always)]
    fn take_head(&mut self) -> Option<Entry> {
        self.take_head_by::<ready::Any>()
    }

    #[inline(always)]
    fn take_head_by<H: Head>(&mut self) -> Option<Entry> {
        let entry = H::pop_front(&mut self.ready)?;
        self.took_ready(&entry);
        H::after_pop(&mut self.ready);
        Some(entry)
    }

    /// An entry left the ready list.
    #[inline(always)]
    fn took_ready(&mut self, entry: &Entry) {
        self.ready_bytes -= entry.size();
        if entry.persistent {
            self.persistent -= 1;
        }
        if entry.evicted {
            self.evicted -= 1;
        }
    }

    /// Drops expired messages from the head (TTL is applied at the head, as RabbitMQ does).
    /// Returns how many were dropped.
    pub fn expire_head(&mut self, now: Instant) -> usize {
        let mut dropped = 0;
        let now = self.stamp(now);
        while self.ready.front().is_some_and(|e| e.is_expired(now)) {
            if let Some(entry) = self.take_head() {
                self.died(entry, Reason::Expired);
            }
            dropped += 1;
        }
        self.counters.expired += dropped as u64;
        dropped
    }

    /// Discards the oldest ready message (a ring making room), dead-lettering it (reason
    /// `maxlen`) when `dead_letter`. Returns its size.
    pub fn discard_head(&mut self, dead_letter: bool) -> Option<u64> {
        let entry = self.take_head()?;
        self.counters.discarded += 1;
        let size = entry.size();
        if dead_letter {
            self.died(entry, Reason::Maxlen);
        } else {
            self.finished(&entry);
        }
        Some(size)
    }

    /// A message died here: kept for dead-lettering when the queue has a dead-letter
    /// exchange (only this drop path pays the check).
    #[inline]
    pub fn died(&mut self, entry: Entry, reason: Reason) {
        self.finished(&entry);
        // Only a queue without a dead-letter exchange evicts bodies; one that was given
        // an exchange later (by a run-time policy) has no body to dead-letter for an
        // entry still evicted.
        if !entry.evicted {
            self.died_message(entry.msg, reason);
        }
    }

    /// [`Queue::died`] for a message that never became an entry (refused by
    /// `reject-publish-dlx`).
    pub fn died_message(&mut self, msg: LocalMessage, reason: Reason) {
        if self.settings.dead_letter.is_some() {
            self.dead.push((msg, reason));
        }
    }

    /// Whether messages wait to be dead-lettered.
    #[inline]
    pub fn has_dead(&self) -> bool {
        !self.dead.is_empty()
    }

    /// Takes the messages waiting to be dead-lettered.
    pub fn take_dead(&mut self) -> Vec<(LocalMessage, Reason)> {
        std::mem::take(&mut self.dead)
    }

    /// Whether slow-consumer Cycle discards are dead-lettered.
    pub fn dead_letters_cycle(&self) -> bool {
        self.settings
            .dead_letter
            .as_ref()
            .is_some_and(|d| d.slow_consumer)
    }

    /// Discards ready messages enqueued before `cutoff`, oldest first (a ring bounded by
    /// age; in a priority queue, from every level).
    pub fn discard_older_than(&mut self, cutoff: Instant) -> u64 {
        let mut n = 0;
        let dead_letter = self.dead_letters_cycle();
        let cutoff = self.stamp(cutoff);
        while let Some(entry) = self.ready.pop_older_than(cutoff) {
            self.took_ready(&entry);
            self.counters.discarded += 1;
            if dead_letter {
                self.died(entry, Reason::Maxlen);
            } else {
                self.finished(&entry);
            }
            n += 1;
        }
        n
    }

    /// Counts a message refused by `reject-publish`.
    pub fn count_rejected(&mut self) {
        self.counters.rejected += 1;
    }

    /// `basic.get`: takes the head message. With `no_ack` it is gone; otherwise it waits
    /// in the unacked set. Returns the entry and the count of messages still ready.
    pub fn get(
        &mut self,
        now: Instant,
        no_ack: bool,
        from: Option<ChannelRef>,
    ) -> Option<(Entry, u32)> {
        self.last_used = now;
        if let Some(channel) = from {
            self.note_getter(channel, now);
        }
        // An evicted head is never handed out (`pop_ready` stops at it; the shard reads
        // it back before it asks, `shard::home::paging`). Expiry is judged a moment
        // after `now`: a message with a TTL of 0 is for consumers only, never got (as
        // RabbitMQ drops one no consumer takes at once).
        let entry = self.pop_ready(now + Duration::from_nanos(1))?;
        if no_ack {
            self.counters.consumed += 1;
            self.counters.got_no_ack += 1;
            self.finished(&entry);
        } else {
            self.counters.got += 1;
            self.hold_unacked(entry.clone());
        }
        self.counters.delivered += 1;
        self.counters.redelivered += u64::from(entry.redelivered);
        let remaining = u32::try_from(self.ready.len()).unwrap_or(u32::MAX);
        Some((entry, remaining))
    }

    fn note_getter(&mut self, channel: ChannelRef, now: Instant) {
        let getters = self.getters.get_or_insert_with(Box::default);
        if let Some(slot) = getters.iter_mut().find(|(c, _)| *c == channel) {
            slot.1 = now;
            return;
        }
        if getters.len() >= GETTERS {
            if let Some(oldest) = (0..getters.len()).min_by_key(|&i| getters[i].1) {
                getters.swap_remove(oldest);
            }
        }
        getters.push((channel, now));
    }

    /// The channels that took messages with `basic.get`, with when.
    fn getters(&self) -> &[(ChannelRef, Instant)] {
        self.getters.as_deref().map_or(&[], Vec::as_slice)
    }

    /// Channels that took messages with `basic.get` within `window` before `now`.
    pub fn recent_getters(&self, now: Instant, window: Duration) -> Vec<ChannelRef> {
        self.getters()
            .iter()
            .filter(|(_, at)| now.saturating_duration_since(*at) <= window)
            .map(|(c, _)| *c)
            .collect()
    }

    /// Whether a `basic.get` channel was active within `window`.
    pub fn has_recent_getter(&self, now: Instant, window: Duration) -> bool {
        self.getters()
            .iter()
            .any(|(_, at)| now.saturating_duration_since(*at) <= window)
    }

    #[inline(always)]
    fn pop_ready(&mut self, now: Instant) -> Option<Entry> {
        let now = self.stamp(now);
        self.pop_ready_by::<ready::Any>(now)
    }

    /// Takes the head, dropping expired messages on the way. `now` is a stamp (converted
    /// once by a caller that pops many).
    #[inline(always)]
    fn pop_ready_by<H: Head>(&mut self, now: Stamp) -> Option<Entry> {
        loop {
            if self.evicted > 0
                && self
                    .ready
                    .front()
                    .is_some_and(|e| e.evicted && !e.is_expired(now))
            {
                // Its body is on disk only (an expired one may still be dropped).
                self.page_in_wanted = true;
                return None;
            }
            let entry = self.take_head_by::<H>()?;
            if entry.is_expired(now) {
                self.counters.expired += 1;
                self.died(entry, Reason::Expired);
                continue;
            }
            return Some(entry);
        }
    }

    #[inline(always)]
    fn hold_unacked(&mut self, entry: Entry) {
        if self.settings.stored && entry.persistent {
            crate::model::journal::delivered(self.id, entry.seq);
        }
        unacked_entries(1);
        self.unacked_bytes += entry.size();
        if entry.persistent {
            self.persistent += 1;
        }
        self.unacked.insert(entry.seq, entry);
    }

    #[inline]
    fn release_unacked(&mut self, seq: u64) -> Option<Entry> {
        let entry = self.unacked.remove(&seq)?;
        unacked_entries(-1);
        self.unacked_bytes -= entry.size();
        if entry.persistent {
            self.persistent -= 1;
        }
        Some(entry)
    }

    /// Positive acknowledgement: the entry is done. Returns whether it was outstanding.
    pub fn ack(&mut self, seq: u64) -> bool {
        let Some(entry) = self.release_unacked(seq) else {
            return false;
        };
        self.finished(&entry);
        self.counters.consumed += 1;
        self.counters.acked += 1;
        true
    }

    /// Negative acknowledgement without requeue: the entry is dropped, dead-lettered
    /// (reason `rejected`) when the queue has a dead-letter exchange.
    pub fn discard(&mut self, seq: u64) -> bool {
        let Some(entry) = self.release_unacked(seq) else {
            return false;
        };
        self.counters.consumed += 1;
        self.died(entry, Reason::Rejected);
        true
    }

    /// Puts an unacknowledged entry back in its original position, marked redelivered.
    pub fn requeue(&mut self, seq: u64) -> bool {
        let Some(mut entry) = self.release_unacked(seq) else {
            return false;
        };
        entry.redelivered = true;
        self.ready_bytes += entry.size();
        if entry.persistent {
            self.persistent += 1;
        }
        self.ready.insert_by_seq(entry);
        true
    }

    /// Removes all ready messages. Returns how many.
    pub fn purge(&mut self) -> u32 {
        let n = self.ready.len();
        if self.settings.stored {
            let id = self.id;
            self.ready.for_each(|e| {
                if e.persistent {
                    crate::model::journal::gone(id, e.seq);
                }
            });
        }
        self.ready.clear();
        self.evicted = 0;
        self.ready_bytes = 0;
        self.persistent = self.unacked.values().filter(|e| e.persistent).count() as u64;
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Releases everything the queue holds (it is being deleted): ready and unacked
    /// entries are dropped, so shared messages no other queue holds are freed now.
    pub fn release_all(&mut self) {
        self.purge();
        unacked_entries(-(self.unacked.len() as i64));
        self.unacked.clear();
        self.unacked_bytes = 0;
        self.persistent = 0;
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // The ready list gives back its own allocation.
        unacked_entries(-(self.unacked.len() as i64));
    }
}

/// Unacknowledged entries were added (positive) or removed, in the shard's memory ledger.
fn unacked_entries(n: i64) {
    ledger::entries(n * entry::ENTRY_BYTES);
}

#[cfg(test)]
mod tests;

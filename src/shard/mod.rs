//! Owns: [`Shard`] — one event loop's entire world: its connections (a slab), the queues
//! whose home it is, its replica of the routing directory, its timer wheel and its
//! outboxes to the other shards. Nothing here is shared with another thread; shards meet
//! only through [`inbox::ShardMsg`].
//!
//! Does not: touch any state of another shard, or hold a `RefCell` borrow across an
//! `.await` (clippy's `await_holding_refcell_ref` is denied crate-wide).
//!
//! The per-connection protocol handling lives in `handler`, the queue side in `queues`, the
//! control-plane coordinator in `control`, the thread and listener in `runtime`.

pub mod arrivals;
pub mod cgroup;
pub mod control;
pub mod dead_letter;
pub mod deliver;
pub mod flow;
pub mod handler;
pub mod inbox;
pub mod memory;
pub mod observe;
pub mod paging;
pub mod persist;
pub mod placement;
pub mod policy;
pub mod queues;
pub mod reclaim;
pub mod runtime;

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::Instant;

use slab::Slab;

use crate::config::Config;
use crate::model::ids::{ConnId, IdMap, QueueId, ShardId};
use crate::model::routing::Directory;
use crate::model::routing::VhostIdx;
use crate::protocol::ShortStr;
use crate::queue::{Dispatch, Queue};
use crate::session::connection::Conn;
use crate::session::signal::Signal;
use crate::timer::clock::Clock;
use crate::timer::wheel::{TimerId, TimerWheel};

use crate::policy::watermark::Watermark;

use inbox::{
    ConfirmDone, FlowNotice, Peers, PublishBatch, RemoteDelivery, Routed, Settlement, ShardMsg,
};
use memory::MemoryBoard;

/// What a timer on the shard's wheel is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerKey {
    /// Heartbeat send/check for a connection.
    Heartbeat(ConnId),
    /// A connection must finish the handshake by now.
    Handshake(ConnId),
    /// A closing connection's socket is shut by now: close-ok not received after our
    /// `connection.close`, or the client not gone after our close-ok.
    CloseTimeout(ConnId),
    /// TTL and `x-expires` housekeeping of a home queue.
    QueueHousekeeping(QueueId),
    /// The periodic slow-consumer check of a home queue (age, rate, prediction, alerts).
    QueuePolicy(QueueId),
}

/// Messages to other shards, collected during a turn and sent once at its end.
pub struct Outbox {
    pub publish: Vec<Vec<Routed>>,
    pub deliver: Vec<Vec<RemoteDelivery>>,
    pub settle: Vec<Vec<Settlement>>,
    pub confirms: Vec<Vec<ConfirmDone>>,
    pub flow: Vec<Vec<FlowNotice>>,
}

impl Outbox {
    fn new(shards: usize) -> Outbox {
        Outbox {
            publish: (0..shards).map(|_| Vec::new()).collect(),
            deliver: (0..shards).map(|_| Vec::new()).collect(),
            settle: (0..shards).map(|_| Vec::new()).collect(),
            confirms: (0..shards).map(|_| Vec::new()).collect(),
            flow: (0..shards).map(|_| Vec::new()).collect(),
        }
    }

    pub fn settle(&mut self, shard: ShardId, s: Settlement) {
        if let Some(v) = self.settle.get_mut(usize::from(shard)) {
            v.push(s);
        }
    }

    /// A confirm outcome for a publisher on `shard`; consecutive publishes of one
    /// channel with the same outcome travel as one range.
    pub fn confirm(&mut self, shard: ShardId, done: ConfirmDone) {
        if let Some(v) = self.confirms.get_mut(usize::from(shard)) {
            push_confirm(v, done);
        }
    }

    pub fn flow(&mut self, shard: ShardId, notice: FlowNotice) {
        if let Some(v) = self.flow.get_mut(usize::from(shard)) {
            v.push(notice);
        }
    }
}

/// Appends a confirm outcome; consecutive publishes of one channel with the same
/// outcome become one range.
pub fn push_confirm(v: &mut Vec<ConfirmDone>, done: ConfirmDone) {
    if let Some(last) = v.last_mut() {
        if last.channel == done.channel
            && last.rejected == done.rejected
            && last.last + 1 == done.first
        {
            last.last = done.last;
            return;
        }
    }
    v.push(done);
}

/// Everything mutable on a shard, behind one `RefCell`.
pub struct State {
    pub directory: Directory,
    pub queues: IdMap<QueueId, Queue>,
    pub conns: Slab<Conn>,
    next_generation: u32,
    /// Next connection serial: shard `i` of `n` hands out `i+1, i+1+n, …`, so serials are
    /// unique across the broker.
    next_serial: u64,
    serial_step: u64,
    pub wheel: TimerWheel<TimerKey>,
    dirty_queues: Vec<QueueId>,
    dirty_conns: Vec<ConnId>,
    /// Counter behind [`State::next_rotation`].
    rotation: u64,
    pub outbox: Outbox,
    scratch: Vec<Dispatch>,
    /// Housekeeping timer armed per queue, with its deadline.
    pub queue_timers: IdMap<QueueId, (TimerId, Instant)>,
    /// Queues the broker itself wants deleted (auto-delete, x-expires); the turn's end
    /// hands them to the coordinator.
    pub internal_deletes: Vec<(VhostIdx, ShortStr)>,
    /// Next queue id; only the coordinator (shard 0) allocates.
    pub next_queue_id: u64,
    name_seed: u64,
    /// The memory alarm as this shard has applied it to its publishers.
    pub memory_alarm: bool,
    /// The broker-wide disk alarm (`store.disk_free_limit`) as this shard applied it.
    pub disk_alarm: bool,
    /// Each vhost's store alarm (disk quota) as this shard has applied it.
    pub store_alarms: Vec<bool>,
    /// Confirms of publishes that entered durable queues this turn: they go out once
    /// the group sealed at the turn's end is on disk (`persist`).
    pub held_confirms: Vec<ConfirmDone>,
    /// Home queues with evicted entries (`paging`), and those being read back now.
    pub evicting: Vec<QueueId>,
    pub paging_in: Vec<QueueId>,
    /// Home queues the slow-consumer policy deleted, with when (kept one rate window).
    pub slow_deleted: Vec<(QueueId, Instant)>,
    /// The watermark's hysteresis (evaluated by the coordinating shard only).
    pub watermark: Watermark,
    /// Publishes from other shards waiting for their queue's declaration.
    pub arrivals: arrivals::Arrivals,
    /// Messages that died in home queues with a dead-letter exchange, to re-publish
    /// before this turn ends.
    pub dead_letters: Vec<dead_letter::DeadLetter>,
}

/// One shard. Lives in an `Rc` on its own thread.
pub struct Shard {
    pub id: ShardId,
    pub shards: usize,
    /// The configuration as started. Its users, `loopback_users`, `permissions` and
    /// queue/topic/vhost policies can be reloaded (SIGHUP): read those from
    /// [`Shard::live`].
    pub config: Arc<Config>,
    /// The configuration in force, replaced by `ShardMsg::Reload`.
    live: RefCell<Arc<Config>>,
    pub clock: Clock,
    pub peers: Peers,
    /// Broker-wide message memory and the alarm.
    pub memory: Arc<MemoryBoard>,
    pub state: RefCell<State>,
    /// Raised once shutdown has begun.
    pub stopping: Cell<bool>,
    /// Woken when the shard should leave its event loop.
    pub stopped: Signal,
    /// Raised by [`Shard::flush_soon`]; the shard's deferred-flush task waits on it.
    pub flush_wanted: Signal,
    /// The segments of this shard's durable queues.
    pub store: RefCell<crate::store::shard_store::ShardStore>,
    /// The definitions log (the coordinator, shard 0, only).
    pub definitions: RefCell<Option<crate::store::definitions_writer::DefinitionsWriter>>,
    /// Store sizes and the disk-quota alarms.
    pub disk: Arc<crate::store::quota::DiskBoard>,
    /// What evicted entries point at instead of their message (`paging`); made at the
    /// first eviction.
    pub placeholder: std::cell::OnceCell<crate::model::message::LocalMessage>,
    /// No eviction pass before this.
    pub next_eviction: Cell<Instant>,
    /// Plain counters read by the operator interfaces (`observe`).
    pub counters: ShardCounters,
    /// Connection limits (shared counts, this shard's unauthenticated sockets) and
    /// login throttling.
    pub limits: crate::limits::ShardLimits,
}

/// Per-shard counters that must be cheap on the hot path: plain cells, read when asked.
#[derive(Default)]
pub struct ShardCounters {
    /// Bytes read from client sockets.
    pub bytes_read: Cell<u64>,
    /// Bytes written to client sockets.
    pub bytes_written: Cell<u64>,
}

impl ShardCounters {
    pub fn add(cell: &Cell<u64>, n: usize) {
        cell.set(cell.get().wrapping_add(n as u64));
    }
}

impl Shard {
    pub fn new(
        id: ShardId,
        config: Arc<Config>,
        peers: Peers,
        memory: Arc<MemoryBoard>,
        persistence: persist::Persistence,
        counts: Arc<crate::limits::ConnectionCounts>,
    ) -> Shard {
        let now = Instant::now();
        let shards = config.shards;
        let state = State {
            directory: Directory::new(&config.vhosts),
            queues: IdMap::default(),
            conns: Slab::new(),
            next_generation: 1,
            next_serial: u64::from(id) + 1,
            serial_step: shards as u64,
            wheel: TimerWheel::new(now, config.shard.tick, 512),
            dirty_queues: Vec::new(),
            dirty_conns: Vec::new(),
            rotation: 0,
            outbox: Outbox::new(shards),
            scratch: Vec::new(),
            queue_timers: IdMap::default(),
            internal_deletes: Vec::new(),
            next_queue_id: 1,
            name_seed: wall_nanos() ^ (u64::from(id) << 32),
            memory_alarm: false,
            disk_alarm: false,
            store_alarms: Vec::new(),
            held_confirms: Vec::new(),
            evicting: Vec::new(),
            paging_in: Vec::new(),
            slow_deleted: Vec::new(),
            watermark: Watermark::new(memory.high, memory.low),
            arrivals: arrivals::Arrivals::default(),
            dead_letters: Vec::new(),
        };
        Shard {
            id,
            shards,
            clock: Clock::starting_at(now),
            peers,
            memory,
            state: RefCell::new(state),
            stopping: Cell::new(false),
            stopped: Signal::new(),
            flush_wanted: Signal::new(),
            store: RefCell::new(persistence.store),
            definitions: RefCell::new(persistence.definitions),
            disk: persistence.disk,
            placeholder: std::cell::OnceCell::new(),
            next_eviction: Cell::new(now),
            counters: ShardCounters::default(),
            limits: crate::limits::ShardLimits::new(id, &config, counts),
            live: RefCell::new(Arc::clone(&config)),
            config,
        }
    }

    /// The configuration in force (the reloadable sections as last reloaded).
    pub fn live(&self) -> Arc<Config> {
        Arc::clone(&self.live.borrow())
    }

    /// Puts a reloaded configuration in force (`ShardMsg::Reload`); connections already
    /// open keep the grant they opened with.
    pub fn reload(&self, config: Arc<Config>) {
        *self.live.borrow_mut() = config;
    }

    /// Asks for a flush after every task already woken in this event-loop tick has run:
    /// a thousand writers completing in one tick then send their settlements and credit
    /// to other shards as one message each way, not one per writer.
    pub fn flush_soon(&self) {
        self.flush_wanted.notify();
    }

    /// Ends a turn: dispatches dirty queues, hands the broker's own queue deletions to
    /// the coordinator, sends deliveries and settlements to other shards, wakes writers.
    pub fn flush(self: &std::rc::Rc<Self>) {
        let now = self.clock.now();
        let mut st = self.state.borrow_mut();
        loop {
            if !st.dead_letters.is_empty() {
                st.run_dead_letters(self);
            }
            st.run_dispatch(self, now);
            // Dispatch may find expired messages to dead-letter.
            if st.dead_letters.is_empty() {
                break;
            }
        }
        for (vhost, name) in st.internal_deletes.drain(..) {
            control::spawn_internal_delete(self, vhost, name);
        }
        for shard in 0..self.shards {
            let sid = shard as ShardId;
            let deliver = std::mem::take(&mut st.outbox.deliver[shard]);
            if !deliver.is_empty() {
                self.peers.send(sid, ShardMsg::Deliver(deliver));
            }
            let settle = std::mem::take(&mut st.outbox.settle[shard]);
            if !settle.is_empty() {
                self.peers.send(sid, ShardMsg::Settle(settle));
            }
            let confirms = std::mem::take(&mut st.outbox.confirms[shard]);
            if !confirms.is_empty() {
                if sid == self.id {
                    st.confirms_done(self, confirms);
                } else {
                    self.peers.send(sid, ShardMsg::Confirms(confirms));
                }
            }
            let flow = std::mem::take(&mut st.outbox.flow[shard]);
            if !flow.is_empty() {
                if sid == self.id {
                    st.flow_notices(self, flow);
                } else {
                    self.peers.send(sid, ShardMsg::Flow(flow));
                }
            }
        }
        st.wake_writers();
        drop(st);
        self.commit_store();
    }

    /// Takes this turn's publish batches for other shards, each with the units of the
    /// destination's byte budget it needs. Only connection readers produce them, and only
    /// they await the bounded publish inboxes.
    pub fn take_publishes(&self) -> Vec<(ShardId, PublishBatch)> {
        let mut st = self.state.borrow_mut();
        let mut out = Vec::new();
        for (shard, batch) in st.outbox.publish.iter_mut().enumerate() {
            if !batch.is_empty() {
                let routed = std::mem::take(batch);
                let bytes: u64 = routed.iter().map(|r| r.msg.memory_size()).sum();
                out.push((
                    shard as ShardId,
                    PublishBatch {
                        from: self.id,
                        routed,
                        permits: self.peers.permits_for(bytes),
                    },
                ));
            }
        }
        out
    }

    /// Sends publish batches, waiting for each destination's byte budget and for room in
    /// its bounded inbox. While this waits, the publisher's socket is not read: that is
    /// the backpressure.
    pub async fn send_publishes(&self, batches: Vec<(ShardId, PublishBatch)>) {
        for (shard, batch) in batches {
            let Some(tx) = self.peers.publish.get(usize::from(shard)) else {
                continue;
            };
            if let Some(budget) = self.peers.publish_budget.get(usize::from(shard)) {
                match budget.acquire_many(batch.permits).await {
                    // The destination gives the units back once it has the messages.
                    Ok(permit) => permit.forget(),
                    Err(_) => return,
                }
            }
            if let Err(e) = tx.send(ShardMsg::Publish(batch)).await {
                if let ShardMsg::Publish(batch) = e.0 {
                    self.peers.release_budget(shard, batch.permits);
                }
            }
        }
    }
}

impl State {
    /// Registers a new connection and returns its id.
    pub fn add_conn(&mut self, make: impl FnOnce(ConnId, u64) -> Conn) -> ConnId {
        let generation = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1).max(1);
        let serial = self.next_serial;
        self.next_serial += self.serial_step;
        let entry = self.conns.vacant_entry();
        let id = ConnId {
            slot: entry.key() as u32,
            generation,
        };
        entry.insert(make(id, serial));
        id
    }

    /// The connection with this id, if it is still the same connection.
    pub fn conn_mut(&mut self, id: ConnId) -> Option<&mut Conn> {
        self.conns
            .get_mut(id.slot as usize)
            .filter(|c| c.id.generation == id.generation)
    }

    pub fn conn(&self, id: ConnId) -> Option<&Conn> {
        self.conns
            .get(id.slot as usize)
            .filter(|c| c.id.generation == id.generation)
    }

    /// Marks a queue as having something to dispatch this turn (O(1): the queue carries
    /// a flag, so a turn with many dirty queues does not scan the list).
    pub fn mark_dirty(&mut self, queue: QueueId) {
        if let Some(q) = self.queues.get_mut(&queue) {
            if !q.in_dirty_list {
                q.in_dirty_list = true;
                self.dirty_queues.push(queue);
            }
        }
    }

    /// Marks a connection's writer to be woken at the end of the turn (O(1): the
    /// connection carries a flag).
    pub fn mark_writer(&mut self, id: ConnId) {
        if let Some(c) = self.conn_mut(id) {
            if !c.writer_marked {
                c.writer_marked = true;
                self.dirty_conns.push(id);
            }
        }
    }

    /// A starting point in `0..len` that moves on every call, spread over the range
    /// (Fibonacci hashing of a counter), for rotating work lists.
    pub fn next_rotation(&mut self, len: usize) -> usize {
        self.rotation = self.rotation.wrapping_add(1);
        if len < 2 {
            return 0;
        }
        let spread = self.rotation.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((spread >> 32) as usize) % len
    }

    /// Wakes the writers marked this turn, starting at a rotating point so that no
    /// connection's writes always go first.
    fn wake_writers(&mut self) {
        let mut dirty = std::mem::take(&mut self.dirty_conns);
        let start = self.next_rotation(dirty.len());
        dirty.rotate_left(start);
        for id in dirty.drain(..) {
            if let Some(conn) = self.conn_mut(id) {
                conn.writer_marked = false;
                conn.writer.notify();
            }
        }
        self.dirty_conns = dirty;
    }

    /// Gives back the room of per-turn lists that grew in a burst (called by
    /// `reclaim`, between turns, when they are empty).
    pub fn release_spare_lists(&mut self) {
        if self.dirty_queues.is_empty() && self.dirty_queues.capacity() > 64 {
            self.dirty_queues = Vec::new();
        }
        if self.dirty_conns.is_empty() && self.dirty_conns.capacity() > 64 {
            self.dirty_conns = Vec::new();
        }
        if self.scratch.is_empty() && self.scratch.capacity() > 64 {
            self.scratch = Vec::new();
        }
    }

    /// A seed for server-generated names, different on every call.
    pub fn next_name_seed(&mut self) -> u64 {
        self.name_seed = self
            .name_seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.name_seed ^ wall_nanos()
    }
}

fn wall_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::*;
    use crate::queue::{QueueLimits, QueueSettings};

    fn shard() -> Shard {
        let config = Arc::new(Config::default());
        let (peers, _inboxes) = inbox::mesh(1, 4, 1 << 20);
        let memory = Arc::new(MemoryBoard::new(1, u64::MAX - 1, u64::MAX));
        let persistence = persist::Persistence::empty(&std::env::temp_dir(), 1);
        let counts = Arc::new(crate::limits::ConnectionCounts::new(
            &config.limits.resources,
        ));
        Shard::new(0, config, peers, memory, persistence, counts)
    }

    fn conn(st: &mut State, signal: &Rc<Signal>) -> ConnId {
        let now = Instant::now();
        st.add_conn(|id, serial| {
            Conn::new(
                id,
                serial,
                "127.0.0.1:1".parse().expect("address"),
                now,
                512,
                131_072,
                Rc::clone(signal),
            )
        })
    }

    #[test]
    fn a_writer_marked_many_times_in_a_turn_is_listed_once() {
        let shard = shard();
        let mut st = shard.state.borrow_mut();
        let signals: Vec<Rc<Signal>> = (0..1000).map(|_| Rc::new(Signal::new())).collect();
        let ids: Vec<ConnId> = signals.iter().map(|s| conn(&mut st, s)).collect();
        for _ in 0..5 {
            for id in &ids {
                st.mark_writer(*id);
            }
        }
        assert_eq!(st.dirty_conns.len(), 1000);
        st.wake_writers();
        assert!(st.dirty_conns.is_empty());
        assert!(st.conns.iter().all(|(_, c)| !c.writer_marked));
        // Marked again in the next turn; a connection gone meanwhile is skipped.
        st.mark_writer(ids[0]);
        st.mark_writer(ids[1]);
        st.conns.remove(ids[1].slot as usize);
        st.mark_writer(ids[1]);
        assert_eq!(st.dirty_conns.len(), 2);
        st.wake_writers();
        assert!(st.dirty_conns.is_empty());
    }

    #[test]
    fn a_queue_marked_dirty_many_times_is_listed_once() {
        let shard = shard();
        let mut st = shard.state.borrow_mut();
        let now = Instant::now();
        for i in 1..=100 {
            let q = Queue::new(
                QueueId(i),
                0,
                "/".into(),
                format!("q{i}").into(),
                QueueSettings {
                    durable: false,
                    exclusive: false,
                    auto_delete: false,
                    arguments: Default::default(),
                    message_ttl: None,
                    expires: None,
                    max_priority: None,
                    single_active_consumer: false,
                    dead_letter: None,
                    stored: false,
                },
                QueueLimits::new(std::time::Duration::from_secs(5)),
                now,
            );
            st.queues.insert(QueueId(i), q);
        }
        for _ in 0..10 {
            for i in 1..=100 {
                st.mark_dirty(QueueId(i));
            }
        }
        st.mark_dirty(QueueId(999));
        assert_eq!(st.dirty_queues.len(), 100);
        assert!(st.queues.values().all(|q| q.in_dirty_list));
    }

    #[test]
    fn rotation_starts_anywhere_in_the_list() {
        let shard = shard();
        let mut st = shard.state.borrow_mut();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let start = st.next_rotation(10);
            assert!(start < 10);
            seen.insert(start);
        }
        assert_eq!(seen.len(), 10, "every start is used: {seen:?}");
        assert_eq!(st.next_rotation(1), 0);
        assert_eq!(st.next_rotation(0), 0);
    }
}

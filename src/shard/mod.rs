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

pub mod binding_watch;
pub mod cgroup;
pub mod conns;
pub mod control;
pub mod home;
pub mod housekeeping;
pub mod inbox;
pub mod mailbox;
pub mod memory;
pub mod message_sizes;
pub mod messages;
pub mod observe;
pub mod outbox;
pub mod placement;
pub mod reader_park;
pub mod reclaim;
pub mod turn;

pub use outbox::Outbox;

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::Instant;

use crate::config::Config;
use crate::model::ids::{ConnId, QueueId, ShardId};
use crate::model::routing::Directory;
use crate::session::connection::Conn;
use crate::session::signal::Signal;
use crate::timer::clock::Clock;
use crate::timer::wheel::TimerWheel;

use crate::policy::watermark::Watermark;

use inbox::{Peers, PublishBatch, ShardMsg};
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

/// What both sides of a shard use: the directory replica (read on the hot path, changed
/// only by `control`), the timer wheel, the outbox to other shards, and the coordinator's
/// own bookkeeping.
pub struct Common {
    pub directory: Directory,
    pub wheel: TimerWheel<TimerKey>,
    pub outbox: Outbox,
    /// Next queue id; only the coordinator (shard 0) allocates.
    pub next_queue_id: u64,
    /// The watermark's hysteresis (evaluated by the coordinating shard only).
    pub watermark: Watermark,
}

/// Everything mutable on a shard, behind one `RefCell`: the connection side, the queue
/// side, and what both use. Each side's fields are private to its room; a call that
/// needs a side takes its view ([`State::conn_side`], [`State::queue_side`]).
pub struct State {
    pub conns: conns::Connections,
    pub home: home::HomeQueues,
    pub common: Common,
}

/// Deliveries to consumers on this shard gathered from dirty queues before they are
/// written (bounds the list a round of dispatch holds; a queue adds at most
/// `shard.dispatch_budget` to it).
const DELIVER_BATCH: usize = 1024;

/// How far ahead of the write pass a connection is hinted, the queue it pulls and its
/// channel, and that queue's head entry and consumer (each a step after the lines it
/// reads to find the next).
const PREFETCH_WRITE_AHEAD: usize = 8;
const PREFETCH_PULL_AHEAD: usize = 4;
const PREFETCH_DISPATCH_AHEAD: usize = 2;
/// What each queue a message is routed to on another shard costs that shard's publish
/// budget: the entry it will make there and its id in the list sent with the message.
const ROUTED_QUEUE_BYTES: u64 =
    crate::queue::entry::ENTRY_BYTES.unsigned_abs() + std::mem::size_of::<QueueId>() as u64;

impl State {
    /// The connection side, with the queue side it may call.
    pub fn conn_side(&mut self) -> conns::ConnSide<'_> {
        conns::ConnSide::new(&mut self.conns, &mut self.home, &mut self.common)
    }

    /// The connection with this id, if it is still the same connection.
    pub fn conn(&self, id: ConnId) -> Option<&Conn> {
        self.conns.get(id)
    }

    pub fn conn_mut(&mut self, id: ConnId) -> Option<&mut Conn> {
        self.conns.get_mut(id)
    }

    /// The queue side.
    pub fn queue_side(&mut self) -> home::QueueSide<'_> {
        home::QueueSide::new(&mut self.home, &mut self.common)
    }

    /// Dispatches every dirty queue as far as consumer credit allows, one queue at a
    /// time: the queue side adds each queue's deliveries for local consumers to a
    /// `Vec<Delivery>`, and the connection side writes them (and settles credit back,
    /// which may make a queue dirty again for the next round) once the list holds
    /// [`DELIVER_BATCH`] or the round is over, so that a round of many queues with a
    /// delivery or two each (a wide fan-out) pays the hand-over once, not per queue.
    /// Each round starts at a different queue.
    fn dispatch(&mut self, shard: &Shard, now: Instant) {
        let mut local = self.home.take_deliveries();
        while self.home.has_dirty() {
            let round = self.home.take_round();
            for (i, &queue) in round.iter().enumerate() {
                self.home.prefetch_ahead(&round, i, |&q| Some(q));
                self.queue_side()
                    .dispatch_queue(shard, queue, now, &mut local);
                if local.len() >= DELIVER_BATCH {
                    self.conn_side().deliver_local(shard, &mut local);
                }
            }
            if !local.is_empty() {
                self.conn_side().deliver_local(shard, &mut local);
            }
        }
        self.home.give_back_deliveries(local);
    }

    /// Hands the queues that wait for their consumer's connection's write to those
    /// connections (each is listed for the write pass); one whose connection is gone
    /// is dispatched this turn instead.
    fn hand_over_pulls(&mut self) {
        if !self.home.has_pulls() {
            return;
        }
        let mut pulls = self.home.take_pulls();
        for &(conn, queue) in &pulls {
            if !self.conns.request_pull(conn, queue) {
                self.home.dispatch_this_turn(queue);
            }
        }
        pulls.clear();
        self.home.give_back_pulls(pulls);
    }

    /// The connection the write pass writes next, its waiting queues dispatched first
    /// ([`State::pull`]), and whether any were; `None` when the list is empty or its
    /// next connection is one of `batch` (listed again by a pull since it was taken: a
    /// connection is written once per batch, its bytes offered once).
    pub fn next_write(
        &mut self,
        shard: &Shard,
        now: Instant,
        batch: &[ConnId],
    ) -> Option<(ConnId, bool)> {
        self.prefetch_pulls_ahead();
        let conn = self.conns.peek_write()?;
        if batch.contains(&conn) {
            return None;
        }
        let pulled = self.pull(shard, conn, now);
        // Still at the front: a pull lists other connections behind it, not before.
        let next = self.conns.next_write()?;
        if self.conns.has_pulls(next) {
            // A queue with more than a dispatch's worth asked again: later in the pass.
            self.conns.mark_writer(next);
        }
        Some((next, pulled))
    }

    /// At thousands of subscribers every connection the write pass takes, its queue and
    /// its channel are cold: a long list hints the connection 8 places ahead; 4 ahead
    /// (its lines then loaded), the queue it pulls and its channel; 2 ahead, the queue's
    /// head entry and consumer slot (`perf annotate` put half of `Queue::dispatch`'s
    /// samples in the write pass on those two loads).
    fn prefetch_pulls_ahead(&self) {
        let (conn, len) = self.conns.write_ahead(PREFETCH_WRITE_AHEAD);
        if len < home::PREFETCH_FROM {
            return;
        }
        if let Some(conn) = conn {
            self.conns.prefetch(conn);
        }
        let (conn, _) = self.conns.write_ahead(PREFETCH_PULL_AHEAD);
        if let Some(queue) = conn.and_then(|c| self.conns.prefetch_pull(c)) {
            self.home.prefetch(queue);
        }
        let (conn, _) = self.conns.write_ahead(PREFETCH_DISPATCH_AHEAD);
        if let Some(queue) = conn.and_then(|c| self.conns.first_pull(c)) {
            self.home.prefetch_dispatch(queue);
        }
    }

    /// Dispatches the queues that wait for connection `conn`'s write (their only
    /// consumer is a no-ack one there) into its outbound buffer, as a turn's dispatch
    /// would, but once per write instead of once per turn: a subscriber the write pass
    /// reaches every few turns gets the messages of all of them in one visit of its
    /// queue, connection and channel (issue 23). Each queue's plain head run goes over
    /// as one run of messages ([`home::QueueSide::pull_queue`], then
    /// [`conns::ConnSide::deliver_pulled`]), not a record per message; what it stopped
    /// at goes the general way, after it. Returns whether there were any.
    fn pull(&mut self, shard: &Shard, conn: ConnId, now: Instant) -> bool {
        let queues = self.conns.take_pulls(conn);
        if queues.is_empty() {
            return false;
        }
        let mut local = self.home.take_deliveries();
        let mut msgs = self.home.take_pulled();
        for &queue in &queues {
            let run = self
                .queue_side()
                .pull_queue(shard, queue, now, &mut msgs, &mut local);
            if let Some((queue, run)) = run {
                self.conn_side()
                    .deliver_pulled(shard, queue, run, &mut msgs);
            }
        }
        self.home.give_back_pulled(msgs);
        if !local.is_empty() {
            self.conn_side().deliver_local(shard, &mut local);
        }
        self.home.give_back_deliveries(local);
        // A queue with more than one dispatch's worth asks again.
        self.hand_over_pulls();
        true
    }

    /// Gives what the queue side has for this shard's connections to the connection side.
    fn hand_to_connections(&mut self, shard: &Shard) {
        let notices = self.home.take_for_connections();
        if notices.is_empty() {
            return;
        }
        let mut side = self.conn_side();
        for target in notices.consumers_gone {
            side.consumer_gone(target);
        }
        for (conn, target, queue) in notices.slow_closes {
            side.slow_consumer_close(shard, conn, target, queue);
        }
    }
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
    /// Raised by [`Shard::flush`] when connections have bytes to write; the shard's
    /// write pass (`net::write_pass`) waits on it.
    pub write_wanted: Signal,
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
    /// The credential of this broker's own federation links (`None` without
    /// federation): accepted at login from loopback, with every permission.
    pub link_credential: Option<Arc<crate::auth::local_link::LinkCredential>>,
    /// The coordinator's watcher of federated exchanges (`shard::binding_watch`).
    pub binding_watch: binding_watch::BindingWatch,
    /// Sockets of idle connections whose reader task ended (`net::park`,
    /// `shard::reader_park`).
    pub parked_readers: reader_park::ParkSet,
    /// Whether the task that hands the outbox's queue deletions to the coordinator runs
    /// (`control::own_deletes`).
    pub own_deletes_running: Cell<bool>,
    /// Queue entries the reader's turn now being handled has asked for by routing
    /// publishes (here and on other shards); past [`turn::TURN_FANOUT_MAX`] the turn ends
    /// early ([`turn::Step::Yield`]).
    pub turn_fanout: Cell<usize>,
}

/// Per-shard counters that must be cheap on the hot path: plain cells, read when asked.
#[derive(Default)]
pub struct ShardCounters {
    /// Bytes read from client sockets.
    pub bytes_read: Cell<u64>,
    /// Bytes written to client sockets.
    pub bytes_written: Cell<u64>,
    /// Connections that reached `connection.open-ok` (RabbitMQ's
    /// `connections_opened_total`); one add per connection.
    pub connections_opened: Cell<u64>,
    /// Of those, the ones released since (`connections_closed_total`).
    pub connections_closed: Cell<u64>,
    /// Channels opened (`channels_opened_total`; the closed ones are those opened and no
    /// longer open).
    pub channels_opened: Cell<u64>,
    /// Logins accepted at `connection.start-ok` (`auth_attempts_succeeded_total`).
    pub logins_succeeded: Cell<u64>,
    /// Logins refused: a wrong password, a loopback-only user from elsewhere
    /// (`auth_attempts_failed_total`).
    pub logins_failed: Cell<u64>,
    /// Published body sizes (`rabbitmq_message_size_bytes`): one add per publish.
    pub message_sizes: message_sizes::MessageSizes,
    /// The coordinator's (shard 0's) queue churn: `queue.declare`s it answered, the
    /// queues they created, and the queues deleted (by a client, auto-delete, expiry,
    /// a vhost's deletion or a slow-consumer verdict). Zero on the other shards.
    pub queues_declared: Cell<u64>,
    pub queues_created: Cell<u64>,
    pub queues_deleted: Cell<u64>,
}

impl ShardCounters {
    pub fn add(cell: &Cell<u64>, n: usize) {
        cell.set(cell.get().wrapping_add(n as u64));
    }

    /// One more of a connection or login event (never called per message).
    pub fn bump(cell: &Cell<u64>) {
        cell.set(cell.get().wrapping_add(1));
    }
}

impl Shard {
    pub fn new(
        id: ShardId,
        config: Arc<Config>,
        peers: Peers,
        memory: Arc<MemoryBoard>,
        persistence: home::persist::Persistence,
        counts: Arc<crate::limits::ConnectionCounts>,
        link_credential: Option<Arc<crate::auth::local_link::LinkCredential>>,
    ) -> Shard {
        let now = Instant::now();
        let shards = config.shards;
        let state = State {
            conns: conns::Connections::new(id, shards),
            home: home::HomeQueues::default(),
            common: Common {
                directory: Directory::new(&config.vhosts),
                wheel: TimerWheel::new(now, config.shard.tick, 512),
                outbox: Outbox::new(shards),
                next_queue_id: 1,
                watermark: Watermark::new(memory.high, memory.low),
            },
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
            turn_fanout: Cell::new(0),
            write_wanted: Signal::new(),
            store: RefCell::new(persistence.store),
            definitions: RefCell::new(persistence.definitions),
            disk: persistence.disk,
            placeholder: std::cell::OnceCell::new(),
            next_eviction: Cell::new(now),
            counters: ShardCounters::default(),
            limits: crate::limits::ShardLimits::new(id, &config, counts),
            link_credential,
            binding_watch: binding_watch::BindingWatch::default(),
            parked_readers: reader_park::ParkSet::new(),
            own_deletes_running: Cell::new(false),
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

    /// Ends a turn: dispatches dirty queues, starts the task that hands the broker's own
    /// queue deletions to the coordinator (`control::own_deletes`), sends deliveries and
    /// settlements to other shards, and wakes the write pass if connections have bytes
    /// to write.
    pub fn flush(self: &std::rc::Rc<Self>) {
        let now = self.clock.now();
        let mut st = self.state.borrow_mut();
        loop {
            st.hand_to_connections(self);
            if st.home.has_dead_letters() {
                st.queue_side().run_dead_letters(self);
            }
            st.dispatch(self, now);
            st.hand_to_connections(self);
            st.hand_over_pulls();
            // Dispatch may find expired messages to dead-letter.
            if !st.home.has_dead_letters() && !st.home.has_dirty() {
                break;
            }
        }
        if !st.common.outbox.queue_deletes.is_empty() {
            control::start_own_deletes(self);
        }
        for shard in 0..self.shards {
            let sid = shard as ShardId;
            let outbox = &mut st.common.outbox;
            let deliver = std::mem::take(&mut outbox.deliver[shard]);
            if !deliver.is_empty() {
                self.peers.send(sid, ShardMsg::Deliver(deliver));
            }
            let settle = std::mem::take(&mut outbox.settle[shard]);
            if !settle.is_empty() {
                self.peers.send(sid, ShardMsg::Settle(settle));
            }
            // Returned replies before the confirms: a mandatory publish's basic.return
            // precedes its basic.ack.
            let returns = std::mem::take(&mut outbox.returns[shard]);
            if !returns.is_empty() {
                if sid == self.id {
                    st.conn_side().replies_returned(returns);
                } else {
                    self.peers.send(sid, ShardMsg::RepliesReturned(returns));
                }
            }
            let outbox = &mut st.common.outbox;
            let confirms = std::mem::take(&mut outbox.confirms[shard]);
            let flow = std::mem::take(&mut outbox.flow[shard]);
            if !confirms.is_empty() {
                if sid == self.id {
                    st.conn_side().confirms_done(self, confirms);
                } else {
                    self.peers.send(sid, ShardMsg::Confirms(confirms));
                }
            }
            if !flow.is_empty() {
                if sid == self.id {
                    st.conn_side().flow_notices(self, flow);
                } else {
                    self.peers.send(sid, ShardMsg::Flow(flow));
                }
            }
        }
        let writes = st.conns.has_writes();
        drop(st);
        if writes {
            self.write_wanted.notify();
        }
        home::persist::commit_store(self);
        home::stream_io::start(self);
    }

    /// Takes this turn's publish batches for other shards, each with the units of the
    /// destination's byte budget it needs. Only connection readers produce them, and only
    /// they await the bounded publish inboxes.
    pub fn take_publishes(&self) -> Vec<(ShardId, PublishBatch)> {
        let mut st = self.state.borrow_mut();
        let mut out = Vec::new();
        let outbox = &mut st.common.outbox;
        for (shard, (batch, replies)) in outbox
            .publish
            .iter_mut()
            .zip(outbox.replies.iter_mut())
            .enumerate()
        {
            if !batch.is_empty() || !replies.is_empty() {
                let routed = std::mem::take(batch);
                let replies = std::mem::take(replies);
                // A routed message costs the destination its bytes and an entry per
                // queue (the list naming them travels with it): a small message to many
                // queues there is mostly the latter.
                let bytes: u64 = routed
                    .iter()
                    .map(|r| r.msg.memory_size() + r.queues.len() as u64 * ROUTED_QUEUE_BYTES)
                    .sum::<u64>()
                    + replies.iter().map(|r| r.msg.memory_size()).sum::<u64>();
                out.push((
                    shard as ShardId,
                    PublishBatch {
                        from: self.id,
                        routed,
                        replies,
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

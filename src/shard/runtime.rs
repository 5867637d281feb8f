//! Owns: a shard's OS thread — core pinning, the tokio-uring runtime, and the shard's
//! long-lived tasks: accept loops, the inbox loop (messages from other shards) and the
//! housekeeping loop that advances the clock and the timer wheel.
//!
//! Does not: contain business logic; it calls into the shard.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::model::ids::ShardId;
use crate::ops::event::OpsEvent;
use crate::shard::inbox::{Inbox, Peers, ShardMsg};
use crate::shard::memory::MemoryBoard;
use crate::shard::persist::Persistence;
use crate::shard::reclaim::Reclaimer;
use crate::shard::{control, Shard, TimerKey};

/// Inbox messages a shard handles in one turn before it flushes and lets its sockets
/// run.
const INBOX_BATCH: usize = 64;

/// Work (messages published, delivered or settled) a shard takes from its inboxes in
/// one turn; a turn that reaches it ends early, so a burst from other shards delays the
/// shard's own sockets by a bounded amount.
const INBOX_WORK_BUDGET: usize = 4096;

/// Everything a shard thread needs.
pub struct ShardSeed {
    pub id: ShardId,
    pub config: Arc<Config>,
    pub peers: Peers,
    pub memory: Arc<MemoryBoard>,
    pub inbox: Inbox,
    pub listeners: Vec<std::net::TcpListener>,
    /// TLS listeners and their settings (`[tls]`), if any.
    pub tls_listeners: Vec<std::net::TcpListener>,
    pub tls: Option<Arc<crate::net::tls::TlsListener>>,
    pub core: Option<usize>,
    /// Told once the shard accepts connections.
    pub ready: std::sync::mpsc::Sender<ShardId>,
    /// What the store recovered for this shard, and what every shard applies.
    pub recovered: RecoveredSeed,
    /// The connection counts every shard shares (`crate::limits`).
    pub limits: Arc<crate::limits::ConnectionCounts>,
}

/// The store's part of a shard's start.
pub struct RecoveredSeed {
    /// The durable definitions, as directory changes (shared by all shards).
    pub changes: Arc<Vec<crate::model::routing::DirectoryChange>>,
    pub shard: crate::store::RecoveredShard,
    pub next_queue_id: u64,
    pub definitions_bytes: u64,
    pub disk: Arc<crate::store::quota::DiskBoard>,
}

/// Pins the calling thread to `core`.
pub fn pin_to_core(core: usize) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write inside it, and
    // sched_setaffinity reads `size_of::<cpu_set_t>()` bytes from it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(core, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The cores this process may run on.
pub fn available_cores() -> Vec<usize> {
    // SAFETY: as above; sched_getaffinity writes at most size_of::<cpu_set_t>() bytes.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Runs a shard on the current thread until it is told to stop.
pub fn run(seed: ShardSeed) -> std::io::Result<()> {
    if let Some(core) = seed.core {
        pin_to_core(core)?;
    }
    let ShardSeed {
        id,
        config,
        peers,
        memory,
        inbox,
        listeners,
        tls_listeners,
        tls,
        core,
        ready,
        recovered,
        limits,
    } = seed;
    tokio_uring::start(async move {
        let RecoveredSeed {
            changes,
            shard: mut recovered_shard,
            next_queue_id,
            definitions_bytes,
            disk,
        } = recovered;
        let persistence =
            Persistence::recovered(&config, id, &mut recovered_shard, definitions_bytes, disk);
        let shard = Rc::new(Shard::new(id, config, peers, memory, persistence, limits));
        crate::shard::persist::restore(
            &mut shard.state.borrow_mut(),
            &shard,
            &changes,
            recovered_shard,
            next_queue_id,
        );
        drop(changes);
        for listener in listeners {
            tokio_uring::spawn(crate::net::listener::accept_loop(
                Rc::clone(&shard),
                listener,
                None,
            ));
        }
        if let Some(tls) = &tls {
            for listener in tls_listeners {
                tokio_uring::spawn(crate::net::listener::accept_loop(
                    Rc::clone(&shard),
                    listener,
                    Some(Arc::clone(tls)),
                ));
            }
        }
        tokio_uring::spawn(inbox_loop(Rc::clone(&shard), inbox));
        tokio_uring::spawn(housekeeping_loop(Rc::clone(&shard)));
        tokio_uring::spawn(deferred_flush_loop(Rc::clone(&shard)));
        OpsEvent::ShardStarted { shard: id, core }.emit();
        let _ = ready.send(id);
        shard.stopped.wait().await;
    });
    Ok(())
}

async fn inbox_loop(shard: Rc<Shard>, mut inbox: Inbox) {
    loop {
        let first = tokio::select! {
            biased;
            m = inbox.control.recv() => m,
            m = inbox.publish.recv() => m,
        };
        let Some(first) = first else {
            return;
        };
        shard.clock.refresh();
        let mut work = 0;
        let mut next = Some(first);
        for _ in 0..INBOX_BATCH {
            let Some(msg) = next.take() else {
                break;
            };
            if needs_earlier_publishes(&msg) {
                take_earlier_publishes(&shard, &mut inbox).await;
            }
            work += work_of(&msg);
            on_message(&shard, msg);
            if work >= INBOX_WORK_BUDGET {
                break;
            }
            next = inbox
                .control
                .try_recv()
                .ok()
                .or_else(|| inbox.publish.try_recv().ok());
        }
        if let Some(msg) = next {
            // Taken but over budget: it leads the next turn.
            shard.flush();
            tokio::task::yield_now().await;
            shard.clock.refresh();
            if needs_earlier_publishes(&msg) {
                take_earlier_publishes(&shard, &mut inbox).await;
            }
            on_message(&shard, msg);
        }
        shard.flush();
    }
}

/// A request to a queue (or a directory change) must see every publish its sender sent
/// before it (publish then `basic.get`, a confirmed publish then a count).
fn needs_earlier_publishes(msg: &ShardMsg) -> bool {
    matches!(
        msg,
        ShardMsg::Queue(..) | ShardMsg::Apply(..) | ShardMsg::Control(..) | ShardMsg::Observe(..)
    )
}

/// Takes the publishes that were in the publish inbox when a request arrived (its
/// sender finished sending them first), in turns of at most [`INBOX_WORK_BUDGET`], with
/// a flush and a yield to the shard's sockets between turns.
async fn take_earlier_publishes(shard: &Rc<Shard>, inbox: &mut Inbox) {
    let mut owed = inbox.publish.len();
    while owed > 0 {
        let mut work = 0;
        while owed > 0 && work < INBOX_WORK_BUDGET {
            let Ok(publish) = inbox.publish.try_recv() else {
                return;
            };
            owed -= 1;
            work += work_of(&publish);
            on_message(shard, publish);
        }
        if owed > 0 {
            shard.flush();
            tokio::task::yield_now().await;
            shard.clock.refresh();
        }
    }
}

/// How much work a message is, for the turn's budget.
fn work_of(msg: &ShardMsg) -> usize {
    match msg {
        ShardMsg::Publish(batch) => batch.routed.len(),
        ShardMsg::DeadLetter(routed) => routed.len(),
        ShardMsg::Deliver(batch) => batch.len(),
        ShardMsg::Settle(batch) => batch.len(),
        ShardMsg::Confirms(done) => done.len(),
        _ => 1,
    }
    .max(1)
}

fn on_message(shard: &Rc<Shard>, msg: ShardMsg) {
    let now = shard.clock.now();
    match msg {
        ShardMsg::Publish(batch) => {
            let mut st = shard.state.borrow_mut();
            for routed in batch.routed {
                st.queue_side().take_routed(shard, routed, now);
            }
            shard.peers.release_budget(shard.id, batch.permits);
        }
        ShardMsg::DeadLetter(routed) => {
            let mut st = shard.state.borrow_mut();
            for r in routed {
                st.queue_side().take_routed(shard, r, now);
            }
        }
        ShardMsg::Confirms(done) => {
            shard
                .state
                .borrow_mut()
                .conn_side()
                .confirms_done(shard, done);
        }
        ShardMsg::Flow(notices) => {
            shard
                .state
                .borrow_mut()
                .conn_side()
                .flow_notices(shard, notices);
        }
        ShardMsg::SlowConsumer {
            conn,
            target,
            queue,
        } => {
            shard
                .state
                .borrow_mut()
                .conn_side()
                .slow_consumer_close(shard, conn, target, queue);
        }
        ShardMsg::Deliver(mut batch) => {
            shard
                .state
                .borrow_mut()
                .conn_side()
                .deliver_local(shard, &mut batch);
        }
        ShardMsg::Settle(batch) => {
            let mut st = shard.state.borrow_mut();
            for s in batch {
                st.queue_side().settle(shard, s);
            }
        }
        ShardMsg::Apply(changes, ack) => {
            let mut st = shard.state.borrow_mut();
            for change in changes.iter() {
                control::apply_change(&mut st, shard, change, now);
            }
            let _ = ack.send(());
        }
        ShardMsg::Control(req, reply) => {
            let shard = Rc::clone(shard);
            tokio_uring::spawn(async move {
                let answer = control::coordinate(&shard, req).await;
                let _ = reply.send(answer);
                shard.flush();
            });
        }
        ShardMsg::Queue(req, reply) => {
            let answer = shard
                .state
                .borrow_mut()
                .queue_side()
                .queue_request(shard, req);
            let _ = reply.send(answer);
        }
        ShardMsg::Observe(req, reply) => {
            let _ = reply.send(crate::shard::observe::answer(shard, req));
        }
        ShardMsg::ConsumerGone(target) => {
            shard.state.borrow_mut().conn_side().consumer_gone(target);
        }
        ShardMsg::Shutdown => {
            let shard = Rc::clone(shard);
            tokio_uring::spawn(shutdown(shard));
        }
        ShardMsg::Reload(config, ack) => {
            shard.reload(config);
            let _ = ack.send(());
        }
    }
}

/// Runs the flushes asked for with [`Shard::flush_soon`], once per wake-up: the task is
/// queued behind the tasks woken before it, so their work is flushed together.
async fn deferred_flush_loop(shard: Rc<Shard>) {
    loop {
        shard.flush_wanted.wait().await;
        shard.clock.refresh();
        shard.flush();
    }
}

/// Logs the memory ledger (BRK-1010) every report interval when it changed.
fn report_memory(
    shard: &Shard,
    last: &mut Option<(std::time::Instant, crate::model::ledger::LedgerSnapshot)>,
    now: std::time::Instant,
) {
    let every = shard.config.policies.memory.report_interval;
    if every.is_zero() {
        return;
    }
    if last.is_some_and(|(at, _)| now.saturating_duration_since(at) < every) {
        return;
    }
    let sum = shard.memory.sum();
    if last.is_none_or(|(_, seen)| seen != sum) {
        OpsEvent::MemoryReport {
            messages: sum.messages,
            entries: sum.entries,
            outbound: sum.outbound,
            partial: sum.partial,
        }
        .emit();
    }
    *last = Some((now, sum));
}

async fn housekeeping_loop(shard: Rc<Shard>) {
    let tick = shard.config.shard.tick;
    let mut expired = Vec::new();
    let mut last_report = None;
    let mut reclaim = Reclaimer::new(
        shard.config.policies.memory.return_interval,
        shard.clock.now(),
    );
    loop {
        tokio::time::sleep(tick).await;
        shard.clock.refresh();
        let now = shard.clock.now();
        {
            let mut st = shard.state.borrow_mut();
            st.common.wheel.advance(now, &mut expired);
            for key in expired.drain(..) {
                match key {
                    TimerKey::Heartbeat(conn) => st.conn_side().heartbeat_tick(&shard, conn, now),
                    TimerKey::Handshake(conn) => st.conn_side().handshake_deadline(&shard, conn),
                    TimerKey::CloseTimeout(conn) => st.conn_side().close_timeout(conn),
                    TimerKey::QueueHousekeeping(queue) => {
                        st.queue_side().queue_housekeeping(&shard, queue, now)
                    }
                    TimerKey::QueuePolicy(queue) => st.queue_side().policy_tick(&shard, queue, now),
                }
            }
            shard.memory.post(usize::from(shard.id));
            if shard.id == 0 {
                let st = &mut *st;
                shard.memory.evaluate(&mut st.common.watermark);
                report_memory(&shard, &mut last_report, now);
            }
            let alarm = shard.memory.alarm();
            if alarm != st.conns.memory_alarm() {
                st.conn_side().apply_memory_alarm(&shard, alarm);
            }
            reclaim.tick(&mut st, now);
        }
        shard.store_tick();
        shard.flush();
    }
}

/// How long shutdown waits, in all, for clients to answer the 320 close with close-ok
/// (their sockets are read, and what they send discarded, meanwhile — held ones too),
/// before the remaining connections are cut off.
const SHUTDOWN_CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Closes every connection with 320 and waits (at most [`SHUTDOWN_CLOSE_WAIT`]) for
/// each client's close-ok, reading and discarding what they send so that no socket is
/// closed with unread input (a reset that can destroy the close before the client
/// reads it); then cuts off the rest, lets writers flush (up to a second), and stops.
async fn shutdown(shard: Rc<Shard>) {
    shard.stopping.set(true);
    let deadline = shard.clock.now() + SHUTDOWN_CLOSE_WAIT;
    {
        let mut st = shard.state.borrow_mut();
        let ids = st.conns.ids();
        for id in ids {
            st.conn_side().close_for_shutdown(&shard, id);
        }
    }
    shard.flush();
    while !shard.state.borrow().conns.is_empty() && shard.clock.now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
        shard.clock.refresh();
    }
    {
        let mut st = shard.state.borrow_mut();
        let ids = st.conns.ids();
        for id in ids {
            st.conn_side().force_close(&shard, id, "shutdown");
        }
    }
    shard.flush();
    for _ in 0..100 {
        let pending = shard.state.borrow().conns.iter().any(|c| !c.out.is_empty());
        if !pending {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Give writers a moment to shut their sockets after the last write.
    tokio::time::sleep(Duration::from_millis(20)).await;
    shard.close_store().await;
    shard.stopped.notify();
}

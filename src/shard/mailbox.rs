//! Owns: a shard's inbox loop — taking messages from other shards in bounded turns
//! (`INBOX_BATCH` messages, `INBOX_WORK_BUDGET` units of work, a flush and a yield
//! between turns), the ordering rule between its two inboxes (a queue request, a control
//! request or a directory change first takes every publish already waiting, so it sees
//! what its sender published before it), what each message does on this shard, and the
//! shard's shutdown (320 to every connection, the close-ok wait, the store closed).
//!
//! Does not: send to another shard's bounded publish inbox (a shard's own inbox loop
//! never awaits a send, so waits between shards cannot form a cycle).

use std::rc::Rc;
use std::time::Duration;

use super::inbox::{Inbox, ShardMsg};
use super::{control, Shard};

/// Inbox messages a shard handles in one turn before it flushes and lets its sockets
/// run.
const INBOX_BATCH: usize = 64;

/// Work (messages published into queues, delivered or settled) a shard takes from its
/// inboxes in one turn; a turn that reaches it ends early, so a burst from other shards
/// delays the shard's own sockets by a bounded amount.
const INBOX_WORK_BUDGET: usize = 4096;

/// Serves this shard's inboxes until they close.
pub async fn inbox_loop(shard: Rc<Shard>, mut inbox: Inbox) {
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

/// How much work a message is, for the turn's budget: a routed message is one unit per
/// queue it goes to (to a wide fan-out, a batch of a few messages is many thousands of
/// entries, and the shard's clock, timers and memory watermark wait for the turn's end).
fn work_of(msg: &ShardMsg) -> usize {
    let entries =
        |routed: &[super::inbox::Routed]| -> usize { routed.iter().map(|r| r.queues.len()).sum() };
    match msg {
        ShardMsg::Publish(batch) => entries(&batch.routed) + batch.replies.len(),
        ShardMsg::DeadLetter(routed) => entries(routed),
        ShardMsg::Deliver(batch) => batch.len(),
        ShardMsg::Settle(batch) => batch.len(),
        ShardMsg::Confirms(done) => done.len(),
        ShardMsg::Apply(changes, _) => changes.len(),
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
            if !batch.replies.is_empty() {
                st.conn_side().direct_replies(shard, batch.replies);
            }
            shard.peers.release_budget(shard.id, batch.permits);
        }
        ShardMsg::DeadLetter(routed) => {
            let mut st = shard.state.borrow_mut();
            for r in routed {
                st.queue_side().take_routed(shard, r, now);
            }
        }
        ShardMsg::ReplyConsumer(to, reply) => {
            let alive = shard
                .state
                .borrow_mut()
                .conn_side()
                .reply_consumer_alive(to);
            let _ = reply.send(alive);
        }
        ShardMsg::RepliesReturned(returns) => {
            shard
                .state
                .borrow_mut()
                .conn_side()
                .replies_returned(returns);
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
        ShardMsg::Observe(req, reply) => match super::observe::answer_or_wait(shard, req) {
            super::observe::Answer::Now(answer) => {
                let _ = reply.send(answer);
            }
            super::observe::Answer::OnceSynced(synced) => {
                tokio_uring::spawn(async move {
                    let written = synced.await.unwrap_or(false);
                    let _ = reply.send(super::inbox::observe::ObserveReply::Enqueued(written));
                });
            }
        },
        ShardMsg::WatchBindings(tx, watched) => {
            let st = shard.state.borrow();
            shard.binding_watch.start(&st.common.directory, tx, watched);
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
            let mut st = shard.state.borrow_mut();
            control::apply_vhost_slots(&mut st, shard);
            st.conn_side().access_changed(shard);
            drop(st);
            let _ = ack.send(());
        }
        ShardMsg::PersistRuntime(records, ack) => {
            let shard = Rc::clone(shard);
            tokio_uring::spawn(async move {
                super::home::persist::persist_runtime(&shard, &records).await;
                let _ = ack.send(());
            });
        }
        ShardMsg::Policies(config, ack) => {
            shard.reload(config);
            let changed = shard.state.borrow_mut().queue_side().apply_policies(shard);
            shard.flush_soon();
            let _ = ack.send(changed);
        }
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
    super::home::persist::close_store(&shard).await;
    shard.stopped.notify();
}

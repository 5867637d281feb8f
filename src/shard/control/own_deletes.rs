//! Owns: the queues the broker deletes on its own initiative (auto-delete when the last
//! consumer goes, `x-expires`, the slow-consumer delete policy, an exclusive queue's
//! connection gone): the shard's one task that hands them to the coordinator
//! [`PER_ROUND`] at a time, and the coordinator's deletion of such a round in one
//! broadcast.
//!
//! Why rounds, not a task per queue: ten thousand subscribers that disconnect together
//! (a client fleet restarting, a network blip) leave ten thousand exclusive queues to
//! delete. A task per queue held a control round trip's future (~2.7 KiB across both
//! shards) for each of them at once, and the broker's RSS went from 57 to 99 MiB for the
//! second it took (issue 23). Now what waits is one [`OwnDelete`] per queue in the
//! shard's outbox (`Outbox::queue_deletes`), one task per shard, and one directory
//! change broadcast per round instead of one per queue.
//!
//! A deletion is by name, checked when its round comes: the queue of that name must
//! still be the one meant (the same queue, or an exclusive queue of the connection that
//! is gone). An exclusive auto-delete queue is asked for twice when its connection
//! closes (its consumer cancelled, its owner gone), maybe by two shards in two rounds; a
//! client that declared the name again in between keeps its new queue.
//!
//! A round's directory changes are one inbox message on every shard, counted as that many
//! changes of its turn's work (`mailbox::work_of`). At shutdown the rounds not yet sent
//! are dropped with the coordinator: a durable auto-delete queue whose consumers the
//! shutdown closed may still be there after a restart.
//!
//! Does not: delete a queue a client asked to delete (`queue.delete` is checked for
//! `if-unused`/`if-empty` and answered, `control::delete_queue`), or decide when a queue
//! is to be deleted (the queue's shard does, and puts it in its outbox).

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use crate::model::ids::QueueRef;
use crate::model::routing::{DirectoryChange, QueueMeta, Removal, VhostIdx};

use super::super::inbox::{ControlOk, ControlReply, ControlRequest, OwnDelete, StillThe};
use super::super::Shard;
use super::{auto_deletions, broadcast, request};

/// Queues handed to the coordinator in one request (and deleted in one broadcast): a
/// round's directory changes are applied on every shard in one inbox message, so this
/// bounds the work one such message is.
pub const PER_ROUND: usize = 256;

/// Room the outbox's list keeps when the task takes it (more is given back).
const KEEP_CAPACITY: usize = 1024;

/// Starts the shard's deleting task unless it runs already; called at the end of a turn
/// (`Shard::flush`) when the outbox has queues to delete.
pub fn start(shard: &Rc<Shard>) {
    if shard.own_deletes_running.replace(true) {
        return;
    }
    tokio_uring::spawn(delete_pending(Rc::clone(shard)));
}

/// Hands the outbox's queues to the coordinator a round at a time, each round after the
/// last one's answer, until none is left. It takes the whole list at once and goes
/// through it (what is asked meanwhile waits in the outbox for the next pass), so a long
/// list costs one pass over it, not one shift per round.
async fn delete_pending(shard: Rc<Shard>) {
    loop {
        let taken = {
            let mut st = shard.state.borrow_mut();
            let pending = &mut st.common.outbox.queue_deletes;
            let keep = pending.capacity().min(KEEP_CAPACITY);
            std::mem::replace(pending, Vec::with_capacity(keep))
        };
        if taken.is_empty() {
            shard.own_deletes_running.set(false);
            return;
        }
        let mut taken = taken.into_iter();
        loop {
            let round: Vec<OwnDelete> = taken.by_ref().take(PER_ROUND).collect();
            if round.is_empty() {
                break;
            }
            let req = ControlRequest::DeleteOwnQueues { queues: round };
            if let Err(e) = request(&shard, req).await {
                tracing::debug!("the broker's own queue deletions failed: {e}");
            }
            // On the coordinator the round ran in this task: what it left for the
            // connections (consumers cancelled, flow notices) goes out now, as after a
            // request from another shard.
            shard.flush_soon();
        }
    }
}

/// Whether the queue now under an [`OwnDelete`]'s name is the one it meant.
fn still_meant(only_if: StillThe, meta: &QueueMeta) -> bool {
    match only_if {
        StillThe::Queue(queue) => meta.queue == queue,
        StillThe::ExclusiveOf(owner) => meta.exclusive_owner == Some(owner),
    }
}

/// Serves [`ControlRequest::DeleteOwnQueues`] on the coordinator: every queue of the
/// round that is still the one meant is deleted (its consumers cancelled, its messages
/// dropped, as `queue.delete` without conditions would), with the auto-delete exchanges
/// that lose their last binding through them, in one broadcast. A name already gone, or
/// declared again since, is left alone; a queue named twice in the round goes once.
pub async fn delete_own_queues(shard: &Rc<Shard>, queues: Vec<OwnDelete>) -> ControlReply {
    let changes = {
        let st = shard.state.borrow();
        let dir = &st.common.directory;
        let mut changes = Vec::with_capacity(queues.len());
        let mut seen = HashSet::with_capacity(queues.len());
        let mut by_vhost: HashMap<VhostIdx, Vec<QueueRef>> = HashMap::new();
        for OwnDelete {
            vhost,
            name,
            only_if,
        } in queues
        {
            let Some(meta) = dir.vhost(vhost).and_then(|d| d.queue(&name)) else {
                continue;
            };
            if !still_meant(only_if, meta) || !seen.insert(meta.queue) {
                continue;
            }
            by_vhost.entry(vhost).or_default().push(meta.queue);
            changes.push(DirectoryChange::DeleteQueue {
                vhost,
                queue: meta.queue,
                name,
            });
        }
        for (vhost, deleted) in by_vhost {
            if let Some(d) = dir.vhost(vhost) {
                changes.extend(auto_deletions(
                    vhost,
                    d.auto_deleted(Removal::Queues(&deleted)),
                ));
            }
        }
        changes
    };
    broadcast(shard, changes).await;
    Ok(ControlOk::QueueDeleted { messages: 0 })
}

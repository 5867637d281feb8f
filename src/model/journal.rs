//! Owns: the shard thread's journal of what durable queues did to their stored
//! messages since the store's last group commit — entries that left for good (acked, rejected,
//! expired, dropped by a ring, purged, taken by a no-ack consumer) and entries handed to
//! a consumer that must ack. A queue writes here without knowing about the store; the
//! shard's store takes it at the next commit.
//!
//! Does not: write files (`store::shard_store` takes the journal), or hold anything for
//! queues that are not durable (queues call in only for persistent entries of stored
//! queues).
//!
//! Per thread, like `model::ledger`: every shard is one thread, so this is the shard's
//! own journal with no lock and no plumbing through the queue code.

use std::cell::RefCell;

use crate::model::ids::QueueId;

#[derive(Default)]
pub struct Journal {
    pub gone: Vec<(QueueId, u64)>,
    pub delivered: Vec<(QueueId, u64)>,
}

thread_local! {
    static JOURNAL: RefCell<Journal> = RefCell::new(Journal::default());
}

/// A stored entry left its queue for good.
#[inline]
pub fn gone(queue: QueueId, seq: u64) {
    JOURNAL.with(|j| j.borrow_mut().gone.push((queue, seq)));
}

/// A stored entry was delivered to a consumer that must acknowledge it.
#[inline]
pub fn delivered(queue: QueueId, seq: u64) {
    JOURNAL.with(|j| j.borrow_mut().delivered.push((queue, seq)));
}

/// Whether anything waits to be written.
pub fn is_empty() -> bool {
    JOURNAL.with(|j| {
        let j = j.borrow();
        j.gone.is_empty() && j.delivered.is_empty()
    })
}

/// Takes everything journaled so far, leaving the vectors' room behind in `into`'s
/// place (the caller hands its drained vectors back for reuse).
pub fn swap(into: &mut Journal) {
    JOURNAL.with(|j| std::mem::swap(&mut *j.borrow_mut(), into));
}

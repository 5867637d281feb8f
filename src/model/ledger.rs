//! Owns: the shard's memory ledger — how many bytes of message data this thread's shard
//! holds, by where they live: shared messages (counted once, however many queues hold
//! them), queue entries, bytes queued for sockets, and publishes still being received.
//!
//! Each counter is a thread-local `Cell`: a shard is one thread, so counting costs no
//! atomic and no lock. A message is counted up on the thread that builds it and down on
//! the thread that drops its last handle, so one shard's figure may go negative; the sum
//! over all shards is exact. The shard publishes its figure (see `shard::memory`) for the
//! broker-wide watermark.
//!
//! Does not: decide anything (the watermark does), or see other shards' counters.

use std::cell::Cell;

thread_local! {
    static MESSAGES: Cell<i64> = const { Cell::new(0) };
    static ENTRIES: Cell<i64> = const { Cell::new(0) };
    static OUTBOUND: Cell<i64> = const { Cell::new(0) };
    static PARTIAL: Cell<i64> = const { Cell::new(0) };
}

fn bump(cell: &'static std::thread::LocalKey<Cell<i64>>, delta: i64) {
    cell.with(|c| c.set(c.get().wrapping_add(delta)));
}

/// A message of `bytes` was built (positive) or dropped (negative) on this thread.
pub fn messages(delta: i64) {
    bump(&MESSAGES, delta);
}

/// Queue entries (each a small record in one queue) were created or dropped.
pub fn entries(delta: i64) {
    bump(&ENTRIES, delta);
}

/// Bytes were queued for, or written to, a socket.
pub fn outbound(delta: i64) {
    bump(&OUTBOUND, delta);
}

/// Body bytes of publishes not yet complete were received or released.
pub fn partial(delta: i64) {
    bump(&PARTIAL, delta);
}

/// This thread's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LedgerSnapshot {
    pub messages: i64,
    pub entries: i64,
    pub outbound: i64,
    pub partial: i64,
}

impl LedgerSnapshot {
    pub fn total(&self) -> i64 {
        self.messages + self.entries + self.outbound + self.partial
    }
}

/// Reads this thread's counters.
pub fn snapshot() -> LedgerSnapshot {
    LedgerSnapshot {
        messages: MESSAGES.with(Cell::get),
        entries: ENTRIES.with(Cell::get),
        outbound: OUTBOUND.with(Cell::get),
        partial: PARTIAL.with(Cell::get),
    }
}

/// Counts `bytes` of partially received publish for as long as it lives.
#[derive(Debug, Default)]
pub struct PartialBytes(u64);

impl PartialBytes {
    pub fn add(&mut self, bytes: u64) {
        self.0 += bytes;
        partial(bytes as i64);
    }
}

impl Drop for PartialBytes {
    fn drop(&mut self) {
        partial(-(self.0 as i64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_up_per_thread() {
        std::thread::spawn(|| {
            let before = snapshot();
            messages(100);
            entries(56);
            outbound(10);
            {
                let mut p = PartialBytes::default();
                p.add(7);
                assert_eq!(snapshot().partial - before.partial, 7);
            }
            let after = snapshot();
            assert_eq!(after.total() - before.total(), 166);
            messages(-100);
            entries(-56);
            outbound(-10);
            assert_eq!(snapshot(), before);
        })
        .join()
        .expect("thread");
    }
}

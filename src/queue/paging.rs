//! Owns: a durable queue's side of eviction — releasing the bodies of persistent ready
//! entries that are on disk (the entry stays, in its place, marked `evicted`, with a
//! shared placeholder for its message), which evicted entries to read back next, and
//! putting read-back messages in place.
//!
//! Does not: read or write files (the shard does, `shard::home::persist`), or decide when
//! memory is short.
//!
//! Only plain stored queues evict (one FIFO, no dead-letter exchange: a dead-lettered
//! message needs its body, and a priority queue's levels are left alone). The evicted
//! entries form one block in the middle of the ready list: the head (at least `keep`
//! entries) stays in memory for dispatch, the block is read back from its front as the
//! head drains, and newer entries behind it are evicted from the back at the next pass.
//! Every count (messages, bytes, persistent, age) still includes evicted entries: they
//! are held, just not in memory.

use super::{Entry, LocalMessage, Queue};

impl Queue {
    /// Whether this queue may release bodies.
    pub fn can_evict(&self) -> bool {
        self.settings.stored && self.ready.is_plain() && self.settings.dead_letter.is_none()
    }

    /// Ready entries whose bodies are released.
    pub fn evicted_count(&self) -> u64 {
        self.evicted
    }

    /// Whether the next entry to deliver has its body on disk only.
    #[inline]
    pub fn head_evicted(&self) -> bool {
        self.evicted > 0 && self.ready.front().is_some_and(|e| e.evicted)
    }

    /// Releases the bodies of the persistent ready entries after the first `keep`, from
    /// the newest back to the block already evicted, that are on disk (`seq <=
    /// committed`) and readable where the store expects them (`movable` false for
    /// entries compaction copied). Returns how many and their bytes.
    pub fn evict(
        &mut self,
        keep: usize,
        committed: u64,
        placeholder: &LocalMessage,
        movable: impl Fn(u64) -> bool,
    ) -> (u64, u64) {
        if !self.can_evict() {
            return (0, 0);
        }
        let (mut n, mut bytes) = (0, 0);
        let len = self.ready.len();
        if let Some(fifo) = self.ready.plain_mut() {
            for e in fifo.iter_mut().skip(keep).rev() {
                if e.evicted {
                    break;
                }
                if !e.persistent || e.seq > committed || !movable(e.seq) {
                    continue;
                }
                e.msg = LocalMessage::clone(placeholder);
                e.evicted = true;
                n += 1;
                bytes += e.size();
            }
            debug_assert_eq!(fifo.len(), len);
        }
        self.evicted += n;
        (n, bytes)
    }

    /// The evicted entries to read back now, in order (at most `max`): when fewer than
    /// `low` entries are in memory before the evicted block, or dispatch stopped at it.
    pub fn page_in_plan(&self, low: usize, max: usize) -> Vec<u64> {
        let mut out = Vec::new();
        if self.evicted == 0 {
            return out;
        }
        let Some(fifo) = self.ready.plain() else {
            return out;
        };
        let first = fifo.iter().position(|e| e.evicted);
        let Some(first) = first else {
            return out;
        };
        if first >= low && !self.page_in_wanted {
            return out;
        }
        out.extend(
            fifo.range(first..)
                .take_while(|e| e.evicted)
                .take(max)
                .map(|e| e.seq),
        );
        out
    }

    /// A message read back for evicted entry `seq`. False when the entry is gone or
    /// not evicted any more.
    pub fn page_in(&mut self, seq: u64, msg: LocalMessage) -> bool {
        let Some(fifo) = self.ready.plain_mut() else {
            return false;
        };
        let at = fifo.partition_point(|e| e.seq < seq);
        let Some(e) = fifo
            .get_mut(at)
            .filter(|e: &&mut Entry| e.seq == seq && e.evicted)
        else {
            return false;
        };
        e.msg = msg;
        e.evicted = false;
        self.evicted -= 1;
        self.page_in_wanted = false;
        true
    }
}

//! Owns: eviction on a shard — when message memory is above `store.page_out_fraction`
//! of the memory high watermark, releasing the bodies of persistent ready entries of
//! durable queues that are on disk (`Queue::evict`), and reading them back, a chunk of
//! a segment at a time through io_uring, as the queue's head comes near them (or at
//! once, with a plain read, for `basic.get`).
//!
//! Does not: decide which entries may go (`queue::paging`) or where they are
//! (`store::shard_store::read_from`, `store::page`).

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::model::ids::QueueId;
use crate::model::message::{BodyChunks, LocalMessage, Message};
use crate::ops::store_event::StoreEvent;
use crate::store::page::{self, Scan};
use crate::store::shard_store::ReadAt;

use super::{HomeQueues, QueueSide};
use crate::shard::Shard;

/// Ready entries a queue keeps in memory at its head.
const KEEP: usize = 1024;
/// Read back when fewer than this many entries are in memory before the evicted block.
const LOW: usize = 256;
/// Entries one read-back asks for.
const BATCH: usize = 1024;
/// Bytes read from a segment at a time (more for a larger record).
const CHUNK: usize = 1 << 20;
/// Chunks one read-back task reads at most.
const CHUNKS_PER_TASK: usize = 8;
/// Eviction passes are at least this far apart.
const PASS_GAP: Duration = Duration::from_secs(1);

/// The shared placeholder evicted entries point at: an empty message.
pub fn placeholder() -> LocalMessage {
    Rc::new(Message::new(
        "".into(),
        "".into(),
        Bytes::new(),
        BodyChunks::new(),
        0,
    ))
}

/// Each tick: an eviction pass when memory is short (at most every second), and
/// read-backs for queues whose head comes near their evicted entries.
pub fn paging_tick(shard: &Rc<Shard>, now: Instant) {
    let fraction = shard.config.store.page_out_fraction;
    let limit = (shard.memory.high as f64 * fraction) as u64;
    if fraction > 0.0 && shard.memory.used() > limit && shard.next_eviction.get() <= now {
        shard.next_eviction.set(now + PASS_GAP);
        evict_pass(shard);
    }
    let wanted: Vec<(QueueId, Vec<u64>)> = {
        let mut st = shard.state.borrow_mut();
        let st = &mut *st;
        st.home
            .evicting
            .retain(|q| st.home.queues.get(q).is_some_and(|q| q.evicted_count() > 0));
        st.home
            .evicting
            .iter()
            .filter(|q| !st.home.paging_in.contains(q))
            .filter_map(|q| {
                let plan = st.home.queues.get(q)?.page_in_plan(LOW, BATCH);
                (!plan.is_empty()).then_some((*q, plan))
            })
            .collect()
    };
    for (queue, seqs) in wanted {
        shard.state.borrow_mut().home.paging_in.push(queue);
        tokio_uring::spawn(read_back(Rc::clone(shard), queue, seqs));
    }
}

fn evict_pass(shard: &Shard) {
    let mut st = shard.state.borrow_mut();
    let st = &mut *st;
    let store = shard.store.borrow();
    for (id, q) in st.home.queues.iter_mut() {
        if !q.can_evict() || q.ready_count() <= KEEP {
            continue;
        }
        let committed = store.committed_seq(*id);
        let placeholder = shard.placeholder.get_or_init(placeholder);
        let (n, bytes) = q.evict(KEEP, committed, placeholder, |seq| {
            !store.is_relocated(*id, seq) && !store.is_withdrawn(*id, seq)
        });
        if n > 0 {
            StoreEvent::Evicted {
                vhost: q.vhost.clone(),
                queue: q.name.to_string(),
                messages: n,
                bytes,
                on_disk_only: q.evicted_count(),
            }
            .emit();
            if !st.home.evicting.contains(id) {
                st.home.evicting.push(*id);
            }
        }
    }
}

/// Puts what a chunk gave back into the queue; returns the sequence numbers still
/// wanted.
fn apply(home: &mut HomeQueues, queue: QueueId, scan: Scan, mut wanted: Vec<u64>) -> Vec<u64> {
    if let Some(q) = home.queues.get_mut(&queue) {
        for (seq, parts) in scan.found {
            q.page_in(seq, Rc::new(parts.build()));
            if let Ok(i) = wanted.binary_search(&seq) {
                wanted.remove(i);
            }
        }
        if q.has_consumers() {
            home.mark_dirty(queue);
        }
    }
    wanted
}

/// Bytes to read at `at` so that at least one whole record is in the chunk.
fn chunk_len(first_record_len: Option<u32>) -> usize {
    use crate::store::record::{HEADER, MAX_RECORD};
    match first_record_len {
        Some(n) => CHUNK.max(HEADER + (n as usize).min(MAX_RECORD)),
        None => CHUNK,
    }
}

/// One read-back of a queue's evicted entries, a chunk at a time: where to read next,
/// and what a chunk gave. The reading itself is the caller's (io_uring for consumers,
/// a plain read for `basic.get`).
struct ReadBack {
    queue: QueueId,
    /// Sequence numbers still wanted, sorted.
    wanted: Vec<u64>,
    /// Bytes to read next (more than a chunk for a larger record).
    len: usize,
    last: Option<ReadAt>,
}

impl ReadBack {
    fn new(queue: QueueId, wanted: Vec<u64>) -> ReadBack {
        ReadBack {
            queue,
            wanted,
            len: CHUNK,
            last: None,
        }
    }

    /// The next read (file, offset, length), or `None` when done or when the store
    /// points where the last read already looked.
    fn next_read(&mut self, shard: &Shard) -> Option<(std::path::PathBuf, ReadAt, usize)> {
        let first = *self.wanted.first()?;
        let store = shard.store.borrow();
        let at = store.read_from(self.queue, first)?;
        if self.last == Some(at) && self.len == CHUNK {
            return None;
        }
        self.last = Some(at);
        Some((store.segment_path(at.segment), at, self.len))
    }

    /// Takes what a read at `at` of `asked` bytes returned: puts the entries found back
    /// in the queue and moves the queue's cursor past the chunk's whole records.
    fn took(
        &mut self,
        shard: &Shard,
        home: &mut HomeQueues,
        at: ReadAt,
        asked: usize,
        chunk: Bytes,
    ) {
        let Some(&first) = self.wanted.first() else {
            return;
        };
        let first_len = chunk
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        let last_chunk = chunk.len() < asked;
        let scan = page::scan(chunk, at.segment, self.queue, &self.wanted, last_chunk);
        if scan.consumed == 0 && !scan.segment_done {
            self.len = chunk_len(first_len);
            return;
        }
        self.len = CHUNK;
        // Past the chunk's whole records, for every sequence number above those seen
        // in it — or, when it held none of the queue's records, for `first` and above.
        let below = if scan.max_seen > 0 {
            scan.max_seen + 1
        } else {
            first
        };
        let next = ReadAt {
            segment: at.segment,
            offset: at.offset + scan.consumed as u64,
        };
        shard.store.borrow_mut().set_cursor(self.queue, below, next);
        let wanted = std::mem::take(&mut self.wanted);
        self.wanted = apply(home, self.queue, scan, wanted);
    }
}

/// Reads evicted entries `wanted` (sorted) of `queue` back from its segments.
async fn read_back(shard: Rc<Shard>, queue: QueueId, wanted: Vec<u64>) {
    let mut rb = ReadBack::new(queue, wanted);
    for _ in 0..CHUNKS_PER_TASK {
        let Some((path, at, len)) = rb.next_read(&shard) else {
            break;
        };
        let Ok(file) = tokio_uring::fs::File::open(&path).await else {
            break;
        };
        let (res, buf) = file.read_at(Vec::with_capacity(len), at.offset).await;
        let _ = file.close().await;
        if res.is_err() {
            break;
        }
        rb.took(
            &shard,
            &mut shard.state.borrow_mut().home,
            at,
            len,
            Bytes::from(buf),
        );
    }
    shard
        .state
        .borrow_mut()
        .home
        .paging_in
        .retain(|q| *q != queue);
    shard.flush();
}

impl QueueSide<'_> {
    /// Reads the evicted head of `queue` back at once, with plain reads (for
    /// `basic.get`, which answers now). At most a few chunks: this read blocks the
    /// shard; a consumer's read-back is asynchronous.
    pub fn read_back_now(&mut self, shard: &Shard, queue: QueueId) {
        use std::os::unix::fs::FileExt;
        let Some(wanted) = self
            .home
            .queues
            .get(&queue)
            .map(|q| q.page_in_plan(usize::MAX, BATCH))
        else {
            return;
        };
        let mut rb = ReadBack::new(queue, wanted);
        for _ in 0..CHUNKS_PER_TASK {
            let Some((path, at, len)) = rb.next_read(shard) else {
                return;
            };
            let Ok(file) = std::fs::File::open(&path) else {
                return;
            };
            let mut buf = vec![0u8; len];
            let Ok(n) = file.read_at(&mut buf, at.offset) else {
                return;
            };
            buf.truncate(n);
            rb.took(shard, self.home, at, len, Bytes::from(buf));
            if self
                .home
                .queues
                .get(&queue)
                .is_none_or(|q| !q.head_evicted())
            {
                return;
            }
        }
    }
}

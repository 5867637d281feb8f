//! Owns: a queue's ready messages in delivery order, and the memory ledger's count of
//! the memory that holds them. A plain queue keeps one FIFO, exactly as before priority
//! queues existed. A queue declared with `x-max-priority` keeps one FIFO per priority
//! level (0 to its maximum) and a bitmap of the levels that hold anything, so its head —
//! the oldest entry of the highest non-empty level — is found in O(1) whatever the
//! number of levels. A message's level is its `priority` property capped at the maximum
//! (no property: 0), fixed when it is enqueued (`Entry::priority`).
//!
//! Does not: count bytes, persistent messages, expiries or discards (the queue does, as
//! entries come and go), or decide which message to drop or expire: it offers the head
//! in delivery order, and the oldest entry by age for rings bounded by age.
//!
//! # Invariants
//! - Plain: `levels` is `None`; every ready entry is in `fifo`, sorted by `seq`.
//! - Priority: `fifo` is empty; an entry of level `p` is in `levels.fifos[p]`, each level
//!   sorted by `seq`; bit `p` of `nonempty` is set exactly when level `p` holds an entry;
//!   `len` and `capacity` are the sums of the levels' lengths and capacities.
//! - `accounted` is what the ledger counts for this list (entry slots allocated, plus
//!   the level array of a priority queue), and is given back on drop.

use std::collections::VecDeque;

use crate::model::ledger;
use crate::model::message::LocalMessage;
use crate::protocol::properties::raw_priority;

use super::entry::{Entry, Stamp};

/// A drained list whose allocation is above this many entries (56 KiB) gives it back:
/// a subscription that caught up after a burst holds no more than that.
const SHRINK_ABOVE: usize = 1024;
/// What a drained list keeps.
const SHRINK_TO: usize = 64;
/// What a queue emptied by its consumer's pull keeps ([`ReadyList::trim_after_pull`]).
const PULLED_KEEP: usize = 2;

/// How hot code reaches a [`ReadyList`]: [`Fifo`] goes straight to a plain queue's one
/// FIFO, so code compiled for it checks nothing per message; [`Any`] works for both
/// kinds. Callers choose `Fifo` only after [`ReadyList::is_plain`].
pub trait Head {
    fn is_empty(ready: &ReadyList) -> bool;
    fn push_back(ready: &mut ReadyList, entry: Entry);
    /// Removes the head; call [`Head::after_pop`] once done with it.
    fn pop_front(ready: &mut ReadyList) -> Option<Entry>;
    /// Gives memory back after a pop that drained the list.
    fn after_pop(ready: &mut ReadyList);
}

/// [`Head`] of a plain queue.
pub enum Fifo {}

/// [`Head`] of any queue.
pub enum Any {}

impl Head for Fifo {
    #[inline(always)]
    fn is_empty(ready: &ReadyList) -> bool {
        ready.fifo.is_empty()
    }

    #[inline(always)]
    fn push_back(ready: &mut ReadyList, entry: Entry) {
        debug_assert!(ready.levels.is_none(), "Fifo head on a priority queue");
        push_fifo(&mut ready.fifo, entry);
        ready.sync_fifo();
    }

    #[inline(always)]
    fn pop_front(ready: &mut ReadyList) -> Option<Entry> {
        debug_assert!(ready.levels.is_none(), "Fifo head on a priority queue");
        ready.fifo.pop_front()
    }

    #[inline(always)]
    fn after_pop(ready: &mut ReadyList) {
        ready.shrink_drained_fifo();
    }
}

impl Head for Any {
    #[inline(always)]
    fn is_empty(ready: &ReadyList) -> bool {
        ready.is_empty()
    }

    #[inline(always)]
    fn push_back(ready: &mut ReadyList, entry: Entry) {
        ready.push_back(entry);
    }

    #[inline(always)]
    fn pop_front(ready: &mut ReadyList) -> Option<Entry> {
        ready.pop_front()
    }

    #[inline(always)]
    fn after_pop(_ready: &mut ReadyList) {}
}

/// Appends to a FIFO whose first allocation is one entry (a `VecDeque` would start with
/// four): a subscriber that keeps up holds one message at a time (issue 23).
#[inline(always)]
fn push_fifo(fifo: &mut VecDeque<Entry>, entry: Entry) {
    if fifo.capacity() == 0 {
        fifo.reserve_exact(1);
    }
    fifo.push_back(entry);
}

/// The ready entries of one queue, in delivery order.
#[derive(Debug)]
pub struct ReadyList {
    fifo: VecDeque<Entry>,
    levels: Option<Box<Levels>>,
    accounted: u64,
}

/// The per-level FIFOs of a priority queue.
#[derive(Debug)]
struct Levels {
    fifos: Box<[VecDeque<Entry>]>,
    nonempty: [u64; 4],
    len: usize,
    capacity: usize,
}

impl ReadyList {
    /// An empty list: one FIFO, or one per level `0..=max` for a priority queue.
    pub fn new(max_priority: Option<u8>) -> ReadyList {
        let levels = max_priority.map(|max| {
            Box::new(Levels {
                fifos: (0..=max).map(|_| VecDeque::new()).collect(),
                nonempty: [0; 4],
                len: 0,
                capacity: 0,
            })
        });
        let mut list = ReadyList {
            fifo: VecDeque::new(),
            levels,
            accounted: 0,
        };
        list.sync();
        list
    }

    /// Whether this is a plain queue's one FIFO (no `x-max-priority`).
    #[inline]
    pub fn is_plain(&self) -> bool {
        self.levels.is_none()
    }

    /// The highest level of a priority queue.
    pub fn max_priority(&self) -> Option<u8> {
        self.levels
            .as_ref()
            .map(|l| u8::try_from(l.fifos.len() - 1).unwrap_or(u8::MAX))
    }

    #[inline]
    pub fn len(&self) -> usize {
        match &self.levels {
            None => self.fifo.len(),
            Some(l) => l.len,
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hints the head entry of a plain FIFO (`model::prefetch`): a dispatch's first load
    /// after the queue's own lines. Reads the list's header, which the caller should
    /// have hinted a step before.
    #[inline(always)]
    pub fn prefetch_head(&self) {
        if self.levels.is_none() {
            if let Some(head) = self.fifo.front() {
                crate::model::prefetch::line(head);
            }
        }
    }

    /// The entry delivered next.
    #[inline]
    pub fn front(&self) -> Option<&Entry> {
        match &self.levels {
            None => self.fifo.front(),
            Some(l) => l.front(),
        }
    }

    /// Appends a new entry (at the tail of its level).
    #[inline]
    pub fn push_back(&mut self, entry: Entry) {
        match &mut self.levels {
            None => {
                push_fifo(&mut self.fifo, entry);
                self.sync_fifo();
            }
            Some(l) => {
                l.push_back(entry);
                self.sync();
            }
        }
    }

    /// Removes the head of a plain queue's FIFO.
    #[inline(always)]
    fn pop_fifo(&mut self) -> Option<Entry> {
        let entry = self.fifo.pop_front()?;
        self.shrink_drained_fifo();
        Some(entry)
    }

    /// A drained backlog gives its memory back.
    #[inline(always)]
    fn shrink_drained_fifo(&mut self) {
        if self.fifo.is_empty() && self.fifo.capacity() > SHRINK_ABOVE {
            self.fifo.shrink_to(SHRINK_TO);
            self.sync_fifo();
        }
    }

    /// A subscriber's queue emptied by a pull of `taken` messages
    /// (`Queue::dispatch_pulled`) that were no more than [`PULLED_KEEP`] keeps room for
    /// that many, not for its longest burst: 10,000 such queues each kept room for 8
    /// after their longest wait for the write pass (~300 bytes each of a subscriber's
    /// ~6 KiB: issue 23), where most hold one or two messages at a time. A queue whose
    /// pulls take more keeps its room (trimmed every pull, it would grow again every
    /// time), and so does one with room for at most twice `PULLED_KEEP`.
    #[inline]
    pub fn trim_after_pull(&mut self, taken: usize) {
        if taken <= PULLED_KEEP
            && self.levels.is_none()
            && self.fifo.is_empty()
            && self.fifo.capacity() > 2 * PULLED_KEEP
        {
            self.fifo.shrink_to(PULLED_KEEP);
            self.sync_fifo();
        }
    }

    /// Removes the entry delivered next.
    #[inline(always)]
    pub fn pop_front(&mut self) -> Option<Entry> {
        match &mut self.levels {
            None => self.pop_fifo(),
            Some(l) => {
                let (entry, shrunk) = l.pop_front()?;
                if shrunk {
                    self.sync();
                }
                Some(entry)
            }
        }
    }

    /// Puts a returned entry back in its position (by `seq`, within its level).
    pub fn insert_by_seq(&mut self, entry: Entry) {
        match &mut self.levels {
            None => {
                let at = self.fifo.partition_point(|e| e.seq < entry.seq);
                self.fifo.insert(at, entry);
            }
            Some(l) => l.insert_by_seq(entry),
        }
        self.sync();
    }

    /// When the oldest ready entry was enqueued (in a priority queue, the oldest head of
    /// any level).
    pub fn oldest_enqueued(&self) -> Option<Stamp> {
        match &self.levels {
            None => self.fifo.front(),
            Some(l) => l.oldest().and_then(|p| l.fifos.get(p)?.front()),
        }
        .map(|e| e.enqueued_at)
    }

    /// Removes the oldest ready entry if it was enqueued before `cutoff`.
    pub fn pop_older_than(&mut self, cutoff: Stamp) -> Option<Entry> {
        match &mut self.levels {
            None => {
                if self.fifo.front().is_some_and(|e| e.enqueued_at < cutoff) {
                    self.pop_fifo()
                } else {
                    None
                }
            }
            Some(l) => {
                let p = l.oldest()?;
                let (entry, shrunk) = l.pop_level(p, cutoff)?;
                if shrunk {
                    self.sync();
                }
                Some(entry)
            }
        }
    }

    /// Drops every entry and the memory that held them.
    /// Visits the ready entries with sequence numbers in `range` (every FIFO is
    /// sorted by `seq`).
    pub fn for_each_in(&self, range: std::ops::Range<u64>, mut f: impl FnMut(&Entry)) {
        let mut visit = |q: &VecDeque<Entry>| {
            let at = q.partition_point(|e| e.seq < range.start);
            for e in q.range(at..) {
                if e.seq >= range.end {
                    break;
                }
                f(e);
            }
        };
        match &self.levels {
            None => visit(&self.fifo),
            Some(l) => l.fifos.iter().for_each(visit),
        }
    }

    /// A plain list's one FIFO (`None` for a priority queue).
    pub fn plain(&self) -> Option<&VecDeque<Entry>> {
        self.levels.is_none().then_some(&self.fifo)
    }

    /// Takes the first `n` entries of a plain queue's FIFO (it holds at least that
    /// many) and appends their messages to `into`, in order; the caller has accounted
    /// for them ([`Queue::dispatch_pulled`]). A drained list gives its room back as a
    /// pop would.
    ///
    /// [`Queue::dispatch_pulled`]: super::Queue::dispatch_pulled
    pub fn take_plain_front(&mut self, n: usize, into: &mut Vec<LocalMessage>) {
        debug_assert!(self.levels.is_none() && n <= self.fifo.len());
        if n == 0 {
            return;
        }
        into.extend(self.fifo.drain(..n).map(|entry| entry.msg));
        self.shrink_drained_fifo();
    }

    /// [`ReadyList::plain`], mutable. Entries may be changed in place, never reordered,
    /// added or removed through it.
    pub fn plain_mut(&mut self) -> Option<&mut VecDeque<Entry>> {
        if self.levels.is_none() {
            Some(&mut self.fifo)
        } else {
            None
        }
    }

    /// Visits every ready entry (level by level in a priority queue).
    pub fn for_each(&self, mut f: impl FnMut(&Entry)) {
        self.fifo.iter().for_each(&mut f);
        if let Some(l) = &self.levels {
            for q in l.fifos.iter() {
                q.iter().for_each(&mut f);
            }
        }
    }

    pub fn clear(&mut self) {
        self.fifo = VecDeque::new();
        if let Some(l) = &mut self.levels {
            for q in l.fifos.iter_mut() {
                *q = VecDeque::new();
            }
            l.nonempty = [0; 4];
            l.len = 0;
            l.capacity = 0;
        }
        self.sync();
    }

    /// Brings the ledger's count of this list's memory up to date.
    fn sync(&mut self) {
        match &self.levels {
            None => self.sync_fifo(),
            Some(l) => {
                let now = l.memory();
                self.account(now);
            }
        }
    }

    /// [`ReadyList::sync`] for a plain queue.
    #[inline(always)]
    fn sync_fifo(&mut self) {
        self.account((self.fifo.capacity() * std::mem::size_of::<Entry>()) as u64);
    }

    #[inline(always)]
    fn account(&mut self, now: u64) {
        if now != self.accounted {
            ledger::entries(now as i64 - self.accounted as i64);
            self.accounted = now;
        }
    }
}

impl Drop for ReadyList {
    fn drop(&mut self) {
        ledger::entries(-(self.accounted as i64));
    }
}

impl Levels {
    /// Bytes of the level array and of every level's allocation.
    fn memory(&self) -> u64 {
        (self.capacity * std::mem::size_of::<Entry>()
            + self.fifos.len() * std::mem::size_of::<VecDeque<Entry>>()) as u64
    }

    fn max(&self) -> u8 {
        u8::try_from(self.fifos.len() - 1).unwrap_or(u8::MAX)
    }

    /// The highest non-empty level.
    #[inline]
    fn highest(&self) -> Option<usize> {
        self.nonempty
            .iter()
            .enumerate()
            .rev()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * 64 + 63 - w.leading_zeros() as usize)
    }

    /// The non-empty levels, lowest first.
    fn nonempty_levels(&self) -> impl Iterator<Item = usize> + '_ {
        self.nonempty.iter().enumerate().flat_map(|(i, w)| {
            let mut bits = *w;
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                Some(i * 64 + b)
            })
        })
    }

    /// The level whose head is the oldest ready entry.
    fn oldest(&self) -> Option<usize> {
        self.nonempty_levels()
            .filter_map(|p| Some((p, self.fifos.get(p)?.front()?.enqueued_at)))
            .min_by_key(|(_, at)| *at)
            .map(|(p, _)| p)
    }

    fn mark(&mut self, p: usize, nonempty: bool) {
        let bit = 1u64 << (p % 64);
        if let Some(w) = self.nonempty.get_mut(p / 64) {
            if nonempty {
                *w |= bit;
            } else {
                *w &= !bit;
            }
        }
    }

    fn front(&self) -> Option<&Entry> {
        self.fifos.get(self.highest()?)?.front()
    }

    fn push_back(&mut self, mut entry: Entry) {
        let max = self.max();
        entry.priority = raw_priority(entry.msg.raw_properties()).map_or(0, |p| p.min(max));
        let p = usize::from(entry.priority);
        let Some(q) = self.fifos.get_mut(p) else {
            return;
        };
        let before = q.capacity();
        q.push_back(entry);
        self.capacity += q.capacity() - before;
        self.len += 1;
        self.mark(p, true);
    }

    fn insert_by_seq(&mut self, entry: Entry) {
        let p = usize::from(entry.priority.min(self.max()));
        let Some(q) = self.fifos.get_mut(p) else {
            return;
        };
        let before = q.capacity();
        let at = q.partition_point(|e| e.seq < entry.seq);
        q.insert(at, entry);
        self.capacity += q.capacity() - before;
        self.len += 1;
        self.mark(p, true);
    }

    /// Removes the head of the highest non-empty level. Returns it and whether the
    /// level's allocation shrank.
    fn pop_front(&mut self) -> Option<(Entry, bool)> {
        let p = self.highest()?;
        self.pop_level_any(p)
    }

    /// Removes the head of level `p` if it was enqueued before `cutoff`.
    fn pop_level(&mut self, p: usize, cutoff: Stamp) -> Option<(Entry, bool)> {
        let due = self
            .fifos
            .get(p)?
            .front()
            .is_some_and(|e| e.enqueued_at < cutoff);
        if due {
            self.pop_level_any(p)
        } else {
            None
        }
    }

    /// Removes the head of level `p`.
    fn pop_level_any(&mut self, p: usize) -> Option<(Entry, bool)> {
        let q = self.fifos.get_mut(p)?;
        let entry = q.pop_front()?;
        self.len -= 1;
        let mut shrunk = false;
        if q.is_empty() {
            if q.capacity() > SHRINK_ABOVE {
                let before = q.capacity();
                q.shrink_to(SHRINK_TO);
                self.capacity -= before - q.capacity();
                shrunk = true;
            }
            self.mark(p, false);
        }
        Some((entry, shrunk))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::model::message::{BodyChunks, LocalMessage, Message};
    use crate::protocol::properties::BasicProperties;

    fn msg(priority: Option<u8>) -> LocalMessage {
        let props = BasicProperties {
            priority,
            ..Default::default()
        };
        LocalMessage::new(Message::new(
            "ex".into(),
            "rk".into(),
            props.to_bytes(),
            BodyChunks::new(),
            0,
        ))
    }

    /// `t` in the life of a list made a second before the tests' first entry.
    fn stamp(t: Instant) -> Stamp {
        static BASE: OnceLock<Instant> = OnceLock::new();
        let base = BASE.get_or_init(|| {
            let now = Instant::now();
            now.checked_sub(Duration::from_secs(1)).unwrap_or(now)
        });
        Stamp::of(t, *base)
    }

    fn entry(seq: u64, priority: Option<u8>, at: Instant) -> Entry {
        Entry::new(seq, msg(priority), stamp(at), Stamp::NEVER)
    }

    fn drain(list: &mut ReadyList) -> Vec<u64> {
        std::iter::from_fn(|| list.pop_front().map(|e| e.seq)).collect()
    }

    #[test]
    fn plain_list_is_fifo_whatever_the_priority() {
        let now = Instant::now();
        let mut list = ReadyList::new(None);
        for (seq, p) in [(1, Some(1)), (2, Some(9)), (3, None)] {
            list.push_back(entry(seq, p, now));
        }
        assert_eq!(list.max_priority(), None);
        assert_eq!(drain(&mut list), [1, 2, 3]);
    }

    #[test]
    fn highest_level_first_fifo_within_capped_at_max() {
        let now = Instant::now();
        let mut list = ReadyList::new(Some(5));
        for (seq, p) in [
            (1, None),
            (2, Some(3)),
            (3, Some(9)),
            (4, Some(5)),
            (5, Some(0)),
            (6, Some(3)),
            (7, Some(200)),
        ] {
            list.push_back(entry(seq, p, now));
        }
        assert_eq!(list.len(), 7);
        assert_eq!(list.front().map(|e| e.seq), Some(3));
        assert_eq!(drain(&mut list), [3, 4, 7, 2, 6, 1, 5]);
        assert!(list.is_empty());
    }

    #[test]
    fn levels_above_63_use_the_upper_bitmap_words() {
        let now = Instant::now();
        let mut list = ReadyList::new(Some(255));
        for (seq, p) in [(1, 64u8), (2, 255), (3, 0), (4, 128), (5, 63)] {
            list.push_back(entry(seq, Some(p), now));
        }
        assert_eq!(drain(&mut list), [2, 4, 1, 5, 3]);
    }

    #[test]
    fn requeue_goes_back_by_seq_within_its_level() {
        let now = Instant::now();
        let mut list = ReadyList::new(Some(5));
        for (seq, p) in [(1, Some(1)), (2, Some(5)), (3, Some(5)), (4, Some(1))] {
            list.push_back(entry(seq, p, now));
        }
        let two = list.pop_front().expect("2");
        let three = list.pop_front().expect("3");
        let one = list.pop_front().expect("1");
        list.push_back(entry(5, Some(5), now));
        list.insert_by_seq(three);
        list.insert_by_seq(one);
        list.insert_by_seq(two);
        assert_eq!(drain(&mut list), [2, 3, 5, 1, 4]);
    }

    #[test]
    fn oldest_and_age_discards_look_at_every_level() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut list = ReadyList::new(Some(2));
        list.push_back(entry(1, Some(0), t0));
        list.push_back(entry(2, Some(2), t0 + ms(10)));
        list.push_back(entry(3, Some(1), t0 + ms(20)));
        assert_eq!(list.oldest_enqueued(), Some(stamp(t0)));
        assert_eq!(
            list.pop_older_than(stamp(t0 + ms(15))).map(|e| e.seq),
            Some(1)
        );
        assert_eq!(
            list.pop_older_than(stamp(t0 + ms(15))).map(|e| e.seq),
            Some(2)
        );
        assert!(list.pop_older_than(stamp(t0 + ms(15))).is_none());
        assert_eq!(list.oldest_enqueued(), Some(stamp(t0 + ms(20))));
        assert_eq!(list.len(), 1);
    }

    #[test]
    fn the_ledger_counts_levels_and_gives_everything_back() {
        let now = Instant::now();
        let before = ledger::snapshot().entries;
        let mut list = ReadyList::new(Some(9));
        let levels = 10 * std::mem::size_of::<VecDeque<Entry>>() as i64;
        assert_eq!(ledger::snapshot().entries - before, levels);
        for seq in 0..100 {
            list.push_back(entry(seq, Some((seq % 10) as u8), now));
        }
        assert!(ledger::snapshot().entries - before > levels);
        list.clear();
        assert_eq!(ledger::snapshot().entries - before, levels);
        drop(list);
        assert_eq!(ledger::snapshot().entries, before);
    }
}

//! Hashed timing wheel.
//!
//! Owns: the shard's armed deadlines, each with an opaque key; O(1) arm and
//! cancel; handing back expired keys when the shard advances the wheel.
//! Does not: read the clock (the shard passes `now`), run callbacks, or know
//! what a key means.
//!
//! # Shape
//!
//! Entries live in a slab and are threaded onto per-slot doubly linked
//! lists. A deadline lands in slot `tick % slots`, with `tick` the whole
//! ticks since `start`. Instead of a decrementing `rounds` counter each entry
//! keeps its absolute deadline, which tells later revolutions apart without
//! rewriting entries on every pass and lets expiry compare exact instants: a
//! timer fires on the first `advance` whose `now` is at or past its deadline,
//! never earlier and never a tick late. One extra list, the due list, holds
//! timers armed with a deadline the wheel has already passed.

use std::time::{Duration, Instant};

use slab::Slab;

/// "No entry" in the intrusive links.
const NIL: usize = usize::MAX;

/// Handle to an armed timer, for [`TimerWheel::cancel`].
///
/// Carries the arm's sequence number, so a handle whose timer has fired or
/// been cancelled stays dead even after its slab slot is reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimerId {
    index: usize,
    seq: u64,
}

/// One armed timer.
#[derive(Debug)]
struct Entry<K> {
    key: K,
    deadline: Instant,
    /// Whole ticks from `start` to `deadline`.
    tick: u64,
    seq: u64,
    /// Index into `heads` of the list holding this entry.
    list: usize,
    prev: usize,
    next: usize,
}

/// A hashed timing wheel of `slots` slots, each `tick` wide.
///
/// # Invariants
///
/// - `heads` has `slots + 1` lists: `0..slots` are wheel slots and
///   `heads[slots]` is the due list.
/// - Every entry is on exactly the list named by its `list`, linked through
///   `prev`/`next`, and `len == entries.len()`.
/// - An entry on wheel slot `s` has `tick % slots == s`, `tick >= cursor`
///   and `deadline > last_now`: everything at or before `last_now` has been
///   handed out or sits on the due list.
/// - `cursor` is the tick of `last_now`; ticks below it are fully drained.
/// - `next_seq` exceeds every `seq` ever issued.
#[derive(Debug)]
pub struct TimerWheel<K> {
    entries: Slab<Entry<K>>,
    heads: Vec<usize>,
    slots: usize,
    start: Instant,
    tick_nanos: u64,
    cursor: u64,
    last_now: Instant,
    next_seq: u64,
}

impl<K> TimerWheel<K> {
    /// Gives back vacant entry slots at the end of the arena once it is mostly empty.
    pub fn release_spare(&mut self) {
        let (len, capacity) = (self.entries.len(), self.entries.capacity());
        if capacity > 64 && len * 4 < capacity {
            self.entries.shrink_to_fit();
        }
    }

    /// A wheel whose tick 0 begins at `start`.
    ///
    /// # Panics
    ///
    /// If `tick` is zero (or under a nanosecond) or `slots` is zero: both are
    /// fixed configuration, not runtime input.
    pub fn new(start: Instant, tick: Duration, slots: usize) -> Self {
        let tick_nanos = u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX);
        assert!(tick_nanos > 0, "timer wheel tick must be positive");
        assert!(slots > 0, "timer wheel needs at least one slot");
        TimerWheel {
            entries: Slab::new(),
            heads: vec![NIL; slots + 1],
            slots,
            start,
            tick_nanos,
            cursor: 0,
            last_now: start,
            next_seq: 1,
        }
    }

    /// Number of armed timers.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn tick_of(&self, t: Instant) -> u64 {
        let nanos = t.saturating_duration_since(self.start).as_nanos();
        u64::try_from(nanos / u128::from(self.tick_nanos)).unwrap_or(u64::MAX)
    }

    fn instant_of(&self, tick: u64) -> Instant {
        let nanos = u128::from(tick) * u128::from(self.tick_nanos);
        let d = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        self.start.checked_add(d).unwrap_or(self.last_now)
    }

    fn due_list(&self) -> usize {
        self.slots
    }

    fn slot_of(&self, tick: u64) -> usize {
        // The remainder is below `slots`, which is a usize.
        (tick % self.slots as u64) as usize
    }

    /// Arms a timer for `deadline`, O(1). A deadline the wheel has already
    /// passed fires on the next [`advance`](Self::advance).
    pub fn arm(&mut self, deadline: Instant, key: K) -> TimerId {
        let tick = self.tick_of(deadline);
        let list = if deadline <= self.last_now || tick < self.cursor {
            self.due_list()
        } else {
            self.slot_of(tick)
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        let head = self.heads[list];
        let index = self.entries.insert(Entry {
            key,
            deadline,
            tick,
            seq,
            list,
            prev: NIL,
            next: head,
        });
        if head != NIL {
            self.entries[head].prev = index;
        }
        self.heads[list] = index;
        TimerId { index, seq }
    }

    /// Disarms a timer, O(1). Returns its key, or `None` if the id is stale
    /// (already fired or cancelled).
    pub fn cancel(&mut self, id: TimerId) -> Option<K> {
        match self.entries.get(id.index) {
            Some(e) if e.seq == id.seq => Some(self.unlink(id.index)),
            _ => None,
        }
    }

    /// Removes entry `index` from its list and the slab.
    fn unlink(&mut self, index: usize) -> K {
        let e = self.entries.remove(index);
        if e.prev == NIL {
            self.heads[e.list] = e.next;
        } else {
            self.entries[e.prev].next = e.next;
        }
        if e.next != NIL {
            self.entries[e.next].prev = e.prev;
        }
        e.key
    }

    /// Moves the wheel to `now` and pushes onto `expired` the key of every
    /// timer whose deadline is at or before `now`.
    ///
    /// Each slot is scanned at most once per call, so a jump of many
    /// revolutions costs O(slots + timers), not O(ticks). Keys come out
    /// overdue ones first, then in tick order when the jump is shorter than
    /// one revolution; within a tick, and across a longer jump, order is
    /// unspecified. A `now` earlier than a previous one is treated as that
    /// previous one.
    pub fn advance(&mut self, now: Instant, expired: &mut Vec<K>) {
        let due = self.due_list();
        while self.heads[due] != NIL {
            let index = self.heads[due];
            expired.push(self.unlink(index));
        }
        let now = now.max(self.last_now);
        self.last_now = now;
        let now_tick = self.tick_of(now);
        let span = now_tick - self.cursor; // cursor <= tick of last_now <= now_tick
        let first = self.slot_of(self.cursor);
        let count = if span >= self.slots as u64 {
            self.slots
        } else {
            span as usize + 1 // the partial tick `now_tick` included
        };
        for step in 0..count {
            let slot = (first + step) % self.slots;
            self.expire_slot(slot, now, expired);
        }
        self.cursor = now_tick;
    }

    fn expire_slot(&mut self, slot: usize, now: Instant, expired: &mut Vec<K>) {
        let mut index = self.heads[slot];
        while index != NIL {
            let e = &self.entries[index];
            let next = e.next;
            if e.deadline <= now {
                expired.push(self.unlink(index));
            }
            index = next;
        }
    }

    /// A lower bound on the earliest armed deadline, or `None` if nothing is
    /// armed.
    ///
    /// Never later than the true earliest deadline. It is exact when that
    /// deadline lies within one revolution of the wheel's position (or is
    /// overdue); otherwise it is the end of that revolution, so a loop
    /// sleeping until it wakes at most once per revolution for nothing.
    /// Cost: O(slots + timers in the scanned slots).
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.entries.is_empty() {
            return None;
        }
        if let Some(d) = self.min_deadline(self.due_list(), None) {
            return Some(d);
        }
        for tick in self.cursor..self.cursor.saturating_add(self.slots as u64) {
            if let Some(d) = self.min_deadline(self.slot_of(tick), Some(tick)) {
                return Some(d);
            }
        }
        let horizon = self.cursor.saturating_add(self.slots as u64);
        Some(self.instant_of(horizon))
    }

    /// Earliest deadline on `list`, among entries of tick `only` if given.
    fn min_deadline(&self, list: usize, only: Option<u64>) -> Option<Instant> {
        let mut best: Option<Instant> = None;
        let mut index = self.heads[list];
        while index != NIL {
            let e = &self.entries[index];
            if only.is_none_or(|t| t == e.tick) {
                best = Some(best.map_or(e.deadline, |b| b.min(e.deadline)));
            }
            index = e.next;
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const TICK: Duration = Duration::from_millis(10);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn wheel(slots: usize) -> (Instant, TimerWheel<u32>) {
        let t0 = Instant::now();
        (t0, TimerWheel::new(t0, TICK, slots))
    }

    fn advance(w: &mut TimerWheel<u32>, now: Instant) -> Vec<u32> {
        let mut out = Vec::new();
        w.advance(now, &mut out);
        out
    }

    #[test]
    fn fires_in_order_and_never_early() {
        let (t0, mut w) = wheel(8);
        w.arm(t0 + ms(35), 3);
        w.arm(t0 + ms(5), 1);
        w.arm(t0 + ms(20), 2);
        assert_eq!(w.len(), 3);
        assert_eq!(advance(&mut w, t0 + ms(4)), Vec::<u32>::new());
        assert_eq!(advance(&mut w, t0 + ms(5)), vec![1]);
        assert_eq!(advance(&mut w, t0 + ms(19)), Vec::<u32>::new());
        assert_eq!(advance(&mut w, t0 + ms(34)), vec![2]);
        assert_eq!(advance(&mut w, t0 + ms(35)), vec![3]);
        assert!(w.is_empty());

        w.arm(t0 + ms(60), 6);
        w.arm(t0 + ms(45), 4);
        w.arm(t0 + ms(50), 5);
        assert_eq!(advance(&mut w, t0 + ms(70)), vec![4, 5, 6]);
    }

    #[test]
    fn past_deadline_fires_on_next_advance() {
        let (t0, mut w) = wheel(8);
        advance(&mut w, t0 + ms(100));
        w.arm(t0 + ms(50), 1);
        w.arm(t0 + ms(100), 2);
        assert_eq!(w.next_deadline(), Some(t0 + ms(50)));
        let mut got = advance(&mut w, t0 + ms(100));
        got.sort_unstable();
        assert_eq!(got, vec![1, 2]);
    }

    #[test]
    fn cancel_before_fire_and_stale_ids() {
        let (t0, mut w) = wheel(8);
        let a = w.arm(t0 + ms(30), 1);
        let b = w.arm(t0 + ms(30), 2);
        assert_eq!(w.cancel(a), Some(1));
        assert_eq!(w.cancel(a), None, "double cancel");
        assert_eq!(advance(&mut w, t0 + ms(30)), vec![2]);
        assert_eq!(w.cancel(b), None, "cancel after fire");
        // A freed slab slot gets reused; the old ids must stay dead.
        let c = w.arm(t0 + ms(90), 3);
        assert!(c.index == a.index || c.index == b.index);
        assert_eq!(w.cancel(a), None);
        assert_eq!(w.cancel(b), None);
        assert_eq!(w.cancel(c), Some(3));
        assert!(w.is_empty());
        assert_eq!(w.next_deadline(), None);
    }

    #[test]
    fn timers_many_revolutions_out() {
        let (t0, mut w) = wheel(4); // one revolution = 40 ms
        w.arm(t0 + ms(15), 1);
        w.arm(t0 + ms(55), 2); // same slot, next revolution
        w.arm(t0 + ms(415), 3); // same slot, ten revolutions out
        let mut now = t0;
        let mut fired = Vec::new();
        while !w.is_empty() {
            now += ms(5);
            for k in advance(&mut w, now) {
                fired.push((k, now - t0));
            }
        }
        assert_eq!(fired, vec![(1, ms(15)), (2, ms(55)), (3, ms(415))]);
    }

    #[test]
    fn large_jump_scans_each_slot_once() {
        let (t0, mut w) = wheel(16);
        for i in 0..100u32 {
            w.arm(t0 + ms(u64::from(i) * 37), i);
        }
        let far = w.arm(t0 + Duration::from_secs(3600), 999);
        let mut got = advance(&mut w, t0 + Duration::from_secs(1000));
        got.sort_unstable();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        assert_eq!(w.len(), 1);
        assert!(w
            .next_deadline()
            .is_some_and(|d| d <= t0 + Duration::from_secs(3600)));
        assert_eq!(w.cancel(far), Some(999));
    }

    #[test]
    fn rearm_from_expired_loop() {
        let (t0, mut w) = wheel(8);
        w.arm(t0 + ms(10), 1);
        let mut now = t0;
        let mut fires = Vec::new();
        for _ in 0..20 {
            now += ms(5);
            let mut expired = Vec::new();
            w.advance(now, &mut expired);
            for k in expired {
                fires.push(now - t0);
                // A periodic timer: re-arm 25 ms later, as a heartbeat would.
                w.arm(now + ms(25), k);
            }
        }
        assert_eq!(fires, vec![ms(10), ms(35), ms(60), ms(85)]);
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn next_deadline_is_a_lower_bound() {
        let (t0, mut w) = wheel(8);
        assert_eq!(w.next_deadline(), None);
        w.arm(t0 + ms(47), 1);
        w.arm(t0 + ms(23), 2);
        assert_eq!(w.next_deadline(), Some(t0 + ms(23)));
        w.arm(t0 + ms(500), 3);
        advance(&mut w, t0 + ms(47));
        // 500 ms is beyond one 80 ms revolution: a lower bound comes back.
        let d = w.next_deadline();
        assert!(d.is_some_and(|d| d > t0 + ms(47) && d <= t0 + ms(500)));
    }

    struct XorShift(u64);

    impl XorShift {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    #[test]
    fn random_timers_match_reference() {
        let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
        let (t0, mut w) = wheel(64);
        let mut reference: BTreeMap<(Instant, u32), TimerId> = BTreeMap::new();
        let mut ids: Vec<(TimerId, Instant, u32)> = Vec::new();
        let mut now = t0;
        let mut fired_total = 0usize;
        for key in 0..100_000u32 {
            // Deadlines from slightly overdue to several revolutions out.
            let offset = rng.below(3_000);
            let deadline = (now + ms(offset)).checked_sub(ms(20)).unwrap_or(now);
            let id = w.arm(deadline, key);
            reference.insert((deadline, key), id);
            ids.push((id, deadline, key));
            if rng.below(4) == 0 {
                let pick = rng.below(ids.len() as u64) as usize;
                let (id, deadline, k) = ids.swap_remove(pick);
                let live = reference.remove(&(deadline, k)).is_some();
                assert_eq!(w.cancel(id), live.then_some(k));
            }
            if rng.below(8) == 0 {
                now += Duration::from_micros(rng.below(if key % 5000 == 0 {
                    10_000_000
                } else {
                    20_000
                }));
                let mut got = Vec::new();
                w.advance(now, &mut got);
                got.sort_unstable();
                let keep = reference.split_off(&(now + Duration::from_nanos(1), 0));
                let mut want: Vec<u32> = reference.keys().map(|&(_, k)| k).collect();
                want.sort_unstable();
                reference = keep;
                assert_eq!(got, want, "at {:?}", now - t0);
                fired_total += got.len();
                assert_eq!(w.len(), reference.len());
                if let (Some(bound), Some(&(first, _))) =
                    (w.next_deadline(), reference.keys().next())
                {
                    assert!(bound <= first, "next_deadline later than earliest");
                }
            }
        }
        assert!(fired_total > 10_000);
    }
}

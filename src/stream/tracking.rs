//! Owns: a stream's offset-tracking table — per consumer tag, the highest offset that
//! consumer acknowledged — which entries changed since they were last written (an
//! update record in the next chunk's write), and the bound on its size.
//!
//! Does not: encode records (`store::stream_log`) or decide which consumers track
//! (`policy::stream_args::ConsumerArgs::tracks`).
//!
//! # Invariants
//! - `dirty` lists each tag at most once, and only tags in `table`.

use std::collections::HashMap;

use crate::protocol::ShortStr;

/// One tracked consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tracked {
    offset: u64,
    /// When it was last updated (a counter): the least recent goes first when the
    /// table is full.
    touched: u64,
    dirty: bool,
}

/// The table.
#[derive(Debug)]
pub struct Tracking {
    table: HashMap<ShortStr, Tracked>,
    dirty: Vec<ShortStr>,
    clock: u64,
    max: usize,
}

impl Tracking {
    /// An empty table of at most `max` tags.
    pub fn new(max: usize) -> Tracking {
        Tracking {
            table: HashMap::new(),
            dirty: Vec::new(),
            clock: 0,
            max: max.max(1),
        }
    }

    /// The offset `tag` acknowledged last, if tracked.
    pub fn get(&self, tag: &ShortStr) -> Option<u64> {
        self.table.get(tag).map(|t| t.offset)
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// `tag` acknowledged `offset`: kept if it is higher than what is tracked. Returns
    /// whether the table changed.
    pub fn ack(&mut self, tag: &ShortStr, offset: u64) -> bool {
        self.clock += 1;
        let clock = self.clock;
        if let Some(t) = self.table.get_mut(tag) {
            if offset <= t.offset {
                return false;
            }
            t.offset = offset;
            t.touched = clock;
            if !t.dirty {
                t.dirty = true;
                self.dirty.push(tag.clone());
            }
            return true;
        }
        if self.table.len() >= self.max {
            self.evict_least_recent();
        }
        self.table.insert(
            tag.clone(),
            Tracked {
                offset,
                touched: clock,
                dirty: true,
            },
        );
        self.dirty.push(tag.clone());
        true
    }

    fn evict_least_recent(&mut self) {
        let Some(oldest) = self
            .table
            .iter()
            .min_by_key(|(_, t)| t.touched)
            .map(|(k, _)| k.clone())
        else {
            return;
        };
        self.table.remove(&oldest);
        self.dirty.retain(|d| *d != oldest);
    }

    /// Puts a recovered record's entries back (a snapshot replaces the table).
    pub fn restore(&mut self, snapshot: bool, entries: Vec<(ShortStr, u64)>) {
        if snapshot {
            self.table.clear();
        }
        for (tag, offset) in entries {
            self.clock += 1;
            let touched = self.clock;
            self.table.insert(
                tag,
                Tracked {
                    offset,
                    touched,
                    dirty: false,
                },
            );
        }
        self.dirty.clear();
    }

    /// Whether an update waits to be written.
    pub fn has_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// Whether `tag`'s latest offset waits to be written.
    pub fn is_dirty(&self, tag: &ShortStr) -> bool {
        self.table.get(tag).is_some_and(|t| t.dirty)
    }

    /// The changed entries, marked written.
    pub fn take_dirty(&mut self) -> Vec<(ShortStr, u64)> {
        let mut out = Vec::with_capacity(self.dirty.len());
        for tag in self.dirty.drain(..) {
            if let Some(t) = self.table.get_mut(&tag) {
                t.dirty = false;
                out.push((tag, t.offset));
            }
        }
        out
    }

    /// Every entry (the snapshot at a segment's start), marked written.
    pub fn snapshot(&mut self) -> Vec<(ShortStr, u64)> {
        self.dirty.clear();
        self.table
            .iter_mut()
            .map(|(k, t)| {
                t.dirty = false;
                (k.clone(), t.offset)
            })
            .collect()
    }

    /// A write that held these entries failed: they are written again next time.
    pub fn unwritten(&mut self, entries: &[(ShortStr, u64)]) {
        for (tag, _) in entries {
            if let Some(t) = self.table.get_mut(tag) {
                if !t.dirty {
                    t.dirty = true;
                    self.dirty.push(tag.clone());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_ack_is_kept_and_written_once() {
        let mut t = Tracking::new(10);
        let a: ShortStr = "a".into();
        assert!(t.ack(&a, 5));
        assert!(!t.ack(&a, 3), "a lower ack changes nothing");
        assert!(t.ack(&a, 9));
        assert_eq!(t.take_dirty(), vec![(a.clone(), 9)]);
        assert!(!t.has_dirty());
        assert_eq!(t.get(&a), Some(9));
        t.unwritten(&[(a.clone(), 9)]);
        assert!(t.is_dirty(&a));
    }

    #[test]
    fn a_full_table_drops_the_least_recently_updated() {
        let mut t = Tracking::new(2);
        t.ack(&"a".into(), 1);
        t.ack(&"b".into(), 1);
        t.ack(&"a".into(), 2);
        t.ack(&"c".into(), 1);
        assert_eq!(t.get(&"b".into()), None);
        assert_eq!(t.get(&"a".into()), Some(2));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_snapshot_replaces_the_table() {
        let mut t = Tracking::new(10);
        t.restore(false, vec![("a".into(), 1), ("b".into(), 2)]);
        t.restore(true, vec![("b".into(), 3)]);
        assert_eq!(t.get(&"a".into()), None);
        assert_eq!(t.get(&"b".into()), Some(3));
        assert!(!t.has_dirty());
    }
}

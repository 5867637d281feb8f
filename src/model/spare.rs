//! Owns: [`SpareLists`], emptied lists a thread keeps to lend to the next owner that
//! needs one — for per-connection lists that are empty again after every write (a
//! connection's deferred deliveries and its no-ack write marks). Each user keeps its own
//! in a `thread_local!` (a shard is one thread). The write pass fills, writes and empties
//! one connection after another, so a few spares serve 10,000 subscribers, which then
//! hold lists only while they have something waiting, not each one its own for good
//! (issue 23). Where many owners fill their lists at once (a turn's dispatch to
//! thousands of consumers), the spares are soon full and the rest keep their own, as
//! before: nothing is freed only to be allocated again next turn.
//!
//! Does not: decide when a list is empty or used (its owner does), or share across
//! threads.

use std::collections::VecDeque;

/// At most this many lists are kept.
const SPARE_MAX: usize = 64;

/// A longer emptied list is not taken as a spare (it stays with its owner).
const SPARE_CAPACITY_MAX: usize = 256;

/// Emptied lists, lent out again.
pub struct SpareLists<T> {
    lists: Vec<VecDeque<T>>,
}

impl<T> Default for SpareLists<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> SpareLists<T> {
    pub const fn new() -> Self {
        SpareLists { lists: Vec::new() }
    }

    /// Gives `list` a spare's room when it has none.
    #[inline]
    pub fn lend(&mut self, list: &mut VecDeque<T>) {
        if list.capacity() == 0 {
            if let Some(spare) = self.lists.pop() {
                *list = spare;
            }
        }
    }

    /// Takes an emptied `list`'s room as a spare while there is room for one; a list
    /// that still holds items, is long, or finds the spares full stays as it is.
    pub fn give_back(&mut self, list: &mut VecDeque<T>) {
        let capacity = list.capacity();
        if capacity == 0
            || capacity > SPARE_CAPACITY_MAX
            || !list.is_empty()
            || self.lists.len() >= SPARE_MAX
        {
            return;
        }
        self.lists.push(std::mem::take(list));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emptied_list_is_lent_to_the_next_owner() {
        let mut spares = SpareLists::new();
        let mut first: VecDeque<u64> = VecDeque::with_capacity(8);
        first.push_back(1);
        first.clear();
        let room = first.capacity();
        spares.give_back(&mut first);
        assert_eq!(first.capacity(), 0, "the emptied owner holds nothing");
        let mut second = VecDeque::new();
        spares.lend(&mut second);
        assert_eq!(second.capacity(), room);
        let mut third: VecDeque<u64> = VecDeque::new();
        spares.lend(&mut third);
        assert_eq!(third.capacity(), 0, "one spare, lent once");
    }

    #[test]
    fn spares_are_bounded_and_the_rest_stay_with_their_owners() {
        let mut spares = SpareLists::new();
        let mut big: VecDeque<u64> = VecDeque::with_capacity(SPARE_CAPACITY_MAX * 2);
        spares.give_back(&mut big);
        assert!(
            big.capacity() > SPARE_CAPACITY_MAX,
            "a long list stays with its owner"
        );
        assert!(spares.lists.is_empty());
        let mut owners: Vec<VecDeque<u64>> = (0..SPARE_MAX + 10)
            .map(|_| VecDeque::with_capacity(4))
            .collect();
        for l in &mut owners {
            spares.give_back(l);
        }
        assert_eq!(spares.lists.len(), SPARE_MAX);
        assert!(owners[..SPARE_MAX].iter().all(|l| l.capacity() == 0));
        assert!(
            owners[SPARE_MAX..].iter().all(|l| l.capacity() >= 4),
            "the spares full, the others keep their room: nothing freed to be allocated again"
        );
    }

    #[test]
    fn a_list_still_holding_items_is_not_taken() {
        let mut spares = SpareLists::new();
        let mut list: VecDeque<u64> = VecDeque::with_capacity(4);
        list.push_back(7);
        spares.give_back(&mut list);
        assert_eq!(list.len(), 1);
        assert_eq!(spares.lists.len(), 0);
    }
}

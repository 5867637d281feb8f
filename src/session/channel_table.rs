//! Owns: [`ChannelTable`], a connection's open channels by number. Most connections
//! have one channel (a subscriber's, a publisher's), and every delivery, publish and
//! acknowledgement looks its channel up, so they are kept in a list sorted by number
//! with the first one inline: one comparison finds a connection's only channel, where
//! a hash table hashed the number and probed its groups (two lookups per delivery at
//! 1,000 subscribers were ~50 instructions), and held a ~100-byte allocation per
//! connection. Many channels (up to `channel_max`) are found by binary search; opening
//! and closing one moves the entries after it, which a channel's open and close
//! handshakes, not the delivery path, pay for.
//!
//! Does not: open, close or limit channels (the connection handler does).

use smallvec::SmallVec;

use super::channel::Channel;

/// A connection's channels, sorted by number.
#[derive(Debug, Default)]
pub struct ChannelTable {
    list: SmallVec<[(u16, Box<Channel>); 1]>,
}

impl ChannelTable {
    fn position(&self, number: u16) -> Result<usize, usize> {
        match self.list.as_slice() {
            [(only, _)] if *only == number => Ok(0),
            [(only, _)] => Err(usize::from(*only < number)),
            list => list.binary_search_by_key(&number, |(n, _)| *n),
        }
    }

    pub fn get(&self, number: &u16) -> Option<&Channel> {
        self.position(*number).ok().map(|i| &*self.list[i].1)
    }

    pub fn get_mut(&mut self, number: &u16) -> Option<&mut Channel> {
        self.position(*number).ok().map(|i| &mut *self.list[i].1)
    }

    pub fn contains_key(&self, number: &u16) -> bool {
        self.position(*number).is_ok()
    }

    /// Adds the channel under `number`; the one it replaces, if any.
    pub fn insert(&mut self, number: u16, channel: Box<Channel>) -> Option<Box<Channel>> {
        match self.position(number) {
            Ok(i) => Some(std::mem::replace(&mut self.list[i].1, channel)),
            Err(at) => {
                self.list.insert(at, (number, channel));
                None
            }
        }
    }

    pub fn remove(&mut self, number: &u16) -> Option<Box<Channel>> {
        let i = self.position(*number).ok()?;
        let (_, channel) = self.list.remove(i);
        if self.list.is_empty() && self.list.spilled() {
            self.list = SmallVec::new();
        }
        Some(channel)
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The channel numbers, ascending.
    pub fn keys(&self) -> impl Iterator<Item = &u16> + '_ {
        self.list.iter().map(|(n, _)| n)
    }

    /// The channels by ascending number.
    pub fn values(&self) -> impl Iterator<Item = &Channel> + '_ {
        self.list.iter().map(|(_, ch)| &**ch)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Channel> + '_ {
        self.list.iter_mut().map(|(_, ch)| &mut **ch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(numbers: &[u16]) -> ChannelTable {
        let mut t = ChannelTable::default();
        for &n in numbers {
            assert!(t
                .insert(n, Box::new(Channel::new(n, u32::from(n))))
                .is_none());
        }
        t
    }

    #[test]
    fn finds_each_channel_by_number_in_any_insertion_order() {
        let t = table(&[7, 1, 300, 2, 65535, 5]);
        assert_eq!(
            t.keys().copied().collect::<Vec<_>>(),
            vec![1, 2, 5, 7, 300, 65535]
        );
        for n in [1u16, 2, 5, 7, 300, 65535] {
            assert_eq!(t.get(&n).map(|ch| ch.epoch), Some(u32::from(n)), "{n}");
        }
        for n in [0u16, 3, 6, 8, 299, 65534] {
            assert!(t.get(&n).is_none() && !t.contains_key(&n), "{n}");
        }
        assert_eq!(t.values().count(), 6);
    }

    #[test]
    fn one_channel_is_found_and_missed_either_side() {
        let mut t = table(&[5]);
        assert!(t.get(&5).is_some());
        assert!(t.get(&4).is_none() && t.get(&6).is_none());
        // Inserting below and above the only channel keeps the order.
        assert!(t.insert(3, Box::new(Channel::new(3, 30))).is_none());
        assert!(t.insert(9, Box::new(Channel::new(9, 90))).is_none());
        assert_eq!(t.keys().copied().collect::<Vec<_>>(), vec![3, 5, 9]);
    }

    #[test]
    fn replacing_and_removing_keep_the_rest() {
        let mut t = table(&[1, 2, 3]);
        let old = t.insert(2, Box::new(Channel::new(2, 99)));
        assert_eq!(old.map(|ch| ch.epoch), Some(2));
        assert_eq!(t.get(&2).map(|ch| ch.epoch), Some(99));
        assert_eq!(t.remove(&2).map(|ch| ch.epoch), Some(99));
        assert!(t.remove(&2).is_none());
        assert_eq!(t.keys().copied().collect::<Vec<_>>(), vec![1, 3]);
        for ch in t.values_mut() {
            ch.epoch += 1;
        }
        assert_eq!(t.get(&3).map(|ch| ch.epoch), Some(4));
        t.remove(&1);
        t.remove(&3);
        assert!(t.is_empty());
        assert_eq!(t.len(), 0);
        assert!(
            !t.list.spilled(),
            "an emptied table gives its allocation back"
        );
    }
}

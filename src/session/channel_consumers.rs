//! Owns: [`ChannelConsumers`], a channel's consumers by their channel-local id and by
//! tag. Most channels have one consumer (a subscriber's), so they are kept in a list
//! sorted by id (ids only grow: a new consumer is appended) that a delivery finds by
//! binary search, allocated one slot at a time while it is short; the tag index is a
//! hash map built only once a channel has more than [`TAG_INDEX_FROM`] consumers (below
//! that a cancel or a duplicate-tag check reads the list). Two hash tables per
//! one-consumer channel were half a KiB per subscriber (issue 23).
//!
//! Does not: decide credit or anything else about a consumer (`session::consumer`).

use std::collections::HashMap;

use super::consumer::ChannelConsumer;
use crate::protocol::ShortStr;

/// Consumers on one channel beyond which tags are indexed in a hash map.
const TAG_INDEX_FROM: usize = 8;

/// A channel's consumers, by id and by tag.
#[derive(Debug, Default)]
pub struct ChannelConsumers {
    /// Sorted by id.
    list: Vec<(u32, ChannelConsumer)>,
    /// Tag → id, while the list is longer than `TAG_INDEX_FROM`; boxed, as an absent box
    /// is 8 bytes where an absent map is 48.
    #[allow(clippy::box_collection)]
    by_tag: Option<Box<HashMap<ShortStr, u32>>>,
}

impl ChannelConsumers {
    fn position(&self, id: u32) -> Result<usize, usize> {
        self.list.binary_search_by_key(&id, |(k, _)| *k)
    }

    pub fn get(&self, id: &u32) -> Option<&ChannelConsumer> {
        self.position(*id).ok().map(|i| &self.list[i].1)
    }

    pub fn get_mut(&mut self, id: &u32) -> Option<&mut ChannelConsumer> {
        self.position(*id).ok().map(|i| &mut self.list[i].1)
    }

    pub fn contains_key(&self, id: &u32) -> bool {
        self.position(*id).is_ok()
    }

    /// The id of the consumer with this tag (the newest, should two share it).
    pub fn by_tag(&self, tag: &ShortStr) -> Option<u32> {
        match &self.by_tag {
            Some(index) => index.get(tag).copied(),
            None => self
                .list
                .iter()
                .rfind(|(_, c)| &c.tag == tag)
                .map(|(id, _)| *id),
        }
    }

    /// Adds (or replaces) the consumer with this id; a tag already indexed now names it.
    pub fn insert(&mut self, id: u32, consumer: ChannelConsumer) {
        let at = match self.position(id) {
            Ok(i) => {
                let old = std::mem::replace(&mut self.list[i].1, consumer);
                if let Some(index) = self.by_tag.as_mut() {
                    // The replaced consumer's tag no longer names this id.
                    if index.get(&old.tag) == Some(&id) {
                        index.remove(&old.tag);
                    }
                    index.insert(self.list[i].1.tag.clone(), id);
                }
                return;
            }
            Err(at) => at,
        };
        if let Some(index) = self.by_tag.as_mut() {
            index.insert(consumer.tag.clone(), id);
        }
        crate::model::reserve_from_one(&mut self.list);
        self.list.insert(at, (id, consumer));
        if self.by_tag.is_none() && self.list.len() > TAG_INDEX_FROM {
            let index = self.list.iter().map(|(id, c)| (c.tag.clone(), *id));
            self.by_tag = Some(Box::new(index.collect()));
        }
    }

    /// Removes the consumer with this id; its tag is forgotten if it names this one.
    pub fn remove(&mut self, id: &u32) -> Option<ChannelConsumer> {
        let i = self.position(*id).ok()?;
        let (_, consumer) = self.list.remove(i);
        if let Some(index) = self.by_tag.as_mut() {
            if index.get(&consumer.tag) == Some(id) {
                index.remove(&consumer.tag);
            }
        }
        if self.list.is_empty() {
            *self = ChannelConsumers::default();
        }
        Some(consumer)
    }

    /// Removes every consumer, in id order.
    pub fn drain(&mut self) -> impl Iterator<Item = (u32, ChannelConsumer)> {
        std::mem::take(self).list.into_iter()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn keys(&self) -> impl Iterator<Item = &u32> {
        self.list.iter().map(|(id, _)| id)
    }

    pub fn values(&self) -> impl Iterator<Item = &ChannelConsumer> {
        self.list.iter().map(|(_, c)| c)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut ChannelConsumer> {
        self.list.iter_mut().map(|(_, c)| c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::{QueueId, QueueRef};

    fn consumer(tag: &str) -> ChannelConsumer {
        let queue = QueueRef {
            id: QueueId(1),
            home: 0,
        };
        ChannelConsumer::new(tag.into(), queue, true, 0)
    }

    /// Consumers `1..=count` tagged `t1`, `t2`, ….
    fn tagged(count: u32) -> ChannelConsumers {
        let mut all = ChannelConsumers::default();
        for id in 1..=count {
            all.insert(id, consumer(&format!("t{id}")));
        }
        all
    }

    #[test]
    fn one_consumer_takes_one_slot() {
        let mut all = ChannelConsumers::default();
        all.insert(1, consumer("a"));
        assert_eq!(all.list.capacity(), 1);
        assert!(all.by_tag.is_none());
        assert_eq!(all.by_tag(&"a".into()), Some(1));
        assert_eq!(all.get(&1).map(|c| c.tag.clone()), Some("a".into()));
        assert!(all.get(&2).is_none());
    }

    #[test]
    fn found_by_id_and_tag_below_and_above_the_index() {
        let mut all = ChannelConsumers::default();
        for id in 1..=40u32 {
            all.insert(id, consumer(&format!("t{id}")));
            for probe in 1..=id {
                assert_eq!(
                    all.by_tag(&format!("t{probe}").as_str().into()),
                    Some(probe)
                );
                assert!(all.contains_key(&probe));
            }
        }
        assert!(all.by_tag.is_some());
        assert_eq!(all.remove(&7).map(|c| c.tag), Some("t7".into()));
        assert_eq!(all.by_tag(&"t7".into()), None);
        assert!(all.get(&7).is_none());
        assert_eq!(all.len(), 39);
        let ids: Vec<u32> = all.keys().copied().collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        assert_eq!(ids, sorted, "kept in id order");
        let drained: Vec<u32> = all.drain().map(|(id, _)| id).collect();
        assert_eq!(drained, sorted);
        assert!(all.is_empty());
        assert!(all.by_tag(&"t1".into()).is_none());
    }

    #[test]
    fn a_replaced_consumer_takes_its_old_tag_with_it() {
        for count in [2u32, 10] {
            let mut all = tagged(count);
            all.insert(2, consumer("renamed"));
            assert_eq!(all.by_tag(&"t2".into()), None);
            assert_eq!(all.by_tag(&"renamed".into()), Some(2));
            assert_eq!(all.len(), count as usize);
        }
    }

    #[test]
    fn a_shared_tag_names_the_newest_consumer_in_both_forms() {
        for before in [2u32, 10] {
            let mut all = tagged(before);
            all.insert(before + 1, consumer("t1"));
            assert_eq!(all.by_tag(&"t1".into()), Some(before + 1));
            // The older consumer's removal does not forget the newer one's tag.
            all.remove(&1);
            assert_eq!(all.by_tag(&"t1".into()), Some(before + 1));
        }
    }
}

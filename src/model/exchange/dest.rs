//! Owns: the bindings from one exchange to one destination (a queue, or another
//! exchange) — a list, and, once the destination has more than [`INDEX_FROM`] of them,
//! an index from routing key to positions in the list — so that checking, adding and
//! removing one binding cost O(1) expected however many bindings the destination
//! already has (one queue bound 100,000 times with distinct keys, issue 18).
//!
//! Does not: match routing keys (the exchange's matcher does), or keep an order: a
//! removal may move the last binding into the hole.
//!
//! # Invariants
//! - `list` holds no binding twice (the caller checks with [`DestBindings::contains`]
//!   before [`DestBindings::push`]).
//! - With `by_key`, `by_key[k]` holds exactly the positions in `list` of the bindings
//!   with routing key `k`, and no key maps to an empty set.
//! - `by_key` exists while `list` holds more than `INDEX_FROM / 2` bindings and is
//!   built once it holds more than `INDEX_FROM` (hysteresis, so a destination hovering
//!   at the threshold does not rebuild it on every change).

use std::collections::HashMap;

use bytes::Bytes;
use smallvec::SmallVec;

use super::routes::BindingKey;

/// A destination with more bindings than this gets its routing-key index; below it a
/// scan of the list is cheaper than hashing.
pub const INDEX_FROM: usize = 8;

/// One destination's bindings (see the module doc).
pub struct DestBindings<B> {
    list: SmallVec<[B; 1]>,
    /// Boxed: most destinations have one binding and no index, and an absent box is 8
    /// bytes where an absent map is 48 (issue 23).
    #[allow(clippy::box_collection)]
    by_key: Option<Box<HashMap<Bytes, SmallVec<[usize; 1]>>>>,
}

impl<B> Default for DestBindings<B> {
    fn default() -> Self {
        DestBindings {
            list: SmallVec::new(),
            by_key: None,
        }
    }
}

impl<B: BindingKey> DestBindings<B> {
    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn as_slice(&self) -> &[B] {
        &self.list
    }

    /// Where `binding` is in the list.
    fn position(&self, binding: &B) -> Option<usize> {
        match &self.by_key {
            Some(index) => index
                .get(binding.routing_key().as_bytes())?
                .iter()
                .copied()
                .find(|&at| self.list.get(at) == Some(binding)),
            None => self.list.iter().position(|b| b == binding),
        }
    }

    pub fn contains(&self, binding: &B) -> bool {
        self.position(binding).is_some()
    }

    /// Whether a binding with this routing key is here (whatever its arguments).
    pub fn has_key(&self, key: &[u8]) -> bool {
        match &self.by_key {
            Some(index) => index.contains_key(key),
            None => self.list.iter().any(|b| b.routing_key().as_bytes() == key),
        }
    }

    /// Adds a binding that is not here yet.
    pub fn push(&mut self, binding: B) {
        debug_assert!(
            !self.contains(&binding),
            "a destination's bindings are unique"
        );
        let at = self.list.len();
        if let Some(index) = &mut self.by_key {
            let key = binding.routing_key().clone().into_bytes();
            index.entry(key).or_default().push(at);
        }
        self.list.push(binding);
        if self.by_key.is_none() && self.list.len() > INDEX_FROM {
            self.build_index();
        }
    }

    fn build_index(&mut self) {
        let mut index: HashMap<Bytes, SmallVec<[usize; 1]>> =
            HashMap::with_capacity(self.list.len());
        for (at, b) in self.list.iter().enumerate() {
            let key = b.routing_key().clone().into_bytes();
            index.entry(key).or_default().push(at);
        }
        self.by_key = Some(Box::new(index));
    }

    /// Removes a binding. Returns whether it was here.
    pub fn remove(&mut self, binding: &B) -> bool {
        let Some(at) = self.position(binding) else {
            return false;
        };
        let Some(index) = &mut self.by_key else {
            self.list.remove(at);
            return true;
        };
        let last = self.list.len() - 1;
        forget_position(index, binding.routing_key().as_bytes(), at);
        if at != last {
            // The last binding moves into the hole.
            if let Some(moved) = self.list.get(last) {
                if let Some(slots) = index.get_mut(moved.routing_key().as_bytes()) {
                    for slot in slots.iter_mut().filter(|s| **s == last) {
                        *slot = at;
                    }
                }
            }
        }
        self.list.swap_remove(at);
        if self.list.len() <= INDEX_FROM / 2 {
            self.by_key = None;
        } else if super::super::worth_shrinking(self.list.len(), self.list.capacity()) {
            // Amortised O(1): the next shrink comes only after three quarters went.
            self.list.shrink_to_fit();
            index.shrink_to_fit();
        }
        true
    }
}

/// Drops position `at` from key `key`'s set, and the key with its last position.
fn forget_position(index: &mut HashMap<Bytes, SmallVec<[usize; 1]>>, key: &[u8], at: usize) {
    let Some(slots) = index.get_mut(key) else {
        return;
    };
    slots.retain(|s| *s != at);
    if slots.is_empty() {
        index.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::exchange::ExchangeBinding;
    use crate::protocol::{FieldTable, FieldValue, ShortStr};

    fn b(key: &str, arg: Option<i64>) -> ExchangeBinding {
        let mut arguments = FieldTable::default();
        if let Some(v) = arg {
            arguments.insert(ShortStr::from("x"), FieldValue::I64(v));
        }
        ExchangeBinding {
            destination: "d".into(),
            routing_key: key.into(),
            arguments,
        }
    }

    /// The index agrees with the list after every step of a long mixed sequence.
    fn check(d: &DestBindings<ExchangeBinding>) {
        let Some(index) = &d.by_key else {
            assert!(
                d.len() <= INDEX_FROM,
                "{} bindings without an index",
                d.len()
            );
            return;
        };
        let mut seen = 0;
        for (key, slots) in index.iter() {
            assert!(!slots.is_empty());
            for &at in slots {
                assert_eq!(d.list[at].routing_key.as_bytes(), &key[..]);
                seen += 1;
            }
        }
        assert_eq!(seen, d.len());
    }

    #[test]
    fn add_remove_many_with_shared_keys() {
        let mut d = DestBindings::default();
        for i in 0..2_000 {
            let binding = b(&format!("k.{}", i % 700), Some(i / 700));
            assert!(!d.contains(&binding));
            d.push(binding);
            if i % 97 == 0 {
                check(&d);
            }
        }
        assert_eq!(d.len(), 2_000);
        assert!(d.contains(&b("k.5", Some(2))));
        assert!(!d.contains(&b("k.5", Some(3))));
        assert!(!d.contains(&b("k.5", None)));
        assert!(d.has_key(b"k.699"));
        assert!(!d.has_key(b"k.700"));
        // Remove the middle generation of every key: the others stay findable.
        for i in 0..700 {
            assert!(d.remove(&b(&format!("k.{i}"), Some(1))));
            assert!(!d.remove(&b(&format!("k.{i}"), Some(1))));
        }
        check(&d);
        assert_eq!(d.len(), 1_300);
        for i in 0..2_000 {
            let binding = b(&format!("k.{}", i % 700), Some(i / 700));
            assert_eq!(d.contains(&binding), i / 700 != 1, "binding {i}");
        }
        // Down to a handful: the index goes, lookups still work.
        for i in 0..2_000 {
            d.remove(&b(&format!("k.{}", i % 700), Some(i / 700)));
            if d.len() == 3 {
                break;
            }
        }
        assert_eq!(d.len(), 3);
        assert!(d.by_key.is_none());
        for k in d.as_slice().to_vec() {
            assert!(d.has_key(k.routing_key.as_bytes()));
            assert!(d.remove(&k));
        }
        assert!(d.is_empty());
    }
}

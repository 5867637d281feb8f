//! Owns: the binding interest of one federated exchange — the distinct
//! `(routing key, arguments)` pairs its local bindings use, each with the destinations
//! that use it — and the coalescing rule: the first destination of a pair binds it
//! upstream, only the last one's removal unbinds it (RabbitMQ's `record_binding` /
//! `forget_binding`).
//!
//! Does not: talk to the upstream (the link does) or decide how far a binding travels
//! (`model::hops::binding_hops`, per link).

use std::collections::{HashMap, HashSet};

use bytes::{Bytes, BytesMut};

use crate::protocol::{FieldTable, ShortStr};
use crate::shard::binding_watch::Destination;

/// One distinct binding of the exchange: what an upstream binding is made of.
#[derive(Clone, Debug, PartialEq)]
pub struct Pair {
    pub key: ShortStr,
    pub args: FieldTable,
}

/// What a local binding change means for the upstream.
#[derive(Clone, Debug, PartialEq)]
pub enum InterestChange {
    Bind(Pair),
    Unbind(Pair),
}

/// The arguments as they are encoded: the identity of a pair (tables have no `Hash`).
fn identity(key: &ShortStr, args: &FieldTable) -> (ShortStr, Bytes) {
    let mut out = BytesMut::with_capacity(args.encoded_len());
    args.encode(&mut out);
    (key.clone(), out.freeze())
}

struct Entry {
    pair: Pair,
    destinations: HashSet<Destination>,
}

/// The interest of one exchange.
#[derive(Default)]
pub struct Interest {
    pairs: HashMap<(ShortStr, Bytes), Entry>,
}

impl Interest {
    /// A binding was added; `Some(Bind)` when it is the pair's first.
    pub fn add(
        &mut self,
        key: &ShortStr,
        args: &FieldTable,
        destination: Destination,
    ) -> Option<InterestChange> {
        let entry = self
            .pairs
            .entry(identity(key, args))
            .or_insert_with(|| Entry {
                pair: Pair {
                    key: key.clone(),
                    args: args.clone(),
                },
                destinations: HashSet::new(),
            });
        let first = entry.destinations.is_empty();
        entry.destinations.insert(destination);
        first.then(|| InterestChange::Bind(entry.pair.clone()))
    }

    /// A binding was removed; `Some(Unbind)` when it was the pair's last.
    pub fn remove(
        &mut self,
        key: &ShortStr,
        args: &FieldTable,
        destination: &Destination,
    ) -> Option<InterestChange> {
        let id = identity(key, args);
        let entry = self.pairs.get_mut(&id)?;
        if !entry.destinations.remove(destination) || !entry.destinations.is_empty() {
            return None;
        }
        self.pairs
            .remove(&id)
            .map(|e| InterestChange::Unbind(e.pair))
    }

    /// Every pair, for a link that (re)connects.
    pub fn pairs(&self) -> Vec<Pair> {
        self.pairs.values().map(|e| e.pair.clone()).collect()
    }

    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesces_by_key_and_arguments() {
        let mut i = Interest::default();
        let k = ShortStr::from("prices.#");
        let none = FieldTable::new();
        let q1 = Destination::Queue("q1".into());
        let q2 = Destination::Queue("q2".into());
        assert!(matches!(
            i.add(&k, &none, q1.clone()),
            Some(InterestChange::Bind(_))
        ));
        assert_eq!(
            i.add(&k, &none, q2.clone()),
            None,
            "second binding of the same key"
        );
        assert_eq!(i.add(&k, &none, q2.clone()), None, "the same binding twice");
        assert_eq!(i.remove(&k, &none, &q1), None, "q2 still wants it");
        assert_eq!(i.len(), 1);
        assert!(matches!(
            i.remove(&k, &none, &q2),
            Some(InterestChange::Unbind(_))
        ));
        assert!(i.is_empty());
        assert_eq!(i.remove(&k, &none, &q2), None);
        let mut args = FieldTable::new();
        args.insert(
            "x-match",
            crate::protocol::FieldValue::LongStr("all".into()),
        );
        assert!(i.add(&k, &none, q1.clone()).is_some());
        assert!(
            i.add(&k, &args, q1).is_some(),
            "other arguments: another pair"
        );
    }
}

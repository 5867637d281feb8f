//! Owns: one exchange's bindings to one kind of destination — queues, or other exchanges
//! (RabbitMQ's exchange-to-exchange bindings) — grouped by destination, and the per-type
//! match structure built from them that turns a routing key (and, for headers exchanges,
//! the message headers) into destinations. An `x-federation-upstream` exchange's matcher
//! is a fanout list behind its hop filter (`upstream::HopFilter`), so the other types'
//! routes do no work for it.
//!
//! Does not: know what a destination is beyond a small `Copy` id, or follow a destination
//! exchange's own bindings (`model::routing` does).
//!
//! # Invariants
//! - `bindings` holds every binding exactly once (unique on destination, key,
//!   arguments), grouped by destination (`dest::DestBindings`); `count` is their
//!   number.
//! - The matcher holds the same set of (key, destination) pairs as `bindings`,
//!   de-duplicated.
//!
//! # Costs
//! Checking, adding or removing one binding costs O(1) expected (plus the matcher's
//! own insert or remove: O(words) in a topic trie), however many bindings the exchange
//! or the destination has; removing every binding of one destination costs O(its
//! bindings). Headers exchanges are the exception for removal: their routing is a scan
//! of their rules anyway, and so is removing one.

use std::collections::HashMap;
use std::hash::Hash;

use bytes::Bytes;
use smallvec::SmallVec;

use crate::model::topic_trie::{MatchOut, TopicTrie};
use crate::protocol::{FieldTable, ShortStr};

use super::dest::DestBindings;
use super::headers::{HeadersRule, LazyHeaders};
use super::upstream::HopFilter;
use super::{ExchangeDef, ExchangeKind};

/// What a binding is matched on.
pub trait BindingKey: PartialEq {
    fn routing_key(&self) -> &ShortStr;
    fn arguments(&self) -> &FieldTable;
}

enum Matcher<T: Copy + Eq + Hash> {
    Direct(HashMap<Bytes, SmallVec<[T; 2]>>),
    /// Bound destinations, and where each is in the list (so removal is a swap-remove).
    Fanout(Vec<T>, HashMap<T, usize>),
    Topic(TopicTrie<T>),
    Headers(Vec<(HeadersRule, T)>),
    /// `x-federation-upstream`: a fanout list behind its hop filter, so that only this
    /// type's routes look at a message's headers.
    Upstream(Vec<T>, HashMap<T, usize>, HopFilter),
}

/// One exchange's bindings to destinations of type `T` (a `QueueRef`, or an exchange's
/// slot in its virtual host), each binding a `B`.
pub struct Routes<T: Copy + Eq + Hash, B> {
    /// Boxed: the map's buckets, about twice as many as destinations, then hold a
    /// pointer each instead of a binding (issue 23: every shard holds every binding).
    bindings: HashMap<T, Box<DestBindings<B>>>,
    count: usize,
    matcher: Matcher<T>,
}

impl<T: Copy + Eq + Hash, B: BindingKey> Routes<T, B> {
    /// The routes of an exchange declared as `def` (its type, and for
    /// `x-federation-upstream` its arguments).
    pub fn for_exchange(def: &ExchangeDef) -> Self {
        let matcher = match def.kind {
            ExchangeKind::Direct => Matcher::Direct(HashMap::new()),
            ExchangeKind::Fanout => Matcher::Fanout(Vec::new(), HashMap::new()),
            ExchangeKind::Topic => Matcher::Topic(TopicTrie::new()),
            ExchangeKind::Headers => Matcher::Headers(Vec::new()),
            ExchangeKind::FederationUpstream => Matcher::Upstream(
                Vec::new(),
                HashMap::new(),
                HopFilter::from_arguments(&def.arguments),
            ),
        };
        Routes {
            bindings: HashMap::new(),
            count: 0,
            matcher,
        }
    }

    /// Gives back the room of maps that are mostly empty (after many unbinds).
    pub fn release_spare(&mut self) {
        use super::super::worth_shrinking;
        if worth_shrinking(self.bindings.len(), self.bindings.capacity()) {
            self.bindings.shrink_to_fit();
        }
        match &mut self.matcher {
            Matcher::Direct(map) => {
                if worth_shrinking(map.len(), map.capacity()) {
                    map.shrink_to_fit();
                }
            }
            Matcher::Fanout(list, at) | Matcher::Upstream(list, at, _) => {
                if worth_shrinking(list.len(), list.capacity()) {
                    list.shrink_to_fit();
                    at.shrink_to_fit();
                }
            }
            Matcher::Topic(trie) => trie.release_spare(),
            Matcher::Headers(rules) => {
                if worth_shrinking(rules.len(), rules.capacity()) {
                    rules.shrink_to_fit();
                }
            }
        }
    }

    /// Every binding with its destination, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (T, &B)> {
        self.bindings
            .iter()
            .flat_map(|(dest, bs)| bs.as_slice().iter().map(move |b| (*dest, b)))
    }

    /// Each destination once, with its number of bindings.
    pub fn destinations(&self) -> impl Iterator<Item = (T, usize)> + '_ {
        self.bindings.iter().map(|(dest, bs)| (*dest, bs.len()))
    }

    /// How many bindings there are.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The bindings to one destination.
    pub fn of(&self, dest: T) -> &[B] {
        self.bindings.get(&dest).map_or(&[], |b| b.as_slice())
    }

    pub fn contains(&self, dest: T, binding: &B) -> bool {
        self.bindings
            .get(&dest)
            .is_some_and(|bs| bs.contains(binding))
    }

    /// Adds a binding; a duplicate is a no-op. Returns whether it was new.
    pub fn bind(&mut self, dest: T, binding: B) -> bool {
        if self.contains(dest, &binding) {
            return false;
        }
        let key = binding.routing_key();
        match &mut self.matcher {
            Matcher::Direct(map) => {
                let entry = map.entry(key.clone().into_bytes()).or_default();
                if !entry.contains(&dest) {
                    entry.push(dest);
                }
            }
            Matcher::Fanout(list, at) | Matcher::Upstream(list, at, _) => {
                at.entry(dest).or_insert_with(|| {
                    list.push(dest);
                    list.len() - 1
                });
            }
            Matcher::Topic(trie) => {
                trie.insert(key.as_bytes(), dest);
            }
            Matcher::Headers(rules) => {
                rules.push((HeadersRule::compile(binding.arguments()), dest));
            }
        }
        self.bindings.entry(dest).or_default().push(binding);
        self.count += 1;
        true
    }

    /// Removes a binding. Returns whether it existed.
    pub fn unbind(&mut self, dest: T, binding: &B) -> bool {
        let Some(of_dest) = self.bindings.get_mut(&dest) else {
            return false;
        };
        if !of_dest.remove(binding) {
            return false;
        }
        if of_dest.is_empty() {
            self.bindings.remove(&dest);
        }
        self.count -= 1;
        self.forget_in_matcher(dest, binding);
        true
    }

    /// Removes every binding to one destination. Returns how many were removed.
    pub fn unbind_all(&mut self, dest: T) -> usize {
        let Some(gone) = self.bindings.remove(&dest) else {
            return 0;
        };
        self.count -= gone.len();
        for binding in gone.as_slice() {
            self.forget_in_matcher(dest, binding);
        }
        gone.len()
    }

    /// Drops a (key, destination) pair from the matcher unless another binding still
    /// needs it.
    fn forget_in_matcher(&mut self, dest: T, binding: &B) {
        let remaining = self.bindings.get(&dest);
        let key = binding.routing_key();
        let key_still_bound = remaining.is_some_and(|bs| bs.has_key(key.as_bytes()));
        match &mut self.matcher {
            Matcher::Direct(map) => {
                if key_still_bound {
                    return;
                }
                if let Some(list) = map.get_mut(key.as_bytes()) {
                    list.retain(|d| *d != dest);
                    if list.is_empty() {
                        map.remove(key.as_bytes());
                    }
                }
            }
            Matcher::Fanout(list, at) | Matcher::Upstream(list, at, _) => {
                if remaining.is_none_or(|bs| bs.is_empty()) {
                    if let Some(pos) = at.remove(&dest) {
                        list.swap_remove(pos);
                        if let Some(moved) = list.get(pos) {
                            at.insert(*moved, pos);
                        }
                    }
                }
            }
            Matcher::Topic(trie) => {
                if !key_still_bound {
                    trie.remove(key.as_bytes(), dest);
                }
            }
            Matcher::Headers(rules) => {
                let rule = HeadersRule::compile(binding.arguments());
                if let Some(pos) = rules.iter().position(|(r, d)| *d == dest && *r == rule) {
                    rules.remove(pos);
                }
            }
        }
    }

    /// Appends the destinations a message routes to, each at most once among the
    /// appended ones (a headers exchange also skips those already in `out`). The headers
    /// are worked out only if a headers exchange needs them.
    pub fn route<F, O>(&self, routing_key: &[u8], headers: &mut LazyHeaders<F>, out: &mut O)
    where
        F: FnOnce() -> Option<FieldTable>,
        O: MatchOut<T>,
    {
        match &self.matcher {
            Matcher::Direct(map) => {
                if let Some(list) = map.get(routing_key) {
                    out.append_slice(list);
                }
            }
            Matcher::Fanout(list, _) => out.append_slice(list),
            Matcher::Topic(trie) => trie.match_into(routing_key, out),
            Matcher::Upstream(list, _, filter) => {
                if !list.is_empty() && filter.allows(headers.get()) {
                    out.append_slice(list);
                }
            }
            Matcher::Headers(rules) => {
                if rules.is_empty() {
                    return;
                }
                let headers = headers.get();
                for (rule, dest) in rules {
                    if rule.matches(headers) && !out.contains(dest) {
                        out.append_slice(std::slice::from_ref(dest));
                    }
                }
            }
        }
    }
}

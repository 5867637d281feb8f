//! Owns: an exchange's definition, its bindings, and the per-type match structures that
//! turn a routing key (and, for headers exchanges, the message headers) into queues.
//!
//! Does not: know queues' contents, sockets or shards beyond the `QueueRef` it returns.
//!
//! # Invariants
//! - `bindings` holds every binding exactly once (unique on queue, key, arguments),
//!   grouped by destination queue; `binding_count` is their number.
//! - The matcher holds the same set of (key, queue) pairs as `bindings`, de-duplicated.
//!
//! # Costs
//! Checking, adding or removing one binding, and removing every binding of one queue,
//! cost O(bindings of that queue) (usually one), never O(bindings of the exchange) —
//! except for headers exchanges, whose routing is a scan of their rules anyway.

pub mod headers;

use std::collections::HashMap;

use bytes::Bytes;
use smallvec::SmallVec;

use crate::model::ids::QueueRef;
use crate::model::topic_trie::TopicTrie;
use crate::protocol::{FieldTable, ShortStr};

use headers::HeadersRule;

/// Queues one publish routes to, inline up to a 16-way fan-out.
pub type Targets = SmallVec<[QueueRef; 16]>;

/// The four AMQP 0-9-1 exchange types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExchangeKind {
    Direct,
    Fanout,
    Topic,
    Headers,
}

impl ExchangeKind {
    pub fn parse(name: &[u8]) -> Option<ExchangeKind> {
        match name {
            b"direct" => Some(ExchangeKind::Direct),
            b"fanout" => Some(ExchangeKind::Fanout),
            b"topic" => Some(ExchangeKind::Topic),
            b"headers" => Some(ExchangeKind::Headers),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Headers => "headers",
        }
    }
}

/// What an exchange was declared with.
#[derive(Clone, Debug, PartialEq)]
pub struct ExchangeDef {
    pub name: ShortStr,
    pub kind: ExchangeKind,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    pub arguments: FieldTable,
}

/// One binding from an exchange to a queue.
#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    pub queue: QueueRef,
    pub queue_name: ShortStr,
    pub routing_key: ShortStr,
    pub arguments: FieldTable,
}

enum Matcher {
    Direct(HashMap<Bytes, SmallVec<[QueueRef; 2]>>),
    /// Bound queues, and where each is in the list (so removal is a swap-remove).
    Fanout(Vec<QueueRef>, HashMap<QueueRef, usize>),
    Topic(TopicTrie<QueueRef>),
    Headers(Vec<(HeadersRule, QueueRef)>),
}

/// An exchange in one shard's routing replica.
pub struct Exchange {
    pub def: ExchangeDef,
    bindings: HashMap<QueueRef, SmallVec<[Binding; 1]>>,
    binding_count: usize,
    matcher: Matcher,
}

impl Exchange {
    pub fn new(def: ExchangeDef) -> Exchange {
        let matcher = match def.kind {
            ExchangeKind::Direct => Matcher::Direct(HashMap::new()),
            ExchangeKind::Fanout => Matcher::Fanout(Vec::new(), HashMap::new()),
            ExchangeKind::Topic => Matcher::Topic(TopicTrie::new()),
            ExchangeKind::Headers => Matcher::Headers(Vec::new()),
        };
        Exchange {
            def,
            bindings: HashMap::new(),
            binding_count: 0,
            matcher,
        }
    }

    /// Gives back the room of maps that are mostly empty (after many unbinds).
    pub fn release_spare(&mut self) {
        if super::worth_shrinking(self.bindings.len(), self.bindings.capacity()) {
            self.bindings.shrink_to_fit();
        }
        match &mut self.matcher {
            Matcher::Direct(map) => {
                if super::worth_shrinking(map.len(), map.capacity()) {
                    map.shrink_to_fit();
                }
            }
            Matcher::Fanout(list, at) => {
                if super::worth_shrinking(list.len(), list.capacity()) {
                    list.shrink_to_fit();
                    at.shrink_to_fit();
                }
            }
            Matcher::Topic(trie) => trie.release_spare(),
            Matcher::Headers(rules) => {
                if super::worth_shrinking(rules.len(), rules.capacity()) {
                    rules.shrink_to_fit();
                }
            }
        }
    }

    /// Every binding, in no particular order.
    pub fn bindings(&self) -> impl Iterator<Item = &Binding> {
        self.bindings.values().flatten()
    }

    /// How many bindings this exchange has.
    pub fn binding_count(&self) -> usize {
        self.binding_count
    }

    /// The bindings from this exchange to one queue.
    pub fn bindings_of(&self, queue: QueueRef) -> &[Binding] {
        self.bindings.get(&queue).map_or(&[], |b| b.as_slice())
    }

    pub fn has_binding(&self, binding: &Binding) -> bool {
        self.bindings_of(binding.queue).contains(binding)
    }

    /// Adds a binding; a duplicate is a no-op. Returns whether it was new.
    pub fn bind(&mut self, binding: Binding) -> bool {
        if self.has_binding(&binding) {
            return false;
        }
        let (queue, key) = (binding.queue, binding.routing_key.clone());
        match &mut self.matcher {
            Matcher::Direct(map) => {
                let entry = map.entry(key.into_bytes()).or_default();
                if !entry.contains(&queue) {
                    entry.push(queue);
                }
            }
            Matcher::Fanout(list, at) => {
                at.entry(queue).or_insert_with(|| {
                    list.push(queue);
                    list.len() - 1
                });
            }
            Matcher::Topic(trie) => {
                trie.insert(key.as_bytes(), queue);
            }
            Matcher::Headers(rules) => {
                rules.push((HeadersRule::compile(&binding.arguments), queue));
            }
        }
        self.bindings.entry(queue).or_default().push(binding);
        self.binding_count += 1;
        true
    }

    /// Removes a binding. Returns whether it existed.
    pub fn unbind(&mut self, binding: &Binding) -> bool {
        let Some(of_queue) = self.bindings.get_mut(&binding.queue) else {
            return false;
        };
        let Some(pos) = of_queue.iter().position(|b| b == binding) else {
            return false;
        };
        of_queue.remove(pos);
        if of_queue.is_empty() {
            self.bindings.remove(&binding.queue);
        }
        self.binding_count -= 1;
        self.forget_in_matcher(binding);
        true
    }

    /// Removes every binding to one queue. Returns how many were removed.
    pub fn unbind_queue(&mut self, queue: QueueRef) -> usize {
        let Some(gone) = self.bindings.remove(&queue) else {
            return 0;
        };
        self.binding_count -= gone.len();
        for binding in &gone {
            self.forget_in_matcher(binding);
        }
        gone.len()
    }

    /// Drops a (key, queue) pair from the matcher unless another binding still needs it.
    fn forget_in_matcher(&mut self, binding: &Binding) {
        let queue = binding.queue;
        let remaining = self.bindings.get(&queue).map_or(&[][..], |b| b.as_slice());
        let same_key = |b: &Binding| b.routing_key == binding.routing_key;
        match &mut self.matcher {
            Matcher::Direct(map) => {
                if remaining.iter().any(same_key) {
                    return;
                }
                if let Some(list) = map.get_mut(binding.routing_key.as_bytes()) {
                    list.retain(|q| *q != queue);
                    if list.is_empty() {
                        map.remove(binding.routing_key.as_bytes());
                    }
                }
            }
            Matcher::Fanout(list, at) => {
                if remaining.is_empty() {
                    if let Some(pos) = at.remove(&queue) {
                        list.swap_remove(pos);
                        if let Some(moved) = list.get(pos) {
                            at.insert(*moved, pos);
                        }
                    }
                }
            }
            Matcher::Topic(trie) => {
                if !remaining.iter().any(same_key) {
                    trie.remove(binding.routing_key.as_bytes(), queue);
                }
            }
            Matcher::Headers(rules) => {
                let rule = HeadersRule::compile(&binding.arguments);
                if let Some(pos) = rules.iter().position(|(r, q)| *q == queue && *r == rule) {
                    rules.remove(pos);
                }
            }
        }
    }

    /// Appends the queues a message routes to, each at most once. `headers` is needed
    /// only by headers exchanges and is computed lazily by the caller's closure.
    pub fn route(
        &self,
        routing_key: &[u8],
        headers: impl FnOnce() -> Option<FieldTable>,
        out: &mut Targets,
    ) {
        match &self.matcher {
            Matcher::Direct(map) => {
                if let Some(list) = map.get(routing_key) {
                    out.extend_from_slice(list);
                }
            }
            Matcher::Fanout(list, _) => out.extend_from_slice(list),
            Matcher::Topic(trie) => trie.match_into(routing_key, out),
            Matcher::Headers(rules) => {
                if rules.is_empty() {
                    return;
                }
                let headers = headers();
                for (rule, queue) in rules {
                    if rule.matches(headers.as_ref()) && !out.contains(queue) {
                        out.push(*queue);
                    }
                }
            }
        }
    }
}

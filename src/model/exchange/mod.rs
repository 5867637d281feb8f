//! Owns: an exchange's definition, its bindings, and the per-type match structures that
//! turn a routing key (and, for headers exchanges, the message headers) into queues.
//!
//! Does not: know queues' contents, sockets or shards beyond the `QueueRef` it returns.
//!
//! # Invariants
//! - `bindings` holds every binding exactly once (unique on queue, key, arguments).
//! - The matcher holds the same set of (key, queue) pairs as `bindings`, de-duplicated.

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
    Fanout(Vec<QueueRef>),
    Topic(TopicTrie<QueueRef>),
    Headers(Vec<(HeadersRule, QueueRef)>),
}

/// An exchange in one shard's routing replica.
pub struct Exchange {
    pub def: ExchangeDef,
    bindings: Vec<Binding>,
    matcher: Matcher,
}

impl Exchange {
    pub fn new(def: ExchangeDef) -> Exchange {
        let matcher = match def.kind {
            ExchangeKind::Direct => Matcher::Direct(HashMap::new()),
            ExchangeKind::Fanout => Matcher::Fanout(Vec::new()),
            ExchangeKind::Topic => Matcher::Topic(TopicTrie::new()),
            ExchangeKind::Headers => Matcher::Headers(Vec::new()),
        };
        Exchange {
            def,
            bindings: Vec::new(),
            matcher,
        }
    }

    pub fn bindings(&self) -> &[Binding] {
        &self.bindings
    }

    pub fn has_binding(&self, binding: &Binding) -> bool {
        self.bindings.iter().any(|b| b == binding)
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
            Matcher::Fanout(list) => {
                if !list.contains(&queue) {
                    list.push(queue);
                }
            }
            Matcher::Topic(trie) => {
                trie.insert(key.as_bytes(), queue);
            }
            Matcher::Headers(rules) => {
                rules.push((HeadersRule::compile(&binding.arguments), queue));
            }
        }
        self.bindings.push(binding);
        true
    }

    /// Removes a binding. Returns whether it existed.
    pub fn unbind(&mut self, binding: &Binding) -> bool {
        let Some(pos) = self.bindings.iter().position(|b| b == binding) else {
            return false;
        };
        self.bindings.remove(pos);
        self.forget_in_matcher(binding);
        true
    }

    /// Removes every binding to one queue. Returns how many were removed.
    pub fn unbind_queue(&mut self, queue: QueueRef) -> usize {
        let (gone, kept): (Vec<Binding>, Vec<Binding>) = std::mem::take(&mut self.bindings)
            .into_iter()
            .partition(|b| b.queue == queue);
        self.bindings = kept;
        for binding in &gone {
            self.forget_in_matcher(binding);
        }
        gone.len()
    }

    /// Drops a (key, queue) pair from the matcher unless another binding still needs it.
    fn forget_in_matcher(&mut self, binding: &Binding) {
        let queue = binding.queue;
        let same_key = |b: &Binding| b.queue == queue && b.routing_key == binding.routing_key;
        match &mut self.matcher {
            Matcher::Direct(map) => {
                if self.bindings.iter().any(same_key) {
                    return;
                }
                if let Some(list) = map.get_mut(binding.routing_key.as_bytes()) {
                    list.retain(|q| *q != queue);
                    if list.is_empty() {
                        map.remove(binding.routing_key.as_bytes());
                    }
                }
            }
            Matcher::Fanout(list) => {
                if !self.bindings.iter().any(|b| b.queue == queue) {
                    list.retain(|q| *q != queue);
                }
            }
            Matcher::Topic(trie) => {
                if !self.bindings.iter().any(same_key) {
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
            Matcher::Fanout(list) => out.extend_from_slice(list),
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

//! Owns: an exchange's definition, its bindings — to queues, and to other exchanges
//! (RabbitMQ's exchange-to-exchange bindings, where this exchange is the source) — the
//! per-type match structures over them (`routes`; the `x-federation-upstream` type's
//! arguments and hop filter in `upstream`), and which exchanges are bound to it.
//!
//! Does not: know queues' contents, sockets or shards beyond the `QueueRef` it returns,
//! or follow a chain of exchanges (`model::routing` does, on the whole virtual host).
//!
//! # Invariants
//! - `exchanges` is `None` while the exchange has no binding to another exchange, so a
//!   publish through an exchange without such bindings costs one branch more.
//! - `sources` counts, per source exchange, the bindings from it to this one; the
//!   directory keeps it equal to the sum over every exchange's `exchanges` routes.
//!
//! # Costs
//! See `routes`: checking, adding or removing one binding costs O(1) expected, whatever
//! the number of bindings of the exchange or of its destination (`dest`).

pub mod dest;
pub mod headers;
pub mod routes;
pub mod upstream;

use std::cell::Cell;
use std::collections::HashMap;

use smallvec::SmallVec;

use crate::model::ids::QueueRef;
use crate::protocol::{FieldTable, ShortStr};

use headers::LazyHeaders;
use routes::{BindingKey, Routes};

/// Queues one publish routes to, inline up to a 16-way fan-out.
pub type Targets = SmallVec<[QueueRef; 16]>;

/// The four AMQP 0-9-1 exchange types, and RabbitMQ federation's helper type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExchangeKind {
    Direct,
    Fanout,
    Topic,
    Headers,
    /// `x-federation-upstream`: fanout to every destination, for the messages its
    /// arguments' hop rule lets through (`upstream`).
    FederationUpstream,
}

impl ExchangeKind {
    pub fn parse(name: &[u8]) -> Option<ExchangeKind> {
        match name {
            b"direct" => Some(ExchangeKind::Direct),
            b"fanout" => Some(ExchangeKind::Fanout),
            b"topic" => Some(ExchangeKind::Topic),
            b"headers" => Some(ExchangeKind::Headers),
            b"x-federation-upstream" => Some(ExchangeKind::FederationUpstream),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Headers => "headers",
            ExchangeKind::FederationUpstream => upstream::TYPE_NAME,
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

/// One binding from an exchange (the source, which holds it) to another exchange.
#[derive(Clone, Debug, PartialEq)]
pub struct ExchangeBinding {
    pub destination: ShortStr,
    pub routing_key: ShortStr,
    pub arguments: FieldTable,
}

impl BindingKey for Binding {
    fn routing_key(&self) -> &ShortStr {
        &self.routing_key
    }
    fn arguments(&self) -> &FieldTable {
        &self.arguments
    }
}

impl BindingKey for ExchangeBinding {
    fn routing_key(&self) -> &ShortStr {
        &self.routing_key
    }
    fn arguments(&self) -> &FieldTable {
        &self.arguments
    }
}

/// An exchange's slot in its virtual host's directory. Meaningful only on the replica
/// that assigned it (changes name exchanges, never slots); a slot is reused only after
/// every binding to or from its exchange went with it.
pub type ExchangeId = usize;

/// Exchanges one exchange forwards a publish to, inline up to eight.
pub type ExchangeTargets = SmallVec<[ExchangeId; 8]>;

/// An exchange in one shard's routing replica.
pub struct Exchange {
    pub def: ExchangeDef,
    queues: Routes<QueueRef, Binding>,
    exchanges: Option<Box<Routes<ExchangeId, ExchangeBinding>>>,
    /// Per source exchange, how many of its bindings lead here.
    sources: HashMap<ExchangeId, usize>,
    /// The route (of the directory's `route_epoch`) that last reached this exchange:
    /// a publish visits each exchange at most once.
    pub(crate) visited: Cell<u64>,
    /// Messages published to this exchange on this shard, and the queues they reached
    /// (RabbitMQ's `publish_in` / `publish_out`): plain adds in `Directory::route`, read
    /// by the management sampler through `shard::observe`.
    pub publish_in: Cell<u64>,
    pub publish_out: Cell<u64>,
}

impl Exchange {
    pub fn new(def: ExchangeDef) -> Exchange {
        let queues = Routes::for_exchange(&def);
        Exchange {
            def,
            queues,
            exchanges: None,
            sources: HashMap::new(),
            visited: Cell::new(0),
            publish_in: Cell::new(0),
            publish_out: Cell::new(0),
        }
    }

    /// Gives back the room of maps that are mostly empty (after many unbinds).
    pub fn release_spare(&mut self) {
        self.queues.release_spare();
        if let Some(ex) = self.exchanges.as_mut() {
            ex.release_spare();
        }
        if super::worth_shrinking(self.sources.len(), self.sources.capacity()) {
            self.sources.shrink_to_fit();
        }
    }

    /// Every binding to a queue, in no particular order.
    pub fn bindings(&self) -> impl Iterator<Item = &Binding> {
        self.queues.iter().map(|(_, b)| b)
    }

    /// How many bindings this exchange has as a source: to queues and to exchanges
    /// (what `if-unused` and auto-delete look at, as RabbitMQ's `has_for_source`).
    pub fn binding_count(&self) -> usize {
        self.queues.len() + self.exchanges.as_ref().map_or(0, |e| e.len())
    }

    /// The bindings from this exchange to one queue.
    pub fn bindings_of(&self, queue: QueueRef) -> &[Binding] {
        self.queues.of(queue)
    }

    pub fn has_binding(&self, binding: &Binding) -> bool {
        self.queues.contains(binding.queue, binding)
    }

    /// Adds a binding to a queue; a duplicate is a no-op. Returns whether it was new.
    pub fn bind(&mut self, binding: Binding) -> bool {
        self.queues.bind(binding.queue, binding)
    }

    /// Removes a binding to a queue. Returns whether it existed.
    pub fn unbind(&mut self, binding: &Binding) -> bool {
        self.queues.unbind(binding.queue, binding)
    }

    /// Removes every binding to one queue. Returns how many were removed.
    pub fn unbind_queue(&mut self, queue: QueueRef) -> usize {
        self.queues.unbind_all(queue)
    }

    /// Whether this exchange forwards to other exchanges.
    pub fn has_exchange_bindings(&self) -> bool {
        self.exchanges.is_some()
    }

    /// Every binding to another exchange, with the destination's slot.
    pub fn exchange_bindings(&self) -> impl Iterator<Item = (ExchangeId, &ExchangeBinding)> {
        self.exchanges.iter().flat_map(|e| e.iter())
    }

    /// Each destination exchange once, with its number of bindings from here.
    pub fn exchange_destinations(&self) -> impl Iterator<Item = (ExchangeId, usize)> + '_ {
        self.exchanges.iter().flat_map(|e| e.destinations())
    }

    pub fn has_exchange_binding(&self, dest: ExchangeId, binding: &ExchangeBinding) -> bool {
        self.exchanges
            .as_ref()
            .is_some_and(|e| e.contains(dest, binding))
    }

    /// Adds a binding to the exchange in slot `dest`. Returns whether it was new (the
    /// caller then counts this exchange among `dest`'s sources).
    pub fn bind_exchange(&mut self, dest: ExchangeId, binding: ExchangeBinding) -> bool {
        let def = &self.def;
        self.exchanges
            .get_or_insert_with(|| Box::new(Routes::for_exchange(def)))
            .bind(dest, binding)
    }

    /// Removes a binding to another exchange. Returns whether it existed.
    pub fn unbind_exchange(&mut self, dest: ExchangeId, binding: &ExchangeBinding) -> bool {
        let Some(routes) = self.exchanges.as_mut() else {
            return false;
        };
        let removed = routes.unbind(dest, binding);
        if routes.is_empty() {
            self.exchanges = None;
        }
        removed
    }

    /// Removes every binding to the exchange in slot `dest`. Returns how many went.
    pub fn unbind_exchange_all(&mut self, dest: ExchangeId) -> usize {
        let Some(routes) = self.exchanges.as_mut() else {
            return 0;
        };
        let removed = routes.unbind_all(dest);
        if routes.is_empty() {
            self.exchanges = None;
        }
        removed
    }

    /// Each source exchange bound to this one, with its number of bindings here.
    pub fn sources(&self) -> impl Iterator<Item = (ExchangeId, usize)> + '_ {
        self.sources.iter().map(|(id, n)| (*id, *n))
    }

    /// `n` more bindings from `source` lead here.
    pub fn add_source(&mut self, source: ExchangeId, n: usize) {
        *self.sources.entry(source).or_insert(0) += n;
    }

    /// `n` fewer bindings from `source` lead here.
    pub fn remove_source(&mut self, source: ExchangeId, n: usize) {
        if let Some(count) = self.sources.get_mut(&source) {
            *count = count.saturating_sub(n);
            if *count == 0 {
                self.sources.remove(&source);
            }
        }
    }

    /// Appends the queues a message routes to through this exchange's own bindings, each
    /// at most once. `headers` is worked out only if a headers exchange needs it.
    pub fn route<F: FnOnce() -> Option<FieldTable>>(
        &self,
        routing_key: &[u8],
        headers: &mut LazyHeaders<F>,
        out: &mut Targets,
    ) {
        self.queues.route(routing_key, headers, out);
    }

    /// Appends the exchanges a message goes on to, each at most once.
    pub fn route_exchanges<F: FnOnce() -> Option<FieldTable>>(
        &self,
        routing_key: &[u8],
        headers: &mut LazyHeaders<F>,
        out: &mut ExchangeTargets,
    ) {
        if let Some(routes) = &self.exchanges {
            routes.route(routing_key, headers, out);
        }
    }
}

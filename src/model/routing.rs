//! Owns: one shard's replica of the broker's directory — per virtual host, the exchanges
//! with their bindings (to queues and to other exchanges) and the queues' metadata (home
//! shard, flags, exclusive owner). Every shard holds a full copy, so a publish is routed
//! on the publisher's shard without a lock, through chains of exchanges too (`chain`).
//! Also what removing bindings takes with it: the auto-delete exchanges left without a
//! binding (`cascade`).
//!
//! Does not: change itself except through [`Directory::apply`] with a
//! [`DirectoryChange`] produced by the control-plane coordinator (`shard::control`),
//! which applies the same change list on every shard in the same order.

mod cascade;
mod chain;

use std::cell::Cell;
use std::collections::{HashMap, HashSet};

use slab::Slab;

use crate::model::exchange::headers::LazyHeaders;
use crate::model::exchange::{
    Binding, Exchange, ExchangeBinding, ExchangeDef, ExchangeId, ExchangeKind, Targets,
};
use crate::model::ids::{ConnOwner, QueueRef};
use crate::protocol::{FieldTable, ShortStr};

pub use cascade::Removal;

/// The predeclared exchanges of every virtual host. Not `amq.rabbitmq.trace`: sluice
/// has no firehose tracer, and an exchange nothing is ever published to would say it
/// does.
pub const PREDECLARED: [(&str, ExchangeKind); 5] = [
    ("amq.direct", ExchangeKind::Direct),
    ("amq.fanout", ExchangeKind::Fanout),
    ("amq.topic", ExchangeKind::Topic),
    ("amq.headers", ExchangeKind::Headers),
    ("amq.match", ExchangeKind::Headers),
];

/// Index of a virtual host in the broker's configured list.
pub type VhostIdx = usize;

/// What every shard knows about a queue.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueMeta {
    pub queue: QueueRef,
    pub name: ShortStr,
    pub durable: bool,
    pub exclusive_owner: Option<ConnOwner>,
    pub auto_delete: bool,
    pub arguments: FieldTable,
}

/// One change to the directory. The coordinator validates, then broadcasts.
#[derive(Clone, Debug)]
pub enum DirectoryChange {
    DeclareExchange {
        vhost: VhostIdx,
        def: ExchangeDef,
    },
    DeleteExchange {
        vhost: VhostIdx,
        name: ShortStr,
    },
    DeclareQueue {
        vhost: VhostIdx,
        meta: QueueMeta,
    },
    /// Removes the queue and every binding to it.
    DeleteQueue {
        vhost: VhostIdx,
        queue: QueueRef,
        name: ShortStr,
    },
    Bind {
        vhost: VhostIdx,
        exchange: ShortStr,
        binding: Binding,
    },
    Unbind {
        vhost: VhostIdx,
        exchange: ShortStr,
        binding: Binding,
    },
    /// An exchange-to-exchange binding from `source` (RabbitMQ's `exchange.bind`).
    BindExchange {
        vhost: VhostIdx,
        source: ShortStr,
        binding: ExchangeBinding,
    },
    UnbindExchange {
        vhost: VhostIdx,
        source: ShortStr,
        binding: ExchangeBinding,
    },
}

/// A queue's metadata in its vhost's set, found by its name.
struct QueueByName(Box<QueueMeta>);

impl std::borrow::Borrow<ShortStr> for QueueByName {
    fn borrow(&self) -> &ShortStr {
        &self.0.name
    }
}

impl PartialEq for QueueByName {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for QueueByName {}

impl std::hash::Hash for QueueByName {
    /// As its name hashes (`Borrow`'s contract: a name finds its entry).
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.name.hash(state);
    }
}

/// One virtual host's exchanges and queues.
///
/// # Invariants
/// - `by_name` and `exchanges` hold the same exchanges: `by_name[x.def.name]` is `x`'s
///   slot.
/// - Every exchange-to-exchange binding joins two exchanges of `exchanges` (deleting an
///   exchange removes the bindings from and to it), and each destination's `sources`
///   counts them.
pub struct VhostDirectory {
    pub name: String,
    /// Deleted at run time: no longer found by name (its slot is never reused).
    closed: bool,
    exchanges: Slab<Exchange>,
    by_name: HashMap<ShortStr, ExchangeId>,
    /// By name, each a box found by the name inside it: the set has up to twice as many
    /// buckets as queues, every shard holds every queue's entry, and a bucket is then a
    /// pointer, where a name beside it was five words (issue 23).
    queues: HashSet<QueueByName>,
    /// Bumped by each route through a chain; an exchange it reached carries it.
    route_epoch: Cell<u64>,
    /// The slot of the exchange the last publish named: a publisher names the same
    /// exchange publish after publish, and comparing the name with the one in that slot
    /// is ~30 instructions where hashing it was ~340 (issue 23). A slot reused by
    /// another exchange holds another name, so it is never taken for the old one.
    last_exchange: Cell<Option<ExchangeId>>,
    /// The default exchange's `publish_in` / `publish_out` on this replica (it has no
    /// slot in `exchanges`); the named ones count on their `Exchange`.
    pub default_publish_in: Cell<u64>,
    pub default_publish_out: Cell<u64>,
}

/// Why a publish could not be routed at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteError {
    NoExchange,
    /// A client published to an internal exchange ([`VhostDirectory::route_publish`]).
    Internal,
}

impl VhostDirectory {
    fn new(name: String) -> VhostDirectory {
        let mut dir = VhostDirectory {
            name,
            closed: false,
            exchanges: Slab::new(),
            by_name: HashMap::new(),
            queues: HashSet::new(),
            route_epoch: Cell::new(0),
            last_exchange: Cell::new(None),
            default_publish_in: Cell::new(0),
            default_publish_out: Cell::new(0),
        };
        for (name, kind) in PREDECLARED {
            dir.declare_exchange(ExchangeDef {
                name: ShortStr::from(name),
                kind,
                durable: true,
                auto_delete: false,
                internal: false,
                arguments: FieldTable::default(),
            });
        }
        dir
    }

    pub fn exchange(&self, name: &ShortStr) -> Option<&Exchange> {
        self.by_name
            .get(name)
            .and_then(|id| self.exchanges.get(*id))
    }

    /// An exchange's slot on this replica.
    pub fn exchange_id(&self, name: &ShortStr) -> Option<ExchangeId> {
        self.by_name.get(name).copied()
    }

    /// Whether `source` has exactly this binding to another exchange.
    pub fn has_exchange_binding(&self, source: &ShortStr, binding: &ExchangeBinding) -> bool {
        match (
            self.exchange(source),
            self.exchange_id(&binding.destination),
        ) {
            (Some(ex), Some(dest)) => ex.has_exchange_binding(dest, binding),
            _ => false,
        }
    }

    pub fn queue(&self, name: &ShortStr) -> Option<&QueueMeta> {
        self.queues.get(name).map(|m| &*m.0)
    }

    pub fn queues(&self) -> impl Iterator<Item = &QueueMeta> {
        self.queues.iter().map(|m| &*m.0)
    }

    /// How many queues the vhost holds.
    pub fn queue_count(&self) -> usize {
        self.queues.len()
    }

    pub fn exchanges(&self) -> impl Iterator<Item = &Exchange> {
        self.exchanges.iter().map(|(_, ex)| ex)
    }

    /// Routes a publish: appends each queue it reaches once. The default exchange (empty
    /// name) routes to the queue named by the routing key; an exchange bound to other
    /// exchanges passes the message on with the same routing key and headers (`chain`).
    pub fn route(
        &self,
        exchange: &ShortStr,
        routing_key: &ShortStr,
        headers: impl FnOnce() -> Option<FieldTable>,
        out: &mut Targets,
    ) -> Result<(), RouteError> {
        self.route_from(exchange, routing_key, headers, out, false)
    }

    /// [`route`](Self::route) for a client's `basic.publish`, which an internal exchange
    /// refuses; one lookup of the exchange's name serves both.
    pub fn route_publish(
        &self,
        exchange: &ShortStr,
        routing_key: &ShortStr,
        headers: impl FnOnce() -> Option<FieldTable>,
        out: &mut Targets,
    ) -> Result<(), RouteError> {
        self.route_from(exchange, routing_key, headers, out, true)
    }

    #[inline(always)]
    fn route_from(
        &self,
        exchange: &ShortStr,
        routing_key: &ShortStr,
        headers: impl FnOnce() -> Option<FieldTable>,
        out: &mut Targets,
        refuse_internal: bool,
    ) -> Result<(), RouteError> {
        if exchange.is_empty() {
            self.default_publish_in
                .set(self.default_publish_in.get() + 1);
            if let Some(meta) = self.queues.get(routing_key) {
                out.push(meta.0.queue);
                self.default_publish_out
                    .set(self.default_publish_out.get() + 1);
            }
            return Ok(());
        }
        let id = self
            .published_exchange_id(exchange)
            .ok_or(RouteError::NoExchange)?;
        let ex = self.exchanges.get(id).ok_or(RouteError::NoExchange)?;
        if refuse_internal && ex.def.internal {
            return Err(RouteError::Internal);
        }
        let start = out.len();
        let mut headers = LazyHeaders::new(headers);
        ex.route(routing_key.as_bytes(), &mut headers, out);
        if ex.has_exchange_bindings() {
            self.follow_chain(id, routing_key.as_bytes(), &mut headers, out, start);
        }
        ex.publish_in.set(ex.publish_in.get() + 1);
        ex.publish_out
            .set(ex.publish_out.get() + (out.len() - start) as u64);
        Ok(())
    }

    /// [`VhostDirectory::exchange_id`] through the last publish's exchange.
    #[inline]
    fn published_exchange_id(&self, name: &ShortStr) -> Option<ExchangeId> {
        if let Some(id) = self.last_exchange.get() {
            if self
                .exchanges
                .get(id)
                .is_some_and(|ex| ex.def.name == *name)
            {
                return Some(id);
            }
        }
        let id = self.exchange_id(name)?;
        self.last_exchange.set(Some(id));
        Some(id)
    }

    fn declare_exchange(&mut self, def: ExchangeDef) {
        if self.by_name.contains_key(&def.name) {
            return;
        }
        let name = def.name.clone();
        let id = self.exchanges.insert(Exchange::new(def));
        self.by_name.insert(name, id);
    }

    /// Removes an exchange with every binding from it and to it.
    fn delete_exchange(&mut self, name: &ShortStr) {
        let Some(id) = self.by_name.remove(name) else {
            return;
        };
        let Some(gone) = self.exchanges.try_remove(id) else {
            return;
        };
        for (dest, n) in gone.exchange_destinations() {
            if let Some(d) = self.exchanges.get_mut(dest) {
                d.remove_source(id, n);
            }
        }
        for (source, _) in gone.sources() {
            if let Some(s) = self.exchanges.get_mut(source) {
                s.unbind_exchange_all(id);
            }
        }
    }

    fn bind_exchange(&mut self, source: &ShortStr, binding: &ExchangeBinding, bind: bool) {
        let (Some(src), Some(dest)) = (
            self.exchange_id(source),
            self.exchange_id(&binding.destination),
        ) else {
            return;
        };
        let Some(ex) = self.exchanges.get_mut(src) else {
            return;
        };
        let changed = if bind {
            ex.bind_exchange(dest, binding.clone())
        } else {
            ex.unbind_exchange(dest, binding)
        };
        if let (true, Some(d)) = (changed, self.exchanges.get_mut(dest)) {
            if bind {
                d.add_source(src, 1);
            } else {
                d.remove_source(src, 1);
            }
        }
    }

    /// Applies one change.
    fn apply(&mut self, change: &DirectoryChange) {
        match change {
            DirectoryChange::DeclareExchange { def, .. } => self.declare_exchange(def.clone()),
            DirectoryChange::DeleteExchange { name, .. } => self.delete_exchange(name),
            DirectoryChange::DeclareQueue { meta, .. } => {
                if !self.queues.contains(&meta.name) {
                    self.queues.insert(QueueByName(Box::new(meta.clone())));
                }
            }
            DirectoryChange::DeleteQueue { queue, name, .. } => {
                if self.queues.get(name).is_some_and(|m| m.0.queue == *queue) {
                    self.queues.remove(name);
                }
                for (_, ex) in self.exchanges.iter_mut() {
                    ex.unbind_queue(*queue);
                }
            }
            DirectoryChange::Bind {
                exchange, binding, ..
            } => {
                if let Some(ex) = self.exchange_mut(exchange) {
                    ex.bind(binding.clone());
                }
            }
            DirectoryChange::Unbind {
                exchange, binding, ..
            } => {
                if let Some(ex) = self.exchange_mut(exchange) {
                    ex.unbind(binding);
                }
            }
            DirectoryChange::BindExchange {
                source, binding, ..
            } => self.bind_exchange(source, binding, true),
            DirectoryChange::UnbindExchange {
                source, binding, ..
            } => self.bind_exchange(source, binding, false),
        }
    }

    fn exchange_mut(&mut self, name: &ShortStr) -> Option<&mut Exchange> {
        let id = *self.by_name.get(name)?;
        self.exchanges.get_mut(id)
    }
}

/// A shard's full replica.
pub struct Directory {
    vhosts: Vec<VhostDirectory>,
}

impl VhostDirectory {
    /// Gives back the room of maps that are mostly empty.
    fn release_spare(&mut self) {
        if super::worth_shrinking(self.queues.len(), self.queues.capacity()) {
            self.queues.shrink_to_fit();
        }
        if super::worth_shrinking(self.by_name.len(), self.by_name.capacity()) {
            self.by_name.shrink_to_fit();
        }
        for (_, ex) in self.exchanges.iter_mut() {
            ex.release_spare();
        }
    }
}

impl Directory {
    /// Gives back the room of maps that are mostly empty (after many queues went).
    pub fn release_spare(&mut self) {
        for v in &mut self.vhosts {
            v.release_spare();
        }
    }

    pub fn new(vhost_names: &[String]) -> Directory {
        Directory {
            vhosts: vhost_names
                .iter()
                .map(|n| VhostDirectory::new(n.clone()))
                .collect(),
        }
    }

    pub fn vhost_index(&self, name: &str) -> Option<VhostIdx> {
        self.vhosts.iter().position(|v| !v.closed && v.name == name)
    }

    /// A vhost created at run time gets the next slot.
    pub fn add_vhost(&mut self, name: &str) -> VhostIdx {
        self.vhosts.push(VhostDirectory::new(name.to_owned()));
        self.vhosts.len() - 1
    }

    /// A vhost deleted at run time: no longer found by name; changes by its index still
    /// apply (the coordinator empties it after closing it).
    pub fn close_vhost(&mut self, idx: VhostIdx) {
        if let Some(v) = self.vhosts.get_mut(idx) {
            v.closed = true;
        }
    }

    /// Whether the vhost in slot `idx` was deleted at run time.
    pub fn is_closed(&self, idx: VhostIdx) -> bool {
        self.vhosts.get(idx).is_some_and(|v| v.closed)
    }

    pub fn vhost(&self, idx: VhostIdx) -> Option<&VhostDirectory> {
        self.vhosts.get(idx)
    }

    pub fn vhost_count(&self) -> usize {
        self.vhosts.len()
    }

    pub fn apply(&mut self, change: &DirectoryChange) {
        let vhost = match change {
            DirectoryChange::DeclareExchange { vhost, .. }
            | DirectoryChange::DeleteExchange { vhost, .. }
            | DirectoryChange::DeclareQueue { vhost, .. }
            | DirectoryChange::DeleteQueue { vhost, .. }
            | DirectoryChange::Bind { vhost, .. }
            | DirectoryChange::Unbind { vhost, .. }
            | DirectoryChange::BindExchange { vhost, .. }
            | DirectoryChange::UnbindExchange { vhost, .. } => *vhost,
        };
        if let Some(v) = self.vhosts.get_mut(vhost) {
            v.apply(change);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::QueueId;

    fn q(id: u64) -> QueueRef {
        QueueRef {
            id: QueueId(id),
            home: 0,
        }
    }

    fn meta(id: u64, name: &str) -> QueueMeta {
        QueueMeta {
            queue: q(id),
            name: name.into(),
            durable: false,
            exclusive_owner: None,
            auto_delete: false,
            arguments: FieldTable::default(),
        }
    }

    fn bind(ex: &str, id: u64, name: &str, key: &str) -> DirectoryChange {
        DirectoryChange::Bind {
            vhost: 0,
            exchange: ex.into(),
            binding: Binding {
                queue: q(id),
                queue_name: name.into(),
                routing_key: key.into(),
                arguments: FieldTable::default(),
            },
        }
    }

    fn route(dir: &Directory, ex: &str, key: &str) -> Vec<u64> {
        let mut out = Targets::new();
        let vh = dir.vhost(0).expect("vhost");
        vh.route(&ex.into(), &key.into(), || None, &mut out)
            .expect("exchange exists");
        let mut ids: Vec<u64> = out.iter().map(|r| r.id.0).collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn predeclared_default_and_topic_routing() {
        let mut dir = Directory::new(&["/".to_owned()]);
        dir.apply(&DirectoryChange::DeclareQueue {
            vhost: 0,
            meta: meta(1, "q1"),
        });
        dir.apply(&DirectoryChange::DeclareQueue {
            vhost: 0,
            meta: meta(2, "q2"),
        });
        assert_eq!(route(&dir, "", "q1"), vec![1]);
        assert_eq!(route(&dir, "", "nope"), Vec::<u64>::new());
        dir.apply(&bind("amq.topic", 1, "q1", "a.*"));
        dir.apply(&bind("amq.topic", 1, "q1", "a.#"));
        dir.apply(&bind("amq.topic", 2, "q2", "#"));
        assert_eq!(route(&dir, "amq.topic", "a.b"), vec![1, 2]);
        assert_eq!(route(&dir, "amq.topic", "b"), vec![2]);
        dir.apply(&DirectoryChange::DeleteQueue {
            vhost: 0,
            queue: q(2),
            name: "q2".into(),
        });
        assert_eq!(route(&dir, "amq.topic", "a.b"), vec![1]);
        assert!(dir.vhost(0).and_then(|v| v.queue(&"q2".into())).is_none());
    }

    #[test]
    fn unbind_keeps_other_binding_with_same_pair() {
        let mut dir = Directory::new(&["/".to_owned()]);
        dir.apply(&bind("amq.direct", 1, "q1", "k"));
        dir.apply(&bind("amq.fanout", 1, "q1", "x"));
        dir.apply(&bind("amq.fanout", 1, "q1", "y"));
        assert_eq!(route(&dir, "amq.direct", "k"), vec![1]);
        assert_eq!(route(&dir, "amq.fanout", "zzz"), vec![1]);
        if let DirectoryChange::Bind {
            exchange, binding, ..
        } = bind("amq.fanout", 1, "q1", "x")
        {
            dir.apply(&DirectoryChange::Unbind {
                vhost: 0,
                exchange,
                binding,
            });
        }
        assert_eq!(route(&dir, "amq.fanout", "zzz"), vec![1]);
        let missing = dir
            .vhost(0)
            .map(|v| v.route(&"nope".into(), &"k".into(), || None, &mut Targets::new()));
        assert_eq!(missing, Some(Err(RouteError::NoExchange)));
    }

    #[test]
    fn a_client_publish_to_an_internal_exchange_is_refused_but_the_broker_routes_through_it() {
        let mut dir = Directory::new(&["/".to_owned()]);
        dir.apply(&DirectoryChange::DeclareExchange {
            vhost: 0,
            def: ExchangeDef {
                name: "inside".into(),
                kind: ExchangeKind::Fanout,
                durable: false,
                auto_delete: false,
                internal: true,
                arguments: FieldTable::default(),
            },
        });
        dir.apply(&bind("inside", 1, "q1", ""));
        let vh = dir.vhost(0).expect("vhost");
        let mut out = Targets::new();
        let refused = vh.route_publish(&"inside".into(), &"k".into(), || None, &mut out);
        assert_eq!(refused, Err(RouteError::Internal));
        assert!(out.is_empty());
        // Dead-lettering (and an exchange binding) may route through it.
        assert_eq!(route(&dir, "inside", "k"), vec![1]);
        let mut out = Targets::new();
        assert_eq!(
            vh.route_publish(&"nope".into(), &"k".into(), || None, &mut out),
            Err(RouteError::NoExchange)
        );
        assert_eq!(
            vh.route_publish(&"amq.fanout".into(), &"k".into(), || None, &mut out),
            Ok(())
        );
    }

    fn declare_fanout(name: &str) -> DirectoryChange {
        DirectoryChange::DeclareExchange {
            vhost: 0,
            def: ExchangeDef {
                name: name.into(),
                kind: ExchangeKind::Fanout,
                durable: false,
                auto_delete: false,
                internal: false,
                arguments: FieldTable::default(),
            },
        }
    }

    /// A publish finds its exchange through the last one named, which must not outlive
    /// the exchange: deleted, its name routes nowhere, even once another exchange took
    /// its slot, and a redeclared one routes by its own bindings.
    #[test]
    fn the_last_published_exchange_is_forgotten_with_it() {
        let mut dir = Directory::new(&["/".to_owned()]);
        dir.apply(&declare_fanout("x"));
        dir.apply(&bind("x", 1, "q1", ""));
        let publish = |dir: &Directory, ex: &str| {
            let mut out = Targets::new();
            let vh = dir.vhost(0).expect("vhost");
            vh.route_publish(&ex.into(), &"k".into(), || None, &mut out)
                .map(|()| out.iter().map(|r| r.id.0).collect::<Vec<_>>())
        };
        assert_eq!(publish(&dir, "x"), Ok(vec![1]));
        assert_eq!(
            publish(&dir, "x"),
            Ok(vec![1]),
            "again, through the last one"
        );
        dir.apply(&DirectoryChange::DeleteExchange {
            vhost: 0,
            name: "x".into(),
        });
        assert_eq!(publish(&dir, "x"), Err(RouteError::NoExchange));
        dir.apply(&declare_fanout("y"));
        dir.apply(&bind("y", 2, "q2", ""));
        assert_eq!(publish(&dir, "x"), Err(RouteError::NoExchange));
        assert_eq!(publish(&dir, "y"), Ok(vec![2]));
        dir.apply(&declare_fanout("x"));
        assert_eq!(
            publish(&dir, "x"),
            Ok(vec![]),
            "redeclared: no bindings yet"
        );
        assert_eq!(publish(&dir, "amq.fanout"), Ok(vec![]));
        assert_eq!(publish(&dir, "y"), Ok(vec![2]));
    }
}

//! Owns: telling one watcher (the federation links, `crate::federation`) what the
//! coordinator's directory holds and does to the exchanges it asks about — a snapshot
//! when it starts watching, then every exchange declared or deleted and every binding
//! from such an exchange added or removed, in the order the coordinator applies them —
//! as [`BindingEvent`] batches on one channel.
//!
//! Does not: decide which exchanges are federated (the configuration's
//! `federation.exchange` entries do, through `Config::federation`), or talk AMQP.
//!
//! Only the coordinator (shard 0) has a watcher: it applies every directory change
//! first, so its order is the order of the changes. The channel is unbounded in type and
//! bounded in practice: one event per binding change of a federated exchange.

use std::cell::RefCell;

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::config::federation::FederationConfig;

use crate::model::exchange::Exchange;
use crate::model::routing::{Directory, DirectoryChange, VhostDirectory};
use crate::protocol::{FieldTable, ShortStr};

/// Where a binding leads.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Destination {
    Queue(ShortStr),
    Exchange(ShortStr),
}

/// One thing that happened to a watched exchange.
#[derive(Clone, Debug, PartialEq)]
pub enum BindingEvent {
    /// The exchange exists (declared, or already there when the watch began).
    ExchangeUp {
        vhost: String,
        exchange: ShortStr,
        internal: bool,
        /// Its type's name (`topic`, …): an upstream that lacks the exchange gets it.
        kind: &'static str,
        durable: bool,
    },
    ExchangeDown {
        vhost: String,
        exchange: ShortStr,
    },
    Bound {
        vhost: String,
        exchange: ShortStr,
        key: ShortStr,
        args: FieldTable,
        destination: Destination,
    },
    Unbound {
        vhost: String,
        exchange: ShortStr,
        key: ShortStr,
        args: FieldTable,
        destination: Destination,
    },
}

impl BindingEvent {
    /// `Bound` (`bound`) or `Unbound`.
    fn binding(
        bound: bool,
        vhost: &str,
        exchange: &ShortStr,
        key: &ShortStr,
        args: &FieldTable,
        destination: Destination,
    ) -> BindingEvent {
        let (vhost, exchange, key, args) = (
            vhost.to_owned(),
            exchange.clone(),
            key.clone(),
            args.clone(),
        );
        if bound {
            BindingEvent::Bound {
                vhost,
                exchange,
                key,
                args,
                destination,
            }
        } else {
            BindingEvent::Unbound {
                vhost,
                exchange,
                key,
                args,
                destination,
            }
        }
    }
}

/// The watcher's channel: batches of events, each batch one directory change (or the
/// snapshot).
pub type WatchSender = mpsc::UnboundedSender<Vec<BindingEvent>>;

/// The exchanges the watcher hears about: those `federation.exchange` federates.
pub struct Watched(pub Arc<FederationConfig>);

impl Watched {
    fn covers(&self, vhost: &str, exchange: &[u8]) -> bool {
        let Ok(name) = std::str::from_utf8(exchange) else {
            return false;
        };
        self.0.covers(vhost, name)
    }
}

impl std::fmt::Debug for Watched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watched")
    }
}

/// The coordinator's watcher, if any.
#[derive(Default)]
pub struct BindingWatch {
    watcher: RefCell<Option<(WatchSender, Watched)>>,
}

fn up(vhost: &str, ex: &Exchange) -> BindingEvent {
    BindingEvent::ExchangeUp {
        vhost: vhost.to_owned(),
        exchange: ex.def.name.clone(),
        internal: ex.def.internal,
        kind: ex.def.kind.name(),
        durable: ex.def.durable,
    }
}

/// Every binding from `ex`, as `Bound` (or `Unbound`) events.
fn bindings_of(vd: &VhostDirectory, ex: &Exchange, bound: bool, out: &mut Vec<BindingEvent>) {
    let name = &ex.def.name;
    for b in ex.bindings() {
        let to = Destination::Queue(b.queue_name.clone());
        out.push(BindingEvent::binding(
            bound,
            &vd.name,
            name,
            &b.routing_key,
            &b.arguments,
            to,
        ));
    }
    for (_, b) in ex.exchange_bindings() {
        let to = Destination::Exchange(b.destination.clone());
        out.push(BindingEvent::binding(
            bound,
            &vd.name,
            name,
            &b.routing_key,
            &b.arguments,
            to,
        ));
    }
}

impl BindingWatch {
    /// Starts watching: sends the snapshot of every watched exchange that exists and its
    /// bindings, then keeps `tx` for the changes that follow. A second watcher replaces
    /// the first.
    pub fn start(&self, directory: &Directory, tx: WatchSender, watched: Watched) {
        let mut snapshot = Vec::new();
        for i in 0..directory.vhost_count() {
            let Some(vd) = directory.vhost(i as _) else {
                continue;
            };
            for ex in vd
                .exchanges()
                .filter(|ex| watched.covers(&vd.name, ex.def.name.as_bytes()))
            {
                snapshot.push(up(&vd.name, ex));
                bindings_of(vd, ex, true, &mut snapshot);
            }
        }
        if tx.send(snapshot).is_ok() {
            *self.watcher.borrow_mut() = Some((tx, watched));
        }
    }

    /// What `change` will do to watched exchanges, worked out before it is applied
    /// (a deleted queue's or exchange's bindings are gone afterwards); `None` without a
    /// watcher or when it touches none.
    pub fn events_of(
        &self,
        directory: &Directory,
        change: &DirectoryChange,
    ) -> Option<Vec<BindingEvent>> {
        let guard = self.watcher.borrow();
        let (_, watched) = guard.as_ref()?;
        let events = changes(directory, change, watched);
        (!events.is_empty()).then_some(events)
    }

    /// Sends what [`BindingWatch::events_of`] found; a watcher that has gone is dropped.
    pub fn send(&self, events: Vec<BindingEvent>) {
        let mut guard = self.watcher.borrow_mut();
        if let Some((tx, _)) = guard.as_ref() {
            if tx.send(events).is_err() {
                *guard = None;
            }
        }
    }
}

fn changes(
    directory: &Directory,
    change: &DirectoryChange,
    watched: &Watched,
) -> Vec<BindingEvent> {
    let vhost_of = |idx| directory.vhost(idx);
    let mut out = Vec::new();
    match change {
        DirectoryChange::DeclareExchange { vhost, def } => {
            if let Some(vd) = vhost_of(*vhost) {
                if watched.covers(&vd.name, def.name.as_bytes()) && vd.exchange(&def.name).is_none()
                {
                    out.push(BindingEvent::ExchangeUp {
                        vhost: vd.name.clone(),
                        exchange: def.name.clone(),
                        internal: def.internal,
                        kind: def.kind.name(),
                        durable: def.durable,
                    });
                }
            }
        }
        DirectoryChange::DeleteExchange { vhost, name } => {
            let Some(vd) = vhost_of(*vhost) else {
                return out;
            };
            if watched.covers(&vd.name, name.as_bytes()) && vd.exchange(name).is_some() {
                out.push(BindingEvent::ExchangeDown {
                    vhost: vd.name.clone(),
                    exchange: name.clone(),
                });
            }
            // Bindings from watched exchanges to the deleted one go with it.
            let Some(gone) = vd.exchange_id(name) else {
                return out;
            };
            for ex in vd
                .exchanges()
                .filter(|ex| watched.covers(&vd.name, ex.def.name.as_bytes()))
            {
                for (dest, b) in ex.exchange_bindings() {
                    if dest == gone && ex.def.name != *name {
                        let to = Destination::Exchange(b.destination.clone());
                        out.push(BindingEvent::binding(
                            false,
                            &vd.name,
                            &ex.def.name,
                            &b.routing_key,
                            &b.arguments,
                            to,
                        ));
                    }
                }
            }
        }
        DirectoryChange::DeleteQueue { vhost, queue, name } => {
            let Some(vd) = vhost_of(*vhost) else {
                return out;
            };
            for ex in vd
                .exchanges()
                .filter(|ex| watched.covers(&vd.name, ex.def.name.as_bytes()))
            {
                for b in ex.bindings_of(*queue) {
                    let to = Destination::Queue(name.clone());
                    out.push(BindingEvent::binding(
                        false,
                        &vd.name,
                        &ex.def.name,
                        &b.routing_key,
                        &b.arguments,
                        to,
                    ));
                }
            }
        }
        DirectoryChange::Bind {
            vhost,
            exchange,
            binding,
        }
        | DirectoryChange::Unbind {
            vhost,
            exchange,
            binding,
        } => {
            let Some(vd) = vhost_of(*vhost) else {
                return out;
            };
            if !watched.covers(&vd.name, exchange.as_bytes()) {
                return out;
            }
            let Some(ex) = vd.exchange(exchange) else {
                return out;
            };
            let adding = matches!(change, DirectoryChange::Bind { .. });
            if ex.has_binding(binding) != adding {
                let to = Destination::Queue(binding.queue_name.clone());
                out.push(BindingEvent::binding(
                    adding,
                    &vd.name,
                    exchange,
                    &binding.routing_key,
                    &binding.arguments,
                    to,
                ));
            }
        }
        DirectoryChange::BindExchange {
            vhost,
            source,
            binding,
        }
        | DirectoryChange::UnbindExchange {
            vhost,
            source,
            binding,
        } => {
            let Some(vd) = vhost_of(*vhost) else {
                return out;
            };
            if !watched.covers(&vd.name, source.as_bytes()) || vd.exchange(source).is_none() {
                return out;
            }
            let adding = matches!(change, DirectoryChange::BindExchange { .. });
            if vd.has_exchange_binding(source, binding) != adding {
                let to = Destination::Exchange(binding.destination.clone());
                out.push(BindingEvent::binding(
                    adding,
                    &vd.name,
                    source,
                    &binding.routing_key,
                    &binding.arguments,
                    to,
                ));
            }
        }
        DirectoryChange::DeclareQueue { .. } => {}
    }
    out
}

//! Owns: working out which auto-delete exchanges a removal takes with it, as RabbitMQ
//! does (`rabbit_db_exchange:maybe_auto_delete`): an auto-delete exchange goes when a
//! binding where it is the source is removed and none is left. Deleting an exchange
//! removes the bindings to it, which can leave its own sources without bindings in turn,
//! so the deletions follow exchange-to-exchange bindings backwards.
//!
//! Does not: change the directory. The coordinator (`shard::control`) turns the answer
//! into `DirectoryChange::DeleteExchange`s after the removal itself.

use std::collections::{HashMap, HashSet};

use crate::model::exchange::{ExchangeBinding, ExchangeId};
use crate::model::ids::QueueRef;
use crate::protocol::ShortStr;

use super::VhostDirectory;

/// Bindings about to be removed.
pub enum Removal<'a> {
    /// Every binding to these queues (they are being deleted together).
    Queues(&'a [QueueRef]),
    /// One binding from `source` to a queue.
    QueueBinding { source: &'a ShortStr },
    /// One binding from `source` to another exchange.
    ExchangeBinding {
        source: &'a ShortStr,
        binding: &'a ExchangeBinding,
    },
    /// An exchange deleted explicitly, with every binding from it and to it.
    Exchange(&'a ShortStr),
}

/// The bookkeeping of one cascade.
struct Cascade<'d> {
    dir: &'d VhostDirectory,
    /// Bindings each exchange still has as a source (known once it lost one).
    remaining: HashMap<ExchangeId, usize>,
    /// Exchange-to-exchange bindings (source, destination) already counted as removed.
    removed_links: HashMap<(ExchangeId, ExchangeId), usize>,
    deleted: HashSet<ExchangeId>,
    candidates: Vec<ExchangeId>,
    /// Auto-deleted exchanges, in order.
    out: Vec<ShortStr>,
}

impl Cascade<'_> {
    /// `source` loses `n` of its bindings.
    fn lose(&mut self, source: ExchangeId, n: usize) {
        let Some(ex) = self.dir.exchanges.get(source) else {
            return;
        };
        let left = self
            .remaining
            .entry(source)
            .or_insert_with(|| ex.binding_count());
        *left = left.saturating_sub(n);
        self.candidates.push(source);
    }

    /// `id` is deleted: the bindings to it go.
    fn delete(&mut self, id: ExchangeId) {
        if !self.deleted.insert(id) {
            return;
        }
        let Some(ex) = self.dir.exchanges.get(id) else {
            return;
        };
        for (source, n) in ex.sources() {
            if source == id || self.deleted.contains(&source) {
                continue;
            }
            let counted = self.removed_links.get(&(source, id)).copied().unwrap_or(0);
            if n > counted {
                self.lose(source, n - counted);
            }
        }
    }

    fn run(&mut self) {
        while let Some(id) = self.candidates.pop() {
            if self.deleted.contains(&id) {
                continue;
            }
            let Some(ex) = self.dir.exchanges.get(id) else {
                continue;
            };
            if ex.def.auto_delete && self.remaining.get(&id) == Some(&0) {
                self.out.push(ex.def.name.clone());
                self.delete(id);
            }
        }
    }
}

impl VhostDirectory {
    /// The auto-delete exchanges that `removal` leaves without a binding as source,
    /// directly or through the deletion of the exchanges they were bound to, in the
    /// order to delete them. An explicitly deleted exchange is not among them.
    ///
    /// Costs O(exchanges × queues) for queues (as finding their bindings does), otherwise
    /// O(exchanges deleted + the bindings to them).
    pub fn auto_deleted(&self, removal: Removal<'_>) -> Vec<ShortStr> {
        let mut c = Cascade {
            dir: self,
            remaining: HashMap::new(),
            removed_links: HashMap::new(),
            deleted: HashSet::new(),
            candidates: Vec::new(),
            out: Vec::new(),
        };
        match removal {
            Removal::Queues(queues) => {
                for (id, ex) in self.exchanges.iter() {
                    let n: usize = queues.iter().map(|&q| ex.bindings_of(q).len()).sum();
                    if n > 0 {
                        c.lose(id, n);
                    }
                }
            }
            Removal::QueueBinding { source } => {
                if let Some(id) = self.exchange_id(source) {
                    c.lose(id, 1);
                }
            }
            Removal::ExchangeBinding { source, binding } => {
                let ids = (
                    self.exchange_id(source),
                    self.exchange_id(&binding.destination),
                );
                if let (Some(src), Some(dest)) = ids {
                    c.removed_links.insert((src, dest), 1);
                    c.lose(src, 1);
                }
            }
            Removal::Exchange(name) => {
                if let Some(id) = self.exchange_id(name) {
                    c.delete(id);
                }
            }
        }
        c.run();
        c.out
    }
}

#[cfg(test)]
mod tests {
    use super::Removal;
    use crate::model::exchange::{Binding, ExchangeBinding, ExchangeDef, ExchangeKind};
    use crate::model::ids::{QueueId, QueueRef};
    use crate::model::routing::{Directory, DirectoryChange};
    use crate::protocol::{FieldTable, ShortStr};

    fn declare(dir: &mut Directory, name: &str, auto_delete: bool) {
        dir.apply(&DirectoryChange::DeclareExchange {
            vhost: 0,
            def: ExchangeDef {
                name: name.into(),
                kind: ExchangeKind::Fanout,
                durable: false,
                auto_delete,
                internal: false,
                arguments: FieldTable::default(),
            },
        });
    }

    fn e2e(dest: &str) -> ExchangeBinding {
        ExchangeBinding {
            destination: dest.into(),
            routing_key: "".into(),
            arguments: FieldTable::default(),
        }
    }

    fn link(dir: &mut Directory, src: &str, dest: &str) {
        dir.apply(&DirectoryChange::BindExchange {
            vhost: 0,
            source: src.into(),
            binding: e2e(dest),
        });
    }

    fn q(id: u64) -> QueueRef {
        QueueRef {
            id: QueueId(id),
            home: 0,
        }
    }

    fn bind_queue(dir: &mut Directory, ex: &str, id: u64) {
        dir.apply(&DirectoryChange::Bind {
            vhost: 0,
            exchange: ex.into(),
            binding: Binding {
                queue: q(id),
                queue_name: format!("q{id}").as_str().into(),
                routing_key: "".into(),
                arguments: FieldTable::default(),
            },
        });
    }

    fn names(v: Vec<ShortStr>) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn last_source_binding_deletes_and_cascades_backwards() {
        let mut dir = Directory::new(&["/".to_owned()]);
        declare(&mut dir, "top", true);
        declare(&mut dir, "mid", true);
        declare(&mut dir, "keep", false);
        link(&mut dir, "top", "mid");
        link(&mut dir, "keep", "mid");
        bind_queue(&mut dir, "mid", 1);
        let vh = dir.vhost(0).expect("vhost");
        // The queue goes: mid has nothing left as a source, so it goes, and with it
        // top's only binding; keep is not auto-delete.
        assert_eq!(
            names(vh.auto_deleted(Removal::Queues(&[q(1)]))),
            ["mid", "top"]
        );
        // Unbinding top → mid: top goes, mid keeps its queue binding.
        let b = e2e("mid");
        let removal = Removal::ExchangeBinding {
            source: &"top".into(),
            binding: &b,
        };
        assert_eq!(names(vh.auto_deleted(removal)), ["top"]);
        // Deleting mid explicitly takes top (not mid itself, nor keep).
        assert_eq!(
            names(vh.auto_deleted(Removal::Exchange(&"mid".into()))),
            ["top"]
        );
        // An exchange only bound *to* is not a candidate.
        assert!(vh
            .auto_deleted(Removal::QueueBinding {
                source: &"keep".into()
            })
            .is_empty());
    }

    /// Queues deleted together (the broker's own deletions, a round at a time) take an
    /// auto-delete exchange that each of them alone would leave bound.
    #[test]
    fn queues_deleted_together_take_the_exchange_they_shared() {
        let mut dir = Directory::new(&["/".to_owned()]);
        declare(&mut dir, "shared", true);
        bind_queue(&mut dir, "shared", 1);
        bind_queue(&mut dir, "shared", 2);
        bind_queue(&mut dir, "shared", 3);
        let vh = dir.vhost(0).expect("vhost");
        assert!(vh.auto_deleted(Removal::Queues(&[q(1)])).is_empty());
        assert!(vh.auto_deleted(Removal::Queues(&[q(1), q(2)])).is_empty());
        assert_eq!(
            names(vh.auto_deleted(Removal::Queues(&[q(1), q(2), q(3)]))),
            ["shared"]
        );
    }

    #[test]
    fn loops_of_auto_delete_exchanges_go_together() {
        let mut dir = Directory::new(&["/".to_owned()]);
        declare(&mut dir, "a", true);
        declare(&mut dir, "b", true);
        link(&mut dir, "a", "b");
        link(&mut dir, "b", "a");
        let vh = dir.vhost(0).expect("vhost");
        let b = e2e("b");
        let removal = Removal::ExchangeBinding {
            source: &"a".into(),
            binding: &b,
        };
        assert_eq!(names(vh.auto_deleted(removal)), ["a", "b"]);
        // With a second binding a → b, removing one leaves a in place.
        let mut two = b.clone();
        two.routing_key = "other".into();
        dir.apply(&DirectoryChange::BindExchange {
            vhost: 0,
            source: "a".into(),
            binding: two,
        });
        let vh = dir.vhost(0).expect("vhost");
        let removal = Removal::ExchangeBinding {
            source: &"a".into(),
            binding: &b,
        };
        assert!(vh.auto_deleted(removal).is_empty());
    }
}

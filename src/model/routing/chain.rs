//! Owns: routing through exchange-to-exchange bindings — from an exchange that forwards
//! to others, every exchange reachable by bindings that match the message (each with its
//! own type's rule, on the same routing key and headers) adds its queues; each exchange
//! is visited at most once per publish (so binding loops end), and each queue is routed
//! to once however many paths lead to it.
//!
//! Does not: allocate for a chain of up to eight exchanges pending at once and 16 queues,
//! or cost anything to a publish through an exchange without such bindings (the caller
//! checks `has_exchange_bindings` first).
//!
//! # Costs
//! O(exchanges reached + bindings matched + queues), plus the de-duplication of the
//! queues when more than one exchange contributed (see `topic_trie::dedup_tail`).

use crate::model::exchange::headers::LazyHeaders;
use crate::model::exchange::{Exchange, ExchangeId, ExchangeTargets, Targets};
use crate::model::topic_trie::dedup_tail;
use crate::protocol::FieldTable;

use super::VhostDirectory;

impl VhostDirectory {
    /// Follows the exchange bindings of `source`, whose own queues are already in
    /// `out[start..]`.
    pub(super) fn follow_chain<F: FnOnce() -> Option<FieldTable>>(
        &self,
        source: ExchangeId,
        routing_key: &[u8],
        headers: &mut LazyHeaders<F>,
        out: &mut Targets,
        start: usize,
    ) {
        let epoch = self.route_epoch.get().wrapping_add(1);
        self.route_epoch.set(epoch);
        let Some(first) = self.exchanges.get(source) else {
            return;
        };
        first.visited.set(epoch);
        let mut contributed = usize::from(out.len() > start);
        let mut pending = ExchangeTargets::new();
        self.forward(first, routing_key, headers, &mut pending, epoch);
        while let Some(id) = pending.pop() {
            let Some(ex) = self.exchanges.get(id) else {
                continue;
            };
            let before = out.len();
            ex.route(routing_key, headers, out);
            if out.len() > before {
                contributed += 1;
            }
            if ex.has_exchange_bindings() {
                self.forward(ex, routing_key, headers, &mut pending, epoch);
            }
        }
        if contributed > 1 {
            dedup_tail(out, start);
        }
    }

    /// Appends to `pending` the exchanges `ex` forwards the message to that this route
    /// has not reached yet, and marks them reached.
    fn forward<F: FnOnce() -> Option<FieldTable>>(
        &self,
        ex: &Exchange,
        routing_key: &[u8],
        headers: &mut LazyHeaders<F>,
        pending: &mut ExchangeTargets,
        epoch: u64,
    ) {
        let from = pending.len();
        ex.route_exchanges(routing_key, headers, pending);
        let mut keep = from;
        for read in from..pending.len() {
            let id = pending[read];
            let Some(dest) = self.exchanges.get(id) else {
                continue;
            };
            if dest.visited.get() != epoch {
                dest.visited.set(epoch);
                pending[keep] = id;
                keep += 1;
            }
        }
        pending.truncate(keep);
    }
}

#[cfg(test)]
mod tests {
    use crate::model::exchange::{Binding, ExchangeBinding, ExchangeDef, ExchangeKind, Targets};
    use crate::model::ids::{QueueId, QueueRef};
    use crate::model::routing::{Directory, DirectoryChange};
    use crate::protocol::{FieldTable, FieldValue, LongStr};

    fn declare(dir: &mut Directory, name: &str, kind: ExchangeKind) {
        dir.apply(&DirectoryChange::DeclareExchange {
            vhost: 0,
            def: ExchangeDef {
                name: name.into(),
                kind,
                durable: false,
                auto_delete: false,
                internal: false,
                arguments: FieldTable::default(),
            },
        });
    }

    fn link(dir: &mut Directory, src: &str, dest: &str, key: &str, bind: bool) {
        let binding = ExchangeBinding {
            destination: dest.into(),
            routing_key: key.into(),
            arguments: FieldTable::default(),
        };
        let source = src.into();
        dir.apply(&if bind {
            DirectoryChange::BindExchange {
                vhost: 0,
                source,
                binding,
            }
        } else {
            DirectoryChange::UnbindExchange {
                vhost: 0,
                source,
                binding,
            }
        });
    }

    fn bind_queue(dir: &mut Directory, ex: &str, id: u64, key: &str) {
        dir.apply(&DirectoryChange::Bind {
            vhost: 0,
            exchange: ex.into(),
            binding: Binding {
                queue: QueueRef {
                    id: QueueId(id),
                    home: 0,
                },
                queue_name: format!("q{id}").as_str().into(),
                routing_key: key.into(),
                arguments: FieldTable::default(),
            },
        });
    }

    fn route_with(dir: &Directory, ex: &str, key: &str, headers: Option<FieldTable>) -> Vec<u64> {
        let mut out = Targets::new();
        let vh = dir.vhost(0).expect("vhost");
        vh.route(&ex.into(), &key.into(), || headers, &mut out)
            .expect("exchange exists");
        let ids: Vec<u64> = out.iter().map(|r| r.id.0).collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len(), "a queue routed twice: {ids:?}");
        sorted
    }

    fn route(dir: &Directory, ex: &str, key: &str) -> Vec<u64> {
        route_with(dir, ex, key, None)
    }

    #[test]
    fn chain_across_types_follows_each_rule() {
        let mut dir = Directory::new(&["/".to_owned()]);
        declare(&mut dir, "d", ExchangeKind::Direct);
        declare(&mut dir, "t", ExchangeKind::Topic);
        declare(&mut dir, "f", ExchangeKind::Fanout);
        link(&mut dir, "d", "t", "a.b", true);
        link(&mut dir, "t", "f", "a.*", true);
        bind_queue(&mut dir, "t", 1, "#");
        bind_queue(&mut dir, "f", 2, "ignored");
        assert_eq!(route(&dir, "d", "a.b"), vec![1, 2]);
        assert_eq!(route(&dir, "d", "a.c"), Vec::<u64>::new());
        assert_eq!(route(&dir, "t", "a.c"), vec![1, 2]);
        assert_eq!(route(&dir, "t", "b"), vec![1]);
        link(&mut dir, "t", "f", "a.*", false);
        assert_eq!(route(&dir, "d", "a.b"), vec![1]);
    }

    #[test]
    fn loops_end_and_diamonds_deliver_once() {
        let mut dir = Directory::new(&["/".to_owned()]);
        for name in ["a", "b", "c", "d"] {
            declare(&mut dir, name, ExchangeKind::Fanout);
        }
        link(&mut dir, "a", "b", "", true);
        link(&mut dir, "b", "a", "", true);
        link(&mut dir, "a", "a", "", true);
        bind_queue(&mut dir, "a", 1, "");
        bind_queue(&mut dir, "b", 1, "");
        bind_queue(&mut dir, "b", 2, "");
        assert_eq!(route(&dir, "a", "k"), vec![1, 2]);
        assert_eq!(route(&dir, "b", "k"), vec![1, 2]);
        // Diamond: a → c → d and a → d's other path through b.
        link(&mut dir, "a", "c", "", true);
        link(&mut dir, "c", "d", "", true);
        link(&mut dir, "b", "d", "", true);
        bind_queue(&mut dir, "d", 3, "");
        bind_queue(&mut dir, "c", 3, "");
        assert_eq!(route(&dir, "a", "k"), vec![1, 2, 3]);
        assert_eq!(route(&dir, "c", "k"), vec![3]);
    }

    #[test]
    fn headers_exchange_in_a_chain() {
        let mut dir = Directory::new(&["/".to_owned()]);
        declare(&mut dir, "t", ExchangeKind::Topic);
        declare(&mut dir, "h", ExchangeKind::Headers);
        link(&mut dir, "t", "h", "#", true);
        let mut args = FieldTable::default();
        args.insert("kind", FieldValue::LongStr(LongStr::from("x")));
        dir.apply(&DirectoryChange::Bind {
            vhost: 0,
            exchange: "h".into(),
            binding: Binding {
                queue: QueueRef {
                    id: QueueId(7),
                    home: 1,
                },
                queue_name: "q7".into(),
                routing_key: "".into(),
                arguments: args.clone(),
            },
        });
        assert_eq!(route_with(&dir, "t", "any", Some(args)), vec![7]);
        assert_eq!(route_with(&dir, "t", "any", None), Vec::<u64>::new());
    }

    #[test]
    fn federation_upstream_exchange_filters_what_reaches_its_queue() {
        use crate::model::hops::{self, ReceivedFrom};
        let mut dir = Directory::new(&["/".to_owned()]);
        declare(&mut dir, "x", ExchangeKind::Topic);
        let mut args = FieldTable::default();
        args.insert(hops::MAX_HOPS_ARG, FieldValue::I64(1));
        args.insert(hops::DOWNSTREAM_NAME_ARG, FieldValue::LongStr("b".into()));
        args.insert(hops::DOWNSTREAM_VHOST_ARG, FieldValue::LongStr("/".into()));
        dir.apply(&DirectoryChange::DeclareExchange {
            vhost: 0,
            def: ExchangeDef {
                name: "federation: x -> b".into(),
                kind: ExchangeKind::FederationUpstream,
                durable: true,
                auto_delete: true,
                internal: true,
                arguments: args,
            },
        });
        link(&mut dir, "x", "federation: x -> b", "a.*", true);
        bind_queue(&mut dir, "federation: x -> b", 1, "");
        bind_queue(&mut dir, "x", 2, "#");
        assert_eq!(route(&dir, "x", "a.b"), vec![1, 2]);
        assert_eq!(
            route(&dir, "x", "c"),
            vec![2],
            "the binding key still applies"
        );
        let once = hops::prepend_received_from(
            None,
            &ReceivedFrom {
                uri: "amqp://c",
                exchange: "x",
                redelivered: false,
                cluster_name: Some("c"),
                vhost: "/",
            },
        );
        assert_eq!(
            route_with(&dir, "x", "a.b", Some(once)),
            vec![2],
            "hops == max"
        );
    }

    #[test]
    fn deleting_an_exchange_removes_bindings_both_ways() {
        let mut dir = Directory::new(&["/".to_owned()]);
        for name in ["a", "b", "c"] {
            declare(&mut dir, name, ExchangeKind::Fanout);
        }
        link(&mut dir, "a", "b", "", true);
        link(&mut dir, "b", "c", "", true);
        bind_queue(&mut dir, "c", 1, "");
        assert_eq!(route(&dir, "a", "k"), vec![1]);
        dir.apply(&DirectoryChange::DeleteExchange {
            vhost: 0,
            name: "b".into(),
        });
        let vh = dir.vhost(0).expect("vhost");
        let a = vh.exchange(&"a".into()).expect("a");
        assert!(!a.has_exchange_bindings());
        assert_eq!(a.binding_count(), 0);
        let c = vh.exchange(&"c".into()).expect("c");
        assert_eq!(c.sources().count(), 0);
        // A new exchange may take b's slot: nothing leads to it.
        declare(&mut dir, "b2", ExchangeKind::Fanout);
        bind_queue(&mut dir, "b2", 2, "");
        assert_eq!(route(&dir, "a", "k"), Vec::<u64>::new());
        assert_eq!(route(&dir, "b2", "k"), vec![2]);
    }
}

//! Owns: which links exist — one per federated exchange that exists and per upstream
//! its `[[federation.exchange]]` names — started when the exchange is known (at start,
//! or declared later), stopped when it is deleted (the link then removes its upstream
//! queue and exchange) or when the broker stops (they stay); each exchange's binding
//! [`Interest`], fed by the coordinator's watch (`shard::binding_watch`) and handed to its
//! links as coalesced bind / unbind changes; and the answers to status requests.
//!
//! Does not: connect anywhere (each link does) or read bindings other than through the
//! watch.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use tokio::sync::{mpsc, watch};

use super::interest::{Interest, InterestChange};
use super::link::{self, LinkCmd, LinkContext};
use super::status::LinkStats;
use super::{FederationSeed, LinkId, LinkStatus, Request, SHUTDOWN_GRACE};
use crate::protocol::ShortStr;
use crate::shard::binding_watch::{BindingEvent, Watched};
use crate::shard::inbox::ShardMsg;

/// A link the manager started.
struct RunningLink {
    id: LinkId,
    cmds: mpsc::UnboundedSender<LinkCmd>,
    stats: Rc<LinkStats>,
    task: tokio::task::JoinHandle<()>,
}

/// A federated exchange that exists.
struct Federated {
    interest: Rc<RefCell<Interest>>,
    links: Vec<RunningLink>,
}

/// The manager's state.
struct Manager {
    seed: Rc<FederationSeed>,
    exchanges: BTreeMap<(String, String), Federated>,
}

/// Runs until `stop` is raised or the coordinator goes.
pub(super) async fn run(
    seed: FederationSeed,
    mut requests: mpsc::Receiver<Request>,
    mut stop: watch::Receiver<bool>,
) {
    let (tx, mut events) = mpsc::unbounded_channel();
    let watched = Watched(std::sync::Arc::new(seed.config.federation.clone()));
    seed.peers.send(0, ShardMsg::WatchBindings(tx, watched));
    let mut manager = Manager {
        seed: Rc::new(seed),
        exchanges: BTreeMap::new(),
    };
    loop {
        tokio::select! {
            batch = events.recv() => match batch {
                Some(batch) => {
                    for event in batch {
                        manager.on_event(event);
                    }
                }
                None => break,
            },
            Some(request) = requests.recv() => match request {
                Request::Links(reply) => {
                    let _ = reply.send(manager.statuses());
                }
            },
            _ = stop.changed() => break,
        }
    }
    manager.stop_all().await;
}

impl Manager {
    fn on_event(&mut self, event: BindingEvent) {
        match event {
            BindingEvent::ExchangeUp {
                vhost,
                exchange,
                internal,
                kind,
                durable,
            } => {
                let name = exchange.to_string();
                if internal || self.exchanges.contains_key(&(vhost.clone(), name.clone())) {
                    return;
                }
                let interest = Rc::new(RefCell::new(Interest::default()));
                let upstreams: Vec<_> = self
                    .seed
                    .config
                    .federation
                    .upstreams_of(&vhost, &name)
                    .into_iter()
                    .cloned()
                    .collect();
                let links = upstreams
                    .into_iter()
                    .map(|upstream| {
                        let id = LinkId {
                            vhost: vhost.clone(),
                            exchange: name.clone(),
                            upstream: upstream.name.clone(),
                            upstream_exchange: upstream
                                .exchange
                                .clone()
                                .unwrap_or_else(|| name.clone()),
                        };
                        let ctx = LinkContext::new(
                            Rc::clone(&self.seed),
                            id.clone(),
                            upstream,
                            Rc::clone(&interest),
                            kind,
                            durable,
                        );
                        let stats = Rc::clone(&ctx.stats);
                        let (cmds, rx) = mpsc::unbounded_channel();
                        let task = tokio::task::spawn_local(link::run(ctx, rx));
                        RunningLink {
                            id,
                            cmds,
                            stats,
                            task,
                        }
                    })
                    .collect();
                self.exchanges
                    .insert((vhost, name), Federated { interest, links });
            }
            BindingEvent::ExchangeDown { vhost, exchange } => {
                if let Some(gone) = self.exchanges.remove(&(vhost, exchange.to_string())) {
                    for l in gone.links {
                        // The exchange is gone for good: the link removes its upstream
                        // queue and exchange as it stops.
                        let _ = l.cmds.send(LinkCmd::Stop { clean_up: true });
                    }
                }
            }
            BindingEvent::Bound {
                vhost,
                exchange,
                key,
                args,
                destination,
            } => self.binding_changed(&vhost, &exchange, |i| i.add(&key, &args, destination)),
            BindingEvent::Unbound {
                vhost,
                exchange,
                key,
                args,
                destination,
            } => self.binding_changed(&vhost, &exchange, |i| i.remove(&key, &args, &destination)),
        }
    }

    /// Applies a binding change to the exchange's interest and tells its links when the
    /// upstream must follow.
    fn binding_changed(
        &self,
        vhost: &str,
        exchange: &ShortStr,
        change: impl FnOnce(&mut Interest) -> Option<InterestChange>,
    ) {
        let key = (vhost.to_owned(), exchange.to_string());
        let Some(f) = self.exchanges.get(&key) else {
            return;
        };
        let change = change(&mut f.interest.borrow_mut());
        if let Some(change) = change {
            f.tell(change);
        }
    }

    fn statuses(&self) -> Vec<LinkStatus> {
        let node = &self.seed.config.node_name;
        let mut all: Vec<LinkStatus> = self
            .exchanges
            .values()
            .flat_map(|f| f.links.iter())
            .map(|l| l.stats.snapshot(&l.id, node))
            .collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }

    /// The broker stops: every link closes its connections (its upstream queue stays).
    async fn stop_all(&mut self) {
        let mut tasks = Vec::new();
        for (_, f) in std::mem::take(&mut self.exchanges) {
            for l in f.links {
                let _ = l.cmds.send(LinkCmd::Stop { clean_up: false });
                tasks.push(l.task);
            }
        }
        let all = async {
            for t in &mut tasks {
                let _ = t.await;
            }
        };
        if tokio::time::timeout(SHUTDOWN_GRACE, all).await.is_err() {
            for t in &tasks {
                t.abort();
            }
        }
    }
}

impl Federated {
    fn tell(&self, change: InterestChange) {
        for l in &self.links {
            let _ = l.cmds.send(LinkCmd::Interest(change.clone()));
        }
    }
}

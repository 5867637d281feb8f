//! Owns: exchange federation — the links that make this broker (the downstream)
//! subscribe to an exchange of an upstream broker (sluice or RabbitMQ) over ordinary
//! AMQP 0-9-1 and republish what they receive into the local exchange of the same name,
//! with RabbitMQ's federation semantics: the upstream queue `federation: X -> NODE` and
//! exchange `… A`/`… B` of type `x-federation-upstream`, bindings that follow local
//! interest (coalesced, pipelined), `x-received-from` / `x-bound-from` hop and loop
//! rules (`model::hops`), the three ack modes, reconnects with jitter and the FED-
//! log lines. Runs on one thread of its own ("sluice-federation", a current-thread
//! tokio runtime): the manager ([`manager`]) and one task per link ([`link`]).
//!
//! Does not: route or enqueue. A link publishes into this broker as a client, over a
//! loopback connection to its own AMQP listener, authenticated with the per-process
//! credential of `auth::local_link`: the shards see an ordinary publisher, so routing,
//! confirms (on every queue, and on disk for persistent messages on durable queues),
//! the memory and disk alarms and queue-capacity flow control apply to it unchanged —
//! and hold it back, which stops it taking more from the upstream (its prefetch runs
//! out), so the backlog builds in the upstream queue where the upstream's policies see
//! it. Binding changes come from the coordinator (shard 0) through
//! `shard::binding_watch`, in the order it applies them; no lock is shared with a shard.

mod interest;
pub mod link;
mod manager;
pub mod status;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use crate::auth::local_link::LinkCredential;
use crate::config::Config;
use crate::shard::inbox::Peers;

pub use status::{LinkState, LinkStatus};

/// One link: a federated exchange of a vhost and one of its upstreams.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LinkId {
    pub vhost: String,
    pub exchange: String,
    pub upstream: String,
    /// The exchange on the upstream (the upstream's `exchange`, or the same name).
    pub upstream_exchange: String,
}

impl LinkId {
    /// The name the link's connections carry (`connection_name`), as the upstream's
    /// connection list shows it.
    pub fn connection_name(&self) -> String {
        format!(
            "Federation link (upstream: {}, exchange: {})",
            self.upstream, self.exchange
        )
    }

    fn log_name(&self) -> crate::ops::federation_event::LinkName {
        crate::ops::federation_event::LinkName {
            vhost: self.vhost.clone(),
            exchange: self.exchange.clone(),
            upstream: self.upstream.clone(),
        }
    }
}

/// What the federation thread needs.
pub struct FederationSeed {
    pub config: Arc<Config>,
    pub peers: Peers,
    /// This broker's plain AMQP listener, which the links publish through.
    pub local: SocketAddr,
    pub credential: Arc<LinkCredential>,
}

enum Request {
    Links(oneshot::Sender<Vec<LinkStatus>>),
}

/// A cheap handle for the operator interfaces: asks the federation thread.
#[derive(Clone)]
pub struct FederationHandle {
    requests: mpsc::Sender<Request>,
}

impl FederationHandle {
    /// Every link's status, sorted by vhost, exchange and upstream. Empty when the
    /// federation thread has stopped.
    pub async fn links(&self) -> Vec<LinkStatus> {
        let (tx, rx) = oneshot::channel();
        if self.requests.send(Request::Links(tx)).await.is_err() {
            return Vec::new();
        }
        rx.await.unwrap_or_default()
    }
}

/// The running federation thread.
pub struct Federation {
    handle: FederationHandle,
    stop: watch::Sender<bool>,
    thread: std::thread::JoinHandle<()>,
}

/// How long shutdown waits for links to close their connections.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

impl Federation {
    /// Starts the federation thread; its links start as their exchanges are known.
    pub fn start(seed: FederationSeed) -> std::io::Result<Federation> {
        let (requests_tx, requests_rx) = mpsc::channel(64);
        let (stop_tx, stop_rx) = watch::channel(false);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("sluice-federation".into())
            .spawn(move || {
                let local = tokio::task::LocalSet::new();
                local.block_on(&runtime, manager::run(seed, requests_rx, stop_rx));
            })?;
        Ok(Federation {
            handle: FederationHandle {
                requests: requests_tx,
            },
            stop: stop_tx,
            thread,
        })
    }

    pub fn handle(&self) -> FederationHandle {
        self.handle.clone()
    }

    /// Stops every link (their upstream queues stay, so messages published meanwhile
    /// wait there, bounded by `expires` and the upstream's policies) and the thread.
    pub fn shutdown(self) {
        let _ = self.stop.send(true);
        if self.thread.join().is_err() {
            tracing::error!("federation thread panicked");
        }
    }
}

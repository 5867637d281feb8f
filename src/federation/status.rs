//! Owns: what a link shows of itself — its state (starting, running, or the error it
//! failed with), since when, its connections and its counters — kept by the link on the
//! federation thread ([`LinkStats`], plain cells) and copied out on request
//! ([`LinkStatus`], what `GET /api/federation-links`, /metrics and `sluicectl federation`
//! show, with RabbitMQ's field names).
//!
//! Does not: serve HTTP or render JSON (`crate::http` does).

use std::cell::{Cell, RefCell};
use std::time::SystemTime;

/// A link's state as RabbitMQ names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkState {
    Starting,
    Running,
    /// Down, with the reason; retrying.
    Error(String),
}

impl LinkState {
    /// RabbitMQ's `status` field: `starting`, `running` or `error`.
    pub fn name(&self) -> &'static str {
        match self {
            LinkState::Starting => "starting",
            LinkState::Running => "running",
            LinkState::Error(_) => "error",
        }
    }
}

/// One link's figures, copied out for the operator interfaces.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkStatus {
    /// This node (`[broker] node_name`).
    pub node: String,
    pub vhost: String,
    /// The federated (downstream) exchange.
    pub exchange: String,
    pub upstream_exchange: String,
    pub upstream: String,
    /// `federation: X -> NODE`, the queue on the upstream.
    pub upstream_queue: String,
    /// `vhost:exchange:upstream`, unique per link.
    pub id: String,
    pub state: LinkState,
    /// The URI of the upstream in use (or last tried), without credentials.
    pub uri: String,
    /// The name the link's upstream connection has in the upstream's connection list.
    pub local_connection: String,
    /// When the state last changed (seconds since the epoch).
    pub since: u64,
    /// Messages republished locally.
    pub forwarded: u64,
    /// Messages dropped by the loop and hop checks (acknowledged upstream).
    pub dropped: u64,
    /// Deliveries the upstream marked redelivered: possible duplicates after a
    /// reconnect.
    pub redelivered: u64,
    /// Times the link went down and started again.
    pub reconnects: u64,
    /// Bindings in place on the upstream.
    pub bindings: u64,
    /// Bindings propagated (bound or unbound) on the upstream since start.
    pub binding_changes: u64,
    /// Messages in the upstream queue at the last check (`None` before the first).
    pub lag: Option<u64>,
    /// Local publishes not yet confirmed.
    pub unconfirmed: u64,
}

fn epoch_seconds() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The live figures of one link (the federation thread's only).
pub struct LinkStats {
    pub upstream_queue: String,
    pub local_connection: String,
    state: RefCell<LinkState>,
    since: Cell<u64>,
    uri: RefCell<String>,
    pub forwarded: Cell<u64>,
    pub dropped: Cell<u64>,
    pub redelivered: Cell<u64>,
    pub reconnects: Cell<u64>,
    pub bindings: Cell<u64>,
    pub binding_changes: Cell<u64>,
    pub lag: Cell<Option<u64>>,
    pub unconfirmed: Cell<u64>,
}

/// Adds `n` to a counter.
pub fn bump(cell: &Cell<u64>, n: u64) {
    cell.set(cell.get().wrapping_add(n));
}

impl LinkStats {
    pub fn new(upstream_queue: String, local_connection: String) -> LinkStats {
        LinkStats {
            upstream_queue,
            local_connection,
            state: RefCell::new(LinkState::Starting),
            since: Cell::new(epoch_seconds()),
            uri: RefCell::new(String::new()),
            forwarded: Cell::new(0),
            dropped: Cell::new(0),
            redelivered: Cell::new(0),
            reconnects: Cell::new(0),
            bindings: Cell::new(0),
            binding_changes: Cell::new(0),
            lag: Cell::new(None),
            unconfirmed: Cell::new(0),
        }
    }

    pub fn set_state(&self, state: LinkState) {
        *self.state.borrow_mut() = state;
        self.since.set(epoch_seconds());
    }

    pub fn state(&self) -> LinkState {
        self.state.borrow().clone()
    }

    pub fn set_uri(&self, uri: String) {
        *self.uri.borrow_mut() = uri;
    }

    /// The copy the operator interfaces get.
    pub fn snapshot(&self, link: &super::LinkId, node: &str) -> LinkStatus {
        LinkStatus {
            node: node.to_owned(),
            vhost: link.vhost.clone(),
            exchange: link.exchange.clone(),
            upstream_exchange: link.upstream_exchange.clone(),
            upstream: link.upstream.clone(),
            upstream_queue: self.upstream_queue.clone(),
            id: format!("{}:{}:{}", link.vhost, link.exchange, link.upstream),
            state: self.state(),
            uri: self.uri.borrow().clone(),
            local_connection: self.local_connection.clone(),
            since: self.since.get(),
            forwarded: self.forwarded.get(),
            dropped: self.dropped.get(),
            redelivered: self.redelivered.get(),
            reconnects: self.reconnects.get(),
            bindings: self.bindings.get(),
            binding_changes: self.binding_changes.get(),
            lag: self.lag.get(),
            unconfirmed: self.unconfirmed.get(),
        }
    }
}

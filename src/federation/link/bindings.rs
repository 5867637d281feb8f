//! Owns: propagating a session's bindings to the upstream — each coalesced pair as an
//! `exchange.bind` from the upstream exchange to the session's intermediate exchange,
//! with this node prepended to `x-bound-from` and the hop count RabbitMQ's rule gives
//! (`model::hops::binding_hops`; a pair with no hop left is not propagated) — pipelined:
//! up to [`IN_FLIGHT`] bind / unbind round trips at once, never one round trip per
//! binding, spread over [`CONNECTIONS`] upstream connections by the pair (so one pair's
//! bind and unbind stay in order on one channel). A sluice upstream answers one
//! connection's bindings one after the other, each once its definitions log is synced;
//! across connections its group commit syncs many with one fsync.
//!
//! Does not: decide which pairs exist (the exchange's `Interest`).

use std::cell::{Cell, RefCell};

use std::rc::Rc;
use tokio::sync::Notify;

use tokio::sync::Semaphore;

use super::upstream::UpstreamFacts;
use super::LinkContext;
use crate::client::Channel;
use crate::federation::interest::{InterestChange, Pair};
use crate::federation::status::bump;
use crate::model::hops;
use crate::protocol::FieldTable;

/// Binding round trips in flight at once (over all connections).
const IN_FLIGHT: u32 = 512;
/// Upstream connections that carry binding changes (the link's main one included).
pub(super) const CONNECTIONS: usize = 8;

pub(super) struct Binder {
    ctx: Rc<LinkContext>,
    /// One channel per binding connection; a pair always uses the same one.
    channels: Vec<Rc<Channel>>,
    facts: Rc<UpstreamFacts>,
    slots: Rc<Semaphore>,
    /// The first failure, and who waits for it.
    failure: Rc<Failure>,
    /// Bindings this session has in place upstream.
    bound: Rc<Cell<u64>>,
}

impl Binder {
    pub fn new(
        ctx: Rc<LinkContext>,
        channels: Vec<Rc<Channel>>,
        facts: Rc<UpstreamFacts>,
    ) -> Binder {
        ctx.stats.bindings.set(0);
        Binder {
            ctx,
            channels,
            facts,
            slots: Rc::new(Semaphore::new(IN_FLIGHT as usize)),
            failure: Rc::new(Failure::default()),
            bound: Rc::new(Cell::new(0)),
        }
    }

    /// The arguments of `pair`'s upstream binding, or `None` when it travels no further.
    fn upstream_args(&self, pair: &Pair) -> Option<FieldTable> {
        let hops = hops::binding_hops(
            &pair.args,
            self.ctx.upstream.max_hops,
            self.facts.node.as_deref().map(str::as_bytes),
            self.facts.vhost.as_bytes(),
        );
        (hops > 0).then(|| {
            hops::prepend_bound_from(
                &pair.args,
                self.ctx.node_name(),
                &self.ctx.id.vhost,
                &self.facts.bound_from,
                hops,
            )
        })
    }

    /// Starts one bind or unbind; its outcome arrives later (a failure through
    /// [`Binder::failed`]).
    pub fn change(&self, change: InterestChange) {
        let (pair, bind) = match change {
            InterestChange::Bind(p) => (p, true),
            InterestChange::Unbind(p) => (p, false),
        };
        let Some(args) = self.upstream_args(&pair) else {
            return;
        };
        let channel = Rc::clone(self.channel_for(&pair));
        let slots = Rc::clone(&self.slots);
        let failure = Rc::clone(&self.failure);
        let source = self.ctx.id.upstream_exchange.clone();
        let destination = self.facts.exchange.clone();
        let stats = Rc::clone(&self.ctx.stats);
        let bound = Rc::clone(&self.bound);
        tokio::task::spawn_local(async move {
            let Ok(_slot) = slots.acquire().await else {
                return;
            };
            let key = pair.key.as_str_lossy();
            let r = if bind {
                channel
                    .exchange_bind(&destination, &source, &key, args)
                    .await
            } else {
                channel
                    .exchange_unbind(&destination, &source, &key, args)
                    .await
            };
            match r {
                Ok(()) => {
                    bump(&stats.binding_changes, 1);
                    bound.set(if bind {
                        bound.get() + 1
                    } else {
                        bound.get().saturating_sub(1)
                    });
                    stats.bindings.set(bound.get());
                }
                Err(e) => {
                    let verb = if bind { "bind" } else { "unbind" };
                    failure.set(format!("{verb} {key:?} upstream: {e}"));
                }
            }
        });
    }

    /// The channel `pair`'s changes go on: always the same one.
    fn channel_for(&self, pair: &Pair) -> &Rc<Channel> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        pair.key.as_bytes().hash(&mut h);
        let mut args = bytes::BytesMut::new();
        pair.args.encode(&mut args);
        args.hash(&mut h);
        let i = (h.finish() % self.channels.len().max(1) as u64) as usize;
        &self.channels[i.min(self.channels.len().saturating_sub(1))]
    }

    /// Binds every pair and waits until all are in place.
    pub async fn bind_all(&self, pairs: Vec<Pair>) -> Result<(), super::Ended> {
        for pair in pairs {
            self.change(InterestChange::Bind(pair));
        }
        // Every slot free again: every round trip has its answer.
        tokio::task::yield_now().await;
        let all = self
            .slots
            .acquire_many(IN_FLIGHT)
            .await
            .map_err(|_| super::Ended::Failed("binder closed".into()))?;
        drop(all);
        match self.failure.take() {
            Some(failure) => Err(super::Ended::Failed(failure)),
            None => Ok(()),
        }
    }

    /// The first binding that failed (the session then starts again).
    pub async fn failed(&self) -> String {
        self.failure.wait().await
    }
}

/// The first failure of a session's background work, and a wake-up for its waiter.
#[derive(Default)]
pub(super) struct Failure {
    first: RefCell<Option<String>>,
    notify: Notify,
}

impl Failure {
    pub fn set(&self, reason: String) {
        let mut first = self.first.borrow_mut();
        if first.is_none() {
            *first = Some(reason);
            self.notify.notify_one();
        }
    }

    pub fn take(&self) -> Option<String> {
        self.first.borrow_mut().take()
    }

    /// Waits for a failure.
    pub async fn wait(&self) -> String {
        loop {
            if let Some(reason) = self.take() {
                return reason;
            }
            self.notify.notified().await;
        }
    }
}

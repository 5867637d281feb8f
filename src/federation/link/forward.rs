//! Owns: a session's messages — each upstream delivery checked against the hop and loop
//! rules (`model::hops::should_forward`: fewer than `max_hops` hops and this node and
//! vhost not already in `x-received-from`), republished into the local exchange with
//! its routing key, this hop prepended to `x-received-from` and `user-id` cleared unless
//! `trust_user_id`; a dropped one still acknowledged — and acknowledging the upstream per
//! ack mode: `on-confirm` once the local broker confirms (in delivery order, a run of
//! confirms as one `multiple` ack; a local nack is requeued upstream), `on-publish`
//! after the local publish (one `multiple` ack per batch), `no-ack` never.
//!
//! Does not: hold more than the upstream's prefetch: the local publish waits while this
//! broker holds its publishers back (alarms, queue capacity), so no credit returns to
//! the upstream and the backlog stays there.

use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::bindings::Failure;
use super::upstream::UpstreamFacts;
use super::LinkContext;
use crate::client::{Channel, ClientError, Confirmation, Delivery};
use crate::config::federation::AckMode;
use crate::federation::status::{bump, LinkStats};
use crate::limits::report::Reporter;
use crate::model::hops;
use crate::ops::federation_event::FederationEvent;
use crate::protocol::properties::{raw_user_id, with_headers, BasicProperties};
use crate::protocol::ShortStr;

/// FED-1006 (messages dropped by the loop checks) at most this often per link.
const DROPPED_REPORT_GAP: Duration = Duration::from_secs(30);

/// One upstream delivery on its way to being settled upstream (on-confirm).
enum Settle {
    /// Dropped by the loop checks: settled at once, in its turn.
    Done(u64),
    /// Republished; settled when the local broker confirms.
    Confirm(Confirmation, u64),
}

pub(super) struct Forwarder {
    ctx: Rc<LinkContext>,
    facts: Rc<UpstreamFacts>,
    upstream: Rc<Channel>,
    local: Channel,
    exchange: ShortStr,
    settle: Option<mpsc::Sender<Settle>>,
    acker: Option<tokio::task::JoinHandle<()>>,
    failure: Rc<Failure>,
    dropped_lines: Reporter,
    /// The headers of a message that had none, encoded: `x-received-from` with this
    /// session's hop, for `redelivered` false and true.
    first_hop: [Bytes; 2],
}

impl Forwarder {
    pub fn new(
        ctx: Rc<LinkContext>,
        facts: Rc<UpstreamFacts>,
        upstream: Rc<Channel>,
        local: Channel,
    ) -> Forwarder {
        let failure = Rc::new(Failure::default());
        let (settle, acker) = if ctx.upstream.ack_mode == AckMode::OnConfirm {
            let (tx, rx) = mpsc::channel(usize::from(ctx.upstream.prefetch_count).max(1));
            let task = tokio::task::spawn_local(acker(
                rx,
                Rc::clone(&upstream),
                Rc::clone(&ctx.stats),
                Rc::clone(&failure),
            ));
            (Some(tx), Some(task))
        } else {
            (None, None)
        };
        let first_hop = [false, true].map(|redelivered| {
            let hop = hops::ReceivedFrom {
                uri: &facts.uri,
                exchange: &ctx.id.upstream_exchange,
                redelivered,
                cluster_name: facts.node.as_deref(),
                vhost: &facts.vhost,
            };
            let mut out = bytes::BytesMut::new();
            hops::prepend_received_from(None, &hop).encode(&mut out);
            out.freeze()
        });
        Forwarder {
            first_hop,
            exchange: ShortStr::from(ctx.id.exchange.as_str()),
            ctx,
            facts,
            upstream,
            local,
            settle,
            acker,
            failure,
            dropped_lines: Reporter::new(DROPPED_REPORT_GAP, 1),
        }
    }

    /// The properties to republish `d` with, or `None` when the loop and hop checks drop
    /// it.
    fn republished(&self, d: &Delivery) -> Option<Bytes> {
        // Most messages carry no headers (and so no trail): this hop's table goes in
        // as it is, the other properties byte for byte.
        let keeps_user_id = self.ctx.upstream.trust_user_id || raw_user_id(&d.properties).is_none();
        if keeps_user_id {
            let table = &self.first_hop[usize::from(d.redelivered)];
            if let Some(raw) = with_headers(&d.properties, table) {
                return Some(raw);
            }
        }
        let mut props = match BasicProperties::decode(&d.properties) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!("federation: dropping a delivery with bad properties: {e}");
                return None;
            }
        };
        let forward = hops::should_forward(
            props.headers.as_ref(),
            self.ctx.upstream.max_hops,
            self.ctx.node_name().as_bytes(),
            self.ctx.id.vhost.as_bytes(),
        );
        if !forward {
            return None;
        }
        let hop = hops::ReceivedFrom {
            uri: &self.facts.uri,
            exchange: &self.ctx.id.upstream_exchange,
            redelivered: d.redelivered,
            cluster_name: self.facts.node.as_deref(),
            vhost: &self.facts.vhost,
        };
        props.headers = Some(hops::prepend_received_from(props.headers.take(), &hop));
        if !self.ctx.upstream.trust_user_id {
            props.user_id = None;
        }
        Some(props.to_bytes())
    }

    /// Forwards (or drops) and settles a batch of deliveries, emptying it.
    pub async fn forward(&mut self, batch: &mut Vec<Delivery>) -> Result<(), ClientError> {
        let stats = Rc::clone(&self.ctx.stats);
        let mode = self.ctx.upstream.ack_mode;
        let mut ack_to = None;
        let mut dropped = 0;
        for d in batch.drain(..) {
            if d.redelivered {
                bump(&stats.redelivered, 1);
            }
            let tag = d.delivery_tag;
            let Some(props) = self.republished(&d) else {
                dropped += 1;
                match mode {
                    AckMode::OnConfirm => self.send_settle(Settle::Done(tag)).await?,
                    AckMode::OnPublish => ack_to = Some(tag),
                    AckMode::NoAck => {}
                }
                continue;
            };
            if mode == AckMode::OnConfirm {
                let confirm = self
                    .local
                    .basic_publish_confirmed(
                        self.exchange.clone(),
                        d.routing_key,
                        false,
                        props,
                        d.body,
                    )
                    .await?;
                self.send_settle(Settle::Confirm(confirm, tag)).await?;
            } else {
                self.local
                    .basic_publish(self.exchange.clone(), d.routing_key, false, props, d.body)
                    .await?;
                if mode == AckMode::OnPublish {
                    ack_to = Some(tag);
                }
            }
            bump(&stats.forwarded, 1);
        }
        if let Some(tag) = ack_to {
            self.upstream.basic_ack(tag, true).await?;
        }
        if dropped > 0 {
            bump(&stats.dropped, dropped);
            if let Some(count) = self
                .dropped_lines
                .note_many(std::time::Instant::now(), dropped)
            {
                FederationEvent::Dropped {
                    link: self.ctx.id.log_name(),
                    count,
                }
                .emit();
            }
        }
        Ok(())
    }

    /// Hands a delivery to the acknowledger (on-confirm; the only mode with one).
    async fn send_settle(&self, item: Settle) -> Result<(), ClientError> {
        let Some(settle) = &self.settle else {
            return Ok(());
        };
        settle.send(item).await.map_err(|_| {
            ClientError::io(std::io::Error::other(
                self.failure
                    .take()
                    .unwrap_or_else(|| "acknowledger stopped".into()),
            ))
        })
    }

    /// The first failure of the acknowledger (the session then starts again).
    pub async fn failed(&self) -> String {
        self.failure.wait().await
    }

    /// Stopping: lets the acknowledger settle what is already confirmed.
    pub async fn finish(&mut self) {
        self.settle = None;
        if let Some(task) = self.acker.take() {
            let _ = tokio::time::timeout(Duration::from_secs(1), task).await;
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        if let Some(task) = &self.acker {
            task.abort();
        }
    }
}

/// Acknowledges upstream deliveries in order as their local confirms arrive: waits for
/// the oldest, then takes every later one already answered, and acks the run with one
/// `multiple` ack.
async fn acker(
    mut rx: mpsc::Receiver<Settle>,
    upstream: Rc<Channel>,
    stats: Rc<LinkStats>,
    failure: Rc<Failure>,
) {
    let mut queue: VecDeque<Settle> = VecDeque::new();
    loop {
        if queue.is_empty() {
            match rx.recv().await {
                Some(s) => queue.push_back(s),
                None => return,
            }
        }
        while let Ok(s) = rx.try_recv() {
            queue.push_back(s);
        }
        stats.unconfirmed.set(queue.len() as u64);
        let mut ack_to = None;
        while let Some(front) = queue.front_mut() {
            let (outcome, tag) = match front {
                Settle::Done(tag) => (Ok(true), *tag),
                Settle::Confirm(c, tag) if ack_to.is_none() => (c.await, *tag),
                Settle::Confirm(c, tag) => match c.try_result() {
                    Some(r) => (r, *tag),
                    None => break,
                },
            };
            queue.pop_front();
            let settled = match outcome {
                Ok(true) => {
                    ack_to = Some(tag);
                    Ok(())
                }
                Ok(false) => {
                    // Nacked here: the upstream keeps it and delivers it again.
                    let earlier = match ack_to.take() {
                        Some(t) => upstream.basic_ack(t, true).await,
                        None => Ok(()),
                    };
                    match earlier {
                        Ok(()) => upstream.basic_nack(tag, false, true).await,
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            };
            if let Err(e) = settled {
                failure.set(format!("settling upstream deliveries: {e}"));
                return;
            }
        }
        if let Some(tag) = ack_to {
            if let Err(e) = upstream.basic_ack(tag, true).await {
                failure.set(format!("acknowledging upstream: {e}"));
                return;
            }
        }
        stats.unconfirmed.set(queue.len() as u64);
    }
}

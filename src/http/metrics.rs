//! Owns: `GET /metrics` — the Prometheus/OpenMetrics text exposition, encoded by the
//! `prometheus-client` crate under the `sluice_` prefix, built afresh for each scrape
//! from the shards' snapshots: per queue (or per vhost with
//! `http.per_queue_metrics = false`), per stream and stream reader (`stream_metrics`),
//! per shard, broker-wide, and per federation link (from the federation thread's copy
//! of its links).
//!
//! Does not: keep metric state between scrapes; every figure is the shards' own (or the
//! links').

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use bytes::Bytes;
use hyper::StatusCode;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use crate::federation::{LinkState, LinkStatus};
use crate::shard::inbox::observe::{QueueView, ShardView, Want};

use super::{respond, unavailable, Context, HttpResponse};

pub(super) type Labels = Vec<(&'static str, String)>;
pub(super) type G = Family<Labels, Gauge<f64, AtomicU64>>;
pub(super) type C = Family<Labels, Counter<u64>>;
type CF = Family<Labels, Counter<f64, AtomicU64>>;

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub(super) fn gauge(reg: &mut Registry, name: &str, help: &str) -> G {
    let f = G::default();
    reg.register(name, help, f.clone());
    f
}

pub(super) fn counter(reg: &mut Registry, name: &str, help: &str) -> C {
    let f = C::default();
    reg.register(name, help, f.clone());
    f
}

fn counter_f(reg: &mut Registry, name: &str, help: &str) -> CF {
    let f = CF::default();
    reg.register(name, help, f.clone());
    f
}

fn set(f: &G, labels: &Labels, v: f64) {
    f.get_or_create(labels).set(v);
}

fn add(f: &C, labels: &Labels, v: u64) {
    f.get_or_create(labels).inc_by(v);
}

pub async fn scrape(ctx: &Context) -> HttpResponse {
    let want = Want {
        queues: true,
        ..Want::default()
    };
    let Some(shards) = ctx.snapshots(want).await else {
        return unavailable();
    };
    let Some(links) = super::federation::links(ctx).await else {
        return super::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the federation thread did not answer",
        );
    };
    match render(ctx, &shards, &links) {
        Ok(text) => respond(StatusCode::OK, CONTENT_TYPE, Bytes::from(text)),
        Err(_) => super::error(StatusCode::INTERNAL_SERVER_ERROR, "encoding failed"),
    }
}

/// Per-queue families.
struct QueueFamilies {
    ready: G,
    unacked: G,
    bytes: G,
    consumers: G,
    oldest: G,
    published: C,
    delivered: C,
    acked: C,
    discarded: C,
    expired: C,
    rejected: C,
    flow_blocked: G,
    capacity: G,
    resume: G,
    blocked_publishers: G,
    slow_policy: G,
    predicted: G,
    arrival: G,
    consume: G,
}

impl QueueFamilies {
    fn new(reg: &mut Registry) -> QueueFamilies {
        QueueFamilies {
            ready: gauge(reg, "queue_messages_ready", "Messages ready for delivery"),
            unacked: gauge(
                reg,
                "queue_messages_unacked",
                "Messages delivered and not yet acknowledged (or not yet written, no-ack)",
            ),
            bytes: gauge(
                reg,
                "queue_messages_bytes",
                "Bytes of every message the queue holds",
            ),
            consumers: gauge(reg, "queue_consumers", "Consumers"),
            oldest: gauge(
                reg,
                "queue_oldest_message_age_seconds",
                "Age of the oldest message held, seconds (0 when empty)",
            ),
            published: counter(reg, "queue_messages_published", "Messages enqueued"),
            delivered: counter(
                reg,
                "queue_messages_delivered",
                "Messages delivered to consumers",
            ),
            acked: counter(
                reg,
                "queue_messages_acked",
                "Messages consumed: acked, rejected, written for no-ack, taken by basic.get",
            ),
            discarded: counter(
                reg,
                "queue_messages_discarded",
                "Messages dropped by a ring (cycle policy, x-max-length drop-head)",
            ),
            expired: counter(reg, "queue_messages_expired", "Messages expired by TTL"),
            rejected: counter(
                reg,
                "queue_messages_rejected",
                "Publishes refused by x-overflow = reject-publish",
            ),
            flow_blocked: gauge(
                reg,
                "queue_flow_blocked",
                "1 while the queue is overfull and its publishers are stopped",
            ),
            capacity: gauge(reg, "queue_flow_capacity_bytes", "Queue capacity, bytes"),
            resume: gauge(
                reg,
                "queue_flow_resume_capacity_bytes",
                "Size below which stopped publishers resume, bytes",
            ),
            blocked_publishers: gauge(
                reg,
                "queue_flow_blocked_publishers",
                "Publishing channels stopped by this queue",
            ),
            slow_policy: gauge(
                reg,
                "queue_slow_consumer_policy",
                "1 for a queue under a slow-consumer policy (label action)",
            ),
            predicted: gauge(
                reg,
                "queue_slow_consumer_predicted_seconds",
                "Predicted seconds until the growing backlog crosses a threshold (label threshold)",
            ),
            arrival: gauge(
                reg,
                "queue_arrival_rate",
                "Messages arriving per second (EWMA; queues under a slow-consumer policy)",
            ),
            consume: gauge(
                reg,
                "queue_consume_rate",
                "Messages consumed per second (EWMA; queues under a slow-consumer policy)",
            ),
        }
    }

    fn record(&self, l: &Labels, q: &QueueView) {
        set(&self.ready, l, q.ready as f64);
        set(&self.unacked, l, q.unacked as f64);
        set(&self.bytes, l, q.bytes as f64);
        set(&self.consumers, l, q.consumers as f64);
        set(&self.oldest, l, q.oldest_age_secs);
        add(&self.published, l, q.counters.enqueued);
        add(&self.delivered, l, q.counters.delivered);
        add(&self.acked, l, q.counters.consumed);
        add(&self.discarded, l, q.counters.discarded);
        add(&self.expired, l, q.counters.expired);
        add(&self.rejected, l, q.counters.rejected);
        if let Some(f) = q.flow {
            set(&self.flow_blocked, l, f64::from(u8::from(f.blocked)));
            set(&self.capacity, l, f.capacity as f64);
            set(&self.resume, l, f.resume_capacity as f64);
            set(&self.blocked_publishers, l, f.blocked_publishers as f64);
        }
        if let Some(s) = &q.slow {
            let mut with_action = l.clone();
            with_action.push(("action", s.action.to_owned()));
            set(&self.slow_policy, &with_action, 1.0);
            set(&self.arrival, l, s.arrival_rate);
            set(&self.consume, l, s.consume_rate);
            if let (Some(t), Some(secs)) = (s.predicted_threshold, s.predicted_seconds) {
                let mut with_threshold = l.clone();
                with_threshold.push(("threshold", t.to_owned()));
                set(&self.predicted, &with_threshold, secs);
            }
        }
    }
}

/// Per-vhost sums of the queue figures (`per_queue_metrics = false`).
#[derive(Default)]
struct VhostTotals {
    queues: u64,
    ready: u64,
    unacked: u64,
    bytes: u64,
    consumers: u64,
    oldest: f64,
    published: u64,
    delivered: u64,
    acked: u64,
    discarded: u64,
    expired: u64,
    rejected: u64,
    flow_blocked: u64,
    slow: u64,
}

fn render(
    ctx: &Context,
    shards: &[ShardView],
    links: &[LinkStatus],
) -> Result<String, std::fmt::Error> {
    let mut reg = Registry::with_prefix("sluice");
    reg.register(
        "build",
        "Build information",
        Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
    );
    if ctx.config.http.per_queue_metrics {
        let q = QueueFamilies::new(&mut reg);
        for shard in shards {
            for view in &shard.queues {
                let labels = vec![("vhost", view.vhost.clone()), ("queue", view.name.clone())];
                q.record(&labels, view);
            }
        }
    } else {
        vhost_totals(&mut reg, shards);
    }
    super::stream_metrics::record(&mut reg, shards, ctx.config.http.per_queue_metrics);
    shard_metrics(ctx, &mut reg, shards);
    broker_metrics(ctx, &mut reg);
    if ctx.federation.is_some() {
        link_metrics(&mut reg, links);
    }
    let mut out = String::new();
    encode(&mut out, &reg)?;
    Ok(out)
}

fn vhost_totals(reg: &mut Registry, shards: &[ShardView]) {
    let mut totals: BTreeMap<&str, VhostTotals> = BTreeMap::new();
    for view in shards.iter().flat_map(|s| &s.queues) {
        let t = totals.entry(view.vhost.as_str()).or_default();
        t.queues += 1;
        t.ready += view.ready;
        t.unacked += view.unacked;
        t.bytes += view.bytes;
        t.consumers += view.consumers;
        t.oldest = t.oldest.max(view.oldest_age_secs);
        t.published += view.counters.enqueued;
        t.delivered += view.counters.delivered;
        t.acked += view.counters.consumed;
        t.discarded += view.counters.discarded;
        t.expired += view.counters.expired;
        t.rejected += view.counters.rejected;
        t.flow_blocked += u64::from(view.flow.is_some_and(|f| f.blocked));
        t.slow += u64::from(view.slow.is_some());
    }
    let queues = gauge(reg, "vhost_queues", "Queues");
    let ready = gauge(reg, "queue_messages_ready", "Messages ready for delivery");
    let unacked = gauge(reg, "queue_messages_unacked", "Messages awaiting ack");
    let bytes = gauge(reg, "queue_messages_bytes", "Bytes of every message held");
    let consumers = gauge(reg, "queue_consumers", "Consumers");
    let oldest = gauge(
        reg,
        "queue_oldest_message_age_seconds",
        "Age of the oldest message in any queue of the vhost, seconds",
    );
    let published = counter(reg, "queue_messages_published", "Messages enqueued");
    let delivered = counter(reg, "queue_messages_delivered", "Messages delivered");
    let acked = counter(reg, "queue_messages_acked", "Messages consumed");
    let discarded = counter(
        reg,
        "queue_messages_discarded",
        "Messages dropped by a ring",
    );
    let expired = counter(reg, "queue_messages_expired", "Messages expired by TTL");
    let rejected = counter(reg, "queue_messages_rejected", "Publishes refused");
    let blocked = gauge(reg, "vhost_queues_flow_blocked", "Queues overfull now");
    let slow = gauge(
        reg,
        "vhost_queues_slow_consumer_policy",
        "Queues under a slow-consumer policy",
    );
    for (vhost, t) in totals {
        let l = vec![("vhost", vhost.to_owned())];
        set(&queues, &l, t.queues as f64);
        set(&ready, &l, t.ready as f64);
        set(&unacked, &l, t.unacked as f64);
        set(&bytes, &l, t.bytes as f64);
        set(&consumers, &l, t.consumers as f64);
        set(&oldest, &l, t.oldest);
        add(&published, &l, t.published);
        add(&delivered, &l, t.delivered);
        add(&acked, &l, t.acked);
        add(&discarded, &l, t.discarded);
        add(&expired, &l, t.expired);
        add(&rejected, &l, t.rejected);
        set(&blocked, &l, t.flow_blocked as f64);
        set(&slow, &l, t.slow as f64);
    }
}

fn shard_metrics(ctx: &Context, reg: &mut Registry, shards: &[ShardView]) {
    let connections = gauge(reg, "shard_connections", "Client connections on the shard");
    let channels = gauge(reg, "shard_channels", "Open channels on the shard");
    let queues = gauge(reg, "shard_queues", "Queues whose home is the shard");
    let parked = gauge(
        reg,
        "shard_readers_parked",
        "Idle connections on the shard whose reader task is parked (net.reader_park_after)",
    );
    let parks = counter(
        reg,
        "shard_reader_parks",
        "Times a reader on the shard parked; a high rate means connections park and restart",
    );
    let inbox = gauge(
        reg,
        "shard_publish_inbox_depth",
        "Publish batches waiting in the shard's bounded inbox",
    );
    let cpu = counter_f(
        reg,
        "shard_cpu_seconds",
        "CPU time of the shard's thread; its rate is the event loop's busy fraction",
    );
    let read = counter(reg, "shard_bytes_read", "Bytes read from client sockets");
    let written = counter(
        reg,
        "shard_bytes_written",
        "Bytes written to client sockets",
    );
    for s in shards {
        let l = vec![("shard", s.shard.to_string())];
        set(&connections, &l, s.connection_count as f64);
        set(&channels, &l, s.channel_count as f64);
        set(&queues, &l, s.queue_count as f64);
        set(&parked, &l, s.readers_parked as f64);
        add(&parks, &l, s.reader_parks);
        cpu.get_or_create(&l).inc_by(s.cpu_seconds);
        if let Some(tx) = ctx.peers.publish.get(usize::from(s.shard)) {
            set(
                &inbox,
                &l,
                tx.max_capacity().saturating_sub(tx.capacity()) as f64,
            );
        }
        add(&read, &l, s.bytes_read);
        add(&written, &l, s.bytes_written);
    }
}

fn broker_metrics(ctx: &Context, reg: &mut Registry) {
    let none = Labels::new();
    let one = |reg: &mut Registry, name: &str, help: &str, v: f64| {
        set(&gauge(reg, name, help), &none, v);
    };
    one(
        reg,
        "memory_messages_bytes",
        "Memory held by messages, queue entries, outbound buffers and partial publishes",
        ctx.memory.used() as f64,
    );
    one(
        reg,
        "memory_high_watermark_bytes",
        "Message memory above which publishers are blocked",
        ctx.memory.high as f64,
    );
    one(
        reg,
        "memory_alarm",
        "1 while the memory alarm blocks publishers",
        f64::from(u8::from(ctx.memory.alarm())),
    );
    one(
        reg,
        "process_resident_memory_bytes",
        "Resident set size",
        super::rss_bytes() as f64,
    );
    one(
        reg,
        "uptime_seconds",
        "Seconds since the broker started",
        ctx.uptime(),
    );
    one(
        reg,
        "store_bytes",
        "Bytes of the message store and definitions on disk",
        ctx.disk.total() as f64,
    );
    if let Some(free) = ctx.disk.free.free() {
        one(
            reg,
            "disk_free_bytes",
            "Free space of the data directory's file system",
            free as f64,
        );
    }
    one(
        reg,
        "disk_free_limit_bytes",
        "Free space below which publishers are blocked",
        ctx.disk.free.limit() as f64,
    );
    one(
        reg,
        "disk_free_alarm",
        "1 while the disk alarm blocks publishers",
        f64::from(u8::from(ctx.disk.free.alarm())),
    );
    one(
        reg,
        "shards",
        "Shards (event loops)",
        ctx.peers.len() as f64,
    );
}

/// Per federation link (labels `vhost`, `exchange`, `upstream`).
fn link_metrics(reg: &mut Registry, links: &[LinkStatus]) {
    let up = gauge(
        reg,
        "federation_link_up",
        "1 while the federation link is running, 0 while it starts or is down",
    );
    let forwarded = counter(
        reg,
        "federation_link_messages_forwarded",
        "Messages the link republished into the local exchange",
    );
    let dropped = counter(
        reg,
        "federation_link_messages_dropped",
        "Messages the link dropped by the loop and max-hops checks (acknowledged upstream)",
    );
    let redelivered = counter(
        reg,
        "federation_link_redelivered",
        "Deliveries the upstream marked redelivered: possible duplicates after a reconnect",
    );
    let reconnects = counter(
        reg,
        "federation_link_reconnects",
        "Times the link went down and started again",
    );
    let bindings = gauge(
        reg,
        "federation_link_bindings",
        "Bindings the link has in place on the upstream",
    );
    let binding_changes = counter(
        reg,
        "federation_link_binding_changes",
        "Bindings the link propagated (bound or unbound) on the upstream",
    );
    let lag = gauge(
        reg,
        "federation_link_lag_messages",
        "Messages in the link's upstream queue at the last check (absent before the first)",
    );
    let unconfirmed = gauge(
        reg,
        "federation_link_unconfirmed",
        "Local publishes of the link not yet confirmed",
    );
    for link in links {
        let l = vec![
            ("vhost", link.vhost.clone()),
            ("exchange", link.exchange.clone()),
            ("upstream", link.upstream.clone()),
        ];
        let running = matches!(link.state, LinkState::Running);
        set(&up, &l, f64::from(u8::from(running)));
        add(&forwarded, &l, link.forwarded);
        add(&dropped, &l, link.dropped);
        add(&redelivered, &l, link.redelivered);
        add(&reconnects, &l, link.reconnects);
        set(&bindings, &l, link.bindings as f64);
        add(&binding_changes, &l, link.binding_changes);
        if let Some(messages) = link.lag {
            set(&lag, &l, messages as f64);
        }
        set(&unconfirmed, &l, link.unconfirmed as f64);
    }
}

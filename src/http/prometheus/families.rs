//! Owns: the mapping from sluice's figures to RabbitMQ's metric families, as
//! rabbitmq_prometheus names, types and labels them (its core, global and alarm
//! collectors): the connection churn totals, node figures (descriptors, memory, disk,
//! uptime), login attempts, queue depths (summed over every queue for `/metrics`, as
//! RabbitMQ aggregates by default; per `vhost` and `queue` for `/metrics/per-object`),
//! the global publisher, consumer and delivery figures, the object totals, the alarms,
//! and the build and identity info.
//!
//! Every figure is read, none is counted here: the queue figures and the connection,
//! channel and login totals come from the shards' snapshots (`ShardView`, plain per-shard
//! counters bumped once per connection, channel or login, never per message), memory
//! and disk from their boards. The per-queue counter `rabbitmq_queue_messages_published_total`
//! is the sum over the queues that exist now, so a deleted queue takes its share with it
//! (Prometheus's `rate` treats the drop as a counter reset); the global message counters
//! are totals since start (`global`).
//!
//! Does not: encode the text (that is `text`), or keep anything between scrapes.

use std::collections::BTreeMap;

use crate::shard::inbox::observe::{QueueView, ShardView};

use super::super::Context;
use super::text::{Exposition, Kind};
use super::{process, Endpoint};

/// The AMQP 0-9-1 label of the per-protocol families.
const AMQP: (&str, &str) = ("protocol", "amqp091");

/// The figures of one queue family row: one queue, or the sum of all of them.
#[derive(Default, Clone, Copy)]
struct Depth {
    ready: u64,
    unacked: u64,
    consumers: u64,
    bytes: u64,
    ready_bytes: u64,
    published: u64,
}

impl Depth {
    fn add(&mut self, q: &QueueView) {
        self.ready += q.ready;
        self.unacked += q.unacked;
        self.consumers += q.consumers;
        self.bytes += q.bytes;
        self.ready_bytes += q.ready_bytes;
        self.published += q.counters.enqueued;
    }
}

/// The exposition for `endpoint`.
pub fn render(ctx: &Context, shards: &[ShardView], endpoint: Endpoint) -> String {
    let sum = |f: fn(&ShardView) -> u64| shards.iter().map(f).sum::<u64>();
    let mut e = Exposition::default();

    // connection_churn_metrics
    let channels = sum(|s| s.channel_count);
    let channels_opened = sum(|s| s.churn.channels_opened);
    e.single(
        "rabbitmq_connections_opened_total",
        Kind::Counter,
        "Total number of connections opened",
        sum(|s| s.churn.connections_opened) as f64,
    )
    .single(
        "rabbitmq_connections_closed_total",
        Kind::Counter,
        "Total number of connections closed or terminated",
        sum(|s| s.churn.connections_closed) as f64,
    )
    .single(
        "rabbitmq_channels_opened_total",
        Kind::Counter,
        "Total number of channels opened",
        channels_opened as f64,
    )
    .single(
        "rabbitmq_channels_closed_total",
        Kind::Counter,
        "Total number of channels closed",
        // Per shard, every channel opened is open now or was closed.
        channels_opened.saturating_sub(channels) as f64,
    );

    // node_coarse_metrics and node_metrics
    if let Some(open) = process::open_fds() {
        e.single(
            "rabbitmq_process_open_fds",
            Kind::Gauge,
            "Open file descriptors",
            open as f64,
        );
    }
    e.single(
        "rabbitmq_process_resident_memory_bytes",
        Kind::Gauge,
        "Memory used in bytes",
        super::super::rss_bytes() as f64,
    );
    if let Some(free) = ctx.disk.free.free() {
        e.single(
            "rabbitmq_disk_space_available_bytes",
            Kind::Gauge,
            "Disk space available in bytes",
            free as f64,
        );
    }
    if let Some(max) = process::max_fds() {
        e.single(
            "rabbitmq_process_max_fds",
            Kind::Gauge,
            "Open file descriptors limit",
            max as f64,
        );
    }
    e.single(
        "rabbitmq_resident_memory_limit_bytes",
        Kind::Gauge,
        "Memory high watermark in bytes",
        ctx.memory.high as f64,
    )
    .single(
        "rabbitmq_disk_space_available_limit_bytes",
        Kind::Gauge,
        "Free disk space low watermark in bytes",
        ctx.disk.free.limit() as f64,
    )
    .single(
        // RabbitMQ's name for the node's uptime; here the broker process's.
        "rabbitmq_erlang_uptime_seconds",
        Kind::Gauge,
        "Node uptime",
        ctx.uptime(),
    );

    // auth_attempt_metrics (AMQP 0-9-1 logins)
    let succeeded = sum(|s| s.churn.logins_succeeded);
    let failed = sum(|s| s.churn.logins_failed);
    for (name, help, value) in [
        (
            "rabbitmq_auth_attempts_total",
            "Total number of authentication attempts",
            succeeded + failed,
        ),
        (
            "rabbitmq_auth_attempts_succeeded_total",
            "Total number of successful authentication attempts",
            succeeded,
        ),
        (
            "rabbitmq_auth_attempts_failed_total",
            "Total number of failed authentication attempts",
            failed,
        ),
    ] {
        e.family(name, Kind::Counter, help)
            .sample(name, &[AMQP], value as f64);
    }

    queue_families(&mut e, shards, endpoint);

    // rabbitmq_global_ (instrumented counters, per protocol and queue type)
    e.family(
        "rabbitmq_global_publishers",
        Kind::Gauge,
        "Current number of publishers",
    )
    .sample(
        "rabbitmq_global_publishers",
        &[AMQP],
        sum(|s| s.publisher_count) as f64,
    );
    e.family(
        "rabbitmq_global_consumers",
        Kind::Gauge,
        "Current number of consumers",
    )
    .sample(
        "rabbitmq_global_consumers",
        &[AMQP],
        sum(|s| s.consumer_count) as f64,
    );
    super::global::render(&mut e, shards);

    // totals
    e.single(
        "rabbitmq_connections",
        Kind::Gauge,
        "Connections currently open",
        sum(|s| s.connection_count) as f64,
    )
    .single(
        "rabbitmq_channels",
        Kind::Gauge,
        "Channels currently open",
        channels as f64,
    )
    .single(
        "rabbitmq_consumers",
        Kind::Gauge,
        "Consumers currently connected",
        sum(|s| s.consumer_count) as f64,
    )
    .single(
        "rabbitmq_queues",
        Kind::Gauge,
        "Queues available",
        sum(|s| s.queue_count) as f64,
    );

    // alarms
    e.single(
        "rabbitmq_alarms_free_disk_space_watermark",
        Kind::Untyped,
        "is 1 if free disk space watermark alarm is in effect",
        f64::from(u8::from(ctx.disk.free.alarm())),
    )
    .single(
        "rabbitmq_alarms_memory_used_watermark",
        Kind::Untyped,
        "is 1 if VM memory watermark alarm is in effect",
        f64::from(u8::from(ctx.memory.alarm())),
    );

    // build and identity info
    let version = env!("CARGO_PKG_VERSION");
    e.family(
        "rabbitmq_build_info",
        Kind::Untyped,
        "RabbitMQ & Erlang/OTP version info",
    )
    .sample(
        "rabbitmq_build_info",
        &[
            ("product_name", "sluice"),
            ("product_version", version),
            ("rabbitmq_version", version),
        ],
        1.0,
    );
    let node = ctx.config.node_name.as_str();
    e.family(
        "rabbitmq_identity_info",
        Kind::Untyped,
        "RabbitMQ node & cluster identity info",
    )
    .sample(
        "rabbitmq_identity_info",
        &[
            ("rabbitmq_node", node),
            // One node: the cluster is named after it, as /api/overview's cluster_name.
            ("rabbitmq_cluster", node),
            ("rabbitmq_endpoint", endpoint.label()),
        ],
        1.0,
    );
    e.finish()
}

/// One queue family: its name, type, help and the figure it takes from a row.
type QueueFamily = (&'static str, Kind, &'static str, fn(&Depth) -> u64);

/// queue_coarse_metrics, queue_metrics and the per-queue publish counter: one row of
/// sums (aggregated) or one per queue (per-object, labels `vhost` and `queue`).
fn queue_families(e: &mut Exposition, shards: &[ShardView], endpoint: Endpoint) {
    let queues = shards.iter().flat_map(|s| &s.queues);
    let rows: BTreeMap<(&str, &str), Depth> = match endpoint {
        Endpoint::Aggregated => {
            let mut all = Depth::default();
            queues.for_each(|q| all.add(q));
            BTreeMap::from([(("", ""), all)])
        }
        Endpoint::PerObject => {
            let mut rows = BTreeMap::new();
            for q in queues {
                rows.entry((q.vhost.as_str(), q.name.as_str()))
                    .or_insert_with(Depth::default)
                    .add(q);
            }
            rows
        }
    };
    let families: [QueueFamily; 7] = [
        (
            "rabbitmq_queue_messages_ready",
            Kind::Gauge,
            "Messages ready to be delivered to consumers",
            |d| d.ready,
        ),
        (
            "rabbitmq_queue_messages_unacked",
            Kind::Gauge,
            "Messages delivered to consumers but not yet acknowledged",
            |d| d.unacked,
        ),
        (
            "rabbitmq_queue_messages",
            Kind::Gauge,
            "Sum of ready and unacknowledged messages - total queue depth",
            |d| d.ready + d.unacked,
        ),
        (
            "rabbitmq_queue_consumers",
            Kind::Gauge,
            "Consumers on a queue",
            |d| d.consumers,
        ),
        (
            "rabbitmq_queue_messages_bytes",
            Kind::Gauge,
            "Size in bytes of ready and unacknowledged messages",
            |d| d.bytes,
        ),
        (
            "rabbitmq_queue_messages_ready_bytes",
            Kind::Gauge,
            "Size in bytes of ready messages",
            |d| d.ready_bytes,
        ),
        (
            "rabbitmq_queue_messages_published_total",
            Kind::Counter,
            "Total number of messages published into a queue through an exchange on a channel",
            |d| d.published,
        ),
    ];
    for (name, kind, help, value) in families {
        e.family(name, kind, help);
        for ((vhost, queue), depth) in &rows {
            let labels: &[(&str, &str)] = match endpoint {
                Endpoint::Aggregated => &[],
                Endpoint::PerObject => &[("vhost", vhost), ("queue", queue)],
            };
            e.sample(name, labels, value(depth) as f64);
        }
    }
}

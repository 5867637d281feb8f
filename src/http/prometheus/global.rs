//! Owns: RabbitMQ's global message counters and queue churn as rabbitmq_prometheus
//! names them (`rabbit_global_counters`: `rabbitmq_global_messages_*_total` per protocol,
//! and per protocol and queue type for the delivery side; `rabbitmq_queues_declared_total`,
//! `_created_total`, `_deleted_total`), and the `rabbitmq_message_size_bytes` histogram
//! (`rabbit_msg_size_metrics`' buckets), summed over the shards.
//!
//! Every figure is a total since the broker started: the channels' counts, open and
//! closed (`ShardView::message_totals`; nothing is counted per message for them beyond
//! what a channel's `message_stats` already counts), the coordinator's queue churn and
//! each shard's size histogram. `routed` is what was received less what no queue took
//! (returned or dropped); `confirmed` counts the publishes answered in confirm mode,
//! acks and nacks.
//!
//! Does not: encode the text (`text`), or keep anything between scrapes.

use crate::session::channel::ChannelStats;
use crate::shard::inbox::observe::ShardView;
use crate::shard::message_sizes::{SizeCounts, BOUNDS};

use super::text::{Exposition, Kind};

/// The AMQP 0-9-1 label of the per-protocol families.
const AMQP: (&str, &str) = ("protocol", "amqp091");
/// sluice's queues are classic queues in RabbitMQ's terms.
const CLASSIC: (&str, &str) = ("queue_type", "rabbit_classic_queue");

/// One counter family: name, help, and its figure.
type Counter = (&'static str, &'static str, fn(&ChannelStats) -> u64);

const PER_PROTOCOL: [Counter; 6] = [
    (
        "rabbitmq_global_messages_received_total",
        "Total number of messages received from publishers",
        |t| t.publish,
    ),
    (
        "rabbitmq_global_messages_received_confirm_total",
        "Total number of messages received from publishers expecting confirmations",
        |t| t.publish_confirm,
    ),
    (
        "rabbitmq_global_messages_routed_total",
        "Total number of messages routed to queues or streams",
        |t| {
            t.publish
                .saturating_sub(t.return_unroutable + t.drop_unroutable)
        },
    ),
    (
        "rabbitmq_global_messages_unroutable_dropped_total",
        "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
        |t| t.drop_unroutable,
    ),
    (
        "rabbitmq_global_messages_unroutable_returned_total",
        "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable",
        |t| t.return_unroutable,
    ),
    (
        "rabbitmq_global_messages_confirmed_total",
        "Total number of messages confirmed to publishers",
        |t| t.confirm,
    ),
];

const PER_QUEUE_TYPE: [Counter; 8] = [
    (
        "rabbitmq_global_messages_delivered_total",
        "Total number of messages delivered to consumers",
        |t| t.delivery.delivered(),
    ),
    (
        "rabbitmq_global_messages_delivered_consume_manual_ack_total",
        "Total number of messages delivered to consumers using basic.consume with manual acknowledgment",
        |t| t.delivery.deliver,
    ),
    (
        "rabbitmq_global_messages_delivered_consume_auto_ack_total",
        "Total number of messages delivered to consumers using basic.consume with automatic acknowledgment",
        |t| t.delivery.deliver_no_ack,
    ),
    (
        "rabbitmq_global_messages_delivered_get_manual_ack_total",
        "Total number of messages delivered to consumers using basic.get with manual acknowledgment",
        |t| t.delivery.get,
    ),
    (
        "rabbitmq_global_messages_delivered_get_auto_ack_total",
        "Total number of messages delivered to consumers using basic.get with automatic acknowledgment",
        |t| t.delivery.get_no_ack,
    ),
    (
        "rabbitmq_global_messages_get_empty_total",
        "Total number of times basic.get operations fetched no message",
        |t| t.delivery.get_empty,
    ),
    (
        "rabbitmq_global_messages_redelivered_total",
        "Total number of messages redelivered to consumers",
        |t| t.delivery.redeliver,
    ),
    (
        "rabbitmq_global_messages_acknowledged_total",
        "Total number of messages acknowledged by consumers",
        |t| t.delivery.ack,
    ),
];

/// Writes the global counters, the queue churn and the size histogram.
pub fn render(e: &mut Exposition, shards: &[ShardView]) {
    let mut totals = ChannelStats::default();
    let mut sizes = SizeCounts::default();
    for s in shards {
        totals.add(&s.message_totals);
        sizes.add(&s.message_sizes);
    }
    for (name, help, figure) in PER_PROTOCOL {
        e.family(name, Kind::Counter, help)
            .sample(name, &[AMQP], figure(&totals) as f64);
    }
    for (name, help, figure) in PER_QUEUE_TYPE {
        e.family(name, Kind::Counter, help)
            .sample(name, &[AMQP, CLASSIC], figure(&totals) as f64);
    }
    let sum = |f: fn(&ShardView) -> u64| shards.iter().map(f).sum::<u64>() as f64;
    e.single(
        "rabbitmq_queues_declared_total",
        Kind::Counter,
        "Total number of queues declared",
        sum(|s| s.churn.queues_declared),
    )
    .single(
        "rabbitmq_queues_created_total",
        Kind::Counter,
        "Total number of queues created",
        sum(|s| s.churn.queues_created),
    )
    .single(
        "rabbitmq_queues_deleted_total",
        Kind::Counter,
        "Total number of queues deleted",
        sum(|s| s.churn.queues_deleted),
    );
    size_histogram(e, &sizes);
}

/// `rabbitmq_message_size_bytes`: cumulative buckets labelled as RabbitMQ labels them
/// (`le="100.0"`, …, `le="+Inf"`), then `_sum` and `_count`.
fn size_histogram(e: &mut Exposition, sizes: &SizeCounts) {
    let name = "rabbitmq_message_size_bytes";
    e.family(
        name,
        Kind::Histogram,
        "Size of messages received from publishers",
    );
    let bucket = format!("{name}_bucket");
    let mut cumulative = 0;
    for (i, count) in sizes.counts.iter().enumerate() {
        cumulative += count;
        let le = BOUNDS
            .get(i)
            .map_or_else(|| "+Inf".to_owned(), |b| format!("{b}.0"));
        e.sample(&bucket, &[AMQP, ("le", le.as_str())], cumulative as f64);
    }
    e.sample(&format!("{name}_sum"), &[AMQP], sizes.sum as f64)
        .sample(&format!("{name}_count"), &[AMQP], cumulative as f64);
}

//! Owns: `/api/overview`, the node's totals, listeners, memory and disk figures.

use serde_json::json;

use super::{ok_json, QUEUES};
use crate::http::{unavailable, Context, HttpResponse};
use crate::shard::inbox::observe::ShardView;

pub(super) async fn overview(ctx: &Context) -> HttpResponse {
    let Some(shards) = ctx.snapshots(QUEUES).await else {
        return unavailable();
    };
    let exchanges = ctx
        .directory()
        .await
        .map_or(0, |d| d.iter().map(|v| v.exchanges.len()).sum::<usize>());
    let queues = shards.iter().flat_map(|s| &s.queues);
    let (mut ready, mut unacked, mut publish, mut deliver, mut ack) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    for q in queues {
        ready += q.ready;
        unacked += q.unacked;
        publish += q.counters.enqueued;
        deliver += q.counters.delivered;
        ack += q.counters.consumed;
    }
    let count = |f: fn(&ShardView) -> u64| shards.iter().map(f).sum::<u64>();
    ok_json(&json!({
        "management_version": env!("CARGO_PKG_VERSION"),
        "product_name": "sluice",
        "product_version": env!("CARGO_PKG_VERSION"),
        "node": node(ctx),
        "object_totals": {
            "connections": count(|s| s.connection_count),
            "channels": count(|s| s.channel_count),
            "queues": count(|s| s.queue_count),
            "consumers": count(|s| s.consumer_count),
            "exchanges": exchanges,
        },
        "queue_totals": {
            "messages": ready + unacked,
            "messages_ready": ready,
            "messages_unacknowledged": unacked,
        },
        "message_stats": { "publish": publish, "deliver_get": deliver, "ack": ack },
        "listeners": ctx.amqp.iter().map(|a| ("amqp", a))
            .chain(ctx.amqps.iter().map(|a| ("amqp/ssl", a)))
            .map(|(protocol, a)| json!({
                "protocol": protocol, "ip_address": a.ip().to_string(), "port": a.port(),
            })).collect::<Vec<_>>(),
        "shards": ctx.peers.len(),
        "uptime_seconds": ctx.uptime(),
        "memory": {
            "used": ctx.memory.used(),
            "high_watermark": ctx.memory.high,
            "alarm": ctx.memory.alarm(),
        },
        "rss_bytes": crate::http::rss_bytes(),
        "store_bytes": ctx.disk.total(),
        // RabbitMQ's node fields for the disk alarm (free space of the data directory's
        // file system, as shard 0 last read it).
        "disk_free": ctx.disk.free.free(),
        "disk_free_limit": ctx.disk.free.limit(),
        "disk_free_alarm": ctx.disk.free.alarm(),
    }))
}

fn node(ctx: &Context) -> String {
    format!(
        "sluice@{}",
        ctx.amqp.first().map_or_else(String::new, |a| a.to_string())
    )
}

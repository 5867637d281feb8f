//! Owns: `/api/overview` — product and version (`rabbitmq_version`, `product_version`),
//! `cluster_name` and `node` (the node name), the node's totals, listeners, web
//! contexts, exchange types, memory and disk figures, and sluice's `shard_details` (each
//! shard's connections, channels, home queues, messages, publish inbox depth, CPU time
//! and socket bytes: the figures `/metrics` has per shard).

use serde_json::json;

use serde_json::Value;

use super::ok_json;
use crate::http::{rates, unavailable, Context, HttpResponse};
use crate::shard::inbox::observe::{ShardView, Want};

pub(super) async fn overview(ctx: &Context) -> HttpResponse {
    // Counts and totals only: no view of each queue is built (the console's overview
    // asks this every 5 s).
    let (Some(shards), Some(counters)) = (
        ctx.snapshots(Want::default()).await,
        rates::counters(ctx).await,
    ) else {
        return unavailable();
    };
    let queue_counts: Vec<rates::Counts> = counters
        .iter()
        .flat_map(|v| &v.queues)
        .map(|(_, c)| rates::queue_counts(c))
        .collect();
    let published = rates::exchange_totals(&counters)
        .into_values()
        .map(|e| e[0]);
    let totals = rates::overview_counts(queue_counts.iter(), published);
    let table = ctx.rates.current();
    let message_stats = rates::message_stats(&rates::MESSAGE_FIELDS, &totals, table.overview());
    let exchanges = ctx
        .directory()
        .await
        .map_or(0, |d| d.iter().map(|v| v.exchanges.len()).sum::<usize>());
    let count = |f: fn(&ShardView) -> u64| shards.iter().map(f).sum::<u64>();
    let (ready, unacked) = (count(|s| s.messages_ready), count(|s| s.messages_unacked));
    let node = &ctx.config.node_name;
    ok_json(&json!({
        "management_version": env!("CARGO_PKG_VERSION"),
        "product_name": "sluice",
        "product_version": env!("CARGO_PKG_VERSION"),
        // RabbitMQ's base version field; sluice's own version (rabbitmqadmin's
        // `show overview` reads it).
        "rabbitmq_version": env!("CARGO_PKG_VERSION"),
        // A single node: its cluster is named after it (`[broker] node_name`).
        "cluster_name": node,
        "node": node,
        "exchange_types": crate::http::nodes::exchange_types(),
        "contexts": ctx.http.iter().map(|a| json!({
            "node": node, "description": "sluice management", "path": "/",
            "port": a.port().to_string(), "ip": a.ip().to_string(),
        })).collect::<Vec<_>>(),
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
        "message_stats": message_stats,
        "listeners": crate::http::health::listeners(ctx).into_iter()
            .map(|(protocol, a)| json!({
                "node": node, "protocol": protocol, "ip_address": a.ip().to_string(),
                "port": a.port(),
            })).collect::<Vec<_>>(),
        "shards": ctx.peers.len(),
        "shard_details": shards.iter().map(|s| shard_json(ctx, s)).collect::<Vec<_>>(),
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

/// One shard's figures (`shard_details`); `cpu_seconds` grows by the event loop's busy
/// time, so its rate is the shard's busy fraction.
fn shard_json(ctx: &Context, s: &ShardView) -> Value {
    let inbox = ctx
        .peers
        .publish
        .get(usize::from(s.shard))
        .map(|tx| tx.max_capacity().saturating_sub(tx.capacity()));
    json!({
        "shard": s.shard,
        "connections": s.connection_count,
        "channels": s.channel_count,
        "queues": s.queue_count,
        "consumers": s.consumer_count,
        "messages_ready": s.messages_ready,
        "messages_unacknowledged": s.messages_unacked,
        "publish_inbox_depth": inbox,
        "cpu_seconds": s.cpu_seconds,
        "bytes_read": s.bytes_read,
        "bytes_written": s.bytes_written,
    })
}

//! Owns: `/api/overview` — product and version (`rabbitmq_version`, `product_version`),
//! `cluster_name` and `node` (the node name), the node's totals, listeners, web
//! contexts, exchange types, memory and disk figures.

use serde_json::json;

use super::{ok_json, QUEUES};
use crate::http::{rates, unavailable, Context, HttpResponse};
use crate::shard::inbox::observe::ShardView;

pub(super) async fn overview(ctx: &Context) -> HttpResponse {
    let (Some(shards), Some(counters)) = (ctx.snapshots(QUEUES).await, rates::counters(ctx).await)
    else {
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
    let queues = shards.iter().flat_map(|s| &s.queues);
    let (mut ready, mut unacked) = (0u64, 0u64);
    for q in queues {
        ready += q.ready;
        unacked += q.unacked;
    }
    let count = |f: fn(&ShardView) -> u64| shards.iter().map(f).sum::<u64>();
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

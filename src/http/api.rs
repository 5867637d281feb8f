//! Owns: the management API's JSON under `/api/` — RabbitMQ's paths and field names for
//! the subset served (overview, queues, exchanges, bindings, connections, channels,
//! consumers; the federation links are `super::federation`'s), with sluice's own fields beside them (home shard, flow state,
//! slow-consumer policy, headroom and prediction) — and its actions: closing a
//! connection (320 CONNECTION_FORCED), purging and deleting a queue, each sent to the
//! shard that owns the object.
//!
//! Does not: change anything except through a shard's inbox.

use bytes::Bytes;
use hyper::StatusCode;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::protocol::{FieldTable, FieldValue, ShortStr};
use crate::shard::inbox::observe::{ObserveReply, ObserveRequest, QueueView, ShardView, Want};
use crate::shard::inbox::{ControlOk, ControlRequest, ShardMsg};

use super::auth::Viewer;
use super::{error, respond, unavailable, Context, HttpResponse};

fn ok_json(v: &Value) -> HttpResponse {
    respond(
        StatusCode::OK,
        "application/json",
        Bytes::from(v.to_string()),
    )
}

fn no_content() -> HttpResponse {
    respond(StatusCode::NO_CONTENT, "application/json", Bytes::new())
}

fn not_found(what: &str) -> HttpResponse {
    error(StatusCode::NOT_FOUND, &format!("{what} not found"))
}

/// A GET under `/api/`, showing `viewer` what it may see: a vhost named in the path that
/// it may not see is 401, as RabbitMQ's management answers; listings leave out the rest.
pub async fn get(ctx: &Context, path: &[&str], _query: &str, viewer: &Viewer<'_>) -> HttpResponse {
    if let ["queues" | "exchanges" | "bindings", vhost, ..] = path {
        if !viewer.sees_vhost(vhost) {
            return error(
                StatusCode::UNAUTHORIZED,
                "User not authorised to access virtual host",
            );
        }
    }
    match path {
        ["overview"] => overview(ctx).await,
        ["queues"] => queues(ctx, None, viewer).await,
        ["queues", vhost] => queues(ctx, Some(vhost), viewer).await,
        ["queues", vhost, name] => queue(ctx, vhost, name).await,
        ["exchanges"] | ["exchanges", _] => exchanges(ctx, path.get(1).copied(), viewer).await,
        ["bindings"] | ["bindings", _] => bindings(ctx, path.get(1).copied(), viewer).await,
        ["connections"] => {
            listing(ctx, CONNECTIONS, |s| {
                let mine = s.connections.iter();
                let mine = mine.filter(|c| viewer.sees_connection_of(&c.user));
                mine.map(connection_json).collect()
            })
            .await
        }
        ["channels"] => {
            listing(ctx, CONNECTIONS, |s| {
                let mine = s.channels.iter();
                let mine = mine.filter(|c| viewer.sees_connection_of(&c.user));
                mine.map(channel_json).collect()
            })
            .await
        }
        ["consumers"] => {
            listing(ctx, CONSUMERS, |s| {
                let seen = s.consumers.iter().filter(|c| viewer.sees_vhost(&c.vhost));
                seen.map(consumer_json).collect()
            })
            .await
        }
        ["federation-links", rest @ ..] => super::federation::get(ctx, rest, viewer).await,
        _ => not_found("object"),
    }
}

pub async fn delete(ctx: &Context, path: &[&str]) -> HttpResponse {
    match path {
        ["connections", name] => close_connection(ctx, name).await,
        ["queues", vhost, name, "contents"] => purge(ctx, vhost, name).await,
        ["queues", vhost, name] => delete_queue(ctx, vhost, name).await,
        _ => not_found("object"),
    }
}

const QUEUES: Want = Want {
    queues: true,
    queues_after: 0,
    connections: false,
    consumers: false,
};
const CONNECTIONS: Want = Want {
    queues: false,
    queues_after: 0,
    connections: true,
    consumers: false,
};
const CONSUMERS: Want = Want {
    queues: false,
    queues_after: 0,
    connections: false,
    consumers: true,
};

async fn listing(
    ctx: &Context,
    want: Want,
    each: impl Fn(&ShardView) -> Vec<Value>,
) -> HttpResponse {
    let Some(shards) = ctx.snapshots(want).await else {
        return unavailable();
    };
    let all: Vec<Value> = shards.iter().flat_map(each).collect();
    ok_json(&Value::Array(all))
}

fn node(ctx: &Context) -> String {
    format!(
        "sluice@{}",
        ctx.amqp.first().map_or_else(String::new, |a| a.to_string())
    )
}

pub fn queue_json(q: &QueueView) -> Value {
    let slow = q.slow.as_ref().map(|s| {
        json!({
            "policy": s.action,
            "max_depth": s.max_depth,
            "max_count": s.max_count,
            "max_age_seconds": s.max_age_secs,
            "min_rate": s.min_rate,
            "headroom_messages": s.max_count.map(|m| m as i64 - (q.ready + q.unacked) as i64),
            "headroom_bytes": s.max_depth.map(|m| m as i64 - q.bytes as i64),
            "headroom_age_seconds": s.max_age_secs.map(|m| m - q.oldest_age_secs),
            "arrival_rate": s.arrival_rate,
            "consume_rate": s.consume_rate,
            "predicted_threshold": s.predicted_threshold,
            "predicted_seconds": s.predicted_seconds,
        })
    });
    let flow = q.flow.map(|f| {
        json!({
            "blocked": f.blocked,
            "capacity": f.capacity,
            "resume_capacity": f.resume_capacity,
            "blocked_publishers": f.blocked_publishers,
        })
    });
    json!({
        "name": q.name,
        "vhost": q.vhost,
        "durable": q.durable,
        "auto_delete": q.auto_delete,
        "exclusive": q.exclusive,
        "arguments": table_json(&q.arguments),
        "state": "running",
        "type": "classic",
        "messages": q.ready + q.unacked,
        "messages_ready": q.ready,
        "messages_unacknowledged": q.unacked,
        "message_bytes": q.bytes,
        "message_bytes_ready": q.ready_bytes,
        "message_bytes_unacknowledged": q.bytes.saturating_sub(q.ready_bytes),
        "consumers": q.consumers,
        "message_stats": {
            "publish": q.counters.enqueued,
            "deliver": q.counters.delivered,
            "deliver_get": q.counters.delivered,
            "ack": q.counters.consumed,
        },
        "home_shard": q.home,
        "oldest_message_age_seconds": q.oldest_age_secs,
        "discarded": q.counters.discarded,
        "expired": q.counters.expired,
        "rejected": q.counters.rejected,
        "flow": flow,
        "slow_consumer": slow,
    })
}

async fn overview(ctx: &Context) -> HttpResponse {
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
        "rss_bytes": super::rss_bytes(),
        "store_bytes": ctx.disk.total(),
        // RabbitMQ's node fields for the disk alarm (free space of the data directory's
        // file system, as shard 0 last read it).
        "disk_free": ctx.disk.free.free(),
        "disk_free_limit": ctx.disk.free.limit(),
        "disk_free_alarm": ctx.disk.free.alarm(),
    }))
}

async fn queues(ctx: &Context, vhost: Option<&str>, viewer: &Viewer<'_>) -> HttpResponse {
    let Some(shards) = ctx.snapshots(QUEUES).await else {
        return unavailable();
    };
    let mut all: Vec<&QueueView> = shards
        .iter()
        .flat_map(|s| &s.queues)
        .filter(|q| vhost.is_none_or(|v| q.vhost == v) && viewer.sees_vhost(&q.vhost))
        .collect();
    all.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
    ok_json(&Value::Array(all.into_iter().map(queue_json).collect()))
}

async fn queue(ctx: &Context, vhost: &str, name: &str) -> HttpResponse {
    let Some(shards) = ctx.snapshots(QUEUES).await else {
        return unavailable();
    };
    shards
        .iter()
        .flat_map(|s| &s.queues)
        .find(|q| q.vhost == vhost && q.name == name)
        .map_or_else(|| not_found("queue"), |q| ok_json(&queue_json(q)))
}

async fn exchanges(ctx: &Context, vhost: Option<&str>, viewer: &Viewer<'_>) -> HttpResponse {
    let Some(dir) = ctx.directory().await else {
        return unavailable();
    };
    let all: Vec<Value> = dir
        .iter()
        .filter(|v| vhost.is_none_or(|h| v.vhost == h) && viewer.sees_vhost(&v.vhost))
        .flat_map(|v| {
            v.exchanges.iter().map(|e| {
                json!({
                    "name": e.name, "vhost": v.vhost, "type": e.kind, "durable": e.durable,
                    "auto_delete": e.auto_delete, "internal": e.internal,
                    "arguments": table_json(&e.arguments),
                })
            })
        })
        .collect();
    ok_json(&Value::Array(all))
}

async fn bindings(ctx: &Context, vhost: Option<&str>, viewer: &Viewer<'_>) -> HttpResponse {
    let Some(dir) = ctx.directory().await else {
        return unavailable();
    };
    let all: Vec<Value> = dir
        .iter()
        .filter(|v| vhost.is_none_or(|h| v.vhost == h) && viewer.sees_vhost(&v.vhost))
        .flat_map(|v| {
            v.bindings.iter().map(|b| {
                json!({
                    "source": b.source, "vhost": v.vhost, "destination": b.destination,
                    "destination_type": b.destination_type, "routing_key": b.routing_key,
                    "arguments": table_json(&b.arguments), "properties_key": b.routing_key,
                })
            })
        })
        .collect();
    ok_json(&Value::Array(all))
}

fn connection_json(c: &crate::shard::inbox::observe::ConnView) -> Value {
    let (host, port) = c.peer.rsplit_once(':').unwrap_or((&c.peer, ""));
    json!({
        "name": c.name,
        "vhost": c.vhost,
        "user": c.user,
        "state": c.state,
        "channels": c.channels,
        "peer_host": host,
        "peer_port": port.parse::<u16>().ok(),
        "frame_max": c.frame_max,
        "channel_max": c.channel_max,
        "timeout": c.heartbeat,
        "protocol": "AMQP 0-9-1",
        "send_pend": c.outbound_bytes,
        "home_shard": c.shard,
        "serial": c.serial,
        "held": c.held,
    })
}

fn channel_json(c: &crate::shard::inbox::observe::ChannelView) -> Value {
    json!({
        "name": format!("{} ({})", c.connection, c.number),
        "number": c.number,
        "connection_details": { "name": c.connection },
        "user": c.user,
        "vhost": c.vhost,
        "prefetch_count": c.prefetch,
        "global_prefetch_count": c.global_prefetch,
        "messages_unacknowledged": c.unacked,
        "consumer_count": c.consumers,
        "confirm": c.confirm,
        "transactional": c.transactional,
        "state": if c.flow_blocked { "flow" } else { "running" },
        "flow_blocked": c.flow_blocked,
    })
}

fn consumer_json(c: &crate::shard::inbox::observe::ConsumerView) -> Value {
    json!({
        "consumer_tag": c.tag,
        "channel_details": {
            "name": format!("{} ({})", c.connection, c.channel),
            "number": c.channel,
            "connection_name": c.connection,
        },
        "queue": { "name": c.queue, "vhost": c.vhost },
        "ack_required": c.ack_required,
        "prefetch_count": c.prefetch,
        "active": true,
        "messages_unacknowledged": c.unacked,
    })
}

/// Asks every shard to close the connection (only its owner has it).
async fn close_connection(ctx: &Context, name: &str) -> HttpResponse {
    let req = ObserveRequest::CloseConnection {
        name: name.to_owned(),
        reason: "Closed via management API".to_owned(),
    };
    let Some(replies) = ctx.ask_all(req).await else {
        return unavailable();
    };
    if replies
        .iter()
        .any(|r| matches!(r, ObserveReply::Closed(true)))
    {
        no_content()
    } else {
        not_found("connection")
    }
}

async fn purge(ctx: &Context, vhost: &str, name: &str) -> HttpResponse {
    let home = crate::shard::placement::home_shard(vhost, name.as_bytes(), ctx.peers.len());
    let req = ObserveRequest::Purge {
        vhost: vhost.to_owned(),
        name: name.to_owned(),
    };
    match ctx.ask_one(usize::from(home), req).await {
        Some(ObserveReply::Purged(Some(_))) => no_content(),
        Some(_) => not_found("queue"),
        None => unavailable(),
    }
}

async fn delete_queue(ctx: &Context, vhost: &str, name: &str) -> HttpResponse {
    let Some(idx) = ctx.live.borrow().vhost_index(vhost) else {
        return not_found("vhost");
    };
    let (tx, rx) = oneshot::channel();
    let req = ControlRequest::DeleteQueue {
        vhost: idx,
        name: ShortStr::from(name),
        if_unused: false,
        if_empty: false,
        requester: None,
    };
    ctx.peers.send(0, ShardMsg::Control(req, tx));
    match tokio::time::timeout(super::SHARD_TIMEOUT, rx).await {
        Ok(Ok(Ok(ControlOk::QueueDeleted { .. }))) => no_content(),
        Ok(Ok(Ok(_))) => no_content(),
        Ok(Ok(Err(e))) => {
            if e.code() == crate::protocol::ReplyCode::NotFound {
                not_found("queue")
            } else {
                error(StatusCode::BAD_REQUEST, &e.to_string())
            }
        }
        _ => unavailable(),
    }
}

/// Declare arguments as JSON, as RabbitMQ's management API shows them: numbers as
/// numbers, strings as strings, tables and arrays nested; byte arrays as text (lossy).
fn table_json(t: &FieldTable) -> Value {
    Value::Object(
        t.iter()
            .map(|(k, v)| (k.as_str_lossy().into_owned(), field_json(v)))
            .collect(),
    )
}

fn field_json(v: &FieldValue) -> Value {
    match v {
        FieldValue::Bool(b) => json!(b),
        FieldValue::I8(n) => json!(n),
        FieldValue::U8(n) => json!(n),
        FieldValue::I16(n) => json!(n),
        FieldValue::U16(n) => json!(n),
        FieldValue::I32(n) => json!(n),
        FieldValue::U32(n) => json!(n),
        FieldValue::I64(n) => json!(n),
        FieldValue::F32(n) => json!(n),
        FieldValue::F64(n) => json!(n),
        FieldValue::Decimal { scale, value } => {
            json!(f64::from(*value) / 10f64.powi(i32::from(*scale)))
        }
        FieldValue::LongStr(s) => json!(String::from_utf8_lossy(s.as_bytes())),
        FieldValue::Bytes(b) => json!(String::from_utf8_lossy(b)),
        FieldValue::Array(items) => Value::Array(items.iter().map(field_json).collect()),
        FieldValue::Timestamp(t) => json!(t),
        FieldValue::Table(t) => table_json(t),
        FieldValue::Void => Value::Null,
    }
}

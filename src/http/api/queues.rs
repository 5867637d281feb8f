//! Owns: queues as JSON (`/api/queues`; a stream's log and readers with their lag in
//! `stream`), and purging a queue, sent to the shard that owns it (deleting one is
//! `http::topology`'s).

use serde_json::{json, Value};

use super::json::table_json;
use super::{no_content, not_found, ok_json, QUEUES};
use crate::http::auth::Viewer;
use crate::http::paging::{self, object, Fields, BY_VHOST_AND_NAME};
use crate::http::rates::{message_stats, queue_counts, RateTable, MESSAGE_FIELDS};
use crate::http::{unavailable, Context, HttpResponse};
use crate::shard::inbox::observe::{ObserveReply, ObserveRequest, QueueView, StreamView};

/// A queue as the API shows it, with the fields `fields` wants; a stream's readers are
/// listed one by one only with `detail` (the single queue's view: a list of streams with
/// thousands of readers stays small).
pub fn queue_json(q: &QueueView, rates: &RateTable, fields: &Fields, detail: bool) -> Value {
    object!(fields, {
        "name": q.name,
        "vhost": q.vhost,
        "durable": q.durable,
        "auto_delete": q.auto_delete,
        "exclusive": q.exclusive,
        "arguments": table_json(&q.arguments),
        "policy": q.policy.as_ref().map(|p| p.name.clone()),
        "operator_policy": Value::Null,
        "effective_policy_definition":
            Value::Object(q.policy.as_ref().map(|p| p.definition.clone()).unwrap_or_default()),
        "state": "running",
        "type": if q.stream.is_some() { "stream" } else { "classic" },
        "messages": q.ready + q.unacked,
        "messages_ready": q.ready,
        "messages_unacknowledged": q.unacked,
        "message_bytes": q.bytes,
        "message_bytes_ready": q.ready_bytes,
        "message_bytes_unacknowledged": q.bytes.saturating_sub(q.ready_bytes),
        "consumers": q.consumers,
        "message_stats": message_stats(&MESSAGE_FIELDS, &queue_counts(&q.counters), rates.queue(q.id)),
        "home_shard": q.home,
        "oldest_message_age_seconds": q.oldest_age_secs,
        "discarded": q.counters.discarded,
        "expired": q.counters.expired,
        "rejected": q.counters.rejected,
        "flow": flow_json(q),
        "slow_consumer": slow_consumer_json(q),
        "stream": q.stream.as_deref().map_or(Value::Null, |s| stream_json(s, detail)),
    })
}

/// A queue's capacity (seed 001), or null without one.
fn flow_json(q: &QueueView) -> Value {
    q.flow.map_or(Value::Null, |f| {
        json!({
            "blocked": f.blocked,
            "capacity": f.capacity,
            "resume_capacity": f.resume_capacity,
            "blocked_publishers": f.blocked_publishers,
        })
    })
}

/// A topic subscription's slow-consumer policy (seed 000) and how close it is to
/// firing, or null for a queue without one.
fn slow_consumer_json(q: &QueueView) -> Value {
    q.slow.as_ref().map_or(Value::Null, |s| {
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
    })
}

/// A stream's log, retention and readers (each with its lag, with `detail`; otherwise
/// how many, the largest lag, and how many are predicted to fall off retention).
fn stream_json(s: &StreamView, detail: bool) -> Value {
    let readers: Vec<Value> = s
        .readers
        .iter()
        .filter(|_| detail)
        .map(|r| {
            json!({
                "consumer_tag": r.consumer_tag,
                "connection": r.connection,
                "channel": r.channel,
                "offset": r.offset,
                "started_at_offset": r.started_at,
                "delivered": r.delivered,
                "delivery_rate": r.delivery_rate,
                "prefetch_count": r.prefetch,
                "credit": r.credit,
                "offset_tracking": r.tracking,
                "lag_messages": r.lag_messages,
                "lag_bytes": r.lag_bytes,
                "seconds_to_retention": r.seconds_to_retention,
                "reading_from_disk": r.reading,
            })
        })
        .collect();
    json!({
        "first_offset": s.first_offset,
        "committed_offset": s.committed_offset,
        "segments": s.segments,
        "disk_bytes": s.disk_bytes,
        "tail_cache_bytes": s.cache_bytes,
        "max_length_bytes": s.max_length_bytes,
        "max_age_seconds": s.max_age_secs,
        "max_segment_size_bytes": s.segment_size,
        "publish_rate": s.publish_rate,
        "publish_bytes_rate": s.publish_bytes_rate,
        "tracked_consumers": s.tracked_consumers,
        "segments_removed": s.segments_removed,
        "messages_removed": s.messages_removed,
        "reader_count": s.readers.len(),
        "max_lag_messages": s.readers.iter().map(|r| r.lag_messages).max().unwrap_or(0),
        "readers_falling": s.readers.iter().filter(|r| r.seconds_to_retention.is_some()).count(),
        "readers": if detail { Value::Array(readers) } else { Value::Null },
    })
}

pub(super) async fn queues(
    ctx: &Context,
    vhost: Option<&str>,
    query: &str,
    viewer: &Viewer<'_>,
) -> HttpResponse {
    let Some(shards) = ctx.snapshots(QUEUES).await else {
        return unavailable();
    };
    let rates = ctx.rates.current();
    let shown: Vec<&QueueView> = shards
        .iter()
        .flat_map(|s| &s.queues)
        .filter(|q| vhost.is_none_or(|v| q.vhost == v) && viewer.sees_vhost(&q.vhost))
        .collect();
    paging::reply_built(query, shown.len(), BY_VHOST_AND_NAME, |i, fields| {
        shown
            .get(i)
            .map_or(Value::Null, |q| queue_json(q, &rates, fields, false))
    })
}

pub(super) async fn queue(ctx: &Context, vhost: &str, name: &str) -> HttpResponse {
    let Some(shards) = ctx.snapshots(QUEUES).await else {
        return unavailable();
    };
    shards
        .iter()
        .flat_map(|s| &s.queues)
        .find(|q| q.vhost == vhost && q.name == name)
        .map_or_else(not_found, |q| {
            ok_json(&queue_json(q, &ctx.rates.current(), &Fields::ALL, true))
        })
}

pub(super) async fn purge(ctx: &Context, vhost: &str, name: &str) -> HttpResponse {
    let home = crate::shard::placement::home_shard(vhost, name.as_bytes(), ctx.peers.len());
    let req = ObserveRequest::Purge {
        vhost: vhost.to_owned(),
        name: name.to_owned(),
    };
    match ctx.ask_one(usize::from(home), req).await {
        Some(ObserveReply::Purged(Some(_))) => no_content(),
        Some(ObserveReply::NotSupported(reason)) => crate::http::error(
            hyper::StatusCode::BAD_REQUEST,
            &format!("NOT_IMPLEMENTED - {reason}"),
        ),
        Some(_) => not_found(),
        None => unavailable(),
    }
}

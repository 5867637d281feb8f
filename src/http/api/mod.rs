//! Owns: the management API's JSON under `/api/` — RabbitMQ's paths and field names for
//! the subset served (overview, queues, exchanges, connections, channels,
//! consumers; the federation links are `super::federation`'s), with sluice's own fields
//! beside them (home shard, flow state, slow-consumer policy, headroom and prediction) —
//! and its actions: closing a connection (320 CONNECTION_FORCED) and purging a queue,
//! each sent to the shard that owns the object (declaring and deleting queues,
//! exchanges and bindings is `super::topology`'s).
//!
//! Rooms: `overview` (the node and its totals), `queues` (queue JSON, purge),
//! `exchanges` (the exchange list; bindings are `super::topology`'s), `connections`
//! (connections — listed, or one by name — channels, consumers, closing a connection),
//! `json` (field tables as JSON).
//!
//! Does not: change anything except through a shard's inbox.

mod connections;
mod exchanges;
pub mod json;
mod overview;
pub mod queues;

use bytes::Bytes;
use hyper::StatusCode;
use serde_json::Value;

use crate::shard::inbox::observe::{ShardView, Want};

use super::auth::Viewer;
use super::{error, paging, respond, unavailable, Context, HttpResponse};

pub(super) fn ok_json(v: &Value) -> HttpResponse {
    respond(
        StatusCode::OK,
        "application/json",
        Bytes::from(v.to_string()),
    )
}

pub(super) fn no_content() -> HttpResponse {
    respond(StatusCode::NO_CONTENT, "application/json", Bytes::new())
}

/// 404 for an object that does not exist (RabbitMQ's `Object Not Found`).
pub(super) fn not_found() -> HttpResponse {
    super::object_not_found()
}

/// A GET under `/api/`, showing `viewer` what it may see: a vhost named in the path that
/// it may not see is 401, as RabbitMQ's management answers; listings leave out the rest.
///
/// Every list is answered through `paging::reply` (RabbitMQ's `columns`, `sort`,
/// `sort_reverse`, `page`, `page_size`, `name`, `use_regex`).
pub async fn get(ctx: &Context, path: &[&str], query: &str, viewer: &Viewer<'_>) -> HttpResponse {
    if let ["queues" | "exchanges" | "bindings", vhost, ..] = path {
        if !viewer.sees_vhost(vhost) {
            return error(
                StatusCode::UNAUTHORIZED,
                "User not authorised to access virtual host",
            );
        }
    }
    match path {
        ["overview"] => overview::overview(ctx).await,
        ["queues"] => queues::queues(ctx, None, query, viewer).await,
        ["queues", vhost] => queues::queues(ctx, Some(vhost), query, viewer).await,
        ["queues", vhost, name] => queues::queue(ctx, vhost, name).await,
        ["exchanges"] | ["exchanges", _] => {
            exchanges::exchanges(ctx, path.get(1).copied(), query, viewer).await
        }
        ["connections"] => {
            let Some(shards) = ctx.snapshots(CONNECTIONS).await else {
                return unavailable();
            };
            let shown: Vec<_> = shards
                .iter()
                .flat_map(|s| &s.connections)
                .filter(|c| viewer.sees_connection_of(&c.user))
                .collect();
            let node = &ctx.config.node_name;
            paging::reply_built(query, shown.len(), paging::BY_VHOST_AND_NAME, |i, f| {
                shown
                    .get(i)
                    .map_or(Value::Null, |c| connections::connection_json(c, node, f))
            })
        }
        ["connections", name] => connections::connection(ctx, name, viewer).await,
        ["channels"] => {
            let Some(shards) = ctx.snapshots(CONNECTIONS).await else {
                return unavailable();
            };
            let shown: Vec<_> = shards
                .iter()
                .flat_map(|s| &s.channels)
                .filter(|c| viewer.sees_connection_of(&c.user))
                .collect();
            let rates = ctx.rates.current();
            paging::reply_built(query, shown.len(), paging::BY_VHOST_AND_NAME, |i, f| {
                shown
                    .get(i)
                    .map_or(Value::Null, |c| connections::channel_json(c, &rates, f))
            })
        }
        ["consumers"] => {
            listing(ctx, CONSUMERS, query, |s| {
                let seen = s.consumers.iter().filter(|c| viewer.sees_vhost(&c.vhost));
                seen.map(connections::consumer_json).collect()
            })
            .await
        }
        ["federation-links", rest @ ..] => super::federation::get(ctx, rest, viewer).await,
        _ => not_found(),
    }
}

/// A DELETE under `/api/`; `reason` is the request's `X-Reason` (a closed connection's
/// text).
pub async fn delete(ctx: &Context, path: &[&str], reason: Option<&str>) -> HttpResponse {
    match path {
        ["connections", name] => connections::close_connection(ctx, name, reason).await,
        ["queues", vhost, name, "contents"] => queues::purge(ctx, vhost, name).await,
        _ => not_found(),
    }
}

pub(super) const QUEUES: Want = Want {
    queues: true,
    queues_after: 0,
    connections: false,
    consumers: false,
};
pub(super) const CONNECTIONS: Want = Want {
    queues: false,
    queues_after: 0,
    connections: true,
    consumers: false,
};
pub(super) const CONSUMERS: Want = Want {
    queues: false,
    queues_after: 0,
    connections: false,
    consumers: true,
};

pub(super) async fn listing(
    ctx: &Context,
    want: Want,
    query: &str,
    each: impl Fn(&ShardView) -> Vec<Value>,
) -> HttpResponse {
    let Some(shards) = ctx.snapshots(want).await else {
        return unavailable();
    };
    let all: Vec<Value> = shards.iter().flat_map(each).collect();
    list(query, all, paging::BY_VHOST_AND_NAME)
}

/// A list answered as the query asks (`paging`): every list endpoint ends here.
pub(super) fn list(query: &str, items: Vec<Value>, default_sort: &[&str]) -> HttpResponse {
    paging::reply(query, items, default_sort)
}

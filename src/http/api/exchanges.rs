//! Owns: the exchange lists as JSON (`/api/exchanges`, `/api/exchanges/{vhost}`), from
//! the shards' directory (one exchange and the bindings are `http::topology`'s).

use serde_json::{json, Value};

use super::json::table_json;
use super::list;
use crate::http::auth::Viewer;
use crate::http::{paging, rates};
use crate::http::{unavailable, Context, HttpResponse};

pub(super) async fn exchanges(
    ctx: &Context,
    vhost: Option<&str>,
    query: &str,
    viewer: &Viewer<'_>,
) -> HttpResponse {
    let (Some(dir), Some(counters)) = (ctx.directory().await, rates::counters(ctx).await) else {
        return unavailable();
    };
    let counts = rates::exchange_totals(&counters);
    let rates = ctx.rates.current();
    let stats = |vhost: &str, name: &str| {
        let key = (vhost.to_owned(), name.to_owned());
        // As RabbitMQ's: no `message_stats` until the exchange is published to.
        let n = counts.get(&key).copied().filter(|n| *n != [0, 0])?;
        Some(rates::message_stats(
            &rates::EXCHANGE_FIELDS,
            &n,
            rates.exchange(vhost, name),
        ))
    };
    let live = ctx.live.borrow().clone();
    let all: Vec<Value> = dir
        .iter()
        .filter(|v| vhost.is_none_or(|h| v.vhost == h) && viewer.sees_vhost(&v.vhost))
        .flat_map(|v| {
            v.exchanges.iter().map(|e| {
                let mut one = json!({
                    "name": e.name, "vhost": v.vhost, "type": e.kind, "durable": e.durable,
                    "auto_delete": e.auto_delete, "internal": e.internal,
                    "arguments": table_json(&e.arguments),
                    "policy": crate::http::policies::exchange_policy(&live, &v.vhost, &e.name),
                });
                if let Some(stats) = stats(&v.vhost, &e.name) {
                    one["message_stats"] = stats;
                }
                one
            })
        })
        .collect();
    list(query, all, paging::BY_VHOST_AND_NAME)
}

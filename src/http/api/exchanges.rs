//! Owns: the exchange lists as JSON (`/api/exchanges`, `/api/exchanges/{vhost}`), from
//! the shards' directory (one exchange and the bindings are `http::topology`'s).

use serde_json::{json, Value};

use super::json::table_json;
use super::ok_json;
use crate::http::auth::Viewer;
use crate::http::{unavailable, Context, HttpResponse};
use crate::shard::inbox::observe::VhostView;

pub(super) async fn exchanges(
    ctx: &Context,
    vhost: Option<&str>,
    viewer: &Viewer<'_>,
) -> HttpResponse {
    per_vhost(ctx, vhost, viewer, |v| {
        let each = v.exchanges.iter();
        each.map(|e| {
            json!({
                "name": e.name, "vhost": v.vhost, "type": e.kind, "durable": e.durable,
                "auto_delete": e.auto_delete, "internal": e.internal,
                "arguments": table_json(&e.arguments),
            })
        })
        .collect()
    })
    .await
}
/// The directory's entries of every vhost `viewer` sees (only `vhost`, if given).
async fn per_vhost(
    ctx: &Context,
    vhost: Option<&str>,
    viewer: &Viewer<'_>,
    each: impl Fn(&VhostView) -> Vec<Value>,
) -> HttpResponse {
    let Some(dir) = ctx.directory().await else {
        return unavailable();
    };
    let all: Vec<Value> = dir
        .iter()
        .filter(|v| vhost.is_none_or(|h| v.vhost == h) && viewer.sees_vhost(&v.vhost))
        .flat_map(each)
        .collect();
    ok_json(&Value::Array(all))
}

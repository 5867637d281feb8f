//! Owns: the federation links as the management API shows them — `GET
//! /api/federation-links`, `/api/federation-links/{vhost}` and their `…/state/down`
//! forms (links neither running nor starting), with the field names and shapes of
//! RabbitMQ's federation management plugin (`node`, `exchange`, `upstream_exchange`,
//! `type`, `vhost`, `upstream`, `id`, `status`, `local_connection` while running,
//! `error` while down, `uri`, `timestamp` in local time as RabbitMQ prints it) and
//! sluice's own figures beside them (`upstream_queue`, `since`, the counters, `lag`) —
//! and the one way this thread asks the federation thread for the links ([`links`]),
//! which /metrics uses too.
//!
//! Does not: keep link state (the federation thread does, and is asked on every
//! request) or act on a link.

use bytes::Bytes;
use hyper::StatusCode;
use serde_json::{json, Map, Value};

use crate::federation::{LinkState, LinkStatus};

use super::auth::Viewer;
use super::{error, respond, Context, HttpResponse, SHARD_TIMEOUT};

/// Every link's status; empty when federation is not configured, `None` when the
/// federation thread did not answer in time.
pub async fn links(ctx: &Context) -> Option<Vec<LinkStatus>> {
    match &ctx.federation {
        None => Some(Vec::new()),
        Some(handle) => tokio::time::timeout(SHARD_TIMEOUT, handle.links())
            .await
            .ok(),
    }
}

/// A GET under `/api/federation-links` (`path` is what follows it), for `viewer`: a
/// vhost named in the path that it may not see is 401, as for the other listings;
/// listings leave out links of vhosts it may not see.
pub async fn get(ctx: &Context, path: &[&str], viewer: &Viewer<'_>) -> HttpResponse {
    let (vhost, only_down) = match path {
        [] => (None, false),
        ["state", "down"] => (None, true),
        [vhost] => (Some(*vhost), false),
        [vhost, "state", "down"] => (Some(*vhost), true),
        _ => return super::object_not_found(),
    };
    if vhost.is_some_and(|v| !viewer.sees_vhost(v)) {
        return error(
            StatusCode::UNAUTHORIZED,
            "User not authorised to access virtual host",
        );
    }
    let Some(all) = links(ctx).await else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the federation thread did not answer",
        );
    };
    let shown: Vec<Value> = all
        .iter()
        .filter(|l| vhost.is_none_or(|v| l.vhost == v) && viewer.sees_vhost(&l.vhost))
        .filter(|l| !only_down || matches!(l.state, LinkState::Error(_)))
        .map(link_json)
        .collect();
    respond(
        StatusCode::OK,
        "application/json",
        Bytes::from(Value::Array(shown).to_string()),
    )
}

/// One link as `GET /api/federation-links` lists it.
pub fn link_json(l: &LinkStatus) -> Value {
    let mut out = Map::new();
    let mut put = |key: &str, value: Value| {
        out.insert(key.to_owned(), value);
    };
    // RabbitMQ's fields (rabbit_federation_status, rabbit_federation_mgmt).
    put("node", json!(l.node));
    put("exchange", json!(l.exchange));
    put("upstream_exchange", json!(l.upstream_exchange));
    put("type", json!("exchange"));
    put("vhost", json!(l.vhost));
    put("upstream", json!(l.upstream));
    put("id", json!(l.id));
    put("status", json!(l.state.name()));
    match &l.state {
        LinkState::Running => put("local_connection", json!(l.local_connection)),
        LinkState::Error(reason) => put("error", json!(reason)),
        LinkState::Starting => {}
    }
    put("uri", json!(l.uri));
    put("timestamp", json!(rabbit_timestamp(l.since)));
    // sluice's own.
    put("upstream_queue", json!(l.upstream_queue));
    put("since", json!(l.since));
    put("forwarded", json!(l.forwarded));
    put("dropped", json!(l.dropped));
    put("redelivered", json!(l.redelivered));
    put("reconnects", json!(l.reconnects));
    put("bindings", json!(l.bindings));
    put("binding_changes", json!(l.binding_changes));
    put("lag", json!(l.lag));
    put("unconfirmed", json!(l.unconfirmed));
    Value::Object(out)
}

/// A calendar time, as `localtime_r` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

/// `epoch` (seconds) as RabbitMQ's management shows a link's `timestamp`: the node's
/// local time, `YYYY-MM-DD H:MM:SS` (the hour not padded, as its format prints it).
/// The number itself when the local time cannot be had.
pub fn rabbit_timestamp(epoch: u64) -> String {
    local_time(epoch).map_or_else(|| epoch.to_string(), format_civil)
}

fn format_civil(t: Civil) -> String {
    format!(
        "{}-{:02}-{:02} {}:{:02}:{:02}",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    )
}

fn local_time(epoch: u64) -> Option<Civil> {
    let seconds = libc::time_t::try_from(epoch).ok()?;
    // SAFETY: an all-zero `tm` is a valid value (integers and a null zone pointer).
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: the reentrant form; it reads `seconds` and writes only the `tm` we own.
    let filled = unsafe { libc::localtime_r(&seconds, &mut tm) };
    if filled.is_null() {
        return None;
    }
    let field = |v: libc::c_int| u32::try_from(v).ok();
    Some(Civil {
        year: i64::from(tm.tm_year) + 1900,
        month: field(tm.tm_mon)? + 1,
        day: field(tm.tm_mday)?,
        hour: field(tm.tm_hour)?,
        minute: field(tm.tm_min)?,
        second: field(tm.tm_sec)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(state: LinkState) -> LinkStatus {
        LinkStatus {
            node: "relay-1".into(),
            vhost: "/".into(),
            exchange: "amq.topic".into(),
            upstream_exchange: "amq.topic".into(),
            upstream: "root".into(),
            upstream_queue: "federation: amq.topic -> relay-1".into(),
            id: "/:amq.topic:root".into(),
            state,
            uri: "amqp://root.example:5672/%2f".into(),
            local_connection: "Federation link (upstream: root, exchange: amq.topic)".into(),
            since: 1_700_000_000,
            forwarded: 7,
            dropped: 1,
            redelivered: 2,
            reconnects: 3,
            bindings: 4,
            binding_changes: 5,
            lag: None,
            unconfirmed: 6,
        }
    }

    #[test]
    fn timestamps_are_printed_as_rabbitmq_does() {
        let t = Civil {
            year: 2024,
            month: 3,
            day: 5,
            hour: 9,
            minute: 7,
            second: 2,
        };
        assert_eq!(format_civil(t), "2024-03-05 9:07:02");
        let t = Civil { hour: 23, ..t };
        assert_eq!(format_civil(t), "2024-03-05 23:07:02");
    }

    #[test]
    fn a_running_link_has_its_connection_and_no_error() {
        let v = link_json(&status(LinkState::Running));
        assert_eq!(v["status"], "running");
        assert_eq!(v["type"], "exchange");
        assert_eq!(
            v["local_connection"],
            "Federation link (upstream: root, exchange: amq.topic)"
        );
        assert!(v.get("error").is_none());
        assert_eq!(v["lag"], Value::Null);
        assert_eq!(v["forwarded"], 7);
        assert_eq!(v["since"], 1_700_000_000u64);
        assert_eq!(v["timestamp"], json!(rabbit_timestamp(1_700_000_000)));
    }

    #[test]
    fn a_link_that_is_down_has_its_error_and_no_connection() {
        let v = link_json(&status(LinkState::Error("connection refused".into())));
        assert_eq!(v["status"], "error");
        assert_eq!(v["error"], "connection refused");
        assert!(v.get("local_connection").is_none());
        let v = link_json(&status(LinkState::Starting));
        assert_eq!(v["status"], "starting");
        assert!(v.get("error").is_none() && v.get("local_connection").is_none());
    }
}

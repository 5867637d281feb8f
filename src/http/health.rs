//! Owns: RabbitMQ's health checks under `/api/health/checks/` — `alarms` and
//! `local-alarms` (the memory watermark, `MemoryBoard`, and the disk free-space alarm,
//! `DiskBoard`), `port-listener/{port}`, `protocol-listener/{protocols}` (RabbitMQ's
//! protocol names and aliases) and `virtual-hosts` (every vhost in force is open on
//! every shard) — with RabbitMQ's bodies and codes: 200 `{"status":"ok"}`, 503
//! `{"status":"failed","reason":…}`, so load balancers and Kubernetes probes can use
//! them. Any authenticated user may ask, as in RabbitMQ.
//!
//! Does not: raise or clear an alarm (shard 0 evaluates them), or hold any state.

use std::collections::BTreeSet;

use hyper::{Method, StatusCode};
use serde_json::{json, Value};

use super::{respond, Call, Context, HttpResponse};
use crate::shard::inbox::observe::{ObserveReply, ObserveRequest};

/// Routes `GET /api/health/checks/...`; `None` for any other path.
pub async fn route(call: &Call<'_>) -> Option<HttpResponse> {
    let ["health", "checks", check @ ..] = call.path else {
        return None;
    };
    if call.method != Method::GET {
        return Some(super::error(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed",
        ));
    }
    let ctx = call.ctx;
    Some(match check {
        // A single node: the cluster's alarms are this node's.
        ["alarms"] => alarms(ctx, "There are alarms in effect in the cluster"),
        ["local-alarms"] => alarms(ctx, "There are alarms in effect on the node"),
        ["port-listener", port] => port_listener(ctx, port),
        ["protocol-listener", protocols] => protocol_listener(ctx, protocols),
        ["virtual-hosts"] => virtual_hosts(call).await,
        _ => super::object_not_found(),
    })
}

fn ok(body: Value) -> HttpResponse {
    reply(StatusCode::OK, body)
}

fn failed(body: Value) -> HttpResponse {
    reply(StatusCode::SERVICE_UNAVAILABLE, body)
}

fn reply(status: StatusCode, body: Value) -> HttpResponse {
    respond(status, "application/json", body.to_string().into())
}

/// The alarms in effect, as RabbitMQ lists them (`resource`: `memory`, `disk space`).
pub fn alarms_in_effect(ctx: &Context) -> Vec<&'static str> {
    let mut resources = Vec::new();
    if ctx.memory.alarm() {
        resources.push("memory");
    }
    if ctx.disk.free.alarm() {
        resources.push("disk space");
    }
    resources
}

fn alarms(ctx: &Context, reason: &str) -> HttpResponse {
    let node = &ctx.config.node_name;
    let alarms: Vec<Value> = alarms_in_effect(ctx)
        .into_iter()
        .map(|resource| json!({ "resource": resource, "node": node }))
        .collect();
    if alarms.is_empty() {
        return ok(json!({ "status": "ok" }));
    }
    failed(json!({ "status": "failed", "reason": reason, "alarms": alarms }))
}

/// Every listener of this node: its protocol (RabbitMQ's name) and address.
pub fn listeners(ctx: &Context) -> Vec<(&'static str, std::net::SocketAddr)> {
    let amqp = ctx.amqp.iter().map(|a| ("amqp", *a));
    let amqps = ctx.amqps.iter().map(|a| ("amqp/ssl", *a));
    let http = ctx.http.iter().map(|a| ("http", *a));
    amqp.chain(amqps).chain(http).collect()
}

fn port_listener(ctx: &Context, port: &str) -> HttpResponse {
    let Ok(port) = port.parse::<i64>() else {
        return super::error(StatusCode::BAD_REQUEST, "Invalid port");
    };
    let ports: Vec<u16> = listeners(ctx).iter().map(|(_, a)| a.port()).collect();
    if ports.iter().any(|p| i64::from(*p) == port) {
        return ok(json!({ "status": "ok", "port": port }));
    }
    failed(json!({
        "status": "failed",
        "reason": "No active listener",
        "missing": port,
        "ports": ports,
    }))
}

fn protocol_listener(ctx: &Context, protocols: &str) -> HttpResponse {
    let requested: BTreeSet<String> = protocols.split(',').map(normalize_protocol).collect();
    let active: BTreeSet<String> = listeners(ctx)
        .iter()
        .map(|(p, _)| (*p).to_owned())
        .collect();
    let missing: Vec<&String> = requested.difference(&active).collect();
    if missing.is_empty() {
        return ok(json!({ "status": "ok", "protocols": active }));
    }
    failed(json!({
        "status": "failed",
        "reason": "No active listener",
        "missing": missing,
        "protocols": active,
    }))
}

/// RabbitMQ's aliases of the protocol names a check may be asked for (those of the
/// protocols sluice serves; any other name is compared as given, lower-cased).
fn normalize_protocol(name: &str) -> String {
    let name = name.to_lowercase();
    let canonical = match name.as_str() {
        "amqp091" | "amqp0.9.1" | "amqp0-9-1" | "amqp0_9_1" | "amqp10" | "amqp1.0" | "amqp1-0"
        | "amqp1_0" => "amqp",
        "amqps" => "amqp/ssl",
        "http1" | "http1.1" | "http_api" | "management" | "management_ui" | "ui" => "http",
        _ => return name,
    };
    canonical.to_owned()
}

/// Healthy when every vhost in force is open in every shard's directory (a shard that
/// does not answer in time has none of them).
async fn virtual_hosts(call: &Call<'_>) -> HttpResponse {
    let replies = call.ctx.ask_all_each(ObserveRequest::Vhosts).await;
    let mut down: BTreeSet<&str> = BTreeSet::new();
    for reply in &replies {
        let open: &[String] = match reply {
            Some(ObserveReply::Vhosts(open)) => open,
            _ => &[],
        };
        for vhost in &call.config.vhosts {
            if !open.contains(vhost) {
                down.insert(vhost);
            }
        }
    }
    if down.is_empty() {
        return ok(json!({ "status": "ok" }));
    }
    failed(json!({
        "status": "failed",
        "reason": "Some virtual hosts are down",
        "virtual-hosts": down,
    }))
}

#[cfg(test)]
mod tests {
    use super::normalize_protocol;

    #[test]
    fn protocol_aliases_are_rabbitmqs() {
        assert_eq!(normalize_protocol("AMQP091"), "amqp");
        assert_eq!(normalize_protocol("amqp0-9-1"), "amqp");
        assert_eq!(normalize_protocol("amqps"), "amqp/ssl");
        assert_eq!(normalize_protocol("amqp/ssl"), "amqp/ssl");
        assert_eq!(normalize_protocol("management"), "http");
        assert_eq!(normalize_protocol("https"), "https");
        assert_eq!(normalize_protocol("mqtt"), "mqtt");
    }
}

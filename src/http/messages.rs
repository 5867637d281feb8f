//! Owns: the management API's debugging messages and the aliveness test — RabbitMQ's
//! `POST /api/exchanges/{vhost}/{name}/publish`, `POST /api/queues/{vhost}/{name}/get`
//! and `GET /api/aliveness-test/{vhost}` — with RabbitMQ's JSON, status codes and
//! reasons, and their permission checks for the requesting user (the vhost, then write
//! on the exchange to publish, read on the queue to get; configure, write and read on
//! `aliveness-test` for the aliveness test).
//!
//! A publish goes the way a routed AMQP publish goes: it is refused while the memory or
//! disk alarm (or the vhost's store quota) would block a publisher, routed on a shard's
//! directory replica, then sent to each home shard of its queues holding that shard's
//! publish byte budget (`Peers::publish_budget`, as a connection's reader holds it), and
//! answered once every queue has it: `{"routed": bool}`, or RabbitMQ's `rejected` when a
//! queue refused it (`reject-publish`). A get is answered by the queue's home shard in
//! one turn (`shard::messages`).
//!
//! Does not: touch a queue or the directory itself (the shards do, through
//! `ShardMsg::Observe`), or convert properties (`message_json` does).

// The checks below answer a refused request with its HTTP response (the Err side): one
// is built per refused request, off the data path, so it is not boxed.
#![allow(clippy::result_large_err)]

use base64::Engine;
use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde_json::{json, Map, Value};
use tokio::sync::oneshot;

use crate::config::{Config, User};
use crate::model::ids::{ChannelRef, ConnOwner, QueueRef};
use crate::model::message::{parse_expiration, Message, ReceivedBody};
use crate::protocol::properties::BasicProperties;
use crate::protocol::{FieldTable, ShortStr};
use crate::shard::inbox::observe::{AckMode, GotView, ObserveReply, ObserveRequest, RouteRefused};
use crate::shard::inbox::{ControlOk, ControlRequest, ShardMsg};

use super::message_json::{properties_from_json, properties_json};
use super::{error, respond, unavailable, Call, Context, HttpResponse, SHARD_TIMEOUT};

/// The queue the aliveness test declares, publishes to and gets from (RabbitMQ's).
const ALIVENESS_QUEUE: &str = "aliveness-test";

/// RabbitMQ's reason when a publish was refused by a queue (`basic.nack`).
const REJECTED: &str = "rejected Unable to publish message. Check queue limits.";

/// RabbitMQ's reason when a publish got no confirm: what its management answers for a
/// publish that a resource alarm blocked (its channel drops a publish while blocked).
/// sluice knows at once that the message was not taken, and answers at once.
const CONFIRM_TIMEOUT: &str = "confirm_timeout Timed out waiting for a publisher confirm. \
     The message may still have been enqueued. Check the health of the queues bound to \
     this exchange.";

/// Routes the three paths; `None` for every other path.
pub async fn route(call: &Call<'_>) -> Option<HttpResponse> {
    let response = match (call.method, call.path) {
        (&Method::POST, ["exchanges", vhost, name, "publish"]) => {
            publish_request(call, vhost, name).await
        }
        (&Method::POST, ["queues", vhost, name, "get"]) => get_request(call, vhost, name).await,
        (&Method::GET, ["aliveness-test", vhost]) => aliveness(call, vhost).await,
        (_, ["exchanges", _, _, "publish"] | ["queues", _, _, "get"] | ["aliveness-test", _]) => {
            error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
        }
        _ => return None,
    };
    Some(response)
}

/// 400 with RabbitMQ's reason (a text, or a term rendered as JSON).
fn bad(reason: Value) -> HttpResponse {
    let body = json!({"error": "bad_request", "reason": reason});
    respond(
        StatusCode::BAD_REQUEST,
        "application/json",
        body.to_string().into(),
    )
}

fn ok(v: &Value) -> HttpResponse {
    respond(StatusCode::OK, "application/json", v.to_string().into())
}

/// The user's grant on `vhost`, or RabbitMQ's answer: 404 for a vhost that is not
/// there, 401 for one the user may not use.
fn vhost_grant(
    config: &Config,
    user: &User,
    vhost: &str,
) -> Result<std::sync::Arc<crate::auth::permissions::Grant>, HttpResponse> {
    if !config.vhosts.iter().any(|v| v == vhost) {
        return Err(error(StatusCode::NOT_FOUND, "vhost_not_found"));
    }
    config
        .permissions
        .grant(&user.name, vhost)
        .ok_or_else(|| super::auth::unauthorized("User not authorised to access virtual host"))
}

/// RabbitMQ's 401 for a refused permission (its channel's 403 reason).
fn refused(perm: &str, kind: &str, name: &str, vhost: &str, user: &str) -> HttpResponse {
    super::auth::unauthorized(&format!(
        "ACCESS_REFUSED - {perm} access to {kind} '{name}' in vhost '{vhost}' refused for user '{user}'"
    ))
}

/// The request body as a JSON object: empty or `null` is an empty object, as RabbitMQ
/// takes it.
fn body_object(body: &Bytes) -> Result<Map<String, Value>, HttpResponse> {
    let text = body.trim_ascii();
    if text.is_empty() || text == b"null" || text == b"undefined" {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(Value::String(_)) => Err(bad(json!(
            "invalid payload: the request body JSON-decoded to a string. Is the input doubly-JSON-encoded?"
        ))),
        _ => Err(bad(json!("not_json"))),
    }
}

/// The keys RabbitMQ requires, or its 400 naming the missing ones.
fn require<'m>(map: &'m Map<String, Value>, keys: &[&str]) -> Result<Vec<&'m Value>, HttpResponse> {
    let missing: Vec<String> = keys
        .iter()
        .filter(|k| map.get(**k).is_none_or(Value::is_null))
        .map(|k| format!("{{key_missing,{k}}}"))
        .collect();
    if !missing.is_empty() {
        return Err(bad(json!(format!("[{}]", missing.join(",")))));
    }
    Ok(keys.iter().filter_map(|k| map.get(*k)).collect())
}

/// RabbitMQ's `parse_int`: an integer, a number (truncated) or a string of digits.
fn parse_int(v: &Value) -> Result<i64, HttpResponse> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f.trunc() as i64))
            .ok_or_else(|| bad(json!(["not_integer", n.to_string()]))),
        Value::String(s) => s.trim().parse().map_err(|_| bad(json!(["not_integer", s]))),
        other => Err(bad(json!(["not_integer", other.to_string()]))),
    }
}

/// What a publish needs once its request is read.
struct Publish {
    exchange: ShortStr,
    routing_key: ShortStr,
    properties: BasicProperties,
    payload: Bytes,
}

async fn publish_request(call: &Call<'_>, vhost: &str, name: &str) -> HttpResponse {
    let grant = match vhost_grant(call.config, call.user, vhost) {
        Ok(g) => g,
        Err(response) => return response,
    };
    let map = match body_object(call.body) {
        Ok(m) => m,
        Err(response) => return response,
    };
    let publish = match read_publish(&map, name) {
        Ok(p) => p,
        Err(response) => return response,
    };
    // The default exchange's write permission is checked as `amq.default`.
    let resource = if publish.exchange.is_empty() {
        "amq.default"
    } else {
        name
    };
    if !grant.write.matches(resource.as_bytes()) {
        return refused("write", "exchange", resource, vhost, &call.user.name);
    }
    match publish_message(call.ctx, call.config, call.user, vhost, publish).await {
        Ok(routed) => ok(&json!({ "routed": routed })),
        Err(response) => response,
    }
}

/// `routing_key`, `properties`, `payload` and `payload_encoding`, as RabbitMQ reads them.
fn read_publish(map: &Map<String, Value>, exchange: &str) -> Result<Publish, HttpResponse> {
    let values = require(
        map,
        &["routing_key", "properties", "payload", "payload_encoding"],
    )?;
    let [routing_key, properties, payload, encoding] = values.as_slice() else {
        return Err(bad(json!("not_json")));
    };
    let Value::String(payload) = payload else {
        return Err(bad(json!("payload_not_string")));
    };
    let routing_key = match routing_key {
        Value::String(s) if s.len() <= 255 => ShortStr::from(s.as_str()),
        Value::String(_) => return Err(bad(json!("routing_key is longer than 255 bytes"))),
        other => {
            return Err(bad(json!(format!(
                "routing_key must be a string, not {other}"
            ))))
        }
    };
    let payload = match encoding {
        Value::String(e) if e == "string" => Bytes::copy_from_slice(payload.as_bytes()),
        Value::String(e) if e == "base64" => {
            match base64::engine::general_purpose::STANDARD.decode(payload.trim()) {
                Ok(b) => Bytes::from(b),
                Err(_) => return Err(bad(json!(["not_base64", payload]))),
            }
        }
        Value::String(e) => return Err(bad(json!(["unsupported_encoding", e]))),
        other => return Err(bad(json!(["unsupported_encoding", other.to_string()]))),
    };
    let properties = properties_from_json(properties).map_err(|reason| bad(json!(reason)))?;
    let exchange = if exchange == "amq.default" {
        ShortStr::from_static("")
    } else {
        ShortStr::from(exchange)
    };
    Ok(Publish {
        exchange,
        routing_key,
        properties,
        payload,
    })
}

/// Publishes as an AMQP publish goes (see the module head); whether it reached a queue.
async fn publish_message(
    ctx: &Context,
    config: &Config,
    user: &User,
    vhost: &str,
    publish: Publish,
) -> Result<bool, HttpResponse> {
    // rabbit_channel's checks of the properties: a validated user-id, a TTL expiration.
    if let Some(claimed) = &publish.properties.user_id {
        let claimed = claimed.as_str_lossy();
        if claimed != user.name && !user.tags.iter().any(|t| t == "impersonator") {
            return Err(bad(json!(format!(
                "406 PRECONDITION_FAILED - user_id property set to '{claimed}' but authenticated user was '{}'",
                user.name
            ))));
        }
    }
    let ttl_ms = match &publish.properties.expiration {
        None => None,
        Some(raw) => match parse_expiration(raw.as_bytes()) {
            Ok(ttl) => Some(ttl),
            Err(reason) => {
                return Err(bad(json!(format!(
                    "406 PRECONDITION_FAILED - invalid expiration '{}': {reason}",
                    raw.as_str_lossy()
                ))))
            }
        },
    };
    // A publisher is blocked while an alarm is on: nothing is taken.
    let vhost_idx = config.vhost_index(vhost).unwrap_or(usize::MAX);
    if ctx.memory.alarm() || ctx.disk.free.alarm() || ctx.disk.alarm(vhost_idx) {
        return Err(bad(json!(CONFIRM_TIMEOUT)));
    }
    let raw_properties = publish.properties.to_bytes();
    let body_size = publish.payload.len() as u64;
    let route = ObserveRequest::Route {
        vhost: vhost.to_owned(),
        exchange: publish.exchange.clone(),
        routing_key: publish.routing_key.clone(),
        raw_properties: raw_properties.clone(),
    };
    let targets = match ctx.ask_one(0, route).await {
        Some(ObserveReply::Routed(Ok(t))) => t,
        Some(ObserveReply::Routed(Err(RouteRefused::NoExchange))) => {
            return Err(error(StatusCode::NOT_FOUND, "exchange_not_found"))
        }
        Some(ObserveReply::Routed(Err(RouteRefused::NoVhost))) => {
            return Err(error(StatusCode::NOT_FOUND, "vhost_not_found"))
        }
        Some(ObserveReply::Routed(Err(RouteRefused::Internal))) => {
            return Err(refused(
                "write",
                "exchange",
                &publish.exchange.as_str_lossy(),
                vhost,
                &user.name,
            ))
        }
        _ => return Err(unavailable()),
    };
    if targets.is_empty() {
        return Ok(false);
    }
    let mut chunks = crate::model::message::BodyChunks::new();
    if !publish.payload.is_empty() {
        chunks.push(publish.payload);
    }
    let msg = Message::with_ttl(
        publish.exchange,
        publish.routing_key,
        raw_properties,
        ReceivedBody::owned(chunks),
        body_size,
        ttl_ms,
    );
    match enqueue_everywhere(ctx, &targets, &msg, body_size).await {
        Some(true) => Ok(true),
        Some(false) => Err(bad(json!(REJECTED))),
        None => Err(unavailable()),
    }
}

/// Sends the message to each home shard of `targets`, holding `bytes` of that shard's
/// publish budget until it is in; whether every queue took it (`None`: a shard did not
/// answer in time).
async fn enqueue_everywhere(
    ctx: &Context,
    targets: &[QueueRef],
    msg: &Message,
    bytes: u64,
) -> Option<bool> {
    let mut homes: Vec<u16> = targets.iter().map(|t| t.home).collect();
    homes.sort_unstable();
    homes.dedup();
    let deadline = tokio::time::Instant::now() + SHARD_TIMEOUT;
    let mut pending: Vec<oneshot::Receiver<ObserveReply>> = Vec::with_capacity(homes.len());
    for home in homes {
        let permits = ctx.peers.permits_for(bytes);
        let budget = ctx.peers.publish_budget.get(usize::from(home))?;
        let held = tokio::time::timeout_at(deadline, budget.acquire_many(permits))
            .await
            .ok()?
            .ok()?;
        // The home shard gives the units back once the message is in its queues.
        held.forget();
        let queues = targets
            .iter()
            .filter(|t| t.home == home)
            .map(|t| t.id)
            .collect();
        let req = ObserveRequest::Enqueue {
            queues,
            msg: msg.clone(),
            permits,
        };
        pending.push(ctx.ask(usize::from(home), req));
    }
    let mut accepted = true;
    for rx in pending {
        match tokio::time::timeout_at(deadline, rx).await.ok()?.ok()? {
            ObserveReply::Enqueued(all) => accepted &= all,
            _ => return None,
        }
    }
    Some(accepted)
}

fn ack_mode(v: &Value) -> Result<AckMode, HttpResponse> {
    match v.as_str() {
        Some("ack_requeue_true") => Ok(AckMode::AckRequeueTrue),
        Some("ack_requeue_false") => Ok(AckMode::AckRequeueFalse),
        Some("reject_requeue_true") => Ok(AckMode::RejectRequeueTrue),
        Some("reject_requeue_false") => Ok(AckMode::RejectRequeueFalse),
        _ => {
            let given = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            Err(bad(json!(format!(
                "Invalid ackmode value: {given}. Valid values are: ack_requeue_true, ack_requeue_false, reject_requeue_true, reject_requeue_false"
            ))))
        }
    }
}

async fn get_request(call: &Call<'_>, vhost: &str, name: &str) -> HttpResponse {
    let grant = match vhost_grant(call.config, call.user, vhost) {
        Ok(g) => g,
        Err(response) => return response,
    };
    let map = match body_object(call.body) {
        Ok(m) => m,
        Err(response) => return response,
    };
    let values = match require(&map, &["ackmode", "count", "encoding"]) {
        Ok(v) => v,
        Err(response) => return response,
    };
    let [mode, count, encoding] = values.as_slice() else {
        return bad(json!("not_json"));
    };
    let mode = match ack_mode(mode) {
        Ok(m) => m,
        Err(response) => return response,
    };
    let count = match parse_int(count) {
        Ok(n) => u32::try_from(n.max(0)).unwrap_or(u32::MAX),
        Err(response) => return response,
    };
    let base64 = match encoding.as_str() {
        Some("auto") => false,
        Some("base64") => true,
        _ => return bad(json!("Unsupported encoding. Please use auto or base64.")),
    };
    let truncate = match map.get("truncate").filter(|v| !v.is_null()) {
        None => None,
        Some(v) => match parse_int(v) {
            Ok(n) => Some(usize::try_from(n.max(0)).unwrap_or(usize::MAX)),
            Err(response) => return response,
        },
    };
    if !grant.read.matches(name.as_bytes()) {
        return refused("read", "queue", name, vhost, &call.user.name);
    }
    match get_messages(call.ctx, vhost, name, count, mode).await {
        Ok(got) => ok(&Value::Array(
            got.iter().map(|m| got_json(m, base64, truncate)).collect(),
        )),
        Err(response) => response,
    }
}

/// Takes up to `count` messages from the queue on its home shard.
async fn get_messages(
    ctx: &Context,
    vhost: &str,
    name: &str,
    count: u32,
    mode: AckMode,
) -> Result<Vec<GotView>, HttpResponse> {
    let home = crate::shard::placement::home_shard(vhost, name.as_bytes(), ctx.peers.len());
    let req = ObserveRequest::Get {
        vhost: vhost.to_owned(),
        name: name.to_owned(),
        count,
        mode,
    };
    match ctx.ask_one(usize::from(home), req).await {
        Some(ObserveReply::Got(Some(got))) => Ok(got),
        Some(ObserveReply::Got(None)) => Err(error(
            StatusCode::NOT_FOUND,
            &format!("NOT_FOUND - no queue '{name}' in vhost '{vhost}'"),
        )),
        Some(ObserveReply::NotSupported(reason)) => Err(error(
            StatusCode::BAD_REQUEST,
            &format!("NOT_IMPLEMENTED - {reason}"),
        )),
        _ => Err(unavailable()),
    }
}

/// A got message as RabbitMQ's management gives it.
fn got_json(m: &GotView, base64: bool, truncate: Option<usize>) -> Value {
    let body = match truncate {
        Some(n) if n < m.body.len() => &m.body[..n],
        _ => &m.body[..],
    };
    let (payload, encoding) = match std::str::from_utf8(body) {
        Ok(text) if !base64 => (text.to_owned(), "string"),
        _ => (
            base64::engine::general_purpose::STANDARD.encode(body),
            "base64",
        ),
    };
    let properties = BasicProperties::decode(&m.raw_properties)
        .map(|p| properties_json(&p))
        .unwrap_or_else(|_| json!({}));
    json!({
        "payload_bytes": m.body.len(),
        "redelivered": m.redelivered,
        "exchange": m.exchange,
        "routing_key": m.routing_key,
        "message_count": m.remaining,
        "properties": properties,
        "payload": payload,
        "payload_encoding": encoding,
    })
}

/// RabbitMQ's aliveness test: declares `aliveness-test` (kept, as RabbitMQ keeps it, so
/// that a probe every few seconds changes no definitions), publishes a message to it
/// through the default exchange and gets it back; 200 `{"status":"ok"}`, else 503 with
/// the reason.
async fn aliveness(call: &Call<'_>, vhost: &str) -> HttpResponse {
    let grant = match vhost_grant(call.config, call.user, vhost) {
        Ok(g) => g,
        Err(response) => return response,
    };
    let user = &call.user.name;
    let queue = ALIVENESS_QUEUE;
    if !grant.configure.matches(queue.as_bytes()) {
        return refused("configure", "queue", queue, vhost, user);
    }
    if !grant.write.matches(b"amq.default") {
        return refused("write", "exchange", "amq.default", vhost, user);
    }
    if !grant.read.matches(queue.as_bytes()) {
        return refused("read", "queue", queue, vhost, user);
    }
    if let Err(reason) = declare_aliveness_queue(call.ctx, call.config, vhost).await {
        return failed(&reason);
    }
    let publish = Publish {
        exchange: ShortStr::from_static(""),
        routing_key: ShortStr::from(queue),
        properties: BasicProperties::default(),
        payload: Bytes::from_static(b"test_message"),
    };
    match publish_message(call.ctx, call.config, call.user, vhost, publish).await {
        Ok(true) => {}
        Ok(false) => return failed("aliveness-test queue is not routed to"),
        Err(_) => return failed("aliveness-test message was not published"),
    }
    match get_messages(call.ctx, vhost, queue, 1, AckMode::AckRequeueFalse).await {
        Ok(got) if !got.is_empty() => ok(&json!({"status": "ok"})),
        Ok(_) => failed("aliveness-test queue is empty"),
        Err(_) => failed("aliveness-test queue could not be read"),
    }
}

/// 503 `{"status":"failed","reason":…}`, as RabbitMQ's aliveness test fails.
fn failed(reason: &str) -> HttpResponse {
    let body = json!({"status": "failed", "reason": reason});
    respond(
        StatusCode::SERVICE_UNAVAILABLE,
        "application/json",
        body.to_string().into(),
    )
}

/// Declares the aliveness queue (non-durable, as RabbitMQ's) through the coordinator, as
/// `queue.declare` does; an existing one is fine.
async fn declare_aliveness_queue(
    ctx: &Context,
    config: &Config,
    vhost: &str,
) -> Result<(), String> {
    let Some(idx) = config.vhost_index(vhost) else {
        return Err("vhost_not_found".into());
    };
    let broker = ChannelRef::broker(0).conn;
    let req = ControlRequest::DeclareQueue {
        vhost: idx,
        name: ShortStr::from(ALIVENESS_QUEUE),
        durable: false,
        exclusive_owner: None,
        auto_delete: false,
        arguments: FieldTable::default(),
        requester: ConnOwner {
            shard: 0,
            conn: broker,
        },
    };
    let (tx, rx) = oneshot::channel();
    ctx.peers.send(0, ShardMsg::Control(req, tx));
    match tokio::time::timeout(SHARD_TIMEOUT, rx).await {
        Ok(Ok(Ok(ControlOk::QueueDeclared { .. }))) => Ok(()),
        Ok(Ok(Ok(_))) => Ok(()),
        Ok(Ok(Err(e))) => Err(e.to_string()),
        _ => Err("a shard did not answer".into()),
    }
}

//! Owns: the management API's topology changes — RabbitMQ 3.10's paths, JSON and status
//! codes: `PUT/DELETE /api/queues/{vhost}/{name}` (with `?if-unused=true` /
//! `?if-empty=true`), `GET/PUT/DELETE /api/exchanges/{vhost}/{name}` (with
//! `?if-unused=true`), `GET /api/exchanges/{vhost}/{name}/bindings/source|destination`,
//! `GET /api/queues/{vhost}/{name}/bindings`, and the bindings (`bindings`: the lists,
//! `POST` of a new one, one by its properties key).
//!
//! A change goes to the coordinator (shard 0) as the same `ControlRequest` an AMQP
//! declare, bind or delete sends, with the management API as the requester
//! (`ConnOwner::MANAGEMENT`), so it is validated as a declare is, written to the
//! definitions log when durable and applied on every shard before the answer. Reads come
//! from shard 0's directory (`Context::directory`).
//!
//! Who may change what is RabbitMQ's rule (`rabbit_mgmt_util:is_authorized_vhost`,
//! then `direct_request` as the user): a management-family user (401 `Not management
//! user`); an administrator reaches every vhost, the others the vhosts they have
//! permissions on (401 `User not authorised to access virtual host`); and the user's
//! permissions on the vhost must allow the operation as they would on AMQP — configure
//! on the queue or exchange declared or deleted, write on a binding's destination and
//! read on its source (401 `Access refused.`).
//!
//! Does not: hold state, or change anything except through the coordinator's inbox.

mod bindings;

pub(super) use bindings::bind_request;

use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde_json::{json, Map, Value};
use tokio::sync::oneshot;

use crate::model::exchange::{ExchangeDef, ExchangeKind};
use crate::model::ids::ConnOwner;
use crate::protocol::{ReplyCode, ShortStr};
use crate::session::error::ChannelError;
use crate::shard::inbox::observe::VhostView;
use crate::shard::inbox::{ControlOk, ControlReply, ControlRequest, ShardMsg};

use super::api::json::table_json;
use super::auth::{unauthorized, Viewer};
use super::{error, respond, unavailable, Call, Context, HttpResponse, SHARD_TIMEOUT};

/// RabbitMQ's reason when a change is asked by a user without the administrator tag.
pub(super) const NOT_ADMIN: &str = "Not administrator user";

/// RabbitMQ's reason for a vhost the user has no permissions on.
const NOT_VHOST: &str = "User not authorised to access virtual host";

/// The name RabbitMQ's management gives the default exchange in paths.
const DEFAULT_EXCHANGE: &str = "amq.default";

/// Routes a request for a queue, an exchange or a binding this module owns; `None` for
/// every other path (and for the GETs the `api` module answers).
pub async fn route(call: &Call<'_>) -> Option<HttpResponse> {
    let Call {
        ctx,
        config,
        method,
        path,
        query,
        body,
        user,
    } = *call;
    let owned = matches!(
        (method, path),
        (&Method::PUT | &Method::DELETE, ["queues", _, _])
            | (_, ["queues", _, _, "bindings"])
            | (_, ["exchanges", _, _])
            | (_, ["exchanges", _, _, "bindings", "source" | "destination"])
    ) || bindings::owns(path);
    if !owned {
        return None;
    }
    let viewer = Viewer::of(config, user);
    let vhost = match path {
        [_, vhost, ..] => Some(*vhost),
        _ => None,
    };
    if method == Method::GET || method == Method::HEAD {
        if vhost.is_some_and(|v| !viewer.sees_vhost(v)) {
            return Some(unauthorized(NOT_VHOST));
        }
    } else {
        if !user.may_use_management() {
            return Some(unauthorized("Not management user"));
        }
        // A vhost that does not exist passes here and is 404 below, as in RabbitMQ.
        let refused = vhost.is_some_and(|v| {
            !user.is_administrator()
                && config.vhost_index(v).is_some()
                && config.permissions.grant(&user.name, v).is_none()
        });
        if refused {
            return Some(unauthorized(NOT_VHOST));
        }
    }
    let flag = |name: &str| query_flag(query, name);
    // The permissions a change needs, checked before it is sent.
    let needs = match (method, path) {
        (&Method::PUT | &Method::DELETE, ["queues", vhost, name]) => {
            Some((*vhost, vec![Need::Configure(name)]))
        }
        (&Method::PUT | &Method::DELETE, ["exchanges", vhost, name]) => {
            Some((*vhost, vec![Need::Configure(exchange_resource(name))]))
        }
        _ => bindings::needs(method, path),
    };
    if let Some((vhost, needs)) = needs {
        if !permitted(config, &user.name, vhost, &needs) {
            return Some(unauthorized("Access refused."));
        }
    }
    let response = match (method, path) {
        (&Method::PUT, ["queues", vhost, name]) => put_queue(ctx, vhost, name, body).await,
        (&Method::DELETE, ["queues", vhost, name]) => {
            delete_queue(ctx, vhost, name, flag("if-unused"), flag("if-empty")).await
        }
        (&Method::GET, ["queues", vhost, name, "bindings"]) => {
            bindings::of_queue(ctx, vhost, name, query).await
        }
        (&Method::GET, ["exchanges", vhost, name]) => get_exchange(ctx, vhost, name).await,
        (&Method::PUT, ["exchanges", vhost, name]) => put_exchange(ctx, vhost, name, body).await,
        (&Method::DELETE, ["exchanges", vhost, name]) => {
            delete_exchange(ctx, vhost, name, flag("if-unused")).await
        }
        (&Method::GET, ["exchanges", vhost, name, "bindings", side]) => {
            bindings::of_exchange(ctx, vhost, name, *side == "source", query).await
        }
        (_, ["bindings", ..]) => bindings::route(ctx, &viewer, method, path, query, body).await,
        _ => error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
    };
    Some(response)
}

/// A permission an operation needs on a resource (named as permissions name it: the
/// default exchange is `amq.default`).
pub(super) enum Need<'a> {
    Configure(&'a str),
    Write(&'a str),
    Read(&'a str),
}

/// Whether `user`'s permissions on `vhost` allow every one of `needs` (refused: 401
/// `Access refused.`, as `direct_request` answers a refusal of `rabbit_channel`). A
/// vhost that does not exist is let through (the operation answers 404).
fn permitted(config: &crate::config::Config, user: &str, vhost: &str, needs: &[Need<'_>]) -> bool {
    if config.vhost_index(vhost).is_none() {
        return true;
    }
    let Some(grant) = config.permissions.grant(user, vhost) else {
        return false;
    };
    needs.iter().all(|need| match need {
        Need::Configure(name) => grant.configure.matches(name.as_bytes()),
        Need::Write(name) => grant.write.matches(name.as_bytes()),
        Need::Read(name) => grant.read.matches(name.as_bytes()),
    })
}

/// The name an exchange of a path is checked under: the default exchange (`amq.default`
/// or empty) as `amq.default`, as `rabbit_access_control` names it.
pub(super) fn exchange_resource(name: &str) -> &str {
    if name.is_empty() {
        DEFAULT_EXCHANGE
    } else {
        name
    }
}

/// `?name=true` as RabbitMQ reads `if-unused` and `if-empty`: only the text `true`.
fn query_flag(query: &str, name: &str) -> bool {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .any(|(k, v)| k == name && v == "true")
}

/// An exchange name from a path: `amq.default` is the default exchange (``).
fn exchange_name(name: &str) -> &str {
    if name == DEFAULT_EXCHANGE {
        ""
    } else {
        name
    }
}

pub(super) use super::object_not_found;

/// 404 for a change in a vhost that does not exist (`with_vhost_and_props`).
pub(super) fn vhost_not_found() -> HttpResponse {
    error(StatusCode::NOT_FOUND, "vhost_not_found")
}

pub(super) fn bad_request(reason: &str) -> HttpResponse {
    error(StatusCode::BAD_REQUEST, reason)
}

fn no_content() -> HttpResponse {
    respond(StatusCode::NO_CONTENT, "application/json", Bytes::new())
}

fn created() -> HttpResponse {
    respond(StatusCode::CREATED, "application/json", Bytes::new())
}

fn ok(v: &Value) -> HttpResponse {
    respond(
        StatusCode::OK,
        "application/json",
        Bytes::from(v.to_string()),
    )
}

/// The JSON object of a request body; an empty body is the empty object (every field
/// its default, as RabbitMQ takes it).
pub(super) fn body_object(body: &Bytes) -> Result<Map<String, Value>, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(_) => Err("body must be a JSON object".into()),
        Err(e) => Err(format!("body is not JSON: {e}")),
    }
}

/// A boolean field of a body: JSON booleans, or the strings RabbitMQ also takes.
pub(super) fn body_flag(
    map: &Map<String, Value>,
    key: &str,
    default: bool,
) -> Result<bool, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) if s == "true" => Ok(true),
        Some(Value::String(s)) if s == "false" => Ok(false),
        Some(other) => Err(format!("{key} must be true or false, not {other}")),
    }
}

/// The `arguments` of a body as a field table.
pub(super) fn body_arguments(
    map: &Map<String, Value>,
) -> Result<crate::protocol::FieldTable, String> {
    match map.get("arguments") {
        None | Some(Value::Null) => Ok(Default::default()),
        Some(v @ Value::Object(_)) => Ok(crate::definitions::field_table(v)),
        // rabbitmqadmin sends `arguments=""` when none are given on its command line.
        Some(Value::String(s)) if s.is_empty() => Ok(Default::default()),
        Some(other) => Err(format!("arguments must be an object, not {other}")),
    }
}

/// A name the AMQP path would refuse before it reaches the coordinator: longer than a
/// short string, or with a line-breaking character (sluice's rule for names in logs).
pub(super) fn check_name(kind: &str, name: &str) -> Result<ShortStr, String> {
    if name.len() > 255 {
        return Err(format!("{kind} name is longer than 255 bytes"));
    }
    if name.chars().any(crate::ops::escape::breaks_lines) {
        return Err(format!("{kind} name contains a line-breaking character"));
    }
    Ok(ShortStr::from(name))
}

/// Sends a control request to the coordinator and waits for its answer (bounded).
pub(super) async fn control(ctx: &Context, req: ControlRequest) -> Option<ControlReply> {
    let (tx, rx) = oneshot::channel();
    ctx.peers.send(0, ShardMsg::Control(req, tx));
    tokio::time::timeout(SHARD_TIMEOUT, rx).await.ok()?.ok()
}

/// A channel error as RabbitMQ's management answers it (`rabbit_mgmt_util:
/// direct_request`): not found is 404 with the explanation, access refused 401
/// `Access refused.`, the rest 400 with the explanation.
pub(super) fn refused(e: &ChannelError) -> HttpResponse {
    match e.code() {
        ReplyCode::NotFound => error(StatusCode::NOT_FOUND, &e.to_string()),
        ReplyCode::AccessRefused => unauthorized("Access refused."),
        _ => bad_request(&e.to_string()),
    }
}

/// The answer to a change that the coordinator answered with `reply`.
fn answered(reply: Option<ControlReply>, existed: bool) -> HttpResponse {
    match reply {
        Some(Ok(_)) if existed => no_content(),
        Some(Ok(_)) => created(),
        Some(Err(e)) => refused(&e),
        None => unavailable(),
    }
}

/// The vhost's slot in the directory (`None`: no such vhost, 404).
fn vhost_index(ctx: &Context, vhost: &str) -> Option<usize> {
    ctx.live.borrow().vhost_index(vhost)
}

/// One vhost's view from shard 0's directory.
pub(super) async fn vhost_view(ctx: &Context, vhost: &str) -> Result<VhostView, HttpResponse> {
    let Some(dir) = ctx.directory().await else {
        return Err(unavailable());
    };
    dir.into_iter()
        .find(|v| v.vhost == vhost)
        .ok_or_else(object_not_found)
}

/// A queue declare from a body (`durable`, `auto_delete`, `arguments`; RabbitMQ's
/// defaults: neither durable nor auto-delete), as the management API's requester.
pub(super) fn queue_declare(
    vhost: usize,
    name: &str,
    durable: bool,
    auto_delete: bool,
    arguments: crate::protocol::FieldTable,
) -> Result<ControlRequest, ChannelError> {
    let name = check_name("queue", name).map_err(ChannelError::Internal)?;
    if name.is_empty() {
        return Err(ChannelError::Internal("queue name is empty".into()));
    }
    if name.as_bytes().starts_with(b"amq.") {
        return Err(ChannelError::ReservedPrefix {
            kind: crate::session::error::ObjectKind::Queue,
            name: name.to_string(),
        });
    }
    Ok(ControlRequest::DeclareQueue {
        vhost,
        name,
        durable,
        exclusive_owner: None,
        auto_delete,
        arguments,
        requester: ConnOwner::MANAGEMENT,
    })
}

/// An exchange declare, as the management API's requester; an unknown type is refused
/// as `exchange.declare` refuses it.
pub(super) fn exchange_declare(
    vhost: usize,
    name: &str,
    kind: &str,
    durable: bool,
    auto_delete: bool,
    internal: bool,
    arguments: crate::protocol::FieldTable,
) -> Result<ControlRequest, ChannelError> {
    let name = check_name("exchange", name).map_err(ChannelError::Internal)?;
    let kind = ExchangeKind::parse(kind.as_bytes())
        .ok_or_else(|| ChannelError::UnknownExchangeType(kind.to_owned()))?;
    Ok(ControlRequest::DeclareExchange {
        vhost,
        def: ExchangeDef {
            name,
            kind,
            durable,
            auto_delete,
            internal,
            arguments,
        },
    })
}

/// A refusal made here, before the coordinator: 400 with its text, or as the
/// coordinator's refusals are answered.
fn refused_here(e: &ChannelError) -> HttpResponse {
    match e {
        ChannelError::Internal(reason) => bad_request(reason),
        other => refused(other),
    }
}

/// `PUT /api/queues/{vhost}/{name}`: 201 when created, 204 when an equivalent queue
/// exists, 400 with the inequivalence (RabbitMQ's `inequivalent arg` text) otherwise.
async fn put_queue(ctx: &Context, vhost: &str, name: &str, body: &Bytes) -> HttpResponse {
    let Some(idx) = vhost_index(ctx, vhost) else {
        return vhost_not_found();
    };
    let parsed = body_object(body).and_then(|map| {
        Ok((
            body_flag(&map, "durable", false)?,
            body_flag(&map, "auto_delete", false)?,
            body_arguments(&map)?,
        ))
    });
    let (durable, auto_delete, arguments) = match parsed {
        Ok(p) => p,
        Err(reason) => return bad_request(&reason),
    };
    let req = match queue_declare(idx, name, durable, auto_delete, arguments) {
        Ok(r) => r,
        Err(e) => return refused_here(&e),
    };
    // RabbitMQ decides 201 or 204 by whether the queue existed before the declare.
    let existed = match vhost_view(ctx, vhost).await {
        Ok(v) => v.queues.iter().any(|q| q.name == name),
        Err(r) => return r,
    };
    answered(control(ctx, req).await, existed)
}

/// `DELETE /api/queues/{vhost}/{name}`: 204, 404 for a queue that does not exist, 400
/// when `if-unused` / `if-empty` refuse it.
async fn delete_queue(
    ctx: &Context,
    vhost: &str,
    name: &str,
    if_unused: bool,
    if_empty: bool,
) -> HttpResponse {
    let Some(idx) = vhost_index(ctx, vhost) else {
        return object_not_found();
    };
    match vhost_view(ctx, vhost).await {
        Ok(v) if v.queues.iter().any(|q| q.name == name) => {}
        Ok(_) => return object_not_found(),
        Err(r) => return r,
    }
    let req = ControlRequest::DeleteQueue {
        vhost: idx,
        name: ShortStr::from(name),
        if_unused,
        if_empty,
        requester: Some(ConnOwner::MANAGEMENT),
    };
    match control(ctx, req).await {
        Some(Ok(ControlOk::QueueDeleted { .. })) | Some(Ok(_)) => no_content(),
        Some(Err(e)) => refused(&e),
        None => unavailable(),
    }
}

/// The default exchange as RabbitMQ shows it (it is no object of the directory).
fn default_exchange_json(vhost: &str) -> Value {
    json!({
        "name": "", "vhost": vhost, "type": "direct", "durable": true,
        "auto_delete": false, "internal": false, "arguments": {},
        "user_who_performed_action": "rmq-internal",
    })
}

/// `GET /api/exchanges/{vhost}/{name}`: one exchange (`amq.default` is the default
/// exchange).
async fn get_exchange(ctx: &Context, vhost: &str, name: &str) -> HttpResponse {
    let view = match vhost_view(ctx, vhost).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let name = exchange_name(name);
    let mut found = if name.is_empty() {
        default_exchange_json(vhost)
    } else {
        match view.exchanges.iter().find(|e| e.name == name) {
            Some(e) => json!({
                "name": e.name, "vhost": vhost, "type": e.kind, "durable": e.durable,
                "auto_delete": e.auto_delete, "internal": e.internal,
                "arguments": table_json(&e.arguments),
            }),
            None => return object_not_found(),
        }
    };
    let Some(counters) = super::rates::counters(ctx).await else {
        return unavailable();
    };
    let key = (vhost.to_owned(), name.to_owned());
    let counts = super::rates::exchange_totals(&counters)
        .get(&key)
        .copied()
        .unwrap_or_default();
    // As RabbitMQ's: no `message_stats` until the exchange is published to.
    if counts != [0, 0] {
        let table = ctx.rates.current();
        found["message_stats"] = super::rates::message_stats(
            &super::rates::EXCHANGE_FIELDS,
            &counts,
            table.exchange(vhost, name),
        );
    }
    ok(&found)
}

/// `PUT /api/exchanges/{vhost}/{name}` (`type`, `durable`, `auto_delete`, `internal`,
/// `arguments`): 201 created, 204 when an equivalent one exists, 400 inequivalent, 401
/// `Access refused.` for a new `amq.*` name or the default exchange.
async fn put_exchange(ctx: &Context, vhost: &str, name: &str, body: &Bytes) -> HttpResponse {
    let Some(idx) = vhost_index(ctx, vhost) else {
        return vhost_not_found();
    };
    let name = exchange_name(name);
    let parsed = body_object(body).and_then(|map| {
        let kind = match map.get("type") {
            None | Some(Value::Null) => "direct".to_owned(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => return Err(format!("type must be a string, not {other}")),
        };
        Ok((
            kind,
            body_flag(&map, "durable", false)?,
            body_flag(&map, "auto_delete", false)?,
            body_flag(&map, "internal", false)?,
            body_arguments(&map)?,
        ))
    });
    let (kind, durable, auto_delete, internal, arguments) = match parsed {
        Ok(p) => p,
        Err(reason) => return bad_request(&reason),
    };
    if name.is_empty() {
        return refused(&ChannelError::DefaultExchange);
    }
    let req = match exchange_declare(idx, name, &kind, durable, auto_delete, internal, arguments) {
        Ok(r) => r,
        Err(e) => return refused_here(&e),
    };
    let existed = match vhost_view(ctx, vhost).await {
        Ok(v) => v.exchanges.iter().any(|e| e.name == name),
        Err(r) => return r,
    };
    answered(control(ctx, req).await, existed)
}

/// `DELETE /api/exchanges/{vhost}/{name}`: 204, 404 when it does not exist, 400 when
/// `if-unused` refuses it, 401 `Access refused.` for `amq.*` and the default exchange.
async fn delete_exchange(ctx: &Context, vhost: &str, name: &str, if_unused: bool) -> HttpResponse {
    let Some(idx) = vhost_index(ctx, vhost) else {
        return object_not_found();
    };
    let name = exchange_name(name);
    if name.is_empty() {
        return refused(&ChannelError::DefaultExchange);
    }
    match vhost_view(ctx, vhost).await {
        Ok(v) if v.exchanges.iter().any(|e| e.name == name) => {}
        Ok(_) => return object_not_found(),
        Err(r) => return r,
    }
    let req = ControlRequest::DeleteExchange {
        vhost: idx,
        name: ShortStr::from(name),
        if_unused,
    };
    match control(ctx, req).await {
        Some(Ok(_)) => no_content(),
        Some(Err(e)) => refused(&e),
        None => unavailable(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_flags_are_true_only_when_written_true() {
        assert!(query_flag("if-unused=true&x=1", "if-unused"));
        assert!(!query_flag("if-unused=yes", "if-unused"));
        assert!(!query_flag("if-empty=true", "if-unused"));
        assert!(!query_flag("", "if-unused"));
    }
}

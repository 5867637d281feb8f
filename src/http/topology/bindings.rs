//! Owns: the management API's bindings — `GET /api/bindings`, `/api/bindings/{vhost}`,
//! `GET/POST /api/bindings/{vhost}/e/{source}/q/{queue}` and `.../e/{source}/e/{dest}`,
//! `GET/DELETE` of one binding by RabbitMQ's properties key, the per-queue and
//! per-exchange lists — with the default exchange's implicit binding of every queue
//! listed first, as RabbitMQ lists it.
//!
//! The properties key is RabbitMQ's shape: `~` for an empty routing key without
//! arguments, the routing key (quoted) without arguments, else the quoted routing key,
//! `~`, and a hash of the arguments (`args_hash`: sluice's own hash, 32 bits in
//! base64url, as RabbitMQ's is; clients only ever copy it).
//!
//! Does not: change a binding except through the coordinator (`super::control`).

use base64::Engine;
use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use sha2::Digest;

use crate::model::ids::ConnOwner;
use crate::protocol::FieldTable;
use crate::session::error::ChannelError;
use crate::shard::inbox::observe::VhostView;
use crate::shard::inbox::ControlRequest;

use super::super::api::json::table_json;
use super::super::auth::Viewer;
use super::super::{error, respond, unavailable, Context, HttpResponse};
use super::{
    bad_request, body_arguments, body_object, check_name, control, exchange_name,
    exchange_resource, object_not_found, ok, refused, vhost_view, Need,
};

/// Whether `path` is one of the binding paths.
pub(super) fn owns(path: &[&str]) -> bool {
    matches!(
        path,
        ["bindings"]
            | ["bindings", _]
            | ["bindings", _, "e", _, "q" | "e", _]
            | ["bindings", _, "e", _, "q" | "e", _, _]
    )
}

/// The permissions a change of a binding needs (`rabbit_channel`'s `binding_action`):
/// write on the destination, read on the source; `None` for the paths that change
/// nothing.
pub(super) fn needs<'a>(method: &Method, path: &[&'a str]) -> Option<(&'a str, Vec<Need<'a>>)> {
    match (method, path) {
        (&Method::POST, ["bindings", vhost, "e", source, _, dest])
        | (&Method::DELETE, ["bindings", vhost, "e", source, _, dest, _]) => Some((
            *vhost,
            vec![Need::Write(dest), Need::Read(exchange_resource(source))],
        )),
        _ => None,
    }
}

/// One binding as this module sees it: the directory's, or the default exchange's
/// implicit one.
struct Listed<'a> {
    vhost: &'a str,
    source: &'a str,
    destination: &'a str,
    to_queue: bool,
    routing_key: &'a str,
    arguments: Option<&'a FieldTable>,
}

impl Listed<'_> {
    fn json(&self) -> Value {
        let empty = FieldTable::default();
        let args = self.arguments.unwrap_or(&empty);
        json!({
            "source": self.source,
            "vhost": self.vhost,
            "destination": self.destination,
            "destination_type": if self.to_queue { "queue" } else { "exchange" },
            "routing_key": self.routing_key,
            "arguments": table_json(args),
            "properties_key": properties_key(self.routing_key, args),
        })
    }
}

/// Every binding of a vhost: the default exchange's to each queue, then the directory's.
fn listed(view: &VhostView) -> Vec<Listed<'_>> {
    let implicit = view.queues.iter().map(|q| Listed {
        vhost: &view.vhost,
        source: "",
        destination: &q.name,
        to_queue: true,
        routing_key: &q.name,
        arguments: None,
    });
    let explicit = view.bindings.iter().map(|b| Listed {
        vhost: &view.vhost,
        source: &b.source,
        destination: &b.destination,
        to_queue: b.destination_type == "queue",
        routing_key: &b.routing_key,
        arguments: Some(&b.arguments),
    });
    implicit.chain(explicit).collect()
}

/// A list of bindings, sorted and with the columns asked for as RabbitMQ's (`paging`).
fn listing<'a>(query: &str, items: impl Iterator<Item = &'a Listed<'a>>) -> HttpResponse {
    let all = items.map(Listed::json).collect();
    crate::http::paging::reply(query, all, crate::http::paging::BINDINGS)
}

/// RabbitMQ's `quote_plus` (`rabbit_http_util`): letters, digits and `-_.~` kept,
/// space as `+`, the rest `%XX`.
fn quote_plus(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The inverse of [`quote_plus`] (`None` for bad percent-encoding).
fn unquote_plus(s: &str) -> Option<String> {
    let spaced = s.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .ok()
        .map(|c| c.into_owned())
}

/// A hash of a binding's arguments: 32 bits of SHA-256 over their JSON (keys sorted),
/// in base64url without padding.
fn args_hash(args: &FieldTable) -> String {
    let digest = sha2::Sha256::digest(table_json(args).to_string().as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest[..4])
}

/// RabbitMQ's `quote_binding`: [`quote_plus`] with `~` as `%7E`, so that `~` only ever
/// separates the key from the hash.
fn quote_binding(s: &str) -> String {
    quote_plus(s).replace('~', "%7E")
}

/// RabbitMQ's properties key of a binding (`rabbit_mgmt_format:pack_binding_props`).
pub fn properties_key(routing_key: &str, args: &FieldTable) -> String {
    match (routing_key.is_empty(), args.is_empty()) {
        (true, true) => "~".to_owned(),
        (false, true) => quote_binding(routing_key),
        _ => format!(
            "{}~{}",
            quote_binding(routing_key),
            quote_binding(&args_hash(args))
        ),
    }
}

/// A properties key read back: the routing key, and the arguments' hash if it has one.
fn unpack(props: &str) -> Option<(String, Option<String>)> {
    if props == "~" {
        return Some((String::new(), None));
    }
    match props.split_once('~') {
        None => Some((unquote_plus(props)?, None)),
        Some((_, rest)) if rest.contains('~') => None,
        Some((key, hash)) => Some((unquote_plus(key)?, Some(unquote_plus(hash)?))),
    }
}

/// Routes the `/api/bindings` paths.
pub(super) async fn route(
    ctx: &Context,
    viewer: &Viewer<'_>,
    method: &Method,
    path: &[&str],
    query: &str,
    body: &Bytes,
) -> HttpResponse {
    match (method, path) {
        (&Method::GET, ["bindings"]) => {
            let Some(dir) = ctx.directory().await else {
                return unavailable();
            };
            let seen: Vec<&VhostView> =
                dir.iter().filter(|v| viewer.sees_vhost(&v.vhost)).collect();
            let all: Vec<Listed<'_>> = seen.iter().flat_map(|v| listed(v)).collect();
            listing(query, all.iter())
        }
        (&Method::GET, ["bindings", vhost]) => match vhost_view(ctx, vhost).await {
            Ok(view) => listing(query, listed(&view).iter()),
            Err(r) => r,
        },
        (&Method::GET, ["bindings", vhost, "e", source, kind, dest]) => {
            let view = match vhost_view(ctx, vhost).await {
                Ok(v) => v,
                Err(r) => return r,
            };
            let (source, to_queue) = (exchange_name(source), *kind == "q");
            let all = listed(&view);
            listing(
                query,
                all.iter()
                    .filter(|b| b.source == source && b.destination == *dest)
                    .filter(|b| b.to_queue == to_queue),
            )
        }
        (&Method::POST, ["bindings", vhost, "e", source, kind, dest]) => {
            create(ctx, vhost, source, *kind == "q", dest, body).await
        }
        (&Method::GET | &Method::DELETE, ["bindings", vhost, "e", source, kind, dest, props]) => {
            let view = match vhost_view(ctx, vhost).await {
                Ok(v) => v,
                Err(r) => return r,
            };
            let Some((key, hash)) = unpack(props) else {
                return bad_request(&format!("too_many_tokens: {props}"));
            };
            let (source, to_queue) = (exchange_name(source), *kind == "q");
            let all = listed(&view);
            let found = all.iter().find(|b| {
                b.source == source
                    && b.destination == *dest
                    && b.to_queue == to_queue
                    && b.routing_key == key
                    && match (&hash, b.arguments) {
                        (None, args) => args.is_none_or(FieldTable::is_empty),
                        (Some(h), Some(args)) => !args.is_empty() && args_hash(args) == *h,
                        (Some(_), None) => false,
                    }
            });
            let Some(found) = found else {
                return object_not_found();
            };
            if method == Method::GET {
                return ok(&found.json());
            }
            let arguments = found.arguments.cloned().unwrap_or_default();
            remove(ctx, vhost, source, to_queue, dest, &key, arguments).await
        }
        _ => error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
    }
}

/// The bind (or unbind) request for one binding, as the management API's requester.
pub(crate) fn bind_request(
    vhost: usize,
    source: &str,
    to_queue: bool,
    dest: &str,
    routing_key: &str,
    arguments: FieldTable,
    unbind: bool,
) -> Result<ControlRequest, String> {
    let source = check_name("exchange", source)?;
    let dest = check_name(if to_queue { "queue" } else { "exchange" }, dest)?;
    let routing_key = check_name("routing key", routing_key)?;
    Ok(if to_queue {
        ControlRequest::Bind {
            vhost,
            exchange: source,
            queue: dest,
            routing_key,
            arguments,
            requester: ConnOwner::MANAGEMENT,
            unbind,
        }
    } else {
        ControlRequest::BindExchange {
            vhost,
            source,
            destination: dest,
            routing_key,
            arguments,
            unbind,
        }
    })
}

/// `POST .../e/{source}/q|e/{dest}` (`routing_key`, `arguments`): 201 with the new
/// binding's place in `Location` (relative, `{dest}/{properties key}`, as RabbitMQ
/// gives it), 404 when an end does not exist.
async fn create(
    ctx: &Context,
    vhost: &str,
    source: &str,
    to_queue: bool,
    dest: &str,
    body: &Bytes,
) -> HttpResponse {
    let Some(idx) = ctx.live.borrow().vhost_index(vhost) else {
        return super::vhost_not_found();
    };
    let source = exchange_name(source);
    let parsed = body_object(body).and_then(|map| {
        let key = match map.get("routing_key") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => return Err(format!("routing_key must be a string, not {other}")),
        };
        Ok((key, body_arguments(&map)?))
    });
    let (key, arguments) = match parsed {
        Ok(p) => p,
        Err(reason) => return bad_request(&reason),
    };
    if source.is_empty() {
        return refused(&ChannelError::DefaultExchange);
    }
    let props = properties_key(&key, &arguments);
    let req = match bind_request(idx, source, to_queue, dest, &key, arguments, false) {
        Ok(r) => r,
        Err(reason) => return bad_request(&reason),
    };
    match control(ctx, req).await {
        Some(Ok(_)) => {
            let mut r = respond(StatusCode::CREATED, "application/json", Bytes::new());
            let location = format!("{}/{}", quote_plus(dest), quote_plus(&props));
            if let Ok(v) = hyper::header::HeaderValue::from_str(&location) {
                r.headers_mut().insert(hyper::header::LOCATION, v);
            }
            r
        }
        Some(Err(e)) => refused(&e),
        None => unavailable(),
    }
}

/// Unbinds one binding found by its properties key: 204.
async fn remove(
    ctx: &Context,
    vhost: &str,
    source: &str,
    to_queue: bool,
    dest: &str,
    key: &str,
    arguments: FieldTable,
) -> HttpResponse {
    let Some(idx) = ctx.live.borrow().vhost_index(vhost) else {
        return object_not_found();
    };
    if source.is_empty() {
        return refused(&ChannelError::DefaultExchange);
    }
    let req = match bind_request(idx, source, to_queue, dest, key, arguments, true) {
        Ok(r) => r,
        Err(reason) => return bad_request(&reason),
    };
    match control(ctx, req).await {
        Some(Ok(_)) => respond(StatusCode::NO_CONTENT, "application/json", Bytes::new()),
        Some(Err(e)) => refused(&e),
        None => unavailable(),
    }
}

/// `GET /api/queues/{vhost}/{name}/bindings`: every binding to the queue, the default
/// exchange's first.
pub(super) async fn of_queue(ctx: &Context, vhost: &str, name: &str, query: &str) -> HttpResponse {
    let view = match vhost_view(ctx, vhost).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    if !view.queues.iter().any(|q| q.name == name) {
        return object_not_found();
    }
    let all = listed(&view);
    listing(
        query,
        all.iter().filter(|b| b.to_queue && b.destination == name),
    )
}

/// `GET /api/exchanges/{vhost}/{name}/bindings/source` (`source`) or `/destination`.
pub(super) async fn of_exchange(
    ctx: &Context,
    vhost: &str,
    name: &str,
    source: bool,
    query: &str,
) -> HttpResponse {
    let view = match vhost_view(ctx, vhost).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let name = exchange_name(name);
    if !name.is_empty() && !view.exchanges.iter().any(|e| e.name == name) {
        return object_not_found();
    }
    let all = listed(&view);
    listing(
        query,
        all.iter().filter(|b| {
            if source {
                b.source == name
            } else {
                !b.to_queue && b.destination == name
            }
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{FieldValue, ShortStr};

    #[test]
    fn properties_keys_have_rabbitmqs_shape_and_read_back() {
        let none = FieldTable::default();
        assert_eq!(properties_key("", &none), "~");
        assert_eq!(properties_key("a.b c~d", &none), "a.b+c%7Ed");
        assert_eq!(unpack("a.b+c%7Ed"), Some(("a.b c~d".to_owned(), None)));
        assert_eq!(unpack("~"), Some((String::new(), None)));
        let args: FieldTable = [(ShortStr::from("x-match"), FieldValue::LongStr("all".into()))]
            .into_iter()
            .collect();
        let key = properties_key("k", &args);
        let (rk, hash) = key.split_once('~').expect("a hash");
        assert_eq!(rk, "k");
        assert_eq!(hash.len(), 6, "32 bits in base64url");
        assert_eq!(unpack(&key), Some(("k".to_owned(), Some(args_hash(&args)))));
        assert_eq!(properties_key("", &args), format!("~{}", args_hash(&args)));
        assert_eq!(unpack("a~b~c"), None);
        let other: FieldTable = [(ShortStr::from("x-match"), FieldValue::LongStr("any".into()))]
            .into_iter()
            .collect();
        assert_ne!(args_hash(&args), args_hash(&other));
    }
}

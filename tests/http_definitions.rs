//! Queues, exchanges and bindings declared and deleted over the management API, and
//! definitions exported and imported, as RabbitMQ's management answers them (status
//! codes, `error` / `reason` bodies, field names), against a child broker:
//!
//! - here: `PUT/DELETE /api/queues/{vhost}/{name}` and `/api/exchanges/{vhost}/{name}`
//!   (201, 204, 400 inequivalent, 404), and a change in force on every shard when it is
//!   answered (publishers on both shards routed by a binding made over HTTP at once);
//! - `bindings`: `POST` (201 and its `Location`), the lists, `DELETE` by properties key,
//!   exchange-to-exchange bindings that route;
//! - `durable`: what is declared over HTTP survives a stop and a kill -9;
//! - `export`: `GET /api/definitions` in RabbitMQ's format, `POST` into a fresh broker,
//!   the round trip, malformed imports;
//! - `policies`: `/api/policies`, applied to existing and new queues on every shard at
//!   once, removed, refused with RabbitMQ's reasons, durable, exported and imported;
//! - `authz`: who may change what (RabbitMQ's `is_authorized_vhost`, resource
//!   permissions, and `is_authorized_admin` for definitions).

mod common;

#[path = "http_definitions/authz.rs"]
mod authz;
#[path = "http_definitions/bindings.rs"]
mod bindings;
#[path = "http_definitions/durable.rs"]
mod durable;
#[path = "http_definitions/export.rs"]
mod export;
#[path = "http_definitions/policies.rs"]
mod policies;

use serde_json::{json, Value};

use common::http::{self, Response};
use common::wire::{m, Enc, Props};
use common::{Broker, RawConn};

/// RabbitMQ's body for a path naming no object (cowboy's bare 404 as rendered by
/// `rabbit_cowboy_stream_h`).
pub fn object_not_found() -> Value {
    json!({"error": "Object Not Found", "reason": "Not Found"})
}

/// A request as `guest` (the default user, an administrator).
pub fn admin(port: u16, method: &str, path: &str, body: Option<Value>) -> Response {
    as_user(port, ("guest", "guest"), method, path, body)
}

pub fn as_user(
    port: u16,
    user: (&str, &str),
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Response {
    match body {
        Some(b) => http::request_json(port, method, path, Some(user), &b),
        None => http::request(port, method, path, Some(user)),
    }
}

/// Asserts a change answered `status` with an empty body.
#[track_caller]
pub fn assert_empty(r: &Response, status: u16) {
    assert_eq!(r.status, status, "{}", r.body);
    assert_eq!(r.body, "", "a {status} has no body");
}

/// Asserts an error answer: its status and RabbitMQ's `error` / `reason` body.
#[track_caller]
pub fn assert_error(r: &Response, status: u16, error: &str, reason: &str) {
    assert_eq!(r.status, status, "{}", r.body);
    assert_eq!(r.json(), json!({"error": error, "reason": reason}));
}

/// `queue.declare(passive)` on `channel`: the message count, or the channel close's
/// (code, text) (the channel is then closed).
pub fn passive_count(c: &mut RawConn, channel: u16, queue: &str) -> Result<u32, (u16, String)> {
    let args = Enc::new()
        .short(0)
        .shortstr(queue)
        .bits(&[true, false, false, false, false])
        .table(&vec![])
        .done();
    c.send_method(channel, m::QUEUE_DECLARE, &args)
        .expect("send passive queue.declare");
    let mth = c.read_method().expect("declare-ok or close");
    if mth.id == m::CHANNEL_CLOSE {
        let mut d = mth.dec();
        let refused = (d.short(), d.shortstr());
        c.send_method(channel, m::CHANNEL_CLOSE_OK, &[])
            .expect("close-ok");
        return Err(refused);
    }
    assert_eq!(mth.id, m::QUEUE_DECLARE_OK);
    let mut d = mth.dec();
    assert_eq!(d.shortstr(), queue);
    Ok(d.long())
}

/// A connection to the broker as guest with channel 1 open.
pub fn open(broker: &Broker) -> RawConn {
    let mut c = broker.raw();
    c.channel_open(1);
    c
}

/// Publishes `body` on channel 1 (transient).
pub fn publish(c: &mut RawConn, exchange: &str, key: &str, body: &[u8]) {
    c.publish(1, exchange, key, &Props::default(), body)
        .expect("publish");
}

/// The home shards of the connections the broker lists.
pub fn connection_shards(port: u16) -> Vec<u64> {
    let r = http::get(port, "/api/connections");
    assert_eq!(r.status, 200, "{}", r.body);
    let mut shards: Vec<u64> = r
        .json()
        .as_array()
        .expect("list")
        .iter()
        .map(|c| c["home_shard"].as_u64().expect("home_shard"))
        .collect();
    shards.sort_unstable();
    shards.dedup();
    shards
}

/// Opens connections until both shards of a two-shard broker have one (bounded: 64).
pub fn connections_on_both_shards(broker: &Broker) -> Vec<RawConn> {
    let port = broker.http_port();
    let mut conns = Vec::new();
    for _ in 0..64 {
        conns.push(open(broker));
        if conns.len() >= 4 && connection_shards(port) == [0, 1] {
            return conns;
        }
    }
    panic!("64 connections all landed on one shard");
}

#[test]
fn queues_are_declared_and_deleted_as_rabbitmq_answers() {
    let broker = Broker::start(2);
    let port = broker.http_port();
    let body = json!({"durable": true, "auto_delete": false, "arguments": {"x-max-length": 10}});

    assert_empty(
        &admin(port, "PUT", "/api/queues/%2F/orders", Some(body.clone())),
        201,
    );
    assert_empty(
        &admin(port, "PUT", "/api/queues/%2F/orders", Some(body)),
        204,
    );
    let transient = json!({"durable": false, "arguments": {"x-max-length": 10}});
    assert_error(
        &admin(port, "PUT", "/api/queues/%2F/orders", Some(transient)),
        400,
        "bad_request",
        "inequivalent arg 'durable' for queue 'orders' in vhost '/': received 'false' but current is 'true'",
    );
    let shown = admin(port, "GET", "/api/queues/%2F/orders", None);
    assert_eq!(shown.status, 200, "{}", shown.body);
    let q = shown.json();
    assert_eq!(q["name"], "orders");
    assert_eq!(q["vhost"], "/");
    assert_eq!(q["durable"], true);
    assert_eq!(q["auto_delete"], false);
    assert_eq!(q["exclusive"], false);
    assert_eq!(q["arguments"], json!({"x-max-length": 10}));
    assert_eq!(q["messages"], 0);

    // An empty body is every default (transient, not auto-delete), as RabbitMQ takes it.
    assert_empty(&admin(port, "PUT", "/api/queues/%2F/plain", None), 201);
    let plain = admin(port, "GET", "/api/queues/%2F/plain", None).json();
    assert_eq!(
        (&plain["durable"], &plain["auto_delete"]),
        (&json!(false), &json!(false))
    );

    assert_error(
        &admin(port, "PUT", "/api/queues/nosuch/orders", Some(json!({}))),
        404,
        "not_found",
        "vhost_not_found",
    );
    assert_error(
        &admin(port, "PUT", "/api/queues/%2F/amq.mine", Some(json!({}))),
        401,
        "not_authorised",
        "Access refused.",
    );
    assert_error(
        &admin(
            port,
            "PUT",
            "/api/queues/%2F/bad",
            Some(json!({"durable": "maybe"})),
        ),
        400,
        "bad_request",
        "durable must be true or false, not \"maybe\"",
    );

    // ?if-empty=true refuses a queue holding a message; the queue stays.
    let mut c = open(&broker);
    publish(&mut c, "", "plain", b"m");
    assert_eq!(passive_count(&mut c, 1, "plain"), Ok(1));
    assert_error(
        &admin(port, "DELETE", "/api/queues/%2F/plain?if-empty=true", None),
        400,
        "bad_request",
        "queue 'plain' in vhost '/' not empty",
    );
    assert_eq!(passive_count(&mut c, 1, "plain"), Ok(1));
    assert_empty(&admin(port, "DELETE", "/api/queues/%2F/plain", None), 204);

    assert_empty(&admin(port, "DELETE", "/api/queues/%2F/orders", None), 204);
    let gone = admin(port, "GET", "/api/queues/%2F/orders", None);
    assert_eq!((gone.status, gone.json()), (404, object_not_found()));
    let again = admin(port, "DELETE", "/api/queues/%2F/orders", None);
    assert_eq!((again.status, again.json()), (404, object_not_found()));
    c.channel_open(2);
    assert_eq!(
        passive_count(&mut c, 2, "orders"),
        Err((404, "NOT_FOUND - no queue 'orders' in vhost '/'".to_owned()))
    );
    assert!(
        common::wait_until(common::EVENT_TIMEOUT, || broker.count_logs("QUE-1001") >= 2),
        "declares are logged"
    );
}

#[test]
fn exchanges_are_declared_and_deleted_as_rabbitmq_answers() {
    let broker = Broker::start(2);
    let port = broker.http_port();
    let body = json!({"type": "topic", "durable": true, "arguments": {"alternate-exchange": "ae"}});

    assert_empty(
        &admin(port, "PUT", "/api/exchanges/%2F/prices", Some(body.clone())),
        201,
    );
    assert_empty(
        &admin(port, "PUT", "/api/exchanges/%2F/prices", Some(body)),
        204,
    );
    assert_error(
        &admin(
            port,
            "PUT",
            "/api/exchanges/%2F/prices",
            Some(json!({"type": "topic", "durable": false})),
        ),
        400,
        "bad_request",
        "inequivalent arg 'durable' for exchange 'prices' in vhost '/': received 'false' but current is 'true'",
    );
    assert_error(
        &admin(
            port,
            "PUT",
            "/api/exchanges/%2F/prices",
            Some(json!({"type": "fanout", "durable": true})),
        ),
        400,
        "bad_request",
        "inequivalent arg 'type' for exchange 'prices' in vhost '/': received 'fanout' but current is 'topic'",
    );
    assert_error(
        &admin(
            port,
            "PUT",
            "/api/exchanges/%2F/odd",
            Some(json!({"type": "no-such-type"})),
        ),
        400,
        "bad_request",
        "unknown exchange type 'no-such-type'",
    );
    let shown = admin(port, "GET", "/api/exchanges/%2F/prices", None);
    assert_eq!(shown.status, 200, "{}", shown.body);
    assert_eq!(
        shown.json(),
        json!({
            "name": "prices", "vhost": "/", "type": "topic", "durable": true,
            "auto_delete": false, "internal": false,
            "arguments": {"alternate-exchange": "ae"},
        })
    );
    let listed = admin(port, "GET", "/api/exchanges/%2F", None).json();
    assert!(
        listed
            .as_array()
            .expect("list")
            .iter()
            .any(|x| x["name"] == "prices" && x["type"] == "topic"),
        "{listed}"
    );
    // Without a type the exchange is direct (the method record's default).
    assert_empty(&admin(port, "PUT", "/api/exchanges/%2F/plain", None), 201);
    let plain = admin(port, "GET", "/api/exchanges/%2F/plain", None).json();
    assert_eq!(
        (&plain["type"], &plain["durable"]),
        (&json!("direct"), &json!(false))
    );

    // The broker's own: redeclared equivalently is 204, a new amq. name or a delete is
    // refused, and the default exchange is not the client's to change.
    assert_empty(
        &admin(
            port,
            "PUT",
            "/api/exchanges/%2F/amq.direct",
            Some(json!({"type": "direct", "durable": true})),
        ),
        204,
    );
    for (method, path) in [
        ("PUT", "/api/exchanges/%2F/amq.mine"),
        ("DELETE", "/api/exchanges/%2F/amq.direct"),
        ("PUT", "/api/exchanges/%2F/amq.default"),
    ] {
        assert_error(
            &admin(port, method, path, Some(json!({"type": "direct"}))),
            401,
            "not_authorised",
            "Access refused.",
        );
    }
    let default = admin(port, "GET", "/api/exchanges/%2F/amq.default", None).json();
    assert_eq!(
        (&default["name"], &default["type"]),
        (&json!(""), &json!("direct"))
    );

    assert_error(
        &admin(port, "PUT", "/api/exchanges/nosuch/x", Some(json!({}))),
        404,
        "not_found",
        "vhost_not_found",
    );
    assert_empty(
        &admin(port, "DELETE", "/api/exchanges/%2F/prices", None),
        204,
    );
    let gone = admin(port, "GET", "/api/exchanges/%2F/prices", None);
    assert_eq!((gone.status, gone.json()), (404, object_not_found()));
    let again = admin(port, "DELETE", "/api/exchanges/%2F/prices", None);
    assert_eq!((again.status, again.json()), (404, object_not_found()));
    assert!(
        common::wait_until(common::EVENT_TIMEOUT, || broker.count_logs("EXH-1002") >= 1),
        "the deletion is logged"
    );
}

/// A declare, a bind and a delete answered over HTTP are in force on every shard: right
/// after the answer, with no wait, publishers on both shards are routed by the binding,
/// see the queue (passive declare) and its exact count, and after the deletion do not.
#[test]
fn a_change_is_in_force_on_every_shard_when_it_is_answered() {
    let broker = Broker::start(2);
    let port = broker.http_port();
    let mut conns = connections_on_both_shards(&broker);

    assert_empty(
        &admin(
            port,
            "PUT",
            "/api/queues/%2F/everywhere",
            Some(json!({"durable": false})),
        ),
        201,
    );
    assert_empty(
        &admin(
            port,
            "PUT",
            "/api/exchanges/%2F/fan",
            Some(json!({"type": "direct"})),
        ),
        201,
    );
    let bound = admin(
        port,
        "POST",
        "/api/bindings/%2F/e/fan/q/everywhere",
        Some(json!({"routing_key": "k"})),
    );
    assert_empty(&bound, 201);
    // At once: every connection, on either shard, sees the queue and is routed.
    for (i, c) in conns.iter_mut().enumerate() {
        publish(c, "fan", "k", format!("from {i}").as_bytes());
        let expected = u32::try_from(i + 1).expect("count");
        assert_eq!(
            passive_count(c, 1, "everywhere"),
            Ok(expected),
            "connection {i}"
        );
    }
    // A key the binding does not name is routed nowhere.
    publish(&mut conns[0], "fan", "other", b"dropped");
    let total = u32::try_from(conns.len()).expect("count");
    assert_eq!(passive_count(&mut conns[0], 1, "everywhere"), Ok(total));

    // Unbound over HTTP: no publisher is routed any more, at once.
    let props = bound.headers.get("location").expect("Location").clone();
    assert_eq!(props, "everywhere/k");
    assert_empty(
        &admin(
            port,
            "DELETE",
            "/api/bindings/%2F/e/fan/q/everywhere/k",
            None,
        ),
        204,
    );
    for c in conns.iter_mut() {
        publish(c, "fan", "k", b"unrouted");
        assert_eq!(passive_count(c, 1, "everywhere"), Ok(total));
    }
    // Deleted over HTTP: gone for every connection at once.
    assert_empty(
        &admin(port, "DELETE", "/api/queues/%2F/everywhere", None),
        204,
    );
    for (i, c) in conns.iter_mut().enumerate() {
        assert_eq!(
            passive_count(c, 1, "everywhere"),
            Err((
                404,
                "NOT_FOUND - no queue 'everywhere' in vhost '/'".to_owned()
            )),
            "connection {i}"
        );
    }
}

//! The management API's debugging messages and the aliveness test against a child
//! broker, as RabbitMQ's answer them: `POST /api/exchanges/{vhost}/{name}/publish`
//! (`{"routed": …}`, properties and encodings, the default exchange as `amq.default`,
//! RabbitMQ's 400 and 404 reasons, permissions), `POST /api/queues/{vhost}/{name}/get`
//! (the four ack modes, count, truncate, base64, `message_count`, redelivered), and
//! `GET /api/aliveness-test/{vhost}`; with one and two shards, and what an AMQP consumer
//! on another connection receives of an HTTP publish.

#[macro_use]
mod common;

use serde_json::{json, Value};

use common::http::{self, Response};
use common::{Broker, RawConn};

const FILE: &str = r#"
[auth]
users = [
  { name = "guest", password = "guest", tags = ["administrator"] },
  { name = "reader", password = "r", tags = ["management"] },
]
permissions = [
  { user = "guest", vhost = "/", configure = ".*", write = ".*", read = ".*" },
  { user = "reader", vhost = "/", configure = "", write = "", read = "^open\\." },
]
"#;

fn post(port: u16, user: (&str, &str), path: &str, body: Value) -> Response {
    http::request_json(port, "POST", path, Some(user), &body)
}

fn guest_post(port: u16, path: &str, body: Value) -> Response {
    post(port, ("guest", "guest"), path, body)
}

fn publish_body(key: &str, payload: &str) -> Value {
    json!({"properties": {}, "routing_key": key, "payload": payload,
           "payload_encoding": "string"})
}

fn get_body(count: u32, ackmode: &str) -> Value {
    json!({"count": count, "ackmode": ackmode, "encoding": "auto"})
}

/// A raw connection with queue `name` declared (durable false, auto-delete false).
fn with_queue(broker: &Broker, name: &str) -> RawConn {
    let mut c = RawConn::connect(&broker.addr());
    c.handshake();
    c.channel_open(1);
    c.queue_declare(1, name, false, false, false);
    c
}

fn payloads(got: &Value) -> Vec<String> {
    got.as_array()
        .expect("a list of messages")
        .iter()
        .map(|m| m["payload"].as_str().unwrap_or("?").to_owned())
        .collect()
}

shard_tests!(publish_and_get_as_rabbitmq_answers_them);

async fn publish_and_get_as_rabbitmq_answers_them(shards: usize) {
    tokio::task::spawn_blocking(move || publish_and_get(shards))
        .await
        .expect("test thread");
}

fn publish_and_get(shards: usize) {
    let broker = Broker::start_with_config(shards, FILE);
    let port = broker.http_port();
    let _c = with_queue(&broker, "open.q");
    let path = "/api/exchanges/%2F/amq.default/publish";
    for i in 0..5 {
        let r = guest_post(port, path, publish_body("open.q", &format!("m{i}")));
        assert_eq!((r.status, r.json()), (200, json!({"routed": true})), "{i}");
    }
    let r = guest_post(port, path, publish_body("no.such.queue", "lost"));
    assert_eq!((r.status, r.json()), (200, json!({"routed": false})));

    // ack_requeue_true looks without taking: the same three again, now redelivered.
    let get = "/api/queues/%2F/open.q/get";
    let first = guest_post(port, get, get_body(3, "ack_requeue_true"));
    assert_eq!(first.status, 200, "{}", first.body);
    let got = first.json();
    assert_eq!(payloads(&got), ["m0", "m1", "m2"]);
    let m0 = &got[0];
    assert_eq!(m0["payload_bytes"], 2);
    assert_eq!(m0["redelivered"], false);
    assert_eq!(m0["exchange"], "");
    assert_eq!(m0["routing_key"], "open.q");
    assert_eq!(m0["message_count"], 4, "messages left behind the first");
    assert_eq!(m0["payload_encoding"], "string");
    assert_eq!(got[2]["message_count"], 2);
    let again = guest_post(port, get, get_body(3, "ack_requeue_true")).json();
    assert_eq!(payloads(&again), ["m0", "m1", "m2"]);
    assert_eq!(again[0]["redelivered"], true);

    // ack_requeue_false takes them; reject_requeue_false drops them; count beyond the
    // queue gives what there is.
    let taken = guest_post(port, get, get_body(2, "ack_requeue_false")).json();
    assert_eq!(payloads(&taken), ["m0", "m1"]);
    let dropped = guest_post(port, get, get_body(1, "reject_requeue_false")).json();
    assert_eq!(payloads(&dropped), ["m2"]);
    let rest = guest_post(port, get, get_body(10, "reject_requeue_true")).json();
    assert_eq!(payloads(&rest), ["m3", "m4"]);
    let rest = guest_post(port, get, get_body(10, "ack_requeue_false")).json();
    assert_eq!(payloads(&rest), ["m3", "m4"]);
    let empty = guest_post(port, get, get_body(10, "ack_requeue_false"));
    assert_eq!((empty.status, empty.json()), (200, json!([])));

    // Properties, base64 both ways, truncate.
    let body = json!({
        "properties": {"content_type": "text/plain", "delivery_mode": 2, "priority": 3,
                        "headers": {"x-trace": "abc", "n": 7}, "message_id": "id-1"},
        "routing_key": "open.q", "payload": "AAEC/w==", "payload_encoding": "base64"});
    assert_eq!(guest_post(port, path, body).json(), json!({"routed": true}));
    let r = guest_post(port, path, publish_body("open.q", "a long text body"));
    assert_eq!(r.json(), json!({"routed": true}));
    let got = guest_post(
        port,
        get,
        json!({"count": 2, "ackmode": "ack_requeue_false", "encoding": "auto",
               "truncate": 6}),
    )
    .json();
    let binary = &got[0];
    assert_eq!(binary["payload_encoding"], "base64", "not UTF-8: base64");
    assert_eq!(binary["payload"], "AAEC/w==");
    assert_eq!(binary["payload_bytes"], 4);
    let props = &binary["properties"];
    assert_eq!(props["content_type"], "text/plain");
    assert_eq!(props["delivery_mode"], 2);
    assert_eq!(props["priority"], 3);
    assert_eq!(props["message_id"], "id-1");
    assert_eq!(props["headers"], json!({"x-trace": "abc", "n": 7}));
    assert_eq!(got[1]["payload"], "a long", "truncated to 6 bytes");
    assert_eq!(got[1]["payload_bytes"], 16, "the size before truncation");

    // RabbitMQ's refusals.
    let r = guest_post(port, path, json!({"routing_key": "open.q", "payload": "x"}));
    assert_eq!(r.status, 400, "{}", r.body);
    let reason = r.json()["reason"].as_str().unwrap_or_default().to_owned();
    // RabbitMQ's reason is its decoder's term, every missing key in the order asked.
    assert_eq!(
        reason,
        "[{key_missing,properties},{key_missing,payload_encoding}]"
    );
    let r = guest_post(
        port,
        path,
        json!({"properties": {}, "routing_key": "open.q", "payload": "x",
               "payload_encoding": "rot13"}),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    let r = guest_post(
        port,
        "/api/exchanges/%2F/no-such-exchange/publish",
        publish_body("k", "x"),
    );
    assert_eq!(r.status, 404, "{}", r.body);
    let r = guest_post(
        port,
        "/api/exchanges/nowhere/amq.default/publish",
        publish_body("k", "x"),
    );
    assert_eq!(r.status, 404, "{}", r.body);
    let r = guest_post(port, get, get_body(1, "maybe"));
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.json()["reason"]
        .as_str()
        .is_some_and(|s| s.starts_with("Invalid ackmode value: maybe")));
    let r = guest_post(
        port,
        "/api/queues/%2F/missing/get",
        get_body(1, "ack_requeue_true"),
    );
    assert_eq!(r.status, 404, "{}", r.body);

    // Permissions: reader may read open.* queues but write nowhere.
    let r = post(port, ("reader", "r"), path, publish_body("open.q", "x"));
    assert_eq!(r.status, 401, "{}", r.body);
    let r = post(port, ("reader", "r"), get, get_body(1, "ack_requeue_true"));
    assert_eq!((r.status, r.json()), (200, json!([])));
    let _other = with_queue(&broker, "closed.q");
    let r = post(
        port,
        ("reader", "r"),
        "/api/queues/%2F/closed.q/get",
        get_body(1, "ack_requeue_true"),
    );
    assert_eq!(r.status, 401, "{}", r.body);
    let r = http::request(
        port,
        "GET",
        "/api/aliveness-test/%2F",
        Some(("guest", "guest")),
    );
    assert_eq!((r.status, r.json()), (200, json!({"status": "ok"})));
    let r = http::request(
        port,
        "GET",
        "/api/aliveness-test/nowhere",
        Some(("guest", "guest")),
    );
    assert_eq!(r.status, 404, "{}", r.body);
    let r = http::request(
        port,
        "GET",
        "/api/aliveness-test/%2F",
        Some(("reader", "r")),
    );
    assert_eq!(
        r.status, 401,
        "reader may not configure aliveness-test: {}",
        r.body
    );
}

/// A message published over HTTP to a topic exchange reaches AMQP consumers of every
/// bound queue (on every shard), with its properties, and the publish is answered only
/// once every queue holds it.
#[test]
fn an_http_publish_reaches_amqp_consumers_on_every_shard() {
    let broker = Broker::start_with_config(2, FILE);
    let port = broker.http_port();
    let mut consumers = Vec::new();
    for i in 0..6 {
        let name = format!("open.fan{i}");
        let mut c = with_queue(&broker, &name);
        c.queue_bind(1, &name, "amq.topic", "news.#");
        c.basic_consume(1, &name, true);
        consumers.push(c);
    }
    let body = json!({"properties": {"content_type": "application/json",
                                      "headers": {"origin": "http"}},
                      "routing_key": "news.eu", "payload": "{\"a\":1}",
                      "payload_encoding": "string"});
    let r = guest_post(port, "/api/exchanges/%2F/amq.topic/publish", body);
    assert_eq!((r.status, r.json()), (200, json!({"routed": true})));
    for c in consumers.iter_mut() {
        let d = c.read_delivery(1);
        assert_eq!(d.body, b"{\"a\":1}");
        let mut args = d.method.dec();
        let (_tag, _delivery, _redelivered) = (args.shortstr(), args.longlong(), args.octet());
        assert_eq!(
            (args.shortstr(), args.shortstr()),
            ("amq.topic".to_owned(), "news.eu".to_owned())
        );
        assert_eq!(d.props.content_type.as_deref(), Some("application/json"));
        assert!(d.props.headers.is_some(), "the headers came through");
    }
}

/// A persistent message the API said was routed into a durable queue is on disk when
/// the answer comes (as a publisher confirm would say): a kill -9 right after each
/// answer loses none of them, on either shard. Before, the answer came in the turn the
/// message was staged, ahead of the group commit.
#[test]
fn a_persistent_http_publish_is_on_disk_when_answered() {
    let dir = common::TestDir::new("sluice-http-publish-durable");
    let data = dir.path().join("data");
    let mut broker = Broker::start_in(&data, 2, None);
    let port = broker.http_port();
    let names = ["keep.a", "keep.b", "keep.c", "keep.d"];
    for name in names {
        let r = http::request_json(
            port,
            "PUT",
            &format!("/api/queues/%2F/{name}"),
            Some(("guest", "guest")),
            &json!({"durable": true}),
        );
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let mut sent = 0;
    for round in 0..8 {
        for name in names {
            let body = json!({"properties": {"delivery_mode": 2}, "routing_key": name,
                              "payload": format!("{name} {round}"), "payload_encoding": "string"});
            let r = guest_post(
                broker.http_port(),
                "/api/exchanges/%2F/amq.default/publish",
                body,
            );
            assert_eq!((r.status, r.json()), (200, json!({"routed": true})));
            sent += 1;
        }
        broker.kill9();
        broker = Broker::start_in(&data, 2, None);
    }
    let port = broker.http_port();
    let mut kept = 0;
    for name in names {
        let got = guest_post(
            port,
            &format!("/api/queues/%2F/{name}/get"),
            get_body(100, "ack_requeue_false"),
        );
        assert_eq!(got.status, 200, "{}", got.body);
        let want: Vec<String> = (0..8).map(|round| format!("{name} {round}")).collect();
        assert_eq!(payloads(&got.json()), want, "{name} kept every round");
        kept += want.len();
    }
    assert_eq!(kept, sent);
}

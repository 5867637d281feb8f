//! `GET /api/definitions` in RabbitMQ 3.10's format and field names, `POST` of it into a
//! fresh broker (users with their passwords, vhosts, permissions, queues, exchanges,
//! bindings), the round trip export → import → export, a vhost's own definitions, and
//! imports refused with RabbitMQ's reasons (BRK-1021 / BRK-1022).

use serde_json::{json, Value};

use crate::common::http;
use crate::common::{Broker, EVENT_TIMEOUT};
use crate::{admin, as_user, assert_empty, assert_error};

const FILE: &str = r#"
[vhosts]
names = ["/", "orders"]

[auth]
users = [
  { name = "guest", password = "guest", tags = ["administrator"] },
  { name = "app", password = "p", tags = ["management"] },
]
permissions = [
  { user = "guest", vhost = "/", configure = ".*", write = ".*", read = ".*" },
  { user = "guest", vhost = "orders", configure = ".*", write = ".*", read = ".*" },
  { user = "app", vhost = "/", configure = "^app", write = ".*", read = ".*" },
]
"#;

/// The broker imported into: guest alone, with permissions (so that the permissions
/// imported are the only others).
const TARGET: &str = r#"
[auth]
users = [{ name = "guest", password = "guest", tags = ["administrator"] }]
permissions = [
  { user = "guest", vhost = "/", configure = ".*", write = ".*", read = ".*" },
]
"#;

/// A section's items as sorted JSON texts (the order of a section is not specified).
fn sorted(defs: &Value, section: &str) -> Vec<String> {
    let mut items: Vec<String> = defs[section]
        .as_array()
        .unwrap_or_else(|| panic!("{section} is a list: {defs}"))
        .iter()
        .map(Value::to_string)
        .collect();
    items.sort();
    items
}

fn texts(items: &[Value]) -> Vec<String> {
    let mut t: Vec<String> = items.iter().map(Value::to_string).collect();
    t.sort();
    t
}

fn export(port: u16) -> Value {
    let r = admin(port, "GET", "/api/definitions", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    r.json()
}

/// The objects of the test, declared over HTTP (and one exclusive queue over AMQP,
/// which no export carries).
fn declare_objects(port: u16) {
    for (path, body) in [
        (
            "/api/queues/%2F/dq",
            json!({"durable": true, "arguments": {"x-max-length": 7}}),
        ),
        ("/api/queues/%2F/tq", json!({"durable": false})),
        ("/api/queues/orders/oq", json!({"durable": true})),
        (
            "/api/exchanges/%2F/dx",
            json!({"type": "topic", "durable": true}),
        ),
        ("/api/exchanges/%2F/dx2", json!({"type": "fanout"})),
    ] {
        assert_empty(&admin(port, "PUT", path, Some(body)), 201);
    }
    for (path, key) in [
        ("/api/bindings/%2F/e/dx/q/dq", "k.#"),
        ("/api/bindings/%2F/e/dx/e/dx2", ""),
        ("/api/bindings/%2F/e/amq.topic/q/dq", "t"),
    ] {
        let r = admin(port, "POST", path, Some(json!({"routing_key": key})));
        assert_empty(&r, 201);
    }
}

fn expected_queues() -> Vec<Value> {
    vec![
        json!({"name": "dq", "vhost": "/", "type": "classic", "durable": true,
               "auto_delete": false, "arguments": {"x-max-length": 7}}),
        json!({"name": "tq", "vhost": "/", "type": "classic", "durable": false,
               "auto_delete": false, "arguments": {}}),
        json!({"name": "oq", "vhost": "orders", "type": "classic", "durable": true,
               "auto_delete": false, "arguments": {}}),
    ]
}

fn expected_exchanges() -> Vec<Value> {
    vec![
        json!({"name": "dx", "vhost": "/", "type": "topic", "durable": true,
               "auto_delete": false, "internal": false, "arguments": {}}),
        json!({"name": "dx2", "vhost": "/", "type": "fanout", "durable": false,
               "auto_delete": false, "internal": false, "arguments": {}}),
    ]
}

fn expected_bindings() -> Vec<Value> {
    let b = |source: &str, dest: &str, kind: &str, key: &str| {
        json!({"source": source, "vhost": "/", "destination": dest,
               "destination_type": kind, "routing_key": key, "arguments": {}})
    };
    vec![
        b("dx", "dq", "queue", "k.#"),
        b("dx", "dx2", "exchange", ""),
        b("amq.topic", "dq", "queue", "t"),
    ]
}

#[test]
fn definitions_export_in_rabbitmqs_format_and_import_into_a_fresh_broker() {
    let source = Broker::start_with_config(2, FILE);
    let port = source.http_port();
    declare_objects(port);
    let mut holder = source.raw();
    holder.channel_open(1);
    holder.queue_declare(1, "excl", false, true, false);

    let defs = export(port);
    assert_eq!(defs["rabbit_version"], "3.10.0");
    assert_eq!(defs["rabbitmq_version"], "3.10.0");
    assert_eq!(defs["product_name"], "sluice");
    for empty in [
        "topic_permissions",
        "parameters",
        "global_parameters",
        "policies",
    ] {
        assert_eq!(defs[empty], json!([]), "{empty}");
    }
    let users = defs["users"].as_array().expect("users");
    let names: Vec<&str> = users.iter().filter_map(|u| u["name"].as_str()).collect();
    assert_eq!(names, ["guest", "app"]);
    for u in users {
        // A password from the file in plain text is exported as a hash of it.
        let hash = u["password_hash"].as_str().expect("password_hash");
        assert_eq!(hash.len(), 48, "salt and SHA-256 in base64: {u}");
        assert_eq!(u["hashing_algorithm"], "rabbit_password_hashing_sha256");
        assert_eq!(u["limits"], json!({}));
    }
    assert_eq!(users[0]["tags"], json!(["administrator"]));
    assert_eq!(users[1]["tags"], json!(["management"]));
    let vhosts: Vec<&str> = defs["vhosts"]
        .as_array()
        .expect("vhosts")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(vhosts, ["/", "orders"]);
    let perm = |user: &str, vhost: &str, configure: &str| {
        json!({"user": user, "vhost": vhost, "configure": configure,
               "write": ".*", "read": ".*"})
    };
    assert_eq!(
        sorted(&defs, "permissions"),
        texts(&[
            perm("guest", "/", ".*"),
            perm("guest", "orders", ".*"),
            perm("app", "/", "^app"),
        ])
    );
    assert_eq!(sorted(&defs, "queues"), texts(&expected_queues()));
    assert_eq!(sorted(&defs, "exchanges"), texts(&expected_exchanges()));
    assert_eq!(sorted(&defs, "bindings"), texts(&expected_bindings()));

    // Into a fresh broker that has only guest, on "/": every object is there after it.
    let target = Broker::start_with_config(1, TARGET);
    let tport = target.http_port();
    let r = http::request_json(
        tport,
        "POST",
        "/api/definitions",
        Some(("guest", "guest")),
        &defs,
    );
    assert_empty(&r, 204);
    let line = target
        .wait_for_log("BRK-1021", EVENT_TIMEOUT)
        .expect("BRK-1021");
    assert!(
        line.ends_with(
            "BRK-1021 : Definitions imported : 2 users, 2 vhosts, 3 permissions, 0 policies, 3 queues, 2 exchanges, 3 bindings by 'guest'"
        ),
        "{line}"
    );
    // guest's password came as a hash of it, app's as its hash: both still log in.
    let app = as_user(tport, ("app", "p"), "GET", "/api/overview", None);
    assert_eq!(app.status, 200, "{}", app.body);
    let oq = admin(tport, "GET", "/api/queues/orders/oq", None);
    assert_eq!(oq.status, 200, "{}", oq.body);
    assert_eq!(oq.json()["durable"], true);
    let perms = admin(tport, "GET", "/api/permissions/%2F/app", None);
    assert_eq!(perms.status, 200, "{}", perms.body);
    assert_eq!(perms.json(), perm("app", "/", "^app"));

    // The round trip: the target exports what the source did.
    let again = export(tport);
    for section in ["queues", "exchanges", "bindings", "permissions"] {
        assert_eq!(sorted(&again, section), sorted(&defs, section), "{section}");
    }
    let vhosts: Vec<&str> = again["vhosts"]
        .as_array()
        .expect("vhosts")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(vhosts, ["/", "orders"]);

    // Imported once more: what exists is passed over, as RabbitMQ does, not refused.
    let r = http::request_json(
        tport,
        "POST",
        "/api/definitions",
        Some(("guest", "guest")),
        &defs,
    );
    assert_empty(&r, 204);
    assert!(
        crate::common::wait_until(EVENT_TIMEOUT, || target.count_logs("BRK-1021") == 2),
        "BRK-1021 lines: {}",
        target.count_logs("BRK-1021")
    );
    assert_eq!(target.count_logs("BRK-1022"), 0);
    drop(holder);
}

#[test]
fn a_vhosts_definitions_name_no_vhost_and_import_into_the_vhost_named() {
    let broker = Broker::start_with_config(1, FILE);
    let port = broker.http_port();
    declare_objects(port);
    let r = admin(port, "GET", "/api/definitions/orders", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let defs = r.json();
    assert!(
        defs.get("users").is_none() && defs.get("vhosts").is_none(),
        "{defs}"
    );
    assert_eq!(
        defs["queues"],
        json!([{"name": "oq", "type": "classic", "durable": true, "auto_delete": false,
                "arguments": {}}])
    );
    assert_eq!(defs["exchanges"], json!([]));

    // Into "/": the queue lands there; without `durable` it is durable, as RabbitMQ
    // imports it.
    let body = json!({"queues": [{"name": "vq", "arguments": {}}]});
    let r = admin(port, "POST", "/api/definitions/%2F", Some(body));
    assert_empty(&r, 204);
    let vq = admin(port, "GET", "/api/queues/%2F/vq", None);
    assert_eq!(vq.status, 200, "{}", vq.body);
    assert_eq!(vq.json()["durable"], true);

    assert_error(
        &admin(port, "GET", "/api/definitions/nosuch", None),
        400,
        "bad_request",
        "vhost_not_found",
    );
    assert_error(
        &admin(port, "POST", "/api/definitions/nosuch", Some(json!({}))),
        404,
        "not_found",
        "vhost_not_found",
    );
}

#[test]
fn malformed_imports_are_refused_with_rabbitmqs_reasons() {
    let broker = Broker::start(1);
    let port = broker.http_port();
    let guest = Some(("guest", "guest"));
    let r = http::request_raw(port, "POST", "/api/definitions", guest, "{\"queues\": [");
    assert_error(&r, 400, "bad_request", "failed_to_parse_json");
    let line = broker
        .wait_for_log("BRK-1022", EVENT_TIMEOUT)
        .expect("BRK-1022");
    assert!(
        line.ends_with(
            "BRK-1022 : Definitions import refused : failed_to_parse_json : applied before it 0 users, 0 vhosts, 0 permissions, 0 policies, 0 queues, 0 exchanges, 0 bindings by 'guest'"
        ),
        "{line}"
    );
    for (body, reason) in [
        (
            json!({"queues": {}}),
            "queues[0] (the section): queues must be a list",
        ),
        (
            json!({"queues": [{"name": "q", "vhost": "/", "durable": "yes"}]}),
            "queues[0] 'q' in vhost '/': durable must be true or false, not \"yes\"",
        ),
        (
            json!({"queues": [{"name": "q", "vhost": "nosuch"}]}),
            "queues[0] 'q' in vhost 'nosuch': vhost 'nosuch' does not exist",
        ),
        (
            json!({"policies": [{"name": "p", "vhost": "/", "pattern": ".*"}]}),
            "policies[0] 'p' in vhost '/': [{key_missing,definition}]",
        ),
        (
            json!({"policies": [{"name": "p", "vhost": "/", "pattern": ".*",
                                 "definition": {"ha-mode": "all"}}]}),
            "policies[0] 'p' in vhost '/': Validation failed\n\n[{<<\"ha-mode\">>,<<\"all\">>}] \
             are not recognised policy settings\n",
        ),
    ] {
        let r = admin(port, "POST", "/api/definitions", Some(body));
        assert_error(&r, 400, "bad_request", reason);
    }
    // Refused at an item: the items before it stay applied (RabbitMQ's behaviour).
    let body = json!({
        "queues": [{"name": "first", "vhost": "/"}],
        "exchanges": [{"name": "x", "vhost": "/", "type": "nope"}],
    });
    let r = admin(port, "POST", "/api/definitions", Some(body));
    assert_error(
        &r,
        400,
        "bad_request",
        "exchanges[0] 'x' in vhost '/': unknown exchange type 'nope'",
    );
    assert_eq!(
        admin(port, "GET", "/api/queues/%2F/first", None).status,
        200
    );
    assert_eq!(broker.count_logs("BRK-1021"), 0);
    assert!(
        crate::common::wait_until(EVENT_TIMEOUT, || broker.count_logs("BRK-1022") == 7),
        "BRK-1022 lines: {}",
        broker.count_logs("BRK-1022")
    );
    // An empty body imports nothing.
    let r = http::request_raw(port, "POST", "/api/definitions", guest, "");
    assert_empty(&r, 204);
}

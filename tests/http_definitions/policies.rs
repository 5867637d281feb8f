//! Policies set over the management API while the broker runs, as RabbitMQ's
//! `/api/policies` does it: a policy is in force on the queues it matches on every
//! shard when the PUT is answered — existing queues over a new `max-length` drop from
//! the head at once, new queues get it when declared — the highest priority wins, a
//! declared `x-max-length` smaller than the policy's stays, a deleted policy stops
//! applying, and a policy survives a kill -9. Refusals carry RabbitMQ's reasons;
//! only administrators and policymakers with access to the vhost may change one.

use serde_json::{json, Value};

use crate::common::http;
use crate::common::wire::{m, Props};
use crate::common::{Broker, RawConn, TestDir};
use crate::{admin, as_user, assert_empty, assert_error, open};

fn put_policy(port: u16, name: &str, body: Value) -> u16 {
    let r = admin(
        port,
        "PUT",
        &format!("/api/policies/%2F/{name}"),
        Some(body),
    );
    assert!(r.body.is_empty() || r.status >= 400, "{}", r.body);
    r.status
}

fn queue(port: u16, name: &str) -> Value {
    let r = admin(port, "GET", &format!("/api/queues/%2F/{name}"), None);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

fn depth(port: u16, name: &str) -> u64 {
    queue(port, name)["messages"].as_u64().expect("messages")
}

fn declare(port: u16, name: &str, arguments: Value) {
    let body = json!({"durable": true, "arguments": arguments});
    let r = admin(port, "PUT", &format!("/api/queues/%2F/{name}"), Some(body));
    assert_eq!(r.status, 201, "declare {name}: {}", r.body);
}

/// The payloads left in `name`, taken from it (oldest first).
fn drain(port: u16, name: &str) -> Vec<String> {
    let body = json!({"count": 1000, "ackmode": "ack_requeue_false", "encoding": "auto"});
    let r = admin(
        port,
        "POST",
        &format!("/api/queues/%2F/{name}/get"),
        Some(body),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["payload"].as_str().expect("payload").to_owned())
        .collect()
}

/// A connection publishing with confirms on channel 1: each `fill` returns once every
/// message is confirmed, so it is in its queue, on whatever shard.
struct Publisher {
    c: RawConn,
    tag: u64,
}

impl Publisher {
    fn new(broker: &Broker) -> Publisher {
        let mut c = open(broker);
        c.confirm_select(1);
        Publisher { c, tag: 0 }
    }

    fn send(&mut self, queue: &str, from: usize, to: usize, props: &Props) {
        self.send_via("", queue, from, to, props);
    }

    fn send_via(&mut self, exchange: &str, key: &str, from: usize, to: usize, props: &Props) {
        for i in from..to {
            self.c
                .publish(1, exchange, key, props, format!("m{i}").as_bytes())
                .expect("publish");
            self.tag += 1;
        }
        let mut acked = 0;
        while acked < self.tag {
            let mth = self.c.read_method().expect("basic.ack");
            assert_eq!(mth.id, m::BASIC_ACK, "confirmed, not nacked");
            acked = mth.dec().longlong();
        }
    }

    fn fill(&mut self, queue: &str, from: usize, to: usize) {
        self.send(queue, from, to, &Props::default());
    }
}

fn numbered(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("m{i}")).collect()
}

crate::shard_tests!(a_policy_applies_to_existing_and_new_queues_and_goes_away);

async fn a_policy_applies_to_existing_and_new_queues_and_goes_away(shards: usize) {
    tokio::task::spawn_blocking(move || applies(shards))
        .await
        .expect("test thread");
}

/// Queue names whose homes cover every shard.
const NAMES: [&str; 6] = ["pol.a", "pol.b", "pol.c", "pol.d", "pol.e", "pol.f"];

fn applies(shards: usize) {
    let broker = Broker::start(shards);
    let port = broker.http_port();
    assert_eq!(admin(port, "GET", "/api/policies", None).json(), json!([]));
    for name in NAMES.iter().chain(&["other"]) {
        declare(port, name, json!({}));
    }
    let homes: std::collections::BTreeSet<u64> = NAMES
        .iter()
        .map(|n| queue(port, n)["home_shard"].as_u64().expect("home"))
        .collect();
    assert_eq!(homes.len(), shards, "the queues live on every shard");
    let mut c = Publisher::new(&broker);
    for name in NAMES.iter().chain(&["other"]) {
        c.fill(name, 0, 10);
    }
    for name in NAMES.iter().chain(&["other"]) {
        assert_eq!(depth(port, name), 10, "{name} before the policy");
    }

    let limit = json!({"pattern": "^pol\\.", "apply-to": "queues",
                       "definition": {"max-length": 3}});
    assert_eq!(put_policy(port, "cap", limit.clone()), 201);
    // In force on every shard when answered: the existing queues dropped from the head.
    for name in NAMES {
        let q = queue(port, name);
        assert_eq!(q["messages"], 3, "{name} after the policy");
        assert_eq!(q["policy"], "cap");
        assert_eq!(q["effective_policy_definition"], json!({"max-length": 3}));
    }
    let other = queue(port, "other");
    assert_eq!(
        (other["messages"].as_u64(), &other["policy"]),
        (Some(10), &Value::Null)
    );
    assert_eq!(other["effective_policy_definition"], json!({}));
    assert_eq!(
        drain(port, "pol.a"),
        numbered(7..10),
        "the newest three stay"
    );
    assert_eq!(
        admin(port, "GET", "/api/policies/%2F/cap", None).json(),
        json!({"vhost": "/", "name": "cap", "pattern": "^pol\\.", "apply-to": "queues",
               "priority": 0, "definition": {"max-length": 3}})
    );
    assert_eq!(
        admin(port, "GET", "/api/policies/%2F", None).json(),
        admin(port, "GET", "/api/policies", None).json()
    );

    // A queue declared afterwards gets it; a declared x-max-length below it stays.
    declare(port, "pol.new", json!({}));
    declare(port, "pol.own", json!({"x-max-length": 2}));
    c.fill("pol.new", 0, 5);
    c.fill("pol.own", 0, 5);
    assert_eq!(drain(port, "pol.new"), numbered(2..5));
    assert_eq!(drain(port, "pol.own"), numbered(3..5));
    assert_eq!(queue(port, "pol.own")["policy"], "cap");

    // The higher priority wins; putting a policy again replaces it (204).
    let tighter = json!({"pattern": "^pol\\.b$", "priority": 5, "definition": {"max-length": 1}});
    assert_eq!(put_policy(port, "only-b", tighter), 201);
    assert_eq!(queue(port, "pol.b")["policy"], "only-b");
    assert_eq!(drain(port, "pol.b"), numbered(9..10));
    let looser = json!({"pattern": "^pol\\.b$", "priority": 5, "definition": {"max-length": 4}});
    assert_eq!(put_policy(port, "only-b", looser), 204);
    c.fill("pol.b", 20, 30);
    assert_eq!(drain(port, "pol.b"), numbered(26..30));
    assert_eq!(
        queue(port, "pol.c")["policy"],
        "cap",
        "priority 0 elsewhere"
    );

    // Deleted: the queues are unlimited again at once.
    assert_empty(&admin(port, "DELETE", "/api/policies/%2F/cap", None), 204);
    assert_empty(
        &admin(port, "DELETE", "/api/policies/%2F/only-b", None),
        204,
    );
    let r = admin(port, "DELETE", "/api/policies/%2F/cap", None);
    assert_eq!(r.status, 404, "{}", r.body);
    c.fill("pol.c", 10, 20);
    let c_queue = queue(port, "pol.c");
    assert_eq!(
        (c_queue["messages"].as_u64(), &c_queue["policy"]),
        (Some(13), &Value::Null)
    );
    assert_eq!(admin(port, "GET", "/api/policies", None).json(), json!([]));
    assert!(broker.count_logs("POL-1001") >= 3, "{:?}", broker.logs());
    assert!(broker.count_logs("POL-1002") >= 2);
}

crate::shard_tests!(a_policy_dead_letters_and_sets_capacity_on_existing_queues);

async fn a_policy_dead_letters_and_sets_capacity_on_existing_queues(shards: usize) {
    tokio::task::spawn_blocking(move || dead_letters(shards))
        .await
        .expect("test thread");
}

fn dead_letters(shards: usize) {
    let broker = Broker::start(shards);
    let port = broker.http_port();
    declare(port, "dl.src", json!({}));
    declare(port, "dl.target", json!({}));
    let mut c = Publisher::new(&broker);
    c.fill("dl.src", 0, 5);
    let start = std::time::Instant::now();
    let definition = json!({"max-length": 2, "dead-letter-exchange": "",
                            "dead-letter-routing-key": "dl.target",
                            "sluice-capacity": 100000, "sluice-flow-resume-capacity": 50000});
    let body = json!({"pattern": "^dl\\.src$", "definition": definition});
    assert_eq!(put_policy(port, "dlx", body), 201);
    // The three dropped from the head are dead-lettered (on the target's shard, which
    // may be the other one: they arrive through its inbox).
    while depth(port, "dl.target") < 3 && start.elapsed().as_secs() < 20 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(drain(port, "dl.target"), numbered(0..3));
    assert_eq!(drain(port, "dl.src"), numbered(3..5));
    let flow = queue(port, "dl.src")["flow"].clone();
    assert_eq!(
        (&flow["capacity"], &flow["resume_capacity"]),
        (&json!(100000), &json!(50000)),
        "{flow}"
    );
    assert_empty(&admin(port, "DELETE", "/api/policies/%2F/dlx", None), 204);
    assert_eq!(queue(port, "dl.src")["flow"], Value::Null);
}

crate::shard_tests!(a_policy_gives_a_topic_subscription_its_slow_consumer_settings);

async fn a_policy_gives_a_topic_subscription_its_slow_consumer_settings(shards: usize) {
    tokio::task::spawn_blocking(move || slow_consumer(shards))
        .await
        .expect("test thread");
}

fn slow_consumer(shards: usize) {
    let broker = Broker::start(shards);
    let port = broker.http_port();
    let transient = json!({"durable": false, "auto_delete": false, "arguments": {}});
    let r = admin(port, "PUT", "/api/queues/%2F/sub.slow", Some(transient));
    assert_eq!(r.status, 201, "{}", r.body);
    let bind = json!({"routing_key": "ticks.#"});
    let r = admin(
        port,
        "POST",
        "/api/bindings/%2F/e/amq.topic/q/sub.slow",
        Some(bind),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(queue(port, "sub.slow")["slow_consumer"], Value::Null);
    let definition = json!({"sluice-slow-consumer-max-count": 3,
                            "sluice-slow-consumer-policy": "delete"});
    let body = json!({"pattern": "^sub\\.", "definition": definition});
    assert_eq!(put_policy(port, "slow", body), 201);
    let slow = queue(port, "sub.slow")["slow_consumer"].clone();
    assert_eq!(
        (&slow["max_count"], &slow["policy"]),
        (&json!(3), &json!("delete")),
        "{slow}"
    );
    // Over the count the policy's verdict deletes the subscription.
    let mut c = Publisher::new(&broker);
    c.send_via("amq.topic", "ticks.a", 0, 4, &Props::default());
    let gone = crate::common::wait_until(crate::common::EVENT_TIMEOUT, || {
        admin(port, "GET", "/api/queues/%2F/sub.slow", None).status == 404
    });
    assert!(gone, "deleted by the slow-consumer policy");
}

#[test]
fn refusals_carry_rabbitmqs_reasons() {
    let broker = Broker::start(1);
    let port = broker.http_port();
    let put = |name: &str, body: Value| {
        admin(
            port,
            "PUT",
            &format!("/api/policies/%2F/{name}"),
            Some(body),
        )
    };
    assert_error(
        &put(
            "p",
            json!({"pattern": ".*", "definition": {"max-length": 1, "foo": 2}}),
        ),
        400,
        "bad_request",
        "Validation failed\n\n[{<<\"foo\">>,2}] are not recognised policy settings\n",
    );
    assert_error(
        &put(
            "p",
            json!({"pattern": ".*", "definition": {"max-length": -1}}),
        ),
        400,
        "bad_request",
        "Validation failed\n\n-1 is not a valid maximum length\n",
    );
    assert_error(
        &put("p", json!({"pattern": ".*", "definition": {}})),
        400,
        "bad_request",
        "Validation failed\n\nno policy provided\n",
    );
    assert_error(
        &put("p", json!({"definition": {"max-length": 1}})),
        400,
        "bad_request",
        "[{key_missing,pattern}]",
    );
    let r = put(
        "p",
        json!({"pattern": ".*", "apply-to": "nodes", "definition": {"max-length": 1}}),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.json()["reason"]
        .as_str()
        .is_some_and(|s| s.contains("apply-to 'nodes' unrecognised")));
    let r = put(
        "p",
        json!({"pattern": "(", "definition": {"max-length": 1}}),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.json()["reason"].as_str().is_some_and(
        |s| s.starts_with("Validation failed\n\npattern should be regular expression")
    ));
    let r = admin(
        port,
        "PUT",
        "/api/policies/nope/p",
        Some(json!({"pattern": ".*", "definition": {"max-length": 1}})),
    );
    assert_error(&r, 404, "not_found", "vhost_not_found");
    for path in ["/api/policies/%2F/none", "/api/policies/nope"] {
        assert_eq!(admin(port, "GET", path, None).status, 404, "{path}");
    }
    assert_eq!(admin(port, "GET", "/api/policies", None).json(), json!([]));
    assert!(broker.count_logs("POL-1004") >= 5, "{:?}", broker.logs());
}

const USERS: &str = r#"
[auth]
users = [
  { name = "guest", password = "guest", tags = ["administrator"] },
  { name = "pm", password = "pm", tags = ["policymaker"] },
  { name = "viewer", password = "viewer", tags = ["management"] },
]
permissions = [
  { user = "guest", vhost = "/", configure = ".*", write = ".*", read = ".*" },
  { user = "guest", vhost = "other", configure = ".*", write = ".*", read = ".*" },
  { user = "pm", vhost = "/", configure = ".*", write = ".*", read = ".*" },
  { user = "viewer", vhost = "/", configure = ".*", write = ".*", read = ".*" },
]
[vhosts]
names = ["/", "other"]
"#;

#[test]
fn policymakers_change_the_vhosts_they_have_access_to() {
    let broker = Broker::start_with_config(1, USERS);
    let port = broker.http_port();
    let body = json!({"pattern": "^x", "definition": {"max-length": 9}});
    let r = as_user(
        port,
        ("pm", "pm"),
        "PUT",
        "/api/policies/%2F/p",
        Some(body.clone()),
    );
    assert_empty(&r, 201);
    let r = as_user(
        port,
        ("pm", "pm"),
        "PUT",
        "/api/policies/other/p",
        Some(body.clone()),
    );
    assert_error(
        &r,
        401,
        "not_authorised",
        "User not authorised to access object",
    );
    let r = as_user(port, ("viewer", "viewer"), "GET", "/api/policies", None);
    assert_error(
        &r,
        401,
        "not_authorised",
        "User not authorised to access object",
    );
    let r = as_user(
        port,
        ("viewer", "viewer"),
        "DELETE",
        "/api/policies/%2F/p",
        None,
    );
    assert_eq!(r.status, 401, "{}", r.body);
    assert_empty(
        &admin(port, "PUT", "/api/policies/other/q", Some(body)),
        201,
    );
    // The policymaker lists the vhosts it has access to; the administrator every one.
    let names = |user: (&str, &str)| -> Vec<String> {
        as_user(port, user, "GET", "/api/policies", None)
            .json()
            .as_array()
            .expect("list")
            .iter()
            .map(|p| {
                format!(
                    "{}/{}",
                    p["vhost"].as_str().unwrap_or(""),
                    p["name"].as_str().unwrap_or("")
                )
            })
            .collect()
    };
    assert_eq!(names(("pm", "pm")), ["//p"]);
    assert_eq!(names(("guest", "guest")), ["//p", "other/q"]);
    assert_empty(
        &as_user(port, ("pm", "pm"), "DELETE", "/api/policies/%2F/p", None),
        204,
    );
}

#[test]
fn policies_survive_kill_9_and_travel_in_the_definitions() {
    let dir = TestDir::new("sluice-http-policies-durable");
    let data = dir.path().join("data");
    let mut broker = Broker::start_in(&data, 2, None);
    let port = broker.http_port();
    declare(port, "keep.q", json!({}));
    let mut c = Publisher::new(&broker);
    let persistent = Props {
        delivery_mode: Some(2),
        ..Props::default()
    };
    c.send("keep.q", 0, 6, &persistent);
    assert_eq!(depth(port, "keep.q"), 6);
    let body = json!({"pattern": "^keep\\.", "apply-to": "queues", "priority": 2,
                      "definition": {"max-length": 2, "message-ttl": 600000}});
    assert_eq!(put_policy(port, "keep", body), 201);
    assert_eq!(depth(port, "keep.q"), 2);
    let exported = admin(port, "GET", "/api/definitions", None).json();
    let policies = exported["policies"].clone();
    assert_eq!(
        policies,
        json!([{"vhost": "/", "name": "keep", "pattern": "^keep\\.", "apply-to": "queues",
                "priority": 2, "definition": {"max-length": 2, "message-ttl": 600000}}])
    );
    drop(c);
    broker.kill9();
    let broker = Broker::start_in(&data, 2, None);
    let port = broker.http_port();
    assert_eq!(admin(port, "GET", "/api/policies", None).json(), policies);
    let q = queue(port, "keep.q");
    assert_eq!(
        (q["messages"].as_u64(), &q["policy"]),
        (Some(2), &json!("keep"))
    );
    assert_eq!(drain(port, "keep.q"), numbered(4..6));

    // Imported into a fresh broker, the policy is in force there.
    let fresh = Broker::start(1);
    let fport = fresh.http_port();
    let only_policies = json!({"policies": policies});
    let r = http::request_json(
        fport,
        "POST",
        "/api/definitions",
        Some(("guest", "guest")),
        &only_policies,
    );
    assert_empty(&r, 204);
    declare(fport, "keep.r", json!({}));
    assert_eq!(queue(fport, "keep.r")["policy"], "keep");
    assert!(fresh.count_logs("1 policies") >= 1, "{:?}", fresh.logs());
}

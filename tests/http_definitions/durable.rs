//! Durable queues, exchanges and bindings declared over the management API are in the
//! definitions log when the answer comes: they survive a clean stop and a kill -9 (and
//! so do deletions made over the API); transient ones do not.

use serde_json::json;

use crate::common::{Broker, TestDir};
use crate::{admin, assert_empty, object_not_found, open, passive_count, publish};

/// Asserts what a restarted broker has: `keep` (durable, with its argument), `kx`
/// (durable topic) and `bindings` (routing keys from `kx` to `keep`), and routes a
/// publish for each binding into `keep`.
fn assert_kept(broker: &Broker, bindings: &[&str]) {
    let port = broker.http_port();
    let q = admin(port, "GET", "/api/queues/%2F/keep", None);
    assert_eq!(q.status, 200, "{}", q.body);
    let q = q.json();
    assert_eq!(q["durable"], true);
    assert_eq!(q["arguments"], json!({"x-max-length": 100}));
    let x = admin(port, "GET", "/api/exchanges/%2F/kx", None);
    assert_eq!(x.status, 200, "{}", x.body);
    assert_eq!(
        (&x.json()["type"], &x.json()["durable"]),
        (&json!("topic"), &json!(true))
    );
    let listed = admin(port, "GET", "/api/bindings/%2F/e/kx/q/keep", None).json();
    let mut keys: Vec<&str> = listed
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|b| b["routing_key"].as_str())
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, bindings);
    for gone in ["/api/queues/%2F/brief", "/api/exchanges/%2F/brief"] {
        let r = admin(port, "GET", gone, None);
        assert_eq!((r.status, r.json()), (404, object_not_found()), "{gone}");
    }
    let mut c = open(broker);
    let before = passive_count(&mut c, 1, "keep").expect("keep exists");
    for key in bindings {
        publish(
            &mut c,
            "kx",
            &key.replace('*', "x"),
            b"routed after restart",
        );
    }
    let routed = u32::try_from(bindings.len()).expect("count");
    assert_eq!(passive_count(&mut c, 1, "keep"), Ok(before + routed));
}

#[test]
fn declared_over_http_survives_stop_and_kill_9() {
    let dir = TestDir::new("sluice-http-topology-durable");
    let data = dir.path().join("data");
    let mut broker = Broker::start_in(&data, 2, None);
    let port = broker.http_port();
    let durable = json!({"durable": true, "arguments": {"x-max-length": 100}});
    assert_empty(
        &admin(port, "PUT", "/api/queues/%2F/keep", Some(durable)),
        201,
    );
    let topic = json!({"type": "topic", "durable": true});
    assert_empty(
        &admin(port, "PUT", "/api/exchanges/%2F/kx", Some(topic)),
        201,
    );
    let bind = |key: &str| {
        let body = json!({"routing_key": key});
        admin(port, "POST", "/api/bindings/%2F/e/kx/q/keep", Some(body))
    };
    assert_empty(&bind("a.*"), 201);
    // Transient ones, and a durable queue deleted again: none of them comes back.
    assert_empty(
        &admin(
            port,
            "PUT",
            "/api/queues/%2F/brief",
            Some(json!({"durable": false})),
        ),
        201,
    );
    assert_empty(
        &admin(
            port,
            "PUT",
            "/api/exchanges/%2F/brief",
            Some(json!({"type": "fanout"})),
        ),
        201,
    );
    assert_empty(
        &admin(
            port,
            "PUT",
            "/api/queues/%2F/gone",
            Some(json!({"durable": true})),
        ),
        201,
    );
    assert_empty(&admin(port, "DELETE", "/api/queues/%2F/gone", None), 204);
    broker.stop();

    let mut broker = Broker::start_in(&data, 2, None);
    assert_kept(&broker, &["a.*"]);
    let port = broker.http_port();
    let r = admin(port, "GET", "/api/queues/%2F/gone", None);
    assert_eq!((r.status, r.json()), (404, object_not_found()));

    // Changes after the restart, then kill -9: the new binding is there, the deleted
    // one is not.
    let body = json!({"routing_key": "b.*"});
    let r = admin(port, "POST", "/api/bindings/%2F/e/kx/q/keep", Some(body));
    assert_empty(&r, 201);
    let body = json!({"routing_key": "c.*"});
    let r = admin(port, "POST", "/api/bindings/%2F/e/kx/q/keep", Some(body));
    assert_empty(&r, 201);
    assert_empty(
        &admin(port, "DELETE", "/api/bindings/%2F/e/kx/q/keep/a.*", None),
        204,
    );
    broker.kill9();

    let broker = Broker::start_in(&data, 2, None);
    assert_kept(&broker, &["b.*", "c.*"]);
}

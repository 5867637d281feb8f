//! RabbitMQ's health checks (`rabbit_mgmt_wm_health_check_*`): 200 `{"status":"ok"}` on a
//! healthy node; 503 `{"status":"failed","reason":…}` with RabbitMQ's other fields while
//! a memory or disk alarm is in effect, or for a port or protocol nothing listens on.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::raw::RawConn;
use crate::common::wire::Props;
use crate::common::{eventually, unique, Broker, EVENT_TIMEOUT};
use crate::{get, get_as, get_ok, request};

crate::shard_tests!(healthy_node_passes_every_check, listener_checks);

const NODE: &str = "[broker]\nnode_name = \"obs-health\"\n";

/// The listed protocols as a sorted list (RabbitMQ's order is a set's).
fn sorted(v: &Value) -> Vec<String> {
    let mut names: Vec<String> = v
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|p| p.as_str().unwrap_or_default().to_owned())
        .collect();
    names.sort();
    names
}

async fn healthy_node_passes_every_check(shards: usize) {
    let broker = Broker::start_with_config(shards, NODE);
    let port = broker.http_port();
    for check in ["alarms", "local-alarms", "virtual-hosts"] {
        let path = format!("/api/health/checks/{check}");
        let r = get(port, &path).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        assert_eq!(r.json(), json!({"status": "ok"}), "{path}");
        assert!(
            r.headers
                .get("content-type")
                .is_some_and(|c| c.starts_with("application/json")),
            "{path}: {:?}",
            r.headers
        );
        // Any user of the API may ask; nobody without credentials.
        let anonymous = get_as(port, &path, None).await;
        assert_eq!(anonymous.status, 401, "{path}: {}", anonymous.body);
        let wrong = get_as(port, &path, Some(("guest", "nope"))).await;
        assert_eq!(wrong.status, 401, "{path}: {}", wrong.body);
    }
    let r = get(port, "/api/health/checks/no-such-check").await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = request(
        port,
        "POST",
        "/api/health/checks/alarms",
        Some(("guest", "guest")),
    )
    .await;
    assert_eq!(r.status, 405, "{}", r.body);
}

async fn listener_checks(shards: usize) {
    let broker = Broker::start(shards);
    let (amqp, http) = (broker.port(), broker.http_port());
    for p in [amqp, http] {
        let path = format!("/api/health/checks/port-listener/{p}");
        assert_eq!(
            get_ok(http, &path).await,
            json!({"status": "ok", "port": p})
        );
    }
    // A port nothing listens on: RabbitMQ's failure, with the ports that are listened on.
    let r = get(http, "/api/health/checks/port-listener/1").await;
    assert_eq!(r.status, 503, "{}", r.body);
    let body = r.json();
    assert_eq!(body["status"], "failed", "{body}");
    assert_eq!(body["reason"], "No active listener", "{body}");
    assert_eq!(body["missing"], 1, "{body}");
    let mut ports: Vec<u64> = body["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    ports.sort_unstable();
    let mut expected = vec![u64::from(amqp), u64::from(http)];
    expected.sort_unstable();
    assert_eq!(ports, expected, "{body}");
    assert_eq!(body.as_object().map(|o| o.len()), Some(4), "{body}");
    let r = get(http, "/api/health/checks/port-listener/amqp").await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["reason"], "Invalid port", "{}", r.body);

    // Protocols, by RabbitMQ's names and aliases.
    for protocols in [
        "amqp",
        "AMQP091",
        "amqp0-9-1",
        "http",
        "management",
        "amqp,http",
    ] {
        let path = format!("/api/health/checks/protocol-listener/{protocols}");
        let body = get_ok(http, &path).await;
        assert_eq!(body["status"], "ok", "{path}: {body}");
        assert_eq!(
            sorted(&body["protocols"]),
            ["amqp", "http"],
            "{path}: {body}"
        );
    }
    for (protocols, missing) in [
        ("stomp", vec!["stomp"]),
        ("amqps", vec!["amqp/ssl"]),
        ("amqp%2Fssl", vec!["amqp/ssl"]),
        ("amqp,mqtt,stomp", vec!["mqtt", "stomp"]),
    ] {
        let path = format!("/api/health/checks/protocol-listener/{protocols}");
        let r = get(http, &path).await;
        assert_eq!(r.status, 503, "{path}: {}", r.body);
        let body = r.json();
        assert_eq!(body["status"], "failed", "{path}: {body}");
        assert_eq!(body["reason"], "No active listener", "{path}: {body}");
        assert_eq!(sorted(&body["missing"]), missing, "{path}: {body}");
        assert_eq!(
            sorted(&body["protocols"]),
            ["amqp", "http"],
            "{path}: {body}"
        );
    }
}

/// The alarms as the failed check lists them: (resource, node), sorted.
fn alarms_of(body: &Value) -> Vec<(String, String)> {
    let mut alarms: Vec<(String, String)> = body["alarms"]
        .as_array()
        .unwrap_or_else(|| panic!("no alarms list: {body}"))
        .iter()
        .map(|a| {
            assert_eq!(a.as_object().map(|o| o.len()), Some(2), "{a}");
            let field = |k: &str| a[k].as_str().unwrap_or_default().to_owned();
            (field("resource"), field("node"))
        })
        .collect();
    alarms.sort();
    alarms
}

/// Both alarm checks fail, naming `resource` on this node, with RabbitMQ's reasons.
async fn assert_alarm_checks_fail(port: u16, resource: &str, node: &str) {
    for (check, reason) in [
        ("alarms", "There are alarms in effect in the cluster"),
        ("local-alarms", "There are alarms in effect on the node"),
    ] {
        let path = format!("/api/health/checks/{check}");
        let r = get(port, &path).await;
        assert_eq!(r.status, 503, "{path}: {}", r.body);
        let body = r.json();
        assert_eq!(body["status"], "failed", "{path}: {body}");
        assert_eq!(body["reason"], reason, "{path}: {body}");
        assert_eq!(
            alarms_of(&body),
            [(resource.to_owned(), node.to_owned())],
            "{path}: {body}"
        );
    }
}

const BIG: usize = 65_536;

/// Publishes [`BIG`]-byte messages into `queue` on channel 1 of `raw` until BRK-1007 (the
/// memory alarm) is logged: 56 at once (below 4,000,000 bytes), then one at a time.
fn fill_until_memory_alarm(broker: &Broker, raw: &mut RawConn, queue: &str) {
    let body = vec![b'm'; BIG];
    for sent in 1..=160 {
        raw.publish(1, "", queue, &Props::default(), &body)
            .expect("publish");
        if sent >= 56
            && broker
                .wait_for_log("BRK-1007 ", Duration::from_millis(50))
                .is_some()
        {
            return;
        }
    }
    panic!("no BRK-1007 after 160 messages of {BIG} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_alarm_fails_the_alarm_checks_until_it_clears() {
    let config = format!("{NODE}[memory]\nhigh_watermark = 4000000\nlow_watermark = 2000000\n");
    let broker = Broker::start_with_config(2, &config);
    crate::common::bounded(async {
        let port = broker.http_port();
        let queue = unique("alarmq");
        let mut raw = broker.raw();
        raw.channel_open(1);
        raw.queue_declare(1, &queue, false, false, false);
        // Blocking, bounded by the raw connection's timeouts and the 160 messages.
        fill_until_memory_alarm(&broker, &mut raw, &queue);
        assert_alarm_checks_fail(port, "memory", "obs-health").await;
        let node = get_ok(port, "/api/nodes/obs-health").await;
        assert_eq!(node["mem_alarm"], true, "{node}");
        assert_eq!(node["mem_limit"], 4_000_000, "{node}");
        assert!(
            node["mem_used"].as_u64().is_some_and(|u| u >= 4_000_000),
            "{node}"
        );
        assert_eq!(node["disk_free_alarm"], false, "{node}");
        // The other checks do not look at alarms.
        let r = get(port, "/api/health/checks/virtual-hosts").await;
        assert_eq!(r.status, 200, "{}", r.body);

        // Purged, the broker falls below the low watermark: the checks pass again.
        let path = format!("/api/queues/%2F/{}/contents", crate::segment(&queue));
        let r = request(port, "DELETE", &path, Some(("guest", "guest"))).await;
        assert_eq!(r.status, 204, "{}", r.body);
        assert!(
            broker.wait_for_log("BRK-1008 ", EVENT_TIMEOUT).is_some(),
            "the alarm did not clear; log:\n{}",
            broker.logs().join("\n")
        );
        for check in ["alarms", "local-alarms"] {
            let path = format!("/api/health/checks/{check}");
            assert_eq!(get_ok(port, &path).await, json!({"status": "ok"}), "{path}");
        }
        let node = get_ok(port, "/api/nodes/obs-health").await;
        assert_eq!(node["mem_alarm"], false, "{node}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_alarm_fails_the_alarm_checks() {
    // More free space than any disk has: the alarm is raised at the first check.
    let config = format!("{NODE}[store]\ndisk_free_limit = 4611686018427387904\n");
    let broker = Broker::start_with_config(1, &config);
    crate::common::bounded(async {
        let port = broker.http_port();
        let raised = eventually(EVENT_TIMEOUT, || async {
            get(port, "/api/health/checks/alarms").await.status == 503
        })
        .await;
        assert!(raised, "no disk alarm; log:\n{}", broker.logs().join("\n"));
        assert_alarm_checks_fail(port, "disk space", "obs-health").await;
        let node = get_ok(port, "/api/nodes/obs-health").await;
        assert_eq!(node["disk_free_alarm"], true, "{node}");
        assert_eq!(
            node["disk_free_limit"], 4_611_686_018_427_387_904u64,
            "{node}"
        );
        assert_eq!(node["mem_alarm"], false, "{node}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vhost_created_at_run_time_is_up() {
    let broker = Broker::start(2);
    crate::common::bounded(async {
        let port = broker.http_port();
        let vhost = unique("hv");
        let path = format!("/api/vhosts/{vhost}");
        let r = request(port, "PUT", &path, Some(("guest", "guest"))).await;
        assert_eq!(r.status, 201, "{}", r.body);
        let r = get(port, "/api/health/checks/virtual-hosts").await;
        assert_eq!((r.status, r.json()), (200, json!({"status": "ok"})));
        let r = request(port, "DELETE", &path, Some(("guest", "guest"))).await;
        assert_eq!(r.status, 204, "{}", r.body);
        let r = get(port, "/api/health/checks/virtual-hosts").await;
        assert_eq!((r.status, r.json()), (200, json!({"status": "ok"})));
    })
    .await;
}

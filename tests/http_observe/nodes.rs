//! `/api/nodes` and `/api/nodes/{name}` (`rabbit_mgmt_wm_node(s)`), `/api/cluster-name`,
//! `/api/whoami` and the overview's node fields, as RabbitMQ answers them for one node.

use serde_json::{json, Value};

use crate::common::{eventually, unique, Broker, EVENT_TIMEOUT};
use crate::{get, get_as, get_ok, segment};

crate::shard_tests!(one_node_with_plausible_figures);

const CONFIG: &str = r#"
[broker]
node_name = "obs@node-1"

[memory]
high_watermark = 300000000

[store]
disk_free_limit = 1000000

[auth]
users = [
  { name = "guest", password = "guest", tags = ["administrator"] },
  { name = "watcher", password = "w", tags = ["monitoring", "management"] },
  { name = "plain", password = "p", tags = [] },
]
"#;

const NODE: &str = "obs@node-1";

fn u64_field(node: &Value, key: &str) -> u64 {
    node[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a number: {node}"))
}

async fn one_node_with_plausible_figures(shards: usize) {
    let broker = Broker::start_with_config(shards, CONFIG);
    let port = broker.http_port();
    // A connection and a queue holding a message: sockets in use, message memory held.
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let queue = unique("nodeq");
    ch.declare_queue(&queue).await;
    ch.publish("", &queue, &[b'n'; 10_000]).await;
    ch.wait_message_count(&queue, 1).await;

    let nodes = get_ok(port, "/api/nodes").await;
    let list = nodes.as_array().expect("a list of nodes");
    assert_eq!(list.len(), 1, "{nodes}");
    let node = &list[0];
    assert_eq!(node["name"], NODE, "{node}");
    assert_eq!(node["type"], "disc", "{node}");
    assert_eq!(node["running"], true, "{node}");
    assert_eq!(node["os_pid"], broker.pid().to_string(), "{node}");
    assert_eq!(node["mem_limit"], 300_000_000, "{node}");
    assert_eq!(node["mem_alarm"], false, "{node}");
    assert_eq!(node["disk_free_limit"], 1_000_000, "{node}");
    assert_eq!(node["disk_free_alarm"], false, "{node}");
    assert_eq!(node["shards"], shards, "{node}");
    assert_eq!(node["partitions"], json!([]), "{node}");
    // No vhost has a store quota here: none is listed.
    assert_eq!(node["store_quotas"], json!([]), "{node}");
    assert!(node["store_size"].is_u64(), "{node}");
    let fd_used = u64_field(node, "fd_used");
    let fd_total = u64_field(node, "fd_total");
    let sockets_used = u64_field(node, "sockets_used");
    // Two listeners and the connection, at least.
    assert!(sockets_used >= 3, "{node}");
    assert!(fd_used >= sockets_used, "{node}");
    assert!(fd_total >= fd_used, "{node}");
    assert_eq!(node["sockets_total"], fd_total, "{node}");
    assert!(u64_field(node, "disk_free") > 0, "{node}");
    // Every shard is a thread, and so is the management listener.
    assert!(u64_field(node, "proc_used") > shards as u64, "{node}");
    assert!(
        u64_field(node, "proc_total") >= u64_field(node, "proc_used"),
        "{node}"
    );
    assert!(u64_field(node, "processors") >= 1, "{node}");
    assert!(u64_field(node, "uptime") > 0, "{node}");
    let types: Vec<&str> = node["exchange_types"]
        .as_array()
        .expect("exchange_types")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(types, ["direct", "fanout", "headers", "topic"], "{node}");
    let mechanisms: Vec<(&str, bool)> = node["auth_mechanisms"]
        .as_array()
        .expect("auth_mechanisms")
        .iter()
        .map(|m| (m["name"].as_str().unwrap_or_default(), m["enabled"] == true))
        .collect();
    assert!(mechanisms.contains(&("PLAIN", true)), "{node}");
    assert!(mechanisms.contains(&("EXTERNAL", false)), "{node}");
    // The message held counts in the figure the watermark compares (posted each tick).
    let held = eventually(EVENT_TIMEOUT, || async {
        let node = get_ok(port, &format!("/api/nodes/{}", segment(NODE))).await;
        node["mem_used"].as_u64().is_some_and(|m| m >= 10_000)
    })
    .await;
    assert!(held, "mem_used never counted the message held");

    // One node by name: the same node; any other name is not found.
    let one = get_ok(port, &format!("/api/nodes/{}", segment(NODE))).await;
    assert_eq!(one["name"], NODE, "{one}");
    assert_eq!(one["os_pid"], node["os_pid"], "{one}");
    assert!(one.is_object(), "{one}");
    for other in ["rabbit@elsewhere", "obs", "obs@node-2"] {
        let r = get(port, &format!("/api/nodes/{}", segment(other))).await;
        assert_eq!(r.status, 404, "{other}: {}", r.body);
        assert_eq!(r.json()["error"], "Object Not Found", "{}", r.body);
    }

    // The cluster of one node is named after it, as the overview says.
    assert_eq!(
        get_ok(port, "/api/cluster-name").await,
        json!({"name": NODE})
    );
    let overview = get_ok(port, "/api/overview").await;
    assert_eq!(overview["node"], NODE, "{overview}");
    assert_eq!(overview["cluster_name"], NODE, "{overview}");
    assert_eq!(overview["product_name"], "sluice", "{overview}");
    assert_eq!(
        overview["rabbitmq_version"], overview["product_version"],
        "{overview}"
    );
    assert!(overview["rabbitmq_version"].is_string(), "{overview}");
    let contexts = overview["contexts"].as_array().expect("contexts");
    assert_eq!(contexts.len(), 1, "{overview}");
    assert_eq!(contexts[0]["port"], port.to_string(), "{overview}");
    assert_eq!(contexts[0]["path"], "/", "{overview}");
    assert_eq!(contexts[0]["node"], NODE, "{overview}");
    assert_eq!(
        overview["exchange_types"], node["exchange_types"],
        "{overview}"
    );
    let mut listeners: Vec<(String, u64)> = overview["listeners"]
        .as_array()
        .expect("listeners")
        .iter()
        .map(|l| {
            assert_eq!(l["node"], NODE, "{l}");
            (
                l["protocol"].as_str().unwrap_or_default().to_owned(),
                l["port"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    listeners.sort();
    assert_eq!(
        listeners,
        [
            ("amqp".to_owned(), u64::from(broker.port())),
            ("http".to_owned(), u64::from(port))
        ],
        "{overview}"
    );
    // Each shard's figures: together the connection, its channel, the queue and its
    // message, on the shards that have them.
    let details = overview["shard_details"].as_array().expect("shard_details");
    assert_eq!(details.len(), shards, "{overview}");
    let sum = |key: &str| details.iter().map(|d| u64_field(d, key)).sum::<u64>();
    assert_eq!(sum("connections"), 1, "{overview}");
    assert_eq!(sum("channels"), 1, "{overview}");
    assert_eq!(sum("queues"), 1, "{overview}");
    assert_eq!(sum("messages_ready"), 1, "{overview}");
    assert_eq!(sum("messages_unacknowledged"), 0, "{overview}");
    assert_eq!(overview["queue_totals"]["messages_ready"], 1, "{overview}");
    for (i, d) in details.iter().enumerate() {
        assert_eq!(d["shard"], i, "{overview}");
        assert!(
            d["cpu_seconds"].as_f64().is_some_and(|c| c > 0.0),
            "{overview}"
        );
        assert_eq!(d["publish_inbox_depth"], 0, "{overview}");
    }
    conn.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whoami_names_the_caller_and_its_tags() {
    let broker = Broker::start_with_config(1, CONFIG);
    crate::common::bounded(async {
        let port = broker.http_port();
        for (user, password, tags) in [
            ("guest", "guest", json!(["administrator"])),
            ("watcher", "w", json!(["monitoring", "management"])),
            ("plain", "p", json!([])),
        ] {
            let r = get_as(port, "/api/whoami", Some((user, password))).await;
            assert_eq!(r.status, 200, "{user}: {}", r.body);
            assert_eq!(
                r.json(),
                json!({"name": user, "tags": tags, "is_internal_user": true}),
                "{user}"
            );
        }
        let r = get_as(port, "/api/whoami", None).await;
        assert_eq!(r.status, 401, "{}", r.body);
        let r = get_as(port, "/api/whoami", Some(("guest", "wrong"))).await;
        assert_eq!(r.status, 401, "{}", r.body);
        let r = get_as(port, "/api/cluster-name", None).await;
        assert_eq!(r.status, 401, "{}", r.body);
        let r = get_as(port, "/api/nodes", None).await;
        assert_eq!(r.status, 401, "{}", r.body);
    })
    .await;
}

//! RabbitMQ's own rabbitmqadmin (from Debian's rabbitmq-server package) against sluice's
//! management API: declare, list and delete users, permissions and vhosts; declare, list
//! and delete exchanges, queues and bindings, publish, get, purge, vhost limits, close a
//! connection, export and import. Skips
//! with a message where /usr/bin/rabbitmqadmin is not installed.

use std::process::Command;

use crate::common::Broker;
use crate::{login, FILE};

const RABBITMQADMIN: &str = "/usr/bin/rabbitmqadmin";

/// Runs rabbitmqadmin as guest against `port`; (exit success, stdout + stderr).
fn rabbitmqadmin(port: u16, args: &[&str]) -> (bool, String) {
    let out = Command::new("python3")
        .arg(RABBITMQADMIN)
        .args([
            "-H",
            "127.0.0.1",
            "-P",
            &port.to_string(),
            "-u",
            "guest",
            "-p",
            "guest",
        ])
        .args(args)
        .output()
        .expect("run rabbitmqadmin");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn rabbitmqadmin_administers_users_and_permissions() {
    if !std::path::Path::new(RABBITMQADMIN).exists() {
        eprintln!("SKIP rabbitmqadmin_administers_users_and_permissions: {RABBITMQADMIN} is not installed (apt-get install rabbitmq-server)");
        return;
    }
    let mut broker = Broker::start_with_config(2, FILE);
    let port = broker.http_port();
    let run = |args: &[&str]| {
        let (ok, text) = rabbitmqadmin(port, args);
        assert!(ok, "rabbitmqadmin {args:?} failed: {text}");
        text
    };
    let text = run(&[
        "declare",
        "user",
        "name=app",
        "password=pw",
        "tags=monitoring",
    ]);
    assert!(text.contains("user declared"), "{text}");
    let text = run(&[
        "declare",
        "permission",
        "vhost=/",
        "user=app",
        "configure=.*",
        "write=.*",
        "read=.*",
    ]);
    assert!(text.contains("permission declared"), "{text}");
    let users = run(&["-f", "tsv", "-q", "list", "users", "name", "tags"]);
    assert!(
        users
            .lines()
            .any(|l| l == "app\t[\"monitoring\"]" || l == "app\tmonitoring"),
        "{users}"
    );
    let perms = run(&[
        "-f",
        "tsv",
        "-q",
        "list",
        "permissions",
        "user",
        "vhost",
        "configure",
    ]);
    assert!(perms.lines().any(|l| l == "app\t/\t.*"), "{perms}");
    let vhosts = run(&["-f", "tsv", "-q", "list", "vhosts", "name"]);
    assert_eq!(vhosts.trim(), "/", "{vhosts}");
    let text = run(&["declare", "vhost", "name=shop"]);
    assert!(text.contains("vhost declared"), "{text}");
    let vhosts = run(&["-f", "tsv", "-q", "list", "vhosts", "name"]);
    assert_eq!(
        vhosts.lines().collect::<Vec<_>>(),
        ["/", "shop"],
        "{vhosts}"
    );
    crate::login_to(&broker, "guest", "guest", "shop").expect("guest got full permissions on shop");
    let text = run(&["delete", "vhost", "name=shop"]);
    assert!(text.contains("vhost deleted"), "{text}");
    assert_eq!(
        crate::login_to(&broker, "guest", "guest", "shop")
            .err()
            .map(|e| e.0),
        Some(530)
    );
    login(&broker, "app", "pw").expect("the declared user logs in and opens /");
    let text = run(&["delete", "permission", "vhost=/", "user=app"]);
    assert!(text.contains("permission deleted"), "{text}");
    assert_eq!(login(&broker, "app", "pw").err().map(|e| e.0), Some(530));
    let text = run(&["delete", "user", "name=app"]);
    assert!(text.contains("user deleted"), "{text}");
    assert_eq!(login(&broker, "app", "pw").err().map(|e| e.0), Some(403));
    let (ok, text) = rabbitmqadmin(port, &["delete", "user", "name=app"]);
    assert!(
        !ok && text.contains("Not found: /api/users/app"),
        "deleting a missing user: {text}"
    );
    assert_eq!(broker.stop().code(), Some(0));
}

/// rabbitmqadmin's topology, message, limit and definitions commands: declare and list
/// an exchange, a queue and a binding, publish and get through them, purge, a vhost
/// limit, a policy, close a connection, export and import, then delete what it declared.
#[test]
fn rabbitmqadmin_declares_publishes_gets_exports_and_imports() {
    if !std::path::Path::new(RABBITMQADMIN).exists() {
        eprintln!("SKIP rabbitmqadmin_declares_publishes_gets_exports_and_imports: {RABBITMQADMIN} is not installed (apt-get install rabbitmq-server)");
        return;
    }
    let dir = crate::common::TestDir::new("sluice-rabbitmqadmin");
    let broker = Broker::start_with_config(2, FILE);
    let port = broker.http_port();
    let run = |args: &[&str]| {
        let (ok, text) = rabbitmqadmin(port, args);
        assert!(ok, "rabbitmqadmin {args:?} failed: {text}");
        text
    };
    let tsv = |args: &[&str]| {
        let mut all = vec!["-f", "tsv", "-q"];
        all.extend_from_slice(args);
        run(&all)
    };
    let text = run(&[
        "declare",
        "exchange",
        "name=orders",
        "type=topic",
        "durable=true",
    ]);
    assert!(text.contains("exchange declared"), "{text}");
    let text = run(&["declare", "queue", "name=eu", "durable=true"]);
    assert!(text.contains("queue declared"), "{text}");
    let text = run(&[
        "declare",
        "binding",
        "source=orders",
        "destination=eu",
        "routing_key=eu.#",
    ]);
    assert!(text.contains("binding declared"), "{text}");
    let exchanges = tsv(&["list", "exchanges", "name", "type", "durable"]);
    assert!(
        exchanges.lines().any(|l| l == "orders\ttopic\tTrue"),
        "{exchanges}"
    );
    let bindings = tsv(&["list", "bindings", "source", "destination", "routing_key"]);
    assert!(
        bindings.lines().any(|l| l == "orders\teu\teu.#"),
        "{bindings}"
    );

    // Publish through the binding, then look without taking, then take.
    for i in 0..3 {
        let payload = format!("payload=order {i}");
        let text = run(&["publish", "exchange=orders", "routing_key=eu.de", &payload]);
        assert!(text.contains("Message published"), "{text}");
    }
    let text = run(&[
        "publish",
        "exchange=orders",
        "routing_key=us.ny",
        "payload=x",
    ]);
    assert!(text.contains("Message published but NOT routed"), "{text}");
    let queues = tsv(&["list", "queues", "name", "messages"]);
    assert!(queues.lines().any(|l| l == "eu\t3"), "{queues}");
    let got = run(&[
        "-f",
        "raw_json",
        "get",
        "queue=eu",
        "ackmode=ack_requeue_true",
        "count=2",
    ]);
    let got: serde_json::Value = serde_json::from_str(got.trim()).expect("raw_json of get");
    let payloads: Vec<&str> = got
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|m| m["payload"].as_str())
        .collect();
    assert_eq!(payloads, ["order 0", "order 1"]);
    let got = run(&[
        "-f",
        "raw_json",
        "get",
        "queue=eu",
        "ackmode=ack_requeue_false",
        "count=1",
    ]);
    assert!(got.contains("\"order 0\""), "{got}");
    let queues = tsv(&["list", "queues", "name", "messages"]);
    assert!(queues.lines().any(|l| l == "eu\t2"), "{queues}");
    let text = run(&["purge", "queue", "name=eu"]);
    assert!(text.contains("queue purged"), "{text}");
    let queues = tsv(&["list", "queues", "name", "messages"]);
    assert!(queues.lines().any(|l| l == "eu\t0"), "{queues}");

    // A vhost limit, listed and deleted.
    let text = run(&[
        "declare",
        "vhost_limit",
        "vhost=/",
        "name=max-queues",
        "value=10",
    ]);
    assert!(text.contains("vhost_limit declared"), "{text}");
    let limits = run(&["-f", "raw_json", "list", "vhost_limits"]);
    assert!(
        limits.contains("\"max-queues\": 10") || limits.contains("\"max-queues\":10"),
        "{limits}"
    );
    let text = run(&["delete", "vhost_limit", "vhost=/", "name=max-queues"]);
    assert!(text.contains("vhost_limit deleted"), "{text}");

    // A policy: declared, in force on the queue at once, listed, deleted.
    for i in 0..3 {
        let payload = format!("payload=again {i}");
        run(&["publish", "exchange=orders", "routing_key=eu.de", &payload]);
    }
    let text = run(&[
        "declare",
        "policy",
        "name=eu-cap",
        "pattern=^eu$",
        "apply-to=queues",
        "definition={\"max-length\": 1}",
        "priority=3",
    ]);
    assert!(text.contains("policy declared"), "{text}");
    let policies = tsv(&[
        "list", "policies", "name", "pattern", "apply-to", "priority",
    ]);
    assert!(
        policies.lines().any(|l| l == "eu-cap\t^eu$\tqueues\t3"),
        "{policies}"
    );
    let queues = tsv(&["list", "queues", "name", "messages", "policy"]);
    assert!(queues.lines().any(|l| l == "eu\t1\teu-cap"), "{queues}");
    let text = run(&["delete", "policy", "name=eu-cap"]);
    assert!(text.contains("policy deleted"), "{text}");
    let policies = tsv(&["list", "policies", "name"]);
    assert_eq!(policies.trim(), "", "{policies}");
    run(&["purge", "queue", "name=eu"]);

    // Close a connection by the name it is listed under.
    let mut held = login(&broker, "guest", "guest").expect("open");
    let names = tsv(&["list", "connections", "name"]);
    let name = names
        .lines()
        .next()
        .expect("one connection listed")
        .to_owned();
    let text = run(&["close", "connection", &format!("name={name}")]);
    assert!(text.contains("connection closed"), "{text}");
    match held.read_until_closed(crate::common::EVENT_TIMEOUT) {
        Some(crate::common::raw::Ending::Close { code, .. }) => assert_eq!(code, 320),
        other => panic!("expected connection.close, got {other:?}"),
    }

    // Export, delete everything, import: it is all back.
    let file = dir.path().join("defs.json");
    let file = file.to_str().expect("utf-8 path");
    let text = run(&["export", file]);
    assert!(text.contains("Exported definitions"), "{text}");
    let text = run(&[
        "delete",
        "binding",
        "source=orders",
        "destination_type=queue",
        "destination=eu",
        "properties_key=eu.%23",
    ]);
    assert!(text.contains("binding deleted"), "{text}");
    let text = run(&["delete", "queue", "name=eu"]);
    assert!(text.contains("queue deleted"), "{text}");
    let text = run(&["delete", "exchange", "name=orders"]);
    assert!(text.contains("exchange deleted"), "{text}");
    let queues = tsv(&["list", "queues", "name"]);
    assert!(!queues.lines().any(|l| l == "eu"), "{queues}");
    let (ok, text) = rabbitmqadmin(port, &["delete", "queue", "name=eu"]);
    assert!(
        !ok && text.contains("Not found"),
        "deleting a missing queue: {text}"
    );
    let text = run(&["import", file]);
    assert!(text.contains("Uploaded definitions"), "{text}");
    let bindings = tsv(&["list", "bindings", "source", "destination", "routing_key"]);
    assert!(
        bindings.lines().any(|l| l == "orders\teu\teu.#"),
        "{bindings}"
    );
    let text = run(&[
        "publish",
        "exchange=orders",
        "routing_key=eu.fr",
        "payload=back",
    ]);
    assert!(text.contains("Message published"), "{text}");
    assert!(!text.contains("NOT routed"), "{text}");
}

//! `sluice import-definitions` on a RabbitMQ export (tests/fixtures/rabbitmq-definitions.json,
//! written in the shape `rabbitmqctl export_definitions` produces, its hashes computed
//! with Python's hashlib): the configuration it prints starts a broker on the data dir it
//! filled, the imported user logs in with its password, and messages follow the imported
//! bindings into the imported queues.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use amqprs::channel::{BasicGetArguments, BasicPublishArguments, Channel};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::BasicProperties;

use crate::common::{close_amqprs, Broker, TestDir};
use crate::login;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rabbitmq-definitions.json")
}

fn import(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("import-definitions")
        .arg(fixture())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run sluice import-definitions")
}

async fn get_body(ch: &Channel, queue: &str) -> Vec<u8> {
    for _ in 0..250 {
        if let Some((_, _, body)) = ch
            .basic_get(BasicGetArguments::new(queue).no_ack(true).finish())
            .await
            .expect("basic.get")
        {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("nothing arrived in {queue}");
}

const SKIPPED: &str = "skipped: 1 bindings, 2 exchanges, 2 global_parameters, 1 parameters, \
                       2 permissions, 1 policies, 3 queues, 1 topic_permissions, 1 user limits, 2 users";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn imported_definitions_work_on_a_broker() {
    crate::common::bounded(imported_definitions_run()).await
}

async fn imported_definitions_run() {
    let dir = TestDir::new("sluice-import");
    let data = dir.path().join("data");
    let config = dir.path().join("imported.toml");
    let out = import(&[
        "--data-dir".as_ref(),
        data.as_os_str(),
        "--output".as_ref(),
        config.as_os_str(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    assert!(out.stdout.is_empty(), "--output given: nothing on stdout");
    assert!(
        stderr.contains(&format!(
            "added to {}: 1 policies, 2 exchanges, 2 queues, 4 bindings\n",
            data.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("{SKIPPED}\n")), "{stderr}");
    for reason in [
        "  exchanges: 'ephemeral' in vhost '/': not durable",
        "  exchanges: 'later' in vhost '/': unknown exchange type 'x-delayed-message'",
        "  queues: 'scratch' in vhost '/': not durable",
        "  queues: 'payments' in vhost '/': argument x-queue-type refused",
        "  queues: 'orders.us' in vhost 'staging': its vhost is not defined",
        "  bindings: 'orders' -> 'scratch' in vhost '/': an end is not a durable object",
        "  users: 'legacy': rabbit_password_hashing_md5 is not accepted",
        "  users: 'x509-client': no password hash",
        "  permissions: user 'importer' on vhost 'staging': the vhost is not defined",
        "  global_parameters: 'cluster_name': not imported by sluice",
        "  policies: 'mirror' in vhost '/': Validation failed: [{<<\"ha-mode\">>,<<\"all\">>}] \
         are not recognised policy settings",
    ] {
        assert!(stderr.contains(reason), "missing {reason:?} in\n{stderr}");
    }
    let toml = std::fs::read_to_string(&config).expect("config written");

    // The data dir is refused while a broker holds it.
    let broker = Broker::start_in(&data, 2, Some(&toml));
    // The policy is in the store and in force on the queues it matches.
    let queue = crate::common::http::request(
        broker.http_port(),
        "GET",
        "/api/queues/%2F/orders.eu",
        Some(("importer", "imp0rt!")),
    );
    assert_eq!(queue.status, 200, "{}", queue.body);
    assert_eq!(queue.json()["policy"], "ttl");
    assert_eq!(
        queue.json()["effective_policy_definition"],
        serde_json::json!({"message-ttl": 60000})
    );
    let locked = import(&["--data-dir".as_ref(), data.as_os_str()]);
    assert_eq!(locked.status.code(), Some(1));
    let err = String::from_utf8_lossy(&locked.stderr);
    assert!(
        err.contains("LOCK is locked: another sluice uses this data dir"),
        "{err}"
    );

    // The imported user, with its RabbitMQ password, through amqprs.
    let args = OpenConnectionArguments::new("127.0.0.1", broker.port(), "importer", "imp0rt!");
    let conn = Connection::open(&args).await.expect("importer logs in");
    let ch = conn.open_channel(None).await.expect("channel");
    let publish = |exchange: &'static str, key: &'static str, body: &'static [u8]| {
        let ch = ch.clone();
        async move {
            ch.basic_publish(
                BasicProperties::default(),
                body.to_vec(),
                BasicPublishArguments::new(exchange, key),
            )
            .await
            .expect("basic.publish");
        }
    };
    publish("orders", "eu.new", b"order 1").await;
    assert_eq!(get_body(&ch, "orders.eu").await, b"order 1");
    // orders -> audit (exchange binding) -> audit.log.
    assert_eq!(get_body(&ch, "audit.log").await, b"order 1");
    publish("amq.topic", "legacy.eu", b"via amq.topic").await;
    assert_eq!(get_body(&ch, "orders.eu").await, b"via amq.topic");
    close_amqprs(conn).await;

    // The SHA-512 user logs in, may read, may not write; guest is not a user any more;
    // importer's restricted grant on prod applies.
    let mut r = login(&broker, "reporter", "five12", "/").expect("reporter logs in");
    r.channel_open(1);
    r.publish(
        1,
        "orders",
        "eu.x",
        &crate::common::wire::Props::default(),
        b"no",
    )
    .expect("publish");
    let (code, text) = r.expect_channel_close(1);
    assert_eq!(
        (code, text.as_str()),
        (
            403,
            "ACCESS_REFUSED - write access to exchange 'orders' in vhost '/' refused for user 'reporter'"
        )
    );
    assert_eq!(
        login(&broker, "guest", "guest", "/").err().map(|e| e.0),
        Some(403)
    );
    assert!(login(&broker, "reporter", "five12", "prod").is_err());
    let mut p = login(&broker, "importer", "imp0rt!", "prod").expect("importer on prod");
    p.channel_open(1);
    let decl = crate::common::wire::Enc::new()
        .short(0)
        .shortstr("orders.x")
        .bits(&[false, false, false, false, false])
        .table(&vec![])
        .done();
    p.send_method(1, crate::common::wire::m::QUEUE_DECLARE, &decl)
        .expect("send");
    let (code, text) = p.expect_channel_close(1);
    assert_eq!(
        (code, text.as_str()),
        (
            403,
            "ACCESS_REFUSED - configure access to queue 'orders.x' in vhost 'prod' refused for user 'importer'"
        )
    );
}

#[test]
fn without_a_data_dir_the_config_goes_to_stdout() {
    let out = import(&[]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("[vhosts]\nnames = [\"/\", \"prod\"]\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "  { name = \"importer\", password_hash = \"Gis8TUynIOQALo1YOd3fBqE1koN6M+BeKk4lVqwF2I54q5iI\", \
             hashing_algorithm = \"rabbit_password_hashing_sha256\", tags = [\"administrator\"] },"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("tags = [\"monitoring\", \"management\"]"),
        "comma-separated tags of older exports: {stdout}"
    );
    assert!(
        stdout.contains(
            "  { user = \"importer\", vhost = \"prod\", configure = \"^$\", write = \"^orders$\", read = '^orders\\.' },"
        ),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("  queues: 'orders.eu': not applied (no --data-dir given)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("  policies: 'ttl': not applied (no --data-dir given)"),
        "policies live in the store: {stderr}"
    );
}

/// What would break the broker or be cut short is refused with a reason, never written:
/// a PCRE-only permission pattern (a lookahead would stop the broker at start), an
/// exchange name and a routing key longer than a short string. The written config holds
/// password hashes, so only its owner may read it.
#[test]
fn unusable_entries_are_skipped_and_the_output_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TestDir::new("sluice-import");
    let long = "x".repeat(256);
    let export = serde_json::json!({
        "users": [{
            "name": "pcre",
            "password_hash": "Gis8TUynIOQALo1YOd3fBqE1koN6M+BeKk4lVqwF2I54q5iI",
            "hashing_algorithm": "rabbit_password_hashing_sha256",
            "tags": []
        }],
        "vhosts": [{ "name": "/" }],
        "permissions": [{
            "user": "pcre", "vhost": "/",
            "configure": "^(?!amq\\.).*", "write": ".*", "read": ".*"
        }],
        "exchanges": [
            { "name": long, "vhost": "/", "type": "topic", "durable": true,
              "auto_delete": false, "internal": false, "arguments": {} },
            { "name": "events", "vhost": "/", "type": "topic", "durable": true,
              "auto_delete": false, "internal": false, "arguments": {} }
        ],
        "queues": [{ "name": "audit", "vhost": "/", "durable": true,
                     "auto_delete": false, "arguments": {} }],
        "bindings": [{ "source": "events", "vhost": "/", "destination": "audit",
                       "destination_type": "queue", "routing_key": long, "arguments": {} }]
    });
    let file = dir.path().join("export.json");
    std::fs::write(&file, export.to_string()).expect("write export");
    let data = dir.path().join("data");
    let config = dir.path().join("imported.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("import-definitions")
        .arg(&file)
        .arg("--data-dir")
        .arg(&data)
        .arg("--output")
        .arg(&config)
        .stdin(Stdio::null())
        .output()
        .expect("run sluice import-definitions");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("added to ")
            && stderr.contains(": 0 policies, 1 exchanges, 1 queues, 0 bindings\n"),
        "{stderr}"
    );
    for reason in [
        "  permissions: user 'pcre' on vhost '/': configure: invalid regex '^(?!amq\\.).*'",
        &format!("  exchanges: '{long}' in vhost '/': a name longer than 255 bytes"),
        "  bindings: 'events' -> 'audit' in vhost '/': a name or routing key longer than 255 bytes",
    ] {
        assert!(stderr.contains(reason), "missing {reason:?} in\n{stderr}");
    }
    let toml = std::fs::read_to_string(&config).expect("config written");
    assert!(!toml.contains("(?!"), "{toml}");
    let mode = std::fs::metadata(&config)
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
    // The written configuration starts a broker.
    let mut broker = Broker::start_in(&data, 1, Some(&toml));
    broker.assert_healthy();
}

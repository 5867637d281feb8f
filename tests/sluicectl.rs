//! `sluicectl` (the built binary) against a child broker: objects declared, listed and
//! deleted with exact output, publish then get, users / permissions / limits in effect,
//! exit statuses (1 with the API's reason, 1 on a wrong password, non-zero when the
//! server is unreachable, 2 for usage), health checks, the password from
//! SLUICE_PASSWORD and --password-file, global flags after the subcommand, and export
//! then import into a second broker; https with `--cacert` through a TLS proxy
//! (`sluicectl/https.rs`: the management listener has no TLS option of its own).

// Pki::client is for tests/tls.rs only.
#[allow(dead_code)]
#[path = "tls/certs.rs"]
mod certs;
mod common;
#[path = "sluicectl/https.rs"]
mod https;

use std::process::{Command, Output};

use common::raw::RawConn;
use common::wire::m;
use common::{Broker, TestDir};

pub const FILE: &str = r#"
[auth]
users = [{ name = "guest", password = "guest", tags = ["administrator"] }]
permissions = [{ user = "guest", vhost = "/", configure = ".*", write = ".*", read = ".*" }]
"#;

fn ctl_env(port: u16, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluicectl"));
    cmd.arg("--server")
        .arg(format!("127.0.0.1:{port}"))
        .args(args)
        .env_remove("SLUICE_PASSWORD");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run sluicectl")
}

fn ctl(port: u16, args: &[&str]) -> Output {
    ctl_env(port, args, &[])
}

/// Runs and expects success: stdout.
fn ok(port: u16, args: &[&str]) -> String {
    let out = ctl(port, args);
    assert!(out.status.success(), "sluicectl {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Logs in with PLAIN and opens `/`: Ok, or the close's code.
fn login(broker: &Broker) -> Result<(), u16> {
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    c.send_start_ok("PLAIN", b"\0guest\0guest");
    let mth = c.read_method().expect("tune or close");
    if mth.id == m::CONNECTION_CLOSE {
        return Err(mth.dec().short());
    }
    c.send_tune_ok(common::raw::Tune {
        channel_max: 2047,
        frame_max: 131072,
        heartbeat: 0,
    });
    c.send_open("/");
    let mth = c.read_method().expect("open-ok or close");
    if mth.id == m::CONNECTION_CLOSE {
        return Err(mth.dec().short());
    }
    Ok(())
}

#[test]
fn objects_round_trip_with_exact_output() {
    let broker = Broker::start_with_config(1, FILE);
    let port = broker.http_port();
    assert_eq!(ok(port, &["declare-queue", "ctl.q", "--durable"]), "");
    assert_eq!(
        ok(port, &["declare-exchange", "ctl.x", "--type", "direct"]),
        ""
    );
    let queues = ok(port, &["queues"]);
    let row = queues
        .lines()
        .find(|l| l.contains("ctl.q"))
        .expect("listed");
    assert!(row.starts_with("/      ctl.q"), "{queues}");
    let exchanges = ok(port, &["exchanges", "--vhost", "/"]);
    assert!(
        exchanges
            .lines()
            .any(|l| l == "/      ctl.x        direct   false"),
        "{exchanges}"
    );
    let bind = [
        "--source",
        "ctl.x",
        "--destination",
        "ctl.q",
        "--routing-key",
        "k1",
    ];
    assert_eq!(ok(port, &[&["bind"][..], &bind].concat()), "");
    let bindings = ok(port, &["bindings"]);
    assert!(
        bindings
            .lines()
            .any(|l| l == "/      ctl.x   ctl.q        queue  k1"),
        "{bindings}"
    );
    assert_eq!(ok(port, &[&["unbind"][..], &bind].concat()), "");
    assert!(!ok(port, &["bindings"]).contains("k1"));
    // Unbinding again: nothing to remove.
    let again = ctl(port, &[&["unbind"][..], &bind].concat());
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    assert_eq!(ok(port, &["delete-exchange", "ctl.x"]), "");
    assert_eq!(ok(port, &["delete-queue", "ctl.q"]), "");
    assert!(!ok(port, &["queues"]).contains("ctl.q"));
    // A missing queue: 1, the API's reason on stderr.
    let missing = ctl(port, &["delete-queue", "ctl.q"]);
    assert_eq!(missing.status.code(), Some(1));
    assert_eq!(
        stderr(&missing),
        "sluicectl: DELETE /api/queues/%2F/ctl%2Eq: 404 Not Found\n"
    );
    // Usage errors: clap's 2.
    assert_eq!(ctl(port, &["declare-exchange", "x"]).status.code(), Some(2));
    assert_eq!(ctl(port, &["no-such-command"]).status.code(), Some(2));
}

#[test]
fn publish_then_get_returns_the_payload() {
    let broker = Broker::start_with_config(2, FILE);
    let port = broker.http_port();
    ok(port, &["declare-queue", "ctl.m"]);
    let publish = [
        "publish",
        "--routing-key",
        "ctl.m",
        "--payload",
        "hello ctl",
    ];
    assert_eq!(ok(port, &publish), "routed\n");
    let lost = ["publish", "--routing-key", "nowhere", "--payload", "x"];
    assert_eq!(ok(port, &lost), "not routed\n");
    let mandatory = ctl(port, &[&lost[..], &["--mandatory"]].concat());
    assert_eq!(mandatory.status.code(), Some(1));
    assert_eq!(stderr(&mandatory), "sluicectl: not routed\n");
    let got = ok(port, &["get", "ctl.m", "--ackmode", "ack_requeue_false"]);
    assert_eq!(
        got,
        "routing_key  exchange  message_count  redelivered  payload_bytes  payload\n\
         ctl.m                  0              false        9              hello ctl\n"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(port, &["get", "ctl.m", "--json"])).expect("json");
    assert_eq!(json, serde_json::json!([]));
}

#[test]
fn users_permissions_and_limits_take_effect() {
    let broker = Broker::start_with_config(1, FILE);
    let port = broker.http_port();
    ok(
        port,
        &["add-user", "ctl.u", "secret", "--tags", "management"],
    );
    let users = ok(port, &["users"]);
    assert!(users.lines().any(|l| l == "ctl.u  management"), "{users}");
    ok(port, &["set-permissions", "ctl.u", "--read", "^ctl"]);
    let perms = ok(port, &["permissions", "--vhost", "/"]);
    assert!(
        perms
            .lines()
            .any(|l| l == "/      ctl.u  .*         .*     ^ctl"),
        "{perms}"
    );
    // The new user can use the API with its password.
    assert!(ok(port, &["--user", "ctl.u", "--password", "secret", "queues"]).starts_with("vhost"));
    ok(port, &["clear-permissions", "ctl.u"]);
    assert!(!ok(port, &["permissions"]).contains("ctl.u"));
    ok(port, &["delete-user", "ctl.u"]);
    assert!(!ok(port, &["users"]).contains("ctl.u"));
    ok(port, &["add-vhost", "ctl.v"]);
    assert!(ok(port, &["vhosts"]).lines().any(|l| l == "ctl.v"));
    ok(port, &["delete-vhost", "ctl.v"]);
    assert!(!ok(port, &["vhosts"]).contains("ctl.v"));

    assert_eq!(login(&broker), Ok(()));
    ok(port, &["set-limit", "vhost", "/", "max-connections", "0"]);
    assert_eq!(login(&broker), Err(530));
    ok(port, &["clear-limit", "vhost", "/", "max-connections"]);
    assert_eq!(login(&broker), Ok(()));
    ok(
        port,
        &["set-limit", "user", "guest", "max-connections", "0"],
    );
    assert_eq!(login(&broker), Err(530));
    ok(port, &["clear-limit", "user", "guest", "max-connections"]);
    assert_eq!(login(&broker), Ok(()));
}

#[test]
fn policies_are_set_listed_and_cleared() {
    let broker = Broker::start_with_config(1, FILE);
    let port = broker.http_port();
    ok(port, &["declare-queue", "ctl.p"]);
    for i in 0..4 {
        let payload = format!("m{i}");
        ok(
            port,
            &["publish", "--routing-key", "ctl.p", "--payload", &payload],
        );
    }
    let set = [
        "set-policy",
        "cap",
        "^ctl\\.",
        "{\"max-length\": 2}",
        "--apply-to",
        "queues",
        "--priority",
        "4",
    ];
    assert_eq!(ok(port, &set), "");
    assert_eq!(
        ok(port, &["policies"]),
        "vhost  name  pattern  apply-to  priority  definition\n\
         /      cap   ^ctl\\.   queues    4         {\"max-length\":2}\n"
    );
    let queue: serde_json::Value =
        serde_json::from_str(&ok(port, &["queues", "--json"])).expect("json");
    let queue = &queue[0];
    assert_eq!(
        (&queue["name"], &queue["messages"], &queue["policy"]),
        (
            &serde_json::json!("ctl.p"),
            &serde_json::json!(2),
            &serde_json::json!("cap")
        )
    );
    let bad = ctl(port, &["set-policy", "bad", ".*", "{\"nope\": 1}"]);
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    assert!(
        stderr(&bad).contains("are not recognised policy settings"),
        "{bad:?}"
    );
    assert_eq!(ok(port, &["clear-policy", "cap"]), "");
    assert_eq!(
        ok(port, &["policies"]),
        "vhost  name  pattern  apply-to  priority  definition\n"
    );
    assert_eq!(ctl(port, &["clear-policy", "cap"]).status.code(), Some(1));
}

#[test]
fn exit_statuses_passwords_and_global_flags() {
    let broker = Broker::start_with_config(1, FILE);
    let port = broker.http_port();
    let wrong = ctl(port, &["--password", "nope", "queues"]);
    assert_eq!(wrong.status.code(), Some(1), "{wrong:?}");
    assert!(stderr(&wrong).contains("401"), "{wrong:?}");
    // SLUICE_PASSWORD, overridden by the flag.
    let env = [("SLUICE_PASSWORD", "nope")];
    assert_eq!(ctl_env(port, &["queues"], &env).status.code(), Some(1));
    let flag = ctl_env(port, &["queues", "--password", "guest"], &env);
    assert!(flag.status.success(), "{flag:?}");
    let env_ok = ctl_env(port, &["overview"], &[("SLUICE_PASSWORD", "guest")]);
    assert!(env_ok.status.success());
    // --password-file: its first line; it wins over the env.
    let dir = TestDir::new("sluicectl-pw");
    let file = dir.path().join("pw");
    std::fs::write(&file, "guest\n").expect("write");
    let path = file.to_str().expect("utf-8");
    let from_file = ctl_env(port, &["queues", "--password-file", path], &env);
    assert!(from_file.status.success(), "{from_file:?}");
    // Flags after the subcommand.
    let json: serde_json::Value =
        serde_json::from_str(&ok(port, &["exchanges", "--json", "--vhost", "/"])).expect("json");
    assert!(json.as_array().is_some_and(|a| !a.is_empty()));
    // Health.
    assert_eq!(ok(port, &["check-running"]), "ok\n");
    assert_eq!(ok(port, &["check-alarms"]), "ok\n");
    assert_eq!(ok(port, &["check-virtual-hosts"]), "ok\n");
    assert_eq!(ok(port, &["aliveness"]), "ok\n");
    assert_eq!(
        ok(port, &["check-port", &broker.port().to_string()]),
        "ok\n"
    );
    assert_eq!(ok(port, &["check-protocol", "amqp"]), "ok\n");
    let closed = ctl(port, &["check-port", "1"]);
    assert_eq!(closed.status.code(), Some(1));
    assert_eq!(
        stderr(&closed),
        "sluicectl: GET /api/health/checks/port-listener/1: 503 No active listener\n"
    );
    // top: a header, then the queues.
    let top = ok(port, &["top", "--iterations", "1"]);
    assert!(top.starts_with("node "), "{top}");
    assert!(
        top.lines().nth(1).is_some_and(|l| l.starts_with("vhost")),
        "{top}"
    );
    // Unreachable: port 1 is closed.
    let down = ctl(1, &["queues"]);
    assert_eq!(down.status.code(), Some(1));
    assert!(
        stderr(&down).starts_with("sluicectl: cannot reach http://127.0.0.1:1"),
        "{down:?}"
    );
    // https against the plain listener: the handshake fails, non-zero.
    let tls = Command::new(env!("CARGO_BIN_EXE_sluicectl"))
        .args(["--server", &format!("https://127.0.0.1:{port}"), "queues"])
        .output()
        .expect("run");
    assert_eq!(tls.status.code(), Some(1), "{tls:?}");
    let bad_ca = ctl(port, &["--cacert", "/nonexistent.pem", "queues"]);
    assert_eq!(bad_ca.status.code(), Some(1));
}

#[test]
fn export_then_import_into_a_second_broker() {
    let first = Broker::start_with_config(1, FILE);
    let second = Broker::start_with_config(1, FILE);
    ok(
        first.http_port(),
        &["declare-queue", "ctl.exported", "--durable"],
    );
    let dir = TestDir::new("sluicectl-defs");
    let file = dir.path().join("defs.json");
    let path = file.to_str().expect("utf-8");
    assert_eq!(ok(first.http_port(), &["export", path]), "");
    let stdout = ok(first.http_port(), &["export", "-"]);
    assert!(stdout.contains("ctl.exported"));
    assert!(!ok(second.http_port(), &["queues"]).contains("ctl.exported"));
    assert_eq!(ok(second.http_port(), &["import", path]), "");
    assert!(ok(second.http_port(), &["queues"]).contains("ctl.exported"));
}

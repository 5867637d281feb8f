//! RabbitMQ's own rabbitmqadmin (from Debian's rabbitmq-server package) against sluice's
//! management API: declare, list and delete users, permissions and vhosts. Skips
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

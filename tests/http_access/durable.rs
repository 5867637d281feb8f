//! Run-time changes of users and permissions are in the store: they survive a kill -9
//! and a restart, win over the file user by user (a user deleted at run time stays
//! deleted although the file names it), and the file's other users still follow it,
//! SIGHUP included. The start-up line USR-1005 says where each user came from.

use serde_json::json;

use crate::common::{Broker, TestDir, EVENT_TIMEOUT};
use crate::{as_user, login, FILE, LOGIN_REFUSED};

fn refused(broker: &Broker, user: &str, password: &str) -> bool {
    login(broker, user, password).err() == Some((403, LOGIN_REFUSED.to_owned()))
}

#[test]
fn run_time_changes_survive_kill_9_and_win_over_the_file() {
    let dir = TestDir::new("sluice-access-durable");
    let data = dir.path().join("data");
    let mut broker = Broker::start_in(&data, 2, Some(FILE));
    let port = broker.http_port();
    let guest = ("guest", "guest");
    let r = as_user(
        port,
        guest,
        "PUT",
        "/api/users/ops",
        Some(json!({"password": "o", "tags": ["administrator"]})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let full = json!({"configure": ".*", "write": ".*", "read": ".*"});
    let r = as_user(port, guest, "PUT", "/api/permissions/%2F/ops", Some(full));
    assert_eq!(r.status, 201, "{}", r.body);
    // The file's watcher gets a new password; the file's guest is deleted (by ops).
    let r = as_user(
        port,
        guest,
        "PUT",
        "/api/users/watcher",
        Some(json!({"password": "w2", "tags": "management"})),
    );
    assert_eq!(r.status, 204, "{}", r.body);
    let r = as_user(port, ("ops", "o"), "DELETE", "/api/users/guest", None);
    assert_eq!(r.status, 204, "{}", r.body);
    assert!(refused(&broker, "guest", "guest"));
    broker.kill9();

    let mut broker = Broker::start_in(&data, 2, Some(FILE));
    let sources = broker
        .wait_for_log("USR-1005", EVENT_TIMEOUT)
        .expect("USR-1005");
    assert!(
        sources.ends_with(
            "USR-1005 : Users : from the configuration file none : from the store (changed at run time) 'ops', 'watcher' : deleted at run time 'guest'"
        ),
        "{sources}"
    );
    login(&broker, "ops", "o").expect("ops and its permission survived kill -9");
    assert!(refused(&broker, "guest", "guest"), "guest stays deleted");
    assert!(refused(&broker, "watcher", "w"), "the file's password lost");
    let mut w = login(&broker, "watcher", "w2").expect("the store's password won");
    w.channel_open(1);
    let port = broker.http_port();
    let users = as_user(port, ("ops", "o"), "GET", "/api/users", None).json();
    let names: Vec<&str> = users
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|u| u["name"].as_str())
        .collect();
    assert_eq!(names, ["ops", "watcher"]);
    // The guest's permission went with it.
    let perms = as_user(port, ("ops", "o"), "GET", "/api/permissions", None).json();
    assert!(
        perms
            .as_array()
            .expect("list")
            .iter()
            .all(|p| p["user"] != "guest"),
        "{perms}"
    );

    // SIGHUP: a user the file adds is in force; the file's change of a user the store
    // changed is not (the store wins).
    let file = broker.config_path().expect("config").to_path_buf();
    let changed = FILE
        .replace("{ name = \"watcher\", password = \"w\"", "{ name = \"watcher\", password = \"w3\"")
        .replace(
            "  { name = \"watcher\"",
            "  { name = \"fresh\", password = \"f\" },\n  { name = \"watcher\"",
        )
        .replace(
            "permissions = [",
            "permissions = [\n  { user = \"fresh\", vhost = \"/\", configure = \".*\", write = \".*\", read = \".*\" },",
        );
    std::fs::write(&file, changed).expect("rewrite config");
    broker.signal(libc::SIGHUP);
    broker
        .wait_for_log("BRK-1018", EVENT_TIMEOUT)
        .expect("BRK-1018");
    login(&broker, "fresh", "f").expect("the file's new user");
    assert!(
        refused(&broker, "watcher", "w3"),
        "the file does not override the store"
    );
    login(&broker, "watcher", "w2").expect("the store's password still");
    w.channel_open(2);
    assert_eq!(broker.stop().code(), Some(0));

    // A clean restart reads the compacted log the same way.
    let mut broker = Broker::start_in(&data, 1, Some(FILE));
    login(&broker, "ops", "o").expect("ops after a clean restart and a shard-count change");
    assert!(refused(&broker, "guest", "guest"));
    assert_eq!(broker.stop().code(), Some(0));
}

//! Users and permissions administered over the management API while the broker runs,
//! as RabbitMQ's API does it: created, changed and deleted without a restart, applied to
//! logins and to open connections at once (a deleted user's connections are closed with
//! 320, a changed permission counts from the next operation), durable across a restart
//! and a kill -9, with the file's users as the initial state (`http_access/*`: what the
//! store and the file each win, vhosts created and deleted at run time, vhost and user
//! limits changed at run time, and rabbitmqadmin
//! itself).

mod common;

#[path = "http_access/durable.rs"]
mod durable;
#[path = "http_access/limits.rs"]
mod limits;
#[path = "http_access/rabbitmqadmin.rs"]
mod rabbitmqadmin;
#[path = "http_access/vhosts.rs"]
mod vhosts;

use serde_json::json;

use common::http::{self, Response};
use common::raw::Ending;
use common::wire::m;
use common::{Broker, RawConn};

/// guest is an administrator; permissions are configured (RabbitMQ's rules).
pub const FILE: &str = r#"
[auth]
users = [
  { name = "guest", password = "guest", tags = ["administrator"] },
  { name = "watcher", password = "w", tags = ["management"] },
]
permissions = [
  { user = "guest", vhost = "/", configure = ".*", write = ".*", read = ".*" },
  { user = "watcher", vhost = "/", configure = "", write = "", read = ".*" },
]
"#;

pub const LOGIN_REFUSED: &str = "ACCESS_REFUSED - Login was refused using authentication \
                                 mechanism PLAIN. For details see the broker logfile.";

/// A request as `guest` (blocking; call from `spawn_blocking` or a plain test).
pub fn admin(port: u16, method: &str, path: &str, body: Option<serde_json::Value>) -> Response {
    as_user(port, ("guest", "guest"), method, path, body)
}

pub fn as_user(
    port: u16,
    user: (&str, &str),
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> Response {
    match body {
        Some(b) => http::request_json(port, method, path, Some(user), &b),
        None => http::request(port, method, path, Some(user)),
    }
}

/// Logs in with PLAIN and opens `/`: the open connection, or the close's code and text.
pub fn login(broker: &Broker, user: &str, password: &str) -> Result<RawConn, (u16, String)> {
    login_to(broker, user, password, "/")
}

/// As [`login`], opening `vhost`.
pub fn login_to(
    broker: &Broker,
    user: &str,
    password: &str,
    vhost: &str,
) -> Result<RawConn, (u16, String)> {
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    c.send_start_ok("PLAIN", format!("\0{user}\0{password}").as_bytes());
    let mth = c.read_method().expect("tune or close");
    if mth.id == m::CONNECTION_CLOSE {
        let mut d = mth.dec();
        return Err((d.short(), d.shortstr()));
    }
    assert_eq!(mth.id, m::CONNECTION_TUNE, "expected connection.tune");
    c.send_tune_ok(common::raw::Tune {
        channel_max: 2047,
        frame_max: 131072,
        heartbeat: 0,
    });
    c.send_open(vhost);
    let mth = c.read_method().expect("open-ok or close");
    if mth.id == m::CONNECTION_CLOSE {
        let mut d = mth.dec();
        return Err((d.short(), d.shortstr()));
    }
    assert_eq!(mth.id, m::CONNECTION_OPEN_OK);
    Ok(c)
}

/// Declares `name` on a new channel: `Ok` or the channel close's (code, text).
pub fn declare(c: &mut RawConn, channel: u16, name: &str) -> Result<(), (u16, String)> {
    c.channel_open(channel);
    c.send_queue_declare(channel, name, [false, false, true]);
    let mth = c.read_method().expect("declare-ok or close");
    if mth.id == m::CHANNEL_CLOSE {
        let mut d = mth.dec();
        let refused = (d.short(), d.shortstr());
        c.send_method(channel, m::CHANNEL_CLOSE_OK, &[])
            .expect("close-ok");
        return Err(refused);
    }
    assert_eq!(mth.id, m::QUEUE_DECLARE_OK, "on channel {channel}");
    Ok(())
}

crate::shard_tests!(users_and_permissions_change_while_connections_stay);

async fn users_and_permissions_change_while_connections_stay(shards: usize) {
    let mut broker = Broker::start_with_config(shards, FILE);
    let port = broker.http_port();
    let api = move |method: &'static str, path: &'static str, body: Option<serde_json::Value>| {
        tokio::task::spawn_blocking(move || admin(port, method, path, body))
    };

    // A new user: 201, then 204 for the same PUT.
    let body = json!({"password": "s3cret", "tags": "management,monitoring"});
    let created = api("PUT", "/api/users/app", Some(body.clone()))
        .await
        .unwrap();
    assert_eq!(created.status, 201, "{}", created.body);
    let again = api("PUT", "/api/users/app", Some(body)).await.unwrap();
    assert_eq!(again.status, 204, "{}", again.body);
    let shown = api("GET", "/api/users/app", None).await.unwrap().json();
    assert_eq!(shown["name"], "app");
    assert_eq!(shown["tags"], json!(["management", "monitoring"]));
    assert_eq!(shown["hashing_algorithm"], "rabbit_password_hashing_sha256");
    let hash = shown["password_hash"].as_str().expect("hash");
    assert_eq!(
        hash.len(),
        48,
        "base64 of 4 salt bytes and a SHA-256: {hash}"
    );
    let listed = api("GET", "/api/users", None).await.unwrap().json();
    let names: Vec<&str> = listed
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|u| u["name"].as_str())
        .collect();
    assert_eq!(names, ["guest", "watcher", "app"]);

    // Logged in, but with no permission on "/" yet: RabbitMQ's 530.
    assert_eq!(
        login(&broker, "app", "s3cret").err(),
        Some((
            530,
            "NOT_ALLOWED - access to vhost '/' refused for user 'app'".to_owned()
        ))
    );
    let grant = json!({"configure": "^app\\.", "write": ".*", "read": ".*"});
    let set = api("PUT", "/api/permissions/%2F/app", Some(grant))
        .await
        .unwrap();
    assert_eq!(set.status, 201, "{}", set.body);
    let perm = api("GET", "/api/permissions/%2F/app", None)
        .await
        .unwrap()
        .json();
    assert_eq!(
        perm,
        json!({"user": "app", "vhost": "/", "configure": "^app\\.", "write": ".*", "read": ".*"})
    );
    let mut conn = login(&broker, "app", "s3cret").expect("app opens / now");
    assert_eq!(
        declare(&mut conn, 1, "other"),
        Err((
            403,
            "ACCESS_REFUSED - configure access to queue 'other' in vhost '/' refused for user 'app'"
                .to_owned()
        ))
    );
    declare(&mut conn, 2, "app.q").expect("allowed by ^app\\.");

    // A wider grant counts from the next operation on the same connection.
    let wider = json!({"configure": ".*", "write": ".*", "read": ".*"});
    let changed = api("PUT", "/api/permissions/%2F/app", Some(wider))
        .await
        .unwrap();
    assert_eq!(changed.status, 204, "{}", changed.body);
    declare(&mut conn, 3, "other").expect("the changed permission is in force");

    // Tags are checked at the next request: app is not an administrator.
    let as_app = tokio::task::spawn_blocking(move || {
        as_user(port, ("app", "s3cret"), "GET", "/api/users", None)
    })
    .await
    .unwrap();
    assert_eq!(as_app.status, 401);
    assert_eq!(as_app.json()["reason"], "Not administrator user");

    // Deleting the user closes its connection as RabbitMQ does, and its permissions go.
    let deleted = api("DELETE", "/api/users/app", None).await.unwrap();
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    let ending = tokio::task::spawn_blocking(move || {
        let ending = conn.read_until_closed(common::EVENT_TIMEOUT);
        (ending, conn)
    })
    .await
    .unwrap()
    .0;
    match ending {
        Some(Ending::Close { code, text, .. }) => {
            assert_eq!(
                (code, text.as_str()),
                (320, "CONNECTION_FORCED - user 'app' is deleted")
            )
        }
        other => panic!("expected connection.close, got {other:?}"),
    }
    assert_eq!(
        api("GET", "/api/users/app", None).await.unwrap().status,
        404
    );
    assert_eq!(
        api("GET", "/api/permissions/%2F/app", None)
            .await
            .unwrap()
            .status,
        404
    );
    assert_eq!(
        login(&broker, "app", "s3cret").err(),
        Some((403, LOGIN_REFUSED.to_owned()))
    );
    assert_eq!(
        api("DELETE", "/api/users/app", None).await.unwrap().status,
        404
    );
    assert!(
        broker.count_logs("USR-1001 : User put : 'app' tags [management,monitoring] by 'guest'")
            >= 1
    );
    assert_eq!(
        broker.count_logs("USR-1002 : User deleted : 'app' by 'guest'"),
        1
    );
    assert!(
        !broker.logs().iter().any(|l| l.contains("s3cret")),
        "a password was logged"
    );
    broker.assert_healthy();
    assert_eq!(broker.stop().code(), Some(0));
}

/// RabbitMQ's refusals: each a 400 with its reason, nothing changed.
#[test]
fn bad_requests_are_refused_with_reasons() {
    let mut broker = Broker::start_with_config(1, FILE);
    let port = broker.http_port();
    let cases = [
        (
            "PUT",
            "/api/users/x",
            json!({"password": "a", "password_hash": "b", "tags": ""}),
            "both_password_and_password_hash_are_provided",
        ),
        (
            "PUT",
            "/api/users/x",
            json!({"password": "a"}),
            "tags_not_present",
        ),
        (
            "PUT",
            "/api/users/x",
            json!({"password_hash": "!!", "tags": ""}),
            "password_hash is not base64",
        ),
        (
            "PUT",
            "/api/users/x",
            json!({"password_hash": "aGFzaA==", "hashing_algorithm": "rabbit_password_hashing_md5", "tags": ""}),
            "rabbit_password_hashing_md5 is not accepted",
        ),
        (
            "PUT",
            "/api/permissions/%2F/nobody",
            json!({"configure": "", "write": "", "read": ""}),
            "vhost_or_user_not_found",
        ),
        (
            "PUT",
            "/api/permissions/nowhere/watcher",
            json!({"configure": "", "write": "", "read": ""}),
            "vhost_or_user_not_found",
        ),
        (
            "PUT",
            "/api/permissions/%2F/watcher",
            json!({"configure": ".*"}),
            "Missing key(s): write, read",
        ),
        (
            "PUT",
            "/api/permissions/%2F/watcher",
            json!({"configure": "(", "write": "", "read": ""}),
            "configure: invalid regex '('",
        ),
        (
            "PUT",
            "/api/users/sluice-federation-link",
            json!({"password": "a", "tags": ""}),
            "reserved",
        ),
    ];
    for (method, path, body, reason) in cases {
        let r = admin(port, method, path, Some(body.clone()));
        assert_eq!(r.status, 400, "{method} {path} {body}: {}", r.body);
        let got = r.json()["reason"].as_str().unwrap_or_default().to_owned();
        assert!(got.contains(reason), "{method} {path} {body}: {got}");
    }
    let not_json = http::request(port, "PUT", "/api/users/x", Some(("guest", "guest")));
    assert_eq!(not_json.status, 400, "{}", not_json.body);
    // A management user may not read users or permissions.
    for path in ["/api/users", "/api/users/guest", "/api/permissions"] {
        let r = as_user(port, ("watcher", "w"), "GET", path, None);
        assert_eq!(
            (r.status, r.json()["reason"].clone()),
            (401, json!("Not administrator user")),
            "{path}"
        );
    }
    // Nothing was created.
    let users = admin(port, "GET", "/api/users", None).json();
    assert_eq!(users.as_array().map(Vec::len), Some(2), "{users}");
    assert_eq!(
        broker.count_logs("USR-100"),
        1,
        "only the start-up USR-1005"
    );
    assert_eq!(broker.stop().code(), Some(0));
}

/// Where the file configures no permissions (every user may do everything), the first
/// permission set over the API puts RabbitMQ's rules in force without taking anybody's
/// access away: the others' implicit full grants are written out.
#[test]
fn the_first_permission_keeps_everyone_elses_access() {
    let toml =
        "[auth]\nusers = [{ name = \"guest\", password = \"guest\", tags = [\"administrator\"] }, \
                { name = \"app\", password = \"a\" }]\n";
    let mut broker = Broker::start_with_config(1, toml);
    let port = broker.http_port();
    let all = admin(port, "GET", "/api/permissions", None).json();
    assert_eq!(
        all.as_array().map(Vec::len),
        Some(2),
        "implicit grants listed: {all}"
    );
    let narrow = json!({"configure": "^app\\.", "write": "^app\\.", "read": "^app\\."});
    let r = admin(port, "PUT", "/api/permissions/%2F/app", Some(narrow));
    assert_eq!(r.status, 204, "app had an implicit grant: {}", r.body);
    let guest = admin(port, "GET", "/api/permissions/%2F/guest", None).json();
    assert_eq!(guest["configure"], ".*", "{guest}");
    let mut g = login(&broker, "guest", "guest").expect("guest still opens /");
    declare(&mut g, 1, "anything").expect("guest keeps full access");
    let mut a = login(&broker, "app", "a").expect("app opens /");
    assert_eq!(declare(&mut a, 1, "other").map_err(|e| e.0), Err(403));
    // A user created now has no permission, as in RabbitMQ.
    let r = admin(
        port,
        "PUT",
        "/api/users/late",
        Some(json!({"password": "l", "tags": ""})),
    );
    assert_eq!(r.status, 201);
    assert_eq!(login(&broker, "late", "l").err().map(|e| e.0), Some(530));
    assert_eq!(broker.stop().code(), Some(0));
}

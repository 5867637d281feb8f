//! Who may change what, as RabbitMQ decides it. Definitions are `is_authorized_admin`:
//! only administrators, for GET as for POST (401 `Not administrator user`). Queues,
//! exchanges and bindings are `is_authorized_vhost` and then the user's own
//! permissions (`direct_request` runs the method as the user): a management-family user
//! with permissions on the vhost may declare what its configure pattern allows; a vhost
//! without permissions is 401 `User not authorised to access virtual host` (an
//! administrator passes that check, and is then refused by its permissions, 401
//! `Access refused.`); a user without a management tag is 401 `Not management user`.
//! Reading stays open to monitoring users.

use serde_json::json;

use crate::common::Broker;
use crate::{as_user, assert_empty, assert_error};

const FILE: &str = r#"
[auth]
users = [
  { name = "guest", password = "guest", tags = ["administrator"] },
  { name = "boss", password = "b", tags = ["administrator"] },
  { name = "mgr", password = "p", tags = ["management"] },
  { name = "mon", password = "m", tags = ["monitoring"] },
  { name = "plain", password = "p" },
]
permissions = [
  { user = "guest", vhost = "/", configure = ".*", write = ".*", read = ".*" },
  { user = "mgr", vhost = "/", configure = "^mgr\\.", write = ".*", read = ".*" },
  { user = "plain", vhost = "/", configure = ".*", write = ".*", read = ".*" },
]
"#;

const NOT_ADMIN: &str = "Not administrator user";
const NOT_VHOST: &str = "User not authorised to access virtual host";
const REFUSED: &str = "Access refused.";

#[test]
fn changes_need_rabbitmqs_tags_and_permissions() {
    let broker = Broker::start_with_config(1, FILE);
    let port = broker.http_port();
    let guest = ("guest", "guest");
    let (boss, mgr, mon, plain) = (("boss", "b"), ("mgr", "p"), ("mon", "m"), ("plain", "p"));
    let q = Some(json!({"durable": false}));

    // Definitions: administrators only, reading included.
    for user in [mgr, mon] {
        for method in ["GET", "POST"] {
            let body = (method == "POST").then(|| json!({}));
            let r = as_user(port, user, method, "/api/definitions", body);
            assert_error(&r, 401, "not_authorised", NOT_ADMIN);
        }
    }
    let r = as_user(port, boss, "GET", "/api/definitions", None);
    assert_eq!(r.status, 200, "{}", r.body);
    // Without a management tag nothing is served at all.
    for (method, path) in [
        ("GET", "/api/definitions"),
        ("PUT", "/api/queues/%2F/plain.q"),
        ("GET", "/api/queues"),
    ] {
        let r = as_user(port, plain, method, path, q.clone());
        assert_error(&r, 401, "not_authorised", "Not management user");
    }

    // A management user declares what its configure pattern allows, no more.
    assert_empty(
        &as_user(port, mgr, "PUT", "/api/queues/%2F/mgr.q", q.clone()),
        201,
    );
    let r = as_user(port, mgr, "PUT", "/api/queues/%2F/other", q.clone());
    assert_error(&r, 401, "not_authorised", REFUSED);
    let r = as_user(port, mgr, "PUT", "/api/exchanges/%2F/x", Some(json!({})));
    assert_error(&r, 401, "not_authorised", REFUSED);
    assert_empty(
        &as_user(
            port,
            mgr,
            "PUT",
            "/api/exchanges/%2F/mgr.x",
            Some(json!({})),
        ),
        201,
    );
    // A binding needs write on the queue and read on the exchange.
    let r = as_user(
        port,
        mgr,
        "POST",
        "/api/bindings/%2F/e/mgr.x/q/mgr.q",
        Some(json!({"routing_key": "k"})),
    );
    assert_empty(&r, 201);
    assert_empty(
        &as_user(
            port,
            mgr,
            "DELETE",
            "/api/bindings/%2F/e/mgr.x/q/mgr.q/k",
            None,
        ),
        204,
    );

    // A monitoring user without permissions on "/" reads, and changes nothing there.
    for path in [
        "/api/queues/%2F/mgr.q",
        "/api/exchanges/%2F/mgr.x",
        "/api/bindings",
        "/api/queues/%2F/mgr.q/bindings",
    ] {
        let r = as_user(port, mon, "GET", path, None);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
    }
    for (method, path) in [
        ("PUT", "/api/queues/%2F/mgr.mon"),
        ("DELETE", "/api/queues/%2F/mgr.q"),
        ("PUT", "/api/exchanges/%2F/mgr.mon"),
        ("DELETE", "/api/exchanges/%2F/mgr.x"),
        ("POST", "/api/bindings/%2F/e/mgr.x/q/mgr.q"),
    ] {
        let r = as_user(port, mon, method, path, q.clone());
        assert_error(&r, 401, "not_authorised", NOT_VHOST);
    }
    // An administrator reaches every vhost, but declares as its permissions allow.
    let r = as_user(port, boss, "PUT", "/api/queues/%2F/boss.q", q.clone());
    assert_error(&r, 401, "not_authorised", REFUSED);
    let r = as_user(port, boss, "DELETE", "/api/queues/%2F/mgr.q", None);
    assert_error(&r, 401, "not_authorised", REFUSED);

    // Nothing refused was changed; the management user deletes its own.
    let r = as_user(port, guest, "GET", "/api/queues/%2F/mgr.q", None);
    assert_eq!(r.status, 200, "{}", r.body);
    for gone in ["/api/queues/%2F/other", "/api/queues/%2F/boss.q"] {
        assert_eq!(
            as_user(port, guest, "GET", gone, None).status,
            404,
            "{gone}"
        );
    }
    assert_empty(
        &as_user(port, mgr, "DELETE", "/api/queues/%2F/mgr.q", None),
        204,
    );
    assert_empty(
        &as_user(port, mgr, "DELETE", "/api/exchanges/%2F/mgr.x", None),
        204,
    );
}

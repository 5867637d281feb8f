//! Vhosts created and deleted at run time, as RabbitMQ's API does it: a new vhost is
//! usable on every shard when the PUT is answered (its creator gets full permissions on
//! it), its durable queues and messages survive a kill -9, and deleting it closes its
//! connections (320), deletes its queues with their messages and its exchanges, and
//! refuses new connections to it — also after a restart.

use serde_json::json;

use crate::common::raw::Ending;
use crate::common::wire::{m, Props};
use crate::common::{Broker, TestDir, EVENT_TIMEOUT};
use crate::{admin, declare, login_to, FILE};

fn persistent() -> Props {
    Props {
        delivery_mode: Some(2),
        ..Props::default()
    }
}

/// `messages` of a queue as /api/queues/{vhost}/{name} gives it, or the status.
fn messages(port: u16, vhost: &str, queue: &str) -> Result<u64, u16> {
    let r = admin(port, "GET", &format!("/api/queues/{vhost}/{queue}"), None);
    if r.status != 200 {
        return Err(r.status);
    }
    Ok(r.json()["messages"].as_u64().unwrap_or(u64::MAX))
}

#[test]
fn vhosts_are_created_and_deleted_at_run_time() {
    let dir = TestDir::new("sluice-access-vhosts");
    let data = dir.path().join("data");
    let mut broker = Broker::start_in(&data, 2, Some(FILE));
    let port = broker.http_port();
    let body = json!({"description": "the shop", "tags": "prod,eu"});
    let r = admin(port, "PUT", "/api/vhosts/orders", Some(body.clone()));
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        admin(port, "PUT", "/api/vhosts/orders", Some(body)).status,
        204
    );
    let shown = admin(port, "GET", "/api/vhosts/orders", None).json();
    assert_eq!(shown["description"], "the shop");
    assert_eq!(shown["tags"], json!(["prod", "eu"]));
    let names: Vec<String> = admin(port, "GET", "/api/vhosts", None)
        .json()
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|v| v["name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(names, ["/", "orders"]);
    // The creator was given full permissions on it; the others have none.
    let perm = admin(port, "GET", "/api/permissions/orders/guest", None).json();
    assert_eq!(perm["configure"], ".*", "{perm}");
    assert_eq!(
        login_to(&broker, "watcher", "w", "orders").err(),
        Some((
            530,
            "NOT_ALLOWED - access to vhost 'orders' refused for user 'watcher'".to_owned()
        ))
    );

    // Usable at once from connections on every shard: a durable queue with persistent
    // messages, published over several connections (the kernel spreads them).
    let mut first = login_to(&broker, "guest", "guest", "orders").expect("open orders");
    first.channel_open(1);
    first.queue_declare(1, "q", true, false, false);
    for i in 0..6 {
        let mut c = login_to(&broker, "guest", "guest", "orders").expect("open orders");
        c.channel_open(1);
        // Confirmed: on disk before the kill -9 below.
        c.confirm_select(1);
        c.publish(1, "", "q", &persistent(), format!("m{i}").as_bytes())
            .expect("publish");
        c.expect_method(1, m::BASIC_ACK);
        c.channel_open(2);
        c.send_queue_declare(2, "q", [true, false, false]);
        c.expect_method(2, m::QUEUE_DECLARE_OK);
    }
    assert!(crate::common::wait_until(EVENT_TIMEOUT, || messages(
        port, "orders", "q"
    ) == Ok(6)));
    // The same names in "/" are other objects.
    assert_eq!(messages(port, "%2F", "q"), Err(404));
    drop(first);
    broker.kill9();

    let mut broker = Broker::start_in(&data, 2, Some(FILE));
    let port = broker.http_port();
    assert_eq!(
        messages(port, "orders", "q"),
        Ok(6),
        "the vhost's durable queue recovered"
    );
    let mut held = login_to(&broker, "guest", "guest", "orders").expect("orders after kill -9");
    held.channel_open(1);
    declare(&mut held, 2, "transient").expect("declare in orders");

    // Deleting it closes its connections, and its queues go with their messages.
    let r = admin(port, "DELETE", "/api/vhosts/orders", None);
    assert_eq!(r.status, 204, "{}", r.body);
    match held.read_until_closed(EVENT_TIMEOUT) {
        Some(Ending::Close { code, text, .. }) => assert_eq!(
            (code, text.as_str()),
            (320, "CONNECTION_FORCED - vhost 'orders' is deleted")
        ),
        other => panic!("expected connection.close, got {other:?}"),
    }
    assert_eq!(admin(port, "GET", "/api/vhosts/orders", None).status, 404);
    assert_eq!(
        admin(port, "DELETE", "/api/vhosts/orders", None).status,
        404
    );
    assert_eq!(
        login_to(&broker, "guest", "guest", "orders").err(),
        Some((530, "NOT_ALLOWED - vhost 'orders' not found".to_owned()))
    );
    let queues = admin(port, "GET", "/api/queues", None).json();
    assert!(
        queues
            .as_array()
            .expect("list")
            .iter()
            .all(|q| q["vhost"] != "orders"),
        "{queues}"
    );
    assert_eq!(
        admin(port, "GET", "/api/permissions/orders/guest", None).status,
        404
    );
    assert_eq!(
        broker.count_logs("USR-1008 : Vhost deleted : 'orders' by 'guest'"),
        1
    );

    // Created again, it starts empty.
    assert_eq!(admin(port, "PUT", "/api/vhosts/orders", None).status, 201);
    assert_eq!(messages(port, "orders", "q"), Err(404));
    let mut again = login_to(&broker, "guest", "guest", "orders").expect("the new orders");
    declare(&mut again, 1, "fresh").expect("declare in the new orders");
    assert_eq!(
        admin(port, "DELETE", "/api/vhosts/orders", None).status,
        204
    );
    assert_eq!(broker.stop().code(), Some(0));

    // After a restart it stays deleted and nothing of it is recovered.
    let mut broker = Broker::start_in(&data, 2, Some(FILE));
    let port = broker.http_port();
    assert_eq!(admin(port, "GET", "/api/vhosts/orders", None).status, 404);
    assert_eq!(
        login_to(&broker, "guest", "guest", "orders")
            .err()
            .map(|e| e.0),
        Some(530)
    );
    assert_eq!(
        broker.count_logs("not loaded: the vhost is not configured"),
        0
    );
    assert_eq!(broker.stop().code(), Some(0));
}

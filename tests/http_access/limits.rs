//! Vhost and user limits changed over the management API while the broker runs, as
//! RabbitMQ's `/api/vhost-limits` and `/api/user-limits` do it: a limit set is in force
//! on every shard when the PUT is answered, the connections already open stay (the
//! count starts from them), 0 admits nothing, a negative value is no limit, DELETE puts
//! the file's state back, and a change survives a kill -9.

use serde_json::json;

use crate::common::raw::RawConn;
use crate::common::wire::{m, Enc};
use crate::common::{Broker, TestDir};
use crate::{admin, as_user, declare, login, FILE};

fn put_limit(port: u16, path: &str, value: i64) -> u16 {
    let r = admin(port, "PUT", path, Some(json!({ "value": value })));
    assert!(
        r.status == 204 || r.status >= 400,
        "{} {}",
        r.status,
        r.body
    );
    r.status
}

fn refused_vhost(limit: u32) -> Option<(u16, String)> {
    Some((
        530,
        format!(
            "NOT_ALLOWED - access to vhost '/' refused for user 'guest': connection limit \
             ({limit}) is reached"
        ),
    ))
}

/// Opens channel `n`: `Ok` or the connection close's (code, text) that refused it.
fn open_channel(c: &mut RawConn, n: u16) -> Result<(), (u16, String)> {
    c.send_method(n, m::CHANNEL_OPEN, &Enc::new().shortstr("").done())
        .expect("channel.open");
    let mth = c.read_method().expect("open-ok or close");
    if mth.id == m::CONNECTION_CLOSE {
        let mut d = mth.dec();
        return Err((d.short(), d.shortstr()));
    }
    assert_eq!(mth.id, m::CHANNEL_OPEN_OK, "on channel {n}");
    Ok(())
}

crate::shard_tests!(vhost_limits_change_while_connections_stay);

async fn vhost_limits_change_while_connections_stay(shards: usize) {
    tokio::task::spawn_blocking(move || vhost_limits(shards))
        .await
        .expect("test thread");
}

fn vhost_limits(shards: usize) {
    let broker = Broker::start_with_config(shards, FILE);
    let port = broker.http_port();
    assert_eq!(
        admin(port, "GET", "/api/vhost-limits", None).json(),
        json!([])
    );
    // Three connections (spread over the shards by the kernel) are open before the limit.
    let mut held: Vec<RawConn> = (0..3)
        .map(|_| login(&broker, "guest", "guest").expect("open before the limit"))
        .collect();
    assert_eq!(
        put_limit(port, "/api/vhost-limits/%2F/max-connections", 2),
        204
    );
    assert_eq!(
        admin(port, "GET", "/api/vhost-limits", None).json(),
        json!([{"vhost": "/", "value": {"max-connections": 2}}])
    );
    assert_eq!(
        admin(port, "GET", "/api/vhost-limits/%2F", None).json(),
        json!([{"vhost": "/", "value": {"max-connections": 2}}])
    );
    // Over the new limit: the three stay and work, a fourth is refused on every shard.
    for c in held.iter_mut() {
        c.channel_open(1);
    }
    for _ in 0..4 {
        assert_eq!(login(&broker, "guest", "guest").err(), refused_vhost(2));
    }
    // Below the limit again once two have gone: one more fits, then none.
    held.truncate(1);
    let mut admitted = None;
    for _ in 0..200 {
        match login(&broker, "guest", "guest") {
            Ok(c) => {
                admitted = Some(c);
                break;
            }
            Err(refusal) => {
                assert_eq!(Some(refusal), refused_vhost(2));
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
    assert!(
        admitted.is_some(),
        "a place freed by the closed connections"
    );
    assert_eq!(login(&broker, "guest", "guest").err(), refused_vhost(2));

    // 0 admits nothing; a negative value is no limit (RabbitMQ's semantics).
    assert_eq!(
        put_limit(port, "/api/vhost-limits/%2F/max-connections", 0),
        204
    );
    assert_eq!(login(&broker, "guest", "guest").err(), refused_vhost(0));
    assert_eq!(
        put_limit(port, "/api/vhost-limits/%2F/max-connections", -1),
        204
    );
    let more: Vec<RawConn> = (0..4)
        .map(|_| login(&broker, "guest", "guest").expect("no limit"))
        .collect();
    assert_eq!(
        admin(port, "GET", "/api/vhost-limits", None).json(),
        json!([]),
        "a negative limit is no limit"
    );
    drop(more);

    // max-queues counts the queues already there.
    let mut c = login(&broker, "guest", "guest").expect("open");
    declare(&mut c, 1, "a").expect("declare a");
    assert_eq!(put_limit(port, "/api/vhost-limits/%2F/max-queues", 1), 204);
    assert_eq!(
        declare(&mut c, 2, "b"),
        Err((
            406,
            "PRECONDITION_FAILED - cannot declare queue 'b': queue limit in vhost '/' (1) is \
             reached"
                .to_owned()
        ))
    );
    let r = admin(port, "DELETE", "/api/vhost-limits/%2F/max-queues", None);
    assert_eq!(r.status, 204, "{}", r.body);
    declare(&mut c, 3, "b").expect("no queue limit after DELETE");
    // Clearing a limit that is not set is no error, as in RabbitMQ.
    let r = admin(port, "DELETE", "/api/vhost-limits/%2F/max-queues", None);
    assert_eq!(r.status, 204, "{}", r.body);

    // RabbitMQ's refusals: an unknown limit, a value that is not an integer, a missing
    // vhost, a user who is not an administrator.
    let r = admin(
        port,
        "PUT",
        "/api/vhost-limits/%2F/max-bananas",
        Some(json!({"value": 1})),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.json()["reason"]
            .as_str()
            .is_some_and(|s| s.contains("Unrecognised terms")),
        "{}",
        r.body
    );
    let r = admin(
        port,
        "PUT",
        "/api/vhost-limits/%2F/max-queues",
        Some(json!({"value": "ten"})),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    let r = admin(
        port,
        "PUT",
        "/api/vhost-limits/%2F/max-queues",
        Some(json!({"amount": 3})),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    let r = admin(
        port,
        "PUT",
        "/api/vhost-limits/nowhere/max-queues",
        Some(json!({"value": 3})),
    );
    assert_eq!(r.status, 404, "{}", r.body);
    let r = as_user(
        port,
        ("watcher", "w"),
        "PUT",
        "/api/vhost-limits/%2F/max-queues",
        Some(json!({"value": 3})),
    );
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(r.json()["reason"], "Not administrator user");
    // A management user reads the limits of the vhosts it can see.
    let r = as_user(port, ("watcher", "w"), "GET", "/api/vhost-limits", None);
    assert_eq!(r.status, 200, "{}", r.body);
}

crate::shard_tests!(user_limits_count_over_all_connections);

async fn user_limits_count_over_all_connections(shards: usize) {
    tokio::task::spawn_blocking(move || user_limits(shards))
        .await
        .expect("test thread");
}

fn user_limits(shards: usize) {
    let broker = Broker::start_with_config(shards, FILE);
    let port = broker.http_port();
    assert_eq!(
        admin(port, "GET", "/api/user-limits", None).json(),
        json!([])
    );
    let mut first = login(&broker, "guest", "guest").expect("open");
    let mut second = login(&broker, "guest", "guest").expect("open");
    open_channel(&mut first, 1).expect("channel before the limit");
    assert_eq!(
        put_limit(port, "/api/user-limits/guest/max-channels", 3),
        204
    );
    assert_eq!(
        admin(port, "GET", "/api/user-limits/guest", None).json(),
        json!([{"user": "guest", "value": {"max-channels": 3}}])
    );
    // Three channels over two connections (on two shards where there are two) fit; the
    // fourth closes its connection with RabbitMQ's 530.
    open_channel(&mut second, 1).expect("second channel of guest");
    open_channel(&mut first, 2).expect("third channel of guest");
    assert_eq!(
        open_channel(&mut second, 2),
        Err((
            530,
            "NOT_ALLOWED - number of channels opened for user 'guest' has reached the \
             maximum allowed user limit of 3"
                .to_owned()
        ))
    );
    assert!(
        broker
            .wait_for_log(
                "CHN-1015 : Refused : 530",
                std::time::Duration::from_secs(5)
            )
            .is_some_and(|l| l.contains("maximum allowed user limit of 3")),
        "the refusal is logged"
    );
    // The refused connection's channel is given back: a new connection gets one
    // (polled: the broker learns of the close asynchronously; each refusal closes the
    // connection that asked).
    drop(second);
    let mut third = None;
    for _ in 0..200 {
        let mut c = login(&broker, "guest", "guest").expect("open");
        if open_channel(&mut c, 1).is_ok() {
            third = Some(c);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut third = third.expect("the closed connection's channel was given back");
    assert!(
        open_channel(&mut third, 2).is_err(),
        "three again: the fourth is refused"
    );

    // max-connections of a user counts its open connections.
    assert_eq!(
        put_limit(port, "/api/user-limits/guest/max-connections", 1),
        204
    );
    assert_eq!(
        login(&broker, "guest", "guest").err(),
        Some((
            530,
            "NOT_ALLOWED - connection refused for user 'guest': user connection limit (1) is \
             reached"
                .to_owned()
        ))
    );
    // Another user is not limited by guest's limit.
    let _watcher = login(&broker, "watcher", "w").expect("watcher is not limited");
    assert_eq!(
        admin(port, "GET", "/api/user-limits", None).json(),
        json!([{"user": "guest", "value": {"max-connections": 1, "max-channels": 3}}])
    );
    // Only administrators see or change user limits.
    let r = as_user(port, ("watcher", "w"), "GET", "/api/user-limits", None);
    assert_eq!(r.status, 401, "{}", r.body);
    let r = admin(
        port,
        "PUT",
        "/api/user-limits/nobody/max-channels",
        Some(json!({"value": 1})),
    );
    assert_eq!(r.status, 404, "{}", r.body);
    let r = admin(
        port,
        "DELETE",
        "/api/user-limits/guest/max-connections",
        None,
    );
    assert_eq!(r.status, 204, "{}", r.body);
    let _again = login(&broker, "guest", "guest").expect("no connection limit");
}

#[test]
fn limits_set_at_run_time_survive_a_kill_9() {
    let dir = TestDir::new("sluice-access-limits");
    let data = dir.path().join("data");
    let mut broker = Broker::start_in(&data, 2, Some(FILE));
    let port = broker.http_port();
    assert_eq!(
        put_limit(port, "/api/vhost-limits/%2F/max-connections", 1),
        204
    );
    assert_eq!(
        put_limit(port, "/api/user-limits/watcher/max-channels", 5),
        204
    );
    assert_eq!(put_limit(port, "/api/vhost-limits/%2F/max-queues", 7), 204);
    let r = admin(port, "DELETE", "/api/vhost-limits/%2F/max-queues", None);
    assert_eq!(r.status, 204, "{}", r.body);
    broker.kill9();

    let broker = Broker::start_in(&data, 2, Some(FILE));
    let port = broker.http_port();
    assert_eq!(
        admin(port, "GET", "/api/vhost-limits", None).json(),
        json!([{"vhost": "/", "value": {"max-connections": 1}}]),
        "the set limit came back, the cleared one did not"
    );
    assert_eq!(
        admin(port, "GET", "/api/user-limits", None).json(),
        json!([{"user": "watcher", "value": {"max-channels": 5}}])
    );
    let _one = login(&broker, "guest", "guest").expect("the one allowed");
    for _ in 0..4 {
        assert_eq!(login(&broker, "guest", "guest").err(), refused_vhost(1));
    }
}

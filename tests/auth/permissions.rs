//! Per-vhost permissions: every kind allowed and refused with RabbitMQ's exact texts,
//! vhost refusal at connection.open, and the refusal log lines.

use std::time::Duration;

use crate::common::wire::{m, Enc, Props, Val};
use crate::common::{http, Broker, RawConn};
use crate::login;

const EXCHANGE_DELETE: (u16, u16) = (40, 20);
const EXCHANGE_DELETE_OK: (u16, u16) = (40, 21);
const EXCHANGE_BIND: (u16, u16) = (40, 30);
const EXCHANGE_BIND_OK: (u16, u16) = (40, 31);
const QUEUE_PURGE: (u16, u16) = (50, 30);
const QUEUE_PURGE_OK: (u16, u16) = (50, 31);
const QUEUE_DELETE: (u16, u16) = (50, 40);
const QUEUE_DELETE_OK: (u16, u16) = (50, 41);

/// guest: everything on both vhosts; u: its own `u.` names on "/" (and the default
/// exchange for publishing), nothing on "other"; w: on "/" only write, and only to `amq.default`.
const CONFIG: &str = r#"
[vhosts]
names = ["/", "other"]

[auth]
users = [
  { name = "guest", password = "guest" },
  { name = "u", password = "p" },
  { name = "w", password = "p" },
  { name = "imp", password = "p", tags = ["impersonator"] },
]
permissions = [
  { user = "guest", vhost = "/", configure = ".*", write = ".*", read = ".*" },
  { user = "guest", vhost = "other", configure = ".*", write = ".*", read = ".*" },
  { user = "u", vhost = "/", configure = '^u\.', write = '^(u\.|amq\.default$)', read = '^u\.' },
  { user = "w", vhost = "/", configure = "", write = '^amq\.default$', read = "" },
  { user = "imp", vhost = "/", configure = "", write = '^amq\.default$', read = "" },
]
"#;

shard_tests!(
    configure_is_checked_on_declare_and_delete,
    write_is_checked_on_publish_and_bind_destinations,
    read_is_checked_on_consume_get_purge_and_bind_sources,
    a_vhost_without_permissions_is_refused_at_open,
    refusals_are_logged_rate_limited,
    a_user_id_property_must_name_the_publisher,
);

fn refused(user: &str, perm: &str, kind: &str, name: &str) -> String {
    format!(
        "ACCESS_REFUSED - {perm} access to {kind} '{name}' in vhost '/' refused for user '{user}'"
    )
}

fn exchange_declare_args(name: &str, kind: &str) -> Vec<u8> {
    Enc::new()
        .short(0)
        .shortstr(name)
        .shortstr(kind)
        .bits(&[false, false, false, false, false])
        .table(&vec![])
        .done()
}

fn queue_declare_args(name: &str) -> Vec<u8> {
    Enc::new()
        .short(0)
        .shortstr(name)
        .bits(&[false, false, false, false, false])
        .table(&vec![])
        .done()
}

fn queue_bind_args(queue: &str, exchange: &str) -> Vec<u8> {
    Enc::new()
        .short(0)
        .shortstr(queue)
        .shortstr(exchange)
        .shortstr("k")
        .bits(&[false])
        .table(&vec![])
        .done()
}

fn exchange_bind_args(destination: &str, source: &str) -> Vec<u8> {
    Enc::new()
        .short(0)
        .shortstr(destination)
        .shortstr(source)
        .shortstr("k")
        .bits(&[false])
        .table(&vec![])
        .done()
}

fn queue_only_args(queue: &str, bits: &[bool]) -> Vec<u8> {
    Enc::new().short(0).shortstr(queue).bits(bits).done()
}

fn consume_args(queue: &str) -> Vec<u8> {
    Enc::new()
        .short(0)
        .shortstr(queue)
        .shortstr("")
        .bits(&[false, true, false, false])
        .table(&vec![])
        .done()
}

/// Sends a method on a fresh channel and expects it to be answered with `ok`.
fn allowed(c: &mut RawConn, ch: u16, id: (u16, u16), args: &[u8], ok: (u16, u16)) {
    c.channel_open(ch);
    c.send_method(ch, id, args).expect("send");
    c.expect_method(ch, ok);
}

/// Sends a method on a fresh channel and returns the channel.close it gets.
fn closed(c: &mut RawConn, ch: u16, id: (u16, u16), args: &[u8]) -> (u16, String) {
    c.channel_open(ch);
    c.send_method(ch, id, args).expect("send");
    c.expect_channel_close(ch)
}

/// guest makes `g.q` and `g.x` (names u may not touch) and `u.src` for u to read.
fn guest_objects(broker: &Broker) {
    let mut g = login(broker, "guest", "guest", "/").expect("guest");
    g.channel_open(1);
    g.queue_declare(1, "g.q", false, false, false);
    g.send_method(
        1,
        m::EXCHANGE_DECLARE,
        &exchange_declare_args("g.x", "direct"),
    )
    .expect("send");
    g.expect_method(1, m::EXCHANGE_DECLARE_OK);
}

async fn configure_is_checked_on_declare_and_delete(shards: usize) {
    let broker = Broker::start_with_config(shards, CONFIG);
    guest_objects(&broker);
    let mut c = login(&broker, "u", "p", "/").expect("u logs in");
    allowed(
        &mut c,
        1,
        m::QUEUE_DECLARE,
        &queue_declare_args("u.q"),
        m::QUEUE_DECLARE_OK,
    );
    allowed(
        &mut c,
        2,
        m::EXCHANGE_DECLARE,
        &exchange_declare_args("u.x", "topic"),
        m::EXCHANGE_DECLARE_OK,
    );
    let (code, text) = closed(&mut c, 3, m::QUEUE_DECLARE, &queue_declare_args("q"));
    assert_eq!((code, text), (403, refused("u", "configure", "queue", "q")));
    // A server-named queue is checked under its generated name.
    let (code, text) = closed(&mut c, 4, m::QUEUE_DECLARE, &queue_declare_args(""));
    assert_eq!(code, 403);
    assert!(
        text.starts_with("ACCESS_REFUSED - configure access to queue 'amq.gen-")
            && text.ends_with("' in vhost '/' refused for user 'u'"),
        "{text}"
    );
    let (code, text) = closed(
        &mut c,
        5,
        m::EXCHANGE_DECLARE,
        &exchange_declare_args("x", "direct"),
    );
    assert_eq!(
        (code, text),
        (403, refused("u", "configure", "exchange", "x"))
    );
    let (code, text) = closed(
        &mut c,
        6,
        QUEUE_DELETE,
        &queue_only_args("g.q", &[false, false, false]),
    );
    assert_eq!(
        (code, text),
        (403, refused("u", "configure", "queue", "g.q"))
    );
    let args = Enc::new()
        .short(0)
        .shortstr("g.x")
        .bits(&[false, false])
        .done();
    let (code, text) = closed(&mut c, 7, EXCHANGE_DELETE, &args);
    assert_eq!(
        (code, text),
        (403, refused("u", "configure", "exchange", "g.x"))
    );
    // Its own objects: deleted.
    allowed(
        &mut c,
        8,
        QUEUE_DELETE,
        &queue_only_args("u.q", &[false, false, false]),
        QUEUE_DELETE_OK,
    );
    let args = Enc::new()
        .short(0)
        .shortstr("u.x")
        .bits(&[false, false])
        .done();
    allowed(&mut c, 9, EXCHANGE_DELETE, &args, EXCHANGE_DELETE_OK);
    // A passive declare needs any permission: u reads nothing of g.q, so refused (as
    // configure, RabbitMQ's text); guest's g.q is still there.
    let passive = Enc::new()
        .short(0)
        .shortstr("g.q")
        .bits(&[true, false, false, false, false])
        .table(&vec![])
        .done();
    let (code, text) = closed(&mut c, 10, m::QUEUE_DECLARE, &passive);
    assert_eq!(
        (code, text),
        (403, refused("u", "configure", "queue", "g.q"))
    );
    // A new queue with a dead-letter exchange, a new exchange with an alternate one:
    // write on that exchange is needed too (and read on the new object).
    let with = |name: &str, key: &str, target: &str, exchange: bool| {
        let table = vec![(key.to_owned(), Val::LongStr(target.as_bytes().to_vec()))];
        let e = Enc::new().short(0).shortstr(name);
        let e = if exchange { e.shortstr("direct") } else { e };
        e.bits(&[false, false, false, false, false])
            .table(&table)
            .done()
    };
    let args = with("u.dlq", "x-dead-letter-exchange", "g.x", false);
    let (code, text) = closed(&mut c, 11, m::QUEUE_DECLARE, &args);
    assert_eq!(
        (code, text),
        (403, refused("u", "write", "exchange", "g.x"))
    );
    let args = with("u.dlq", "x-dead-letter-exchange", "", false);
    allowed(&mut c, 12, m::QUEUE_DECLARE, &args, m::QUEUE_DECLARE_OK);
    let args = with("u.ae", "alternate-exchange", "g.x", true);
    let (code, text) = closed(&mut c, 13, m::EXCHANGE_DECLARE, &args);
    assert_eq!(
        (code, text),
        (403, refused("u", "write", "exchange", "g.x"))
    );
    let args = with("u.ae", "alternate-exchange", "u.other", true);
    allowed(
        &mut c,
        14,
        m::EXCHANGE_DECLARE,
        &args,
        m::EXCHANGE_DECLARE_OK,
    );
}

async fn write_is_checked_on_publish_and_bind_destinations(shards: usize) {
    let broker = Broker::start_with_config(shards, CONFIG);
    guest_objects(&broker);
    let mut c = login(&broker, "u", "p", "/").expect("u logs in");
    allowed(
        &mut c,
        1,
        m::QUEUE_DECLARE,
        &queue_declare_args("u.q"),
        m::QUEUE_DECLARE_OK,
    );
    allowed(
        &mut c,
        2,
        m::EXCHANGE_DECLARE,
        &exchange_declare_args("u.x", "direct"),
        m::EXCHANGE_DECLARE_OK,
    );
    // Default exchange (checked as amq.default): allowed, and the message arrives.
    c.publish(1, "", "u.q", &Props::default(), b"one")
        .expect("publish");
    c.publish(1, "", "u.q", &Props::default(), b"two")
        .expect("publish");
    // queue.bind needs write on the queue (and read on the exchange): u.q from u.x.
    allowed(
        &mut c,
        3,
        m::QUEUE_BIND,
        &queue_bind_args("u.q", "u.x"),
        m::QUEUE_BIND_OK,
    );
    c.publish(3, "u.x", "k", &Props::default(), b"three")
        .expect("publish");
    c.basic_consume(1, "u.q", true);
    for body in [&b"one"[..], b"two", b"three"] {
        assert_eq!(c.read_delivery(1).body, body);
    }
    // A publish to an exchange without write closes the channel (60, 40), as RabbitMQ.
    c.channel_open(4);
    c.publish(4, "g.x", "k", &Props::default(), b"no")
        .expect("publish");
    let close = c.expect_method(4, m::CHANNEL_CLOSE);
    let mut d = close.dec();
    let (code, text, class_id, method_id) = (d.short(), d.shortstr(), d.short(), d.short());
    assert_eq!(
        (code, text, (class_id, method_id)),
        (403, refused("u", "write", "exchange", "g.x"), (60, 40))
    );
    c.send_method(4, m::CHANNEL_CLOSE_OK, &[])
        .expect("close-ok");
    // Alternating exchanges on one channel: the cached decision follows the exchange.
    c.channel_open(5);
    c.publish(5, "", "u.q", &Props::default(), b"four")
        .expect("publish");
    assert_eq!(c.read_delivery(1).body, b"four");
    c.publish(5, "amq.direct", "u.q", &Props::default(), b"no")
        .expect("publish");
    let (code, text) = c.expect_channel_close(5);
    assert_eq!(
        (code, text),
        (403, refused("u", "write", "exchange", "amq.direct"))
    );
    let (code, text) = closed(&mut c, 6, m::QUEUE_BIND, &queue_bind_args("g.q", "u.x"));
    assert_eq!((code, text), (403, refused("u", "write", "queue", "g.q")));
    let (code, text) = closed(&mut c, 7, EXCHANGE_BIND, &exchange_bind_args("g.x", "u.x"));
    assert_eq!(
        (code, text),
        (403, refused("u", "write", "exchange", "g.x"))
    );
    allowed(
        &mut c,
        8,
        m::EXCHANGE_DECLARE,
        &exchange_declare_args("u.y", "direct"),
        m::EXCHANGE_DECLARE_OK,
    );
    allowed(
        &mut c,
        9,
        EXCHANGE_BIND,
        &exchange_bind_args("u.y", "u.x"),
        EXCHANGE_BIND_OK,
    );
    // w may publish to the default exchange only, and only that.
    let mut w = login(&broker, "w", "p", "/").expect("w logs in");
    w.channel_open(1);
    w.publish(1, "", "u.q", &Props::default(), b"from w")
        .expect("publish");
    assert_eq!(c.read_delivery(1).body, b"from w");
    w.publish(1, "u.x", "k", &Props::default(), b"no")
        .expect("publish");
    let (code, text) = w.expect_channel_close(1);
    assert_eq!(
        (code, text),
        (403, refused("w", "write", "exchange", "u.x"))
    );
}

async fn read_is_checked_on_consume_get_purge_and_bind_sources(shards: usize) {
    let broker = Broker::start_with_config(shards, CONFIG);
    guest_objects(&broker);
    let mut c = login(&broker, "u", "p", "/").expect("u logs in");
    allowed(
        &mut c,
        1,
        m::QUEUE_DECLARE,
        &queue_declare_args("u.q"),
        m::QUEUE_DECLARE_OK,
    );
    let g_q = refused("u", "read", "queue", "g.q");
    assert_eq!(
        closed(&mut c, 2, m::BASIC_CONSUME, &consume_args("g.q")),
        (403, g_q.clone())
    );
    assert_eq!(
        closed(&mut c, 3, m::BASIC_GET, &queue_only_args("g.q", &[true])),
        (403, g_q.clone())
    );
    assert_eq!(
        closed(&mut c, 4, QUEUE_PURGE, &queue_only_args("g.q", &[false])),
        (403, g_q)
    );
    // Binding from an exchange needs read on it: amq.topic is not u's.
    let (code, text) = closed(
        &mut c,
        5,
        m::QUEUE_BIND,
        &queue_bind_args("u.q", "amq.topic"),
    );
    assert_eq!(
        (code, text),
        (403, refused("u", "read", "exchange", "amq.topic"))
    );
    allowed(
        &mut c,
        6,
        m::EXCHANGE_DECLARE,
        &exchange_declare_args("u.x", "direct"),
        m::EXCHANGE_DECLARE_OK,
    );
    let (code, text) = closed(&mut c, 7, EXCHANGE_BIND, &exchange_bind_args("u.x", "g.x"));
    assert_eq!((code, text), (403, refused("u", "read", "exchange", "g.x")));
    // Its own queue: get, purge, consume.
    allowed(
        &mut c,
        8,
        m::BASIC_GET,
        &queue_only_args("u.q", &[true]),
        m::BASIC_GET_EMPTY,
    );
    allowed(
        &mut c,
        9,
        QUEUE_PURGE,
        &queue_only_args("u.q", &[false]),
        QUEUE_PURGE_OK,
    );
    allowed(
        &mut c,
        10,
        m::BASIC_CONSUME,
        &consume_args("u.q"),
        m::BASIC_CONSUME_OK,
    );
}

async fn a_vhost_without_permissions_is_refused_at_open(shards: usize) {
    let broker = Broker::start_with_config(shards, CONFIG);
    let refused = login(&broker, "u", "p", "other").err();
    assert_eq!(
        refused,
        Some((
            530,
            "NOT_ALLOWED - access to vhost 'other' refused for user 'u'".to_owned()
        ))
    );
    assert!(broker
        .wait_for_log(
            "CON-1015 : Vhost access refused : access to vhost 'other' refused for user 'u'",
            Duration::from_secs(5)
        )
        .is_some());
    // A burst of refusals: CON-1015 is rate-limited, and no per-connection line
    // repeats it (a user cannot flood the log by opening a vhost it may not).
    for _ in 0..5 {
        assert_eq!(
            login(&broker, "u", "p", "other").err().map(|e| e.0),
            Some(530)
        );
    }
    std::thread::sleep(Duration::from_millis(200));
    let logs = broker.logs();
    let count = |needle: &str| logs.iter().filter(|l| l.contains(needle)).count();
    assert_eq!(count("CON-1013"), 0, "{logs:#?}");
    assert!(count("CON-1015") <= 4, "{logs:#?}");
    // guest has an entry for "other"; an unknown vhost keeps its own answer.
    login(&broker, "guest", "guest", "other").expect("guest on other");
    let unknown = login(&broker, "u", "p", "nosuch").err();
    assert_eq!(
        unknown,
        Some((530, "NOT_ALLOWED - vhost 'nosuch' not found".to_owned()))
    );
}

async fn refusals_are_logged_rate_limited(shards: usize) {
    let broker = Broker::start_with_config(shards, CONFIG);
    let mut c = login(&broker, "u", "p", "/").expect("u logs in");
    const BURST: u16 = 20;
    for ch in 1..=BURST {
        let (code, _) = closed(&mut c, ch, m::QUEUE_DECLARE, &queue_declare_args("nope"));
        assert_eq!(code, 403);
    }
    let line = "CHN-1010 : Access refused : configure access to queue 'nope' in vhost '/' refused for user 'u'";
    assert!(broker.wait_for_log(line, Duration::from_secs(5)).is_some());
    std::thread::sleep(Duration::from_millis(1100));
    let (code, _) = closed(
        &mut c,
        BURST + 1,
        m::QUEUE_DECLARE,
        &queue_declare_args("nope"),
    );
    assert_eq!(code, 403);
    assert!(broker
        .wait_for_log("more refused since the last line)", Duration::from_secs(5))
        .is_some());
    let lines = broker
        .logs()
        .iter()
        .filter(|l| l.contains("CHN-1010"))
        .count();
    assert!(
        (2..=usize::from(BURST)).contains(&lines),
        "{lines} CHN-1010 lines for {} refusals",
        BURST + 1
    );
}

/// RabbitMQ's validated user-id: a publish whose `user-id` property names another user
/// closes the channel with 406 (60, 40), so a consumer can trust the property; the own
/// name passes, and a user tagged `impersonator` may name anyone.
async fn a_user_id_property_must_name_the_publisher(shards: usize) {
    let broker = Broker::start_with_config(shards, CONFIG);
    let mut c = login(&broker, "u", "p", "/").expect("u logs in");
    allowed(
        &mut c,
        1,
        m::QUEUE_DECLARE,
        &queue_declare_args("u.q"),
        m::QUEUE_DECLARE_OK,
    );
    c.basic_consume(1, "u.q", true);
    let as_user = |name: &str| Props {
        user_id: Some(name.to_owned()),
        ..Props::default()
    };
    c.channel_open(2);
    c.publish(2, "", "u.q", &as_user("guest"), b"forged")
        .expect("publish");
    let close = c.expect_method(2, m::CHANNEL_CLOSE);
    let mut d = close.dec();
    let (code, text, class_id, method_id) = (d.short(), d.shortstr(), d.short(), d.short());
    assert_eq!(
        (code, text.as_str(), (class_id, method_id)),
        (
            406,
            "PRECONDITION_FAILED - user_id property set to 'guest' but authenticated user was 'u'",
            (60, 40)
        )
    );
    c.send_method(2, m::CHANNEL_CLOSE_OK, &[])
        .expect("close-ok");
    // In a transaction the publish is refused when it is made, as RabbitMQ does.
    c.channel_open(3);
    c.send_method(3, (90, 10), &[]).expect("tx.select");
    c.expect_method(3, (90, 11));
    c.publish(3, "", "u.q", &as_user("w"), b"forged in tx")
        .expect("publish");
    let (code, text) = c.expect_channel_close(3);
    assert_eq!(
        (code, text.as_str()),
        (
            406,
            "PRECONDITION_FAILED - user_id property set to 'w' but authenticated user was 'u'"
        )
    );
    // Its own name, and an impersonator's claim, are delivered with the property.
    c.channel_open(4);
    c.publish(4, "", "u.q", &as_user("u"), b"own")
        .expect("publish");
    assert_eq!(c.read_delivery(1).body, b"own");
    let mut imp = login(&broker, "imp", "p", "/").expect("imp logs in");
    imp.channel_open(1);
    imp.publish(1, "", "u.q", &as_user("guest"), b"on behalf")
        .expect("publish");
    assert_eq!(c.read_delivery(1).body, b"on behalf");
}

/// Once `[auth] permissions` is set, the management API admits only RabbitMQ's
/// management-family tags (management, policymaker, monitoring, administrator): a user
/// without one gets 401 `Not management user` (and is not counted as a failed login).
/// A `management` user sees the vhosts it has permissions on and its own connections
/// (a vhost it may not see, named in a path, is 401); `monitoring` sees everything;
/// changes need permissions on the vhost (or administrator).
#[test]
fn the_management_api_shows_each_user_what_rabbitmq_would() {
    let config = r#"
[vhosts]
names = ["/", "other"]

[auth]
users = [
  { name = "app", password = "p" },
  { name = "ops", password = "p", tags = ["management"] },
  { name = "mon", password = "p", tags = ["monitoring"] },
  { name = "admin", password = "p", tags = ["administrator"] },
]
permissions = [
  { user = "app", vhost = "/", configure = ".*", write = ".*", read = ".*" },
  { user = "app", vhost = "other", configure = ".*", write = ".*", read = ".*" },
  { user = "ops", vhost = "/", configure = ".*", write = ".*", read = ".*" },
]
"#;
    let broker = Broker::start_with_config(1, config);
    let port = broker.http_port();
    let mut on_root = login(&broker, "app", "p", "/").expect("app on /");
    on_root.channel_open(1);
    on_root.queue_declare(1, "root.q", false, false, false);
    let mut on_other = login(&broker, "app", "p", "other").expect("app on other");
    on_other.channel_open(1);
    on_other.queue_declare(1, "other.q", false, false, false);
    on_other.basic_consume(1, "other.q", true);
    let mut mine = login(&broker, "ops", "p", "/").expect("ops on /");
    mine.channel_open(1);

    for _ in 0..3 {
        let r = http::request(port, "GET", "/api/overview", Some(("app", "p")));
        assert_eq!(r.status, 401, "{}", r.body);
        assert!(r.body.contains("Not management user"), "{}", r.body);
    }
    let get = |user: &str, path: &str| {
        let r = http::request(port, "GET", path, Some((user, "p")));
        assert_eq!(r.status, 200, "{user} {path}: {}", r.body);
        r.json()
    };
    let names = |v: serde_json::Value, field: &str| -> Vec<String> {
        let mut names: Vec<String> = v
            .as_array()
            .expect("array")
            .iter()
            .map(|o| o[field].as_str().unwrap_or_default().to_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(names(get("ops", "/api/queues"), "name"), ["root.q"]);
    assert_eq!(
        names(get("mon", "/api/queues"), "name"),
        ["other.q", "root.q"]
    );
    assert_eq!(names(get("ops", "/api/connections"), "user"), ["ops"]);
    assert_eq!(
        names(get("mon", "/api/connections"), "user"),
        ["app", "app", "ops"]
    );
    assert_eq!(names(get("ops", "/api/channels"), "user"), ["ops"]);
    assert!(get("ops", "/api/consumers")
        .as_array()
        .expect("array")
        .is_empty());
    assert_eq!(
        get("mon", "/api/consumers")
            .as_array()
            .expect("array")
            .len(),
        1
    );
    assert!(names(get("ops", "/api/exchanges"), "vhost")
        .iter()
        .all(|v| v == "/"));
    let r = http::request(port, "GET", "/api/queues/other", Some(("ops", "p")));
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(
        r.body
            .contains("User not authorised to access virtual host"),
        "{}",
        r.body
    );
    // RabbitMQ's is_authorized_vhost: monitoring reads everything, but changes only
    // where it has permissions.
    let r = http::request(port, "DELETE", "/api/queues/%2F/root.q", Some(("mon", "p")));
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(
        r.json(),
        serde_json::json!({"error": "not_authorised", "reason": "User not authorised to access virtual host"})
    );
    assert!(
        !broker.logs().iter().any(|l| l.contains("CON-1008")),
        "a user without a tag is not a failed login"
    );
}

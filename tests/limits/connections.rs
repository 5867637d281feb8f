//! Connection limits: per vhost, per user, per source address, broker-wide (also under
//! concurrent opens across shards), and unauthenticated sockets per shard.

use std::time::{Duration, Instant};

use super::support::{close, open, open_as, open_eventually, tcp_from, Opened};
use crate::common::raw::RawConn;
use crate::common::Broker;

macro_rules! per_shard_count {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn shards_1() {
                    super::$name(1)
                }
                #[test]
                fn shards_2() {
                    super::$name(2)
                }
            }
        )*
    };
}

per_shard_count!(
    vhost_connection_limit,
    user_connection_limit,
    source_address_limit,
    broker_wide_limit,
);

fn vhost_connection_limit(shards: usize) {
    let broker = Broker::start_with_config(shards, "[vhost.\"/\"]\nmax_connections = 2\n");
    let a = open(&broker).conn();
    let b = open(&broker).conn();
    let (code, text, class, method) = match open(&broker) {
        Opened::Refused(code, text, class, method) => (code, text, class, method),
        other => panic!("third connection: {other:?}"),
    };
    assert_eq!(code, 530);
    assert_eq!(
        text,
        "NOT_ALLOWED - access to vhost '/' refused for user 'guest': connection limit (2) is reached"
    );
    assert_eq!((class, method), (10, 40));
    assert!(
        broker
            .wait_for_log("CON-1006 : Connection refused", Duration::from_secs(5))
            .is_some_and(|l| l.contains("vhost.\"/\".max_connections")),
        "CON-1006 line naming the limit"
    );
    close(a);
    let c = open_eventually(|| open(&broker));
    assert!(matches!(open(&broker), Opened::Refused(530, ..)));
    close(b);
    close(c);
}

fn user_connection_limit(shards: usize) {
    let broker = Broker::start_with_config(
        shards,
        r#"
[auth]
users = [{ name = "guest", password = "guest" }, { name = "app", password = "secret" }]
[limits.user."app"]
max_connections = 1
"#,
    );
    let app = || open_as(&broker, "127.0.0.1", "app", "secret", "/");
    let first = app().conn();
    assert_eq!(
        app().refusal(),
        (
            530,
            "NOT_ALLOWED - connection refused for user 'app': user connection limit (1) is reached"
                .to_owned()
        )
    );
    // Another user is not limited.
    let guests: Vec<RawConn> = (0..3).map(|_| open(&broker).conn()).collect();
    close(first);
    let again = open_eventually(app);
    close(again);
    guests.into_iter().for_each(close);
}

fn source_address_limit(shards: usize) {
    let broker = Broker::start_with_config(shards, "[limits.connections]\nper_ip = 2\n");
    let a = open(&broker).conn();
    let b = open(&broker).conn();
    assert_eq!(
        open(&broker).refusal(),
        (
            530,
            "NOT_ALLOWED - connection refused for address 127.0.0.1: source address connection limit (2) is reached"
                .to_owned()
        )
    );
    // Another address has its own count.
    let other = open_as(&broker, "127.0.0.2", "guest", "guest", "/").conn();
    close(a);
    let c = open_eventually(|| open(&broker));
    close(b);
    close(c);
    close(other);
}

fn broker_wide_limit(shards: usize) {
    let broker = Broker::start_with_config(shards, "[limits.connections]\nmax = 3\n");
    let held: Vec<RawConn> = (0..3).map(|_| open(&broker).conn()).collect();
    assert_eq!(
        open(&broker).refusal(),
        (
            530,
            "NOT_ALLOWED - connection refused: node connection limit (3) is reached".to_owned()
        )
    );
    let mut held = held.into_iter();
    close(held.next().expect("one"));
    let again = open_eventually(|| open(&broker));
    assert!(matches!(open(&broker), Opened::Refused(530, ..)));
    close(again);
    held.for_each(close);
}

/// Many clients opening at the same instant on two shards: exactly the limit gets in.
#[test]
fn concurrent_opens_across_shards_admit_exactly_the_limit() {
    let broker = Broker::start_with_config(2, "[limits.connections]\nmax = 5\n");
    let barrier = std::sync::Barrier::new(24);
    let results: Vec<Opened> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..24)
            .map(|_| {
                s.spawn(|| {
                    let mut c = tcp_from(&broker, "127.0.0.1");
                    barrier.wait();
                    handshake(&mut c)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    let admitted = results
        .iter()
        .filter(|r| matches!(r, Opened::Open(_)))
        .count();
    let refused = results
        .iter()
        .filter(|r| matches!(r, Opened::Refused(530, ..)))
        .count();
    assert_eq!((admitted, refused), (5, 19), "{results:?}");
}

fn handshake(c: &mut RawConn) -> Opened {
    c.send_protocol_header();
    c.read_start();
    c.send_start_ok("PLAIN", b"\0guest\0guest");
    let tune = c.read_tune();
    c.send_tune_ok(crate::common::raw::Tune {
        heartbeat: 0,
        ..tune
    });
    c.send_open("/");
    let mth = c.read_method().expect("answer to connection.open");
    if mth.id == crate::common::wire::m::CONNECTION_OPEN_OK {
        let stream = c.stream.try_clone().expect("clone");
        return Opened::Open(RawConn { stream, tune: None });
    }
    let mut d = mth.dec();
    Opened::Refused(d.short(), d.shortstr(), d.short(), d.short())
}

/// Silent sockets fill the shard's unauthenticated places; the next is closed at
/// accept without a byte; open connections do not count; when the silent ones go, a
/// client gets in.
#[test]
fn unauthenticated_sockets_are_capped_per_shard() {
    let broker =
        Broker::start_with_config(1, "[limits.connections]\nunauthenticated_per_shard = 5\n");
    // Open connections are authenticated: they leave the places free.
    let opened: Vec<RawConn> = (0..3).map(|_| open(&broker).conn()).collect();
    let silent: Vec<RawConn> = (0..5).map(|_| tcp_from(&broker, "127.0.0.1")).collect();
    // The broker counts a socket when it accepts it; give it the time to.
    assert!(
        closed_at_accept(&broker),
        "a sixth silent socket was served"
    );
    assert!(broker
        .wait_for_log(
            "CON-1007 : Connection from 127.0.0.1:",
            Duration::from_secs(5)
        )
        .is_some_and(|l| l.contains("5 connections have not completed connection.open")));
    drop(silent);
    let c = open_eventually(|| open(&broker));
    close(c);
    opened.into_iter().for_each(close);
}

/// Connects until a socket is closed by the broker without a byte (bounded: the five
/// silent ones may take a moment to be accepted). Whether one was.
fn closed_at_accept(broker: &Broker) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut kept = Vec::new();
    while Instant::now() < deadline {
        let mut c = tcp_from(broker, "127.0.0.1");
        let (bytes, eof) = c.read_to_eof(Duration::from_millis(500));
        if eof && bytes.is_empty() {
            return true;
        }
        // Served (accepted before the others were counted): keep it silent from now.
        kept.push(c);
        assert!(kept.len() < 5, "sockets beyond the cap keep being served");
    }
    false
}

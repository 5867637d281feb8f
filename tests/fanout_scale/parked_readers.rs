//! Parked readers (issue 23, `net.reader_park_after_ms`): an idle plain connection's
//! reader task ends and the shard watches its socket until the client sends again.
//! Against a broker that parks after 300 ms, over raw sockets: idle subscribers park
//! (`sluice_shard_readers_parked`), still get every delivery in order while parked,
//! and every way back works — a method answered in order, a clean close (close-ok, then
//! the broker closes the socket), a dropped socket (the connection and its exclusive
//! queue go), a peer that stops sending heartbeats (closed for them, released), and
//! the broker's shutdown (320 to every parked connection, exit 0).

use std::time::{Duration, Instant};

use crate::common::http::{self, parse_openmetrics};
use crate::common::raw::RawConn;
use crate::common::wire::{m, Props};
use crate::common::Broker;
use crate::support::raise_nofile;

const CONFIG: &str = "[net]\nreader_park_after_ms = 300\n";
const SUBSCRIBERS: usize = 90;
const KEY: &str = "parked.readers";
/// How long parking (300 ms idle, a sweep every 150 ms) or a release may take at most
/// on a loaded machine.
const WITHIN: Duration = Duration::from_secs(15);

/// Readers parked on every shard together.
fn parked(broker: &Broker) -> usize {
    let metrics = http::get(broker.http_port(), "/metrics");
    parse_openmetrics(&metrics.body)
        .iter()
        .filter(|s| s.name == "sluice_shard_readers_parked")
        .map(|s| s.value as usize)
        .sum()
}

/// Waits until `f` holds, polling, for at most [`WITHIN`]; false if it never did.
fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + WITHIN;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

fn array_len(broker: &Broker, path: &str) -> usize {
    let resp = http::get(broker.http_port(), path);
    resp.json().as_array().map_or(usize::MAX, Vec::len)
}

/// A subscriber: an exclusive server-named queue bound to amq.topic, a no-ack consumer.
fn subscriber(broker: &Broker) -> (RawConn, String) {
    let mut raw = broker.raw();
    raw.channel_open(1);
    let q = raw.queue_declare(1, "", false, true, false);
    raw.queue_bind(1, &q, "amq.topic", KEY);
    raw.basic_consume(1, &q, true);
    (raw, q)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_readers_park_and_every_way_back_works() {
    let _heavy = crate::HEAVY.lock().await;
    raise_nofile((SUBSCRIBERS + 100) as u64);
    let broker = Broker::start_with_config(2, CONFIG);
    let mut subs: Vec<(RawConn, String)> = (0..SUBSCRIBERS).map(|_| subscriber(&broker)).collect();
    assert!(
        eventually(|| parked(&broker) == SUBSCRIBERS),
        "{} of {SUBSCRIBERS} idle subscribers' readers parked",
        parked(&broker)
    );

    // Deliveries reach parked subscribers, in order.
    let mut publisher = broker.raw();
    publisher.channel_open(1);
    for i in 0..3 {
        let body = format!("message {i}");
        publisher
            .publish(1, "amq.topic", KEY, &Props::default(), body.as_bytes())
            .expect("publish");
    }
    for (raw, _) in &mut subs {
        for i in 0..3 {
            assert_eq!(raw.read_delivery(1).body, format!("message {i}").as_bytes());
        }
    }

    // A method from a parked subscriber restarts its reader and is answered: a passive
    // declare of its own queue (nothing ready, its one consumer).
    for (raw, q) in &mut subs {
        raw.send_passive_declare(1, q);
        let ok = raw.expect_method(1, m::QUEUE_DECLARE_OK);
        let mut d = ok.dec();
        assert_eq!(d.shortstr(), *q);
        assert_eq!(
            (d.long(), d.long()),
            (0, 1),
            "messages and consumers of {q}"
        );
    }
    // They park again once idle (the publisher with them).
    assert!(
        eventually(|| parked(&broker) == SUBSCRIBERS + 1),
        "{} readers parked again (of {} connections)",
        parked(&broker),
        SUBSCRIBERS + 1
    );

    // A third close cleanly: close-ok, then the broker closes the socket.
    let mut closing: Vec<(RawConn, String)> = subs.drain(..SUBSCRIBERS / 3).collect();
    for (raw, _) in &mut closing {
        raw.close_cleanly();
        assert!(
            raw.wait_eof(Duration::from_secs(5)),
            "socket open after close-ok"
        );
    }
    // A third drop their sockets while parked.
    let dropped: Vec<String> = subs.drain(..SUBSCRIBERS / 3).map(|(_, q)| q).collect();
    let left = SUBSCRIBERS - closing.len() - dropped.len();
    assert!(
        eventually(|| array_len(&broker, "/api/connections") == left + 1),
        "{} connections listed, expected {} (the rest and the publisher)",
        array_len(&broker, "/api/connections"),
        left + 1
    );
    // Their exclusive queues went with them; the others' are there.
    assert!(
        eventually(|| array_len(&broker, "/api/queues") == left),
        "{} queues listed, expected {left}",
        array_len(&broker, "/api/queues")
    );
    assert_eq!(parked(&broker), left + 1, "readers parked after the closes");

    // The rest are subscribers still: one more message each.
    publisher
        .publish(1, "amq.topic", KEY, &Props::default(), b"last")
        .expect("publish");
    for (raw, _) in &mut subs {
        assert_eq!(raw.read_delivery(1).body, b"last");
    }
}

/// Parks on every shard since the broker started.
fn parks(broker: &Broker) -> usize {
    let metrics = http::get(broker.http_port(), "/metrics");
    parse_openmetrics(&metrics.body)
        .iter()
        .filter(|s| s.name.starts_with("sluice_shard_reader_parks"))
        .map(|s| s.value as usize)
        .sum()
}

/// A client that sends every 700 ms (a heartbeat) restarts its parked reader within
/// 8 × 300 ms each time, so its wait before parking doubles until it no longer parks
/// (no park and restart per frame), while an idle connection beside it parks; once the
/// client falls silent it parks again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_sends_every_700_ms_stops_parking() {
    let broker = Broker::start_with_config(1, CONFIG);
    let mut idle = RawConn::connect(&broker.addr());
    idle.handshake();
    let mut chatty = RawConn::connect(&broker.addr());
    chatty.handshake_with(10);
    let beat = Duration::from_millis(700);
    let beat_for = |raw: &mut RawConn, how_long: Duration| {
        let until = Instant::now() + how_long;
        while Instant::now() < until {
            std::thread::sleep(beat);
            raw.send_heartbeat().expect("heartbeat");
        }
    };
    // Its first parks end within 700 ms: the wait doubles to 600 ms, then 1.2 s.
    beat_for(&mut chatty, Duration::from_secs(5));
    let before = parks(&broker);
    assert!(
        before >= 2,
        "the connections parked {before} times at first"
    );
    beat_for(&mut chatty, Duration::from_secs(4));
    assert_eq!(
        parks(&broker),
        before,
        "a connection that sends every 700 ms still parks"
    );
    assert_eq!(parked(&broker), 1, "the idle connection stays parked");
    // Silent now: it parks after 1.2 s.
    assert!(
        eventually(|| parked(&broker) == 2),
        "the client that fell silent did not park"
    );
    idle.close_cleanly();
    chatty.close_cleanly();
}

/// A parked connection whose peer stops sending heartbeats is closed for it, as one
/// whose reader waits in its task: the close restarts the reader, which releases it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_connection_that_misses_heartbeats_is_closed_and_released() {
    let broker = Broker::start_with_config(1, CONFIG);
    let mut raw = RawConn::connect(&broker.addr());
    raw.handshake_with(1);
    raw.channel_open(1);
    // Parked once it has been silent for 300 ms (before the 2 s heartbeat deadline).
    assert!(
        eventually(|| parked(&broker) == 1),
        "the silent connection's reader did not park"
    );
    // The broker's heartbeats arrive meanwhile; after two silent intervals it closes.
    let (_, closed) = raw.read_to_eof(Duration::from_secs(10));
    assert!(
        closed,
        "the broker did not close a peer that sends no heartbeats"
    );
    assert!(
        broker
            .wait_for_log("missed heartbeats from client", Duration::from_secs(5))
            .is_some(),
        "no missed-heartbeat log line"
    );
    assert!(
        eventually(|| array_len(&broker, "/api/connections") == 0),
        "the closed connection was not released"
    );
    assert_eq!(parked(&broker), 0);
}

/// SIGTERM with every reader parked: each connection still gets the shutdown close
/// (320), its close-ok is read (the reader restarts for it), the broker exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_parked_connections_with_320() {
    use crate::common::raw::Ending;
    const CONNECTIONS: usize = 12;
    let mut broker = Broker::start_with_config(2, CONFIG);
    let mut subs: Vec<(RawConn, String)> = (0..CONNECTIONS).map(|_| subscriber(&broker)).collect();
    assert!(
        eventually(|| parked(&broker) == CONNECTIONS),
        "{} of {CONNECTIONS} readers parked",
        parked(&broker)
    );
    broker.sigterm();
    for (raw, _) in &mut subs {
        match raw.read_until_closed(Duration::from_secs(10)) {
            Some(Ending::Close { code, text, .. }) => {
                assert_eq!(code, 320);
                assert_eq!(
                    text,
                    "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"
                );
                assert!(
                    raw.wait_eof(Duration::from_secs(5)),
                    "socket open after close-ok"
                );
            }
            other => panic!("expected connection.close 320 at shutdown, got {other:?}"),
        }
    }
    let status = broker.wait_exit(WITHIN).expect("the broker did not exit");
    assert!(status.success(), "exit status {status:?}");
}

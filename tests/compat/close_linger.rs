//! Bug 5: after close-ok to the client's connection.close, the socket is the client's to
//! close. RabbitMQ's reader answers close-ok, moves to `closed` and arms
//! `terminate_connection` (`rabbit_reader:close_connection/1`): it goes on reading until
//! the client closes the socket (`closed when connection_state =:= closed`), and cuts the
//! client off only when that timer fires. sluice does the same with a bound of one second
//! (`CLOSE_OK_LINGER` in `src/shard/handler/mod.rs`). When the broker initiated the close, close-ok ends the
//! connection at once (`handle_method0(connection.close_ok, closed)` sends itself
//! `terminate_connection`), and a client that never answers is cut off after the
//! heartbeat interval (at most 30 s), as RabbitMQ does.
//!
//! amqp091-go's reader goroutine reports `Exception (501) Reason: "EOF"` when the broker's
//! FIN reaches it before the client's own `Close` has finished: no FIN before the client
//! closes means no such race.

use std::net::Shutdown;
use std::time::{Duration, Instant};

use crate::common::raw::Ending;
use crate::common::wire::{m, Enc, Props};
use crate::common::{unique, wait_until, Broker, RawConn};

shard_tests!(
    client_close_leaves_the_socket_to_the_client,
    client_that_never_closes_is_cut_off_after_a_second,
    broker_close_ends_at_close_ok,
    broker_close_without_close_ok_ends_after_the_heartbeat_interval,
    shutdown_closes_a_lingering_socket,
    client_that_neither_reads_nor_closes_is_cut_off,
);

/// The bound on the linger and the slack a loaded test machine gets on top of it.
const LINGER: Duration = Duration::from_secs(1);
const SLACK: Duration = Duration::from_millis(800);

fn close_args() -> Vec<u8> {
    Enc::new()
        .short(200)
        .shortstr("bye")
        .short(0)
        .short(0)
        .done()
}

/// A handshaken connection with channel 1 open, closed by the client: returns it after
/// close-ok, with the client's local port (the broker's log names the connection by it).
fn closed_by_client(broker: &Broker) -> (RawConn, u16) {
    let mut c = broker.raw();
    c.channel_open(1);
    let port = c.stream.local_addr().expect("local addr").port();
    c.send_method(0, m::CONNECTION_CLOSE, &close_args())
        .expect("send connection.close");
    c.expect_method(0, m::CONNECTION_CLOSE_OK);
    (c, port)
}

/// The broker logged CON-1002 for the connection from `port`: it has forgotten it.
fn assert_released(broker: &Broker, port: u16) {
    let needle = format!("@127.0.0.1:{port}/)] CON-1002 : Close");
    assert!(
        broker
            .wait_for_log(&needle, Duration::from_secs(5))
            .is_some(),
        "connection from port {port} not released; log:\n{}",
        broker.logs().join("\n")
    );
}

/// Sends basic.qos on channel 0, which is 503 COMMAND_INVALID: the broker closes.
fn provoke_broker_close(c: &mut RawConn) {
    let qos = Enc::new().long(0).short(1).bits(&[false]).done();
    c.send_method(0, m::BASIC_QOS, &qos)
        .expect("send basic.qos on channel 0");
}

/// After close-ok the broker sends nothing and no FIN while the client keeps the socket;
/// when the client closes its side, the broker closes too, at once, and releases the
/// connection.
async fn client_close_leaves_the_socket_to_the_client(shards: usize) {
    let mut broker = Broker::start(shards);
    let (mut c, port) = closed_by_client(&broker);
    let (bytes, eof) = c.read_to_eof(Duration::from_millis(300));
    assert!(
        !eof,
        "the broker closed the socket right after close-ok (amqp091-go's EOF race)"
    );
    assert!(bytes.is_empty(), "frames after close-ok: {bytes:?}");

    c.stream.shutdown(Shutdown::Write).expect("shutdown(Write)");
    let started = Instant::now();
    assert!(
        c.wait_eof(Duration::from_secs(2)),
        "the broker kept the socket after the client closed it"
    );
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "the broker took {:?} to follow the client's close",
        started.elapsed()
    );
    assert_released(&broker, port);
    broker.assert_healthy();
}

/// A client that never closes after close-ok, and even goes on sending (a heartbeat, a
/// method), gets nothing back and is cut off one second after close-ok.
async fn client_that_never_closes_is_cut_off_after_a_second(shards: usize) {
    let mut broker = Broker::start(shards);
    let (mut c, port) = closed_by_client(&broker);
    let started = Instant::now();
    // Errors are fine here (a broker that already closed resets the socket).
    let _ = c.send_heartbeat();
    let _ = c.send_method(2, m::CHANNEL_OPEN, &Enc::new().shortstr("").done());
    let (bytes, eof) = c.read_to_eof(LINGER + SLACK + Duration::from_secs(1));
    let waited = started.elapsed();
    assert!(eof, "no FIN within {waited:?} of close-ok");
    assert!(bytes.is_empty(), "frames after close-ok: {bytes:?}");
    assert!(
        waited >= LINGER - Duration::from_millis(100),
        "the broker closed {waited:?} after close-ok, before the client could"
    );
    assert!(
        waited <= LINGER + SLACK,
        "the broker held the socket {waited:?} after close-ok (bound: {LINGER:?})"
    );
    assert_released(&broker, port);
    broker.assert_healthy();
}

/// The broker closes (503): close-ok from the client ends the connection at once — the
/// broker does not wait for the client to close the socket.
async fn broker_close_ends_at_close_ok(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut c = broker.raw();
    provoke_broker_close(&mut c);
    match c.read_until_closed(Duration::from_secs(5)) {
        Some(Ending::Close { code, .. }) => assert_eq!(code, 503),
        other => panic!("expected connection.close 503, got {other:?}"),
    }
    // read_until_closed answered close-ok.
    let started = Instant::now();
    assert!(
        c.wait_eof(Duration::from_secs(2)),
        "no FIN after close-ok to the broker's close"
    );
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "the broker took {:?} to close after close-ok",
        started.elapsed()
    );
    broker.assert_healthy();
}

/// The broker closes (503) and the client never answers: with a heartbeat of one second
/// the broker gives up one second after its connection.close.
async fn broker_close_without_close_ok_ends_after_the_heartbeat_interval(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut c = RawConn::connect(&broker.addr());
    c.handshake_with(1);
    provoke_broker_close(&mut c);
    let close = loop {
        let mth = c.read_method().expect("read connection.close");
        if mth.id == m::CONNECTION_CLOSE {
            break mth;
        }
    };
    assert_eq!(close.dec().short(), 503);
    let started = Instant::now();
    assert!(
        c.wait_eof(Duration::from_secs(4)),
        "the broker kept waiting for close-ok"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited <= Duration::from_secs(1) + SLACK,
        "closed {waited:?} after connection.close (heartbeat 1 s)"
    );
    broker.assert_healthy();
}

/// SIGTERM while a connection lingers after close-ok: its socket is closed at once and
/// the broker exits cleanly, without waiting out the linger.
async fn shutdown_closes_a_lingering_socket(shards: usize) {
    let mut broker = Broker::start(shards);
    let (mut c, _) = closed_by_client(&broker);
    broker.sigterm();
    let started = Instant::now();
    assert!(
        c.wait_eof(Duration::from_secs(3)),
        "socket open after SIGTERM"
    );
    let status = broker
        .wait_exit(Duration::from_secs(5))
        .expect("sluice did not exit after SIGTERM");
    assert!(status.success(), "exit status {status}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "shutdown took {:?}",
        started.elapsed()
    );
}

/// Ready messages in `queue` (passive declare on `channel`).
fn ready(c: &mut RawConn, channel: u16, queue: &str) -> u32 {
    let args = Enc::new()
        .short(0)
        .shortstr(queue)
        .bits(&[true, false, false, false, false])
        .table(&vec![])
        .done();
    c.send_method(channel, m::QUEUE_DECLARE, &args)
        .expect("send passive queue.declare");
    let ok = c.expect_method(channel, m::QUEUE_DECLARE_OK);
    let mut d = ok.dec();
    d.shortstr();
    d.long()
}

/// A no-ack subscriber stops reading while 12 MiB are delivered to it. The broker's
/// writer is then stuck on the full socket. The subscriber sends connection.close and
/// neither reads nor closes. The broker still cuts it off and releases it about a second
/// after the close: the close timeout shuts the socket, which also ends the stuck write.
async fn client_that_neither_reads_nor_closes_is_cut_off(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut sub = broker.raw();
    sub.channel_open(1);
    let port = sub.stream.local_addr().expect("local addr").port();
    let q = unique("q-unread");
    sub.queue_declare(1, &q, false, false, false);
    sub.basic_consume(1, &q, true);

    let mut publisher = broker.raw();
    publisher.channel_open(1);
    let body = vec![7u8; 256 * 1024];
    for _ in 0..48 {
        publisher
            .publish(1, "", &q, &Props::default(), &body)
            .expect("publish");
    }
    // Deliveries stall once the subscriber's socket is full: the ready count stops moving
    // with messages still waiting.
    let mut last = u32::MAX;
    let stalled = wait_until(Duration::from_secs(10), || {
        std::thread::sleep(Duration::from_millis(200));
        let now = ready(&mut publisher, 1, &q);
        let still = now == last && now > 0;
        last = now;
        still
    });
    assert!(
        stalled,
        "deliveries to the subscriber never stalled (ready: {last})"
    );

    sub.send_method(0, m::CONNECTION_CLOSE, &close_args())
        .expect("send connection.close");
    let started = Instant::now();
    assert_released(&broker, port);
    assert!(
        started.elapsed() <= LINGER + SLACK + Duration::from_secs(1),
        "released {:?} after the close",
        started.elapsed()
    );
    // The publisher's connection is unharmed.
    assert!(ready(&mut publisher, 1, &q) <= last);
    broker.assert_healthy();
}

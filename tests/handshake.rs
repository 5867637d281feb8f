//! Connection establishment: protocol header, start/tune/open, authentication, heartbeats,
//! frame-max negotiation, advertised capabilities, and shutdown by SIGTERM.

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::security::SecurityCredentials;
use common::raw::{Ending, Tune};
use common::wire::{self, Props, Val};
use common::{Broker, Event, RawConn};

shard_tests!(
    amqprs_connect_and_close,
    start_and_tune_offer,
    capabilities_advertised,
    broker_sends_heartbeats,
    silent_client_is_disconnected,
    heartbeating_client_stays_connected,
    frame_max_below_minimum_is_refused,
    frame_max_negotiated_down_is_respected,
    unknown_vhost_is_refused,
    bad_password_is_refused,
    amqplain_login,
    wrong_protocol_header_is_answered,
    sigterm_forces_connections_closed,
    client_close_while_deliveries_flow,
    sigterm_under_load,
    config_file_changes_tune_offer,
);

async fn amqprs_connect_and_close(shards: usize) {
    let broker = Broker::start(shards);
    assert!(broker
        .wait_for_log("BRK-1004 : Ready", Duration::from_secs(1))
        .is_some());
    let conn = broker.connect().await;
    assert!(conn.conn.is_open());
    assert_eq!(conn.conn.channel_max(), 2047);
    assert_eq!(conn.conn.frame_max(), 131072);
    let ch = conn.channel().await;
    assert!(ch.ch.is_open());
    ch.ch.close().await.expect("channel.close");
    conn.close().await;

    // Many connections in a row: each gets a clean handshake (and with two shards, both
    // shards' listeners answer).
    for _ in 0..8 {
        let conn = broker.connect().await;
        let ch = conn.channel().await;
        ch.declare_server_named().await;
        conn.close().await;
    }
}

async fn start_and_tune_offer(shards: usize) {
    let broker = Broker::start(shards);
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    let start = c.read_start();
    assert_eq!((start.version_major, start.version_minor), (0, 9));
    let mechs: Vec<&str> = start.mechanisms.split(' ').collect();
    assert!(mechs.contains(&"PLAIN"), "mechanisms: {}", start.mechanisms);
    assert!(
        mechs.contains(&"AMQPLAIN"),
        "mechanisms: {}",
        start.mechanisms
    );
    assert!(
        start.locales.split(' ').any(|l| l == "en_US"),
        "locales: {}",
        start.locales
    );
    c.send_start_ok("PLAIN", b"\0guest\0guest");
    let tune = c.read_tune();
    assert_eq!(
        tune,
        Tune {
            channel_max: 2047,
            frame_max: 131072,
            heartbeat: 60
        }
    );
    c.send_tune_ok(Tune {
        heartbeat: 0,
        ..tune
    });
    c.send_open("/");
    c.read_open_ok();
    c.channel_open(1);
    // A clean client-initiated close.
    let args = wire::Enc::new()
        .short(200)
        .shortstr("bye")
        .short(0)
        .short(0)
        .done();
    c.send_method(0, wire::m::CONNECTION_CLOSE, &args).unwrap();
    c.expect_method(0, wire::m::CONNECTION_CLOSE_OK);
    assert!(
        c.wait_eof(Duration::from_secs(5)),
        "socket left open after close-ok"
    );
}

async fn capabilities_advertised(shards: usize) {
    let broker = Broker::start(shards);
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    let start = c.read_start();
    let caps = match wire::get(&start.server_properties, "capabilities") {
        Some(Val::Table(t)) => t.clone(),
        other => panic!("server-properties.capabilities is {other:?}"),
    };
    for cap in [
        "publisher_confirms",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "consumer_priorities",
        "direct_reply_to",
    ] {
        assert_eq!(
            wire::get(&caps, cap),
            Some(&Val::Bool(true)),
            "capability {cap} in {caps:?}"
        );
    }
    drop(c);

    // The same, as a client library sees it.
    let conn = broker.connect().await;
    let caps = conn.conn.server_properties().capabilities();
    assert!(caps.publisher_confirms());
    assert!(caps.basic_nack());
    assert!(caps.consumer_cancel_notify());
    assert!(caps.connection_blocked());
    assert!(caps.consumer_priorities());
    assert!(caps.direct_reply_to());
    conn.close().await;
}

async fn broker_sends_heartbeats(shards: usize) {
    let broker = Broker::start(shards);
    let mut c = RawConn::connect(&broker.addr());
    c.handshake_with(1);
    let tuned = Instant::now();
    // Silence on our side; the broker must still send heartbeat frames.
    match c.read_frame_within(Duration::from_millis(2500)) {
        Ok((wire::FRAME_HEARTBEAT, ch, payload)) => {
            assert_eq!(ch, 0, "heartbeat on a non-zero channel");
            assert!(payload.is_empty(), "heartbeat with a payload");
            assert!(tuned.elapsed() < Duration::from_millis(2500));
        }
        Ok((ty, ch, _)) => panic!("unexpected frame type {ty} on channel {ch}"),
        Err(e) => panic!("no heartbeat frame from the broker within 2.5 s: {e}"),
    }
}

async fn silent_client_is_disconnected(shards: usize) {
    let broker = Broker::start(shards);
    let mut c = RawConn::connect(&broker.addr());
    c.handshake_with(1);
    let tuned = Instant::now();
    let ending = c.read_until_closed(Duration::from_secs(5));
    let after = tuned.elapsed();
    assert!(
        ending.is_some(),
        "a client silent for 5 heartbeat intervals of 1 s was not disconnected"
    );
    assert!(
        after >= Duration::from_millis(1000),
        "disconnected after only {after:?}, before one heartbeat interval passed ({ending:?})"
    );
    if let Some(Ending::Close { code, text, .. }) = &ending {
        assert!(*code >= 300, "heartbeat timeout closed with {code} {text}");
    }
    // The broker itself carries on.
    let mut other = broker.raw();
    other.channel_open(1);
}

async fn heartbeating_client_stays_connected(shards: usize) {
    let broker = Broker::start(shards);
    let mut c = RawConn::connect(&broker.addr());
    c.handshake_with(1);
    let started = Instant::now();
    let mut seen_heartbeats = 0;
    while started.elapsed() < Duration::from_secs(4) {
        c.send_heartbeat()
            .expect("connection dropped while heartbeating");
        match c.read_frame_within(Duration::from_millis(300)) {
            Ok((wire::FRAME_HEARTBEAT, 0, _)) => seen_heartbeats += 1,
            Ok((ty, ch, payload)) => {
                panic!("unexpected frame type {ty} on channel {ch}: {payload:?}")
            }
            Err(e) if common::raw::is_timeout(&e) => {}
            Err(e) => panic!("connection dropped although the client heartbeats: {e}"),
        }
    }
    assert!(
        seen_heartbeats >= 2,
        "only {seen_heartbeats} heartbeats in 4 s at 1 s interval"
    );
    c.channel_open(1);
}

async fn frame_max_below_minimum_is_refused(shards: usize) {
    let broker = Broker::start(shards);
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    c.send_start_ok("PLAIN", b"\0guest\0guest");
    let offer = c.read_tune();
    c.send_tune_ok(Tune {
        frame_max: 1000,
        heartbeat: 0,
        ..offer
    });
    // The broker may already be closing; the open may or may not reach it.
    let _ = c.send_method(
        0,
        wire::m::CONNECTION_OPEN,
        &wire::Enc::new()
            .shortstr("/")
            .shortstr("")
            .bits(&[false])
            .done(),
    );
    match c.read_until_closed(Duration::from_secs(5)) {
        Some(Ending::Close { code, text, .. }) => {
            assert!(
                code >= 500,
                "frame_max 1000 refused with soft code {code} {text}"
            );
            assert!(!text.is_empty(), "empty reply text");
        }
        other => panic!("frame_max 1000 (< 4096) not refused with connection.close: {other:?}"),
    }
}

async fn frame_max_negotiated_down_is_respected(shards: usize) {
    let broker = Broker::start(shards);
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    c.send_start_ok("PLAIN", b"\0guest\0guest");
    let offer = c.read_tune();
    c.send_tune_ok(Tune {
        frame_max: 4096,
        heartbeat: 0,
        ..offer
    });
    c.send_open("/");
    c.read_open_ok();
    c.channel_open(1);
    let q = c.queue_declare(1, "", false, true, false);
    c.basic_consume(1, &q, true);
    let body: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    c.publish(1, "", &q, &Props::default(), &body).unwrap();
    let d = c.read_delivery(1);
    assert_eq!(d.body, body, "body changed in transit");
    for size in &d.frame_sizes {
        assert!(
            *size <= 4096,
            "broker sent a {size}-byte frame after frame_max 4096 was agreed"
        );
    }
    assert!(
        d.frame_sizes.len() >= 6,
        "20000 bytes cannot fit in fewer than 5 body frames"
    );
}

async fn unknown_vhost_is_refused(shards: usize) {
    let broker = Broker::start(shards);
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    c.send_start_ok("PLAIN", b"\0guest\0guest");
    let offer = c.read_tune();
    c.send_tune_ok(Tune {
        heartbeat: 0,
        ..offer
    });
    c.send_open("nosuch");
    let (code, text) = c.expect_connection_close();
    assert_eq!(code, 530);
    assert_eq!(text, "NOT_ALLOWED - vhost 'nosuch' not found");
    // Logged with a code (CON-1013), naming the client.
    let line = broker
        .wait_for_log("CON-1013 : Closed during handshake", Duration::from_secs(5))
        .expect("CON-1013 line");
    assert!(
        line.contains("Client: 127.0.0.1:")
            && line.ends_with(": 530 NOT_ALLOWED - vhost 'nosuch' not found"),
        "{line}"
    );

    let mut args = broker.amqprs_args();
    args.virtual_host("nosuch");
    assert!(
        Connection::open(&args).await.is_err(),
        "amqprs opened vhost 'nosuch'"
    );
}

async fn bad_password_is_refused(shards: usize) {
    let broker = Broker::start(shards);
    for response in [&b"\0guest\0wrong"[..], &b"\0nobody\0guest"[..]] {
        let mut c = RawConn::connect(&broker.addr());
        c.send_protocol_header();
        c.read_start();
        c.send_start_ok("PLAIN", response);
        let (code, text) = c.expect_connection_close();
        assert_eq!(code, 403);
        assert_eq!(
            text,
            "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. \
             For details see the broker logfile."
        );
    }
    let args = OpenConnectionArguments::new("127.0.0.1", broker.port(), "guest", "nope");
    assert!(
        Connection::open(&args).await.is_err(),
        "amqprs logged in with a bad password"
    );
    // Still serving.
    broker.connect().await.close().await;
}

async fn amqplain_login(shards: usize) {
    let broker = Broker::start(shards);
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    let response = wire::encode_table_body(&vec![
        ("LOGIN".into(), Val::LongStr(b"guest".to_vec())),
        ("PASSWORD".into(), Val::LongStr(b"guest".to_vec())),
    ]);
    c.send_start_ok("AMQPLAIN", &response);
    let offer = c.read_tune();
    c.send_tune_ok(Tune {
        heartbeat: 0,
        ..offer
    });
    c.send_open("/");
    c.read_open_ok();
    c.channel_open(1);

    let mut args = broker.amqprs_args();
    args.credentials(SecurityCredentials::new_amqplain("guest", "guest"));
    let conn = Connection::open(&args)
        .await
        .expect("AMQPLAIN login via amqprs");
    common::close_amqprs(conn).await;
}

async fn wrong_protocol_header_is_answered(shards: usize) {
    let broker = Broker::start(shards);
    for header in [
        &b"AMQP\x00\x00\x08\x00"[..],
        &b"AMQP\x01\x01\x00\x0a"[..],
        &b"HTTP/1.1"[..],
    ] {
        let mut c = RawConn::connect(&broker.addr());
        c.send(header).unwrap();
        let (bytes, closed) = c.read_to_eof(Duration::from_secs(5));
        assert_eq!(
            bytes,
            wire::PROTOCOL_HEADER.to_vec(),
            "answer to header {:?}",
            String::from_utf8_lossy(header)
        );
        assert!(closed, "socket left open after a wrong protocol header");
    }
    broker.connect().await.close().await;
}

async fn sigterm_forces_connections_closed(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut raws: Vec<RawConn> = (0..4).map(|_| broker.raw()).collect();
    let mut conn = broker.connect().await;
    let _ch = conn.channel().await;
    broker.sigterm();
    for c in &mut raws {
        let (code, text) = c.expect_connection_close();
        assert_eq!(code, 320, "SIGTERM close: {text}");
        assert!(
            text.starts_with("CONNECTION_FORCED"),
            "SIGTERM close text {text:?}"
        );
    }
    match common::next_event(&mut conn.events).await {
        Event::ConnectionClose { code, .. } => assert_eq!(code, 320),
        other => panic!("amqprs connection got {other:?} instead of connection.close"),
    }
    let status = broker
        .wait_exit(Duration::from_secs(10))
        .expect("sluice still running 10 s after SIGTERM");
    assert_eq!(
        status.code(),
        Some(0),
        "exit status after SIGTERM: {status}"
    );
}

/// A client closing while the broker is busy delivering to it still gets close-ok (after
/// possibly more deliveries) and then a closed socket.
async fn client_close_while_deliveries_flow(shards: usize) {
    let broker = Broker::start(shards);
    let mut c = broker.raw();
    c.channel_open(1);
    let q = c.queue_declare(1, "", false, true, false);
    let mut p = broker.raw();
    p.channel_open(1);
    for i in 0..2000 {
        p.publish(1, "", &q, &Props::default(), format!("m{i}").as_bytes())
            .unwrap();
    }
    c.basic_consume(1, &q, true);
    // Take a few deliveries, then close in the middle of the stream.
    for _ in 0..10 {
        c.read_delivery(1);
    }
    let args = wire::Enc::new()
        .short(200)
        .shortstr("bye")
        .short(0)
        .short(0)
        .done();
    c.send_method(0, wire::m::CONNECTION_CLOSE, &args).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        assert!(Instant::now() < deadline, "no close-ok within 5 s");
        let (ty, ch, payload) = c.read_frame().expect("socket closed before close-ok");
        if ty == wire::FRAME_METHOD && ch == 0 && payload[..4] == [0, 10, 0, 51] {
            break;
        }
        assert!(
            ch == 1 || ty == wire::FRAME_HEARTBEAT,
            "unexpected frame on channel {ch}"
        );
    }
    assert!(
        c.wait_eof(Duration::from_secs(5)),
        "socket left open after close-ok"
    );
    // The publisher is unaffected.
    p.channel_open(2);
}

/// SIGTERM while a publisher streams and a consumer drains: the broker still tells its
/// clients 320 and exits 0 promptly.
async fn sigterm_under_load(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut idle = broker.raw();
    idle.channel_open(1);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = common::unique("q-load");
    ch.declare_queue(&q).await;
    let (_, mut rx) = ch.consume_auto(&q).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut publisher = broker.raw();
    publisher.channel_open(1);
    let (q2, stop2) = (q.clone(), stop.clone());
    let pump = std::thread::spawn(move || {
        let body = vec![b'p'; 2048];
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            if publisher
                .publish(1, "", &q2, &Props::default(), &body)
                .is_err()
            {
                break;
            }
        }
    });
    // Traffic is flowing end to end.
    for _ in 0..100 {
        common::next_delivery(&mut rx).await;
    }
    broker.sigterm();
    let (code, _) = idle.expect_connection_close();
    assert_eq!(code, 320);
    let status = broker
        .wait_exit(Duration::from_secs(10))
        .expect("sluice still running 10 s after SIGTERM under load");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    pump.join().unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "exit status after SIGTERM under load: {status}"
    );
}

/// `--config` is honoured: the [limits] of the file are what connection.tune offers.
async fn config_file_changes_tune_offer(shards: usize) {
    let broker = Broker::start_with_config(
        shards,
        "[limits]\nframe_max = 8192\nchannel_max = 100\nheartbeat = 7\n",
    );
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    c.send_start_ok("PLAIN", b"\0guest\0guest");
    let tune = c.read_tune();
    assert_eq!(
        tune,
        Tune {
            channel_max: 100,
            frame_max: 8192,
            heartbeat: 7
        }
    );
    c.send_tune_ok(Tune {
        heartbeat: 0,
        ..tune
    });
    c.send_open("/");
    c.read_open_ok();
    // Deliveries respect the configured frame_max.
    c.channel_open(1);
    let q = c.queue_declare(1, "", false, true, false);
    c.basic_consume(1, &q, true);
    let body = vec![3u8; 50_000];
    c.publish(1, "", &q, &Props::default(), &body).unwrap();
    let d = c.read_delivery(1);
    assert!(d.body == body);
    assert!(
        d.frame_sizes.iter().all(|s| *s <= 8192),
        "{:?}",
        d.frame_sizes
    );
}

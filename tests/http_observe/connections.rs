//! Each connection as `/api/connections` shows it, with RabbitMQ's fields: the name
//! (`PEER -> HOST:PORT`), both ends of the socket, `ssl`, `client_properties` as the
//! client sent them (`connection_name`, `product`, `capabilities`), `user`, `vhost`,
//! `auth_mechanism`, `connected_at`, its channels, and the bytes read and written
//! (`recv_oct`, `send_oct`), exact; the CON-1001 line names the client's
//! `connection_name`, escaped.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::common::raw::{client_properties, RawConn, Tune};
use crate::common::wire::{self, m, Enc, Props, Val};
use crate::common::{eventually, next_event, unique, Broker, Event, EVENT_TIMEOUT};
use crate::{get, get_ok, request, segment};

crate::shard_tests!(
    connections_show_rabbitmqs_fields,
    bytes_read_and_written_are_exact
);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A raw connection (guest on `/`, no heartbeats) whose client-properties are the
/// harness's plus `connection_name` = `name`.
fn raw_named(broker: &Broker, name: &[u8]) -> RawConn {
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    let mut props = client_properties();
    props.push(("connection_name".into(), Val::LongStr(name.to_vec())));
    let args = Enc::new()
        .table(&props)
        .shortstr("PLAIN")
        .longstr(b"\0guest\0guest")
        .shortstr("en_US")
        .done();
    c.send_method(0, m::CONNECTION_START_OK, &args)
        .expect("send start-ok");
    let offer = c.read_tune();
    c.send_tune_ok(Tune {
        heartbeat: 0,
        ..offer
    });
    c.send_open("/");
    c.read_open_ok();
    c
}

/// Every connection the API lists.
async fn connections(port: u16) -> Vec<Value> {
    let list = get_ok(port, "/api/connections").await;
    list.as_array().expect("a list of connections").clone()
}

/// The listed connection whose client-side port is `peer_port`.
async fn by_peer_port(port: u16, peer_port: u16) -> Value {
    connections(port)
        .await
        .into_iter()
        .find(|c| c["peer_port"] == peer_port)
        .unwrap_or_else(|| panic!("no connection from port {peer_port}"))
}

/// The listed connection whose client gave `connection_name` = `name`.
async fn by_client_name(port: u16, name: &str) -> Value {
    connections(port)
        .await
        .into_iter()
        .find(|c| c["client_properties"]["connection_name"] == name)
        .unwrap_or_else(|| panic!("no connection named {name} by its client"))
}

fn u64_of(c: &Value, key: &str) -> u64 {
    c[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a number: {c}"))
}

async fn connections_show_rabbitmqs_fields(shards: usize) {
    let broker = Broker::start_with_config(shards, "[broker]\nnode_name = \"obs-conns\"\n");
    let port = broker.http_port();
    let amqp = broker.port();
    let before = now_ms();
    let client_name = unique("observer");
    let mut args = broker.amqprs_args();
    args.connection_name(&client_name);
    let conn = crate::common::broker::connect_to(&args).await;
    let _ch1 = conn.channel().await;
    let _ch2 = conn.channel().await;
    let evil = b"evil\nCON-1001 : Open : Client: 6.6.6.6:1";
    let mut raw = raw_named(&broker, evil);
    raw.channel_open(1);
    let plain = broker.raw();
    let after = now_ms();
    let raw_port = raw.stream.local_addr().expect("local addr").port();
    let plain_port = plain.stream.local_addr().expect("local addr").port();

    // Every connection is listed, on whichever shard it landed.
    let all = connections(port).await;
    assert_eq!(all.len(), 3, "{all:?}");
    let mut names: Vec<&str> = all.iter().filter_map(|c| c["name"].as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), 3, "{all:?}");

    // The amqprs connection: its client's properties, two channels.
    let c = by_client_name(port, &client_name).await;
    let peer_port = u64_of(&c, "peer_port");
    assert_eq!(
        c["name"],
        format!("127.0.0.1:{peer_port} -> 127.0.0.1:{amqp}"),
        "{c}"
    );
    assert_eq!(c["type"], "network", "{c}");
    assert_eq!(c["protocol"], "AMQP 0-9-1", "{c}");
    assert_eq!(c["node"], "obs-conns", "{c}");
    assert_eq!(c["state"], "running", "{c}");
    assert_eq!(c["user"], "guest", "{c}");
    assert_eq!(c["vhost"], "/", "{c}");
    assert_eq!(c["peer_host"], "127.0.0.1", "{c}");
    assert_eq!(c["host"], "127.0.0.1", "{c}");
    assert_eq!(c["port"], amqp, "{c}");
    assert_eq!(c["ssl"], false, "{c}");
    assert_eq!(c["auth_mechanism"], "PLAIN", "{c}");
    assert_eq!(c["channels"], 2, "{c}");
    assert_eq!(
        c["client_properties"],
        json!({
            "connection_name": client_name,
            "product": "AMQPRS",
            "platform": "Rust",
            "version": "0.1",
            "capabilities": {"consumer_cancel_notify": true},
        }),
        "{c}"
    );
    let connected_at = u64_of(&c, "connected_at");
    assert!(
        (before..=after).contains(&connected_at),
        "{before} <= {connected_at} <= {after}: {c}"
    );
    assert!(u64_of(&c, "recv_oct") > 0, "{c}");
    assert!(u64_of(&c, "send_oct") > 0, "{c}");
    // One connection by its name: the same one.
    let path = format!(
        "/api/connections/{}",
        segment(c["name"].as_str().expect("name"))
    );
    let one = get_ok(port, &path).await;
    assert_eq!(one["client_properties"], c["client_properties"], "{one}");
    assert_eq!(one["peer_port"], c["peer_port"], "{one}");
    let r = get(
        port,
        "/api/connections/127.0.0.1%3A1%20-%3E%20127.0.0.1%3A2",
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    // The connection's channels name it, with its peer.
    let channels = get_ok(port, "/api/channels").await;
    let mine: Vec<&Value> = channels
        .as_array()
        .expect("channels")
        .iter()
        .filter(|ch| ch["connection_details"]["name"] == c["name"])
        .collect();
    assert_eq!(mine.len(), 2, "{channels}");
    for ch in mine {
        assert_eq!(ch["connection_details"]["peer_host"], "127.0.0.1", "{ch}");
        assert_eq!(ch["connection_details"]["peer_port"], peer_port, "{ch}");
    }
    let open = broker
        .wait_for_log(&format!(": Name: {client_name}"), EVENT_TIMEOUT)
        .expect("a CON-1001 line with the client's connection_name");
    assert!(
        open.ends_with(&format!(
            "CON-1001 : Open : Client: 127.0.0.1:{peer_port} : Name: {client_name}"
        )),
        "{open}"
    );

    // The raw connection: the client's port, its properties; its name escaped in the log.
    let r = by_peer_port(port, raw_port).await;
    assert_eq!(
        r["name"],
        format!("127.0.0.1:{raw_port} -> 127.0.0.1:{amqp}"),
        "{r}"
    );
    assert_eq!(r["channels"], 1, "{r}");
    assert_eq!(
        r["client_properties"]["connection_name"],
        String::from_utf8_lossy(evil).as_ref(),
        "{r}"
    );
    assert_eq!(r["client_properties"]["product"], "sluice-itests", "{r}");
    assert_eq!(
        r["client_properties"]["capabilities"],
        json!({
            "publisher_confirms": true,
            "consumer_cancel_notify": true,
            "basic.nack": true,
            "connection.blocked": true,
            "authentication_failure_close": true,
        }),
        "{r}"
    );
    let line = broker
        .wait_for_log(&format!("Client: 127.0.0.1:{raw_port}"), EVENT_TIMEOUT)
        .expect("CON-1001 for the raw connection");
    assert!(
        line.ends_with(&format!(
            "CON-1001 : Open : Client: 127.0.0.1:{raw_port} : Name: evil\\nCON-1001 : Open : Client: 6.6.6.6:1"
        )),
        "{line}"
    );
    assert_eq!(broker.count_logs("Client: 6.6.6.6:1"), 1);
    // Without a connection_name, the line ends at the client's address.
    let p = by_peer_port(port, plain_port).await;
    assert_eq!(p["channels"], 0, "{p}");
    assert!(
        p["client_properties"].get("connection_name").is_none(),
        "{p}"
    );
    let line = broker
        .wait_for_log(&format!("Client: 127.0.0.1:{plain_port}"), EVENT_TIMEOUT)
        .expect("CON-1001 for the plain connection");
    assert!(
        line.ends_with(&format!("CON-1001 : Open : Client: 127.0.0.1:{plain_port}")),
        "{line}"
    );

    // Publishing moves both counters of the amqprs connection.
    let queue = unique("octq");
    _ch1.declare_queue(&queue).await;
    for _ in 0..5 {
        _ch1.publish("", &queue, &[b'o'; 4_000]).await;
    }
    _ch1.wait_message_count(&queue, 5).await;
    let later = by_client_name(port, &client_name).await;
    assert!(
        u64_of(&later, "recv_oct") >= u64_of(&c, "recv_oct") + 20_000,
        "{c}\n{later}"
    );
    assert!(
        u64_of(&later, "send_oct") > u64_of(&c, "send_oct"),
        "{c}\n{later}"
    );

    // Closed by its RabbitMQ name: 320, and no longer listed.
    let path = format!(
        "/api/connections/{}",
        segment(c["name"].as_str().expect("name"))
    );
    let resp = request(port, "DELETE", &path, Some(("guest", "guest"))).await;
    assert_eq!(resp.status, 204, "{}", resp.body);
    let mut conn = conn;
    match next_event(&mut conn.events).await {
        Event::ConnectionClose { code, .. } => assert_eq!(code, 320),
        other => panic!("expected connection.close, got {other:?}"),
    }
    let gone = eventually(EVENT_TIMEOUT, || async {
        get(port, &path).await.status == 404
    })
    .await;
    assert!(gone, "the closed connection is still listed");
    assert_eq!(connections(port).await.len(), 2);
}

/// `recv_oct` counts every byte the broker read from the socket, `send_oct` every byte
/// it wrote: after a sync point, a heartbeat, a 10,000-byte publish and a passive
/// declare add exactly their frames to the one, the declare-ok to the other.
async fn bytes_read_and_written_are_exact(shards: usize) {
    let broker = Broker::start(shards);
    let port = broker.http_port();
    let mut raw = broker.raw();
    let local = raw.stream.local_addr().expect("local addr").port();
    raw.channel_open(1);
    let queue = unique("exactq");
    raw.queue_declare(1, &queue, false, false, false);
    // The broker has read all that was sent; what it wrote counts once the writer is
    // done: two readings alike.
    let mut a = by_peer_port(port, local).await;
    let mut settled = false;
    for _ in 0..50 {
        let next = by_peer_port(port, local).await;
        settled = next["send_oct"] == a["send_oct"];
        a = next;
        if settled {
            break;
        }
    }
    assert!(settled, "send_oct did not settle");

    let heartbeat = wire::frame(wire::FRAME_HEARTBEAT, 0, &[]);
    let body = vec![b'x'; 10_000];
    let publish_len = {
        let method = wire::frame(
            wire::FRAME_METHOD,
            1,
            &wire::method_payload(
                m::BASIC_PUBLISH,
                &RawConn::publish_args("", &queue, false, false),
            ),
        );
        let header = wire::frame(
            wire::FRAME_HEADER,
            1,
            &wire::content_header_payload(body.len() as u64, &Props::default()),
        );
        let frame_max = raw.tune.map_or(131_072, |t| t.frame_max as usize);
        assert!(body.len() + 8 <= frame_max, "one body frame");
        method.len() + header.len() + wire::frame(wire::FRAME_BODY, 1, &body).len()
    };
    let declare = Enc::new()
        .short(0)
        .shortstr(&queue)
        .bits(&[true, false, false, false, false])
        .table(&vec![])
        .done();
    let declare_frame = wire::frame(
        wire::FRAME_METHOD,
        1,
        &wire::method_payload(m::QUEUE_DECLARE, &declare),
    );
    raw.send(&heartbeat).expect("heartbeat");
    raw.publish(1, "", &queue, &Props::default(), &body)
        .expect("publish");
    raw.send(&declare_frame).expect("passive declare");
    let ok = raw.expect_method(1, m::QUEUE_DECLARE_OK);
    let mut d = ok.dec();
    assert_eq!(d.shortstr(), queue);
    assert_eq!(d.long(), 1, "the message is in the queue");
    let ok_len = wire::frame(
        wire::FRAME_METHOD,
        1,
        &wire::method_payload(m::QUEUE_DECLARE_OK, &ok.args),
    )
    .len() as u64;

    let sent = (heartbeat.len() + publish_len + declare_frame.len()) as u64;
    let b = by_peer_port(port, local).await;
    assert_eq!(
        u64_of(&b, "recv_oct") - u64_of(&a, "recv_oct"),
        sent,
        "{a}\n{b}"
    );
    let written = eventually(EVENT_TIMEOUT, || async {
        let b = by_peer_port(port, local).await;
        u64_of(&b, "send_oct") - u64_of(&a, "send_oct") == ok_len
    })
    .await;
    let b = by_peer_port(port, local).await;
    assert!(written, "send_oct grew by other than {ok_len}:\n{a}\n{b}");
}

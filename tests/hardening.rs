//! Hardening against hostile clients (issue 11): client-chosen names cannot forge log
//! lines, connection ids in logs are unique across shards, and stricter input checks
//! answer with RabbitMQ's codes and texts while other connections stay unharmed.

#[macro_use]
mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::wire::{self, Props};
use common::{Broker, Bystanders, RawConn};

const LOG_WAIT: Duration = Duration::from_secs(5);

shard_tests!(
    forged_names_are_escaped,
    unicode_line_breaks_are_escaped,
    malformed_utf8_name,
    connection_ids_are_unique,
    invalid_expiration,
    heartbeat_with_payload,
    plain_authzid_differs,
    mechanism_not_offered,
);

/// Healthy connections that watch each offence.
const BYSTANDERS: usize = 4;

/// A name that tries to forge a log line (`x\nBRK-1003 : Shutting down FORGED`) gets
/// nowhere: as a queue or exchange name it is refused with 406 before anything is
/// created; as a vhost, a username and a consumer tag, it reaches the logs escaped, and
/// no line starts like the forgery.
async fn forged_names_are_escaped(shards: usize) {
    let mut broker = Broker::start(shards);
    let forged = "BRK-1003 : Shutting down FORGED";
    let name = format!("x\n{forged}\r\t\\\u{1b}");
    let escaped = format!("x\\n{forged}\\r\\t\\\\\\x1b");
    offer_forged_names(&broker, &name, &escaped);
    for l in broker.logs() {
        assert!(!l.contains('\r'), "raw carriage return in {l:?}");
        assert!(!l.contains('\u{1b}'), "raw escape character in {l:?}");
        let trimmed = l.trim_start();
        assert!(
            !trimmed.starts_with(forged) && !trimmed.starts_with("BRK-1003"),
            "forged line: {l:?}"
        );
    }
    broker.assert_healthy();
}

/// Issue 18 item 12: the same forgery with the line breaks of Unicode-aware viewers —
/// NEL (U+0085) and the other C1 controls, the line and paragraph separators U+2028 /
/// U+2029 — is refused in queue and exchange names (406, as C0 controls are) and escaped
/// (`\x85`, `\x9b`, `\u2028`, `\u2029`) wherever else it reaches a text log line: no
/// line the broker writes holds any of them raw.
async fn unicode_line_breaks_are_escaped(shards: usize) {
    let mut broker = Broker::start(shards);
    let forged = "BRK-1003 : Shutting down FORGED";
    let name = format!("y\u{2028}{forged}\u{85}{forged}\u{2029}{forged}\u{9b}2J");
    let escaped = format!("y\\u2028{forged}\\x85{forged}\\u2029{forged}\\x9b2J");
    offer_forged_names(&broker, &name, &escaped);
    let logs = broker.logs();
    for l in &logs {
        assert!(
            !l.chars()
                .any(|c| c.is_control() || c == '\u{2028}' || c == '\u{2029}'),
            "raw line-breaking character in {l:?}"
        );
    }
    // Escaped, not dropped: the username (CON-1008) and the consumer tag (in the
    // subject of the consumer its queue's deletion logs) are in the log as escaped.
    assert!(
        logs.iter()
            .any(|l| l.contains(&format!("CON-1008 : Login refused : user '{escaped}'"))),
        "no CON-1008 line with the escaped user"
    );
    assert!(
        logs.iter().filter(|l| l.contains(&escaped)).count() >= 2,
        "the escaped name is in fewer than two lines: {logs:#?}"
    );
    broker.assert_healthy();
}

/// Offers `name` as a queue name and an exchange name (both refused with 406, the
/// text naming it as `escaped`), as a consumer tag (accepted), a vhost (530) and a
/// username (403); returns once the consumer's connection has closed (CON-1002).
fn offer_forged_names(broker: &Broker, name: &str, escaped: &str) {
    let mut c = RawConn::connect(&broker.addr());
    c.handshake();
    c.channel_open(1);
    let args = wire::Enc::new()
        .short(0)
        .shortstr(name)
        .bits(&[false, false, false, false, false])
        .table(&vec![])
        .done();
    c.send_method(1, wire::m::QUEUE_DECLARE, &args)
        .expect("send queue.declare");
    let (code, text) = c.expect_channel_close(1);
    assert_eq!(code, 406, "{text}");
    assert_eq!(
        text,
        format!("PRECONDITION_FAILED - queue name '{escaped}' contains a control character")
    );
    c.channel_open(2);
    let args = wire::Enc::new()
        .short(0)
        .shortstr(name)
        .shortstr("fanout")
        .bits(&[false, false, false, false, false])
        .table(&vec![])
        .done();
    c.send_method(2, wire::m::EXCHANGE_DECLARE, &args)
        .expect("send exchange.declare");
    let (code, text) = c.expect_channel_close(2);
    assert_eq!(code, 406, "{text}");
    assert_eq!(
        text,
        format!("PRECONDITION_FAILED - exchange name '{escaped}' contains a control character")
    );
    // A consumer tag may hold anything; it is logged escaped (the queue's deletion
    // logs its consumers' subjects).
    c.channel_open(3);
    let queue = c.queue_declare(3, "", false, false, true);
    let args = wire::Enc::new()
        .short(0)
        .shortstr(&queue)
        .shortstr(name)
        .bits(&[false, true, false, false])
        .table(&vec![])
        .done();
    c.send_method(3, wire::m::BASIC_CONSUME, &args)
        .expect("send basic.consume");
    c.expect_method(3, wire::m::BASIC_CONSUME_OK);

    // A vhost and a username with the forgery are refused, and logged escaped if at all.
    let mut v = RawConn::connect(&broker.addr());
    v.send_protocol_header();
    v.read_start();
    v.send_start_ok("PLAIN", b"\0guest\0guest");
    let tune = v.read_tune();
    v.send_tune_ok(tune);
    v.send_open(name);
    let (code, _) = v.expect_connection_close();
    assert_eq!(code, 530);
    let mut u = RawConn::connect(&broker.addr());
    u.send_protocol_header();
    u.read_start();
    u.send_start_ok("PLAIN", format!("\0{name}\0pw").as_bytes());
    let (code, _) = u.expect_connection_close();
    assert_eq!(code, 403);
    drop(c);
    broker
        .wait_for_log("CON-1002", LOG_WAIT)
        .expect("a CON-1002 line");
}

/// Short strings of methods without content must be UTF-8: anything else closes the
/// connection with 501 and RabbitMQ's text, and harms nobody else.
async fn malformed_utf8_name(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    for (method, args) in [
        (
            wire::m::QUEUE_DECLARE,
            wire::Enc::new()
                .short(0)
                .shortstr_bytes(b"q\xff\xfe")
                .bits(&[false, false, false, false, false])
                .table(&vec![])
                .done(),
        ),
        (
            wire::m::EXCHANGE_DECLARE,
            wire::Enc::new()
                .short(0)
                .shortstr_bytes(b"\xc3(")
                .shortstr("direct")
                .bits(&[false, false, false, false, false])
                .table(&vec![])
                .done(),
        ),
    ] {
        let mut c = broker.raw();
        c.channel_open(1);
        c.send_method(1, method, &args).expect("send");
        let (code, text) = c.expect_connection_close();
        assert_eq!(code, 501, "{text}");
        assert_eq!(text, "FRAME_ERROR - Malformed UTF-8 in shortstr");
    }
    // Valid multi-byte UTF-8 is fine.
    let mut c = broker.raw();
    c.channel_open(1);
    assert_eq!(
        c.queue_declare(1, "queue-é-日本", false, false, true),
        "queue-é-日本"
    );
    bystanders.assert_unharmed(&broker).await;
    broker.assert_healthy();
}

/// Connections on different shards never share a `con:N` subject.
async fn connection_ids_are_unique(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut conns = Vec::new();
    for _ in 0..(4 * shards) {
        let mut c = RawConn::connect(&broker.addr());
        c.handshake();
        conns.push(c);
    }
    let count = 4 * shards;
    let ok = common::wait_until(LOG_WAIT, || {
        broker
            .logs()
            .iter()
            .filter(|l| l.contains("CON-1001"))
            .count()
            >= count
    });
    assert!(ok, "expected {count} CON-1001 lines");
    let mut seen = HashSet::new();
    for l in broker.logs().iter().filter(|l| l.contains("CON-1001")) {
        let id = l
            .split("[con:")
            .nth(1)
            .and_then(|rest| rest.split('(').next())
            .expect("a [con:N( subject")
            .to_string();
        assert!(seen.insert(id.clone()), "con:{id} used twice: {l:?}");
    }
    drop(conns);
    broker.assert_healthy();
}

/// A non-numeric, negative, too large or trailing-garbage `expiration` closes the
/// publishing channel with RabbitMQ's `check_expiration_header` text; a valid one on
/// the same connection's other channel is still delivered.
async fn invalid_expiration(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    let mut c = broker.raw();
    c.channel_open(1);
    let queue = common::unique("expiry");
    c.queue_declare(1, &queue, false, false, false);
    let cases = [
        ("abc", "no_integer"),
        ("-5", "{value_negative,-5}"),
        ("12x", "{leftover_string,\"x\"}"),
        ("4294967296", "{value_too_large,4294967296}"),
    ];
    for (i, (value, reason)) in cases.iter().enumerate() {
        let channel = 2 + i as u16;
        c.channel_open(channel);
        let props = Props {
            expiration: Some(value.to_string()),
            ..Props::default()
        };
        c.publish(channel, "", &queue, &props, b"bad")
            .expect("publish");
        let (code, text) = c.expect_channel_close(channel);
        assert_eq!(code, 406, "{text}");
        assert_eq!(
            text,
            format!("PRECONDITION_FAILED - invalid expiration '{value}': {reason}")
        );
    }
    // The connection and its first channel still work.
    let props = Props {
        expiration: Some("60000".into()),
        ..Props::default()
    };
    c.publish(1, "", &queue, &props, b"good").expect("publish");
    let tag = c.basic_consume(1, &queue, true);
    assert!(!tag.is_empty());
    let d = c.read_delivery(1);
    assert_eq!(d.body, b"good");
    bystanders.assert_unharmed(&broker).await;
    broker.assert_healthy();
}

/// A heartbeat frame carrying a payload closes the connection with 501, as
/// rabbit_reader's `frame_error` words it, before and after the handshake.
async fn heartbeat_with_payload(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    let mut c = broker.raw();
    c.send_frame(wire::FRAME_HEARTBEAT, 0, b"abc")
        .expect("send");
    let (code, text) = c.expect_connection_close();
    assert_eq!(code, 501, "{text}");
    assert_eq!(
        text,
        "FRAME_ERROR - type 8, all octets = <<\"abc\">>: unknown_frame"
    );

    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    c.send_frame(wire::FRAME_HEARTBEAT, 0, &[1, 2])
        .expect("send");
    let (code, text) = c.expect_connection_close();
    assert_eq!(code, 501, "{text}");
    assert_eq!(
        text,
        "FRAME_ERROR - type 8, all octets = <<1,2>>: unknown_frame"
    );

    // An empty heartbeat is still fine.
    let mut c = broker.raw();
    c.send_heartbeat().expect("send");
    c.channel_open(1);
    bystanders.assert_unharmed(&broker).await;
    broker.assert_healthy();
}

/// SASL PLAIN with an authzid other than the authcid is refused like a bad password;
/// an authzid equal to the authcid is accepted.
async fn plain_authzid_differs(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    c.send_start_ok("PLAIN", b"admin\0guest\0guest");
    let (code, text) = c.expect_connection_close();
    assert_eq!(code, 403, "{text}");
    assert_eq!(
        text,
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. \
         For details see the broker logfile."
    );

    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    c.send_start_ok("PLAIN", b"guest\0guest\0guest");
    let tune = c.read_tune();
    c.send_tune_ok(tune);
    c.send_open("/");
    c.read_open_ok();
    c.channel_open(1);
    bystanders.assert_unharmed(&broker).await;
    broker.assert_healthy();
}

/// A start-ok that picks a mechanism `connection.start` did not offer gets no frame at
/// all: the socket is closed (the 0-9-1 spec's rule; RabbitMQ's reader does it after its
/// 3 s silent-close delay), logged as CON-1012 — whether the broker lacks the mechanism
/// or offers it only on verifying TLS listeners. Neither counts as a failed login.
async fn mechanism_not_offered(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    // Both at once: each waits out its own delay, neither holds the shard.
    let mut conns = Vec::new();
    for mechanism in ["CRAM-MD5", "EXTERNAL"] {
        let mut c = RawConn::connect(&broker.addr());
        c.send_protocol_header();
        assert_eq!(c.read_start().mechanisms, "PLAIN AMQPLAIN");
        c.send_start_ok(mechanism, b"\0guest\0guest");
        conns.push(c);
    }
    // Not at once: the socket stays open, silent, for the delay.
    let (early, closed) = conns[0].read_to_eof(Duration::from_millis(500));
    assert!(!closed && early.is_empty(), "{early:?} closed: {closed}");
    for c in &mut conns {
        let (bytes, closed) = c.read_to_eof(Duration::from_secs(10));
        assert!(closed, "socket still open");
        assert!(bytes.is_empty(), "the broker sent {bytes:?}");
    }
    broker
        .wait_for_log(
            "chose 'CRAM-MD5' (offered: PLAIN AMQPLAIN) : socket closed without a reply after 3 s",
            LOG_WAIT,
        )
        .expect("CON-1012 line");
    assert!(
        !broker.logs().iter().any(|l| l.contains("CON-1008")),
        "a mechanism error is not a failed login"
    );
    let mut c = RawConn::connect(&broker.addr());
    c.handshake();
    c.channel_open(1);
    bystanders.assert_unharmed(&broker).await;
    broker.assert_healthy();
}

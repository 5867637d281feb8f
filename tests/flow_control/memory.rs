//! The broker-wide memory watermark: above the high mark every publisher is blocked —
//! connection.blocked for clients that announced the capability, channel.flow for the
//! others — consumers keep running, and below the low mark everything is released.

use std::time::Duration;

use amqprs::channel::BasicAckArguments;
use bytes::Bytes;
use sluice::client::{ClientError, FlowOptions, NO_PROPERTIES};

use crate::common::raw::RawConn;
use crate::common::wire::{m, Enc, Props};
use crate::common::{next_delivery, unique, wait_until, Broker, Event, EVENT_TIMEOUT};
use crate::support::*;

shard_tests!(
    memory_watermark_blocks_and_releases_every_publisher,
    connection_opened_during_the_alarm_is_blocked,
);

const HIGH: u64 = 4_000_000;
const LOW: u64 = 2_000_000;
const BIG: usize = 65_536;
const GRACE: u64 = 262_144;
const READ_BUFFER: u64 = 131_072;

fn memory_config() -> String {
    format!("[memory]\nhigh_watermark = {HIGH}\nlow_watermark = {LOW}\n")
}

/// Publishes [`BIG`]-byte messages on channel 1 of `raw` into `queue` until BRK-1007 is
/// logged: 56 go at once (below the high mark), then one at a time, so that the
/// publisher stops well within its grace once blocked. Returns the line and the count.
async fn fill_until_alarm(broker: &Broker, raw: &mut RawConn, queue: &str) -> (String, u64) {
    let body = vec![b'm'; BIG];
    let mut sent = 0u64;
    loop {
        raw.publish(1, "", queue, &Props::default(), &body)
            .expect("publish");
        sent += 1;
        if sent < 56 {
            continue;
        }
        if let Some(line) = wait_ops(broker, Duration::from_millis(50), |l| {
            l.starts_with("BRK-1007 ")
        }) {
            return (line, sent);
        }
        assert!(
            sent < 160,
            "no BRK-1007 after {sent} messages of {BIG} bytes"
        );
    }
}

/// Reads the next method on a capability client: connection.blocked with reason
/// "low on memory", or connection.unblocked.
fn raw_expect_blocked(raw: &mut RawConn, blocked: bool, who: &str) {
    let mth = next_method(raw, who);
    if blocked {
        assert_eq!((mth.id, mth.channel), (CONNECTION_BLOCKED, 0), "{who}");
        assert_eq!(
            mth.dec().shortstr(),
            "low on memory",
            "{who}: blocked reason"
        );
    } else {
        assert_eq!((mth.id, mth.channel), (CONNECTION_UNBLOCKED, 0), "{who}");
    }
}

/// `USED` from `PREFIX<USED> bytes, <WATERMARK> : <SUFFIX>`, checking the watermark.
fn used_in(line: &str, prefix: &str, mark_label: &str, mark: u64, suffix: &str) -> u64 {
    let rest = line
        .strip_prefix(prefix)
        .and_then(|r| r.strip_suffix(suffix))
        .unwrap_or_else(|| panic!("not `{prefix}..{suffix}`: {line}"));
    let (used, mark_text) = rest
        .split_once(&format!(" bytes, {mark_label} : "))
        .unwrap_or_else(|| panic!("no `{mark_label}` in {line}"));
    assert_eq!(mark_text, thousands(mark), "{line}");
    parse_thousands(used).unwrap_or_else(|| panic!("bad number `{used}` in {line}"))
}

/// The full scenario with [memory] high 4,000,000 / low 2,000,000 bytes:
///
/// - publishers: P1 and P2 (raw, announce `connection.blocked`), P3 (raw, announces no
///   capabilities; channel 1 published, channel 2 did not), an amqprs channel that
///   published (amqprs does not announce `connection.blocked` — checked), and sluice's
///   client (announces it);
/// - P1 publishes 64 KiB messages into a queue without consumers until BRK-1007;
/// - P1, P2 and sluice's client are blocked (connection.blocked "low on memory"); P3's
///   publishing channel and the amqprs channel get channel.flow(false) with CHN-1005
///   "(Memory high watermark)"; so does P4 (raw, no capabilities) whose first publish
///   comes during the alarm; a held sluice publish fails with FlowControlTimeout;
/// - P2 ignores connection.blocked and publishes six 64 KiB messages: the fifth takes it
///   past the grace (327,680 > 262,144 bytes), CON-1003 says so, and the sixth is not
///   read until the alarm clears;
/// - a consumer receives and acks its backlog while the alarm is on;
/// - purging the big queue logs BRK-1008; everyone is released (connection.unblocked,
///   channel.flow(true) + CHN-1006) and publishing works again.
async fn memory_watermark_blocks_and_releases_every_publisher(shards: usize) {
    assert!(
        raw_announces_blocked(),
        "the raw handshake must announce connection.blocked"
    );
    let broker = Broker::start_with_config(shards, &memory_config());
    let watermarks =
        wait_ops(&broker, EVENT_TIMEOUT, |l| l.starts_with("BRK-1009 ")).expect("no BRK-1009 line");
    assert!(
        watermarks.starts_with(&format!(
            "BRK-1009 : Memory watermarks : High : {} bytes, Low : {} bytes, Available : ",
            thousands(HIGH),
            thousands(LOW)
        )),
        "{watermarks}"
    );
    let (big, backlog, small, ignored) = (
        unique("mem-big"),
        unique("mem-backlog"),
        unique("mem-small"),
        unique("mem-ignored"),
    );
    let (admin_conn, admin) = conn_and_channel(&broker).await;
    for q in [&big, &backlog, &small, &ignored] {
        admin.declare_queue(q).await;
    }
    let mut amqprs_conn = broker.connect().await;
    let mut amqprs_pub = amqprs_conn.channel().await;
    for n in 1..=3 {
        amqprs_pub.publish("", &backlog, &numbered(n)).await;
    }

    let mut p1 = broker.raw();
    p1.channel_open(1);
    let mut p2 = broker.raw();
    p2.channel_open(1);
    p2.publish(1, "", &small, &Props::default(), &numbered(1))
        .expect("publish");
    let mut p3 = raw_without_capabilities(&broker);
    p3.channel_open(1);
    p3.channel_open(2);
    p3.publish(1, "", &small, &Props::default(), &numbered(2))
        .expect("publish");
    let p3_subject = raw_subject(&broker, &p3);
    let flow = FlowOptions {
        notify_period: Duration::from_millis(100),
        wait_failure: Duration::from_millis(500),
        honour_flow: true,
    };
    let sluice_conn = sluice_connect(&broker, flow).await;
    let sluice_ch = sluice_conn.open_channel().await.expect("channel");
    admin.wait_message_count(&small, 2).await;
    admin.wait_message_count(&backlog, 3).await;

    let (alarm, sent) = fill_until_alarm(&broker, &mut p1, &big).await;
    admin.wait_message_count(&big, sent as u32).await;
    let used = used_in(
        &alarm,
        "BRK-1007 : Memory high watermark exceeded : Used : ",
        "High watermark",
        HIGH,
        " : every publisher is blocked",
    );
    assert!(used > HIGH, "{alarm}");

    raw_expect_blocked(&mut p1, true, "P1");
    raw_expect_blocked(&mut p2, true, "P2");
    let p2_subject = raw_subject(&broker, &p2);
    let body = vec![b'm'; BIG];
    for _ in 0..6 {
        p2.publish(1, "", &ignored, &Props::default(), &body)
            .expect("publish");
    }
    expect_line(
        &broker,
        &format!(
            "[{p2_subject}] CON-1003 : Reading suspended : channel 1 published 327,680 bytes \
             after it was told to stop (grace 262,144 bytes)"
        ),
    );
    admin.wait_message_count(&ignored, 5).await;
    let mut p4 = raw_without_capabilities(&broker);
    p4.channel_open(1);
    let p4_subject = raw_subject(&broker, &p4);
    p4.publish(1, "", &small, &Props::default(), &numbered(3))
        .expect("publish");
    assert!(
        !raw_expect_flow(&mut p4, 1),
        "P4 is stopped on its first publish"
    );
    expect_line(&broker, &format!("[{p4_subject}/ch:1] {ENFORCED_MEMORY}"));
    assert!(!raw_expect_flow(&mut p3, 1), "P3 channel 1 is stopped");
    expect_line(&broker, &format!("[{p3_subject}/ch:1] {ENFORCED_MEMORY}"));
    assert!(
        !expect_flow(&mut amqprs_pub).await,
        "the amqprs channel is stopped"
    );
    expect_channel_line(&broker, amqprs_pub.channel_id(), ENFORCED_MEMORY);
    assert!(
        wait_until(EVENT_TIMEOUT, || sluice_conn.is_blocked()),
        "sluice's client was not blocked"
    );
    assert_eq!(sluice_conn.blocked_count(), 1);
    match sluice_ch
        .basic_publish(
            "",
            small.as_str(),
            false,
            NO_PROPERTIES,
            Bytes::from_static(b"held"),
        )
        .await
    {
        Err(ClientError::FlowControlTimeout { waited }) => {
            assert!(waited >= flow.wait_failure, "gave up after {waited:?}")
        }
        other => panic!("publish while blocked: expected FlowControlTimeout, got {other:?}"),
    }

    // Consumers keep running while the alarm is on.
    let cons_conn = broker.connect().await;
    let cons = cons_conn.channel().await;
    let (_, mut deliveries) = cons.consume_manual(&backlog).await;
    for n in 1..=3 {
        let d = next_delivery(&mut deliveries).await;
        assert_eq!(number_of(&d.body), n);
        cons.basic_ack(BasicAckArguments::new(d.delivery_tag, false))
            .await
            .expect("ack");
    }
    admin.wait_message_count(&backlog, 0).await;
    assert!(
        lines_containing(&broker, "BRK-1008").is_empty(),
        "alarm cleared too early"
    );
    admin.wait_message_count(&small, 3).await;
    assert_eq!(
        admin.message_count(&ignored).await,
        5,
        "P2 is not read while held"
    );

    // Release.
    assert_eq!(u64::from(purge(&admin, &big).await), sent);
    let cleared = wait_ops(&broker, EVENT_TIMEOUT, |l| l.starts_with("BRK-1008 "))
        .expect("no BRK-1008 after the purge");
    let used = used_in(
        &cleared,
        "BRK-1008 : Memory alarm cleared : Used : ",
        "Low watermark",
        LOW,
        " : publishers resume",
    );
    assert!(used < LOW, "{cleared}");
    raw_expect_blocked(&mut p1, false, "P1");
    raw_expect_blocked(&mut p2, false, "P2");
    expect_line(
        &broker,
        &format!("[{p2_subject}] CON-1004 : Reading resumed"),
    );
    admin.wait_message_count(&ignored, 6).await;
    assert!(raw_expect_flow(&mut p4, 1), "P4 is released");
    assert!(raw_expect_flow(&mut p3, 1), "P3 channel 1 is released");
    expect_line(&broker, &format!("[{p3_subject}/ch:1] {REMOVED}"));
    assert!(
        expect_flow(&mut amqprs_pub).await,
        "the amqprs channel is released"
    );
    assert!(
        wait_until(EVENT_TIMEOUT, || !sluice_conn.is_blocked()),
        "sluice's client was not unblocked"
    );
    while let Ok(ev) = amqprs_conn.events.try_recv() {
        assert!(
            !matches!(ev, Event::Blocked { .. } | Event::Unblocked),
            "amqprs does not announce connection.blocked, yet got {ev:?}"
        );
    }

    // Publishing works again, from every kind of client.
    p1.publish(1, "", &backlog, &Props::default(), &numbered(4))
        .expect("publish");
    p3.publish(1, "", &backlog, &Props::default(), &numbered(5))
        .expect("publish");
    amqprs_pub.publish("", &backlog, &numbered(6)).await;
    sluice_ch
        .basic_publish(
            "",
            backlog.as_str(),
            false,
            NO_PROPERTIES,
            Bytes::from(numbered(7)),
        )
        .await
        .expect("publish after the alarm");
    let mut got = Vec::new();
    for _ in 4..=7 {
        let d = next_delivery(&mut deliveries).await;
        got.push(number_of(&d.body));
        cons.basic_ack(BasicAckArguments::new(d.delivery_tag, false))
            .await
            .expect("ack");
    }
    got.sort_unstable();
    assert_eq!(got, vec![4, 5, 6, 7]);
    // P3's channel 2 never published, so it was never stopped: the next thing P3 sees
    // is the close-ok of its own close.
    p3.send_method(
        0,
        m::CONNECTION_CLOSE,
        &Enc::new()
            .short(200)
            .shortstr("bye")
            .short(0)
            .short(0)
            .done(),
    )
    .expect("close");
    p3.expect_method(0, m::CONNECTION_CLOSE_OK);
    raw_close(&mut p1);
    raw_close(&mut p2);
    raw_close(&mut p4);
    sluice_conn.close().await.expect("close");
    cons_conn.close().await;
    amqprs_conn.close().await;
    admin_conn.close().await;
}

/// A client that announces `connection.blocked` and connects while the alarm is on is a
/// publisher like any other: publishing 40 x 64 KiB, it is not read past its grace (the
/// queue gets at most (grace + read buffer) / 64 KiB + 1 of them), and it is told with
/// connection.blocked.
async fn connection_opened_during_the_alarm_is_blocked(shards: usize) {
    const LATE_TOTAL: u64 = 40;
    let broker = Broker::start_with_config(shards, &memory_config());
    let (admin_conn, admin) = conn_and_channel(&broker).await;
    let (big, late_q) = (unique("mem-big"), unique("mem-late"));
    admin.declare_queue(&big).await;
    admin.declare_queue(&late_q).await;
    let mut p1 = broker.raw();
    p1.channel_open(1);
    fill_until_alarm(&broker, &mut p1, &big).await;
    raw_expect_blocked(&mut p1, true, "P1");
    // Every shard applies the alarm on its next tick (10 ms); connect well after that, so
    // the connection is not simply caught by the alarm being raised.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let mut late = broker.raw();
    late.channel_open(1);
    let subject = raw_subject(&broker, &late);
    let writer = flood(&late, 1, &late_q, BIG, LATE_TOTAL);
    let bound = (GRACE + READ_BUFFER) / BIG as u64 + 1;
    let mut most = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(1500);
    while tokio::time::Instant::now() < deadline && most <= bound {
        most = most.max(u64::from(admin.message_count(&late_q).await));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        most <= bound,
        "a connection opened during the memory alarm had {most} of its {LATE_TOTAL} messages \
         of {BIG} bytes accepted (bound {bound}); CON-1003 lines for it: {:?}",
        lines_containing(&broker, &format!("[{subject}] CON-1003"))
    );
    late.stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let told = late.read_method().map(|m| (m.id, m.channel));
    assert!(
        matches!(told, Ok((CONNECTION_BLOCKED, 0))),
        "a capability client connected during the alarm was not sent connection.blocked: {told:?}"
    );
    late.stream
        .shutdown(std::net::Shutdown::Both)
        .expect("shutdown");
    writer.finish_ignoring_errors();
    admin_conn.close().await;
}

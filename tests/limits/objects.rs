//! channel_max, queues per vhost, consumers per channel, bindings per exchange.

use std::time::Duration;

use super::support::{close, expect_close, log_count, open};
use crate::common::raw::{RawConn, Tune};
use crate::common::wire::{m, Enc};
use crate::common::Broker;

const QUEUE_DELETE: (u16, u16) = (50, 40);
const QUEUE_DELETE_OK: (u16, u16) = (50, 41);
const QUEUE_UNBIND: (u16, u16) = (50, 50);
const QUEUE_UNBIND_OK: (u16, u16) = (50, 51);
const BASIC_CANCEL: (u16, u16) = (60, 30);
const BASIC_CANCEL_OK: (u16, u16) = (60, 31);
const EXCHANGE_BIND: (u16, u16) = (40, 30);

#[test]
fn channel_max_refuses_the_channel_after_the_negotiated_count() {
    let broker = Broker::start_with_config(1, "[limits]\nchannel_max = 2\n");
    let mut c = open(&broker).conn();
    c.channel_open(1);
    c.channel_open(2);
    c.send_method(3, m::CHANNEL_OPEN, &Enc::new().shortstr("").done())
        .expect("channel.open 3");
    assert_eq!(
        expect_close(&mut c),
        (
            530,
            "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)"
                .to_owned(),
            0,
            0
        )
    );
    assert!(broker
        .wait_for_log("CHN-1016 : Refused", Duration::from_secs(5))
        .is_some());

    // A client that negotiates fewer channels is held to its own number.
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    c.send_start_ok("PLAIN", b"\0guest\0guest");
    let offer = c.read_tune();
    assert_eq!(offer.channel_max, 2);
    c.send_tune_ok(Tune {
        channel_max: 1,
        heartbeat: 0,
        ..offer
    });
    c.send_open("/");
    c.read_open_ok();
    c.channel_open(1);
    c.send_method(2, m::CHANNEL_OPEN, &Enc::new().shortstr("").done())
        .expect("channel.open 2");
    let (code, text, ..) = expect_close(&mut c);
    assert_eq!(code, 530);
    assert_eq!(
        text,
        "NOT_ALLOWED - number of channels opened (1) has reached the negotiated channel_max (1)"
    );
    // Closing a channel frees its place.
    let mut c = open(&broker).conn();
    c.channel_open(1);
    c.channel_open(2);
    c.send_method(2, m::CHANNEL_CLOSE, &close_args())
        .expect("channel.close");
    c.expect_method(2, m::CHANNEL_CLOSE_OK);
    c.channel_open(2);
    close(c);
}

fn close_args() -> Vec<u8> {
    Enc::new().short(200).shortstr("").short(0).short(0).done()
}

fn declare(c: &mut RawConn, channel: u16, name: &str) {
    c.queue_declare(channel, name, false, false, false);
}

fn send_declare(c: &mut RawConn, channel: u16, name: &str) {
    c.send_queue_declare(channel, name, [false; 3]);
}

fn delete(c: &mut RawConn, channel: u16, name: &str) {
    let args = Enc::new()
        .short(0)
        .shortstr(name)
        .bits(&[false, false, false])
        .done();
    c.send_method(channel, QUEUE_DELETE, &args)
        .expect("queue.delete");
    c.expect_method(channel, QUEUE_DELETE_OK);
}

shard_tests!(queues_per_vhost);

async fn queues_per_vhost(shards: usize) {
    tokio::task::spawn_blocking(move || queues_per_vhost_blocking(shards))
        .await
        .expect("test thread");
}

fn queues_per_vhost_blocking(shards: usize) {
    let broker = Broker::start_with_config(shards, "[vhost.\"/\"]\nmax_queues = 2\n");
    let mut c = open(&broker).conn();
    c.channel_open(1);
    declare(&mut c, 1, "q1");
    let server_named = c.queue_declare(1, "", false, true, false);
    assert!(server_named.starts_with("amq.gen-"), "{server_named}");
    // Redeclaring an existing queue does not count.
    declare(&mut c, 1, "q1");
    send_declare(&mut c, 1, "q3");
    assert_eq!(
        c.expect_channel_close(1),
        (
            406,
            "PRECONDITION_FAILED - cannot declare queue 'q3': queue limit in vhost '/' (2) is reached"
                .to_owned()
        )
    );
    assert!(broker
        .wait_for_log("QUE-1010 : Declaration refused", Duration::from_secs(5))
        .is_some_and(|l| l.contains("[vh(/)/qu(q3)]")));
    // The refusal is not logged as a channel close line per refusal.
    assert_eq!(log_count(&broker, "CHN-1003 : Close : 406"), 0);
    // Deleting a queue releases its place.
    c.channel_open(2);
    delete(&mut c, 2, "q1");
    declare(&mut c, 2, "q3");
    send_declare(&mut c, 2, "q4");
    assert_eq!(c.expect_channel_close(2).0, 406);
    // An exclusive queue goes with its connection, and its place with it.
    close(c);
    let mut c = super::support::open_eventually(|| open(&broker));
    c.channel_open(1);
    let mut declared = false;
    for _ in 0..100 {
        send_declare(&mut c, 1, "q5");
        let mth = c.read_method().expect("answer");
        if mth.id == m::QUEUE_DECLARE_OK {
            declared = true;
            break;
        }
        c.send_method(1, m::CHANNEL_CLOSE_OK, &[])
            .expect("close-ok");
        std::thread::sleep(Duration::from_millis(20));
        c.channel_open(1);
    }
    assert!(declared, "the exclusive queue's place was never released");
    close(c);
}

#[test]
fn consumers_per_channel() {
    let broker = Broker::start_with_config(2, "[limits]\nconsumers_per_channel = 2\n");
    let mut c = open(&broker).conn();
    c.channel_open(1);
    declare(&mut c, 1, "cq");
    let first = c.basic_consume(1, "cq", true);
    c.basic_consume(1, "cq", true);
    // Cancelling one frees its place.
    let args = Enc::new().shortstr(&first).bits(&[false]).done();
    c.send_method(1, BASIC_CANCEL, &args).expect("cancel");
    c.expect_method(1, BASIC_CANCEL_OK);
    c.basic_consume(1, "cq", true);
    // Another channel has its own count.
    c.channel_open(2);
    c.basic_consume(2, "cq", true);
    let args = Enc::new()
        .short(0)
        .shortstr("cq")
        .shortstr("")
        .bits(&[false, true, false, false])
        .table(&vec![])
        .done();
    c.send_method(1, m::BASIC_CONSUME, &args)
        .expect("third consume");
    assert_eq!(
        expect_close(&mut c),
        (
            530,
            "NOT_ALLOWED - reached maximum (2) of consumers per channel".to_owned(),
            60,
            20
        )
    );
    assert!(broker
        .wait_for_log("CHN-1015 : Refused", Duration::from_secs(5))
        .is_some_and(|l| l.contains("limits.consumers_per_channel")));
}

fn send_bind(c: &mut RawConn, channel: u16, queue: &str, exchange: &str, key: &str) {
    let args = Enc::new()
        .short(0)
        .shortstr(queue)
        .shortstr(exchange)
        .shortstr(key)
        .bits(&[false])
        .table(&vec![])
        .done();
    c.send_method(channel, m::QUEUE_BIND, &args).expect("bind");
}

#[test]
fn bindings_per_exchange() {
    let broker = Broker::start_with_config(2, "[limits]\nbindings_per_exchange = 2\n");
    let mut c = open(&broker).conn();
    c.channel_open(1);
    declare(&mut c, 1, "bq");
    c.queue_bind(1, "bq", "amq.direct", "a");
    c.queue_bind(1, "bq", "amq.direct", "b");
    // An existing binding is not a new one.
    c.queue_bind(1, "bq", "amq.direct", "a");
    send_bind(&mut c, 1, "bq", "amq.direct", "c");
    assert_eq!(
        c.expect_channel_close(1),
        (
            406,
            "PRECONDITION_FAILED - cannot bind to exchange 'amq.direct' in vhost '/': binding limit per exchange (2) is reached"
                .to_owned()
        )
    );
    assert!(broker
        .wait_for_log("EXH-1010 : Binding refused", Duration::from_secs(5))
        .is_some_and(|l| l.contains("[vh(/)/ex(amq.direct)]")));
    // Exchange-to-exchange bindings count too.
    c.channel_open(2);
    let args = Enc::new()
        .short(0)
        .shortstr("amq.topic")
        .shortstr("amq.direct")
        .shortstr("x")
        .bits(&[false])
        .table(&vec![])
        .done();
    c.send_method(2, EXCHANGE_BIND, &args)
        .expect("exchange.bind");
    assert_eq!(c.expect_channel_close(2).0, 406);
    // Unbinding frees a place; other exchanges have their own count.
    c.channel_open(3);
    let args = Enc::new()
        .short(0)
        .shortstr("bq")
        .shortstr("amq.direct")
        .shortstr("a")
        .table(&vec![])
        .done();
    c.send_method(3, QUEUE_UNBIND, &args).expect("unbind");
    c.expect_method(3, QUEUE_UNBIND_OK);
    c.queue_bind(3, "bq", "amq.direct", "c");
    c.queue_bind(3, "bq", "amq.topic", "t1");
    c.queue_bind(3, "bq", "amq.topic", "t2");
    close(c);
}

//! Direct reply-to (issue 24; RabbitMQ's `amq.rabbitmq.reply-to`), on raw frames and
//! amqprs against a child sluice with one and two shards. With two shards the requester
//! and the replier are put on different shards (a connection's shard is read off the
//! server-named queue it declares, which is named to live there), so every reply
//! crosses between shards:
//!
//! - `basic.consume` on `amq.rabbitmq.reply-to` with no-ack answers consume-ok; with
//!   manual ack, or a second time on the channel, it is refused with RabbitMQ's 406
//!   texts; a publish with `reply_to = amq.rabbitmq.reply-to` on a channel without such
//!   a consumer is refused with 406 too;
//! - a request's `reply_to` arrives rewritten to `amq.rabbitmq.reply-to.<token>`, the
//!   same for every request of that channel, another for another channel;
//! - a publish to the default exchange with that routing key is delivered to the
//!   requesting channel's consumer (its tag, delivery tags 1, 2, …, exchange "", the
//!   address as routing key, every property kept), with no queue in between;
//! - once the consumer is gone (cancelled, channel closed and its number reused) or for
//!   an altered token, the reply is dropped: returned with 312 NO_ROUTE under mandatory,
//!   and acked (after the return) under confirms.
//!
//! Each failed before: the consume was `404 NOT_FOUND - no queue
//! 'amq.rabbitmq.reply-to' in vhost '/'`.
//!
//! Sections in `tests/direct_reply_to/`: `names` (bind, unbind, purge, delete, get and
//! consume on the pseudo-queue and on addresses answer as RabbitMQ 3.10's), `paused`
//! (replies to a channel paused by `channel.flow(active=false)` are held, capped, and
//! delivered in order when it resumes); `support` holds the helpers.

#[macro_use]
mod common;

#[path = "direct_reply_to/support.rs"]
mod support;

#[path = "direct_reply_to/names.rs"]
mod names;
#[path = "direct_reply_to/paused.rs"]
mod paused;

use std::time::Duration;

use amqprs::channel::{BasicConsumeArguments, BasicPublishArguments, QueueDeclareArguments};
use amqprs::BasicProperties;
use common::wire::{self, m, Enc, Props};
use common::{Broker, RawConn};
use support::*;

shard_tests!(
    rpc_round_trip,
    refusals_in_rabbitmq_words,
    replies_to_a_gone_consumer_are_dropped_or_returned,
    an_altered_address_reaches_nobody,
    declares_of_reply_names_are_passive,
    a_requester_that_stops_reading_gets_its_replies_dropped,
    amqprs_rpc,
);

async fn rpc_round_trip(shards: usize) {
    let broker = Broker::start(shards);
    let (mut requester, mut replier) = requester_and_replier(&broker, shards);
    let rpc = common::unique("rpc");
    replier.queue_declare(1, &rpc, false, false, true);
    replier.basic_consume(1, &rpc, true);
    requester.channel_open(2);
    let tag = reply_consume(&mut requester, 2);
    let mut address = None;
    for (n, correlation) in [(1u64, "c1"), (2, "c2")] {
        requester
            .publish(2, "", &rpc, &request_props(correlation), b"ping")
            .expect("request");
        let request = replier.read_delivery(1);
        assert_eq!(request.body, b"ping");
        assert_eq!(request.props.correlation_id.as_deref(), Some(correlation));
        let reply_to = request.props.reply_to.clone().expect("reply_to");
        assert!(
            reply_to.starts_with(PREFIX) && reply_to.len() > PREFIX.len() + 16,
            "{reply_to}"
        );
        // One address per channel.
        assert_eq!(address.get_or_insert_with(|| reply_to.clone()), &reply_to);
        let props = Props {
            correlation_id: Some(correlation.to_owned()),
            content_type: Some("text/plain".to_owned()),
            ..Props::default()
        };
        replier
            .publish(1, "", &reply_to, &props, b"pong")
            .expect("reply");
        let reply = requester.read_delivery(2);
        assert_eq!(
            deliver_fields(&reply),
            (tag.clone(), n, false, String::new(), reply_to.clone())
        );
        assert_eq!(reply.body, b"pong");
        assert_eq!(reply.props, props);
    }
    // Another channel of the requester has another address.
    requester.channel_open(3);
    reply_consume(&mut requester, 3);
    requester
        .publish(3, "", &rpc, &request_props("c3"), b"ping")
        .expect("request");
    let other = replier.read_delivery(1).props.reply_to.expect("reply_to");
    assert!(other.starts_with(PREFIX), "{other}");
    assert_ne!(Some(other), address);
    // A message without reply_to, or another reply_to, is left as it was.
    let plain = Props {
        reply_to: Some("my-own-queue".to_owned()),
        ..Props::default()
    };
    requester
        .publish(2, "", &rpc, &plain, b"x")
        .expect("publish");
    assert_eq!(replier.read_delivery(1).props, plain);
}

async fn refusals_in_rabbitmq_words(shards: usize) {
    let broker = Broker::start(shards);
    let mut c = broker.raw();
    c.channel_open(1);
    send_reply_consume(&mut c, 1, "", false);
    let close = c.expect_method(1, m::CHANNEL_CLOSE);
    let mut d = close.dec();
    assert_eq!(
        (d.short(), d.shortstr(), d.short(), d.short()),
        (
            406,
            "PRECONDITION_FAILED - reply consumer cannot acknowledge".to_owned(),
            60,
            20
        )
    );
    c.send_method(1, m::CHANNEL_CLOSE_OK, &[])
        .expect("close-ok");
    c.channel_open(1);
    send_reply_consume(&mut c, 1, "my-replies", true);
    let ok = c.expect_method(1, m::BASIC_CONSUME_OK);
    assert_eq!(ok.dec().shortstr(), "my-replies");
    send_reply_consume(&mut c, 1, "", true);
    assert_eq!(
        c.expect_channel_close(1),
        (
            406,
            "PRECONDITION_FAILED - reply consumer already set".to_owned()
        )
    );
    // A request naming the pseudo-queue on a channel without a reply consumer.
    c.channel_open(2);
    c.publish(2, "", "anywhere", &request_props("c"), b"x")
        .expect("publish");
    let close = c.expect_method(2, m::CHANNEL_CLOSE);
    let mut d = close.dec();
    assert_eq!(
        (d.short(), d.shortstr(), d.short(), d.short()),
        (
            406,
            "PRECONDITION_FAILED - fast reply consumer does not exist".to_owned(),
            60,
            40
        )
    );
    c.send_method(2, m::CHANNEL_CLOSE_OK, &[])
        .expect("close-ok");
    // The connection goes on.
    c.channel_open(3);
    c.queue_declare(3, "", false, true, true);
}

async fn replies_to_a_gone_consumer_are_dropped_or_returned(shards: usize) {
    let broker = Broker::start(shards);
    let (mut requester, mut replier) = requester_and_replier(&broker, shards);
    let own = requester.queue_declare(1, "", false, true, true);
    requester.basic_consume(1, &own, true);
    requester.channel_open(2);
    let tag = reply_consume(&mut requester, 2);
    let first = address_of(&mut requester, 2, 1, &own);
    replier.confirm_select(1);
    // Live: delivered, then acked.
    publish_flags(&mut replier, 1, &first, true, &Props::default(), b"one");
    assert_eq!(requester.read_delivery(2).body, b"one");
    let ack = replier.expect_method(1, m::BASIC_ACK);
    assert_eq!(ack.dec().longlong(), 1);
    // Cancelled: a mandatory reply comes back before its ack; a plain one is dropped.
    let args = Enc::new().shortstr(&tag).bits(&[false]).done();
    requester
        .send_method(2, (60, 30), &args)
        .expect("basic.cancel");
    assert_eq!(requester.expect_method(2, (60, 31)).dec().shortstr(), tag);
    publish_flags(&mut replier, 1, &first, false, &Props::default(), b"lost");
    publish_flags(&mut replier, 1, &first, true, &Props::default(), b"two");
    assert_eq!(
        return_then_ack(&mut replier, 3),
        (
            312,
            "NO_ROUTE".to_owned(),
            String::new(),
            first.clone(),
            b"two".to_vec()
        )
    );
    // The channel closed and its number reused with a new reply consumer: the old
    // address names nothing, the new one the new consumer.
    requester
        .send_method(
            2,
            m::CHANNEL_CLOSE,
            &Enc::new()
                .short(200)
                .shortstr("bye")
                .short(0)
                .short(0)
                .done(),
        )
        .expect("channel.close");
    requester.expect_method(2, m::CHANNEL_CLOSE_OK);
    requester.channel_open(2);
    let new_tag = reply_consume(&mut requester, 2);
    let second = address_of(&mut requester, 2, 1, &own);
    assert_ne!(second, first);
    publish_flags(&mut replier, 1, &first, true, &Props::default(), b"old");
    assert_eq!(return_then_ack(&mut replier, 4).4, b"old");
    publish_flags(&mut replier, 1, &second, true, &Props::default(), b"new");
    let d = requester.read_delivery(2);
    assert_eq!(d.body, b"new", "the dropped replies never arrived");
    assert_eq!(deliver_fields(&d).0, new_tag);
    assert_eq!(deliver_fields(&d).1, 1, "the new channel's first delivery");
    // The requester's connection gone: returned too.
    drop(requester);
    let mut returned = false;
    for _ in 0..100 {
        publish_flags(&mut replier, 1, &second, true, &Props::default(), b"gone");
        let method = replier.read_method().expect("return or ack");
        if method.id == m::BASIC_RETURN {
            returned = true;
            break;
        }
        assert_eq!(method.id, m::BASIC_ACK, "{method:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(returned, "a reply to a closed connection was not returned");
}

async fn an_altered_address_reaches_nobody(shards: usize) {
    let broker = Broker::start(shards);
    let (mut requester, mut replier) = requester_and_replier(&broker, shards);
    let own = requester.queue_declare(1, "", false, true, true);
    requester.basic_consume(1, &own, true);
    requester.channel_open(2);
    reply_consume(&mut requester, 2);
    let address = address_of(&mut requester, 2, 1, &own);
    let token = &address[PREFIX.len()..];
    let mut forged = Vec::new();
    // Every position altered, a truncated and an extended token, the bare prefix.
    for i in 0..token.len() {
        let mut t = token.as_bytes().to_vec();
        t[i] = if t[i] == b'A' { b'B' } else { b'A' };
        forged.push(format!("{PREFIX}{}", String::from_utf8(t).expect("ascii")));
    }
    forged.push(format!("{PREFIX}{}", &token[..token.len() - 1]));
    forged.push(format!("{address}A"));
    forged.push(PREFIX.to_owned());
    for key in &forged {
        publish_flags(&mut replier, 1, key, true, &Props::default(), b"forged");
        let (code, _, _, rk, _) = read_return(&mut replier, 1);
        assert_eq!((code, rk.as_str()), (312, key.as_str()));
    }
    // Only the real address is delivered: the first delivery is it.
    replier
        .publish(1, "", &address, &Props::default(), b"real")
        .expect("publish");
    let d = requester.read_delivery(2);
    assert_eq!((d.body.as_slice(), deliver_fields(&d).1), (&b"real"[..], 1));
    // Nothing else is waiting on the requester's socket.
    match requester.read_frame_within(Duration::from_millis(300)) {
        Err(e) if common::raw::is_timeout(&e) => {}
        other => panic!("unexpected frame {other:?}"),
    }
}

/// As `rabbit_channel`, a declare in the namespace is always passive: the pseudo-queue
/// exists, an address exists (0 messages, 1 consumer) while its channel has the reply
/// consumer — asked of the requester's shard — and is 404 otherwise.
async fn declares_of_reply_names_are_passive(shards: usize) {
    let broker = Broker::start(shards);
    let (mut requester, mut replier) = requester_and_replier(&broker, shards);
    replier.send_queue_declare(1, PSEUDO, [true, false, false]);
    assert_eq!(declare_ok(&mut replier, 1), (PSEUDO.to_owned(), 0, 1));
    let own = requester.queue_declare(1, "", false, true, true);
    requester.basic_consume(1, &own, true);
    requester.channel_open(2);
    let tag = reply_consume(&mut requester, 2);
    let address = address_of(&mut requester, 2, 1, &own);
    replier.send_queue_declare(1, &address, [false, false, false]);
    assert_eq!(declare_ok(&mut replier, 1), (address.clone(), 0, 1));
    // Forged: 404, and the channel is closed.
    let forged = format!("{address}A");
    replier.send_queue_declare(1, &forged, [false, false, false]);
    assert_eq!(
        replier.expect_channel_close(1),
        (404, format!("NOT_FOUND - no queue '{forged}' in vhost '/'"))
    );
    // Cancelled: 404 too.
    let args = Enc::new().shortstr(&tag).bits(&[false]).done();
    requester
        .send_method(2, (60, 30), &args)
        .expect("basic.cancel");
    requester.expect_method(2, (60, 31));
    replier.channel_open(2);
    replier.send_queue_declare(2, &address, [false, false, false]);
    assert_eq!(
        replier.expect_channel_close(2),
        (
            404,
            format!("NOT_FOUND - no queue '{address}' in vhost '/'")
        )
    );
}

/// A reply consumer has no credit, so what its connection may hold unwritten is capped
/// (16 × `net.write_high_water`): a requester that stops reading while replies keep
/// coming gets the first ones, and the rest are dropped — returned under mandatory —
/// instead of piling up in the broker. Every reply is either delivered or returned.
async fn a_requester_that_stops_reading_gets_its_replies_dropped(shards: usize) {
    let broker = Broker::start_with_config(
        shards,
        "[net]\nwrite_high_water = 16384\nwrite_low_water = 4096\n",
    );
    let (mut requester, mut replier) = requester_and_replier(&broker, shards);
    let own = requester.queue_declare(1, "", false, true, true);
    requester.basic_consume(1, &own, true);
    requester.channel_open(2);
    reply_consume(&mut requester, 2);
    let address = address_of(&mut requester, 2, 1, &own);
    // The requester reads nothing meanwhile: 40 MiB of replies, far beyond what the
    // sockets' buffers and the 256 KiB cap can take.
    const N: u64 = 640;
    let body = vec![7u8; 64 * 1024];
    replier.confirm_select(1);
    // The replier reads its returns and acks while it publishes (a return carries the
    // body back: a replier that did not read would be the one stopped).
    let mut returns = RawConn {
        stream: replier.stream.try_clone().expect("clone"),
        tune: replier.tune,
    };
    let writer = {
        let address = address.clone();
        std::thread::spawn(move || {
            for _ in 0..N {
                publish_flags(&mut replier, 1, &address, true, &Props::default(), &body);
            }
            replier
        })
    };
    let reader = {
        std::thread::spawn(move || {
            // Returns (each before its ack) until every publish is acked.
            let mut returned = 0u64;
            loop {
                let (ty, _, payload) = returns.read_frame().expect("frame");
                if ty != wire::FRAME_METHOD {
                    continue;
                }
                let mut d = wire::Dec::new(&payload);
                match (d.short(), d.short()) {
                    id if id == m::BASIC_RETURN => returned += 1,
                    id if id == m::BASIC_ACK => {
                        let (tag, _multiple) = (d.longlong(), d.bits(1)[0]);
                        if tag == N {
                            return returned;
                        }
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        })
    };
    // Once every reply is delivered or returned, the requester reads what it got.
    let returned = tokio::task::spawn_blocking(move || {
        let _replier = writer.join().expect("writer");
        reader.join().expect("reader")
    })
    .await
    .expect("join");
    assert!(returned > 0, "nothing was dropped");
    let mut delivered = 0u64;
    while delivered + returned < N {
        let d = requester.read_delivery(2);
        assert_eq!(d.body.len(), 64 * 1024);
        delivered += 1;
    }
    assert!(delivered > 0, "nothing was delivered");
    // Nothing more is on its way.
    match requester.read_frame_within(Duration::from_millis(300)) {
        Err(e) if common::raw::is_timeout(&e) => {}
        other => panic!("unexpected frame {other:?}"),
    }
}

/// The same round trip as a client library makes it (amqprs, as pika's and amqplib's
/// documented RPC pattern): the capability is advertised, the requester consumes the
/// pseudo-queue with no-ack and gets the reply.
async fn amqprs_rpc(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let caps = conn.conn.server_properties().capabilities();
    assert!(caps.direct_reply_to() && caps.consumer_priorities());
    let ch = conn.channel().await;
    let rpc = common::unique("amqprs-rpc");
    ch.queue_declare(QueueDeclareArguments::new(&rpc).auto_delete(true).finish())
        .await
        .expect("declare")
        .expect("declare-ok");
    let (_, mut requests) = ch
        .basic_consume_rx(
            BasicConsumeArguments::new(&rpc, "server")
                .manual_ack(false)
                .finish(),
        )
        .await
        .expect("consume rpc");
    let requester = conn.channel().await;
    let (_, mut replies) = requester
        .basic_consume_rx(
            BasicConsumeArguments::new(PSEUDO, "client")
                .manual_ack(false)
                .finish(),
        )
        .await
        .expect("consume amq.rabbitmq.reply-to");
    let props = BasicProperties::default()
        .with_reply_to(PSEUDO)
        .with_correlation_id("42")
        .finish();
    requester
        .basic_publish(
            props,
            b"question".to_vec(),
            BasicPublishArguments::new("", &rpc),
        )
        .await
        .expect("publish request");
    let request = common::next_delivery(&mut requests).await;
    let reply_to = request.props.reply_to().cloned().expect("reply_to");
    assert!(reply_to.starts_with(PREFIX), "{reply_to}");
    let props = BasicProperties::default()
        .with_correlation_id("42")
        .finish();
    ch.basic_publish(
        props,
        b"answer".to_vec(),
        BasicPublishArguments::new("", &reply_to),
    )
    .await
    .expect("publish reply");
    let reply = common::next_delivery(&mut replies).await;
    assert_eq!(reply.body, b"answer");
    assert_eq!(
        (reply.consumer_tag.as_str(), reply.routing_key.as_str()),
        ("client", reply_to.as_str())
    );
    assert_eq!(reply.props.correlation_id(), Some(&"42".to_owned()));
    conn.close().await;
}

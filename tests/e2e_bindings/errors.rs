//! Replies on raw frames, with RabbitMQ's codes and texts (`rabbit_channel`
//! `binding_action_with_checks` and `binding_action`, `rabbit_db_binding`):
//!
//! - the default exchange as destination or source: 403 `operation not permitted on the
//!   default exchange`, checked before anything else, for unbind too;
//! - bind with a missing source or destination: 404 `no exchange '…' in vhost '/'`,
//!   naming the source when both are missing;
//! - unbind of a missing binding, or with a missing exchange: unbind-ok;
//! - all of them channel closes: the connection and its other channels go on;
//! - nowait binds and unbinds are not answered and take effect;
//! - connection.start advertises `exchange_exchange_bindings`.

use crate::common::wire::{self, get, m, Enc, Props, Val};
use crate::common::{unique, Broker, RawConn};
use crate::support::*;

shard_tests!(
    errors_are_channel_closes_with_rabbitmq_texts,
    unbind_of_what_is_not_there_is_ok,
    nowait_bind_and_unbind,
    capability_is_advertised,
);

const EXCHANGE_DECLARE: (u16, u16) = m::EXCHANGE_DECLARE;

fn declare(c: &mut RawConn, channel: u16, name: &str, kind: &str) {
    let args = Enc::new()
        .short(0)
        .shortstr(name)
        .shortstr(kind)
        .bits(&[false, false, false, false, false])
        .table(&vec![])
        .done();
    c.send_method(channel, EXCHANGE_DECLARE, &args)
        .expect("send exchange.declare");
    c.expect_method(channel, m::EXCHANGE_DECLARE_OK);
}

/// Reads the channel.close for `channel`: (code, text, class id, method id); answers
/// close-ok and opens the channel again.
fn closed(c: &mut RawConn, channel: u16) -> (u16, String, u16, u16) {
    let mth = c.expect_method(channel, m::CHANNEL_CLOSE);
    let mut d = mth.dec();
    let got = (d.short(), d.shortstr(), d.short(), d.short());
    c.send_method(channel, m::CHANNEL_CLOSE_OK, &[])
        .expect("send channel.close-ok");
    c.channel_open(channel);
    got
}

async fn errors_are_channel_closes_with_rabbitmq_texts(shards: usize) {
    let broker = Broker::start(shards);
    let mut c = broker.raw();
    c.channel_open(1);
    c.channel_open(2);
    let (x, missing, missing2) = (unique("x-real"), unique("x-missing"), unique("x-gone"));
    declare(&mut c, 1, &x, "direct");
    let default_refused = "ACCESS_REFUSED - operation not permitted on the default exchange";
    let no = |name: &str| format!("NOT_FOUND - no exchange '{name}' in vhost '/'");
    let cases: Vec<(&str, &str, bool, u16, String)> = vec![
        ("", &x, false, 403, default_refused.to_owned()),
        (&x, "", false, 403, default_refused.to_owned()),
        ("", "", false, 403, default_refused.to_owned()),
        // Refused before the lookup: the other end does not exist either.
        ("", &missing, false, 403, default_refused.to_owned()),
        ("", &x, true, 403, default_refused.to_owned()),
        (&x, "", true, 403, default_refused.to_owned()),
        (&missing, &x, false, 404, no(&missing)),
        (&x, &missing, false, 404, no(&missing)),
        (&missing2, &missing, false, 404, no(&missing)),
    ];
    for (dest, src, unbind, code, text) in cases {
        send_bind(&mut c, 1, dest, src, unbind);
        let id = if unbind {
            EXCHANGE_UNBIND
        } else {
            EXCHANGE_BIND
        };
        assert_eq!(
            closed(&mut c, 1),
            (code, text.clone(), id.0, id.1),
            "{} destination '{dest}' source '{src}'",
            if unbind { "unbind" } else { "bind" }
        );
    }
    // The connection's other channel was never disturbed.
    send_bind(&mut c, 2, "amq.fanout", &x, false);
    c.expect_method(2, EXCHANGE_BIND_OK);
    send_bind(&mut c, 2, "amq.fanout", &x, true);
    c.expect_method(2, EXCHANGE_UNBIND_OK);
}

async fn unbind_of_what_is_not_there_is_ok(shards: usize) {
    let broker = Broker::start(shards);
    let mut c = broker.raw();
    c.channel_open(1);
    let (a, b) = (unique("x-a"), unique("x-b"));
    declare(&mut c, 1, &a, "fanout");
    declare(&mut c, 1, &b, "topic");
    for (dest, src) in [
        (b.as_str(), a.as_str()),        // both exist, no binding
        ("amq.topic", "amq.direct"),     // predeclared, no binding
        (&unique("x-none"), a.as_str()), // destination missing
        (b.as_str(), &unique("x-none")), // source missing
        (&unique("x-none"), &unique("x-none")),
    ] {
        send_bind(&mut c, 1, dest, src, true);
        let mth = c.read_method().expect("reply to exchange.unbind");
        assert_eq!(
            (mth.channel, mth.id),
            (1, EXCHANGE_UNBIND_OK),
            "unbind destination '{dest}' source '{src}'"
        );
    }
    // A binding with other arguments than the one that exists is not it.
    c.send_method(1, EXCHANGE_BIND, &bind_args(&b, &a, "k", false, &vec![]))
        .expect("send");
    c.expect_method(1, EXCHANGE_BIND_OK);
    let other_args = vec![("x-extra".to_owned(), Val::LongStr(b"1".to_vec()))];
    c.send_method(
        1,
        EXCHANGE_UNBIND,
        &bind_args(&b, &a, "k", false, &other_args),
    )
    .expect("send");
    c.expect_method(1, EXCHANGE_UNBIND_OK);
    // ... so it still routes: a → b "k" → amq.topic is not bound, use a queue.
    let q = c.queue_declare(1, &unique("q-still"), false, false, false);
    c.queue_bind(1, &q, &b, "#");
    c.publish(1, &a, "k", &Props::default(), b"still")
        .expect("publish");
    c.send_method(
        1,
        m::BASIC_GET,
        &Enc::new().short(0).shortstr(&q).bits(&[true]).done(),
    )
    .expect("send basic.get");
    let got = c.read_delivery(1);
    assert_eq!(got.body, b"still");
}

/// nowait=true: no bind-ok or unbind-ok, and the binding is made (then removed) all the
/// same, in order with the channel's later methods.
async fn nowait_bind_and_unbind(shards: usize) {
    let broker = Broker::start(shards);
    let mut c = broker.raw();
    c.channel_open(1);
    let (a, b) = (unique("x-a"), unique("x-b"));
    declare(&mut c, 1, &a, "direct");
    declare(&mut c, 1, &b, "fanout");
    let q = c.queue_declare(1, &unique("q-nowait"), false, false, false);
    c.queue_bind(1, &q, &b, "");
    c.send_method(1, EXCHANGE_BIND, &bind_args(&b, &a, "k", true, &vec![]))
        .expect("send");
    c.publish(1, &a, "k", &Props::default(), b"one")
        .expect("publish");
    c.send_method(1, EXCHANGE_UNBIND, &bind_args(&b, &a, "k", true, &vec![]))
        .expect("send");
    c.publish(1, &a, "k", &Props::default(), b"two")
        .expect("publish");
    // The queue's count, from its own declare-ok: only the first publish got there.
    let args = Enc::new()
        .short(0)
        .shortstr(&q)
        .bits(&[true, false, false, false, false])
        .table(&vec![])
        .done();
    c.send_method(1, m::QUEUE_DECLARE, &args).expect("send");
    let ok = c.read_method().expect("declare-ok");
    assert_eq!(ok.id, m::QUEUE_DECLARE_OK, "nothing else came first");
    let mut d = ok.dec();
    d.shortstr();
    assert_eq!(d.long(), 1, "messages in {q}");
}

async fn capability_is_advertised(shards: usize) {
    let broker = Broker::start(shards);
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    let start = c.read_start();
    let caps = match get(&start.server_properties, "capabilities") {
        Some(Val::Table(t)) => t.clone(),
        other => panic!("capabilities: {other:?}"),
    };
    assert_eq!(
        wire::get(&caps, "exchange_exchange_bindings"),
        Some(&Val::Bool(true))
    );
}

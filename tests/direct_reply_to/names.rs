//! The names of direct reply-to are not queues: every operation that names a queue,
//! other than `queue.declare` (always passive, `declares_of_reply_names_are_passive`) and
//! the reply consumer's own `basic.consume`, answers on the pseudo-queue, a live reply
//! address (its channel on another shard when there are two) and a forged one exactly
//! as RabbitMQ 3.10.8 does, probed with raw frames:
//!
//! | method | answer |
//! |---|---|
//! | `queue.bind` | `404 NOT_FOUND - no queue 'NAME' in vhost '/'` (50, 20) |
//! | `queue.unbind` | `unbind-ok` (nothing bound) |
//! | `queue.purge` | `404 …` (50, 30) |
//! | `queue.delete`, with `if-unused` or `if-empty` | `delete-ok`, 0 messages |
//! | `basic.get` | `404 …` (60, 70) |
//! | `basic.consume` on an address, any flags | `404 …` (60, 20) |
//! | `basic.consume` on the pseudo-queue with manual ack | `406 PRECONDITION_FAILED - reply consumer cannot acknowledge` (60, 20) |
//!
//! None of it touches the reply consumer: after them all, a reply to the address is
//! still delivered, and the refused bind bound nothing. (RabbitMQ's main branch since
//! April 2026, commit 9055500d10 in no release yet, refuses `queue.bind` and
//! `queue.unbind` of an address with `403 ACCESS_REFUSED - cannot bind or unbind to a
//! volatile (direct reply-to) queue`; 3.10, which sluice is compared with, does not.)

use crate::common::wire::{m, Enc, Props};
use crate::common::{Broker, RawConn};
use crate::support::*;

shard_tests!(reply_names_are_not_queues);

/// What the broker answered a method with.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// The method's `-ok` (its id) and its arguments.
    Ok((u16, u16), Vec<u8>),
    /// `channel.close`: code, text, class and method ids.
    Closed(u16, String, (u16, u16)),
}

/// Sends `id` on `channel` and reads the answer; a closed channel is answered close-ok
/// and opened again, so the next method can use it.
fn ask(c: &mut RawConn, channel: u16, id: (u16, u16), args: &[u8]) -> Answer {
    c.send_method(channel, id, args).expect("send");
    let got = c.read_method().expect("answer");
    assert_eq!(got.channel, channel, "{got:?}");
    if got.id != m::CHANNEL_CLOSE {
        return Answer::Ok(got.id, got.args);
    }
    let mut d = got.dec();
    let answer = Answer::Closed(d.short(), d.shortstr(), (d.short(), d.short()));
    c.send_method(channel, m::CHANNEL_CLOSE_OK, &[])
        .expect("close-ok");
    c.channel_open(channel);
    answer
}

fn not_found(name: &str, id: (u16, u16)) -> Answer {
    Answer::Closed(
        404,
        format!("NOT_FOUND - no queue '{name}' in vhost '/'"),
        id,
    )
}

fn bind_args(queue: &str) -> Vec<u8> {
    Enc::new()
        .short(0)
        .shortstr(queue)
        .shortstr("amq.direct")
        .shortstr("k")
        .bits(&[false])
        .table(&vec![])
        .done()
}

fn unbind_args(queue: &str) -> Vec<u8> {
    Enc::new()
        .short(0)
        .shortstr(queue)
        .shortstr("amq.direct")
        .shortstr("k")
        .table(&vec![])
        .done()
}

/// `basic.consume` with (no-local, no-ack, exclusive) and a tag of the broker's choice.
fn consume_args(queue: &str, no_ack: bool, exclusive: bool) -> Vec<u8> {
    Enc::new()
        .short(0)
        .shortstr(queue)
        .shortstr("")
        .bits(&[false, no_ack, exclusive, false])
        .table(&vec![])
        .done()
}

const UNBIND: (u16, u16) = (50, 50);
const UNBIND_OK: (u16, u16) = (50, 51);
const PURGE: (u16, u16) = (50, 30);
const DELETE: (u16, u16) = (50, 40);
const DELETE_OK: (u16, u16) = (50, 41);

async fn reply_names_are_not_queues(shards: usize) {
    let broker = Broker::start(shards);
    let (mut requester, mut other) = requester_and_replier(&broker, shards);
    let own = requester.queue_declare(1, "", false, true, true);
    requester.basic_consume(1, &own, true);
    requester.channel_open(2);
    reply_consume(&mut requester, 2);
    let address = address_of(&mut requester, 2, 1, &own);
    let forged = format!("{address}A");
    for name in [address.as_str(), PSEUDO, forged.as_str()] {
        let c = &mut other;
        assert_eq!(
            ask(c, 1, m::QUEUE_BIND, &bind_args(name)),
            not_found(name, m::QUEUE_BIND),
            "queue.bind {name}"
        );
        assert_eq!(
            ask(c, 1, UNBIND, &unbind_args(name)),
            Answer::Ok(UNBIND_OK, vec![]),
            "queue.unbind {name}"
        );
        let purge = Enc::new().short(0).shortstr(name).bits(&[false]).done();
        assert_eq!(ask(c, 1, PURGE, &purge), not_found(name, PURGE), "purge");
        for (if_unused, if_empty) in [(false, false), (true, false), (false, true)] {
            let delete = Enc::new()
                .short(0)
                .shortstr(name)
                .bits(&[if_unused, if_empty, false])
                .done();
            assert_eq!(
                ask(c, 1, DELETE, &delete),
                Answer::Ok(DELETE_OK, 0u32.to_be_bytes().to_vec()),
                "queue.delete {name} if-unused {if_unused} if-empty {if_empty}"
            );
        }
        for no_ack in [true, false] {
            let get = Enc::new().short(0).shortstr(name).bits(&[no_ack]).done();
            assert_eq!(
                ask(c, 1, m::BASIC_GET, &get),
                not_found(name, m::BASIC_GET),
                "basic.get {name}"
            );
        }
        if name == PSEUDO {
            assert_eq!(
                ask(c, 1, m::BASIC_CONSUME, &consume_args(name, false, false)),
                Answer::Closed(
                    406,
                    "PRECONDITION_FAILED - reply consumer cannot acknowledge".to_owned(),
                    m::BASIC_CONSUME
                )
            );
            continue;
        }
        for (no_ack, exclusive) in [(true, false), (false, false), (true, true)] {
            assert_eq!(
                ask(
                    c,
                    1,
                    m::BASIC_CONSUME,
                    &consume_args(name, no_ack, exclusive)
                ),
                not_found(name, m::BASIC_CONSUME),
                "basic.consume {name} no-ack {no_ack} exclusive {exclusive}"
            );
        }
    }
    // The refused bind bound nothing: a mandatory publish with its key comes back.
    publish_to(
        &mut other,
        1,
        ("amq.direct", "k"),
        true,
        &Props::default(),
        b"x",
    );
    let (code, text, exchange, key, _) = read_return(&mut other, 1);
    assert_eq!(
        (code, text.as_str(), exchange.as_str(), key.as_str()),
        (312, "NO_ROUTE", "amq.direct", "k")
    );
    // The reply consumer is untouched: a reply to the address is delivered.
    other
        .publish(1, "", &address, &Props::default(), b"still here")
        .expect("reply");
    let d = requester.read_delivery(2);
    assert_eq!(d.body, b"still here");
    assert_eq!(deliver_fields(&d).4, address);
}

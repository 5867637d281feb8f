//! Bug 3: queue.delete of a queue with consumers on the deleting channel answers
//! queue.delete-ok first and sends that channel's basic.cancel after it, as RabbitMQ does:
//! its channel process sends delete-ok when `rabbit_amqqueue:delete_with` returns, and only
//! then handles the queue's end (`handle_eol` → `handle_consuming_queue_down_or_eol` →
//! `cancel_consumer`, basic.cancel nowait=true when the client announced
//! `consumer_cancel_notify`). py-amqp raises ConsumerCancelled on a cancel that arrives while
//! it waits for the delete-ok. Consumers on the connection's other channels and on other
//! connections get basic.cancel as before.
//!
//! Checked on raw frames, with queues homed on every shard (so that with two shards both
//! the deleting connection's own shard and the other one are the queue's home).

use std::collections::BTreeSet;

use sluice::shard::placement::home_shard;

use crate::common::raw::Method;
use crate::common::wire::Enc;
use crate::common::{unique, Broker, RawConn};
use crate::support::*;

shard_tests!(delete_ok_before_the_deleting_channels_cancels);

/// A queue name whose home is `shard` among `shards`.
fn queue_homed_on(shard: usize, shards: usize) -> String {
    loop {
        let name = unique("q-delete-order");
        if usize::from(home_shard("/", name.as_bytes(), shards)) == shard {
            return name;
        }
    }
}

fn tag_of(cancel: &Method) -> String {
    let mut d = cancel.dec();
    let tag = d.shortstr();
    assert_eq!(d.bits(1), vec![true], "server basic.cancel must be nowait");
    tag
}

/// Reads methods until `done` says everything expected has arrived; returns them in the
/// order the server sent them. Fails on a close.
fn read_methods(c: &mut RawConn, mut done: impl FnMut(&[Method]) -> bool) -> Vec<Method> {
    let mut got = Vec::new();
    while !done(&got) {
        let mth = c.read_method().unwrap_or_else(|e| {
            panic!(
                "waiting for the delete's frames, after {:?}: {e}",
                got.iter()
                    .map(|m: &Method| (m.channel, m.id))
                    .collect::<Vec<_>>()
            )
        });
        let text = close_text(&mth);
        assert!(
            text.is_empty(),
            "unexpected close on channel {}: {text}",
            mth.channel
        );
        got.push(mth);
    }
    got
}

/// Connection A consumes from the queue twice on channel 1 (the channel that deletes it)
/// and once on channel 2; connection B once on its channel 1. After A's queue.delete on
/// channel 1, channel 1 carries delete-ok and then both of its cancels; channel 2 and
/// connection B get their cancels.
async fn delete_ok_before_the_deleting_channels_cancels(shards: usize) {
    let mut broker = Broker::start(shards);
    for home in 0..shards {
        for round in 0..3 {
            let q = queue_homed_on(home, shards);
            let mut a = broker.raw();
            let mut b = broker.raw();
            a.channel_open(1);
            a.channel_open(2);
            b.channel_open(1);
            a.queue_declare(1, &q, false, false, false);
            let own: BTreeSet<String> =
                [a.basic_consume(1, &q, false), a.basic_consume(1, &q, true)]
                    .into_iter()
                    .collect();
            let sibling = a.basic_consume(2, &q, false);
            let remote = b.basic_consume(1, &q, false);

            send_queue_delete(&mut a, 1, &q);
            let frames = read_methods(&mut a, |got| {
                let on = |ch: u16| got.iter().filter(|m| m.channel == ch).count();
                on(1) == 3 && on(2) == 1
            });
            let context = format!(
                "queue {q} (home {home}, round {round}): frames {:?}",
                frames.iter().map(|m| (m.channel, m.id)).collect::<Vec<_>>()
            );
            let ch1: Vec<&Method> = frames.iter().filter(|m| m.channel == 1).collect();
            assert_eq!(
                ch1[0].id, QUEUE_DELETE_OK,
                "the deleting channel got something before queue.delete-ok: {context}"
            );
            assert_eq!(ch1[0].dec().long(), 0, "delete-ok message count: {context}");
            assert!(ch1[1..].iter().all(|m| m.id == BASIC_CANCEL), "{context}");
            let cancelled: BTreeSet<String> = ch1[1..].iter().map(|m| tag_of(m)).collect();
            assert_eq!(cancelled, own, "{context}");
            let ch2: Vec<&Method> = frames.iter().filter(|m| m.channel == 2).collect();
            assert_eq!(ch2[0].id, BASIC_CANCEL, "{context}");
            assert_eq!(tag_of(ch2[0]), sibling, "{context}");

            let other = b.expect_method(1, BASIC_CANCEL);
            assert_eq!(tag_of(&other), remote, "{context}");

            // Both connections and all channels are still usable, and the queue is gone.
            assert_channel_usable(&mut a, 1);
            assert_channel_usable(&mut a, 2);
            assert_channel_usable(&mut b, 1);
            let passive = Enc::new()
                .short(0)
                .shortstr(&q)
                .bits(&[true, false, false, false, false])
                .table(&vec![])
                .done();
            a.send_method(2, crate::common::wire::m::QUEUE_DECLARE, &passive)
                .expect("send passive queue.declare");
            assert_eq!(expect_channel_close(&mut a, 2).code, 404, "{context}");
        }
    }
    broker.assert_healthy();
}

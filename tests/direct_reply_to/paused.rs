//! A requester that pauses its reply channel with `channel.flow(active=false)` gets no
//! replies while it is paused: they are held — counted as handled (acked under confirms,
//! not returned) — and delivered in the order they arrived once it sends
//! `channel.flow(active=true)`, whether they came from another shard or from its own.
//! What a paused channel holds is capped with what its connection has unwritten (16 ×
//! `net.write_high_water`); beyond, replies are dropped and returned under mandatory,
//! as for a requester that stopped reading. A cancelled consumer takes what it held.
//!
//! (RabbitMQ 3.10 has no paused channel to compare with: it answers
//! `channel.flow(active=false)` with `540 NOT_IMPLEMENTED - active=false`, closing the
//! connection; sluice pauses as the 0-9-1 spec says, and before this change went on
//! writing direct replies to a paused channel.)

use std::time::Duration;

use crate::common::raw::is_timeout;
use crate::common::wire::{self, m, Enc, Props};
use crate::common::{Broker, RawConn};
use crate::support::*;

shard_tests!(
    a_paused_channel_gets_its_replies_when_it_resumes,
    what_a_paused_channel_holds_is_capped,
);

const CHANNEL_FLOW: (u16, u16) = (20, 20);
const CHANNEL_FLOW_OK: (u16, u16) = (20, 21);

/// `channel.flow(active)` on `channel`, answered with flow-ok of the same.
fn flow(c: &mut RawConn, channel: u16, active: bool) {
    c.send_method(channel, CHANNEL_FLOW, &Enc::new().bits(&[active]).done())
        .expect("channel.flow");
    let ok = c.expect_method(channel, CHANNEL_FLOW_OK);
    assert_eq!(ok.dec().bits(1)[0], active);
}

/// Nothing arrives on `c` for a while.
fn nothing_arrives(c: &mut RawConn) {
    match c.read_frame_within(Duration::from_millis(300)) {
        Err(e) if is_timeout(&e) => {}
        other => panic!("unexpected frame {other:?}"),
    }
}

/// Under confirms: the next `n` answers are acks (no return among them), up to `last`.
fn acked_without_return(c: &mut RawConn, last: u64) {
    loop {
        let method = c.read_method().expect("ack");
        assert_eq!(method.id, m::BASIC_ACK, "{method:?}");
        if method.dec().longlong() >= last {
            return;
        }
    }
}

async fn a_paused_channel_gets_its_replies_when_it_resumes(shards: usize) {
    let broker = Broker::start(shards);
    let (mut requester, mut replier) = requester_and_replier(&broker, shards);
    let own = requester.queue_declare(1, "", false, true, true);
    requester.basic_consume(1, &own, true);
    requester.channel_open(2);
    let tag = reply_consume(&mut requester, 2);
    let address = address_of(&mut requester, 2, 1, &own);
    flow(&mut requester, 2, false);
    // From the other shard (with two), under confirms and mandatory: acked, not returned.
    replier.confirm_select(1);
    for (n, body) in [b"r1", b"r2", b"r3"].iter().enumerate() {
        publish_flags(&mut replier, 1, &address, true, &Props::default(), *body);
        acked_without_return(&mut replier, n as u64 + 1);
    }
    // From the requester's own shard (its own connection, another channel).
    requester.channel_open(3);
    publish_flags(&mut requester, 3, &address, true, &Props::default(), b"r4");
    nothing_arrives(&mut requester);
    flow(&mut requester, 2, true);
    for (n, body) in [b"r1", b"r2", b"r3", b"r4"].iter().enumerate() {
        let d = requester.read_delivery(2);
        assert_eq!(
            (d.body.as_slice(), deliver_fields(&d)),
            (
                &body[..],
                (
                    tag.clone(),
                    n as u64 + 1,
                    false,
                    String::new(),
                    address.clone()
                )
            )
        );
    }
    // Flowing again: the next reply goes straight through.
    replier
        .publish(1, "", &address, &Props::default(), b"r5")
        .expect("reply");
    let d = requester.read_delivery(2);
    assert_eq!((d.body.as_slice(), deliver_fields(&d).1), (&b"r5"[..], 5));
    // Paused again, then cancelled: what it held goes with the consumer.
    flow(&mut requester, 2, false);
    publish_flags(&mut replier, 1, &address, true, &Props::default(), b"held");
    acked_without_return(&mut replier, 5);
    let args = Enc::new().shortstr(&tag).bits(&[false]).done();
    requester
        .send_method(2, (60, 30), &args)
        .expect("basic.cancel");
    assert_eq!(requester.expect_method(2, (60, 31)).dec().shortstr(), tag);
    flow(&mut requester, 2, true);
    nothing_arrives(&mut requester);
}

async fn what_a_paused_channel_holds_is_capped(shards: usize) {
    const HIGH_WATER: usize = 16 * 1024;
    const CAP: usize = 16 * HIGH_WATER;
    const BODY: usize = 64 * 1024;
    const N: u64 = 12;
    let broker = Broker::start_with_config(
        shards,
        &format!("[net]\nwrite_high_water = {HIGH_WATER}\nwrite_low_water = 4096\n"),
    );
    let (mut requester, mut replier) = requester_and_replier(&broker, shards);
    let own = requester.queue_declare(1, "", false, true, true);
    requester.basic_consume(1, &own, true);
    requester.channel_open(2);
    reply_consume(&mut requester, 2);
    let address = address_of(&mut requester, 2, 1, &own);
    flow(&mut requester, 2, false);
    replier.confirm_select(1);
    let mut returned = Vec::new();
    for n in 1..=N {
        let body = vec![n as u8; BODY];
        publish_flags(&mut replier, 1, &address, true, &Props::default(), &body);
        // Each publish: a return first if it was dropped, then its ack.
        let method = replier.read_method().expect("return or ack");
        if method.id == m::BASIC_RETURN {
            let (ty, _, header) = replier.read_frame().expect("header");
            assert_eq!(ty, wire::FRAME_HEADER);
            let size = wire::Dec::new(&header[4..12]).longlong() as usize;
            let mut got = 0;
            while got < size {
                got += replier.read_frame().expect("body").2.len();
            }
            returned.push(n);
            acked_without_return(&mut replier, n);
        } else {
            assert_eq!(method.id, m::BASIC_ACK, "{method:?}");
            assert_eq!(method.dec().longlong(), n);
        }
    }
    nothing_arrives(&mut requester);
    flow(&mut requester, 2, true);
    // The first replies were held, the later ones dropped: held ones come in order.
    let held = N - returned.len() as u64;
    assert!(
        held > 0 && !returned.is_empty(),
        "held {held}, returned {returned:?}"
    );
    assert_eq!(returned, ((held + 1)..=N).collect::<Vec<_>>());
    // Bounded: what was held fits the cap, give or take the reply that crossed it.
    assert!(
        held as usize * BODY <= CAP + BODY,
        "held {held} replies of {BODY} B"
    );
    for n in 1..=held {
        let d = requester.read_delivery(2);
        assert_eq!(
            (d.body.len(), d.body[0], deliver_fields(&d).1),
            (BODY, n as u8, n)
        );
    }
    nothing_arrives(&mut requester);
}

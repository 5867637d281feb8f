//! The outbound buffer's encodings and its write cycle, deferred deliveries included.

use super::*;
use crate::model::message::BodyChunks;
use crate::protocol::method::BasicDeliver;
use std::rc::Rc;

fn message(body: &[u8]) -> Message {
    let mut chunks = BodyChunks::new();
    if !body.is_empty() {
        chunks.push(Bytes::copy_from_slice(body));
    }
    let props = crate::protocol::BasicProperties {
        content_type: Some("text/plain".into()),
        delivery_mode: Some(2),
        ..Default::default()
    };
    Message::new(
        "amq.topic".into(),
        "a.b.c".into(),
        props.to_bytes(),
        chunks,
        body.len() as u64,
    )
}

fn expected(channel: u16, msg: &Message, body: &[u8], frame_max: u32) -> Vec<u8> {
    let mut want = BytesMut::new();
    frame::encode_method(
        &mut want,
        channel,
        &Method::BasicDeliver(BasicDeliver {
            consumer_tag: "ctag".into(),
            delivery_tag: 42,
            redelivered: true,
            exchange: "amq.topic".into(),
            routing_key: "a.b.c".into(),
        }),
    );
    frame::encode_content(
        &mut want,
        channel,
        60,
        msg.raw_properties(),
        body,
        frame_max,
    );
    want.to_vec()
}

fn written(out: &mut Outbound) -> Vec<u8> {
    out.take(1024)
        .iter()
        .flat_map(|b| b.iter().copied())
        .collect()
}

#[test]
fn prebuilt_tail_matches_the_generic_encoding() {
    for body in [&b""[..], b"x", &[7u8; 300][..]] {
        let msg = message(body);
        assert!(msg.wire_tail().is_some());
        let mut out = Outbound::new(512, 4096);
        out.deliver(9, &"ctag".into(), 42, true, &msg);
        assert_eq!(written(&mut out), expected(9, &msg, body, 4096));
    }
}

#[test]
fn many_deliveries_span_arenas_intact() {
    let msg = message(b"payload");
    let mut out = Outbound::new(512, 4096);
    let mut want = Vec::new();
    for _ in 0..2000 {
        out.deliver(1, &"ctag".into(), 42, true, &msg);
        want.extend(expected(1, &msg, b"payload", 4096));
    }
    assert!(
        out.chunks.len() >= 2,
        "the arena is sealed as it fills, not regrown: {} chunks for {} bytes",
        out.chunks.len(),
        want.len()
    );
    assert_eq!(out.queued_bytes(), want.len());
    assert_eq!(written(&mut out), want);
}

#[test]
fn large_bodies_are_split_to_frame_max_without_copy() {
    let body = vec![5u8; 10_000];
    let msg = message(&body);
    assert!(msg.wire_tail().is_none());
    let mut out = Outbound::new(512, 4096);
    out.deliver(3, &"ctag".into(), 42, true, &msg);
    let queued = out.queued_bytes();
    let bytes = written(&mut out);
    assert_eq!(bytes.len(), queued);
    assert_eq!(bytes, expected(3, &msg, &body, 4096));
}

/// Writing straight from the buffer, a few bytes at a time, sends exactly what
/// `take` would have, and the arena goes on being filled in place.
#[test]
fn partial_writes_from_the_slices_keep_every_byte_in_order() {
    let small = message(b"payload");
    let big = message(&[9u8; 3000]);
    let mut out = Outbound::new(512, 4096);
    let mut want = Vec::new();
    let mut got = Vec::new();
    for round in 0..50u64 {
        let msg = if round % 7 == 3 { &big } else { &small };
        let body: &[u8] = if round % 7 == 3 {
            &[9u8; 3000]
        } else {
            b"payload"
        };
        out.deliver(1, &"ctag".into(), 42, true, msg);
        want.extend(expected(1, msg, body, 4096));
        // Write at most 100 bytes of what is queued, as a full socket would.
        let mut slices = [std::io::IoSlice::new(&[]); 8];
        let n = out.io_slices(&mut slices);
        let mut budget = 100;
        for s in &slices[..n] {
            let k = s.len().min(budget);
            got.extend_from_slice(&s[..k]);
            budget -= k;
        }
        let written = 100 - budget;
        out.consume(written);
    }
    while !out.is_empty() {
        let mut slices = [std::io::IoSlice::new(&[]); 8];
        let n = out.io_slices(&mut slices);
        let all: usize = slices[..n].iter().map(|s| s.len()).sum();
        for s in &slices[..n] {
            got.extend_from_slice(s);
        }
        out.consume(all);
    }
    assert_eq!(got, want);
    assert_eq!(out.total_written(), want.len() as u64);
    assert_eq!(out.queued_bytes(), 0);
}

#[test]
fn an_idle_connection_holds_no_arena_and_a_busy_one_grows_it() {
    let msg = message(b"payload");
    let mut out = Outbound::new(512, 4096);
    out.deliver(1, &"ctag".into(), 1, false, &msg);
    assert_eq!(out.pending.capacity(), ARENA_MIN);
    let _ = out.take(1024);
    out.written(out.queued_bytes());
    assert!(!out.release_idle(), "just written to: kept");
    assert!(out.release_idle(), "idle since the last check: let go");
    assert_eq!(out.pending.capacity(), 0);
    for tag in 0..2000 {
        out.deliver(1, &"ctag".into(), tag, false, &msg);
    }
    assert_eq!(
        out.arena_size, ARENA_MAX,
        "one write's worth filled several arenas"
    );
    let _ = out.take(1024);
    for _ in 0..8 {
        out.deliver(1, &"ctag".into(), 1, false, &msg);
        let _ = out.take(1024);
    }
    assert_eq!(out.arena_size, ARENA_MIN, "light traffic shrinks it back");
}

fn deliver_expected(channel: u16, tag: &str, delivery_tag: u64, msg: &Message) -> Vec<u8> {
    let mut want = BytesMut::new();
    frame::encode_method(
        &mut want,
        channel,
        &Method::BasicDeliver(BasicDeliver {
            consumer_tag: tag.into(),
            delivery_tag,
            redelivered: false,
            exchange: msg.exchange().clone(),
            routing_key: msg.routing_key().clone(),
        }),
    );
    let body: Vec<u8> = msg.body().iter().flat_map(|c| c.iter().copied()).collect();
    frame::encode_content(&mut want, channel, 60, msg.raw_properties(), &body, 4096);
    want.to_vec()
}

/// One turn of the write pass as `Shard::write_batch` does it: the buffer's slices, then
/// the deferred deliveries encoded into a scratch buffer (at most `encode_budget` bytes
/// of them), to a socket that takes at most `room` bytes.
fn write_pass_turn(out: &mut Outbound, room: usize, encode_budget: usize) -> Vec<u8> {
    let mut scratch = BytesMut::new();
    let count = out.encode_deferred(&mut scratch, encode_budget);
    let mut slices = [std::io::IoSlice::new(&[]); 8];
    let n = out.io_slices(&mut slices);
    let own: usize = slices[..n].iter().map(|s| s.len()).sum();
    let mut sent = Vec::new();
    for s in slices[..n].iter().map(|s| &s[..]).chain([&scratch[..]]) {
        let k = s.len().min(room - sent.len());
        sent.extend_from_slice(&s[..k]);
    }
    out.consume(sent.len().min(own));
    if count > 0 && sent.len() > own {
        out.sent_encoded(count, &scratch, sent.len() - own);
    }
    sent
}

/// Deferred deliveries, deliveries encoded at once (a large body, another shard's
/// message) and control frames, written by write-pass turns to a socket that takes a few
/// hundred bytes at a time and by the writer task, go out byte for byte as if each had
/// been encoded when it was queued, and are counted the same.
#[test]
fn deferred_deliveries_go_out_in_order_whoever_writes_them() {
    let small = LocalMessage::new(message(b"payload"));
    let other = LocalMessage::new(message(b"x"));
    let big = message(&[9u8; 3000]);
    let mut out = Outbound::new(512, 4096);
    let mut want = Vec::new();
    let mut got = Vec::new();
    for round in 0..300u64 {
        match round % 11 {
            3 => {
                out.deliver(2, &"big".into(), round, false, &big);
                want.extend(deliver_expected(2, "big", round, &big));
            }
            7 => {
                out.heartbeat();
                want.extend([8, 0, 0, 0, 0, 0, 0, FRAME_END]);
            }
            n => {
                let (msg, tag) = if n % 2 == 0 {
                    (&small, "ctag-a")
                } else {
                    (&other, "ctag-b")
                };
                out.deliver_later(1 + (n % 2) as u16, &tag.into(), round, false, msg);
                want.extend(deliver_expected(1 + (n % 2) as u16, tag, round, msg));
            }
        }
        assert_eq!(
            out.queued_bytes() as u64,
            want.len() as u64 - out.total_written()
        );
        if round % 5 == 4 {
            got.extend(write_pass_turn(
                &mut out,
                150 + (round as usize * 37) % 400,
                200,
            ));
        }
        if round % 50 == 49 {
            got.extend(written(&mut out));
            out.written(out.queued_bytes());
        }
    }
    while !out.is_empty() {
        got.extend(write_pass_turn(&mut out, 333, 1000));
    }
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the bytes differ from the eager encoding");
    assert_eq!(out.total_written(), want.len() as u64);
}

/// A deferred delivery holds a share of the message, not its encoding: the arena is not
/// touched until something must be encoded, and an idle connection lets the list go.
#[test]
fn a_deferred_delivery_holds_no_arena_until_it_is_encoded() {
    let msg = LocalMessage::new(message(b"payload"));
    let mut out = Outbound::new(512, 4096);
    for tag in 1..=20 {
        out.deliver_later(1, &"ctag".into(), tag, false, &msg);
    }
    assert_eq!(out.pending.capacity(), 0, "nothing encoded yet");
    assert_eq!(Rc::strong_count(&msg), 21);
    assert_eq!(
        out.queued_bytes(),
        20 * deliver_expected(1, "ctag", 1, &msg).len()
    );
    let all = write_pass_turn(&mut out, usize::MAX, usize::MAX);
    assert_eq!(all.len(), out.total_written() as usize);
    assert_eq!(
        Rc::strong_count(&msg),
        1,
        "written deliveries let the message go"
    );
    assert_eq!(
        out.pending.capacity(),
        0,
        "the socket took it all from the scratch"
    );
    assert!(!out.release_idle());
    assert!(out.release_idle(), "idle: the deferred list is let go");
    assert!(out.deferred.is_none());
}

/// A subscriber's arena holds only its handshake's replies, its deliveries being deferred:
/// once the write pass has written everything, the minimum-sized arena is let go at
/// once (not a reclaim interval later); a leftover the socket did not take brings one
/// back, and an arena grown by a busy connection is kept.
#[test]
fn a_drained_minimum_arena_is_let_go_after_the_write() {
    let msg = LocalMessage::new(message(b"payload"));
    let mut out = Outbound::new(512, 4096);
    out.method(
        1,
        &Method::BasicQosOk(crate::protocol::method::BasicQosOk {}),
    );
    out.deliver_later(1, &"ctag".into(), 1, false, &msg);
    assert_eq!(out.pending.capacity(), ARENA_MIN);
    let size = out.queued_bytes();
    // The socket takes all but the last 3 bytes: they wait in the arena.
    let sent = write_pass_turn(&mut out, size - 3, usize::MAX);
    assert_eq!(sent.len(), size - 3);
    assert_eq!(out.queued_bytes(), 3);
    assert!(out.pending.capacity() > 0, "the leftover is in the arena");
    let rest = write_pass_turn(&mut out, usize::MAX, usize::MAX);
    assert_eq!(rest.len(), 3);
    assert_eq!(out.pending.capacity(), 0, "drained: let go");
    out.deliver_later(1, &"ctag".into(), 2, false, &msg);
    let _ = write_pass_turn(&mut out, usize::MAX, usize::MAX);
    assert_eq!(
        out.pending.capacity(),
        0,
        "deferred deliveries need no arena"
    );
    // Deliveries encoded at once (as another shard's are) fill more than one arena in
    // one write's worth, which grows the next.
    for tag in 3..40 {
        out.deliver(1, &"ctag".into(), tag, false, &msg);
    }
    assert!(out.arena_size > ARENA_MIN);
    assert!(out.slice_count() <= 8);
    let _ = write_pass_turn(&mut out, usize::MAX, usize::MAX);
    assert_eq!(out.queued_bytes(), 0);
    assert!(
        out.pending.capacity() > 0,
        "a grown arena is kept for the next write"
    );
}

/// A subscriber's deliveries (consecutive delivery tags on one channel) are kept as runs;
/// a turn that writes part of a run, a redelivered one, a gap in the tags and another
/// consumer's delivery in the middle all go out as encoded when queued.
#[test]
fn runs_of_deferred_deliveries_split_anywhere() {
    let msgs: Vec<LocalMessage> = (0..7u8)
        .map(|i| LocalMessage::new(message(&vec![i; usize::from(i) * 9])))
        .collect();
    let mut out = Outbound::new(512, 4096);
    let mut want = Vec::new();
    let mut got = Vec::new();
    let mut delivery_tag = 1u64;
    for i in 0..500usize {
        let msg = &msgs[i % msgs.len()];
        let (channel, tag, redelivered) = match i % 97 {
            13 => (4, "other", false),
            41 => (1, "ctag", true),
            _ => (1, "ctag", false),
        };
        if i % 89 == 88 {
            delivery_tag += 5;
        }
        out.deliver_later(channel, &tag.into(), delivery_tag, redelivered, msg);
        let mut expected = deliver_expected(channel, tag, delivery_tag, msg);
        expected[20 + tag.len()] = u8::from(redelivered);
        want.extend(expected);
        delivery_tag += 1;
        if i % 37 == 36 {
            got.extend(write_pass_turn(
                &mut out,
                1 + (i * 131) % 2000,
                1 + (i * 71) % 3000,
            ));
        }
    }
    while !out.is_empty() {
        got.extend(write_pass_turn(&mut out, 777, 500));
    }
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the bytes differ from the eager encoding");
    assert!(msgs.iter().all(|m| Rc::strong_count(m) == 1));
}

/// A pulled queue's run (`deliver_run_later`) goes out byte for byte as the same
/// deliveries queued one by one would, continuing the run before it, with every message
/// handed over and none kept: small ones as one run, a run holding a large body one by
/// one (encoded at once where the large one is), interleaved with other deliveries and
/// write-pass turns.
#[test]
fn a_pulled_run_goes_out_as_its_deliveries_one_by_one_would() {
    let small: Vec<LocalMessage> = (0..5u8)
        .map(|i| LocalMessage::new(message(&vec![i; usize::from(i) * 7])))
        .collect();
    let big = LocalMessage::new(message(&[9u8; 3000]));
    let mut out = Outbound::new(512, 4096);
    let mut want = Vec::new();
    let mut got = Vec::new();
    let mut delivery_tag = 1u64;
    for round in 0..120usize {
        let mut run: Vec<LocalMessage> = (0..1 + round % 6)
            .map(|k| LocalMessage::clone(&small[(round + k) % small.len()]))
            .collect();
        if round % 9 == 4 {
            run.insert(run.len() / 2, LocalMessage::clone(&big));
        }
        for (k, msg) in run.iter().enumerate() {
            want.extend(deliver_expected(1, "ctag", delivery_tag + k as u64, msg));
        }
        let count = run.len() as u64;
        out.deliver_run_later(1, &"ctag".into(), delivery_tag, &mut run);
        assert!(run.is_empty(), "every message is handed over");
        delivery_tag += count;
        if round % 7 == 3 {
            let msg = &small[1];
            out.deliver_later(2, &"other".into(), delivery_tag, false, msg);
            want.extend(deliver_expected(2, "other", delivery_tag, msg));
            delivery_tag += 1;
        }
        assert_eq!(
            out.queued_bytes() as u64,
            want.len() as u64 - out.total_written()
        );
        if round % 5 == 4 {
            got.extend(write_pass_turn(&mut out, 100 + (round * 53) % 900, 700));
        }
    }
    while !out.is_empty() {
        got.extend(write_pass_turn(&mut out, 555, 900));
    }
    assert_eq!(got.len(), want.len());
    assert!(
        got == want,
        "the bytes differ from the deliveries one by one"
    );
    assert!(small.iter().all(|m| Rc::strong_count(m) == 1));
    assert_eq!(Rc::strong_count(&big), 1);
}

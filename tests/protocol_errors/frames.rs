//! Malformed frames and content: bad frame end, oversized, out-of-place or truncated frames.

use std::time::{Duration, Instant};

use crate::common::raw::Tune;
use crate::common::wire::{self, m, Enc, Props};
use crate::common::{Broker, Bystanders, RawConn};
use crate::support::{check, hard_error, Expect, BYSTANDERS};

shard_tests!(
    bad_frame_end,
    frame_larger_than_frame_max,
    ten_megabyte_frame_header,
    body_frame_without_publish,
    header_frame_without_publish,
    method_inside_content,
    method_instead_of_content_header,
    truncated_method_payload,
);

async fn bad_frame_end(shards: usize) {
    hard_error(shards, Expect::Prefix(501, "FRAME_ERROR - "), |c| {
        let mut f = wire::frame(
            wire::FRAME_METHOD,
            1,
            &wire::method_payload(m::CHANNEL_OPEN, &Enc::new().shortstr("").done()),
        );
        *f.last_mut().unwrap() = 0x00;
        c.send(&f).unwrap();
    })
    .await
}

async fn frame_larger_than_frame_max(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    c.send_start_ok("PLAIN", b"\0guest\0guest");
    let offer = c.read_tune();
    c.send_tune_ok(Tune {
        frame_max: 4096,
        heartbeat: 0,
        ..offer
    });
    c.send_open("/");
    c.read_open_ok();
    c.channel_open(1);
    // A well-formed publish whose single body frame is 6000 bytes, over the agreed 4096.
    let body = vec![b'x'; 6000];
    let mut bytes = wire::frame(
        wire::FRAME_METHOD,
        1,
        &wire::method_payload(
            m::BASIC_PUBLISH,
            &RawConn::publish_args("", "nowhere", false, false),
        ),
    );
    bytes.extend(wire::frame(
        wire::FRAME_HEADER,
        1,
        &wire::content_header_payload(body.len() as u64, &Props::default()),
    ));
    bytes.extend(wire::frame(wire::FRAME_BODY, 1, &body));
    let _ = c.send(&bytes);
    let (code, text) = c.expect_connection_close();
    check(code, &text, &Expect::Prefix(501, "FRAME_ERROR - "));
    bystanders.assert_unharmed(&broker).await;
    broker.assert_healthy();
}

async fn ten_megabyte_frame_header(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    let mut c = broker.raw();
    c.channel_open(1);
    // Only the 7-byte header of a method frame announcing 10 MB: the broker must not wait
    // for the payload.
    let size: u32 = 10 * 1024 * 1024;
    let mut hdr = vec![wire::FRAME_METHOD, 0, 1];
    hdr.extend_from_slice(&size.to_be_bytes());
    c.send(&hdr).unwrap();
    let sent = Instant::now();
    let (code, text) = c.expect_connection_close();
    check(code, &text, &Expect::Prefix(501, "FRAME_ERROR - "));
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "oversize frame rejected only after {:?}",
        sent.elapsed()
    );
    bystanders.assert_unharmed(&broker).await;
    broker.assert_healthy();
}

async fn body_frame_without_publish(shards: usize) {
    hard_error(shards, Expect::Prefix(505, "UNEXPECTED_FRAME - "), |c| {
        c.channel_open(1);
        c.send_frame(wire::FRAME_BODY, 1, b"orphan body").unwrap();
    })
    .await
}

async fn header_frame_without_publish(shards: usize) {
    hard_error(shards, Expect::Prefix(505, "UNEXPECTED_FRAME - "), |c| {
        c.channel_open(1);
        let payload = wire::content_header_payload(5, &Props::default());
        c.send_frame(wire::FRAME_HEADER, 1, &payload).unwrap();
    })
    .await
}

async fn truncated_method_payload(shards: usize) {
    hard_error(shards, Expect::Prefix(502, "SYNTAX_ERROR"), |c| {
        c.channel_open(1);
        // queue.declare: ticket, then a shortstr announcing 40 bytes of which 3 follow.
        let args = Enc::new().short(0).octet(40).raw(b"abc").done();
        c.send_method(1, m::QUEUE_DECLARE, &args).unwrap();
    })
    .await
}

async fn method_inside_content(shards: usize) {
    hard_error(shards, Expect::Prefix(505, "UNEXPECTED_FRAME - "), |c| {
        c.channel_open(1);
        let mut bytes = wire::frame(
            wire::FRAME_METHOD,
            1,
            &wire::method_payload(
                m::BASIC_PUBLISH,
                &RawConn::publish_args("", "q", false, false),
            ),
        );
        bytes.extend(wire::frame(
            wire::FRAME_HEADER,
            1,
            &wire::content_header_payload(10, &Props::default()),
        ));
        bytes.extend(wire::frame(wire::FRAME_BODY, 1, b"half!"));
        // The other five body bytes never come; a method arrives instead.
        bytes.extend(wire::frame(
            wire::FRAME_METHOD,
            1,
            &wire::method_payload(
                m::BASIC_QOS,
                &Enc::new().long(0).short(1).bits(&[false]).done(),
            ),
        ));
        c.send(&bytes).unwrap();
    })
    .await
}

async fn method_instead_of_content_header(shards: usize) {
    hard_error(shards, Expect::Prefix(505, "UNEXPECTED_FRAME - "), |c| {
        c.channel_open(1);
        let mut bytes = wire::frame(
            wire::FRAME_METHOD,
            1,
            &wire::method_payload(
                m::BASIC_PUBLISH,
                &RawConn::publish_args("", "q", false, false),
            ),
        );
        bytes.extend(wire::frame(
            wire::FRAME_METHOD,
            1,
            &wire::method_payload(
                m::BASIC_QOS,
                &Enc::new().long(0).short(1).bits(&[false]).done(),
            ),
        ));
        c.send(&bytes).unwrap();
    })
    .await
}

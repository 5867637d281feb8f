//! `cargo bench -p sluice-bench`: micro benchmarks of the hot pieces the load tool
//! cannot isolate — frame splitting, publish encoding, topic matching, timer wheel —
//! each reported as nanoseconds per operation (best of five rounds).
//! Plain timing loops (no benchmark framework): the figures are for comparing
//! commits on one machine, not for absolute claims.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use sluice::model::topic_trie::TopicTrie;
use sluice::protocol::frame::{encode_content, encode_method, split_frame};
use sluice::protocol::method::{BasicDeliver, BasicPublish, CLASS_BASIC};
use sluice::protocol::Method;
use sluice::timer::wheel::TimerWheel;

fn measure(name: &str, ops: u64, mut f: impl FnMut()) {
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_nanos() as f64 / ops as f64);
    }
    println!("{name:<40} {best:>8.1} ns/op");
}

fn main() {
    // frame_split: a read buffer of 64-byte deliveries (method + header + body frames).
    let n = 100_000u64;
    let mut wire = BytesMut::new();
    for i in 0..n {
        let m = Method::BasicDeliver(BasicDeliver {
            consumer_tag: "ctag".into(),
            delivery_tag: i,
            redelivered: false,
            exchange: "sluice.bench.fanout".into(),
            routing_key: "sluice.bench".into(),
        });
        encode_method(&mut wire, 1, &m);
        encode_content(&mut wire, 1, CLASS_BASIC, &[0, 0], &[b'x'; 64], 131_072);
    }
    let wire = wire.freeze();
    measure("frame_split (per delivery, 3 frames)", n, || {
        let mut buf = BytesMut::from(&wire[..]);
        while let Ok(Some(f)) = split_frame(&mut buf, 131_072) {
            black_box(f);
        }
    });
    measure("frame_split + method decode (per delivery)", n, || {
        let mut buf = BytesMut::from(&wire[..]);
        while let Ok(Some(f)) = split_frame(&mut buf, 131_072) {
            if f.kind == sluice::protocol::frame::FrameKind::Method {
                black_box(Method::decode(f.payload).ok());
            }
        }
    });

    // publish encoding as the client does it.
    let publish = Method::BasicPublish(BasicPublish {
        ticket: 0,
        exchange: "sluice.bench.fanout".into(),
        routing_key: "sluice.bench".into(),
        mandatory: false,
        immediate: false,
    });
    let mut out = BytesMut::with_capacity(1 << 24);
    measure("encode publish + 64 B content", n, || {
        out.clear();
        for _ in 0..n {
            encode_method(&mut out, 1, &publish);
            encode_content(&mut out, 1, CLASS_BASIC, &[0, 0], &[b'x'; 64], 131_072);
        }
        black_box(&out);
    });

    // topic_match: 1,000 bindings, keys of four words.
    let mut trie = TopicTrie::new();
    for i in 0..1000u32 {
        let pattern = match i % 4 {
            0 => format!("a{}.b.c.d", i % 50),
            1 => format!("a{}.*.c.#", i % 50),
            2 => format!("#.d{}", i % 20),
            _ => format!("a{}.b{}.*.*", i % 50, i % 7),
        };
        trie.insert(pattern.as_bytes(), i);
    }
    let keys: Vec<String> = (0..1000)
        .map(|i| format!("a{}.b{}.c.d{}", i % 50, i % 7, i % 20))
        .collect();
    let mut hits = Vec::new();
    measure(
        "topic_match (1,000 bindings, no cache)",
        keys.len() as u64,
        || {
            for k in &keys {
                hits.clear();
                trie.match_into(k.as_bytes(), &mut hits);
                black_box(&hits);
            }
        },
    );

    // timer_wheel: arm and cancel.
    let start = Instant::now();
    let mut wheel = TimerWheel::new(start, Duration::from_millis(10), 512);
    measure("timer_wheel arm + cancel", n, || {
        for i in 0..n {
            let id = wheel.arm(start + Duration::from_millis(i % 5000), i);
            black_box(wheel.cancel(id));
        }
    });
}

//! `cargo bench -p sluice-bench`: micro benchmarks of the hot pieces the load tool
//! cannot isolate — frame splitting, publish encoding, topic matching, timer wheel, a
//! queue's enqueue/dispatch/settle cycle — each reported as nanoseconds per operation
//! (best of five rounds). Plain timing loops (no benchmark framework): the figures are
//! for comparing commits on one machine, not for absolute claims.
//!
//! `cargo bench -p sluice-bench --bench micro -- queue` runs only the benchmarks whose
//! name contains `queue`. The queue rounds are functions of their own (`queue_round_*`),
//! so `valgrind --tool=callgrind --toggle-collect='micro::queue_round*'` counts their
//! instructions exactly (see perf/README.md).

use std::hint::black_box;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use sluice::model::ids::{ConnId, ConsumerTarget, QueueId};
use sluice::model::message::{BodyChunks, LocalMessage, Message};
use sluice::model::topic_trie::TopicTrie;
use sluice::protocol::frame::{encode_content, encode_method, split_frame};
use sluice::protocol::method::{BasicDeliver, BasicPublish, CLASS_BASIC};
use sluice::protocol::properties::BasicProperties;
use sluice::protocol::{FieldTable, FieldValue, Method};
use sluice::queue::{dispatch_args, Dispatch, Queue, QueueLimits, QueueSettings};
use sluice::timer::wheel::TimerWheel;

/// The benchmarks to run: those whose name contains the first command-line argument that
/// is not a flag (`cargo bench` passes `--bench`).
fn selected(name: &str) -> bool {
    match std::env::args().skip(1).find(|a| !a.starts_with('-')) {
        Some(filter) => name.contains(&filter),
        None => true,
    }
}

fn measure(name: &str, ops: u64, mut f: impl FnMut()) {
    if !selected(name) {
        return;
    }
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_nanos() as f64 / ops as f64);
    }
    println!("{name:<40} {best:>8.1} ns/op");
}

fn bench_message(body: &'static [u8]) -> LocalMessage {
    bench_message_with(body, Bytes::from_static(&[0, 0]))
}

fn bench_message_with(body: &'static [u8], properties: Bytes) -> LocalMessage {
    let mut chunks = BodyChunks::new();
    chunks.push(Bytes::from_static(body));
    Rc::new(Message::new(
        "ex".into(),
        "rk".into(),
        properties,
        chunks,
        body.len() as u64,
    ))
}

/// A 64-byte message with this `priority` property.
fn bench_priority_message(priority: u8) -> LocalMessage {
    let props = BasicProperties {
        priority: Some(priority),
        ..Default::default()
    };
    bench_message_with(&[b'x'; 64], props.to_bytes())
}

fn bench_queue(arguments: FieldTable, now: Instant) -> Queue {
    let settings = QueueSettings {
        durable: false,
        exclusive: false,
        auto_delete: false,
        max_priority: dispatch_args::max_priority(&arguments),
        arguments,
        message_ttl: None,
        expires: None,
        single_active_consumer: false,
        dead_letter: None,
        stored: false,
    };
    Queue::new(
        QueueId(1),
        0,
        "/".into(),
        "q".into(),
        settings,
        QueueLimits::default(),
        now,
    )
}

fn bench_target(consumer: u32) -> ConsumerTarget {
    ConsumerTarget {
        shard: 0,
        conn: ConnId {
            slot: consumer,
            generation: 1,
        },
        channel: 1,
        consumer,
    }
}

/// Messages per round of the queue benchmarks.
const QUEUE_BATCH: usize = 64;

/// One round, manual ack: credit to every consumer, a batch enqueued, dispatched in
/// rotation and acked.
#[inline(never)]
fn queue_round_ack(
    q: &mut Queue,
    keys: &[u64],
    msg: &LocalMessage,
    out: &mut Vec<Dispatch>,
    now: Instant,
) {
    for k in keys {
        q.grant(*k, QUEUE_BATCH as u32, u64::MAX);
    }
    for _ in 0..QUEUE_BATCH {
        q.enqueue(Rc::clone(msg), now);
    }
    q.dispatch(now, QUEUE_BATCH, out);
    for d in out.drain(..) {
        q.ack(d.seq);
    }
}

/// One round, no-ack: a batch enqueued, dispatched to one consumer and reported written.
#[inline(never)]
fn queue_round_no_ack(
    q: &mut Queue,
    key: u64,
    msg: &LocalMessage,
    out: &mut Vec<Dispatch>,
    now: Instant,
) {
    q.grant(key, QUEUE_BATCH as u32, u64::MAX);
    for _ in 0..QUEUE_BATCH {
        q.enqueue(Rc::clone(msg), now);
    }
    q.dispatch(now, QUEUE_BATCH, out);
    let bytes = out.iter().map(|d| d.msg.accounted_size()).sum();
    q.written(key, out.len() as u64, bytes);
    out.clear();
}

fn queue_benches(n: u64) {
    let now = Instant::now();
    let msg = bench_message(&[b'x'; 64]);
    let rounds = n / QUEUE_BATCH as u64;
    let mut out = Vec::with_capacity(QUEUE_BATCH);

    let mut q = bench_queue(FieldTable::default(), now);
    let keys: Vec<u64> = (0..4)
        .map(|i| {
            q.add_consumer(bench_target(i), false, false, 0, now)
                .expect("consumer")
        })
        .collect();
    measure("queue: enqueue+dispatch+ack, 4 consumers", n, || {
        for _ in 0..rounds {
            queue_round_ack(&mut q, &keys, &msg, &mut out, now);
        }
    });

    let mut q = bench_queue(FieldTable::default(), now);
    let key = q
        .add_consumer(bench_target(0), true, false, 0, now)
        .expect("consumer");
    measure("queue: enqueue+dispatch+written, no-ack", n, || {
        for _ in 0..rounds {
            queue_round_no_ack(&mut q, key, &msg, &mut out, now);
        }
    });

    // x-max-priority 10, messages of priorities 0..=9 in turn.
    let msgs: Vec<LocalMessage> = (0..10).map(bench_priority_message).collect();
    let args = {
        let mut t = FieldTable::new();
        t.insert("x-max-priority", FieldValue::I32(10));
        t
    };
    let mut q = bench_queue(args.clone(), now);
    let key = q
        .add_consumer(bench_target(0), true, false, 0, now)
        .expect("consumer");
    let mut i = 0;
    measure("queue: priority queue (10 levels), no-ack", n, || {
        for _ in 0..rounds {
            let msg = &msgs[i % msgs.len()];
            i += 1;
            queue_round_no_ack(&mut q, key, msg, &mut out, now);
        }
    });

    // A plain queue whose 4 consumers have priorities 0..=3.
    let mut q = bench_queue(FieldTable::default(), now);
    let keys: Vec<u64> = (0..4)
        .map(|i| {
            q.add_consumer(bench_target(i), false, false, i64::from(i), now)
                .expect("consumer")
        })
        .collect();
    measure("queue: consumer priorities, 4 consumers, ack", n, || {
        for _ in 0..rounds {
            queue_round_ack(&mut q, &keys, &msg, &mut out, now);
        }
    });
}

fn main() {
    // frame_split: a read buffer of 64-byte deliveries (method + header + body frames).
    let n = 100_000u64;
    queue_benches(n * 10);
    permission_benches(n * 10);
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

/// The publish path's write check (`auth::permissions::Access::allows_publish`): with
/// write `.*` (no permissions configured), with a restrictive pattern and the same
/// exchange every time (the cached decision), and alternating two exchanges (a regex
/// search per publish: the worst case).
fn permission_benches(n: u64) {
    use sluice::auth::permissions::{Access, Grant};
    use sluice::protocol::ShortStr;
    let exchanges = [ShortStr::from("orders.eu"), ShortStr::from("orders.us")];
    let mut open = Access::new(Grant::full());
    measure("publish permission, write .*", n, || {
        for _ in 0..n {
            black_box(open.allows_publish(black_box(&exchanges[0])));
        }
    });
    let restricted = || {
        let grant = Grant::compile("", "^orders\\.(eu|us)$", "").expect("valid patterns");
        Access::new(std::sync::Arc::new(grant))
    };
    let mut same = restricted();
    measure("publish permission, same exchange", n, || {
        for _ in 0..n {
            black_box(same.allows_publish(black_box(&exchanges[0])));
        }
    });
    let mut alternating = restricted();
    measure("publish permission, alternating (regex)", n, || {
        for i in 0..n {
            let ex = &exchanges[(i & 1) as usize];
            black_box(alternating.allows_publish(black_box(ex)));
        }
    });
}

use std::collections::HashMap;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};

use super::*;
use crate::model::ids::{ConnId, ConsumerTarget};
use crate::model::message::{BodyChunks, Message};
use crate::policy::stream_args::{consumer, FilterSpec};
use crate::protocol::{BasicProperties, FieldValue};
use crate::store::stream_log::{self, ScanFor};

fn target(n: u32) -> ConsumerTarget {
    ConsumerTarget {
        shard: 0,
        conn: ConnId {
            slot: n,
            generation: 1,
        },
        channel: 1,
        consumer: n,
    }
}

fn message(body: &str, filter: Option<&str>) -> LocalMessage {
    let headers = filter.map(|f| {
        let mut t = FieldTable::new();
        t.insert("x-stream-filter-value", FieldValue::LongStr(f.into()));
        t
    });
    let props = BasicProperties {
        headers,
        ..Default::default()
    };
    let mut chunks = BodyChunks::new();
    chunks.push(Bytes::copy_from_slice(body.as_bytes()));
    Rc::new(Message::new(
        "ex".into(),
        "rk".into(),
        props.to_bytes(),
        chunks,
        body.len() as u64,
    ))
}

/// A stream with its segments on a fake disk.
struct Fixture {
    stream: Stream,
    disk: HashMap<u32, BytesMut>,
}

impl Fixture {
    fn new(args: &[(&str, FieldValue)]) -> Fixture {
        let mut t = FieldTable::new();
        t.insert("x-queue-type", FieldValue::LongStr("stream".into()));
        for (k, v) in args {
            t.insert(*k, v.clone());
        }
        Fixture {
            stream: Stream::new(QueueId(1), 0, "/".into(), "s".into(), t, 100),
            disk: HashMap::new(),
        }
    }

    /// Appends these messages and commits them in one write at `now_ms`.
    fn publish(&mut self, bodies: &[(&str, Option<&str>)], now_ms: i64) -> bool {
        for (b, f) in bodies {
            self.stream.append(message(b, *f));
        }
        self.commit(now_ms).unwrap_or(false)
    }

    /// Seals and commits a write; `None` when there was nothing to write, else whether
    /// a segment rolled over.
    fn commit(&mut self, now_ms: i64) -> Option<bool> {
        let w = self.stream.seal(now_ms)?;
        let file = self.disk.entry(w.segment).or_default();
        assert_eq!(file.len() as u64, w.pos, "writes go at the segment's end");
        file.extend_from_slice(&w.data);
        Some(self.stream.write_done(true))
    }

    /// Dispatches until nothing is left, serving reads from the fake disk.
    fn drain(&mut self) -> Vec<(u32, u64, String)> {
        let mut got = Vec::new();
        for _ in 0..1000 {
            let mut out = Vec::new();
            let mut reads = Vec::new();
            self.stream.dispatch(64, &mut out, &mut reads);
            for d in &out {
                let props = BasicProperties::decode(d.msg.raw_properties()).expect("props");
                let offset = props
                    .headers
                    .as_ref()
                    .and_then(|h| h.get("x-stream-offset").cloned());
                assert_eq!(offset, Some(FieldValue::I64(d.offset as i64)));
                got.push((
                    d.target.consumer,
                    d.offset,
                    String::from_utf8_lossy(&d.msg.body()[0]).into_owned(),
                ));
            }
            for plan in reads.drain(..) {
                let file = self
                    .disk
                    .get(&plan.segment)
                    .expect("segment")
                    .clone()
                    .freeze();
                let buf = file.slice(plan.pos as usize..(plan.pos + plan.len) as usize);
                let filter = plan.filter.clone();
                let wanted = move |v: Option<&[u8]>| filter.as_ref().is_none_or(|f| f.matches(v));
                let scanned = stream_log::scan(
                    buf,
                    &ScanFor {
                        segment: plan.segment,
                        base: plan.pos,
                        next: plan.next,
                        seek_ts: plan.seek_ts,
                        wanted: &wanted,
                        max_messages: plan.max_messages,
                        max_bytes: plan.max_bytes,
                    },
                );
                self.stream.read_done(ReadDone {
                    reader: plan.reader,
                    epoch: plan.epoch,
                    segment: plan.segment,
                    pos: plan.pos,
                    scanned: Some(scanned),
                });
            }
            if out.is_empty() && !self.stream.wants_dispatch() {
                break;
            }
        }
        got
    }

    fn reader(&mut self, n: u32, args: &[(&str, FieldValue)], credit: u32) -> u64 {
        let mut t = FieldTable::new();
        for (k, v) in args {
            t.insert(*k, v.clone());
        }
        let args = consumer(&t).expect("consumer arguments");
        let (key, _) = self.stream.add_reader(
            target(n),
            format!("tag{n}").into(),
            "conn".into(),
            credit,
            &args,
            true,
            0,
        );
        self.stream.grant(key, credit, u64::MAX >> 2);
        key
    }
}

fn s(v: &str) -> FieldValue {
    FieldValue::LongStr(v.into())
}

#[test]
fn only_committed_offsets_are_delivered_with_their_header() {
    let mut f = Fixture::new(&[]);
    f.reader(1, &[("x-stream-offset", s("first"))], 10);
    f.stream.append(message("a", None));
    f.stream.append(message("b", None));
    let w = f.stream.seal(1000).expect("a write");
    assert_eq!((w.segment, w.pos, w.new_segment), (1, 0, true));
    // Sealed, not on disk yet: nothing for readers.
    assert!(f.drain().is_empty());
    assert!(f.stream.seal(1000).is_none(), "one write at a time");
    f.disk.entry(1).or_default().extend_from_slice(&w.data);
    f.stream.write_done(true);
    assert_eq!(f.drain(), vec![(1, 0, "a".into()), (1, 1, "b".into())]);
    assert_eq!(f.stream.committed(), 2);
    assert_eq!(f.stream.messages(), 2);
}

#[test]
fn credit_limits_deliveries_and_grants_resume_them() {
    let mut f = Fixture::new(&[]);
    let key = f.reader(1, &[("x-stream-offset", s("first"))], 2);
    f.publish(&[("a", None), ("b", None), ("c", None)], 1000);
    assert_eq!(f.drain().len(), 2);
    f.stream.grant(key, 5, 1 << 40);
    assert_eq!(f.drain(), vec![(1, 2, "c".into())]);
}

#[test]
fn a_failed_write_takes_its_offsets_back() {
    let mut f = Fixture::new(&[]);
    f.reader(1, &[("x-stream-offset", s("first"))], 10);
    f.stream.append(message("lost", None));
    let _ = f.stream.seal(1000).expect("a write");
    f.stream.write_done(false);
    assert_eq!(f.stream.committed(), 0);
    assert_eq!(f.stream.counters.write_failures, 1);
    f.publish(&[("kept", None)], 1001);
    assert_eq!(f.drain(), vec![(1, 0, "kept".into())]);
}

#[test]
fn readers_behind_the_cache_read_from_disk() {
    let mut f = Fixture::new(&[]);
    for i in 0..50 {
        f.publish(&[(&format!("m{i}"), None)], 1000 + i);
    }
    // Empty the cache: everything must come from disk.
    f.stream.trim_cache(0);
    f.reader(1, &[("x-stream-offset", FieldValue::I32(10))], 100);
    let got = f.drain();
    assert_eq!(got.len(), 40);
    assert_eq!(got[0], (1, 10, "m10".into()));
    assert_eq!(got[39], (1, 49, "m49".into()));
    // New messages after it caught up come from the cache.
    f.publish(&[("m50", None)], 2000);
    assert_eq!(f.drain(), vec![(1, 50, "m50".into())]);
}

#[test]
fn a_slow_reader_holds_no_more_than_its_credit() {
    let mut f = Fixture::new(&[]);
    for i in 0..200 {
        f.publish(&[(&format!("m{i}"), None)], 1000 + i);
    }
    f.stream.trim_cache(0);
    let key = f.reader(1, &[("x-stream-offset", s("first"))], 5);
    let got = f.drain();
    assert_eq!(got.len(), 5);
    let r = f.stream.readers().get(key).expect("reader");
    assert_eq!(
        r.loaded(),
        0,
        "what was read was delivered, nothing more held"
    );
    assert_eq!(r.position(), 5);
}

#[test]
fn start_specs() {
    let mut f = Fixture::new(&[]);
    f.publish(&[("a", None), ("b", None)], 1000);
    f.publish(&[("c", None), ("d", None), ("e", None)], 2000);
    let start = |f: &Fixture, spec| f.stream.start(spec, None, 10_000).0;
    assert_eq!(start(&f, OffsetSpec::First), 0);
    assert_eq!(start(&f, OffsetSpec::Last), 2, "the last chunk's start");
    assert_eq!(start(&f, OffsetSpec::Next), 5);
    assert_eq!(start(&f, OffsetSpec::Offset(3)), 3);
    assert_eq!(start(&f, OffsetSpec::Offset(-7)), 0);
    assert_eq!(start(&f, OffsetSpec::Offset(99)), 5);
    // A time between the chunks: the second chunk.
    f.reader(1, &[("x-stream-offset", FieldValue::Timestamp(1))], 10);
    f.stream.trim_cache(0);
    f.reader(2, &[("x-stream-offset", FieldValue::Timestamp(2))], 10);
    let got = f.drain();
    let two: Vec<u64> = got.iter().filter(|g| g.0 == 2).map(|g| g.1).collect();
    assert_eq!(two, vec![2, 3, 4]);
    let one: Vec<u64> = got.iter().filter(|g| g.0 == 1).map(|g| g.1).collect();
    assert_eq!(one, vec![0, 1, 2, 3, 4]);
    // A time after every chunk: next.
    assert_eq!(start(&f, OffsetSpec::Timestamp(5000)), 5);
    assert_eq!(
        f.stream
            .start(OffsetSpec::Interval(Duration::from_secs(9)), None, 10_000)
            .0,
        0
    );
    // A tracked offset wins over the spec.
    assert_eq!(f.stream.start(OffsetSpec::First, Some(3), 0).0, 4);
}

#[test]
fn filters_pick_exact_values_and_cost_no_credit() {
    let mut f = Fixture::new(&[]);
    f.reader(
        1,
        &[
            ("x-stream-offset", s("first")),
            ("x-stream-filter", s("red")),
        ],
        10,
    );
    f.reader(
        2,
        &[
            ("x-stream-offset", s("first")),
            ("x-stream-filter", FieldValue::Array(vec![s("blue")])),
            ("x-stream-match-unfiltered", FieldValue::Bool(true)),
        ],
        10,
    );
    f.publish(
        &[
            ("r1", Some("red")),
            ("n", None),
            ("b", Some("blue")),
            ("r2", Some("red")),
        ],
        1000,
    );
    let got = f.drain();
    let one: Vec<&str> = got
        .iter()
        .filter(|g| g.0 == 1)
        .map(|g| g.2.as_str())
        .collect();
    let two: Vec<&str> = got
        .iter()
        .filter(|g| g.0 == 2)
        .map(|g| g.2.as_str())
        .collect();
    assert_eq!(one, ["r1", "r2"]);
    assert_eq!(two, ["n", "b"]);
    // And from disk.
    f.stream.trim_cache(0);
    f.reader(
        3,
        &[
            ("x-stream-offset", s("first")),
            ("x-stream-filter", s("red")),
        ],
        1,
    );
    let got = f.drain();
    assert_eq!(got, vec![(3, 0, "r1".into())]);
    let _ = FilterSpec::default();
}

#[test]
fn segments_roll_and_retention_moves_readers_behind() {
    // Segments of ~100 bytes, at most 250 bytes kept.
    let mut f = Fixture::new(&[
        ("x-stream-max-segment-size-bytes", FieldValue::I32(100)),
        ("x-max-length-bytes", FieldValue::I32(250)),
    ]);
    let slow = f.reader(1, &[("x-stream-offset", s("first"))], 1);
    let mut rolled = 0;
    for i in 0..20 {
        if f.publish(
            &[(&format!("message-{i:02}-{}", "x".repeat(40)), None)],
            1000 + i,
        ) {
            rolled += 1;
            let r = f.stream.apply_retention(0);
            for seg in &r.removed {
                f.disk.remove(seg);
            }
            if !r.lost.is_empty() {
                assert_eq!(r.lost[0].tag, "tag1");
                assert!(r.lost[0].to > r.lost[0].from);
            }
        }
    }
    assert!(rolled > 3);
    assert!(f.stream.disk_bytes() <= 250 + 100);
    assert!(f.stream.first_offset() > 0);
    assert!(f.stream.counters.segments_removed > 0);
    // The slow reader goes on at the first offset still there.
    f.stream.grant(slow, 100, 1 << 40);
    let got = f.drain();
    let first = f.stream.first_offset();
    let offsets: Vec<u64> = got.iter().map(|g| g.1).collect();
    assert_eq!(offsets, (first..20).collect::<Vec<u64>>());
}

#[test]
fn retention_by_age_and_the_prediction() {
    let mut f = Fixture::new(&[
        ("x-stream-max-segment-size-bytes", FieldValue::I32(50)),
        ("x-max-age", s("10s")),
    ]);
    for i in 0..5 {
        f.publish(&[(&format!("old-{i}-{}", "x".repeat(40)), None)], 1_000);
    }
    f.publish(&[(&format!("new-{}", "x".repeat(40)), None)], 30_000);
    // At t = 30 s, everything written at 1 s is older than 10 s, but the newest
    // segment stays.
    let r = f.stream.apply_retention(30_000);
    assert_eq!(r.removed.len(), f.disk.len() - 1);
    assert_eq!(f.stream.first_offset(), 5);
}

#[test]
fn tracking_acks_are_written_and_recovered() {
    let mut f = Fixture::new(&[]);
    let mut t = FieldTable::new();
    t.insert("x-stream-offset", s("first"));
    t.insert("x-stream-automatic-offset-tracking", FieldValue::Bool(true));
    let args = consumer(&t).expect("args");
    let (key, start) =
        f.stream
            .add_reader(target(1), "mine".into(), "c".into(), 10, &args, false, 0);
    assert_eq!(start, 0);
    f.stream.grant(key, 10, 1 << 40);
    f.publish(&[("a", None), ("b", None), ("c", None)], 1000);
    assert_eq!(f.drain().len(), 3);
    assert!(f.stream.ack(key, 1));
    assert!(!f.stream.ack(key, 0), "a lower ack changes nothing");
    let (_, dirty) = f.stream.remove_reader(key).expect("reader");
    assert!(dirty, "its offset waits for the next write");
    assert!(
        f.commit(2000).is_some(),
        "a write of the tracking record alone"
    );
    // A new stream reads the segments back.
    let mut back = Stream::new(
        QueueId(1),
        0,
        "/".into(),
        "s".into(),
        f.stream.arguments.clone(),
        100,
    );
    for (number, data) in {
        let mut segs: Vec<_> = f.disk.iter().collect();
        segs.sort_by_key(|(n, _)| **n);
        segs
    } {
        let mut records = crate::store::record::Records::new(data.clone().freeze(), *number);
        while let Some((at, payload)) = records.next_record() {
            match stream_log::decode(payload.clone()).expect("decodes") {
                stream_log::StreamRecord::Chunk(header, _) => back.recovered(
                    *number,
                    stream_log::RecoveredRecord::Chunk(stream_log::RecoveredChunk {
                        header,
                        pos: at as u64,
                        len: (payload.len() + crate::store::record::HEADER) as u64,
                    }),
                ),
                stream_log::StreamRecord::Tracking { snapshot, entries } => back.recovered(
                    *number,
                    stream_log::RecoveredRecord::Tracking { snapshot, entries },
                ),
            }
        }
        back.recovered_segment(*number, data.len() as u64);
    }
    assert_eq!(back.committed(), 3);
    assert_eq!(back.tracked_offset(&"mine".into()), Some(1));
    // The same tag comes back: it resumes after its ack whatever its spec says.
    let (_, start) = back.add_reader(target(1), "mine".into(), "c".into(), 10, &args, false, 0);
    assert_eq!(start, 2);
}

#[test]
fn many_readers_share_one_cached_message() {
    let mut f = Fixture::new(&[]);
    for n in 0..100 {
        f.reader(n, &[], 10);
    }
    f.publish(&[("one", None)], 1000);
    let mut out = Vec::new();
    let mut reads = Vec::new();
    f.stream.dispatch(10_000, &mut out, &mut reads);
    assert_eq!(out.len(), 100);
    assert!(reads.is_empty());
    assert!(out.iter().all(|d| Rc::ptr_eq(&d.msg, &out[0].msg)));
}

//! Unit tests of the shard store: grouping, rolling, live counts, collection order,
//! compaction and recycling.

use super::*;
use crate::model::message::{BodyChunks, Message};

fn msg(body: &'static [u8]) -> LocalMessage {
    let mut chunks = BodyChunks::new();
    chunks.push(Bytes::from_static(body));
    Rc::new(Message::new(
        "".into(),
        "q".into(),
        Bytes::from_static(&[0x10, 0x00, 2]),
        chunks,
        body.len() as u64,
    ))
}

fn numbers(dead: &[(u32, u64)]) -> Vec<u32> {
    dead.iter().map(|(n, _)| *n).collect()
}

fn store(segment_size: u64) -> ShardStore {
    ShardStore::new(
        PathBuf::from("/nonexistent"),
        segment_size,
        true,
        Vec::new(),
        Vec::new(),
    )
}

#[test]
fn a_message_in_two_queues_is_one_record() {
    let mut s = store(1 << 20);
    let m = msg(b"body");
    s.stage(QueueId(1), 1, &m);
    s.stage(QueueId(2), 1, &m);
    let g = s.seal().expect("group");
    let records: Vec<_> = record::Records::new(g.data.clone(), g.segment).collect();
    assert_eq!(records.len(), 1);
    assert!(g.new_file);
    assert_eq!(s.segments[0].live, 2);
    assert!(s.seal().is_none(), "one group at a time");
}

#[test]
fn segments_roll_and_are_collected_in_order_only() {
    let mut s = store(4096);
    let big = msg(&[7u8; 5000]);
    // Segment 1 holds q1#1, segment 2 holds q1#2.
    s.stage(QueueId(1), 1, &big);
    let g1 = s.seal().expect("g1");
    s.committed(&g1);
    s.stage(QueueId(1), 2, &big);
    let g2 = s.seal().expect("g2");
    assert_eq!((g2.segment, g2.new_file), (2, true));
    s.committed(&g2);
    // The newer message goes first: nothing can be collected, segment 1 still lives.
    journal::gone(QueueId(1), 2);
    s.stage(QueueId(1), 3, &big);
    let g3 = s.seal().expect("g3");
    let dead = s.committed(&g3);
    assert!(dead.is_empty());
    journal::gone(QueueId(1), 1);
    journal::gone(QueueId(1), 3);
    let g4 = s.seal().expect("g4");
    let dead = s.committed(&g4);
    assert_eq!(
        numbers(&dead),
        vec![1, 2, 3],
        "segment 3 held only q1#3; the gone records went to 4"
    );
    assert_eq!(s.segment_count(), 1);
}

#[test]
fn compaction_copies_a_pinning_entry_forward_and_frees_the_old_segments() {
    let mut s = store(4096);
    let big = msg(&[3u8; 5000]);
    // q1#1 pins segment 1 (with q3's three acked entries); q2 fills segments 2 and
    // 3 and is acked.
    s.stage(QueueId(1), 1, &big);
    for seq in 1..=3 {
        s.stage(QueueId(3), seq, &msg(&[4u8; 100]));
    }
    let g = s.seal().expect("g");
    s.committed(&g);
    assert_eq!(s.segments[0].entries, 4);
    for seq in 1..=3 {
        journal::gone(QueueId(3), seq);
    }
    for seq in 1..=2 {
        s.stage(QueueId(2), seq, &big);
        let g = s.seal().expect("g");
        s.committed(&g);
    }
    journal::gone(QueueId(2), 1);
    journal::gone(QueueId(2), 2);
    let g = s.seal().expect("g");
    let dead = s.committed(&g);
    assert!(dead.is_empty(), "segment 1 still pins 2 and 3");
    assert_eq!(s.compaction_candidate(), Some(1));
    let ranges = s.ranges_in(1);
    assert_eq!(ranges, vec![(QueueId(1), 1..u64::MAX)]);
    // A segment whose entries are mostly live is not worth copying.
    let mut busy = store(4096);
    for seq in 1..=3 {
        busy.stage(QueueId(1), seq, &big);
        let g = busy.seal().expect("g");
        busy.committed(&g);
    }
    assert_eq!(busy.compaction_candidate(), None);
    assert!(s.relocate(QueueId(1), 1, &big, 1));
    assert!(!s.relocate(QueueId(1), 1, &big, 1), "counted out once");
    let g = s.seal().expect("the copy");
    let dead = s.committed(&g);
    assert_eq!(numbers(&dead), vec![1, 2, 3]);
    // The copy is what counts now: acking it frees its segment.
    journal::gone(QueueId(1), 1);
    let g = s.seal().expect("g");
    assert!(!g.data.is_empty(), "a gone record for the copy");
    s.committed(&g);
    assert!(s.segments.iter().all(|seg| seg.live == 0));
}

#[test]
fn a_recycled_segment_gets_end_marks_its_size_does_not_count() {
    let mut s = store(4096);
    let big = msg(&[5u8; 5000]);
    s.spare = Spare::Ready(70_000);
    s.stage(QueueId(1), 1, &big);
    let g = s.seal().expect("g");
    assert!(g.new_file && g.recycle);
    assert_eq!(s.spare, Spare::Busy);
    let size = s.segments[0].size;
    assert_eq!(
        g.data.len() as u64,
        size + record::HEADER as u64,
        "end mark"
    );
    assert_eq!(s.disk_bytes(), 70_000, "the recycled file's old length");
    s.committed(&g);
    let mut r = record::Records::new(g.data.clone(), g.segment);
    assert_eq!(r.by_ref().count(), 1);
    assert!(r.ended_at_stale());
}

#[test]
fn a_group_with_nothing_to_write_does_not_start_a_segment() {
    let mut s = store(4096);
    let big = msg(&[6u8; 5000]);
    s.stage(QueueId(1), 1, &big);
    let g = s.seal().expect("g");
    s.committed(&g);
    s.stage(QueueId(2), 1, &big);
    let g = s.seal().expect("g");
    assert_eq!((g.segment, g.new_file), (2, true));
    s.committed(&g);
    s.spare = Spare::Ready(9_000);
    // Queue 1 is deleted with its ready entry: nothing to write, segment 2 is full.
    s.queue_deleted(QueueId(1));
    journal::gone(QueueId(1), 1);
    let g = s.seal().expect("the deletion");
    assert!(g.data.is_empty() && !g.new_file && !g.recycle);
    assert_eq!(s.spare, Spare::Ready(9_000), "the spare is not taken");
    s.committed(&g);
    // The next write starts segment 3, in a file of its own.
    s.stage(QueueId(2), 2, &big);
    let g = s.seal().expect("g");
    assert_eq!(
        (g.segment, g.offset, g.new_file, g.recycle),
        (3, 0, true, true)
    );
}

#[test]
fn a_deleted_queue_frees_its_segments_without_records() {
    let mut s = store(4096);
    let big = msg(&[1u8; 5000]);
    s.stage(QueueId(5), 1, &big);
    let g = s.seal().expect("g");
    s.committed(&g);
    s.stage(QueueId(6), 1, &big);
    let g = s.seal().expect("g");
    s.committed(&g);
    s.queue_deleted(QueueId(5));
    journal::gone(QueueId(5), 1);
    let g = s.seal().expect("g");
    assert!(g.data.is_empty(), "nothing to write for a deleted queue");
    let dead = s.committed(&g);
    assert_eq!(numbers(&dead), vec![1]);
}

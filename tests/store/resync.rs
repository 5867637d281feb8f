//! A damaged record in the middle of a segment — the newest one, or the oldest of
//! several — costs only that record: recovery skips it (MST-1010 with the file, one
//! damaged record, its bytes and offset), keeps every message after it, leaves the
//! file its length (only the damaged record's header is rewritten, as a hole record),
//! and what is written after the restart survives the next one without another
//! MST-1010.

use crate::common::{thousands, EVENT_TIMEOUT};
use crate::support::*;

store_tests!(
    a_flipped_byte_in_the_newest_segment_costs_one_message,
    a_flipped_byte_in_the_oldest_segment_costs_one_message
);

const SEGMENT: u64 = 65_536;
const N: u64 = 230;
const SIZE: usize = 1000;
const MORE: u64 = 5;
/// Bytes of a record's header (`store::record::HEADER`) and of a hole record's first
/// payload byte: what recovery rewrites at the damaged record's start.
const REFRAMED: usize = 13;

async fn a_flipped_byte_in_the_newest_segment_costs_one_message() {
    flipped_mid_segment(Which::Newest).await
}

async fn a_flipped_byte_in_the_oldest_segment_costs_one_message() {
    flipped_mid_segment(Which::Oldest).await
}

#[derive(Clone, Copy, Debug)]
enum Which {
    Newest,
    Oldest,
}

/// Where body `i` of series `tag` starts in `data`, if it is there.
fn find_body(data: &[u8], tag: &str, i: u64) -> Option<usize> {
    let prefix = format!("{tag}#{i:06}|").into_bytes();
    data.windows(prefix.len()).position(|w| w == prefix)
}

/// - `[store] segment_size = 65536`; N persistent SIZE-byte messages into a durable
///   queue Q (no consumer), confirmed ten at a time: at least three segments on Q's
///   home shard;
/// - SIGTERM; in the chosen segment the messages it holds are found by their bodies,
///   and the middle one (M, with messages before and after it in that file) has one
///   byte of its body inverted. Its record starts at `o` and is `b` bytes long (the
///   distance to the next body: every record there is a message record);
/// - restart: exactly one MST-1010 line, `MST-1010 : Store records skipped : <that
///   file> : 1 damaged record in 1 region, <b> bytes, first at offset <o> : checksum
///   mismatch (…)`, at warn; the file keeps its length and only its bytes o..o+13 (the
///   header and first payload byte) changed; Q holds exactly the N - 1 others, in
///   order, intact, not redelivered (drained, acked);
/// - MORE persistent messages published and confirmed; SIGTERM, restart: no MST-1010,
///   Q holds exactly those MORE.
async fn flipped_mid_segment(which: Which) {
    let node = Node::new(Some(&format!("[store]\nsegment_size = {SEGMENT}\n")));
    let mut broker = node.start(SHARDS);
    let q = crate::common::unique("store-resync");
    let shard = home(&q, SHARDS);
    let conn = broker.connect().await;
    let mut p = Publisher::open(&conn).await;
    declare_durable(&p.ch, &q).await;
    for i in 0..N {
        p.publish("", &q, persistent(), &body(&q, i, SIZE)).await;
        if i % 10 == 9 {
            p.wait_all().await;
        }
    }
    p.wait_all().await;
    conn.close().await;
    stop(&mut broker);

    let segs = segments(node.data(), shard);
    assert!(
        segs.len() >= 3,
        "{} segments for {N} messages of {SIZE} bytes with segment_size {SEGMENT}: {}",
        segs.len(),
        disk_report(node.data())
    );
    let seg = match which {
        Which::Newest => segs[segs.len() - 1].1.clone(),
        Which::Oldest => segs[0].1.clone(),
    };
    let original = std::fs::read(&seg).expect("read segment");
    let here: Vec<(u64, usize)> = (0..N)
        .filter_map(|i| find_body(&original, &q, i).map(|at| (i, at)))
        .collect();
    assert!(
        here.len() >= 3,
        "{} holds {} messages ({which:?})",
        seg.display(),
        here.len()
    );
    let k = here.len() / 2;
    let (m, body_at) = here[k];
    let record_len = here[k + 1].1 - body_at;
    let record_at = body_at - (record_len - SIZE);
    let mut damaged = original.clone();
    damaged[body_at + SIZE / 2] ^= 0xff;
    std::fs::write(&seg, &damaged).expect("write segment");

    broker = node.start(SHARDS);
    let head = "MST-1010 : Store records skipped : ";
    let line = wait_line(&broker, EVENT_TIMEOUT, "MST-1010", |l| {
        l.text.contains(head)
    });
    assert_eq!(line.level, "WARN", "MST-1010 level: {}", line.text);
    let rest = line.text.split_once(head).unwrap().1;
    let (path, rest) = rest
        .split_once(" : ")
        .unwrap_or_else(|| panic!("no ` : ` after the file in {}", line.text));
    assert_eq!(
        std::fs::canonicalize(path).ok(),
        Some(std::fs::canonicalize(&seg).unwrap()),
        "MST-1010 names {path}, the damaged file is {}",
        seg.display()
    );
    let expected = format!(
        "1 damaged record in 1 region, {} bytes, first at offset {record_at} : checksum mismatch (stored ",
        thousands(record_len as u64)
    );
    assert!(
        rest.starts_with(&expected),
        "MST-1010 says {rest:?}; expected it to start with {expected:?} (message #{m}, {which:?})"
    );
    assert_eq!(
        texts_with(&broker, "MST-1010").len(),
        1,
        "one damaged record, one line: {:?}",
        texts_with(&broker, "MST-1010")
    );
    let now = std::fs::read(&seg).expect("read segment after recovery");
    assert_eq!(now.len(), damaged.len(), "the segment was cut");
    let changed: Vec<usize> = (0..now.len()).filter(|&i| now[i] != damaged[i]).collect();
    assert!(
        changed
            .iter()
            .all(|&i| (record_at..record_at + REFRAMED).contains(&i)),
        "bytes changed outside the damaged record's header: {changed:?} (record at {record_at})"
    );

    let conn = broker.connect().await;
    let got = drain(&conn, &q).await;
    assert_series(&got, &q, (0..N).filter(|&i| i != m), SIZE, |_| false);
    let mut p = Publisher::open(&conn).await;
    for i in N..N + MORE {
        p.publish("", &q, persistent(), &body(&q, i, SIZE)).await;
    }
    p.wait_all().await;
    conn.close().await;

    restart(&mut broker, &node, SHARDS);
    let conn = broker.connect().await;
    let got = drain(&conn, &q).await;
    assert_series(&got, &q, N..N + MORE, SIZE, |_| false);
    let again = texts_with(&broker, "MST-1010");
    assert!(again.is_empty(), "MST-1010 on the next restart: {again:?}");
    conn.close().await;
    stop(&mut broker);
}

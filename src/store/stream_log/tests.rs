use super::*;

fn msg(body: &str, key: &str) -> Message {
    let mut chunks = BodyChunks::new();
    chunks.push(Bytes::copy_from_slice(body.as_bytes()));
    Message::new(
        "amq.topic".into(),
        key.into(),
        Bytes::from_static(&[0, 0]),
        chunks,
        body.len() as u64,
    )
}

/// A segment (number 3) of two chunks: offsets 10..13 at t=1000 (filters red, none,
/// blue) and 13..15 at t=2000 (none, red), with a tracking record between them.
fn segment() -> (BytesMut, Vec<u64>) {
    let m: Vec<Message> = (10..15).map(|i| msg(&format!("m{i}"), "k")).collect();
    let mut out = BytesMut::new();
    let mut starts = vec![0];
    put_chunk(
        &mut out,
        3,
        10,
        1000,
        &[
            Appended {
                filter: Some(b"red"),
                msg: &m[0],
            },
            Appended {
                filter: None,
                msg: &m[1],
            },
            Appended {
                filter: Some(b"blue"),
                msg: &m[2],
            },
        ],
    );
    starts.push(out.len() as u64);
    put_tracking(&mut out, 3, false, &[("c1".into(), 11)]);
    starts.push(out.len() as u64);
    put_chunk(
        &mut out,
        3,
        13,
        2000,
        &[
            Appended {
                filter: None,
                msg: &m[3],
            },
            Appended {
                filter: Some(b"red"),
                msg: &m[4],
            },
        ],
    );
    starts.push(out.len() as u64);
    (out, starts)
}

fn all(_: Option<&[u8]>) -> bool {
    true
}

fn want<'a>(next: u64, wanted: &'a dyn Fn(Option<&[u8]>) -> bool, max: usize) -> ScanFor<'a> {
    ScanFor {
        segment: 3,
        base: 0,
        next,
        seek_ts: None,
        wanted,
        max_messages: max,
        max_bytes: u64::MAX,
    }
}

fn bodies(s: &Scanned) -> Vec<(u64, String)> {
    s.found
        .iter()
        .map(|(o, m)| (*o, String::from_utf8_lossy(&m.body()[0]).into_owned()))
        .collect()
}

#[test]
fn a_scan_delivers_from_the_next_offset_up_to_the_credit() {
    let (seg, starts) = segment();
    let data = seg.freeze();
    let s = scan(data.clone(), &want(11, &all, 2));
    assert_eq!(bodies(&s), vec![(11, "m11".into()), (12, "m12".into())]);
    assert_eq!(s.next, 13);
    // The first chunk is done: the next read starts after it.
    assert_eq!(s.resume, starts[1]);
    let s = scan(data.clone(), &want(13, &all, 1));
    assert_eq!(bodies(&s), vec![(13, "m13".into())]);
    // Stopped inside the second chunk: the next read starts at it and skips 13.
    assert_eq!(s.resume, starts[2]);
    let s = scan(
        data.slice(starts[2] as usize..),
        &ScanFor {
            base: starts[2],
            ..want(14, &all, 10)
        },
    );
    assert_eq!(bodies(&s), vec![(14, "m14".into())]);
    assert_eq!(s.resume, starts[3]);
    assert!(!s.damaged && s.wants_len.is_none());
}

#[test]
fn filtered_messages_cost_no_credit() {
    let (seg, starts) = segment();
    let red = |v: Option<&[u8]>| v == Some(&b"red"[..]);
    let s = scan(seg.freeze(), &want(10, &red, 10));
    assert_eq!(bodies(&s), vec![(10, "m10".into()), (14, "m14".into())]);
    assert_eq!(s.next, 15);
    assert_eq!(s.resume, starts[3]);
}

#[test]
fn a_timestamp_start_skips_older_chunks() {
    let (seg, _) = segment();
    let s = scan(
        seg.clone().freeze(),
        &ScanFor {
            seek_ts: Some(1500),
            ..want(10, &all, 10)
        },
    );
    assert!(s.seek_resolved);
    assert_eq!(bodies(&s), vec![(13, "m13".into()), (14, "m14".into())]);
    let s = scan(
        seg.freeze(),
        &ScanFor {
            seek_ts: Some(1000),
            ..want(10, &all, 1)
        },
    );
    assert_eq!(bodies(&s), vec![(10, "m10".into())]);
}

#[test]
fn a_cut_record_is_read_again_and_a_bad_one_is_damage() {
    let (seg, starts) = segment();
    let data = seg.freeze();
    let cut = data.slice(..starts[1] as usize - 3);
    let s = scan(cut, &want(10, &all, 10));
    assert!(s.found.is_empty() && !s.damaged);
    assert_eq!(s.resume, 0);
    assert_eq!(s.wants_len, Some(starts[1]));
    let mut bad = BytesMut::from(&data[..]);
    bad[starts[2] as usize + 20] ^= 1;
    let s = scan(bad.freeze(), &want(10, &all, 10));
    assert_eq!(s.found.len(), 3);
    assert!(s.damaged);
}

#[test]
fn recovery_reads_chunks_and_tracking_and_cuts_a_torn_tail() {
    let dir = std::env::temp_dir().join(format!("sluice-stream-log-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let (seg, starts) = segment();
    // Segment 3 whole; segment 4 with a chunk and half of another.
    std::fs::write(segment_path(&dir, 3), &seg).expect("write");
    let m = msg("m15", "k");
    let mut four = BytesMut::new();
    put_tracking(&mut four, 4, true, &[("c1".into(), 12)]);
    put_chunk(
        &mut four,
        4,
        15,
        3000,
        &[Appended {
            filter: None,
            msg: &m,
        }],
    );
    let good = four.len() as u64;
    put_chunk(
        &mut four,
        4,
        16,
        3001,
        &[Appended {
            filter: None,
            msg: &m,
        }],
    );
    std::fs::write(segment_path(&dir, 4), &four[..four.len() - 5]).expect("write");
    let mut chunks = Vec::new();
    let mut tracking = Vec::new();
    let r = recover(&dir, |n, rec| match rec {
        RecoveredRecord::Chunk(c) => chunks.push((n, c.header.first, c.header.count, c.pos)),
        RecoveredRecord::Tracking { snapshot, entries } => tracking.push((snapshot, entries)),
    })
    .expect("recover");
    assert_eq!(
        chunks,
        vec![
            (3, 10, 3, 0),
            (3, 13, 2, starts[2]),
            (
                4,
                15,
                1,
                good - (HEADER + CHUNK_HEADER + entry_len(None, &m)) as u64
            )
        ]
    );
    assert_eq!(tracking.len(), 2);
    assert!(tracking[1].0, "the segment's snapshot");
    assert_eq!(
        r.segments,
        vec![
            RecoveredSegment {
                number: 3,
                size: starts[3]
            },
            RecoveredSegment {
                number: 4,
                size: good
            },
        ]
    );
    assert_eq!(r.damage.len(), 1);
    assert!(r.damage[0].truncated);
    assert_eq!(
        std::fs::metadata(segment_path(&dir, 4))
            .expect("meta")
            .len(),
        good,
        "the torn tail is cut off"
    );
    // A second recovery finds no damage.
    let again = recover(&dir, |_, _| {}).expect("recover");
    assert!(again.damage.is_empty());
    std::fs::remove_dir_all(&dir).expect("clean");
}

#[test]
fn orphan_directories_go() {
    let data = std::env::temp_dir().join(format!("sluice-stream-orphans-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    for id in [1u64, 2, 3] {
        std::fs::create_dir_all(stream_dir(&data, QueueId(id))).expect("dir");
    }
    let removed = remove_orphans(&data, |q| q.0 != 2).expect("ok");
    assert_eq!(removed, 1);
    assert!(stream_dir(&data, QueueId(1)).exists());
    assert!(!stream_dir(&data, QueueId(2)).exists());
    assert_eq!(
        remove_orphans(&data.join("nothing"), |_| false).expect("ok"),
        0
    );
    std::fs::remove_dir_all(&data).expect("clean");
}

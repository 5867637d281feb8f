//! A damaged tail of the newest segment: the last record is cut off at recovery
//! (MST-1010 naming the file and the offset), everything before it is kept, the broker
//! starts, and the file really is cut (what is written after it survives the next
//! restart).

use crate::common::{next_delivery, unique, wait_until, Chan, EVENT_TIMEOUT};
use crate::support::*;

store_tests!(truncated_tail_is_cut_off, bit_flipped_tail_is_cut_off);

const N: u64 = 20;
const SIZE: usize = 1000;
/// Messages published after the first recovery, numbered from N + 1 (N - 1 is lost and
/// N is skipped, so that no number is reused).
const MORE: u64 = 5;

#[derive(Clone, Copy, Debug)]
enum Damage {
    /// The last `n` bytes of the file are gone (a short read of the last record).
    Truncate(u64),
    /// The byte `n` bytes before the end of the file (inside the last body) is inverted.
    Flip(u64),
}

async fn truncated_tail_is_cut_off() {
    damaged_tail(Damage::Truncate(3)).await
}

async fn bit_flipped_tail_is_cut_off() {
    damaged_tail(Damage::Flip(5)).await
}

/// - N persistent SIZE-byte messages into a durable queue Q (no consumer), each
///   confirmed; the newest segment of Q's home shard measured before (S1) and after (S2)
///   the last one, so that the last message's record starts in [S1, S2 - SIZE - 8];
/// - SIGTERM; the file ends with the last body (contract: nothing written after it);
///   then `damage`;
/// - restart: the broker starts; exactly one warn line
///   `MST-1010 : Store record truncated : <that file> at offset <n> : <reason>` with n in
///   [S1, S2 - SIZE - 8]; the file is now exactly its first n bytes, unchanged; Q holds
///   exactly 0..N-2, intact, in order (read with a manual-ack consumer and given back by
///   closing its channel);
/// - MORE persistent messages published and confirmed, SIGTERM, restart: no MST-1010;
///   Q holds 0..N-2 (redelivered: they were delivered and not acked) then the new ones
///   (not redelivered).
async fn damaged_tail(damage: Damage) {
    let node = Node::new(None);
    let mut broker = node.start(SHARDS);
    let q = unique("store-torn");
    let shard = home(&q, SHARDS);
    let conn = broker.connect().await;
    let mut p = Publisher::open(&conn).await;
    declare_durable(&p.ch, &q).await;
    for i in 0..N - 1 {
        p.publish("", &q, persistent(), &body(&q, i, SIZE)).await;
    }
    p.wait_all().await;
    let seg = newest_segment(node.data(), shard);
    let s1 = file_len(&seg);
    p.publish("", &q, persistent(), &body(&q, N - 1, SIZE))
        .await;
    p.wait_all().await;
    assert_eq!(
        newest_segment(node.data(), shard),
        seg,
        "the segment rolled over under the default segment_size"
    );
    let s2 = file_len(&seg);
    assert!(
        s2 >= s1 + SIZE as u64 + 8,
        "the last message added {} bytes to {} (body {SIZE})",
        s2 - s1,
        seg.display()
    );
    conn.close().await;
    stop(&mut broker);

    let original = std::fs::read(&seg).expect("read segment");
    let len = original.len() as u64;
    assert!(
        original.ends_with(&body(&q, N - 1, SIZE)),
        "{} ({len} bytes) does not end with the last body",
        seg.display()
    );
    match damage {
        Damage::Truncate(n) => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&seg)
                .expect("open segment");
            f.set_len(len - n).expect("truncate segment");
            f.sync_all().expect("sync");
        }
        Damage::Flip(n) => {
            let mut bytes = original.clone();
            let at = (len - n) as usize;
            bytes[at] ^= 0xff;
            std::fs::write(&seg, &bytes).expect("write segment");
        }
    }

    broker = node.start(SHARDS);
    let line = wait_line(&broker, EVENT_TIMEOUT, "MST-1010", |l| {
        l.text.contains("MST-1010 : Store record truncated : ")
    });
    assert_eq!(line.level, "WARN", "MST-1010 level: {}", line.text);
    let rest = line
        .text
        .split_once("MST-1010 : Store record truncated : ")
        .unwrap()
        .1;
    let (path, rest) = rest
        .split_once(" at offset ")
        .unwrap_or_else(|| panic!("no ` at offset ` in {}", line.text));
    let (offset, reason) = rest
        .split_once(" : ")
        .unwrap_or_else(|| panic!("no ` : <reason>` in {}", line.text));
    assert!(!reason.trim().is_empty(), "empty reason: {}", line.text);
    assert_eq!(
        std::fs::canonicalize(path).ok(),
        Some(std::fs::canonicalize(&seg).unwrap()),
        "MST-1010 names {path}, the damaged file is {}",
        seg.display()
    );
    let offset = parse_num(offset);
    assert!(
        offset >= s1 && offset + SIZE as u64 + 8 <= s2,
        "MST-1010 offset {offset}: the last record starts in [{s1}, {}] ({damage:?})",
        s2 - SIZE as u64 - 8
    );
    assert_eq!(
        texts_with(&broker, "MST-1010").len(),
        1,
        "one damaged record, one line"
    );
    assert!(
        wait_until(EVENT_TIMEOUT, || file_len(&seg) == offset),
        "{} is {} bytes, not truncated at the offset MST-1010 names ({offset})",
        seg.display(),
        file_len(&seg)
    );
    let now = std::fs::read(&seg).expect("read segment after recovery");
    assert!(
        now[..] == original[..offset as usize],
        "the bytes before the cut changed"
    );

    let conn = broker.connect().await;
    let mut p = Publisher::open(&conn).await;
    assert_eq!(p.ch.message_count(&q).await, (N - 1) as u32);
    {
        let c = conn.channel().await;
        let (_tag, mut rx) = c.consume_manual(&q).await;
        let mut got = Vec::new();
        for _ in 0..N - 1 {
            got.push(next_delivery(&mut rx).await);
        }
        assert_series(&got, &q, 0..N - 1, SIZE, |_| false);
        let Chan { ch, .. } = c;
        ch.close().await.expect("channel.close");
    }
    // Given back: ready again, and the consumer gone.
    p.ch.wait_message_count(&q, (N - 1) as u32).await;
    wait_no_consumers(&p.ch, &q).await;
    for i in N + 1..N + 1 + MORE {
        p.publish("", &q, persistent(), &body(&q, i, SIZE)).await;
    }
    p.wait_all().await;
    conn.close().await;

    restart(&mut broker, &node, SHARDS);
    let conn = broker.connect().await;
    let got = drain(&conn, &q).await;
    assert_series(&got, &q, (0..N - 1).chain(N + 1..N + 1 + MORE), SIZE, |i| {
        i < N - 1
    });
    let again = texts_with(&broker, "MST-1010");
    assert!(again.is_empty(), "MST-1010 on the next restart: {again:?}");
    conn.close().await;
    stop(&mut broker);
}

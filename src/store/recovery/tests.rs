//! Unit tests of reading segments back: a damaged record in the middle of a segment
//! costs only that record (reframed in place, the file keeps its length), a damaged
//! tail is cut off, and a recycled file's previous life never comes back.

use super::*;
use bytes::BytesMut;

use crate::store::message_log;
use crate::store::record::{self, HEADER};

const Q: QueueId = QueueId(1);

/// A directory of its own under the system's temp dir, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let path =
            std::env::temp_dir().join(format!("sluice-recovery-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create test dir");
        Dir(path)
    }

    fn segment(&self, number: u32) -> PathBuf {
        self.0.join(super::super::shard_store::segment_name(number))
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn body(seq: u64) -> Vec<u8> {
    let mut b = format!("m{seq}|").into_bytes();
    b.resize(100, b'a' + (seq % 26) as u8);
    b
}

/// Appends a message record of file `file` for `Q` as `seq`; returns where it starts.
fn put_message(out: &mut BytesMut, file: u32, seq: u64) -> usize {
    let at = out.len();
    record::append(out, file, |o| {
        message_log::put_parts(
            o,
            &[(Q, seq)],
            &"".into(),
            &"q".into(),
            &[],
            &[Bytes::from(body(seq))],
        )
    });
    at
}

/// Segment `file` with messages `seqs`, and where each record starts.
fn segment(file: u32, seqs: impl IntoIterator<Item = u64>) -> (BytesMut, Vec<usize>) {
    let mut out = BytesMut::new();
    let starts = seqs
        .into_iter()
        .map(|seq| put_message(&mut out, file, seq))
        .collect();
    (out, starts)
}

/// Reads the directory: (sequence numbers of Q, their bodies are right, segment sizes).
fn read(dir: &Dir) -> (Vec<u64>, Vec<u64>) {
    let shard = read_shard(&dir.0, &|_| true).expect("read_shard");
    let entries = shard.queues.get(&Q).map(Vec::as_slice).unwrap_or(&[]);
    let seqs = entries
        .iter()
        .map(|e| {
            let parts = shard.messages[e.message].as_ref().expect("message kept");
            assert_eq!(&parts.body[..], &body(e.seq)[..], "body of #{}", e.seq);
            e.seq
        })
        .collect();
    (seqs, shard.segments.iter().map(|s| s.size).collect())
}

#[test]
fn a_flipped_byte_mid_segment_costs_one_message_and_is_repaired_in_place() {
    let dir = Dir::new("flip");
    let (mut data, starts) = segment(1, 1..=10);
    data[starts[4] + HEADER + 60] ^= 0x01; // inside #5's body
    std::fs::write(dir.segment(1), &data).expect("write");
    let (seqs, sizes) = read(&dir);
    assert_eq!(seqs, [1, 2, 3, 4, 6, 7, 8, 9, 10]);
    assert_eq!(
        sizes,
        [data.len() as u64],
        "appends go after the last record"
    );
    let now = std::fs::read(dir.segment(1)).expect("read back");
    assert_eq!(now.len(), data.len(), "not truncated at the damage");
    let changed: Vec<usize> = (0..now.len()).filter(|&i| now[i] != data[i]).collect();
    assert!(
        changed
            .iter()
            .all(|&i| (starts[4]..starts[4] + HEADER + 1).contains(&i)),
        "only the damaged record's header and first byte are rewritten: {changed:?}"
    );
    // Repaired: the next read skips nothing and finds the same.
    let mut r = Records::resyncing(Bytes::from(now), 1);
    assert_eq!(r.by_ref().count(), 10, "nine messages and the hole");
    assert!(r.skipped().is_empty() && r.damage().is_none());
    assert_eq!(read(&dir).0, seqs);
}

#[test]
fn a_damaged_length_mid_segment_costs_one_message() {
    let dir = Dir::new("length");
    let (mut data, starts) = segment(1, 1..=10);
    data[starts[2] + 1] ^= 0x40; // #3's length grows by 16 KiB: past the end
    std::fs::write(dir.segment(1), &data).expect("write");
    assert_eq!(read(&dir).0, [1, 2, 4, 5, 6, 7, 8, 9, 10]);
    assert_eq!(
        read(&dir).0,
        [1, 2, 4, 5, 6, 7, 8, 9, 10],
        "after the repair"
    );
}

#[test]
fn two_damaged_records_cost_two_and_later_gone_records_still_count() {
    let dir = Dir::new("two");
    let (mut data, starts) = segment(1, 1..=10);
    record::append(&mut data, 1, |o| {
        message_log::put_pairs(o, false, &[(Q, 8)])
    });
    data[starts[1] + HEADER + 50] ^= 0x20;
    data[starts[6] + 8] ^= 0x01; // #7's stored checksum
    std::fs::write(dir.segment(1), &data).expect("write");
    assert_eq!(read(&dir).0, [1, 3, 4, 5, 6, 9, 10]);
}

#[test]
fn a_damaged_last_record_is_cut_off() {
    let dir = Dir::new("tail");
    let (mut data, starts) = segment(1, 1..=10);
    let last = data.len() - 3;
    data[last] ^= 0xff;
    std::fs::write(dir.segment(1), &data).expect("write");
    let (seqs, sizes) = read(&dir);
    assert_eq!(seqs, (1..=9).collect::<Vec<_>>());
    assert_eq!(sizes, [starts[9] as u64]);
    assert_eq!(
        file_len(&dir.segment(1)),
        starts[9] as u64,
        "truncated there"
    );
}

#[test]
fn damage_in_a_recycled_file_never_brings_its_previous_life_back() {
    let dir = Dir::new("recycled");
    // File 1's old life: #100..#130; file 2's life over it: #1..#4 and its end mark.
    let (mut data, _) = segment(1, 100..=130);
    let (mut new, starts) = segment(2, 1..=4);
    let end = new.len();
    record::append_end_mark(&mut new, 2);
    data[..new.len()].copy_from_slice(&new);
    data[starts[1] + HEADER + 40] ^= 0x01; // #2
    std::fs::write(dir.segment(2), &data).expect("write");
    let (seqs, sizes) = read(&dir);
    assert_eq!(seqs, [1, 3, 4]);
    assert_eq!(sizes, [end as u64]);
    assert_eq!(
        file_len(&dir.segment(2)),
        end as u64,
        "the old life is cut off"
    );
    // The last new record damaged too: nothing of this life after it, so a tail.
    let mut data = std::fs::read(dir.segment(2)).expect("read");
    data.extend_from_slice(&segment(1, 200..=210).0);
    let last = starts[3] + HEADER + 30;
    data[last] ^= 0x01;
    std::fs::write(dir.segment(2), &data).expect("write");
    let (seqs, sizes) = read(&dir);
    assert_eq!(seqs, [1, 3]);
    assert_eq!(sizes, [starts[3] as u64]);
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).expect("metadata").len()
}

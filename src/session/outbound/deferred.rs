//! Owns: a connection's small deliveries queued and not yet encoded ([`Deferred`]) —
//! what each needs to be written (its message, channel, consumer tag, delivery tag and
//! redelivered flag), in order, and its exact encoded size — and encoding a small
//! delivery ([`SmallHead`]) from the message's prebuilt wire tail. Deliveries to one
//! consumer with consecutive delivery tags (a subscriber's) are kept as one run: each
//! is then a share of its message (8 bytes) in a list.
//!
//! At thousands of subscribers a connection waits for the write pass for a good part of
//! a pass, and what waits was each delivery encoded in the connection's arena (~170
//! bytes for 64 bytes of body, in an arena of its own per subscriber): tens of MiB of
//! copies of the same few messages. Deferred, a delivery is a share of the message, and
//! the write pass encodes it into one scratch buffer of the shard's just
//! before the `send` (issue 23).
//!
//! A connection's lists are empty again once the write pass wrote it (the common case),
//! and go back to the thread's spares (`model::spare`) for the next connection to defer
//! deliveries: a shard's connections hold lists only while they have deliveries waiting,
//! not each one its own for good (~250 bytes per subscriber at 10,000: issue 23).
//!
//! Does not: decide what is deferred or when it is encoded (`Outbound` does), or count
//! bytes (its sizes are counted by `Outbound` as bytes queued).

use std::cell::RefCell;
use std::collections::VecDeque;

use bytes::BytesMut;
use smallvec::SmallVec;

use crate::model::message::{LocalMessage, Message, WireTail};
use crate::model::spare::SpareLists;
use crate::protocol::ShortStr;

/// Consumer tags up to this long are assembled on the stack (server-generated ones are
/// about 30 bytes); a delivery with a longer one is encoded at once, not deferred.
const SHORT_TAG: usize = 56;

/// Frame header (7), class and method (4), the tag's length octet (1), delivery tag (8)
/// and redelivered flag (1): what a small delivery writes besides its tag and tail.
const HEAD_FIXED: usize = 21;

/// Distinct consumer tags one connection's deferred deliveries may name at once (an
/// index octet each); past that a delivery is encoded at once.
const TAGS_MAX: usize = 255;

thread_local! {
    /// The emptied lists of this thread's (shard's) connections (`model::spare`).
    static SPARE_MSGS: RefCell<SpareLists<LocalMessage>> = const { RefCell::new(SpareLists::new()) };
    static SPARE_RUNS: RefCell<SpareLists<Run>> = const { RefCell::new(SpareLists::new()) };
}

/// Small deliveries waiting to be encoded, in the order they were queued.
///
/// # Invariants
/// The runs' counts add up to the number of messages; the first run's first delivery is
/// the first message.
#[derive(Default)]
pub struct Deferred {
    msgs: VecDeque<LocalMessage>,
    runs: VecDeque<Run>,
    /// The consumer tags the runs name (most connections: one).
    tags: SmallVec<[ShortStr; 1]>,
    /// The deliveries' encoded size.
    bytes: usize,
}

/// Consecutive deliveries on one channel to one consumer, with consecutive delivery tags.
#[derive(Clone, Copy)]
struct Run {
    first_delivery_tag: u64,
    count: u32,
    channel: u16,
    /// Index into `Deferred::tags`.
    tag: u8,
    redelivered: bool,
}

/// The prebuilt tail a delivery of `msg` to consumer `tag` is encoded from, with the
/// delivery's encoded size, when it can be (a small body and a short tag).
pub fn small_tail<'a>(
    tag: &ShortStr,
    msg: &'a Message,
    inline_max: usize,
) -> Option<(&'a WireTail, usize)> {
    if tag.len() > SHORT_TAG || msg.body_size() > inline_max as u64 {
        return None;
    }
    msg.wire_tail()
        .map(|tail| (tail, HEAD_FIXED + tag.len() + tail.bytes.len()))
}

/// The start of a small delivery to one consumer on one channel — `basic.deliver`'s frame
/// header, consumer tag and redelivered flag — assembled once on the stack for a run of
/// deliveries; [`SmallHead::write`] fills in each one's size and delivery tag.
pub struct SmallHead {
    bytes: [u8; HEAD_FIXED + SHORT_TAG],
    /// Where the delivery tag goes; the head ends 9 bytes later.
    tag_at: usize,
}

impl SmallHead {
    /// `tag` is cut to [`SHORT_TAG`] bytes (longer ones are never deferred).
    pub fn new(channel: u16, tag: &[u8], redelivered: bool) -> SmallHead {
        let tag = &tag[..tag.len().min(SHORT_TAG)];
        let mut bytes = [0u8; HEAD_FIXED + SHORT_TAG];
        bytes[0] = 1;
        bytes[1..3].copy_from_slice(&channel.to_be_bytes());
        bytes[7..11].copy_from_slice(&[0, 60, 0, 60]);
        bytes[11] = tag.len() as u8;
        let tag_at = 12 + tag.len();
        bytes[12..tag_at].copy_from_slice(tag);
        bytes[tag_at + 8] = u8::from(redelivered);
        SmallHead { bytes, tag_at }
    }

    /// Appends one delivery: the head with its size and delivery tag, then the message's
    /// tail with its two channel numbers patched. Inlined into the encoding loop: as a
    /// call, saving and restoring registers was an eighth of its cost (issue 23).
    #[inline(always)]
    pub fn write(&mut self, into: &mut BytesMut, delivery_tag: u64, tail: &WireTail) {
        let at = self.tag_at;
        // The method payload: class, method, tag, delivery tag, redelivered, and the
        // exchange and routing key with their length octets (the tail up to its frame end).
        let size = at + 9 - 7 + tail.method_rest();
        self.bytes[3..7].copy_from_slice(&(size as u32).to_be_bytes());
        self.bytes[at..at + 8].copy_from_slice(&delivery_tag.to_be_bytes());
        into.reserve(at + 9 + tail.bytes.len());
        into.extend_from_slice(&self.bytes[..at + 9]);
        let at = into.len();
        into.extend_from_slice(&tail.bytes);
        let channel = [self.bytes[1], self.bytes[2]];
        into[at + tail.header_channel_at..at + tail.header_channel_at + 2]
            .copy_from_slice(&channel);
        if let Some(body) = tail.body_channel() {
            into[at + body..at + body + 2].copy_from_slice(&channel);
        }
    }
}

fn same_bytes(a: &ShortStr, b: &ShortStr) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || a == b
}

impl Deferred {
    /// The encoded size of what waits.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }

    /// Borrows spare lists when this connection has none (its first deferred delivery
    /// since it was last written).
    #[inline]
    fn lend_spares(&mut self) {
        if self.msgs.capacity() == 0 {
            SPARE_MSGS.with_borrow_mut(|s| s.lend(&mut self.msgs));
        }
        if self.runs.capacity() == 0 {
            SPARE_RUNS.with_borrow_mut(|s| s.lend(&mut self.runs));
        }
    }

    /// Gives the emptied lists back to the thread's spares.
    fn return_spares(&mut self) {
        SPARE_MSGS.with_borrow_mut(|s| s.give_back(&mut self.msgs));
        SPARE_RUNS.with_borrow_mut(|s| s.give_back(&mut self.runs));
    }

    /// Queues a delivery of `size` encoded bytes ([`small_tail`]); false (nothing queued)
    /// when the connection's waiting deliveries already name [`TAGS_MAX`] consumer tags.
    pub fn push(
        &mut self,
        channel: u16,
        tag: &ShortStr,
        delivery_tag: u64,
        redelivered: bool,
        msg: &LocalMessage,
        size: usize,
    ) -> bool {
        let Some(tag) = self.tag_index(tag) else {
            return false;
        };
        self.lend_spares();
        self.extend_runs(channel, tag, delivery_tag, redelivered, 1);
        self.msgs.push_back(msg.clone());
        self.bytes += size;
        true
    }

    /// Queues deliveries of `msgs` to one consumer, not redelivered, with consecutive
    /// delivery tags from `first_delivery_tag`, `size` encoded bytes in all (each
    /// message small, [`small_tail`]): what as many [`Deferred::push`] calls would
    /// queue, with the tag found and the run extended once; `msgs` is left empty. False
    /// (nothing queued, `msgs` untouched) as [`Deferred::push`].
    pub fn push_run(
        &mut self,
        channel: u16,
        tag: &ShortStr,
        first_delivery_tag: u64,
        msgs: &mut Vec<LocalMessage>,
        size: usize,
    ) -> bool {
        if msgs.is_empty() {
            return true;
        }
        let Ok(count) = u32::try_from(msgs.len()) else {
            return false;
        };
        let Some(tag) = self.tag_index(tag) else {
            return false;
        };
        self.lend_spares();
        self.extend_runs(channel, tag, first_delivery_tag, false, count);
        self.msgs.extend(msgs.drain(..));
        self.bytes += size;
        true
    }

    /// The index of consumer tag `tag` in `tags`, added if new; `None` when
    /// [`TAGS_MAX`] are named already. The last tag first: a run of deliveries names one
    /// consumer, and it is the same shared bytes each time (compared by address before
    /// by content).
    fn tag_index(&mut self, tag: &ShortStr) -> Option<u8> {
        let index = match self.tags.iter().rposition(|t| same_bytes(t, tag)) {
            Some(i) => i,
            None if self.tags.len() < TAGS_MAX => {
                self.tags.push(tag.clone());
                self.tags.len() - 1
            }
            None => return None,
        };
        Some(index as u8)
    }

    /// Adds `count` deliveries from `delivery_tag` on to the last run when they continue
    /// it, else as a run of their own.
    fn extend_runs(
        &mut self,
        channel: u16,
        tag: u8,
        delivery_tag: u64,
        redelivered: bool,
        count: u32,
    ) {
        match self.runs.back_mut() {
            Some(run)
                if run.channel == channel
                    && run.tag == tag
                    && run.redelivered == redelivered
                    && run.count.checked_add(count).is_some()
                    && run.first_delivery_tag.wrapping_add(u64::from(run.count))
                        == delivery_tag =>
            {
                run.count += count;
            }
            _ => self.runs.push_back(Run {
                first_delivery_tag: delivery_tag,
                count,
                channel,
                tag,
                redelivered,
            }),
        }
    }

    /// Encodes the first deliveries into `into`, until `budget` bytes are reached (at
    /// least one, if any wait); returns how many. They stay queued: once they are
    /// written or copied elsewhere, [`Deferred::pop_front`] drops them.
    pub fn encode_front(&self, into: &mut BytesMut, budget: usize) -> usize {
        let start = into.len();
        let mut msgs = self.msgs.iter();
        let mut n = 0;
        for run in &self.runs {
            let tag = self
                .tags
                .get(run.tag as usize)
                .map_or(&[][..], |t| t.as_bytes());
            let mut head = SmallHead::new(run.channel, tag, run.redelivered);
            for (k, msg) in (0..u64::from(run.count)).zip(msgs.by_ref()) {
                if n > 0 && into.len() - start >= budget {
                    return n;
                }
                // Every message was queued with its tail (`small_tail`).
                if let Some(tail) = msg.wire_tail() {
                    head.write(into, run.first_delivery_tag.wrapping_add(k), tail);
                }
                n += 1;
            }
        }
        n
    }

    /// Drops the first `count` deliveries, encoded in `bytes` bytes.
    pub fn pop_front(&mut self, count: usize, bytes: usize) {
        let count = count.min(self.msgs.len());
        self.msgs.drain(..count);
        if self.msgs.is_empty() {
            // All of them (the common case: the socket took everything).
            self.runs.clear();
            self.return_spares();
            self.bytes = 0;
            // A subscriber's one tag is kept for its next deliveries (no reference
            // count round trip per write); several are let go.
            if self.tags.len() > 1 {
                self.tags.clear();
            }
            return;
        }
        let mut left = count as u64;
        while left > 0 {
            let Some(run) = self.runs.front_mut() else {
                break;
            };
            if u64::from(run.count) <= left {
                left -= u64::from(run.count);
                self.runs.pop_front();
            } else {
                run.first_delivery_tag = run.first_delivery_tag.wrapping_add(left);
                run.count -= left as u32;
                left = 0;
            }
        }
        self.bytes = self.bytes.saturating_sub(bytes);
    }

    /// Drops everything (the connection is gone).
    pub fn clear(&mut self) {
        self.msgs.clear();
        self.runs.clear();
        self.return_spares();
        self.tags.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::message::BodyChunks;

    fn small_message() -> LocalMessage {
        let mut chunks = BodyChunks::new();
        chunks.push(bytes::Bytes::from_static(b"payload"));
        LocalMessage::new(Message::new(
            "amq.topic".into(),
            "a.b".into(),
            bytes::Bytes::from_static(&[0, 0]),
            chunks,
            7,
        ))
    }

    /// A connection written empty holds no lists; the next one to defer borrows them.
    #[test]
    fn written_lists_go_to_the_next_connection() {
        let msg = small_message();
        let tag: ShortStr = "ctag".into();
        let mut first = Deferred::default();
        for delivery_tag in 1..=5 {
            assert!(first.push(1, &tag, delivery_tag, false, &msg, 10));
        }
        let (msgs_room, runs_room) = (first.msgs.capacity(), first.runs.capacity());
        assert!(msgs_room >= 5 && runs_room >= 1);
        let mut scratch = BytesMut::new();
        assert_eq!(first.encode_front(&mut scratch, usize::MAX), 5);
        first.pop_front(5, first.bytes());
        assert_eq!((first.msgs.capacity(), first.runs.capacity()), (0, 0));
        let mut second = Deferred::default();
        assert!(second.push(1, &tag, 1, false, &msg, 10));
        assert_eq!(
            (second.msgs.capacity(), second.runs.capacity()),
            (msgs_room, runs_room),
            "the spares were lent"
        );
        // Partly written: the lists stay.
        assert!(second.push(1, &tag, 2, false, &msg, 10));
        second.pop_front(1, 10);
        assert_eq!(second.msgs.capacity(), msgs_room);
        second.clear();
        assert_eq!(second.msgs.capacity(), 0);
    }
}

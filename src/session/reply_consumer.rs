//! Owns: a channel's direct reply-to consumer (`basic.consume` on
//! `amq.rabbitmq.reply-to`) — its consumer tag, the reply address its requests'
//! `reply_to` is rewritten to, and the replies it holds while the client has paused the
//! channel (`channel.flow active=false`): in arrival order, with the bytes the memory
//! ledger charges them, handed back in that order when the channel resumes. Dropping
//! the consumer (cancel, channel or connection closed) drops what it holds.
//!
//! Does not: decide whether a reply is held or dropped (the shard's handler weighs what
//! the connection holds against its cap), write deliveries or count delivery tags.

use std::collections::VecDeque;

use crate::model::message::Message;
use crate::protocol::ShortStr;

/// A channel's direct reply-to consumer.
#[derive(Debug)]
pub struct ReplyConsumer {
    pub tag: ShortStr,
    /// `amq.rabbitmq.reply-to.<token>` (`session::reply_to::address`).
    pub address: ShortStr,
    /// Replies that arrived while the channel was paused, oldest first.
    held: VecDeque<Message>,
    /// The memory of `held` (`Message::memory_size` summed).
    held_bytes: u64,
}

impl ReplyConsumer {
    pub fn new(tag: ShortStr, address: ShortStr) -> ReplyConsumer {
        ReplyConsumer {
            tag,
            address,
            held: VecDeque::new(),
            held_bytes: 0,
        }
    }

    /// Keeps `msg` until [`ReplyConsumer::take_held`].
    pub fn hold(&mut self, msg: Message) {
        self.held_bytes += msg.memory_size();
        self.held.push_back(msg);
    }

    /// Bytes of the replies held.
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes
    }

    /// The replies held, oldest first; none are held afterwards.
    pub fn take_held(&mut self) -> VecDeque<Message> {
        self.held_bytes = 0;
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn msg(body: &'static [u8]) -> Message {
        Message::new(
            "".into(),
            "amq.rabbitmq.reply-to.x".into(),
            Bytes::new(),
            smallvec::smallvec![Bytes::from_static(body)],
            body.len() as u64,
        )
    }

    #[test]
    fn holds_in_order_and_gives_back_everything_once() {
        let mut r = ReplyConsumer::new(
            ShortStr::from_static("tag"),
            ShortStr::from_static("amq.rabbitmq.reply-to.x"),
        );
        assert_eq!(r.held_bytes(), 0);
        let (a, b) = (msg(b"first"), msg(b"second, longer"));
        let expected = a.memory_size() + b.memory_size();
        r.hold(a);
        r.hold(b);
        assert_eq!(r.held_bytes(), expected);
        let bodies: Vec<Vec<u8>> = r.take_held().iter().map(|m| m.body().concat()).collect();
        assert_eq!(bodies, vec![b"first".to_vec(), b"second, longer".to_vec()]);
        assert_eq!(r.held_bytes(), 0);
        assert!(r.take_held().is_empty());
    }
}

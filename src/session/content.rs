//! Owns: a channel's publish assembly — the state machine `basic.publish` → one content
//! header → body frames up to the size the header announced — with its protocol errors
//! (a frame out of that order or a body longer than announced is 505 UNEXPECTED_FRAME, an
//! undecodable header 502 on `basic.publish`, a body over `max_message_size` a 406
//! channel error) and the memory ledger's count of a body still arriving.
//!
//! Does not: decode methods, route or enqueue (the handler does, with what
//! [`Content::feed`] returns); it sees frames, never sockets, so it is tested without one.

use bytes::Bytes;

use crate::model::ledger::PartialBytes;
use crate::model::message::ReceivedBody;
use crate::protocol::frame::{Frame, FrameKind};
use crate::protocol::method::BasicPublish;
use crate::protocol::ContentHeader;
use crate::session::error::{ChannelError, ConnectionError, HardError, MethodId};

/// Where a channel's publish assembly is.
#[derive(Debug, Default)]
pub enum Content {
    #[default]
    Idle,
    AwaitHeader(BasicPublish),
    AwaitBody {
        publish: BasicPublish,
        header: ContentHeader,
        body: ReceivedBody,
        received: u64,
        /// The body bytes received so far, counted in the memory ledger until the
        /// message is complete (or abandoned).
        ledger: PartialBytes,
    },
}

/// What a frame did to the assembly.
#[derive(Debug)]
pub enum ContentStep {
    /// A method frame with no publish under way: the caller decodes and handles it.
    Method(Bytes),
    /// The publish waits for more frames.
    More,
    /// A publish is complete.
    Complete {
        publish: BasicPublish,
        header: ContentHeader,
        body: ReceivedBody,
    },
    /// The header announced a body over the limit: the channel is closed with this
    /// error (on `basic.publish`); the publish is dropped.
    Refused(ChannelError),
}

/// `basic.publish`, the method a content error is reported on.
const PUBLISH: MethodId = MethodId::new(
    crate::protocol::method::BasicPublish::CLASS_ID,
    crate::protocol::method::BasicPublish::METHOD_ID,
);

impl Content {
    /// A `basic.publish` was received: its content header comes next.
    pub fn start(&mut self, publish: BasicPublish) {
        *self = Content::AwaitHeader(publish);
    }

    /// Whether no publish is under way.
    pub fn is_idle(&self) -> bool {
        matches!(self, Content::Idle)
    }

    /// Takes one frame of channel `channel`. `max_size` is the largest body accepted.
    pub fn feed(
        &mut self,
        frame: Frame,
        max_size: u64,
        channel: u16,
    ) -> Result<ContentStep, HardError> {
        let unexpected =
            |what: String| Err(ConnectionError::UnexpectedFrame(what).on(MethodId::NONE));
        match (frame.kind, std::mem::take(self)) {
            (FrameKind::Method, Content::Idle) => Ok(ContentStep::Method(frame.payload)),
            (FrameKind::Header, Content::AwaitHeader(publish)) => {
                let header = ContentHeader::decode(frame.payload)
                    .map_err(|e| ConnectionError::Syntax(e.to_string()).on(PUBLISH))?;
                if header.body_size > max_size {
                    return Ok(ContentStep::Refused(ChannelError::MessageTooLarge {
                        size: header.body_size,
                        max: max_size,
                    }));
                }
                if header.body_size == 0 {
                    return Ok(ContentStep::Complete {
                        publish,
                        header,
                        body: ReceivedBody::default(),
                    });
                }
                *self = Content::AwaitBody {
                    publish,
                    header,
                    body: ReceivedBody::default(),
                    received: 0,
                    ledger: PartialBytes::default(),
                };
                Ok(ContentStep::More)
            }
            (
                FrameKind::Body,
                Content::AwaitBody {
                    publish,
                    header,
                    mut body,
                    received,
                    mut ledger,
                },
            ) => {
                let received = received + frame.payload.len() as u64;
                if received > header.body_size {
                    return unexpected(format!(
                        "body of {received} bytes exceeds the {} announced in the content header",
                        header.body_size
                    ));
                }
                if !frame.payload.is_empty() {
                    ledger.add(frame.payload.len() as u64 + u64::from(frame.pinned));
                    body.pinned += u64::from(frame.pinned);
                    body.chunks.push(frame.payload);
                }
                if received == header.body_size {
                    drop(ledger);
                    return Ok(ContentStep::Complete {
                        publish,
                        header,
                        body,
                    });
                }
                *self = Content::AwaitBody {
                    publish,
                    header,
                    body,
                    received,
                    ledger,
                };
                Ok(ContentStep::More)
            }
            (kind, Content::Idle) => unexpected(format!(
                "{kind:?} frame on channel {channel} without a preceding basic.publish"
            )),
            (kind, Content::AwaitHeader(_)) => unexpected(format!(
                "expected a content header on channel {channel}, got a {kind:?} frame"
            )),
            (kind, Content::AwaitBody { .. }) => unexpected(format!(
                "expected a content body on channel {channel}, got a {kind:?} frame"
            )),
        }
    }
}

/// A channel's publish assembly, allocated at its first `basic.publish`: a subscriber's
/// channel never publishes, and the assembly is a third of a channel (issue 23). Absent,
/// it is [`Content::Idle`].
#[derive(Debug, Default)]
pub struct ContentSlot(Option<Box<Content>>);

impl ContentSlot {
    /// A `basic.publish` was received: its content header comes next.
    pub fn start(&mut self, publish: BasicPublish) {
        match &mut self.0 {
            Some(content) => content.start(publish),
            None => self.0 = Some(Box::new(Content::AwaitHeader(publish))),
        }
    }

    /// Whether no publish is under way.
    pub fn is_idle(&self) -> bool {
        self.0.as_deref().is_none_or(Content::is_idle)
    }

    /// Takes one frame (see [`Content::feed`]).
    pub fn feed(
        &mut self,
        frame: Frame,
        max_size: u64,
        channel: u16,
    ) -> Result<ContentStep, HardError> {
        match &mut self.0 {
            Some(content) => content.feed(frame, max_size, channel),
            // Idle: a method frame is handed back, anything else refused; nothing to keep.
            None => Content::Idle.feed(frame, max_size, channel),
        }
    }

    /// Abandons a publish under way (the channel closes); keeps the allocation.
    pub fn reset(&mut self) {
        if let Some(content) = &mut self.0 {
            **content = Content::Idle;
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};

    use super::*;
    use crate::protocol::ShortStr;

    fn frame(kind: FrameKind, payload: Bytes) -> Frame {
        Frame {
            kind,
            channel: 1,
            payload,
            pinned: 0,
        }
    }

    fn header(body_size: u64) -> Bytes {
        let mut b = BytesMut::new();
        b.put_u16(60);
        b.put_u16(0);
        b.put_u64(body_size);
        b.put_u16(0); // no properties
        b.freeze()
    }

    fn publish() -> BasicPublish {
        BasicPublish {
            ticket: 0,
            exchange: ShortStr::from("ex"),
            routing_key: ShortStr::from("rk"),
            mandatory: false,
            immediate: false,
        }
    }

    fn reply_code(e: &HardError) -> u16 {
        e.error.code().code()
    }

    #[test]
    fn a_publish_is_header_then_body_frames_up_to_the_announced_size() {
        let mut c = Content::default();
        c.start(publish());
        let step = c.feed(frame(FrameKind::Header, header(5)), 1 << 20, 1);
        assert!(matches!(step, Ok(ContentStep::More)));
        let step = c.feed(
            frame(FrameKind::Body, Bytes::from_static(b"hel")),
            1 << 20,
            1,
        );
        assert!(matches!(step, Ok(ContentStep::More)));
        match c.feed(
            frame(FrameKind::Body, Bytes::from_static(b"lo")),
            1 << 20,
            1,
        ) {
            Ok(ContentStep::Complete { publish, body, .. }) => {
                assert_eq!(publish.routing_key, ShortStr::from("rk"));
                assert_eq!(body.chunks.concat(), b"hello");
            }
            other => panic!("expected a complete publish, got {other:?}"),
        }
        assert!(c.is_idle());
    }

    #[test]
    fn an_empty_body_completes_with_the_header() {
        let mut c = Content::default();
        c.start(publish());
        let step = c.feed(frame(FrameKind::Header, header(0)), 1 << 20, 1);
        assert!(matches!(step, Ok(ContentStep::Complete { .. })));
        assert!(c.is_idle());
    }

    #[test]
    fn frames_out_of_order_are_unexpected_frames() {
        let mut c = Content::default();
        let err = c
            .feed(frame(FrameKind::Body, Bytes::from_static(b"x")), 1 << 20, 3)
            .expect_err("a body without a publish");
        assert_eq!(reply_code(&err), 505);
        c.start(publish());
        let err = c
            .feed(frame(FrameKind::Method, Bytes::new()), 1 << 20, 3)
            .expect_err("a method where a header belongs");
        assert_eq!(reply_code(&err), 505);
        assert!(err
            .error
            .reply_text()
            .contains("expected a content header on channel 3"));
    }

    #[test]
    fn a_slot_allocates_at_the_first_publish_and_a_reset_abandons_it() {
        let mut slot = ContentSlot::default();
        // A channel that never published: methods come back, content frames are refused.
        let step = slot.feed(
            frame(FrameKind::Method, Bytes::from_static(b"m")),
            1 << 20,
            2,
        );
        assert!(matches!(step, Ok(ContentStep::Method(p)) if p == Bytes::from_static(b"m")));
        let err = slot
            .feed(frame(FrameKind::Header, header(1)), 1 << 20, 2)
            .expect_err("a header without a publish");
        assert_eq!(reply_code(&err), 505);
        assert!(err
            .error
            .reply_text()
            .contains("without a preceding basic.publish"));
        assert!(slot.0.is_none(), "still nothing allocated");
        slot.start(publish());
        assert!(!slot.is_idle());
        let step = slot.feed(frame(FrameKind::Header, header(3)), 1 << 20, 2);
        assert!(matches!(step, Ok(ContentStep::More)));
        // The channel closes mid-publish: the body received so far is dropped.
        slot.reset();
        assert!(slot.is_idle());
        let err = slot
            .feed(
                frame(FrameKind::Body, Bytes::from_static(b"abc")),
                1 << 20,
                2,
            )
            .expect_err("a body after the reset");
        assert_eq!(reply_code(&err), 505);
        slot.start(publish());
        let step = slot.feed(frame(FrameKind::Header, header(0)), 1 << 20, 2);
        assert!(matches!(step, Ok(ContentStep::Complete { .. })));
        assert!(slot.is_idle());
    }

    #[test]
    fn a_body_longer_than_announced_is_refused() {
        let mut c = Content::default();
        c.start(publish());
        let _ = c.feed(frame(FrameKind::Header, header(2)), 1 << 20, 1);
        let err = c
            .feed(
                frame(FrameKind::Body, Bytes::from_static(b"abc")),
                1 << 20,
                1,
            )
            .expect_err("3 bytes where 2 were announced");
        assert_eq!(reply_code(&err), 505);
    }

    #[test]
    fn a_body_over_the_limit_closes_the_channel_not_the_connection() {
        let mut c = Content::default();
        c.start(publish());
        let step = c.feed(frame(FrameKind::Header, header(100)), 10, 1);
        assert!(matches!(
            step,
            Ok(ContentStep::Refused(ChannelError::MessageTooLarge {
                size: 100,
                max: 10
            }))
        ));
        assert!(c.is_idle());
    }

    #[test]
    fn a_method_with_no_publish_under_way_goes_to_the_caller() {
        let mut c = Content::default();
        let step = c.feed(
            frame(FrameKind::Method, Bytes::from_static(b"m")),
            1 << 20,
            1,
        );
        assert!(matches!(step, Ok(ContentStep::Method(p)) if &p[..] == b"m"));
    }
}

//! Owns: RabbitMQ's queue length limits as a policy — `x-max-length` (ready messages),
//! `x-max-length-bytes` (bytes of ready message bodies) and `x-overflow` (`drop-head`,
//! the default: the queue is a ring; `reject-publish`: new messages are refused, nacked
//! under confirms; `reject-publish-dlx`: the same, and the refused messages are
//! dead-lettered) — and what a queue at its limit does with one more message.
//!
//! Does not: hold messages or send nacks (the queue discards, the shard confirms).

use crate::protocol::FieldTable;

use super::args::{self, ArgError};

/// Declare-argument names.
pub mod arg {
    pub const MAX_LENGTH: &str = "x-max-length";
    pub const MAX_LENGTH_BYTES: &str = "x-max-length-bytes";
    pub const OVERFLOW: &str = "x-overflow";
}

/// What a full queue does with a new message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// Discard the oldest ready messages to make room.
    DropHead,
    /// Refuse the new message.
    RejectPublish,
    /// Refuse the new message and dead-letter it (reason `maxlen`; the shard does, when
    /// the queue has a dead-letter exchange).
    RejectPublishDlx,
}

impl Overflow {
    pub const CHOICES: [(&'static str, Overflow); 3] = [
        ("drop-head", Overflow::DropHead),
        ("reject-publish", Overflow::RejectPublish),
        ("reject-publish-dlx", Overflow::RejectPublishDlx),
    ];

    pub fn name(self) -> &'static str {
        match self {
            Overflow::DropHead => "drop-head",
            Overflow::RejectPublish => "reject-publish",
            Overflow::RejectPublishDlx => "reject-publish-dlx",
        }
    }

    /// Whether a full queue refuses a new message (rather than dropping its oldest).
    pub fn refuses(self) -> bool {
        match self {
            Overflow::DropHead => false,
            Overflow::RejectPublish | Overflow::RejectPublishDlx => true,
        }
    }
}

/// A queue's length limits. Only ready messages count, as in RabbitMQ: deliveries
/// awaiting acknowledgement do not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxLength {
    pub count: Option<u64>,
    pub bytes: Option<u64>,
    pub overflow: Overflow,
}

impl MaxLength {
    /// Reads the arguments; `None` when neither limit is set (`x-overflow` alone is
    /// accepted and changes nothing, as in RabbitMQ).
    pub fn from_arguments(a: &FieldTable) -> Result<Option<MaxLength>, ArgError> {
        let count = args::non_negative(a, arg::MAX_LENGTH)?;
        let bytes = args::non_negative(a, arg::MAX_LENGTH_BYTES)?;
        let overflow = args::choice(a, arg::OVERFLOW, &Overflow::CHOICES)?;
        if count.is_none() && bytes.is_none() {
            return Ok(None);
        }
        Ok(Some(MaxLength {
            count,
            bytes,
            overflow: overflow.unwrap_or(Overflow::DropHead),
        }))
    }

    /// Whether ready messages of this count and size exceed the limits.
    pub fn exceeded(&self, count: u64, bytes: u64) -> bool {
        self.count.is_some_and(|max| count > max) || self.bytes.is_some_and(|max| bytes > max)
    }

    /// Whether one more message of `size` bytes would exceed the limits.
    pub fn would_exceed(&self, count: u64, bytes: u64, size: u64) -> bool {
        self.exceeded(count + 1, bytes + size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{FieldValue, LongStr};

    #[test]
    fn parse_and_limits() {
        let mut t = FieldTable::new();
        assert_eq!(MaxLength::from_arguments(&t), Ok(None));
        t.insert(arg::MAX_LENGTH, FieldValue::I32(3));
        let m = MaxLength::from_arguments(&t).expect("valid").expect("set");
        assert_eq!(m.overflow, Overflow::DropHead);
        assert!(!m.would_exceed(2, 0, 10));
        assert!(m.would_exceed(3, 0, 10));
        t.insert(
            arg::OVERFLOW,
            FieldValue::LongStr(LongStr::from("reject-publish")),
        );
        t.insert(arg::MAX_LENGTH_BYTES, FieldValue::I64(100));
        let m = MaxLength::from_arguments(&t).expect("valid").expect("set");
        assert_eq!(m.overflow, Overflow::RejectPublish);
        assert!(m.would_exceed(0, 95, 10));
        t.insert(
            arg::OVERFLOW,
            FieldValue::LongStr(LongStr::from("reject-publish-dlx")),
        );
        let m = MaxLength::from_arguments(&t).expect("valid").expect("set");
        assert!(m.overflow.refuses());
        t.insert(arg::OVERFLOW, FieldValue::LongStr(LongStr::from("ring")));
        let e = MaxLength::from_arguments(&t).expect_err("unknown");
        assert_eq!(e.argument, arg::OVERFLOW);
    }
}

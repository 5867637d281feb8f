//! The AMQP 0-9-1 wire format.
//!
//! Owns: turning bytes into typed frames, methods, content headers and field
//! tables, and back: [`frame`] splits and writes frames, [`method`] holds the
//! generated method codecs, [`properties`] keeps content headers as raw
//! `Bytes` with lazy typed views, [`table`] the field tables, [`reply`] the
//! reply codes, and [`codec`] the primitive types and [`DecodeError`].
//! Does not: do I/O, read clocks, or know about shards, queues or sessions.
//! Decoding never panics on peer input and never copies strings or bodies:
//! they are `Bytes` slices of the frame that carried them.

pub mod codec;
pub mod frame;
pub mod method;
pub mod properties;
pub mod reply;
pub mod table;

pub use codec::{DecodeError, LongStr, ShortStr};
pub use method::Method;
pub use properties::{BasicProperties, ContentHeader};
pub use reply::ReplyCode;
pub use table::{FieldTable, FieldValue};

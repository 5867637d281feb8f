//! sluice
//!
//! An AMQP 0-9-1 message broker for heavy topic fan-out, shard-per-core.
//!
//! # Layout
//!
//! - [`protocol`]: the wire format. Bytes in, typed frames, methods, content
//!   headers and field tables out (and back); no I/O, no clocks, no shard or
//!   queue knowledge. Method codecs are generated from the AMQP JSON spec into
//!   `protocol/method/generated.rs`, kept fresh by `tests/codegen.rs`.

pub mod protocol;

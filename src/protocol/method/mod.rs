//! AMQP 0-9-1 methods.
//!
//! Owns: the method structs, the [`Method`] enum and their codecs, all
//! generated from `amqp-0-9-1.json` into `generated.rs` (checked in, kept
//! fresh by `tests/codegen.rs`), plus hand-written helpers that build on them.
//! Does not: allow hand edits to `generated.rs`, or interpret methods (that
//! is `session`).

#[rustfmt::skip]
mod generated;

pub use generated::*;

#[cfg(test)]
mod tests;

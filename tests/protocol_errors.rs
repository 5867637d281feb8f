//! Hard errors over a raw socket: every malformed or illegal input closes the offending
//! connection with the exact reply code (and text), and the bystanders — connections opened
//! before the bad one, each consuming from its own queue — keep receiving messages.
//!
//! Sections (one file each under `tests/protocol_errors/`): `frames` (malformed frames and
//! content), `channels` (methods on the wrong channel), `handshake` (bad vhost, password,
//! header, garbage, vanishing clients), `offenders` (repeated and unclassified offences,
//! requeue, churn), `pipelining` (back-to-back, trickled and batched input); `support`
//! holds the offender/bystander harness they share.

#[macro_use]
mod common;

#[path = "protocol_errors/support.rs"]
mod support;

#[path = "protocol_errors/channels.rs"]
mod channels;
#[path = "protocol_errors/frames.rs"]
mod frames;
#[path = "protocol_errors/handshake.rs"]
mod handshake;
#[path = "protocol_errors/offenders.rs"]
mod offenders;
#[path = "protocol_errors/pipelining.rs"]
mod pipelining;

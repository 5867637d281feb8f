//! Exchanges, queues and bindings through amqprs: declare/redeclare/delete rules and the
//! exact soft-error replies (channel.close code and text).
//!
//! Sections (one file each under `tests/amqp_model/`): `exchanges`, `queues` (declare,
//! exclusivity, delete, purge), `bindings` (bind, unbind, the default exchange),
//! `control_plane` (virtual-host isolation, concurrent changes); `support` holds the
//! soft-error and queue-existence checks they share.

#[macro_use]
mod common;

#[path = "amqp_model/support.rs"]
mod support;

#[path = "amqp_model/bindings.rs"]
mod bindings;
#[path = "amqp_model/control_plane.rs"]
mod control_plane;
#[path = "amqp_model/exchanges.rs"]
mod exchanges;
#[path = "amqp_model/queues.rs"]
mod queues;

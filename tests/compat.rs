//! RabbitMQ compatibility, bugs 1-6 of issue 12: what real client suites (amqplib, pika,
//! py-amqp/kombu, aio-pika) expect and RabbitMQ does, end to end against a child sluice
//! with one and two shards, through amqprs and raw frames.
//!
//! Sections (one file each under `tests/compat/`):
//!
//! - `passive_declare`: a passive exchange.declare only checks existence — any type
//!   (amqplib's `checkExchange` sends an empty one), flags and arguments are ignored;
//!   a missing exchange is 404 as a channel close (bug 1);
//! - `exchange_type`: an unknown exchange type is 406 PRECONDITION_FAILED
//!   `unknown exchange type '…'` as a channel close; the connection's other channels go
//!   on (bug 2);
//! - `delete_order`: queue.delete of a queue consumed on the same channel answers
//!   delete-ok before that channel's basic.cancel (raw frame order); consumers on other
//!   channels and connections get basic.cancel too (bug 3);
//! - `unbind`: queue.unbind is idempotent: unbind-ok when the queue, the exchange or both
//!   are gone (bug 4);
//! - `close_linger`: after close-ok to the client's connection.close the broker leaves the
//!   socket for the client to close, and closes it itself after one second or on
//!   shutdown; after close-ok to the broker's own close it closes at once (bug 5);
//! - `channel_flow`: a client's channel.flow(active=false) pauses deliveries to that
//!   channel and active=true resumes them — the spec's behaviour, kept although RabbitMQ
//!   refuses active=false with 540 (bug 6).

#[macro_use]
mod common;

#[path = "compat/support.rs"]
mod support;

#[path = "compat/channel_flow.rs"]
mod channel_flow;
#[path = "compat/close_linger.rs"]
mod close_linger;
#[path = "compat/delete_order.rs"]
mod delete_order;
#[path = "compat/exchange_type.rs"]
mod exchange_type;
#[path = "compat/passive_declare.rs"]
mod passive_declare;
#[path = "compat/unbind.rs"]
mod unbind;

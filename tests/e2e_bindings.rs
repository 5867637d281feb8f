//! Exchange-to-exchange bindings (issue 12, item 7): RabbitMQ's `exchange.bind` /
//! `exchange.unbind` extension, advertised as the `exchange_exchange_bindings`
//! capability, end to end against a child sluice with one and two shards, through amqprs
//! and raw frames. Every test here failed before the feature: `exchange.bind` was
//! answered with 540 NOT_IMPLEMENTED and a connection close.
//!
//! Sections (one file each under `tests/e2e_bindings/`):
//!
//! - `routing`: chains across exchange types (direct → topic → fanout, headers in a
//!   chain) route with the same key and headers at each step; loops end and diamonds
//!   deliver once; unbind stops routing; a mandatory publish that a chain routes nowhere
//!   is returned; the binding, the publisher and the queues on different shards;
//! - `lifecycle`: an auto-delete exchange goes with its last binding as source (and the
//!   exchanges whose only binding led to it); exchange.delete removes the bindings from
//!   and to the exchange; `if-unused` counts bindings as source only;
//! - `errors`: raw frames: 404 and 403 with RabbitMQ's texts as channel closes, unbind
//!   of a missing binding or exchange is ok, nowait, the capability in connection.start;
//! - `many` (issue 18, item 13): one queue bound, unbound and rebound with hundreds of
//!   keys on a direct and a topic exchange routes exactly; deleting it takes them all.

#[macro_use]
mod common;

#[path = "e2e_bindings/support.rs"]
mod support;

#[path = "e2e_bindings/errors.rs"]
mod errors;
#[path = "e2e_bindings/lifecycle.rs"]
mod lifecycle;
#[path = "e2e_bindings/many.rs"]
mod many;
#[path = "e2e_bindings/routing.rs"]
mod routing;

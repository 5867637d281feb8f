//! sluice — an AMQP 0-9-1 message broker for heavy topic fan-out, one io_uring event
//! loop per core.
//!
//! # Layout
//!
//! Dependencies point one way: `protocol` ← `model`, `queue`, `policy`, `timer` ←
//! `session` ← `shard` ← `net` ← `server`. `client` depends only on `protocol`.
//!
//! - [`protocol`]: the wire format — frames, methods (generated from the AMQP JSON spec
//!   into `protocol/method/generated.rs`), content headers, field tables, reply codes.
//! - [`model`]: messages (shared, zero-copy) and their dead-letter headers, exchanges and their match rules, the topic
//!   trie, and the per-shard routing directory.
//! - [`queue`]: a queue's entries (one FIFO, or one per priority level), accounting
//!   (everything a subscription holds), consumers and credit (consumer priorities, the
//!   single active consumer), and the policy state it carries.
//! - [`policy`]: the overload policies as pure calculations — slow-consumer thresholds
//!   and prediction, queue capacity hysteresis, length limits, the memory watermark,
//!   consumption-rate estimation.
//! - [`timer`]: the per-shard coarse clock and hashed timing wheel.
//! - [`session`]: connection and channel state, consumers, typed protocol errors.
//! - [`shard`]: one event loop's world — connections, home queues, directory replica,
//!   timer wheel — plus the cross-shard inbox, placement, the control plane, publishes
//!   arriving from other shards (`arrivals`), re-publishing dead-lettered messages
//!   (`dead_letter`; their headers are built in `model::dead_letter`), giving memory back
//!   (`reclaim`), and
//!   performing the policies (`policy`, `flow`, `memory`).
//! - [`net`]: per-connection reader and writer tasks over tokio-uring sockets, and the
//!   read buffer that sizes itself to the traffic (`read_buf`).
//! - [`server`]: starts N shards and the management listener, coordinates shutdown.
//! - [`http`]: the management listener on its own thread (hyper): Prometheus
//!   `/metrics`, the RabbitMQ-style management API, basic auth; every figure is asked of
//!   the shards through their inboxes (`shard::observe`).
//! - [`config`]: the configuration (defaults, TOML file, CLI), immutable but for the
//!   sections a SIGHUP reloads (`config::reload`).
//! - [`auth`]: stored passwords and per-vhost permissions.
//! - [`cli`]: the command line above `server`: the broker's flags beside the
//!   `hash-password` and `import-definitions` tools.
//! - [`ops`]: operational events with Qpid-style codes.
//! - [`client`]: sluice's own async AMQP client (used by the tests and `sluice-bench`).
//!
//! # Data path
//!
//! socket → `net::reader` (frames split from the read buffer, zero copy) →
//! `shard::handler` (methods, publish assembly) → `model::routing` (the local directory
//! replica) → home queue (`shard::queues`, directly or through the destination shard's
//! inbox) → dispatch against consumer credit → `session::outbound` (deliveries encoded, bodies
//! shared) → `net::writer` (`writev`) → socket.

#![deny(clippy::await_holding_refcell_ref)]

pub mod auth;
pub mod cli;
pub mod client;
pub mod config;
pub mod http;
pub mod limits;
pub mod model;
pub mod net;
pub mod ops;
pub mod policy;
pub mod protocol;
pub mod queue;
pub mod server;
pub mod session;
pub mod shard;
pub mod store;
pub mod timer;

//! sluice — an AMQP 0-9-1 message broker for heavy topic fan-out, one io_uring event
//! loop per core.
//!
//! # Layout
//!
//! Dependencies point one way, from the leaves up: `protocol`, `timer`, `ops` ←
//! `model`, `policy`, `auth` ← `queue`, `store`, `session` ← `config` ← `limits` ←
//! `shard` ← `admin`, `net` ← `http` ← `server`; `cli` (beside `main`) uses `config`, `store` and
//! `auth`; `client` depends only on `protocol`. ARCHITECTURE.md's "Layers" table is the
//! exact list, and `tests/architecture.rs` holds the code to it.
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
//! - [`stream`]: a stream (`x-queue-type = stream`): an append-only log read by any
//!   number of readers, each at its own offset — its index of segments, tail cache,
//!   readers and their credit, offset tracking, retention and lag (pure: the shard
//!   does the I/O).
//! - [`timer`]: the per-shard coarse clock and hashed timing wheel.
//! - [`session`]: connection and channel state, consumers, typed protocol errors.
//! - [`shard`]: one event loop's world, in two rooms — the connection side
//!   (`shard::conns`: connections, channels, the handler, deliveries into outbound
//!   buffers, publisher flow) and the queue side (`shard::home`: home queues, dispatch,
//!   policies, arrivals from other shards, dead letters, paging, persistence) — and what
//!   both use (directory replica, timer wheel, `outbox`); the turn that socket tasks drive
//!   (`turn`), the inbox loop (`mailbox`), the timers (`housekeeping`), placement, the
//!   control plane, the memory board and giving memory back (`reclaim`).
//! - [`net`]: per-connection reader and writer tasks over tokio-uring sockets, and the
//!   read buffer that sizes itself to the traffic (`read_buf`); they hand what happens
//!   on the socket to `shard::turn`.
//! - [`server`]: starts N shards (each thread composed in `server::shard_thread`) and the
//!   management listener, coordinates shutdown and reload.
//! - [`http`]: the management listener on its own thread (hyper): Prometheus
//!   `/metrics`, the RabbitMQ-style management API, basic auth, and the web console's
//!   embedded static files (`/`, built only on that API); every figure is asked of the
//!   shards through their inboxes (`shard::observe`).
//! - [`config`]: the configuration (defaults, TOML file, CLI), immutable but for the
//!   sections a SIGHUP reloads (`config::reload`) and the users and permissions changed
//!   at run time, put over the file's (`config::access`).
//! - [`admin`]: the owner of the configuration in force: SIGHUP reloads and the
//!   management API's changes of users and permissions, persisted and sent to every
//!   shard one at a time on its own thread.
//! - [`auth`]: stored passwords and per-vhost permissions.
//! - [`definitions`]: RabbitMQ's definitions format read section by section, for
//!   `import-definitions` and the management API's import alike.
//! - [`cli`]: the command line above `server`: the broker's flags beside the
//!   `hash-password` and `import-definitions` tools.
//! - [`ops`]: operational events with Qpid-style codes.
//! - [`client`]: sluice's own async AMQP client (used by the tests and `sluice-bench`).
//!
//! # Data path
//!
//! socket → `net::reader` (frames split from the read buffer, zero copy) →
//! `shard::turn` → `shard::conns::handler` (methods; publish assembly in
//! `session::content`) → `model::routing` (the local directory
//! replica) → home queue (`shard::home::queues`, directly or through the destination shard's
//! inbox) → dispatch against consumer credit → `session::outbound` (deliveries encoded, bodies
//! shared) → `net::writer` (`writev`) → socket.

#![deny(clippy::await_holding_refcell_ref)]

pub mod admin;
pub mod auth;
pub mod cli;
pub mod client;
pub mod config;
pub mod definitions;
pub mod federation;
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
pub mod stream;
pub mod timer;

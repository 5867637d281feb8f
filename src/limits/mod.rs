//! Owns: enforcing the admission limits of `[limits]` and `[vhost."V"]` at connection
//! time — the broker-wide counts shared by every shard ([`connections::ConnectionCounts`]:
//! connections per node, source address, vhost and user, compare-and-increment so a
//! limit of N never admits N+1), each shard's own part ([`ShardLimits`]: unauthenticated
//! sockets, the connections it admitted, login throttling per (source address, user),
//! under the broker-wide ceiling on failed logins answered ([`ceiling`], an atomic)) — and
//! the rate limit of every operational line that can repeat ([`report`]).
//!
//! Does not: parse configuration (`config::limits`), write frames or close sockets (the
//! shard's handler and `net` do, on its answer), or check queue, consumer and binding
//! limits (the handler and the control plane do, with `session::limit::LimitRefusal`).

pub mod ceiling;
pub mod connections;
pub mod login;
mod named;
pub mod objects;
pub mod report;
mod shard;

pub use connections::{Admission, ConnectionCounts};
pub use login::Gate;
pub use shard::ShardLimits;
pub use shard::{DelayPermit, LoginAnswer};

//! Owns: who may do what — stored passwords (plain or RabbitMQ's salted SHA-2 hashes),
//! and per-vhost permissions (RabbitMQ's configure/write/read patterns).
//!
//! Does not: parse the `[auth]` section of the configuration file (`config::auth` does,
//! into these types), run the `hash-password` / `import-definitions` commands
//! (`crate::cli`), speak AMQP or close anything. The shard's handler asks [`permissions::Access`]
//! and turns a refusal into RabbitMQ's 403 / 530 (`shard::conns::handler::access`).

pub mod local_link;
pub mod password;
pub mod permissions;

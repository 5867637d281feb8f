//! Owns: who may do what — stored passwords (plain or RabbitMQ's salted SHA-2 hashes),
//! per-vhost permissions (RabbitMQ's configure/write/read patterns), and the
//! `sluice hash-password` / `sluice import-definitions` commands.
//!
//! Does not: parse the `[auth]` section of the configuration file (`config::auth` does,
//! into these types), speak AMQP or close anything. The shard's handler asks [`permissions::Access`]
//! and turns a refusal into RabbitMQ's 403 / 530 (`shard::handler::access`).

pub mod command;
pub mod import;
pub mod password;
pub mod permissions;

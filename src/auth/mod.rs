//! Owns: who may do what — stored passwords (plain or RabbitMQ's salted SHA-2 hashes),
//! per-vhost permissions (RabbitMQ's configure/write/read patterns), their `[auth]`
//! configuration entries, and the `sluice hash-password` / `sluice import-definitions`
//! commands.
//!
//! Does not: speak AMQP or close anything. The shard's handler asks [`permissions::Access`]
//! and turns a refusal into RabbitMQ's 403 / 530 (`shard::handler::access`).

pub mod command;
pub mod file;
pub mod import;
pub mod password;
pub mod permissions;

//! Dead-lettering, issue 12 item 10, end to end against a child sluice with one and two
//! shards (with two, each dead-letter target queue is homed on the other shard than its
//! source), through amqprs: `x-dead-letter-exchange` / `x-dead-letter-routing-key` for
//! messages rejected or nacked without requeue, expired (per-message and per-queue TTL),
//! dropped by `x-max-length` drop-head or refused by `reject-publish-dlx`; the exact
//! `x-death`, `x-first-death-*` and `x-last-death-*` headers; the count of a repeated
//! death; RabbitMQ's cycle detection; the RPC reply-timeout pattern.

#[macro_use]
mod common;

#[path = "dead_letter/support.rs"]
mod support;

#[path = "dead_letter/cases.rs"]
mod cases;

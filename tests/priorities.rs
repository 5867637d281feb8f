//! Priorities, issue 12 items 9 and 12, end to end against a child sluice with one and two
//! shards, through amqprs (queue and consume arguments, the `priority` basic property).
//!
//! Sections (one file each under `tests/priorities/`):
//!
//! - `messages`: priority queues (`x-max-priority`): highest priority first and FIFO
//!   within a priority, a priority above the maximum counting as the maximum, no property
//!   as 0; requeues (reject, channel close) back in their place; TTL only at the head and
//!   `x-max-length` drop-head taking the head, as RabbitMQ's `rabbit_priority_queue` does;
//! - `arguments`: RabbitMQ's 406 texts for bad `x-max-priority`,
//!   `x-single-active-consumer` and `x-priority` values, and 406 inequivalent on a
//!   redeclare that changes either queue argument;
//! - `consumers`: consumer priorities (`x-priority`) against prefetch credit, and the
//!   single active consumer: failover on cancel and on connection close with the
//!   unacknowledged messages requeued, exclusive consume refused.

#[macro_use]
mod common;

#[path = "priorities/support.rs"]
mod support;

#[path = "priorities/arguments.rs"]
mod arguments;
#[path = "priorities/consumers.rs"]
mod consumers;
#[path = "priorities/messages.rs"]
mod messages;

//! Issue 11, limits: every connection limit (broker-wide, per source address, per
//! virtual host, per user, unauthenticated sockets per shard), channel_max, queues per
//! vhost, consumers per channel and bindings per exchange — each hit with RabbitMQ's
//! exact code and text, then released — and login throttling per (address, user)
//! (growing delays, the burst drop, the quiet period, right passwords answered at once
//! after any failures, bystanders undisturbed, the broker-wide ceiling on failures
//! answered, the log lines), against a
//! child sluice with one and two shards over raw sockets.

#[macro_use]
mod common;

#[path = "limits/support.rs"]
mod support;

#[path = "limits/connections.rs"]
mod connections;

#[path = "limits/objects.rs"]
mod objects;

#[path = "limits/login.rs"]
mod login;

#[path = "limits/measure.rs"]
mod measure;

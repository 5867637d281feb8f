//! The basic class end to end through amqprs (plus one raw-socket check): ordering, prefetch,
//! acknowledgements, get, recover, returns, publisher confirms, transactions, cancel
//! notification, properties round trip, and message/queue expiry.
//!
//! Sections (one file each under `tests/basic/`): `delivery` (consume, prefetch, get,
//! bodies and channels), `acks` (ack, nack, reject, recover, requeue), `confirms_tx`
//! (returns, publisher confirms, transactions), `consumers` (cancel, exclusive,
//! auto-delete), `properties` (the property set and its bytes), `expiry` (per-message
//! and queue TTL, queue expiry).

#[macro_use]
mod common;

#[path = "basic/acks.rs"]
mod acks;
#[path = "basic/confirms_tx.rs"]
mod confirms_tx;
#[path = "basic/consumers.rs"]
mod consumers;
#[path = "basic/delivery.rs"]
mod delivery;
#[path = "basic/expiry.rs"]
mod expiry;
#[path = "basic/properties.rs"]
mod properties;

//! sluice's own asynchronous AMQP 0-9-1 client, built on [`crate::protocol`] and tokio.
//!
//! Owns: connecting (PLAIN or EXTERNAL, vhost, heartbeats, frame-max), channels, declare/bind,
//! publish (mandatory, confirms, transactions, producer flow control as seed 001's
//! client does it), consume (no-ack or manual ack, prefetch), `basic.get`,
//! ack/nack/reject, cancel, returns; the typed [`ClientError`].
//! Does not: depend on broker internals (only `protocol`), lock on the publish or
//! delivery path, or allocate per message beyond the command and delivery queues.
//!
//! # Shape
//!
//! One task per connection owns the socket and all protocol state (`io.rs`). The
//! application holds cheap handles — [`Connection`], [`Channel`], [`Consumer`] — that
//! send commands through one bounded queue. Each turn the task takes up to a
//! thousand commands, encodes them all into one buffer and writes it with one call;
//! reads split every complete frame out of a large buffer with bodies left in place.
//!
//! # Producer flow control
//!
//! When the broker stops a channel (`channel.flow active=false`) or blocks the
//! connection (`connection.blocked`), a publish waits until released, logging
//! `Message send delayed by 5s due to broker enforced flow control` every notify
//! period, and fails with [`ClientError::FlowControlTimeout`] after the wait-failure
//! period — the message unsent, the channel open, a transaction not rolled back.
//! Both periods are [`FlowOptions`] in [`ConnectionOptions::flow`]; by default they come
//! from `SLUICE_FLOW_CONTROL_WAIT_FAILURE` (60000) and
//! `SLUICE_FLOW_CONTROL_WAIT_NOTIFY_PERIOD` (5000), in milliseconds. A bad value is
//! ignored with a WARN naming the variable. [`Channel::flow_stats`] counts the signals
//! and the time publishes waited.
//!
//! # Errors reach the application by blast radius
//!
//! A channel the broker closes (e.g. 506 `Consuming too slow.`) fails that channel's
//! next operation and its consumers' receivers with [`ClientError::ChannelClosed`];
//! the connection and its other channels carry on, and new channels can be opened. A
//! connection close fails everything with [`ClientError::ConnectionClosed`].
//!
//! # Example
//!
//! ```no_run
//! # async fn demo() -> Result<(), sluice::client::ClientError> {
//! use sluice::client::{Connection, ConsumeOptions, NO_PROPERTIES};
//! let conn = Connection::connect("amqp://guest:guest@127.0.0.1:5672/").await?;
//! let ch = conn.open_channel().await?;
//! let q = ch.queue_declare("", Default::default()).await?;
//! ch.basic_publish("", q.name.clone(), false, NO_PROPERTIES, "hi".into()).await?;
//! let mut consumer = ch.basic_consume(&q.name.to_string(), ConsumeOptions::default()).await?;
//! let d = consumer.recv().await?;
//! ch.basic_ack(d.delivery_tag, false).await?;
//! # Ok(()) }
//! ```

mod channel;
mod connection;
mod consumer;
mod error;
mod io;
mod message;
mod shared;
mod tls;
mod url;

pub use channel::{
    Channel, Confirmation, ConsumeOptions, ExchangeDeclareOptions, QueueDeclareOptions, QueueInfo,
};
pub use connection::{Connection, ConnectionOptions, SaslMechanism};
pub use consumer::Consumer;
pub use error::ClientError;
pub use io::Tuning;
pub use message::{
    encode_properties, Delivery, GetMessage, Returned, NO_PROPERTIES, PERSISTENT_PROPERTIES,
};
pub use shared::{FlowOptions, FlowStats, NOTIFY_PERIOD_ENV, WAIT_FAILURE_ENV};
pub use tls::TlsOptions;
pub use url::AmqpUrl;

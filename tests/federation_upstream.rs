//! What a federation link needs from an UPSTREAM sluice (issue 20): RabbitMQ's
//! downstream declares an `x-federation-upstream` exchange `federation: X -> NODE A` on
//! its upstream, binds it from X with `exchange.bind` and its queue to it with key "",
//! and logs in with SASL EXTERNAL where its URI says so. Against a child sluice, with
//! sluice's own client.
//!
//! Sections (one file each under `tests/federation_upstream/`):
//!
//! - `routing`: the type routes like fanout behind the binding from X, only what the
//!   hop rule allows (no header; a trail shorter than x-max-hops; hops == max dropped;
//!   this node and vhost already seen dropped; the same node in another vhost
//!   delivered; no downstream arguments: only hops count), on one and two shards; it is
//!   recovered after a restart (definitions log) with its arguments and filter;
//! - `declare`: x-max-hops missing or not a long, and a redeclare with another value,
//!   refused with RabbitMQ's 406 texts; publishing straight to an internal exchange
//!   (this type's declarations are internal) refused with RabbitMQ's 403 text while
//!   routing into it over an exchange binding works; `cluster_name` in connection.start
//!   is the node name;
//! - `external`: sluice's client logs in with EXTERNAL over TLS as its certificate's CN,
//!   its options built from an amqps URL's RabbitMQ query parameters; refusals.

#[macro_use]
mod common;

#[path = "tls/certs.rs"]
mod certs;
#[path = "federation_upstream/declare.rs"]
mod declare;
#[path = "federation_upstream/external.rs"]
mod external;
#[path = "federation_upstream/routing.rs"]
mod routing;

use bytes::Bytes;
use sluice::client::{
    ClientError, Connection, ExchangeDeclareOptions, QueueDeclareOptions, NO_PROPERTIES,
};
use sluice::protocol::{BasicProperties, FieldTable, FieldValue, LongStr};

use common::Broker;

/// The type RabbitMQ's federation declares on its upstream.
pub const UPSTREAM_TYPE: &str = "x-federation-upstream";

/// A broker whose node name is `node`.
pub fn broker_named(shards: usize, node: &str) -> Broker {
    Broker::start_with_config(shards, &format!("[broker]\nnode_name = {node:?}\n"))
}

pub fn url(broker: &Broker) -> String {
    format!("amqp://guest:guest@{}/", broker.addr())
}

pub async fn connect(broker: &Broker) -> Connection {
    Connection::connect(&url(broker)).await.expect("connect")
}

pub fn text(s: &str) -> FieldValue {
    FieldValue::LongStr(LongStr::from(s))
}

/// The arguments RabbitMQ's link declares its upstream exchange with
/// (`rabbit_federation_exchange_link:ensure_internal_exchange`).
pub fn upstream_args(max_hops: FieldValue, downstream: Option<(&str, &str)>) -> FieldTable {
    let mut args = FieldTable::new();
    args.insert("x-max-hops", max_hops);
    if let Some((name, vhost)) = downstream {
        args.insert("x-downstream-name", text(name));
        args.insert("x-downstream-vhost", text(vhost));
    }
    args.insert("x-internal-purpose", text("federation"));
    args
}

/// durable, auto-delete, internal: as RabbitMQ's link declares it.
pub fn upstream_options(arguments: FieldTable) -> ExchangeDeclareOptions {
    ExchangeDeclareOptions {
        durable: true,
        auto_delete: true,
        internal: true,
        arguments,
        ..ExchangeDeclareOptions::default()
    }
}

pub fn durable_queue() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    }
}

/// Message headers carrying `x-received-from` with one hop per (node, vhost), newest
/// first, as a RabbitMQ or sluice link writes them.
pub fn received_from(hops: &[(&str, &str)]) -> FieldTable {
    let trail = hops
        .iter()
        .map(|(node, vhost)| {
            let mut hop = FieldTable::new();
            hop.insert("uri", text("amqp://somewhere"));
            hop.insert("exchange", text("x"));
            hop.insert("redelivered", FieldValue::Bool(false));
            hop.insert("cluster-name", text(node));
            hop.insert("vhost", text(vhost));
            FieldValue::Table(hop)
        })
        .collect();
    let mut headers = FieldTable::new();
    headers.insert("x-received-from", FieldValue::Array(trail));
    headers
}

/// The raw properties of a message with these headers (none: no properties).
pub fn with_headers(headers: Option<FieldTable>) -> Bytes {
    match headers {
        None => NO_PROPERTIES,
        Some(h) => sluice::client::encode_properties(&BasicProperties {
            headers: Some(h),
            ..BasicProperties::default()
        }),
    }
}

/// The code and text of a channel (or connection) close.
pub fn closed(e: ClientError) -> (u16, String) {
    match e {
        ClientError::ChannelClosed { code, text, .. }
        | ClientError::ConnectionClosed { code, text, .. } => (code, text),
        other => panic!("expected a close, got {other:?}"),
    }
}

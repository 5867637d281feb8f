//! Owns: connections, channels and consumers as JSON — RabbitMQ's fields: the name
//! (`PEER -> HOST:PORT`), both ends of the socket, `ssl`, `client_properties` as the
//! client sent them, `connected_at`, `auth_mechanism`, bytes read and written — and
//! closing a connection by that name (320 CONNECTION_FORCED, by the shard that owns it).

use serde_json::{json, Value};

use super::json::table_json;
use super::{no_content, not_found, ok_json, CONNECTIONS};
use crate::http::auth::Viewer;
use crate::http::paging::{object, Fields};
use crate::http::rates::{channel_counts, message_stats, RateTable, MESSAGE_FIELDS};
use crate::http::{unavailable, Context, HttpResponse};
use crate::shard::inbox::observe::{ObserveReply, ObserveRequest};

/// One connection, on the node named `node`, with the fields `fields` wants.
pub(super) fn connection_json(
    c: &crate::shard::inbox::observe::ConnView,
    node: &str,
    fields: &Fields,
) -> Value {
    let (peer_host, peer_port) = split_addr(&c.peer);
    let (host, port) = c.local.as_deref().map_or((None, None), |l| {
        let (h, p) = split_addr(l);
        (Some(h), p)
    });
    object!(fields, {
        "name": c.name,
        "node": node,
        "type": "network",
        "vhost": c.vhost,
        "user": c.user,
        "state": c.state,
        "channels": c.channels,
        "peer_host": peer_host,
        "peer_port": peer_port,
        "host": host,
        "port": port,
        "ssl": c.tls,
        "auth_mechanism": c.auth_mechanism,
        "client_properties": table_json(&c.client_properties),
        "connected_at": c.connected_at_ms,
        "recv_oct": c.recv_oct,
        "send_oct": c.send_oct,
        "frame_max": c.frame_max,
        "channel_max": c.channel_max,
        "timeout": c.heartbeat,
        "protocol": "AMQP 0-9-1",
        "send_pend": c.outbound_bytes,
        "home_shard": c.shard,
        "serial": c.serial,
        "held": c.held,
    })
}

/// An address as RabbitMQ's host and port fields show it: `127.0.0.1` and `5672`,
/// `::1` without brackets.
fn split_addr(addr: &str) -> (&str, Option<u16>) {
    match addr.rsplit_once(':') {
        Some((host, port)) => (
            host.trim_start_matches('[').trim_end_matches(']'),
            port.parse().ok(),
        ),
        None => (addr, None),
    }
}

/// One channel, with the fields `fields` wants.
pub(super) fn channel_json(
    c: &crate::shard::inbox::observe::ChannelView,
    rates: &RateTable,
    fields: &Fields,
) -> Value {
    object!(fields, {
        "name": format!("{} ({})", c.connection, c.number),
        "number": c.number,
        "connection_details": json!({
            "name": c.connection,
            "peer_host": split_addr(&c.peer).0,
            "peer_port": split_addr(&c.peer).1,
        }),
        "user": c.user,
        "vhost": c.vhost,
        "prefetch_count": c.prefetch,
        "global_prefetch_count": c.global_prefetch,
        "messages_unacknowledged": c.unacked,
        "consumer_count": c.consumers,
        "confirm": c.confirm,
        "transactional": c.transactional,
        "state": if c.flow_blocked { "flow" } else { "running" },
        "flow_blocked": c.flow_blocked,
        "message_stats": message_stats(
            &MESSAGE_FIELDS,
            &channel_counts(&c.stats),
            rates.channel(c.serial, c.number),
        ),
    })
}

pub(super) fn consumer_json(c: &crate::shard::inbox::observe::ConsumerView) -> Value {
    json!({
        "consumer_tag": c.tag,
        "channel_details": {
            "name": format!("{} ({})", c.connection, c.channel),
            "number": c.channel,
            "connection_name": c.connection,
        },
        "queue": { "name": c.queue, "vhost": c.vhost },
        "ack_required": c.ack_required,
        "prefetch_count": c.prefetch,
        "active": true,
        "messages_unacknowledged": c.unacked,
    })
}

/// `GET /api/connections/{name}`: one connection, 404 when no shard has it or it is not
/// the viewer's to see (RabbitMQ shows a user only its own connections, unless it may
/// monitor).
pub(super) async fn connection(ctx: &Context, name: &str, viewer: &Viewer<'_>) -> HttpResponse {
    let Some(shards) = ctx.snapshots(CONNECTIONS).await else {
        return unavailable();
    };
    let found = shards
        .iter()
        .flat_map(|s| s.connections.iter())
        .find(|c| c.name == name && viewer.sees_connection_of(&c.user));
    match found {
        Some(c) => ok_json(&connection_json(c, &ctx.config.node_name, &Fields::ALL)),
        None => not_found(),
    }
}

/// Asks every shard to close the connection (only its owner has it), telling it
/// `reason` (RabbitMQ's `X-Reason` header) or RabbitMQ's default text.
pub(super) async fn close_connection(
    ctx: &Context,
    name: &str,
    reason: Option<&str>,
) -> HttpResponse {
    // The text goes into the short string of connection.close after the reply code's
    // and the broker's prefixes (about 70 bytes): kept to 150 bytes, cut at a character
    // boundary, on one line (nothing that breaks a log line).
    let mut text: String = reason
        .filter(|r| !r.trim().is_empty())
        .unwrap_or("Closed via management API")
        .chars()
        .filter(|c| !crate::ops::escape::breaks_lines(*c))
        .collect();
    while text.len() > 150 {
        text.pop();
    }
    let req = ObserveRequest::CloseConnection {
        name: name.to_owned(),
        reason: text,
    };
    let Some(replies) = ctx.ask_all(req).await else {
        return unavailable();
    };
    if replies
        .iter()
        .any(|r| matches!(r, ObserveReply::Closed(true)))
    {
        no_content()
    } else {
        not_found()
    }
}

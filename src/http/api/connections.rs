//! Owns: connections, channels and consumers as JSON, and closing a connection
//! (320 CONNECTION_FORCED, by the shard that owns it).

use serde_json::{json, Value};

use super::{no_content, not_found};
use crate::http::{unavailable, Context, HttpResponse};
use crate::shard::inbox::observe::{ObserveReply, ObserveRequest};

pub(super) fn connection_json(c: &crate::shard::inbox::observe::ConnView) -> Value {
    let (host, port) = c.peer.rsplit_once(':').unwrap_or((&c.peer, ""));
    json!({
        "name": c.name,
        "vhost": c.vhost,
        "user": c.user,
        "state": c.state,
        "channels": c.channels,
        "peer_host": host,
        "peer_port": port.parse::<u16>().ok(),
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

pub(super) fn channel_json(c: &crate::shard::inbox::observe::ChannelView) -> Value {
    json!({
        "name": format!("{} ({})", c.connection, c.number),
        "number": c.number,
        "connection_details": { "name": c.connection },
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

/// Asks every shard to close the connection (only its owner has it).
pub(super) async fn close_connection(ctx: &Context, name: &str) -> HttpResponse {
    let req = ObserveRequest::CloseConnection {
        name: name.to_owned(),
        reason: "Closed via management API".to_owned(),
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

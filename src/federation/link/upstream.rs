//! Owns: a session's upstream side, as RabbitMQ's exchange link sets it up — the
//! upstream exchange (declared like the local one if the upstream lacks it), the queue
//! `federation: X -> NODE` (durable; x-expires, x-message-ttl, `queue_arguments`), the
//! intermediate exchange `… A` or `… B` (alternating per session, so the old one keeps
//! routing until the new one has every binding) of type `x-federation-upstream` with the
//! hop arguments (a fanout where the upstream lacks that type), the consume with the
//! link's prefetch — and the session's event loop: deliveries, binding changes, the lag
//! check, stop. TLS options from RabbitMQ's URI query keys.
//!
//! Does not: forward messages ([`super::forward`]) or encode bindings
//! ([`super::bindings`]).

use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::bindings::Binder;
use super::forward::Forwarder;
use super::{Ended, LinkCmd, LinkContext};
use crate::client::{
    Channel, ClientError, Connection, ConsumeOptions, ExchangeDeclareOptions, QueueDeclareOptions,
    SaslMechanism, TlsOptions,
};
use crate::config::federation::{AckMode, ArgValue};
use crate::model::hops;
use crate::ops::federation_event::FederationEvent;
use crate::protocol::{FieldTable, FieldValue, LongStr};

/// How often the link reads its upstream queue's depth (`lag`).
const LAG_CHECK: Duration = Duration::from_secs(5);
/// Deliveries taken from the consumer per turn.
const BATCH: usize = 256;

/// The TLS options and SASL mechanism an upstream URI asks for: `amqps://` with
/// RabbitMQ's query keys `cacertfile` (required), `certfile` and `keyfile` (a client
/// certificate), and `auth_mechanism=external` (log in as the certificate's name).
pub(super) fn security(uri: &str) -> Result<(Option<TlsOptions>, SaslMechanism), ClientError> {
    let url = crate::client::AmqpUrl::parse(uri)?;
    let mechanism = match url.query_value("auth_mechanism") {
        Some(m) if m.eq_ignore_ascii_case("external") => SaslMechanism::External,
        _ => SaslMechanism::Plain,
    };
    if !url.tls {
        return Ok((None, mechanism));
    }
    let Some(ca) = url.query_value("cacertfile") else {
        return Err(ClientError::io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "an amqps:// upstream needs ?cacertfile=… (the CA that signed the upstream's certificate)",
        )));
    };
    let tls = match (url.query_value("certfile"), url.query_value("keyfile")) {
        (Some(cert), Some(key)) => {
            TlsOptions::with_client_cert(Path::new(ca), Path::new(cert), Path::new(key))?
        }
        _ => TlsOptions::from_ca_file(Path::new(ca))?,
    };
    Ok((Some(tls), mechanism))
}

fn long_str(v: &str) -> FieldValue {
    FieldValue::LongStr(LongStr::from(v))
}

fn arg_value(v: &ArgValue) -> FieldValue {
    match v {
        ArgValue::Bool(b) => FieldValue::Bool(*b),
        ArgValue::Int(i) => FieldValue::I64(*i),
        ArgValue::Float(f) => FieldValue::F64(*f),
        ArgValue::Str(s) => long_str(s),
    }
}

/// What one session knows about its upstream.
pub(super) struct UpstreamFacts {
    /// The upstream's node name (`cluster_name` server property), if it sent one.
    pub node: Option<String>,
    /// The upstream vhost.
    pub vhost: String,
    /// The URI in use, without credentials.
    pub uri: String,
    /// This session's intermediate exchange.
    pub exchange: String,
    /// `VHOST:X SUFFIX`, the `exchange` of this node's `x-bound-from` entries.
    pub bound_from: String,
}

/// Runs a declaration on a channel of its own, so that a refusal (which closes the
/// channel) leaves the others open.
async fn on_own_channel<T, F, Fut>(
    conn: &Connection,
    op: F,
) -> Result<Result<T, ClientError>, ClientError>
where
    F: FnOnce(Channel) -> Fut,
    Fut: std::future::Future<Output = (Channel, Result<T, ClientError>)>,
{
    let ch = conn.open_channel().await?;
    let (ch, r) = op(ch).await;
    if r.is_ok() {
        let _ = ch.close().await;
    }
    Ok(r)
}

async fn exchange_exists(conn: &Connection, name: &str) -> Result<bool, ClientError> {
    let name = name.to_owned();
    let r = on_own_channel(conn, |ch| async move {
        let opts = ExchangeDeclareOptions {
            passive: true,
            ..ExchangeDeclareOptions::default()
        };
        let r = ch.exchange_declare(&name, "fanout", opts).await;
        (ch, r)
    })
    .await?;
    match r {
        Ok(()) => Ok(true),
        Err(e) if e.reply_code() == Some(404) => Ok(false),
        Err(e) => Err(e),
    }
}

async fn delete_exchange(conn: &Connection, name: &str) -> Result<(), ClientError> {
    let name = name.to_owned();
    let r = on_own_channel(conn, |ch| async move {
        let r = ch.exchange_delete(&name, false).await;
        (ch, r)
    })
    .await?;
    match r {
        Err(e) if e.reply_code() != Some(404) => Err(e),
        _ => Ok(()),
    }
}

/// Declares the upstream side and returns what the session needs of it.
async fn set_up(
    ctx: &LinkContext,
    conn: &Connection,
    ch: &Channel,
    uri: &str,
) -> Result<UpstreamFacts, ClientError> {
    let node = conn
        .server_properties()
        .get("cluster_name")
        .and_then(|v| v.as_str())
        .map(str::to_owned);
    let vhost = crate::client::AmqpUrl::parse(
        ctx.upstream
            .uris
            .iter()
            .find(|u| crate::config::federation::safe_uri(u) == uri)
            .map_or("amqp://", String::as_str),
    )
    .map(|u| u.vhost)
    .unwrap_or_else(|_| "/".to_owned());
    // The upstream exchange: declared like ours where the upstream lacks it.
    let x = &ctx.id.upstream_exchange;
    if !exchange_exists(conn, x).await? {
        let opts = ExchangeDeclareOptions {
            durable: ctx.durable,
            ..ExchangeDeclareOptions::default()
        };
        ch.exchange_declare(x, ctx.kind, opts).await?;
    }
    // The queue.
    let mut args = FieldTable::new();
    if let Some(ms) = ctx.upstream.expires {
        args.insert("x-expires", FieldValue::I64(ms as i64));
    }
    if let Some(ms) = ctx.upstream.message_ttl {
        args.insert("x-message-ttl", FieldValue::I64(ms as i64));
    }
    args.insert("x-internal-purpose", long_str("federation"));
    for (k, v) in &ctx.upstream.queue_arguments {
        args.insert(k.as_str(), arg_value(v));
    }
    let opts = QueueDeclareOptions {
        durable: true,
        arguments: args,
        ..QueueDeclareOptions::default()
    };
    let info = ch.queue_declare(&ctx.queue, opts).await?;
    ctx.stats.lag.set(Some(u64::from(info.message_count)));
    // The intermediate exchange: the one this session did not find.
    let new = if exchange_exists(conn, &format!("{} A", ctx.queue)).await? {
        "B"
    } else {
        "A"
    };
    let exchange = format!("{} {new}", ctx.queue);
    delete_exchange(conn, &exchange).await?;
    let mut xfu = FieldTable::new();
    xfu.insert(
        hops::MAX_HOPS_ARG,
        FieldValue::I64(i64::from(ctx.upstream.max_hops)),
    );
    xfu.insert(hops::DOWNSTREAM_NAME_ARG, long_str(ctx.node_name()));
    xfu.insert(hops::DOWNSTREAM_VHOST_ARG, long_str(&ctx.id.vhost));
    xfu.insert("x-internal-purpose", long_str("federation"));
    let declare = |kind: &'static str, arguments: FieldTable| {
        let exchange = exchange.clone();
        move |ch: Channel| async move {
            let opts = ExchangeDeclareOptions {
                durable: true,
                auto_delete: true,
                internal: true,
                arguments,
                ..ExchangeDeclareOptions::default()
            };
            let r = ch.exchange_declare(&exchange, kind, opts).await;
            (ch, r)
        }
    };
    match on_own_channel(conn, declare("x-federation-upstream", xfu)).await? {
        Ok(()) => {}
        Err(e) if matches!(e.reply_code(), Some(503) | Some(406)) => {
            // No such exchange type upstream (a RabbitMQ without the plugin: 503 before
            // 3.13, 406 since; or an older sluice): a fanout; this end's check stops
            // loops then.
            FederationEvent::UpstreamFanout {
                link: ctx.id.log_name(),
            }
            .emit();
            let mut purpose = FieldTable::new();
            purpose.insert("x-internal-purpose", long_str("federation"));
            on_own_channel(conn, declare("fanout", purpose)).await??;
        }
        Err(e) => return Err(e),
    }
    ch.queue_bind(&ctx.queue, &exchange, "", FieldTable::new())
        .await?;
    let bound_from = format!("{}:{} {new}", ctx.id.vhost, ctx.id.exchange);
    Ok(UpstreamFacts {
        node,
        vhost,
        uri: uri.to_owned(),
        exchange,
        bound_from,
    })
}

/// One session on connected upstream and local connections.
pub(super) async fn run_session(
    ctx: &Rc<LinkContext>,
    up: &Connection,
    local: &Connection,
    uri: (&str, &str),
    cmds: &mut mpsc::UnboundedReceiver<LinkCmd>,
) -> Ended {
    let mut extra = Vec::new();
    let ended = match session_inner(ctx, up, local, uri, &mut extra, cmds).await {
        Ok(ended) => ended,
        Err(e) => e,
    };
    for conn in extra {
        let _ = tokio::time::timeout(Duration::from_secs(1), conn.close()).await;
    }
    ended
}

async fn session_inner(
    ctx: &Rc<LinkContext>,
    up: &Connection,
    local: &Connection,
    (uri, full_uri): (&str, &str),
    extra: &mut Vec<Connection>,
    cmds: &mut mpsc::UnboundedReceiver<LinkCmd>,
) -> Result<Ended, Ended> {
    let consume_ch = Rc::new(up.open_channel().await?);
    let command_ch = Rc::new(up.open_channel().await?);
    let local_ch = local.open_channel().await?;
    let facts = Rc::new(set_up(ctx, up, &command_ch, uri).await?);
    *extra = super::binding_connections(ctx, full_uri).await?;
    let mut binding_channels = vec![Rc::clone(&command_ch)];
    for conn in extra.iter() {
        binding_channels.push(Rc::new(conn.open_channel().await?));
    }
    // Interest changes queued before now are in the interest already.
    while let Ok(cmd) = cmds.try_recv() {
        if let LinkCmd::Stop { clean_up } = cmd {
            return Ok(stop(ctx, up, &facts, clean_up).await);
        }
    }
    let binder = Binder::new(Rc::clone(ctx), binding_channels, Rc::clone(&facts));
    let pairs = ctx.interest.borrow().pairs();
    binder.bind_all(pairs).await?;
    // The old intermediate exchange goes only now that the new one has every binding,
    // so nothing published meanwhile falls between the two.
    let old = if facts.exchange.ends_with(" A") {
        "B"
    } else {
        "A"
    };
    delete_exchange(up, &format!("{} {old}", ctx.queue)).await?;
    let no_ack = ctx.upstream.ack_mode == AckMode::NoAck;
    if !no_ack {
        consume_ch
            .basic_qos(ctx.upstream.prefetch_count, false)
            .await?;
    }
    if ctx.upstream.ack_mode == AckMode::OnConfirm {
        local_ch.confirm_select().await?;
    }
    let consume = ConsumeOptions {
        consumer_tag: format!("federation-link-{}", ctx.upstream.name),
        no_ack,
        buffer: usize::from(ctx.upstream.prefetch_count).max(BATCH),
        ..ConsumeOptions::default()
    };
    let mut consumer = consume_ch.basic_consume(&ctx.queue, consume).await?;
    let mut forwarder = Forwarder::new(
        Rc::clone(ctx),
        Rc::clone(&facts),
        Rc::clone(&consume_ch),
        local_ch,
    );
    ctx.stats.set_state(super::LinkState::Running);
    FederationEvent::LinkRunning {
        link: ctx.id.log_name(),
        uri: facts.uri.clone(),
        queue: ctx.queue.clone(),
        bindings: ctx.stats.bindings.get() as usize,
    }
    .emit();
    let mut lag = tokio::time::interval(LAG_CHECK);
    lag.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        tokio::select! {
            got = consumer.recv_many(&mut batch, BATCH) => {
                got?;
                forwarder.forward(&mut batch).await?;
            }
            cmd = cmds.recv() => match cmd {
                Some(LinkCmd::Interest(change)) => binder.change(change),
                Some(LinkCmd::Stop { clean_up }) => {
                    forwarder.finish().await;
                    return Ok(stop(ctx, up, &facts, clean_up).await);
                }
                None => return Ok(Ended::Stopped),
            },
            failed = binder.failed() => return Err(Ended::Failed(failed)),
            failed = forwarder.failed() => return Err(Ended::Failed(failed)),
            _ = lag.tick() => {
                let opts = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
                let info = command_ch.queue_declare(&ctx.queue, opts).await?;
                ctx.stats.lag.set(Some(u64::from(info.message_count)));
            }
        }
    }
}

/// Told to stop: with `clean_up` (the federated exchange was deleted) the upstream
/// queue and exchange go too.
async fn stop(ctx: &LinkContext, up: &Connection, facts: &UpstreamFacts, clean_up: bool) -> Ended {
    if clean_up {
        let queue = ctx.queue.clone();
        let _ = on_own_channel(up, |ch| async move {
            let r = ch.queue_delete(&queue, false, false).await.map(|_| ());
            (ch, r)
        })
        .await;
        let _ = delete_exchange(up, &facts.exchange).await;
    }
    FederationEvent::LinkStopped {
        link: ctx.id.log_name(),
        reason: if clean_up {
            "the exchange was deleted; upstream queue and exchange removed".into()
        } else {
            "the broker is stopping; the upstream queue stays".into()
        },
    }
    .emit();
    Ended::Stopped
}

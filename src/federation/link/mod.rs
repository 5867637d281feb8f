//! Owns: one link's life — connect to the upstream (its URIs in random order) and to
//! this broker, set up the upstream side ([`upstream`]), propagate bindings
//! ([`bindings`]), forward and acknowledge ([`forward`]), and when anything fails, log
//! FED-1003, wait `reconnect_delay` (± 25 % jitter) and start again; stop when the
//! manager says (removing the upstream queue and exchange when the federated exchange
//! was deleted).
//!
//! Does not: decide which links exist (the manager) or keep binding interest (it reads
//! its exchange's [`Interest`] when it (re)connects and gets changes after that).

mod bindings;
mod forward;
mod upstream;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::interest::{Interest, InterestChange};
use super::status::{bump, LinkState, LinkStats};
use super::{FederationSeed, LinkId};
use crate::client::{ClientError, Connection, ConnectionOptions, FlowOptions};
use crate::config::federation::{safe_uri, Upstream};
use crate::limits::report::Reporter;
use crate::ops::federation_event::FederationEvent;

/// What the manager tells a link.
#[derive(Debug)]
pub enum LinkCmd {
    /// A coalesced change of the exchange's bindings.
    Interest(InterestChange),
    /// Stop; `clean_up`: delete the upstream queue and exchange (the federated exchange
    /// is gone).
    Stop { clean_up: bool },
}

/// Everything one link works with.
pub struct LinkContext {
    pub seed: Rc<FederationSeed>,
    pub id: LinkId,
    pub upstream: Upstream,
    pub interest: Rc<RefCell<Interest>>,
    pub stats: Rc<LinkStats>,
    /// The local exchange's type and durability (an upstream that lacks the exchange
    /// gets one like it).
    pub kind: &'static str,
    pub durable: bool,
    /// `federation: X -> NODE[…]`, the queue on the upstream.
    pub queue: String,
    /// FED-1003 at most once per gap, with the failures in between.
    down_lines: Reporter,
}

/// FED-1003 lines of one link at most this often.
const DOWN_REPORT_GAP: Duration = Duration::from_secs(30);
/// A held local publish waits this long before the link gives up and reconnects (the
/// upstream redelivers what was not acknowledged).
const LOCAL_FLOW_WAIT: Duration = Duration::from_secs(24 * 3600);

impl LinkContext {
    pub fn new(
        seed: Rc<FederationSeed>,
        id: LinkId,
        upstream: Upstream,
        interest: Rc<RefCell<Interest>>,
        kind: &'static str,
        durable: bool,
    ) -> Rc<LinkContext> {
        let queue = upstream_queue_name(&id, &seed.config.node_name, &upstream);
        let stats = Rc::new(LinkStats::new(queue.clone(), id.connection_name()));
        Rc::new(LinkContext {
            seed,
            id,
            upstream,
            interest,
            stats,
            kind,
            durable,
            queue,
            down_lines: Reporter::new(DOWN_REPORT_GAP, 1),
        })
    }

    pub fn node_name(&self) -> &str {
        &self.seed.config.node_name
    }
}

/// RabbitMQ's upstream queue name: `federation: X -> NODE`, with `:DOWNSTREAM_X` when
/// the upstream exchange has another name, or `:VHOST:X` when the vhosts differ (the
/// upstream vhost is the first URI's).
fn upstream_queue_name(id: &LinkId, node: &str, upstream: &Upstream) -> String {
    let upstream_vhost = upstream
        .uris
        .first()
        .and_then(|u| crate::client::AmqpUrl::parse(u).ok())
        .map(|u| u.vhost)
        .unwrap_or_else(|| "/".to_owned());
    let down = if upstream_vhost != id.vhost {
        format!(":{}:{}", id.vhost, id.exchange)
    } else if id.upstream_exchange != id.exchange {
        format!(":{}", id.exchange)
    } else {
        String::new()
    };
    format!("federation: {} -> {node}{down}", id.upstream_exchange)
}

/// Why a session ended.
pub(super) enum Ended {
    /// Told to stop.
    Stopped,
    /// Failed; retry.
    Failed(String),
}

impl From<ClientError> for Ended {
    fn from(e: ClientError) -> Ended {
        Ended::Failed(e.to_string())
    }
}

/// The link's task: sessions until told to stop.
pub async fn run(ctx: Rc<LinkContext>, mut cmds: mpsc::UnboundedReceiver<LinkCmd>) {
    loop {
        ctx.stats.set_state(LinkState::Starting);
        match session(&ctx, &mut cmds).await {
            Ended::Stopped => return,
            Ended::Failed(reason) => {
                ctx.stats.set_state(LinkState::Error(reason.clone()));
                bump(&ctx.stats.reconnects, 1);
                let delay = jittered(ctx.upstream.reconnect_delay);
                if let Some(count) = ctx.down_lines.note(std::time::Instant::now()) {
                    FederationEvent::LinkDown {
                        link: ctx.id.log_name(),
                        reason,
                        retry_ms: delay.as_millis() as u64,
                        count,
                    }
                    .emit();
                }
                if wait_or_stop(delay, &mut cmds).await {
                    FederationEvent::LinkStopped {
                        link: ctx.id.log_name(),
                        reason: "stopped while down".into(),
                    }
                    .emit();
                    return;
                }
            }
        }
    }
}

/// Waits `delay`, discarding interest changes (the next session reads the whole
/// interest); `true` if told to stop meanwhile.
async fn wait_or_stop(delay: Duration, cmds: &mut mpsc::UnboundedReceiver<LinkCmd>) -> bool {
    let sleep = tokio::time::sleep(delay);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            _ = &mut sleep => return false,
            cmd = cmds.recv() => match cmd {
                None | Some(LinkCmd::Stop { .. }) => return true,
                Some(LinkCmd::Interest(_)) => {}
            },
        }
    }
}

/// `delay` ± 25 %.
fn jittered(delay: Duration) -> Duration {
    let mut byte = [0u8; 2];
    let r = match getrandom::getrandom(&mut byte) {
        Ok(()) => f64::from(u16::from_le_bytes(byte)) / f64::from(u16::MAX),
        Err(_) => 0.5,
    };
    delay.mul_f64(0.75 + r * 0.5)
}

/// Options of both the upstream and the local connection.
fn options(ctx: &LinkContext, name: String) -> ConnectionOptions {
    ConnectionOptions {
        name: Some(name),
        flow: FlowOptions {
            notify_period: Duration::from_secs(60),
            wait_failure: LOCAL_FLOW_WAIT,
            honour_flow: true,
        },
        connect_timeout: Duration::from_secs(15)
            .min(ctx.upstream.reconnect_delay * 3)
            .max(Duration::from_secs(2)),
        ..ConnectionOptions::default()
    }
}

/// The upstream connection: the first of the URIs, in random order, that connects;
/// with the URI it used (with and without credentials).
async fn connect_upstream(ctx: &LinkContext) -> Result<(Connection, String, String), Ended> {
    let mut uris = ctx.upstream.uris.clone();
    shuffle(&mut uris);
    let mut last = String::from("no URI");
    for uri in uris {
        let safe = safe_uri(&uri);
        ctx.stats.set_uri(safe.clone());
        FederationEvent::LinkStarting {
            link: ctx.id.log_name(),
            uri: safe.clone(),
        }
        .emit();
        match connect_to(ctx, &uri, ctx.id.connection_name()).await {
            Ok(conn) => return Ok((conn, safe, uri)),
            Err(e) => last = format!("{safe}: {e}"),
        }
    }
    Err(Ended::Failed(last))
}

/// One connection to the upstream `uri`, named `name`.
async fn connect_to(ctx: &LinkContext, uri: &str, name: String) -> Result<Connection, ClientError> {
    let mut opts = options(ctx, name);
    let (tls, mechanism) = upstream::security(uri)?;
    opts.tls = tls;
    opts.mechanism = mechanism;
    Connection::connect_with(uri, opts).await
}

/// The extra upstream connections that carry a session's binding changes beside the
/// main one (`link::bindings`: a sluice upstream answers one connection's bindings one
/// at a time, each after its definitions-log sync; over several connections its group
/// commit syncs many at once).
pub(super) async fn binding_connections(
    ctx: &LinkContext,
    uri: &str,
) -> Result<Vec<Connection>, Ended> {
    let mut extra = Vec::with_capacity(bindings::CONNECTIONS - 1);
    for i in 2..=bindings::CONNECTIONS {
        let name = format!(
            "{} (bindings {i}/{})",
            ctx.id.connection_name(),
            bindings::CONNECTIONS
        );
        let conn = connect_to(ctx, uri, name)
            .await
            .map_err(|e| Ended::Failed(format!("binding connection: {e}")))?;
        extra.push(conn);
    }
    Ok(extra)
}

/// The connection into this broker.
async fn connect_local(ctx: &LinkContext) -> Result<Connection, Ended> {
    use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
    let addr = ctx.seed.local;
    let host = match addr {
        std::net::SocketAddr::V4(_) => format!("{}", addr.ip()),
        std::net::SocketAddr::V6(_) => format!("[{}]", addr.ip()),
    };
    let url = format!(
        "amqp://{}:{}@{host}:{}/{}",
        crate::auth::local_link::LINK_USER,
        ctx.seed.credential.secret(),
        addr.port(),
        utf8_percent_encode(&ctx.id.vhost, NON_ALPHANUMERIC)
    );
    let name = format!("{} (local)", ctx.id.connection_name());
    Connection::connect_with(&url, options(ctx, name))
        .await
        .map_err(|e| Ended::Failed(format!("local connection: {e}")))
}

fn shuffle(list: &mut [String]) {
    for i in (1..list.len()).rev() {
        let mut b = [0u8; 4];
        let r = getrandom::getrandom(&mut b).map_or(0, |()| u32::from_le_bytes(b)) as usize;
        list.swap(i, r % (i + 1));
    }
}

/// One connected session, until it fails or is told to stop.
async fn session(ctx: &Rc<LinkContext>, cmds: &mut mpsc::UnboundedReceiver<LinkCmd>) -> Ended {
    let (up, safe, uri) = match connect_upstream(ctx).await {
        Ok(c) => c,
        Err(e) => return e,
    };
    let local = match connect_local(ctx).await {
        Ok(c) => c,
        Err(e) => return e,
    };
    let result = upstream::run_session(ctx, &up, &local, (&safe, &uri), cmds).await;
    let closing = async {
        let _ = tokio::join!(local.close(), up.close());
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), closing).await;
    result
}

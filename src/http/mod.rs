//! Owns: the management listener — its own OS thread with a current-thread tokio runtime
//! and hyper's HTTP/1.1 server — and the routing of its requests: `GET /metrics`
//! (`metrics`), the management API under `/api/` (`api`; its federation links,
//! `federation`; users, permissions and vhosts, `access`; vhost and user limits,
//! `limits`; publish, get and the aliveness test, `messages`, with properties as JSON in
//! `message_json`; declaring and deleting queues, exchanges and bindings, `topology`;
//! exporting and importing definitions, `definitions`; health checks, `health`; the
//! node, cluster name and whoami, `nodes`; paging, columns and sorting of every list,
//! `paging`; the message rates' sampler, `rates`), HTTP basic auth (`auth`); the web
//! console's static files at `/` and `/console/`, served without credentials (`console`:
//! the page itself uses only the API);
//! what one connection may hold (`conn`: the connection cap, the header-read and idle
//! timeouts). The Prometheus listener (`prometheus`, off by default) is a second
//! instance of the same server on its own thread, without credentials, serving only
//! `/metrics` and `/metrics/per-object` under RabbitMQ's names.
//!
//! Every figure comes from the shards by request/response through their control inboxes
//! (`ShardMsg::Observe` with a oneshot reply, `ShardMsg::Queue`, `ShardMsg::Control`):
//! a shard answers from its own state in one turn and the reply is owned data, so a slow
//! HTTP client only ever waits on this thread. Broker-wide figures that are already
//! posted for the watermark and the disk quota (`MemoryBoard`, `DiskBoard`) are read from
//! there. The federation links' status comes from the federation thread the same way
//! (`FederationHandle::links`, a request with a oneshot reply).
//!
//! Does not: parse HTTP (hyper does), hold a lock, or touch any shard's state.

pub mod access;
pub mod api;
pub mod auth;
mod conn;
mod console;
pub mod definitions;
pub mod federation;
pub mod health;
mod limits;
mod message_json;
pub mod messages;
pub mod metrics;
pub mod nodes;
pub mod paging;
pub mod policies;
pub mod prometheus;
pub mod rates;
pub mod stream_metrics;
pub mod topology;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::oneshot;

use crate::config::Config;
use crate::limits::report::Reporter;
use crate::ops::event::OpsEvent;
use crate::ops::limit_event::LimitEvent;
use crate::shard::inbox::observe::{ObserveReply, ObserveRequest, ShardView, VhostView, Want};
use crate::shard::inbox::{Peers, ShardMsg};
use crate::shard::memory::MemoryBoard;
use crate::store::quota::DiskBoard;
use crate::timer::clock;

/// How long a request waits for a shard's answer before it is answered 503.
const SHARD_TIMEOUT: Duration = Duration::from_secs(10);

pub type HttpResponse = Response<Full<Bytes>>;

/// What the HTTP thread needs: the configuration, the shards' inboxes and the boards.
pub struct Context {
    /// The configuration as started.
    pub config: Arc<Config>,
    /// The configuration in force: users and permissions as last reloaded (SIGHUP).
    pub live: tokio::sync::watch::Receiver<Arc<Config>>,
    pub peers: Peers,
    pub memory: Arc<MemoryBoard>,
    pub disk: Arc<DiskBoard>,
    pub started: Instant,
    /// The AMQP listeners (for `/api/overview`).
    pub amqp: Vec<SocketAddr>,
    /// The AMQP-over-TLS listeners (`amqp/ssl` in `/api/overview`, as RabbitMQ names them).
    pub amqps: Vec<SocketAddr>,
    /// This management listener's address, once bound (`start` sets it; `http` in the
    /// listener health checks and the overview's listeners).
    pub http: Option<SocketAddr>,
    /// The counts the shards share; basic auth uses its ceiling on failed logins.
    pub limits: Arc<crate::limits::ConnectionCounts>,
    /// The federation thread's handle, when federation is configured (its links for
    /// `/api/federation-links`, /metrics and `sluicectl federation`).
    pub federation: Option<crate::federation::FederationHandle>,
    /// The owner of the configuration in force: run-time changes of users and
    /// permissions go through it (`access`).
    pub admin: crate::admin::AdminHandle,
    /// The message rates, as the sampler (`rates::sample`, a task on this thread) last
    /// computed them.
    pub rates: rates::Board,
}

/// One authenticated API request as the areas of the API (`access`, ...) see it: each
/// area's `route(&Call) -> Option<HttpResponse>` answers the paths it owns.
#[derive(Clone, Copy)]
pub struct Call<'a> {
    pub ctx: &'a Context,
    /// The configuration in force when the request came in.
    pub config: &'a Config,
    pub method: &'a Method,
    /// The percent-decoded segments after `/api/`.
    pub path: &'a [&'a str],
    /// The raw query string (empty when there is none).
    pub query: &'a str,
    pub body: &'a Bytes,
    pub user: &'a crate::config::User,
}

/// The service's error: the connection is closed without an answer (hyper drops it).
#[derive(Debug)]
pub struct Unanswered;

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("closed without an answer (failed-login ceiling)")
    }
}

impl std::error::Error for Unanswered {}

/// The running listener; dropping it leaves the thread running until the process ends,
/// [`HttpServer::stop`] stops it.
pub struct HttpServer {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HttpServer {
    /// Stops accepting, and joins the thread (open connections are dropped).
    pub fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What a listener serves: the management listener (basic auth, the API, sluice's
/// /metrics) or the Prometheus listener (`prometheus`: no credentials, RabbitMQ's names).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Listener {
    Management,
    Prometheus,
}

/// Binds a management or Prometheus listener's address: `server::start` binds every
/// listener before it opens the store, so a taken address fails a start that has left
/// nothing behind.
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Starts the management thread on a listener from [`bind`].
pub fn start(listener: std::net::TcpListener, ctx: Context) -> std::io::Result<HttpServer> {
    start_listener(listener, ctx, Listener::Management)
}

/// Starts the Prometheus listener's thread (`sluice-prometheus`) on a listener from
/// [`bind`], with the management listener's connection cap and timeouts.
pub fn start_prometheus(
    listener: std::net::TcpListener,
    ctx: Context,
) -> std::io::Result<HttpServer> {
    start_listener(listener, ctx, Listener::Prometheus)
}

fn start_listener(
    listener: std::net::TcpListener,
    mut ctx: Context,
    kind: Listener,
) -> std::io::Result<HttpServer> {
    let bound = listener.local_addr()?;
    if kind == Listener::Management {
        ctx.http = Some(bound);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (stop_tx, stop_rx) = oneshot::channel();
    let ctx = Arc::new(ctx);
    let name = match kind {
        Listener::Management => "sluice-http",
        Listener::Prometheus => "sluice-prometheus",
    };
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || runtime.block_on(serve(listener, ctx, kind, stop_rx)))?;
    match kind {
        Listener::Management => OpsEvent::ManagementListening { addr: bound }.emit(),
        Listener::Prometheus => OpsEvent::PrometheusListening { addr: bound }.emit(),
    }
    Ok(HttpServer {
        addr: bound,
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

async fn serve(
    listener: std::net::TcpListener,
    ctx: Arc<Context>,
    kind: Listener,
    mut stop: oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("management listener: {e}");
            return;
        }
    };
    // The rates' sampler lives as long as the management listener's runtime.
    if kind == Listener::Management {
        tokio::spawn(rates::sample(Arc::clone(&ctx)));
    }
    let slots = conn::Slots::new(ctx.config.http.max_connections);
    let over_cap = Reporter::default();
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => return,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            // An IPv4 client of a dual-stack listener is its IPv4 address (loopback).
            Ok((stream, peer)) => (
                stream,
                SocketAddr::new(peer.ip().to_canonical(), peer.port()),
            ),
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::debug!("management accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(slot) = slots.take() else {
            // Over http.max_connections: closed as accepted, before hyper sees it.
            drop(stream);
            if let Some(count) = over_cap.note(clock::os_now()) {
                LimitEvent::ManagementRefused {
                    peer: peer.to_string(),
                    cap: slots.cap(),
                    count,
                }
                .emit();
            }
            continue;
        };
        tokio::spawn(serve_connection(Arc::clone(&ctx), kind, stream, peer, slot));
    }
}

/// Serves one connection under the header-read and idle timeouts (`conn`), holding its
/// place in the connection cap until it ends.
async fn serve_connection(
    ctx: Arc<Context>,
    kind: Listener,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    _slot: conn::Slot,
) {
    let activity = conn::Activity::new();
    let io = hyper_util::rt::TokioIo::new(conn::Watched::new(stream, Arc::clone(&activity)));
    let settings = ctx.config.http.clone();
    let in_service = Arc::clone(&activity);
    let service = hyper::service::service_fn(move |req| {
        let ctx = Arc::clone(&ctx);
        let busy = in_service.busy();
        async move {
            let response = match kind {
                Listener::Management => handle(&ctx, req, peer).await,
                Listener::Prometheus => Ok(prometheus::handle(&ctx, &req).await),
            };
            drop(busy);
            response
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout);
    let connection = builder.serve_connection(io, service);
    match settings.idle_timeout {
        // Dropping the connection closes the socket.
        Some(timeout) => {
            tokio::select! {
                _ = connection => {}
                _ = conn::idle(activity, timeout) => {}
            }
        }
        None => {
            let _ = connection.await;
        }
    }
}

/// The largest request body read (a definitions import is the largest); beyond it 413.
const BODY_LIMIT: usize = 64 << 20;

/// Authenticates, then routes; `Err` closes the connection without an answer.
async fn handle(
    ctx: &Context,
    req: Request<hyper::body::Incoming>,
    peer: SocketAddr,
) -> Result<HttpResponse, Unanswered> {
    // The console's static files hold no data: served without credentials.
    if console::owns(req.uri().path()) {
        return Ok(console::serve(
            req.method(),
            req.uri().path(),
            req.headers(),
        ));
    }
    // A script that says so (the console) gets no basic-auth challenge with a 401,
    // which would make the browser open its own login dialog over the page's.
    let xhr = req.headers().contains_key("x-requested-with");
    // The users and permissions in force (a SIGHUP reload or a change over the API
    // replaces them).
    let config = Arc::clone(&ctx.live.borrow());
    let user = match auth::admit(&config, &ctx.limits.failures, req.headers(), peer).await {
        Ok(user) => user,
        Err(auth::Refused::Respond(response)) => return Ok(unchallenged(xhr, response)),
        Err(auth::Refused::Silently) => return Err(Unanswered),
    };
    let (parts, body) = req.into_parts();
    let body = if parts.method == Method::GET || parts.method == Method::HEAD {
        Bytes::new()
    } else {
        use http_body_util::BodyExt;
        match http_body_util::Limited::new(body, BODY_LIMIT)
            .collect()
            .await
        {
            Ok(collected) => collected.to_bytes(),
            Err(e) => {
                return Ok(error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!("request body not read: {e}"),
                ))
            }
        }
    };
    let req = Request::from_parts(parts, body);
    Ok(unchallenged(xhr, route(ctx, &config, &req, user).await))
}

/// `response` without its `WWW-Authenticate` challenge when `xhr`.
fn unchallenged(xhr: bool, mut response: HttpResponse) -> HttpResponse {
    if xhr {
        response
            .headers_mut()
            .remove(hyper::header::WWW_AUTHENTICATE);
    }
    response
}

/// Routes an authenticated request.
async fn route(
    ctx: &Context,
    config: &Config,
    req: &Request<Bytes>,
    user: &crate::config::User,
) -> HttpResponse {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    // With permissions in force, RabbitMQ's rule: only management-family tags may use
    // the API (without them, as before, any user may read).
    if config.permissions.entries.is_some() && !user.may_use_management() {
        return error(StatusCode::UNAUTHORIZED, "Not management user");
    }
    let segments = match split_path(&path) {
        Some(s) => s,
        None => return error(StatusCode::BAD_REQUEST, "bad percent-encoding in the path"),
    };
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    if let ["api", rest @ ..] = segs.as_slice() {
        let call = Call {
            ctx,
            config,
            method: &method,
            path: rest,
            query: &query,
            body: req.body(),
            user,
        };
        // Each area of the API answers the paths it owns and passes (None) on the rest;
        // the first that answers wins.
        macro_rules! first_area_that_answers {
            ($($area:ident),+) => {
                $(if let Some(response) = $area::route(&call).await {
                    return response;
                })+
            };
        }
        first_area_that_answers!(
            access,
            limits,
            policies,
            messages,
            topology,
            definitions,
            health,
            nodes
        );
    }
    if method == Method::DELETE && !user.is_administrator() {
        return error(
            StatusCode::FORBIDDEN,
            "changes need a user tagged administrator",
        );
    }
    match (&method, segs.as_slice()) {
        (&Method::GET, ["metrics"]) => metrics::scrape(ctx).await,
        (&Method::GET, ["api", rest @ ..]) => {
            api::get(ctx, rest, &query, &auth::Viewer::of(config, user)).await
        }
        (&Method::DELETE, ["api", rest @ ..]) => {
            // RabbitMQ's `X-Reason` header: the text a closed connection is told.
            // (UTF-8, as a script may send it; a value that is not is ignored.)
            let reason = req
                .headers()
                .get("x-reason")
                .and_then(|v| std::str::from_utf8(v.as_bytes()).ok());
            api::delete(ctx, rest, reason).await
        }
        (_, ["metrics"] | ["api", ..]) => {
            error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
        }
        _ => object_not_found(),
    }
}

/// The path's segments, percent-decoded (`%2F` is the vhost `/`).
fn split_path(path: &str) -> Option<Vec<String>> {
    path.trim_start_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .ok()
                .map(|c| c.into_owned())
        })
        .collect()
}

/// A JSON error body, as RabbitMQ's management API answers (`rabbit_mgmt_util:
/// halt_response`): `error` is RabbitMQ's name of the refusal (`bad_request`,
/// `not_authorised`, `not_found`, ...), `reason` the text.
pub fn error(status: StatusCode, reason: &str) -> HttpResponse {
    error_named(status, error_kind(status), reason)
}

fn error_named(status: StatusCode, kind: &str, reason: &str) -> HttpResponse {
    let body = serde_json::json!({ "error": kind, "reason": reason });
    respond(status, "application/json", body.to_string().into())
}

/// The `error` field RabbitMQ's management gives a status.
fn error_kind(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "bad_request",
        401 => "not_authorised",
        404 => "not_found",
        405 => "method_not_allowed",
        412 => "precondition_failed",
        500 => "internal_server_error",
        503 => "service_unavailable",
        _ => status.canonical_reason().unwrap_or("error"),
    }
}

/// 404 for a path naming no object (a queue, exchange or binding that does not exist,
/// or a path the API does not serve), as RabbitMQ's web dispatch renders cowboy's bare
/// 404: `{"error":"Object Not Found","reason":"Not Found"}`.
pub fn object_not_found() -> HttpResponse {
    error_named(StatusCode::NOT_FOUND, "Object Not Found", "Not Found")
}

pub fn respond(status: StatusCode, content_type: &'static str, body: Bytes) -> HttpResponse {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

impl Context {
    /// Sends `req` to `shard`; the reply receiver.
    fn ask(&self, shard: usize, req: ObserveRequest) -> oneshot::Receiver<ObserveReply> {
        let (tx, rx) = oneshot::channel();
        self.peers.send(shard as u16, ShardMsg::Observe(req, tx));
        rx
    }

    /// Asks one shard and waits (bounded).
    pub async fn ask_one(&self, shard: usize, req: ObserveRequest) -> Option<ObserveReply> {
        tokio::time::timeout(SHARD_TIMEOUT, self.ask(shard, req))
            .await
            .ok()?
            .ok()
    }

    /// Asks every shard at once, then collects the answers (`None` if one did not answer).
    pub async fn ask_all(&self, req: ObserveRequest) -> Option<Vec<ObserveReply>> {
        let pending: Vec<_> = (0..self.peers.len())
            .map(|i| self.ask(i, req.clone()))
            .collect();
        let deadline = tokio::time::Instant::now() + SHARD_TIMEOUT;
        let mut out = Vec::with_capacity(pending.len());
        for rx in pending {
            out.push(tokio::time::timeout_at(deadline, rx).await.ok()?.ok()?);
        }
        Some(out)
    }

    /// Asks every shard at once; each answer in shard order, `None` for a shard that did
    /// not answer in time (the others still count).
    pub async fn ask_all_each(&self, req: ObserveRequest) -> Vec<Option<ObserveReply>> {
        let pending: Vec<_> = (0..self.peers.len())
            .map(|i| self.ask(i, req.clone()))
            .collect();
        let deadline = tokio::time::Instant::now() + SHARD_TIMEOUT;
        let mut out = Vec::with_capacity(pending.len());
        for rx in pending {
            out.push(
                tokio::time::timeout_at(deadline, rx)
                    .await
                    .ok()
                    .and_then(Result::ok),
            );
        }
        out
    }

    /// Every shard's snapshot, in shard order. Home queues come in chunks
    /// (`observe::QUEUE_CHUNK`), one shard turn each: the shards with more are asked
    /// again, all at once, until none has more.
    pub async fn snapshots(&self, want: Want) -> Option<Vec<ShardView>> {
        let replies = self.ask_all(ObserveRequest::Snapshot(want)).await?;
        let mut views: Vec<ShardView> = replies
            .into_iter()
            .map(|r| match r {
                ObserveReply::Snapshot(v) => Some(*v),
                _ => None,
            })
            .collect::<Option<_>>()?;
        loop {
            let pending: Vec<(usize, oneshot::Receiver<ObserveReply>)> = views
                .iter_mut()
                .enumerate()
                .filter_map(|(i, v)| v.next_queue.take().map(|after| (i, after)))
                .map(|(i, after)| {
                    let more = Want {
                        queues: true,
                        queues_after: after,
                        ..Want::default()
                    };
                    (i, self.ask(i, ObserveRequest::Snapshot(more)))
                })
                .collect();
            if pending.is_empty() {
                return Some(views);
            }
            let deadline = tokio::time::Instant::now() + SHARD_TIMEOUT;
            for (i, rx) in pending {
                match tokio::time::timeout_at(deadline, rx).await.ok()?.ok()? {
                    ObserveReply::Snapshot(chunk) => {
                        let view = views.get_mut(i)?;
                        view.queues.extend(chunk.queues);
                        view.next_queue = chunk.next_queue;
                    }
                    _ => return None,
                }
            }
        }
    }

    /// The exchanges and bindings, from shard 0's replica.
    pub async fn directory(&self) -> Option<Vec<VhostView>> {
        match self.ask_one(0, ObserveRequest::Directory).await? {
            ObserveReply::Directory(d) => Some(d),
            _ => None,
        }
    }

    /// Seconds since the broker started.
    pub fn uptime(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
}

/// 503 when a shard did not answer in time (it is stopping, or stuck).
pub fn unavailable() -> HttpResponse {
    error(StatusCode::SERVICE_UNAVAILABLE, "a shard did not answer")
}

/// Resident set size of this process, bytes (`/proc/self/statm`).
pub fn rss_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .unwrap_or(0);
    // SAFETY: sysconf only reads a configuration value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_split_and_decoded() {
        assert_eq!(
            split_path("/api/queues/%2F/my%20queue"),
            Some(vec![
                "api".to_owned(),
                "queues".to_owned(),
                "/".to_owned(),
                "my queue".to_owned()
            ])
        );
        assert_eq!(split_path("/metrics"), Some(vec!["metrics".to_owned()]));
        assert_eq!(split_path("/api/%FF"), None);
    }
}

//! Owns: the Prometheus listener's answers (`http.prometheus_listen`,
//! `--prometheus-listen`; off by default) — `GET /metrics` and `GET /metrics/per-object`
//! under RabbitMQ's own metric names, types and labels (`families`, and the global
//! message counters `global`), in the text format
//! rabbitmq_prometheus answers with (`text`), so that RabbitMQ's published Grafana
//! dashboards and alerts work unchanged; and the process's descriptor figures (`process`,
//! also on sluice's own `/metrics`). Like rabbitmq_prometheus on 15692, it asks for no
//! credentials: it serves these two paths and nothing else, and an operator binds it
//! where only the scraper reaches it.
//!
//! The listener is the management server's machinery on a thread of its own
//! (`http::start_prometheus`: same connection cap, header-read and idle timeouts); each
//! scrape asks the shards for their snapshots as `/metrics` does, and keeps nothing
//! between scrapes.
//!
//! Does not: authenticate, serve the management API, or count anything itself (every
//! figure is a shard's, a board's, or the kernel's).

pub mod families;
pub mod global;
pub mod process;
pub mod text;

use bytes::Bytes;
use hyper::{Method, Request, StatusCode};

use crate::shard::inbox::observe::Want;

use super::{respond, unavailable, Context, HttpResponse};

/// Which of RabbitMQ's endpoints: `/metrics` (aggregated, RabbitMQ's default) or
/// `/metrics/per-object` (queue figures per queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Aggregated,
    PerObject,
}

impl Endpoint {
    /// The `rabbitmq_endpoint` label of `rabbitmq_identity_info`, as RabbitMQ sets it.
    pub fn label(self) -> &'static str {
        match self {
            Endpoint::Aggregated => "aggregated",
            Endpoint::PerObject => "per-object",
        }
    }
}

/// Answers one request of the Prometheus listener.
pub async fn handle<B>(ctx: &Context, req: &Request<B>) -> HttpResponse {
    let Some(segments) = super::split_path(req.uri().path()) else {
        return plain(
            StatusCode::BAD_REQUEST,
            "bad percent-encoding in the path\n",
        );
    };
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let endpoint = match segs.as_slice() {
        ["metrics"] => Endpoint::Aggregated,
        ["metrics", "per-object"] => Endpoint::PerObject,
        _ => {
            return plain(
                StatusCode::NOT_FOUND,
                "not found: this listener serves /metrics and /metrics/per-object\n",
            )
        }
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    let want = Want {
        queues: true,
        ..Want::default()
    };
    let Some(shards) = ctx.snapshots(want).await else {
        return unavailable();
    };
    let text = families::render(ctx, &shards, endpoint);
    respond(StatusCode::OK, text::CONTENT_TYPE, Bytes::from(text))
}

fn plain(status: StatusCode, text: &'static str) -> HttpResponse {
    respond(
        status,
        "text/plain; charset=utf-8",
        Bytes::from_static(text.as_bytes()),
    )
}

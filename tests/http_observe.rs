//! What the management API says about the node, the caller and the connections, checked
//! against RabbitMQ's answers: the health checks (`http_observe/health.rs`: 200
//! `{"status":"ok"}`, 503 `{"status":"failed","reason":…}` while a memory or disk alarm
//! is in effect, for a port or protocol nothing listens on), `/api/nodes`,
//! `/api/cluster-name`, `/api/whoami` and the overview's node fields
//! (`http_observe/nodes.rs`), and each connection's fields — RabbitMQ's name, both ends
//! of the socket, `client_properties`, bytes read and written, its channels — with the
//! CON-1001 line naming the client's `connection_name` (`http_observe/connections.rs`).

mod common;

#[path = "http_observe/connections.rs"]
mod connections;
#[path = "http_observe/health.rs"]
mod health;
#[path = "http_observe/nodes.rs"]
mod nodes;

use common::http::{self, Response};

/// `GET path` as guest/guest, off the runtime's worker threads.
pub async fn get(port: u16, path: &str) -> Response {
    get_as(port, path, Some(("guest", "guest"))).await
}

/// `GET path` with basic auth `auth` (none when `None`).
pub async fn get_as(port: u16, path: &str, auth: Option<(&'static str, &'static str)>) -> Response {
    request(port, "GET", path, auth).await
}

/// `method path` with basic auth `auth`, off the runtime's worker threads.
pub async fn request(
    port: u16,
    method: &'static str,
    path: &str,
    auth: Option<(&'static str, &'static str)>,
) -> Response {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || http::request(port, method, &path, auth))
        .await
        .expect("HTTP request task")
}

/// The JSON body of a `GET path` that must answer 200.
pub async fn get_ok(port: u16, path: &str) -> serde_json::Value {
    let r = get(port, path).await;
    assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    r.json()
}

/// `name` percent-encoded as one path segment.
pub fn segment(name: &str) -> String {
    percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC).to_string()
}

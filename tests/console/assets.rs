//! The console's static files over plain HTTP: served without credentials with their
//! content types, an ETag and `Cache-Control: no-cache`, 304 for a matching
//! `If-None-Match`; the API still needs credentials, and a script that sends
//! `X-Requested-With` gets its 401 without the basic-auth challenge. And the API's part
//! the console's close button uses: `X-Reason` on closing a connection.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use amqprs::connection::OpenConnectionArguments;
use base64::Engine;

use crate::common::broker::connect_to;
use crate::common::{bounded, next_event, unique, Broker, Event};

struct Response {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

/// `GET path` with `headers` and no credentials (one request per connection).
fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> Response {
    send(port, "GET", path, headers)
}

/// `method path` with `headers` (one request per connection).
fn send(port: u16, method: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to HTTP");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).expect("send request");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read response");
    let text = String::from_utf8(raw).expect("UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("header end");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Response {
        status,
        headers,
        body: body.to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_files_are_served_with_caching_headers() {
    bounded(async {
        let broker = Broker::start(1);
        let port = broker.http_port();
        let checks = tokio::task::spawn_blocking(move || {
            let index = get(port, "/", &[]);
            assert_eq!(index.status, 200, "{}", index.body);
            assert!(index.body.contains("/console/app.js"), "{}", index.body);
            assert_eq!(index.headers["content-type"], "text/html; charset=utf-8");
            assert_eq!(index.headers["cache-control"], "no-cache");
            assert!(index.headers["content-security-policy"].contains("script-src 'self'"));
            for (path, kind) in [
                ("/console/app.js", "text/javascript; charset=utf-8"),
                ("/console/style.css", "text/css; charset=utf-8"),
                ("/console/favicon.svg", "image/svg+xml"),
            ] {
                let r = get(port, path, &[]);
                assert_eq!(r.status, 200, "{path}");
                assert_eq!(r.headers["content-type"], kind, "{path}");
                let etag = r.headers["etag"].clone();
                assert!(etag.starts_with('"') && etag.len() > 2, "{path}: {etag}");
                let again = get(port, path, &[("If-None-Match", &etag)]);
                assert_eq!(again.status, 304, "{path}");
                assert!(again.body.is_empty(), "{path}: a 304 has no body");
                let stale = get(port, path, &[("If-None-Match", "\"other\"")]);
                assert_eq!(stale.status, 200, "{path}");
            }
            assert_eq!(get(port, "/console/missing.js", &[]).status, 404);
            // The data stays behind credentials.
            let api = get(port, "/api/overview", &[]);
            assert_eq!(api.status, 401);
            assert!(api.headers.contains_key("www-authenticate"));
            let script = get(
                port,
                "/api/overview",
                &[("X-Requested-With", "XMLHttpRequest")],
            );
            assert_eq!(script.status, 401);
            assert!(!script.headers.contains_key("www-authenticate"));
        });
        checks.await.expect("checks");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_is_closed_with_the_reason_in_x_reason() {
    bounded(async {
        let broker = Broker::start(1);
        let name = unique("reasoned");
        let mut args: OpenConnectionArguments = broker.amqprs_args();
        args.connection_name(&name);
        let mut conn = connect_to(&args).await;
        let port = broker.http_port();
        let auth = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("guest:guest")
        );
        let status = tokio::task::spawn_blocking(move || {
            let list = send(port, "GET", "/api/connections", &[("Authorization", &auth)]);
            let list: serde_json::Value = serde_json::from_str(&list.body).expect("JSON");
            let found = list
                .as_array()
                .and_then(|l| {
                    l.iter()
                        .find(|c| c["client_properties"]["connection_name"] == name.as_str())
                })
                .and_then(|c| c["name"].as_str())
                .expect("the named connection is listed")
                .to_owned();
            let path = format!(
                "/api/connections/{}",
                percent_encoding::utf8_percent_encode(&found, percent_encoding::NON_ALPHANUMERIC)
            );
            // Longer than a close's text may be: cut, not refused.
            let reason = format!("maintenance window {}", "x".repeat(300));
            let headers = [("Authorization", auth.as_str()), ("X-Reason", &reason)];
            send(port, "DELETE", &path, &headers).status
        })
        .await
        .expect("requests");
        assert_eq!(status, 204);
        loop {
            if let Event::ConnectionClose { code, text } = next_event(&mut conn.events).await {
                assert_eq!(code, 320);
                assert!(text.contains("maintenance window xxx"), "{text}");
                assert!(text.len() <= 255, "a short string: {text}");
                break;
            }
        }
    })
    .await;
}

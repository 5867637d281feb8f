//! Owns: the web console's static files — `index.html` at `/`, and the scripts, style
//! sheet and icon under `/console/` — embedded in the binary (`include_bytes!` of
//! `assets/`, no files to install, nothing fetched from elsewhere), each served with its
//! `Content-Type`, an `ETag` (FNV-1a of its bytes, computed once at the first request)
//! and `Cache-Control: no-cache`, so a browser keeps its copy and revalidates it with
//! `If-None-Match` (304, no body) on every load. The paths carry no version, so a new
//! binary's files are seen at the next load without stale copies in between.
//!
//! The files are served without credentials: they hold no data. Everything the page
//! shows or changes goes through the management API under `/api/` with HTTP basic auth
//! sent by the page's script on each request (no cookie, so a change cannot be forged by
//! another site), as a script would; the console has no endpoint of its own.
//!
//! Does not: read files at run time, ask the shards anything, or authenticate.

use std::sync::OnceLock;

use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Method, StatusCode};

use super::{respond, HttpResponse};

/// One embedded file.
struct Asset {
    /// Its path under `/console/` (`index.html` is also `/`).
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $type:expr) => {
        Asset {
            name: $name,
            content_type: $type,
            body: include_bytes!(concat!("assets/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("dom.js", JS),
    asset!("chart.js", JS),
    asset!("overview.js", JS),
    asset!("risk.js", JS),
    asset!("queues.js", JS),
    asset!("connections.js", JS),
    asset!("exchanges.js", JS),
    asset!("admin.js", JS),
];

/// The page's policy: its own files only, no inline script, no framing.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
    form-action 'none'";

/// FNV-1a (64 bits) of `bytes`: a file's version for its `ETag`.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Each asset's `ETag`, in [`ASSETS`] order, computed at the first request.
fn etags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| format!("\"{:016x}\"", fnv1a(a.body)))
            .collect()
    })
}

/// Whether `path` is the console's (served without credentials): `/`, `/index.html`
/// and anything under `/console/`.
pub fn owns(path: &str) -> bool {
    path == "/" || path == "/index.html" || path.starts_with("/console/")
}

/// Answers a request for one of the console's paths ([`owns`]): GET and HEAD only.
pub fn serve(method: &Method, path: &str, headers: &HeaderMap) -> HttpResponse {
    if method != Method::GET && method != Method::HEAD {
        return super::error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    }
    let name = match path {
        "/" | "/index.html" => "index.html",
        other => other.trim_start_matches("/console/"),
    };
    let Some(index) = ASSETS.iter().position(|a| a.name == name) else {
        return super::object_not_found();
    };
    let (asset, etag) = (&ASSETS[index], &etags()[index]);
    let fresh = headers
        .get(hyper::header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let (status, body) = if fresh {
        (StatusCode::NOT_MODIFIED, Bytes::new())
    } else if method == Method::HEAD {
        (StatusCode::OK, Bytes::new())
    } else {
        (StatusCode::OK, Bytes::from_static(asset.body))
    };
    let mut response = respond(status, asset.content_type, body);
    let h = response.headers_mut();
    if let Ok(tag) = HeaderValue::from_str(etag) {
        h.insert(hyper::header::ETAG, tag);
    }
    h.insert(
        hyper::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    h.insert(
        hyper::header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        hyper::header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if asset.name == "index.html" {
        h.insert(
            hyper::header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
        h.insert(
            hyper::header::X_FRAME_OPTIONS,
            HeaderValue::from_static("DENY"),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_found_and_versioned() {
        let none = HeaderMap::new();
        for a in ASSETS {
            let r = serve(&Method::GET, &format!("/console/{}", a.name), &none);
            assert_eq!(r.status(), StatusCode::OK, "{}", a.name);
            assert!(!a.body.is_empty(), "{}", a.name);
            let tag = r.headers().get(hyper::header::ETAG).expect("etag").clone();
            let mut again = HeaderMap::new();
            again.insert(hyper::header::IF_NONE_MATCH, tag);
            let r = serve(&Method::GET, &format!("/console/{}", a.name), &again);
            assert_eq!(r.status(), StatusCode::NOT_MODIFIED, "{}", a.name);
        }
        assert_eq!(
            serve(&Method::GET, "/console/nope.js", &none).status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            serve(&Method::POST, "/", &none).status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
    }

    #[test]
    fn paths_of_the_console() {
        assert!(owns("/") && owns("/console/app.js") && owns("/index.html"));
        assert!(!owns("/api/overview") && !owns("/metrics") && !owns("/consoles"));
    }
}

//! Owns: sluicectl's HTTP side — the `ureq` agent (http or https, `--cacert` or the
//! webpki roots), the base URL from `--server`, basic auth, and turning the broker's
//! answers into values or errors (the API's `reason` for 4xx/5xx, a clear message when
//! the server cannot be reached).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::Value;
use ureq::tls::{Certificate, RootCerts, TlsConfig};
use ureq::Agent;

/// Why a command failed; every kind exits 1.
#[derive(Debug)]
pub enum Error {
    /// The server could not be reached (refused, DNS, TLS, timeout).
    Connect(String),
    /// The broker answered 4xx/5xx: method, path, status and its `reason`.
    Api {
        what: String,
        status: u16,
        reason: String,
    },
    /// Anything else (a file, bad JSON).
    Other(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Connect(m) | Error::Other(m) => f.write_str(m),
            Error::Api {
                what,
                status,
                reason,
            } => write!(f, "{what}: {status} {reason}"),
        }
    }
}

/// A percent-encoded path segment (a vhost `/` is `%2F`).
pub fn enc(s: &str) -> String {
    utf8_percent_encode(s, NON_ALPHANUMERIC).to_string()
}

/// `http://host:port`, `https://host:port` or a bare `host:port` (http) as a base URL.
pub fn base_url(server: &str) -> String {
    let s = server.trim_end_matches('/');
    if s.starts_with("http://") || s.starts_with("https://") {
        s.to_owned()
    } else {
        format!("http://{s}")
    }
}

pub struct Client {
    agent: Agent,
    base: String,
    auth: String,
}

impl Client {
    pub fn new(
        server: &str,
        user: &str,
        password: &str,
        cacert: Option<&str>,
    ) -> Result<Client, Error> {
        let mut tls = TlsConfig::builder();
        if let Some(path) = cacert {
            let pem = std::fs::read(path)
                .map_err(|e| Error::Other(format!("cannot read --cacert {path}: {e}")))?;
            let certs: Vec<Certificate<'static>> = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                    _ => None,
                })
                .collect();
            if certs.is_empty() {
                return Err(Error::Other(format!(
                    "--cacert {path}: no PEM certificate in it"
                )));
            }
            tls = tls.root_certs(RootCerts::Specific(Arc::new(certs)));
        }
        let agent: Agent = Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .timeout_connect(Some(Duration::from_secs(10)))
            .tls_config(tls.build())
            .build()
            .into();
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        Ok(Client {
            agent,
            base: base_url(server),
            auth: format!("Basic {token}"),
        })
    }

    /// One request; the answer's JSON (Null for an empty body) on 2xx.
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, Error> {
        let url = format!("{}{path}", self.base);
        let auth = self.auth.as_str();
        let result = match (method, body) {
            ("GET", _) => self.agent.get(&url).header("Authorization", auth).call(),
            ("DELETE", _) => self.agent.delete(&url).header("Authorization", auth).call(),
            ("PUT", Some(b)) => self
                .agent
                .put(&url)
                .header("Authorization", auth)
                .send_json(b),
            ("PUT", None) => self
                .agent
                .put(&url)
                .header("Authorization", auth)
                .send_empty(),
            (_, Some(b)) => self
                .agent
                .post(&url)
                .header("Authorization", auth)
                .send_json(b),
            (_, None) => self
                .agent
                .post(&url)
                .header("Authorization", auth)
                .send_empty(),
        };
        let mut reply =
            result.map_err(|e| Error::Connect(format!("cannot reach {}: {e}", self.base)))?;
        let status = reply.status().as_u16();
        let text = reply
            .body_mut()
            .with_config()
            .limit(1 << 30)
            .lossy_utf8(true)
            .read_to_string()
            .map_err(|e| Error::Connect(format!("{method} {path}: reading the answer: {e}")))?;
        let value: Option<Value> = serde_json::from_str(&text).ok();
        if !(200..300).contains(&status) {
            let reason = value
                .as_ref()
                .and_then(|v| v["reason"].as_str().map(str::to_owned))
                .unwrap_or_else(|| text.trim().to_owned());
            return Err(Error::Api {
                what: format!("{method} {path}"),
                status,
                reason,
            });
        }
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        value.ok_or_else(|| Error::Other(format!("{method} {path}: the answer is not JSON")))
    }

    pub fn get(&self, path: &str) -> Result<Value, Error> {
        self.call("GET", path, None)
    }
}

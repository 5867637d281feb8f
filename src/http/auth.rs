//! Owns: HTTP basic authentication of the management listener against the broker's
//! `[auth]` users, and what each may see ([`Viewer`]). Without `[auth] permissions` any
//! valid user may read everything; with it, RabbitMQ's rules: only management-family tags
//! get in, and `management` / `policymaker` users see their vhosts and their own
//! connections. Who may change what is decided where the change is routed: users,
//! vhosts, permissions and definitions need the `administrator` tag (`access`,
//! `definitions`), queues, exchanges and bindings RabbitMQ's vhost and permission rule
//! (`topology`), other deletions the `administrator` tag (the router). Users
//! listed in `loopback_users` are refused from other addresses, as they are on AMQP.
//!
//! Failed logins are throttled per (source address, user) as AMQP logins are
//! (`[limits.login]`: growing delays before the 401, then 429 for that user from that
//! address until the pair has been quiet; right credentials always get in), count
//! against the broker-wide ceiling on failed logins answered (beyond it the connection
//! is closed without an answer, CON-1016), and are logged as CON-1008 / CON-1009; the
//! listener's thread keeps its own table, as each shard keeps its own.
//!
//! Does not: keep sessions or cookies; every request carries its credentials.

use std::cell::RefCell;
use std::net::SocketAddr;

use base64::Engine;
use hyper::header::{HeaderMap, HeaderValue, AUTHORIZATION, WWW_AUTHENTICATE};
use hyper::StatusCode;

use crate::config::limits::LoginThrottleSettings;
use crate::config::{Config, User};
use crate::limits::ceiling::FailureCeiling;
use crate::limits::login::{Gate, LoggedThrottle};

use super::{error, HttpResponse};

const MISSING: &str = "credentials needed (HTTP basic auth)";

/// The basic-auth user name and password of a request, if it has them.
fn request_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(credentials)
}

/// Whether `name` / `password` log in from `peer`, or why not.
fn verify<'a>(
    config: &'a Config,
    name: &str,
    password: &str,
    peer: SocketAddr,
) -> Result<&'a User, &'static str> {
    let user = config
        .authenticate(name, password.as_bytes())
        .ok_or("bad user name or password")?;
    if !peer.ip().is_loopback() && config.loopback_users.contains(&user.name) {
        return Err("this user may only log in from loopback");
    }
    Ok(user)
}

/// The user the request authenticates as, or why not (answered with [`unauthorized`]).
pub fn check<'a>(
    config: &'a Config,
    headers: &HeaderMap,
    peer: SocketAddr,
) -> Result<&'a User, &'static str> {
    let (name, password) = request_credentials(headers).ok_or(MISSING)?;
    verify(config, &name, &password, peer)
}

/// Why a request with credentials was not admitted.
pub enum Refused {
    /// Answer it with this (401 or 429).
    Respond(HttpResponse),
    /// Close the connection without an answer: the broker-wide ceiling on failed logins
    /// answered has no slot for it (CON-1016).
    Silently,
}

/// As [`check`], with the login throttle: right credentials are admitted at once,
/// whatever failed before; a failure is recorded (and logged) and answered 401 after
/// its (address, user) pair's delay, 429 once the pair's burst is spent, and not at all
/// beyond the broker-wide `ceiling`. A request without credentials is not a failure (a
/// browser asks first without them).
pub async fn admit<'a>(
    config: &'a Config,
    ceiling: &FailureCeiling,
    headers: &HeaderMap,
    peer: SocketAddr,
) -> Result<&'a User, Refused> {
    let Some((name, password)) = request_credentials(headers) else {
        return Err(Refused::Respond(unauthorized(MISSING)));
    };
    let reason = match verify(config, &name, &password, peer) {
        Ok(user) => return Ok(user),
        Err(reason) => reason,
    };
    let settings = &config.limits.resources.login;
    let now = crate::timer::clock::os_now();
    // One thread serves every management connection; the connection cap
    // (`http.max_connections`) bounds the delayed answers, so there is always room.
    let gate = with_logins(settings, |l| {
        let gate = l.failed(peer, &name, "HTTP basic", now, ceiling, true);
        match gate {
            Gate::Drop { failures } if failures > 0 && !l.answer_now(peer, now, ceiling) => {
                Gate::Drop { failures: 0 }
            }
            other => other,
        }
    });
    match gate {
        Gate::Open => Err(Refused::Respond(unauthorized(reason))),
        Gate::Delay(delay) => {
            tokio::time::sleep(delay).await;
            Err(Refused::Respond(unauthorized(reason)))
        }
        // The pair's burst is spent (and the ceiling has room for the answer).
        Gate::Drop { failures } if failures > 0 => Err(Refused::Respond(error(
            StatusCode::TOO_MANY_REQUESTS,
            "too many failed logins as this user from this address; try again later",
        ))),
        Gate::Drop { .. } => Err(Refused::Silently),
    }
}

thread_local! {
    // The listener is one thread (a current-thread runtime): a table without a lock,
    // made from the configuration at the first request with credentials.
    static LOGINS: RefCell<Option<LoggedThrottle>> = const { RefCell::new(None) };
}

/// Runs `f` on this thread's table (never across an await).
fn with_logins<T>(settings: &LoginThrottleSettings, f: impl FnOnce(&LoggedThrottle) -> T) -> T {
    LOGINS.with(|cell| {
        let mut slot = cell.borrow_mut();
        f(slot.get_or_insert_with(|| LoggedThrottle::new(settings.clone())))
    })
}

/// What a user may see through the API. Without `[auth] permissions`, or for users
/// tagged `monitoring` or `administrator`, everything; otherwise (RabbitMQ's rule for
/// `management` and `policymaker` users) the objects of the vhosts the user has
/// permissions on, and only the user's own connections and channels.
pub enum Viewer<'a> {
    All,
    Limited { user: &'a User, config: &'a Config },
}

impl<'a> Viewer<'a> {
    pub fn of(config: &'a Config, user: &'a User) -> Viewer<'a> {
        let monitor = user
            .tags
            .iter()
            .any(|t| t == "monitoring" || t == "administrator");
        if config.permissions.entries.is_none() || monitor {
            Viewer::All
        } else {
            Viewer::Limited { user, config }
        }
    }

    /// Whether the user may see `vhost`'s queues, exchanges, bindings and consumers.
    pub fn sees_vhost(&self, vhost: &str) -> bool {
        match self {
            Viewer::All => true,
            Viewer::Limited { user, config } => {
                config.permissions.grant(&user.name, vhost).is_some()
            }
        }
    }

    /// Whether the user may see a connection (or its channels) logged in as `owner`.
    pub fn sees_connection_of(&self, owner: &str) -> bool {
        match self {
            Viewer::All => true,
            Viewer::Limited { user, .. } => user.name == owner,
        }
    }
}

/// `Basic base64(user:password)` → (user, password).
fn credentials(header: &str) -> Option<(String, String)> {
    let (scheme, encoded) = header.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// 401 with the basic-auth challenge.
pub fn unauthorized(reason: &str) -> HttpResponse {
    let mut response = error(StatusCode::UNAUTHORIZED, reason);
    response.headers_mut().insert(
        WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"sluice\""),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_str(value).expect("header"));
        h
    }

    #[test]
    fn basic_credentials() {
        assert_eq!(
            credentials("Basic Z3Vlc3Q6Z3Vlc3Q="),
            Some(("guest".into(), "guest".into()))
        );
        assert_eq!(credentials("Bearer abc"), None);
        assert_eq!(credentials("Basic !!!"), None);
    }

    #[test]
    fn users_are_checked() {
        let config = Config::default();
        let local: SocketAddr = "127.0.0.1:1".parse().expect("addr");
        let remote: SocketAddr = "10.0.0.1:1".parse().expect("addr");
        let ok = headers("Basic Z3Vlc3Q6Z3Vlc3Q=");
        assert!(check(&config, &ok, local).is_ok_and(User::is_administrator));
        // guest is a loopback user.
        assert!(check(&config, &ok, remote).is_err());
        let bad = headers("Basic Z3Vlc3Q6bm9wZQ==");
        assert!(check(&config, &bad, local).is_err());
        assert!(check(&config, &HeaderMap::new(), local).is_err());
        assert_eq!(unauthorized("x").status(), hyper::StatusCode::UNAUTHORIZED);
    }
}

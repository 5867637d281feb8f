//! Owns: HTTP basic authentication of the management listener against the broker's
//! `[auth]` users: any valid user may read; changes need the `administrator` tag (checked
//! by the router). Users listed in `loopback_users` are refused from other addresses, as
//! they are on AMQP.
//!
//! Does not: keep sessions or cookies; every request carries its credentials.

use std::net::SocketAddr;

use base64::Engine;
use hyper::header::{HeaderMap, HeaderValue, AUTHORIZATION, WWW_AUTHENTICATE};
use hyper::StatusCode;

use crate::config::{Config, User};

use super::{error, HttpResponse};

/// The user the request authenticates as, or why not (answered with [`unauthorized`]).
pub fn check<'a>(
    config: &'a Config,
    headers: &HeaderMap,
    peer: SocketAddr,
) -> Result<&'a User, &'static str> {
    let (name, password) = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(credentials)
        .ok_or("credentials needed (HTTP basic auth)")?;
    let user = config
        .authenticate(&name, password.as_bytes())
        .ok_or("bad user name or password")?;
    if !peer.ip().is_loopback() && config.loopback_users.contains(&user.name) {
        return Err("this user may only log in from loopback");
    }
    Ok(user)
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

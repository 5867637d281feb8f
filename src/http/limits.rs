//! Owns: RabbitMQ's vhost and user limits over the management API —
//! `GET /api/vhost-limits[/{vhost}]`, `PUT/DELETE /api/vhost-limits/{vhost}/{name}`
//! (`max-connections`, `max-queues`), `GET /api/user-limits[/{user}]`,
//! `PUT/DELETE /api/user-limits/{user}/{name}` (`max-connections`, `max-channels`) —
//! read from the configuration in force and changed through the admin thread
//! (`AccessRequest::SetLimit` / `ClearLimit`), which persists the change and puts it in
//! force on every shard and in the shared connection counts before the answer.
//!
//! Does not: count or enforce a limit (`crate::limits` and the shards do).

use hyper::{Method, StatusCode};
use serde_json::{json, Map, Value};

use crate::admin::{AccessRequest, AdminError, Changed, USER_LIMITS, VHOST_LIMITS};
use crate::config::Config;
use crate::store::access::LimitSubject;

use super::access::{bad_request, changed, not_found, object, ok};
use super::auth::Viewer;
use super::{error, Call, HttpResponse};

const NOT_ADMIN: &str = "Not administrator user";

pub async fn route(call: &Call<'_>) -> Option<HttpResponse> {
    let (subject, rest) = match call.path {
        ["vhost-limits", rest @ ..] => (LimitSubject::Vhost, rest),
        ["user-limits", rest @ ..] => (LimitSubject::User, rest),
        _ => return None,
    };
    if rest.len() > 2 {
        return None;
    }
    let config = call.config;
    let user = call.user;
    // RabbitMQ: the user limits and every change are administrators'; the vhost
    // limits are visible to those who see the vhost.
    let admin_only = subject == LimitSubject::User || *call.method != Method::GET;
    if admin_only && !user.is_administrator() {
        return Some(super::auth::unauthorized(NOT_ADMIN));
    }
    let viewer = Viewer::of(config, user);
    let response = match (call.method, rest) {
        (&Method::GET, []) => ok(&listing(config, subject, None, &viewer)),
        (&Method::GET, [name]) => {
            if !exists(config, subject, name) {
                not_found()
            } else if subject == LimitSubject::Vhost && !viewer.sees_vhost(name) {
                super::auth::unauthorized("User not authorised to access virtual host")
            } else {
                ok(&listing(config, subject, Some(name), &viewer))
            }
        }
        (&Method::PUT, [name, limit]) => match limit_value(call.body) {
            Ok(value) => answer(
                call.ctx
                    .admin
                    .access(AccessRequest::SetLimit {
                        subject,
                        name: (*name).to_owned(),
                        limit: (*limit).to_owned(),
                        value,
                        acting: user.name.clone(),
                    })
                    .await,
            ),
            Err(reason) => bad_request(&reason),
        },
        (&Method::DELETE, [name, limit]) => answer(
            call.ctx
                .admin
                .access(AccessRequest::ClearLimit {
                    subject,
                    name: (*name).to_owned(),
                    limit: (*limit).to_owned(),
                    acting: user.name.clone(),
                })
                .await,
        ),
        _ => error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
    };
    Some(response)
}

/// A missing vhost or user is 404 with RabbitMQ's reason (`vhost_not_found`).
fn answer(outcome: Result<Changed, AdminError>) -> HttpResponse {
    match outcome {
        Err(AdminError::NotFound(reason)) => error(StatusCode::NOT_FOUND, &reason),
        other => changed(other),
    }
}

fn exists(config: &Config, subject: LimitSubject, name: &str) -> bool {
    match subject {
        LimitSubject::Vhost => config.vhosts.iter().any(|v| v == name),
        LimitSubject::User => config.users.iter().any(|u| u.name == name),
    }
}

/// `{"value": N}`: an integer, as RabbitMQ's validation requires (negative is no
/// limit).
fn limit_value(body: &bytes::Bytes) -> Result<i64, String> {
    let map = object(body)?;
    let value = map.get("value").ok_or("Missing key(s): value")?;
    value.as_i64().ok_or_else(|| {
        format!("Validation failed\n\nvalue should be a number, actually was {value}\n")
    })
}

/// RabbitMQ's listing: one entry per vhost (or user) with a limit in force, its limits
/// as `{"max-connections": N, …}`.
fn listing(
    config: &Config,
    subject: LimitSubject,
    only: Option<&str>,
    viewer: &Viewer<'_>,
) -> Value {
    let limits = &config.limits.resources;
    let mut out = Vec::new();
    match subject {
        LimitSubject::Vhost => {
            for vhost in &config.vhosts {
                if only.is_some_and(|o| o != vhost) || !viewer.sees_vhost(vhost) {
                    continue;
                }
                let l = limits.vhost(vhost);
                let value = values(&VHOST_LIMITS, [l.max_connections, l.max_queues]);
                if !value.is_empty() {
                    out.push(json!({ "vhost": vhost, "value": value }));
                }
            }
        }
        LimitSubject::User => {
            for user in &config.users {
                if only.is_some_and(|o| o != user.name) {
                    continue;
                }
                let l = limits.user(&user.name);
                let value = values(&USER_LIMITS, [l.max_connections, l.max_channels]);
                if !value.is_empty() {
                    out.push(json!({ "user": user.name, "value": value }));
                }
            }
        }
    }
    Value::Array(out)
}

fn values(names: &[&str; 2], limits: [Option<u32>; 2]) -> Map<String, Value> {
    names
        .iter()
        .zip(limits)
        .filter_map(|(n, l)| l.map(|l| ((*n).to_owned(), json!(l))))
        .collect()
}

//! Owns: RabbitMQ's policies over the management API — `GET /api/policies[/{vhost}]`,
//! `GET/PUT/DELETE /api/policies/{vhost}/{name}` — read from the configuration in force
//! and changed through the admin thread (`PolicyRequest`), which persists the change and
//! has every shard apply it to its queues before the answer; and the `policy` /
//! `effective_policy_definition` a queue or exchange shows.
//!
//! Does not: validate a policy (`policy::set`) or apply it (`shard::home::runtime_policy`).
//!
//! Who may: as `is_authorized_policies`, an administrator, or a policymaker with
//! permissions on the vhost in the path; a list shows the vhosts the user may see.

use hyper::{Method, StatusCode};
use serde_json::Value;

use crate::admin::policy::draft_of;
use crate::admin::{AdminError, Changed, PolicyRequest};
use crate::config::{Config, User};
use crate::policy::set::{self, Kind};

use super::access::{bad_request, changed, not_found, ok};
use super::auth::Viewer;
use super::{error, Call, HttpResponse};

const NOT_AUTHORISED: &str = "User not authorised to access object";

pub async fn route(call: &Call<'_>) -> Option<HttpResponse> {
    let ["policies", rest @ ..] = call.path else {
        return None;
    };
    if rest.len() > 2 {
        return None;
    }
    let (config, user) = (call.config, call.user);
    if !allowed(config, user, rest.first().copied()) {
        return Some(super::auth::unauthorized(NOT_AUTHORISED));
    }
    let viewer = Viewer::of(config, user);
    let response = match (call.method, rest) {
        (&Method::GET, []) => ok(&listing(config, None, &viewer)),
        (&Method::GET, [vhost]) if config.vhosts.iter().any(|v| v == vhost) => {
            ok(&listing(config, Some(vhost), &viewer))
        }
        (&Method::GET, [_]) => not_found(),
        (&Method::GET, [vhost, name]) => config
            .runtime_policies
            .iter()
            .find(|p| p.vhost == *vhost && p.name == *name)
            .map_or_else(not_found, |p| ok(&p.json())),
        (&Method::PUT, [vhost, name]) => {
            let body = match serde_json::from_slice::<Value>(call.body) {
                Ok(v) => v,
                Err(e) => return Some(bad_request(&format!("body is not JSON: {e}"))),
            };
            match draft_of(vhost, name, &body) {
                Ok(draft) => answer(
                    call.ctx
                        .admin
                        .policy(PolicyRequest::Put {
                            draft,
                            acting: user.name.clone(),
                        })
                        .await,
                ),
                Err(reason) => bad_request(&reason),
            }
        }
        (&Method::DELETE, [vhost, name]) => answer(
            call.ctx
                .admin
                .policy(PolicyRequest::Delete {
                    vhost: (*vhost).to_owned(),
                    name: (*name).to_owned(),
                    acting: user.name.clone(),
                })
                .await,
        ),
        _ => error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
    };
    Some(response)
}

/// RabbitMQ's `is_authorized_policies`: administrators, and policymakers where they
/// have permissions on the vhost named in the path (any, for the lists of all vhosts).
fn allowed(config: &Config, user: &User, vhost: Option<&str>) -> bool {
    if user.is_administrator() {
        return true;
    }
    if !user.is_policymaker() {
        return false;
    }
    match vhost {
        None => true,
        Some(v) => {
            config.permissions.entries.is_none()
                || config.permissions.grant(&user.name, v).is_some()
        }
    }
}

/// A missing vhost is 404 with RabbitMQ's reason (`vhost_not_found`).
fn answer(outcome: Result<Changed, AdminError>) -> HttpResponse {
    match outcome {
        Err(AdminError::NotFound(reason)) => error(StatusCode::NOT_FOUND, &reason),
        other => changed(other),
    }
}

fn listing(config: &Config, only: Option<&str>, viewer: &Viewer<'_>) -> Value {
    Value::Array(
        config
            .runtime_policies
            .iter()
            .filter(|p| only.is_none_or(|v| v == p.vhost) && viewer.sees_vhost(&p.vhost))
            .map(|p| p.json())
            .collect(),
    )
}

/// The `policy` RabbitMQ's exchange listing gives: the name of the policy that applies
/// (none of sluice's keys acts on an exchange, but the match shows), or null.
pub fn exchange_policy(config: &Config, vhost: &str, name: &str) -> Value {
    set::select(&config.runtime_policies, vhost, name, Kind::Exchange)
        .map_or(Value::Null, |p| Value::String(p.name.clone()))
}

//! Owns: the management API's users, permissions and vhosts — RabbitMQ 3.10's paths,
//! JSON and status codes: `GET/PUT/DELETE /api/users/{name}`, `GET /api/users`,
//! `POST /api/users/bulk-delete`, `GET /api/users/{name}/permissions`,
//! `GET /api/permissions`, `GET/PUT/DELETE /api/permissions/{vhost}/{user}`,
//! `GET/PUT/DELETE /api/vhosts/{name}`, `GET /api/vhosts` and
//! `GET /api/vhosts/{name}/permissions`.
//! Reads come from the configuration in force (`Context::live`); a change goes to the
//! admin thread (`crate::admin`), which answers once it is on disk and on every shard.
//!
//! Does not: check passwords or patterns itself (the admin thread does, with `auth`), or
//! hold any state of its own.

use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde_json::{json, Map, Value};

use crate::admin::{AccessRequest, AdminError, Changed, NewPassword};
use crate::config::{Config, User};

use super::auth::Viewer;
use super::{error, respond, Call, Context, HttpResponse};

/// RabbitMQ's reason when a user lacks the administrator tag for these endpoints.
const NOT_ADMIN: &str = "Not administrator user";

/// Routes a request under `/api/users`, `/api/permissions` or `/api/vhosts`; `None`
/// when the path is not one of these (the caller routes it on).
pub async fn route(call: &Call<'_>) -> Option<HttpResponse> {
    let Call {
        ctx,
        config,
        method,
        path,
        body,
        user,
        ..
    } = *call;
    let viewer = Viewer::of(config, user);
    let admin_only = matches!(path, ["users", ..] | ["permissions", ..])
        || matches!(path, ["vhosts", _, "permissions"])
        || method != Method::GET;
    if admin_only && !user.is_administrator() {
        // Known paths only: an unknown one is still 404 below.
        if known(path) {
            return Some(super::auth::unauthorized(NOT_ADMIN));
        }
    }
    let acting = user.name.clone();
    let response = match (method, path) {
        (&Method::GET, ["users"]) => {
            ok(&Value::Array(config.users.iter().map(user_json).collect()))
        }
        (&Method::GET, ["users", name]) => match config.users.iter().find(|u| u.name == *name) {
            Some(u) => ok(&user_json(u)),
            None => not_found(),
        },
        (&Method::PUT, ["users", name]) => match put_user(name, body, acting) {
            Ok(request) => changed(ctx.admin.access(request).await),
            Err(reason) => bad_request(&reason),
        },
        (&Method::DELETE, ["users", name]) => changed(
            ctx.admin
                .access(AccessRequest::DeleteUser {
                    name: (*name).to_owned(),
                    acting,
                })
                .await,
        ),
        (&Method::POST, ["users", "bulk-delete"]) => bulk_delete(ctx, body, acting).await,
        (&Method::GET, ["users", name, "permissions"]) => permissions(config, |u, _| u == *name),
        (&Method::GET, ["permissions"]) => permissions(config, |_, _| true),
        (&Method::GET, ["permissions", vhost, name]) => {
            match permissions_of(config, |u, v| u == *name && v == *vhost).pop() {
                Some(p) => ok(&p),
                None => not_found(),
            }
        }
        (&Method::PUT, ["permissions", vhost, name]) => {
            match put_permission(vhost, name, body, acting) {
                Ok(request) => changed(ctx.admin.access(request).await),
                Err(reason) => bad_request(&reason),
            }
        }
        (&Method::DELETE, ["permissions", vhost, name]) => changed(
            ctx.admin
                .access(AccessRequest::ClearPermission {
                    user: (*name).to_owned(),
                    vhost: (*vhost).to_owned(),
                    acting,
                })
                .await,
        ),
        (&Method::GET, ["vhosts"]) => ok(&Value::Array(
            config
                .vhosts
                .iter()
                .filter(|v| viewer.sees_vhost(v))
                .map(|v| vhost_json(config, v))
                .collect(),
        )),
        (&Method::GET, ["vhosts", name]) => {
            if !config.vhosts.iter().any(|v| v == name) {
                not_found()
            } else if !viewer.sees_vhost(name) {
                super::auth::unauthorized("User not authorised to access virtual host")
            } else {
                ok(&vhost_json(config, name))
            }
        }
        (&Method::GET, ["vhosts", name, "permissions"]) => {
            if !config.vhosts.iter().any(|v| v == name) {
                not_found()
            } else {
                permissions(config, |_, v| v == *name)
            }
        }
        (&Method::PUT, ["vhosts", name]) => match put_vhost(name, body, acting) {
            Ok(request) => changed(ctx.admin.access(request).await),
            Err(reason) => bad_request(&reason),
        },
        (&Method::DELETE, ["vhosts", name]) => changed(
            ctx.admin
                .access(AccessRequest::DeleteVhost {
                    name: (*name).to_owned(),
                    acting,
                })
                .await,
        ),
        (_, path) if known(path) => error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
        _ => return None,
    };
    Some(response)
}

/// Whether the path is one this module serves.
fn known(path: &[&str]) -> bool {
    matches!(
        path,
        ["users"]
            | ["users", _]
            | ["users", _, "permissions"]
            | ["permissions"]
            | ["permissions", _, _]
            | ["vhosts"]
            | ["vhosts", _]
            | ["vhosts", _, "permissions"]
    )
}

pub(super) fn ok(v: &Value) -> HttpResponse {
    respond(
        StatusCode::OK,
        "application/json",
        Bytes::from(v.to_string()),
    )
}

pub(super) fn not_found() -> HttpResponse {
    super::object_not_found()
}

pub(super) fn bad_request(reason: &str) -> HttpResponse {
    error(StatusCode::BAD_REQUEST, reason)
}

/// 201 for something created, 204 otherwise; the admin thread's refusals as RabbitMQ
/// answers them.
pub(super) fn changed(outcome: Result<Changed, AdminError>) -> HttpResponse {
    match outcome {
        Ok(Changed::Created) => respond(StatusCode::CREATED, "application/json", Bytes::new()),
        Ok(Changed::Updated | Changed::Deleted) => {
            respond(StatusCode::NO_CONTENT, "application/json", Bytes::new())
        }
        Err(AdminError::NotFound(_)) => not_found(),
        Err(AdminError::Invalid(reason)) => bad_request(&reason),
        Err(AdminError::Stopping) => {
            error(StatusCode::SERVICE_UNAVAILABLE, "the broker is stopping")
        }
    }
}

/// A user as RabbitMQ 3.10 lists it: never a plain-text password (such a user, from the
/// file, shows an empty hash, as a user without password does).
pub(super) fn user_json(u: &User) -> Value {
    json!({
        "name": u.name,
        "password_hash": u.password.encoded().unwrap_or_default(),
        "hashing_algorithm": u.password.algorithm(),
        "tags": u.tags,
        "limits": {},
    })
}

pub(super) fn vhost_json(config: &Config, name: &str) -> Value {
    let meta = config
        .vhost_metadata
        .iter()
        .find(|(v, _)| v == name)
        .map(|(_, m)| m.clone())
        .unwrap_or_default();
    json!({
        "name": name,
        "description": meta.description,
        "tags": meta.tags,
        "default_queue_type": "classic",
        "metadata": { "description": meta.description, "tags": meta.tags },
        "tracing": false,
    })
}

/// `PUT /api/vhosts/{name}`: `description` and `tags` (a comma-separated string or a
/// list), both optional; an empty body is a vhost without them.
fn put_vhost(name: &str, body: &Bytes, acting: String) -> Result<AccessRequest, String> {
    let map = if body.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else {
        object(body)?
    };
    Ok(AccessRequest::PutVhost {
        name: name.to_owned(),
        description: string_of(&map, "description")?.unwrap_or_default(),
        tags: tags_of(&map)?.unwrap_or_default(),
        acting,
    })
}

/// `tags` as RabbitMQ takes them: a comma-separated string or a list of strings.
fn tags_of(map: &Map<String, Value>) -> Result<Option<Vec<String>>, String> {
    match map.get("tags") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(crate::config::access::parse_tags(s))),
        Some(Value::Array(items)) => items
            .iter()
            .map(|t| match t {
                Value::String(s) => Ok(s.trim().to_owned()),
                other => Err(format!("a tag must be a string, not {other}")),
            })
            .filter(|t| t.as_ref().map_or(true, |t| !t.is_empty()))
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(other) => Err(format!("tags must be a string or a list, not {other}")),
    }
}

/// Every (user, vhost) grant in force that `keep` keeps, as RabbitMQ lists them: where
/// the file configures no permissions, every user's full grant on every vhost.
pub(super) fn permissions_of(config: &Config, keep: impl Fn(&str, &str) -> bool) -> Vec<Value> {
    let mut out = Vec::new();
    for user in &config.users {
        for vhost in &config.vhosts {
            if !keep(&user.name, vhost) {
                continue;
            }
            if let Some(grant) = config.permissions.grant(&user.name, vhost) {
                out.push(json!({
                    "user": user.name,
                    "vhost": vhost,
                    "configure": grant.configure.source(),
                    "write": grant.write.source(),
                    "read": grant.read.source(),
                }));
            }
        }
    }
    out
}

fn permissions(config: &Config, keep: impl Fn(&str, &str) -> bool) -> HttpResponse {
    ok(&Value::Array(permissions_of(config, keep)))
}

/// The JSON object of a request body (RabbitMQ answers a bad one 400).
pub(super) fn object(body: &Bytes) -> Result<Map<String, Value>, String> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err("body must be a JSON object".into()),
        Err(e) => Err(format!("body is not JSON: {e}")),
    }
}

fn string_of(map: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("{key} must be a string, not {other}")),
    }
}

/// `PUT /api/users/{name}`: `password` or `password_hash` (+ `hashing_algorithm`),
/// or neither (no password); `tags` as a comma-separated string or a list.
fn put_user(name: &str, body: &Bytes, acting: String) -> Result<AccessRequest, String> {
    let map = object(body)?;
    let password = string_of(&map, "password")?;
    let hash = string_of(&map, "password_hash")?;
    let password = match (password, hash) {
        (Some(_), Some(_)) => return Err("both_password_and_password_hash_are_provided".into()),
        (Some(p), None) => NewPassword::Plain(p),
        (None, Some(hash)) => NewPassword::Hash {
            hash,
            algorithm: string_of(&map, "hashing_algorithm")?,
        },
        (None, None) => NewPassword::None,
    };
    let tags = tags_of(&map)?.ok_or("tags_not_present")?;
    Ok(AccessRequest::PutUser {
        name: name.to_owned(),
        password,
        tags,
        acting,
    })
}

/// `PUT /api/permissions/{vhost}/{user}`: all three patterns, as RabbitMQ requires.
fn put_permission(
    vhost: &str,
    user: &str,
    body: &Bytes,
    acting: String,
) -> Result<AccessRequest, String> {
    let map = object(body)?;
    let missing: Vec<&str> = ["configure", "write", "read"]
        .into_iter()
        .filter(|k| !map.contains_key(*k))
        .collect();
    if !missing.is_empty() {
        return Err(format!("Missing key(s): {}", missing.join(", ")));
    }
    let get = |k: &str| string_of(&map, k).map(Option::unwrap_or_default);
    Ok(AccessRequest::SetPermission {
        user: user.to_owned(),
        vhost: vhost.to_owned(),
        configure: get("configure")?,
        write: get("write")?,
        read: get("read")?,
        acting,
    })
}

/// `POST /api/users/bulk-delete` with `{"users": [...]}`: each deleted in turn; users
/// that do not exist are skipped, as RabbitMQ skips them.
async fn bulk_delete(ctx: &Context, body: &Bytes, acting: String) -> HttpResponse {
    let map = match object(body) {
        Ok(m) => m,
        Err(reason) => return bad_request(&reason),
    };
    let Some(Value::Array(names)) = map.get("users") else {
        return bad_request("Missing key(s): users");
    };
    for name in names {
        let Value::String(name) = name else {
            return bad_request("users must be a list of names");
        };
        let request = AccessRequest::DeleteUser {
            name: name.clone(),
            acting: acting.clone(),
        };
        match ctx.admin.access(request).await {
            Ok(_) | Err(AdminError::NotFound(_)) => {}
            Err(e) => return changed(Err(e)),
        }
    }
    respond(StatusCode::NO_CONTENT, "application/json", Bytes::new())
}

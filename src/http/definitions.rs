//! Owns: the management API's definitions — `GET /api/definitions` and
//! `/api/definitions/{vhost}` (the export, in RabbitMQ 3.10's format) and `POST` of both
//! (the import), for administrators only. Export and import are built section by section,
//! one function each (users, vhosts, permissions, topic permissions, parameters, global
//! parameters, policies, queues, exchanges, bindings), so a section sluice gains later
//! is wired in as one more function.
//!
//! An import is read whole first (`crate::definitions`, the parser `sluice
//! import-definitions` uses too: a malformed item refuses the import before anything
//! changes), then applied in RabbitMQ's order: users, vhosts, permissions and policies
//! through the admin thread (`AccessRequest`, `PolicyRequest`), queues, exchanges and bindings through the
//! coordinator as declares are (`topology`). It stops at the first item refused and
//! answers 400 naming it (BRK-1022); the items before it stay applied, as in RabbitMQ.
//! As RabbitMQ's import does, a queue or exchange that exists already is passed over
//! (not redeclared, so an import of an export into the same broker is no refusal), and
//! so are the default exchange and `amq.` names.
//! A full import logs BRK-1021 with its counts.
//!
//! Does not: parse the format itself (`crate::definitions`), hold state, or change
//! anything except through the admin thread and the coordinator.

use std::collections::HashSet;

use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

use crate::admin::{AccessRequest, AdminError, NewPassword};
use crate::config::Config;
use crate::definitions::{self as defs, BindingItem, ExchangeItem, Item, ItemError, QueueItem};
use crate::ops::definitions_event::{DefinitionsEvent, ImportCounts};
use crate::shard::inbox::observe::VhostView;

use super::access::{permissions_of, user_json, vhost_json};
use super::auth::unauthorized;
use super::topology::{self, NOT_ADMIN};
use super::{error, respond, unavailable, Call, Context, HttpResponse};

/// The RabbitMQ release whose definitions format this is (`rabbit_version`).
pub const FORMAT_VERSION: &str = "3.10.0";

/// Routes `/api/definitions` and `/api/definitions/{vhost}`; `None` for other paths.
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
    let vhost = match path {
        ["definitions"] => None,
        ["definitions", vhost] => Some(*vhost),
        _ => return None,
    };
    if !user.is_administrator() {
        return Some(unauthorized(NOT_ADMIN));
    }
    if let Some(v) = vhost {
        if config.vhost_index(v).is_none() {
            // RabbitMQ's answers: 400 to an export, 404 to an import.
            let status = if *method == Method::POST {
                StatusCode::NOT_FOUND
            } else {
                StatusCode::BAD_REQUEST
            };
            return Some(error(status, "vhost_not_found"));
        }
    }
    Some(match *method {
        Method::GET => export(ctx, config, vhost).await,
        Method::POST => import(ctx, body, vhost, &user.name).await,
        _ => error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
    })
}

// ---- export ----

async fn export(ctx: &Context, config: &Config, vhost: Option<&str>) -> HttpResponse {
    let Some(dir) = ctx.directory().await else {
        return unavailable();
    };
    let views: Vec<&VhostView> = dir
        .iter()
        .filter(|v| vhost.is_none_or(|h| v.vhost == h))
        .collect();
    let mut out = serde_json::Map::new();
    out.insert("rabbit_version".into(), json!(FORMAT_VERSION));
    out.insert("rabbitmq_version".into(), json!(FORMAT_VERSION));
    out.insert("product_name".into(), json!("sluice"));
    out.insert("product_version".into(), json!(env!("CARGO_PKG_VERSION")));
    if vhost.is_none() {
        out.insert("users".into(), export_users(config));
        out.insert("vhosts".into(), export_vhosts(config));
        out.insert("permissions".into(), export_permissions(config));
        out.insert("topic_permissions".into(), json!([]));
        out.insert("global_parameters".into(), json!([]));
    }
    out.insert("parameters".into(), json!([]));
    out.insert("policies".into(), export_policies(config, vhost));
    out.insert("queues".into(), export_queues(&views));
    out.insert("exchanges".into(), export_exchanges(&views));
    out.insert("bindings".into(), export_bindings(&views));
    if vhost.is_some() {
        // A vhost's export names no vhost in its items (RabbitMQ's format).
        for section in ["queues", "exchanges", "bindings"] {
            if let Some(Value::Array(items)) = out.get_mut(section) {
                for item in items.iter_mut().filter_map(Value::as_object_mut) {
                    item.remove("vhost");
                }
            }
        }
    }
    respond(
        StatusCode::OK,
        "application/json",
        Bytes::from(Value::Object(out).to_string()),
    )
}

/// The users with a hash each, also those the file gives a plain-text password (see
/// `Password::exported`), so that the export imported elsewhere keeps every password.
fn export_users(config: &Config) -> Value {
    let users = config.users.iter().map(|u| {
        let mut json = user_json(u);
        json["password_hash"] = json!(u.password.exported());
        json
    });
    Value::Array(users.collect())
}

fn export_vhosts(config: &Config) -> Value {
    Value::Array(
        config
            .vhosts
            .iter()
            .map(|v| vhost_json(config, v))
            .collect(),
    )
}

fn export_permissions(config: &Config) -> Value {
    Value::Array(permissions_of(config, |_, _| true))
}

/// The policies in force (of one vhost, without the vhost field, for a vhost's export).
fn export_policies(config: &Config, vhost: Option<&str>) -> Value {
    let Value::Array(all) = crate::admin::policy::export(config) else {
        return json!([]);
    };
    let Some(vhost) = vhost else {
        return Value::Array(all);
    };
    let mine = all
        .into_iter()
        .filter(|p| p["vhost"] == vhost)
        .map(|mut p| {
            if let Some(item) = p.as_object_mut() {
                item.remove("vhost");
            }
            p
        });
    Value::Array(mine.collect())
}

/// Every queue that is not exclusive (an exclusive one cannot be restored), durable or
/// not, as RabbitMQ exports them.
fn export_queues(views: &[&VhostView]) -> Value {
    let items = views.iter().flat_map(|v| {
        v.queues.iter().filter(|q| !q.exclusive).map(|q| {
            json!({
            "name": q.name, "vhost": v.vhost, "type": "classic", "durable": q.durable,
                "auto_delete": q.auto_delete,
                "arguments": super::api::json::table_json(&q.arguments),
            })
        })
    });
    Value::Array(items.collect())
}

/// Every exchange but the default one and the broker's own (`amq.*`), as RabbitMQ 3.10
/// exports them (durable or not, internal ones too).
fn export_exchanges(views: &[&VhostView]) -> Value {
    let items = views.iter().flat_map(|v| {
        v.exchanges
            .iter()
            .filter(|e| !e.name.is_empty() && !e.name.starts_with("amq."))
            .map(|e| {
                json!({
                    "name": e.name, "vhost": v.vhost, "type": e.kind, "durable": e.durable,
                    "auto_delete": e.auto_delete, "internal": e.internal,
                    "arguments": super::api::json::table_json(&e.arguments),
                })
            })
    });
    Value::Array(items.collect())
}

/// The explicit bindings whose ends are exported or the broker's own (never the default
/// exchange's implicit ones, nor those to an exclusive queue), as RabbitMQ 3.10 exports
/// them.
fn export_bindings(views: &[&VhostView]) -> Value {
    let items = views.iter().flat_map(|v| {
        let exported_queue = |name: &str| v.queues.iter().any(|q| q.name == name && !q.exclusive);
        v.bindings
            .iter()
            .filter(move |b| {
                !b.source.is_empty()
                    && if b.destination_type == "queue" {
                        exported_queue(&b.destination)
                    } else {
                        !b.destination.is_empty()
                    }
            })
            .map(|b| {
                json!({
                    "source": b.source, "vhost": v.vhost, "destination": b.destination,
                    "destination_type": b.destination_type, "routing_key": b.routing_key,
                    "arguments": super::api::json::table_json(&b.arguments),
                })
            })
    });
    Value::Array(items.collect())
}

// ---- import ----

/// An import read whole: every section's items.
struct Read {
    users: Vec<defs::UserDef>,
    vhosts: Vec<defs::VhostDef>,
    permissions: Vec<defs::PermissionDef>,
    /// RabbitMQ's policy objects, each with its vhost (checked by `admin::policy`).
    policies: Vec<Value>,
    queues: Vec<QueueItem>,
    exchanges: Vec<ExchangeItem>,
    bindings: Vec<BindingItem>,
}

/// The items of a section, or the first that cannot be read.
fn all<T>(items: Vec<Item<T>>) -> Result<Vec<T>, String> {
    items
        .into_iter()
        .collect::<Result<Vec<T>, ItemError>>()
        .map_err(|e| e.to_string())
}

/// The sections sluice holds nothing of must be empty: an item of them is refused (it
/// would be lost). RabbitMQ's exports always carry the cluster's name and id as global
/// parameters; those describe the source cluster and are passed over.
fn refuse_unheld(root: &Value, vhost: Option<&str>) -> Result<(), String> {
    let mut sections = vec!["parameters"];
    if vhost.is_none() {
        sections.extend(["topic_permissions", "global_parameters"]);
    }
    for section in sections {
        for (i, item) in defs::others(root, section).into_iter().enumerate() {
            let item = item.map_err(|e| e.to_string())?;
            if section == "global_parameters"
                && ["cluster_name", "internal_cluster_id"].contains(&item.name.as_str())
            {
                continue;
            }
            return Err(format!(
                "{section}[{i}] '{}': {section} are not supported by sluice",
                item.name
            ));
        }
    }
    Ok(())
}

/// Reads the body; `vhost` set: a vhost's import (queues, exchanges, bindings into it;
/// the items' own `vhost` is overridden, as RabbitMQ does).
fn read(body: &Bytes, vhost: Option<&str>) -> Result<Read, String> {
    // RabbitMQ's reason for a body that is not JSON; an empty body imports nothing.
    let root: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(body).map_err(|_| "failed_to_parse_json".to_owned())?
    };
    defs::root(&root)?;
    refuse_unheld(&root, vhost)?;
    let mut read = Read {
        users: Vec::new(),
        vhosts: Vec::new(),
        permissions: Vec::new(),
        policies: match root.get("policies") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(list)) => list.clone(),
            Some(_) => return Err("policies is not a list".into()),
        },
        queues: all(defs::queues(&root))?,
        exchanges: all(defs::exchanges(&root))?,
        bindings: all(defs::bindings(&root))?,
    };
    match vhost {
        None => {
            read.users = all(defs::users(&root))?;
            read.vhosts = all(defs::vhosts(&root))?;
            read.permissions = all(defs::permissions(&root))?;
        }
        Some(v) => {
            for policy in read.policies.iter_mut().filter_map(Value::as_object_mut) {
                policy.insert("vhost".into(), json!(v));
            }
            read.queues.iter_mut().for_each(|q| q.vhost = v.to_owned());
            read.exchanges
                .iter_mut()
                .for_each(|x| x.vhost = v.to_owned());
            read.bindings
                .iter_mut()
                .for_each(|b| b.vhost = v.to_owned());
        }
    }
    Ok(read)
}

async fn import(ctx: &Context, body: &Bytes, vhost: Option<&str>, acting: &str) -> HttpResponse {
    let mut counts = ImportCounts::default();
    let outcome = match read(body, vhost) {
        Ok(read) => apply(ctx, read, acting, &mut counts).await,
        Err(reason) => Err(reason),
    };
    let vhost = vhost.map(str::to_owned);
    match outcome {
        Ok(()) => {
            DefinitionsEvent::Imported {
                vhost,
                counts,
                acting: acting.to_owned(),
            }
            .emit();
            respond(StatusCode::NO_CONTENT, "application/json", Bytes::new())
        }
        Err(reason) => {
            DefinitionsEvent::ImportRefused {
                vhost,
                reason: reason.clone(),
                applied: counts,
                acting: acting.to_owned(),
            }
            .emit();
            error(StatusCode::BAD_REQUEST, &reason)
        }
    }
}

/// Applies the sections in RabbitMQ's order, counting what was applied; the first
/// refusal ends it.
async fn apply(
    ctx: &Context,
    read: Read,
    acting: &str,
    counts: &mut ImportCounts,
) -> Result<(), String> {
    import_users(ctx, read.users, acting, counts).await?;
    import_vhosts(ctx, read.vhosts, acting, counts).await?;
    import_permissions(ctx, read.permissions, acting, counts).await?;
    import_policies(ctx, &read.policies, acting, counts).await?;
    import_queues(ctx, read.queues, counts).await?;
    import_exchanges(ctx, read.exchanges, counts).await?;
    import_bindings(ctx, read.bindings, counts).await
}

/// The admin thread's refusal of an item, named.
fn admin_refused(section: &str, index: usize, what: &str, e: AdminError) -> String {
    let reason = match e {
        AdminError::NotFound(r) | AdminError::Invalid(r) => r,
        AdminError::Stopping => "the broker is stopping".to_owned(),
    };
    format!("{section}[{index}] {what}: {reason}")
}

async fn import_policies(
    ctx: &Context,
    policies: &[Value],
    acting: &str,
    counts: &mut ImportCounts,
) -> Result<(), String> {
    for (i, entry) in policies.iter().enumerate() {
        let field = |key: &str| entry.get(key).and_then(Value::as_str).unwrap_or_default();
        let what = format!("'{}' in vhost '{}'", field("name"), field("vhost"));
        let requests = crate::admin::policy::import_requests(std::slice::from_ref(entry), acting)
            .map_err(|e| admin_refused("policies", i, &what, e))?;
        for request in requests {
            ctx.admin
                .policy(request)
                .await
                .map_err(|e| admin_refused("policies", i, &what, e))?;
        }
        counts.policies += 1;
    }
    Ok(())
}

async fn import_users(
    ctx: &Context,
    users: Vec<defs::UserDef>,
    acting: &str,
    counts: &mut ImportCounts,
) -> Result<(), String> {
    for (i, u) in users.into_iter().enumerate() {
        let what = format!("'{}'", u.name);
        let password = if u.password_hash.is_empty() {
            NewPassword::None
        } else {
            NewPassword::Hash {
                hash: u.password_hash,
                algorithm: u.hashing_algorithm,
            }
        };
        let request = AccessRequest::PutUser {
            name: u.name,
            password,
            tags: u.tags,
            acting: acting.to_owned(),
        };
        ctx.admin
            .access(request)
            .await
            .map_err(|e| admin_refused("users", i, &what, e))?;
        counts.users += 1;
    }
    Ok(())
}

async fn import_vhosts(
    ctx: &Context,
    vhosts: Vec<defs::VhostDef>,
    acting: &str,
    counts: &mut ImportCounts,
) -> Result<(), String> {
    for (i, v) in vhosts.into_iter().enumerate() {
        let what = format!("'{}'", v.name);
        let request = AccessRequest::PutVhost {
            name: v.name,
            description: v.description,
            tags: v.tags,
            acting: acting.to_owned(),
        };
        ctx.admin
            .access(request)
            .await
            .map_err(|e| admin_refused("vhosts", i, &what, e))?;
        counts.vhosts += 1;
    }
    Ok(())
}

async fn import_permissions(
    ctx: &Context,
    permissions: Vec<defs::PermissionDef>,
    acting: &str,
    counts: &mut ImportCounts,
) -> Result<(), String> {
    for (i, p) in permissions.into_iter().enumerate() {
        let what = format!("user '{}' on vhost '{}'", p.user, p.vhost);
        let request = AccessRequest::SetPermission {
            user: p.user,
            vhost: p.vhost,
            configure: p.configure,
            write: p.write,
            read: p.read,
            acting: acting.to_owned(),
        };
        ctx.admin
            .access(request)
            .await
            .map_err(|e| admin_refused("permissions", i, &what, e))?;
        counts.permissions += 1;
    }
    Ok(())
}

/// The vhost's slot in the configuration in force now (vhosts imported above count).
fn slot(ctx: &Context, vhost: &str) -> Result<usize, String> {
    ctx.live
        .borrow()
        .vhost_index(vhost)
        .ok_or_else(|| format!("vhost '{vhost}' does not exist"))
}

/// Sends one declare to the coordinator; the refusal as the item's reason.
async fn declare(
    ctx: &Context,
    req: Result<crate::shard::inbox::ControlRequest, String>,
) -> Result<(), String> {
    match topology::control(ctx, req?).await {
        Some(Ok(_)) => Ok(()),
        Some(Err(e)) => Err(e.to_string()),
        None => Err("a shard did not answer".to_owned()),
    }
}

/// The (vhost, name) of every queue (`queues`) or exchange in the directory now.
async fn existing(ctx: &Context, queues: bool) -> Result<HashSet<(String, String)>, String> {
    let dir = ctx
        .directory()
        .await
        .ok_or_else(|| "a shard did not answer".to_owned())?;
    let mut names = HashSet::new();
    for v in dir {
        if queues {
            names.extend(v.queues.into_iter().map(|q| (v.vhost.clone(), q.name)));
        } else {
            names.extend(v.exchanges.into_iter().map(|x| (v.vhost.clone(), x.name)));
        }
    }
    Ok(names)
}

/// Whether an item is passed over as RabbitMQ's import passes it over: an object that
/// exists already (whatever its properties; it is not redeclared), or one the broker
/// owns (the default exchange, an `amq.` name).
fn passed_over(existing: &HashSet<(String, String)>, vhost: &str, name: &str) -> bool {
    name.is_empty()
        || name.starts_with("amq.")
        || existing.contains(&(vhost.to_owned(), name.to_owned()))
}

async fn import_queues(
    ctx: &Context,
    queues: Vec<QueueItem>,
    counts: &mut ImportCounts,
) -> Result<(), String> {
    let existing = existing(ctx, true).await?;
    for (i, q) in queues.into_iter().enumerate() {
        if passed_over(&existing, &q.vhost, &q.name) {
            continue;
        }
        let what = format!("'{}' in vhost '{}'", q.name, q.vhost);
        let req = if q.exclusive {
            Err("an exclusive queue cannot be imported".to_owned())
        } else {
            slot(ctx, &q.vhost).and_then(|idx| {
                topology::queue_declare(idx, &q.name, q.durable, q.auto_delete, q.arguments)
                    .map_err(|e| e.to_string())
            })
        };
        declare(ctx, req)
            .await
            .map_err(|reason| format!("queues[{i}] {what}: {reason}"))?;
        counts.queues += 1;
    }
    Ok(())
}

async fn import_exchanges(
    ctx: &Context,
    exchanges: Vec<ExchangeItem>,
    counts: &mut ImportCounts,
) -> Result<(), String> {
    let existing = existing(ctx, false).await?;
    for (i, x) in exchanges.into_iter().enumerate() {
        if passed_over(&existing, &x.vhost, &x.name) {
            continue;
        }
        let what = format!("'{}' in vhost '{}'", x.name, x.vhost);
        let req = slot(ctx, &x.vhost).and_then(|idx| {
            topology::exchange_declare(
                idx,
                &x.name,
                &x.kind,
                x.durable,
                x.auto_delete,
                x.internal,
                x.arguments,
            )
            .map_err(|e| e.to_string())
        });
        declare(ctx, req)
            .await
            .map_err(|reason| format!("exchanges[{i}] {what}: {reason}"))?;
        counts.exchanges += 1;
    }
    Ok(())
}

async fn import_bindings(
    ctx: &Context,
    bindings: Vec<BindingItem>,
    counts: &mut ImportCounts,
) -> Result<(), String> {
    for (i, b) in bindings.into_iter().enumerate() {
        let what = format!(
            "'{}' -> '{}' in vhost '{}'",
            b.source, b.destination, b.vhost
        );
        let req = slot(ctx, &b.vhost).and_then(|idx| {
            topology::bind_request(
                idx,
                &b.source,
                b.to_queue,
                &b.destination,
                &b.routing_key,
                b.arguments,
                false,
            )
        });
        declare(ctx, req)
            .await
            .map_err(|reason| format!("bindings[{i}] {what}: {reason}"))?;
        counts.bindings += 1;
    }
    Ok(())
}

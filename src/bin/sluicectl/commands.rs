//! Owns: what each object command sends (paths, bodies) and prints — lists, queues,
//! exchanges, bindings, users, vhosts, permissions, limits, policies, definitions, publish
//! and get.

use serde_json::{json, Map, Value};

use crate::args::{Args, Binding, Command, DestinationType, LimitScope};
use crate::client::{enc, Client, Error};
use crate::tables::{self, pairs, table};

/// The vhost of an object command: --vhost, else `/`.
pub fn vhost(args: &Args) -> &str {
    args.vhost.as_deref().unwrap_or("/")
}

fn list(c: &Client, args: &Args, path: &str, columns: &[(&str, &str)]) -> Result<String, Error> {
    let mut value = c.get(path)?;
    if let (Some(v), Value::Array(items)) = (&args.vhost, &mut value) {
        items.retain(|i| i["vhost"].as_str().is_none_or(|x| x == v));
    }
    if args.json {
        return pretty(&value);
    }
    match &value {
        Value::Array(items) => Ok(table(items, columns)),
        other => Ok(pairs(other)),
    }
}

pub fn pretty(v: &Value) -> Result<String, Error> {
    serde_json::to_string_pretty(v)
        .map(|s| s + "\n")
        .map_err(|e| Error::Other(e.to_string()))
}

fn read_input(file: &str) -> Result<Vec<u8>, Error> {
    if file == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
            .map_err(|e| Error::Other(format!("stdin: {e}")))?;
        return Ok(buf);
    }
    std::fs::read(file).map_err(|e| Error::Other(format!("cannot read {file}: {e}")))
}

/// `KEY=VALUE` pairs as a JSON object (VALUE as JSON if it parses, else a string).
fn arguments(pairs: &[String]) -> Result<Map<String, Value>, Error> {
    let mut map = Map::new();
    for p in pairs {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| Error::Other(format!("--arg {p}: expected KEY=VALUE")))?;
        let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_owned()));
        map.insert(k.to_owned(), value);
    }
    Ok(map)
}

fn binding_path(vh: &str, b: &Binding) -> String {
    let kind = match b.destination_type {
        DestinationType::Queue => "q",
        DestinationType::Exchange => "e",
    };
    format!(
        "/api/bindings/{}/e/{}/{kind}/{}",
        enc(vh),
        enc(&b.source),
        enc(&b.destination)
    )
}

fn limit_path(scope: LimitScope, name: &str, limit: &str) -> String {
    let kind = match scope {
        LimitScope::Vhost => "vhost-limits",
        LimitScope::User => "user-limits",
    };
    format!("/api/{kind}/{}/{}", enc(name), enc(limit))
}

/// Runs an object command; None for the commands `health` runs.
pub fn run(c: &Client, args: &Args) -> Option<Result<String, Error>> {
    let vh = vhost(args);
    let done = |r: Result<Value, Error>| r.map(|_| String::new());
    Some(match &args.command {
        Command::Overview => list(c, args, "/api/overview", &[]),
        Command::Queues => list(c, args, "/api/queues", tables::QUEUES),
        Command::Connections => list(c, args, "/api/connections", tables::CONNECTIONS),
        Command::Channels => list(c, args, "/api/channels", tables::CHANNELS),
        Command::Consumers => list(c, args, "/api/consumers", tables::CONSUMERS),
        Command::Exchanges => list(c, args, "/api/exchanges", tables::EXCHANGES),
        Command::Bindings => list(c, args, "/api/bindings", tables::BINDINGS),
        Command::Federation => match &args.vhost {
            None => list(c, args, "/api/federation-links", tables::FEDERATION),
            Some(v) => list(
                c,
                args,
                &format!("/api/federation-links/{}", enc(v)),
                tables::FEDERATION,
            ),
        },
        Command::Users => list(c, args, "/api/users", tables::USERS),
        Command::Vhosts => list(c, args, "/api/vhosts", tables::VHOSTS),
        Command::Permissions => list(c, args, "/api/permissions", tables::PERMISSIONS),
        Command::CloseConnection { name } => {
            done(c.call("DELETE", &format!("/api/connections/{}", enc(name)), None))
        }
        Command::Purge { queue } => done(c.call(
            "DELETE",
            &format!("/api/queues/{}/{}/contents", enc(vh), enc(queue)),
            None,
        )),
        Command::DeclareQueue {
            name,
            durable,
            auto_delete,
            args: kv,
        } => arguments(kv).and_then(|a| {
            let body = json!({"durable": durable, "auto_delete": auto_delete, "arguments": a});
            let path = format!("/api/queues/{}/{}", enc(vh), enc(name));
            done(c.call("PUT", &path, Some(&body)))
        }),
        Command::DeleteQueue { queue } => done(c.call(
            "DELETE",
            &format!("/api/queues/{}/{}", enc(vh), enc(queue)),
            None,
        )),
        Command::DeclareExchange {
            name,
            kind,
            durable,
        } => {
            let body = json!({"type": kind, "durable": durable});
            let path = format!("/api/exchanges/{}/{}", enc(vh), enc(name));
            done(c.call("PUT", &path, Some(&body)))
        }
        Command::DeleteExchange { name } => done(c.call(
            "DELETE",
            &format!("/api/exchanges/{}/{}", enc(vh), enc(name)),
            None,
        )),
        Command::Bind(b) => {
            let body = json!({"routing_key": b.routing_key, "arguments": {}});
            done(c.call("POST", &binding_path(vh, b), Some(&body)))
        }
        Command::Unbind(b) => unbind(c, vh, b),
        Command::AddUser {
            name,
            new_password,
            tags,
        } => {
            let body = json!({"password": new_password, "tags": tags});
            done(c.call("PUT", &format!("/api/users/{}", enc(name)), Some(&body)))
        }
        Command::DeleteUser { name } => {
            done(c.call("DELETE", &format!("/api/users/{}", enc(name)), None))
        }
        Command::AddVhost { name } => {
            done(c.call("PUT", &format!("/api/vhosts/{}", enc(name)), None))
        }
        Command::DeleteVhost { name } => {
            done(c.call("DELETE", &format!("/api/vhosts/{}", enc(name)), None))
        }
        Command::SetPermissions {
            target,
            configure,
            write,
            read,
        } => {
            let body = json!({"configure": configure, "write": write, "read": read});
            let path = format!("/api/permissions/{}/{}", enc(vh), enc(target));
            done(c.call("PUT", &path, Some(&body)))
        }
        Command::ClearPermissions { target } => done(c.call(
            "DELETE",
            &format!("/api/permissions/{}/{}", enc(vh), enc(target)),
            None,
        )),
        Command::SetLimit {
            scope,
            name,
            limit,
            value,
        } => done(c.call(
            "PUT",
            &limit_path(*scope, name, limit),
            Some(&json!({ "value": value })),
        )),
        Command::ClearLimit { scope, name, limit } => {
            done(c.call("DELETE", &limit_path(*scope, name, limit), None))
        }
        Command::Policies => list(c, args, "/api/policies", tables::POLICIES),
        Command::SetPolicy {
            name,
            pattern,
            definition,
            apply_to,
            priority,
        } => serde_json::from_str::<Value>(definition)
            .map_err(|e| Error::Other(format!("DEFINITION is not JSON: {e}")))
            .and_then(|definition| {
                let body = json!({"pattern": pattern, "definition": definition,
                                  "apply-to": apply_to, "priority": priority});
                let path = format!("/api/policies/{}/{}", enc(vh), enc(name));
                done(c.call("PUT", &path, Some(&body)))
            }),
        Command::ClearPolicy { name } => done(c.call(
            "DELETE",
            &format!("/api/policies/{}/{}", enc(vh), enc(name)),
            None,
        )),
        Command::Export { file } => export(c, file),
        Command::Import { file } => read_input(file).and_then(|bytes| {
            let defs: Value = serde_json::from_slice(&bytes)
                .map_err(|e| Error::Other(format!("{file}: not JSON: {e}")))?;
            done(c.call("POST", "/api/definitions", Some(&defs)))
        }),
        Command::Publish {
            exchange,
            routing_key,
            payload,
            payload_file,
            mandatory,
        } => publish(
            c,
            args,
            exchange,
            routing_key,
            payload,
            payload_file,
            *mandatory,
        ),
        Command::Get {
            queue,
            count,
            ackmode,
        } => {
            let body = json!({"count": count, "ackmode": ackmode, "encoding": "auto"});
            let path = format!("/api/queues/{}/{}/get", enc(vh), enc(queue));
            c.call("POST", &path, Some(&body))
                .and_then(|v| match (&v, args.json) {
                    (Value::Array(items), false) => Ok(table(items, tables::MESSAGES)),
                    _ => pretty(&v),
                })
        }
        _ => return None,
    })
}

fn unbind(c: &Client, vh: &str, b: &Binding) -> Result<String, Error> {
    let path = binding_path(vh, b);
    let listed = c.get(&path)?;
    let key = listed
        .as_array()
        .into_iter()
        .flatten()
        .find(|x| x["routing_key"].as_str() == Some(b.routing_key.as_str()))
        .and_then(|x| x["properties_key"].as_str().map(str::to_owned))
        .ok_or_else(|| Error::Api {
            what: format!("GET {path}"),
            status: 404,
            reason: format!("no binding with routing key '{}'", b.routing_key),
        })?;
    c.call("DELETE", &format!("{path}/{}", enc(&key)), None)
        .map(|_| String::new())
}

fn export(c: &Client, file: &str) -> Result<String, Error> {
    let text = pretty(&c.get("/api/definitions")?)?;
    if file == "-" {
        return Ok(text);
    }
    std::fs::write(file, text).map_err(|e| Error::Other(format!("cannot write {file}: {e}")))?;
    Ok(String::new())
}

fn publish(
    c: &Client,
    args: &Args,
    exchange: &str,
    routing_key: &str,
    payload: &Option<String>,
    payload_file: &Option<String>,
    mandatory: bool,
) -> Result<String, Error> {
    let (payload, encoding) = match (payload, payload_file) {
        (Some(p), _) => (p.clone(), "string"),
        (None, Some(f)) => {
            let bytes = read_input(f)?;
            match String::from_utf8(bytes) {
                Ok(s) => (s, "string"),
                Err(e) => {
                    use base64::Engine;
                    let b = base64::engine::general_purpose::STANDARD.encode(e.into_bytes());
                    (b, "base64")
                }
            }
        }
        (None, None) => return Err(Error::Other("--payload or --payload-file".into())),
    };
    let body = json!({
        "properties": {}, "routing_key": routing_key, "payload": payload,
        "payload_encoding": encoding,
    });
    let path = format!(
        "/api/exchanges/{}/{}/publish",
        enc(vhost(args)),
        enc(if exchange.is_empty() {
            "amq.default"
        } else {
            exchange
        })
    );
    let reply = c.call("POST", &path, Some(&body))?;
    let routed = reply["routed"].as_bool() == Some(true);
    if mandatory && !routed {
        return Err(Error::Other("not routed".into()));
    }
    if args.json {
        return pretty(&reply);
    }
    Ok(if routed { "routed\n" } else { "not routed\n" }.to_owned())
}

//! Owns: reading a RabbitMQ definitions export (`rabbitmqctl export_definitions`, the
//! management API's `/api/definitions`) — users, vhosts and permissions become `[auth]`
//! and `[vhosts]` configuration entries; durable exchanges, queues and bindings are
//! added to a data dir's definitions log — and the account of everything not imported.
//!
//! Does not: encode definitions records (`store::definitions` does: the log is loaded,
//! extended and rewritten with the store's own snapshot), or run next to a broker (the
//! data dir's lock is taken first).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::model::exchange::{ExchangeDef, ExchangeKind};
use crate::model::ids::QueueId;
use crate::model::routing::PREDECLARED;
use crate::policy::queue_args;
use crate::protocol::table::{FieldTable, FieldValue};
use crate::protocol::{LongStr, ShortStr};
use crate::store::definitions::{self, DurableBinding, DurableQueue};

use crate::auth::password::Password;

/// What was left out, by kind, each with the reason.
#[derive(Debug, Default)]
pub struct Skipped {
    pub by_kind: BTreeMap<String, Vec<String>>,
}

impl Skipped {
    /// Notes one item of `kind` left out, with why.
    pub fn add(&mut self, kind: &str, what: String) {
        self.by_kind.entry(kind.to_owned()).or_default().push(what);
    }

    /// One line per kind (`3 policies`), then one per item with its reason.
    pub fn report(&self) -> String {
        let mut out = String::new();
        if self.by_kind.is_empty() {
            return "nothing skipped\n".to_owned();
        }
        let counts: Vec<String> = self
            .by_kind
            .iter()
            .map(|(kind, items)| format!("{} {kind}", items.len()))
            .collect();
        out.push_str(&format!("skipped: {}\n", counts.join(", ")));
        for (kind, items) in &self.by_kind {
            for item in items {
                out.push_str(&format!("  {kind}: {item}\n"));
            }
        }
        out
    }
}

/// The configuration entries made from an export.
#[derive(Debug)]
pub struct Conversion {
    /// `[vhosts]` and `[auth]` TOML, ready to paste into `config/sluice.toml`.
    pub toml: String,
    /// The vhosts defined in the export.
    pub vhosts: Vec<String>,
}

/// Top-level keys of an export this import reads.
const READ: [&str; 7] = [
    "users",
    "vhosts",
    "permissions",
    "exchanges",
    "queues",
    "bindings",
    "rabbit_version",
];
/// Version keys that carry no definitions.
const INFORMATIONAL: [&str; 3] = ["rabbitmq_version", "product_name", "product_version"];

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn flag(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn list<'a>(root: &'a Value, key: &str) -> &'a [Value] {
    root.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn quoted(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// Users, vhosts and permissions as configuration; everything else that is not a
/// queue, exchange or binding is counted in `skipped`.
pub fn convert(root: &Value, skipped: &mut Skipped) -> Result<Conversion, String> {
    let obj = root
        .as_object()
        .ok_or("the file is not a JSON object (a RabbitMQ definitions export)")?;
    for (key, value) in obj {
        if READ.contains(&key.as_str()) || INFORMATIONAL.contains(&key.as_str()) {
            continue;
        }
        match value.as_array() {
            Some(items) => {
                for item in items {
                    let name = ["name", "user", "vhost"]
                        .iter()
                        .map(|k| text(item, k))
                        .find(|n| !n.is_empty())
                        .unwrap_or("(unnamed)");
                    skipped.add(key, format!("'{name}': not imported by sluice"));
                }
            }
            None => skipped.add(key, "not imported by sluice".into()),
        }
    }
    let vhosts: Vec<String> = list(root, "vhosts")
        .iter()
        .map(|v| text(v, "name").to_owned())
        .filter(|n| !n.is_empty())
        .collect();
    if vhosts.is_empty() {
        return Err("the export defines no vhosts".into());
    }
    let mut toml = String::from("[vhosts]\n");
    let names: Vec<String> = vhosts.iter().map(|v| quoted(v)).collect();
    toml.push_str(&format!(
        "names = [{}]\n\n[auth]\nusers = [\n",
        names.join(", ")
    ));
    let mut users = Vec::new();
    for u in list(root, "users") {
        let name = text(u, "name");
        let hash = text(u, "password_hash");
        let algorithm = u.get("hashing_algorithm").and_then(Value::as_str);
        if hash.is_empty() {
            skipped.add(
                "users",
                format!("'{name}': no password hash (a passwordless user)"),
            );
            continue;
        }
        if let Err(e) = Password::from_hash(hash, algorithm) {
            skipped.add("users", format!("'{name}': {e}"));
            continue;
        }
        if u.get("limits")
            .and_then(Value::as_object)
            .is_some_and(|l| !l.is_empty())
        {
            skipped.add("user limits", format!("'{name}': not imported by sluice"));
        }
        let tags: Vec<String> = match u.get("tags") {
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(quoted).collect(),
            Some(Value::String(s)) => s
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(quoted)
                .collect(),
            _ => Vec::new(),
        };
        let mut entry = format!(
            "  {{ name = {}, password_hash = {}",
            quoted(name),
            quoted(hash)
        );
        if let Some(alg) = algorithm {
            entry.push_str(&format!(", hashing_algorithm = {}", quoted(alg)));
        }
        entry.push_str(&format!(", tags = [{}] }},\n", tags.join(", ")));
        toml.push_str(&entry);
        users.push(name.to_owned());
    }
    toml.push_str("]\npermissions = [\n");
    for p in list(root, "permissions") {
        let (user, vhost) = (text(p, "user"), text(p, "vhost"));
        if !users.iter().any(|u| u == user) {
            skipped.add(
                "permissions",
                format!("user '{user}' on vhost '{vhost}': the user was not imported"),
            );
            continue;
        }
        if !vhosts.iter().any(|v| v == vhost) {
            skipped.add(
                "permissions",
                format!("user '{user}' on vhost '{vhost}': the vhost is not defined"),
            );
            continue;
        }
        // RabbitMQ's patterns are PCRE; one this broker's regex syntax refuses (a
        // lookaround, a backreference) would stop the broker at start.
        if let Err(e) = crate::auth::permissions::Grant::compile(
            text(p, "configure"),
            text(p, "write"),
            text(p, "read"),
        ) {
            skipped.add(
                "permissions",
                format!("user '{user}' on vhost '{vhost}': {e}"),
            );
            continue;
        }
        toml.push_str(&format!(
            "  {{ user = {}, vhost = {}, configure = {}, write = {}, read = {} }},\n",
            quoted(user),
            quoted(vhost),
            quoted(text(p, "configure")),
            quoted(text(p, "write")),
            quoted(text(p, "read")),
        ));
    }
    toml.push_str("]\n");
    Ok(Conversion { toml, vhosts })
}

/// A JSON value as an AMQP field value (numbers as RabbitMQ's management API takes them:
/// integers as `long`, the rest as `double`).
fn field_value(v: &Value) -> FieldValue {
    match v {
        Value::Null => FieldValue::Void,
        Value::Bool(b) => FieldValue::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => FieldValue::I64(i),
            None => FieldValue::F64(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => FieldValue::LongStr(LongStr::from(s.as_str())),
        Value::Array(a) => FieldValue::Array(a.iter().map(field_value).collect()),
        Value::Object(_) => FieldValue::Table(field_table(v)),
    }
}

fn field_table(v: &Value) -> FieldTable {
    v.as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (ShortStr::from(k.as_str()), field_value(v)))
                .collect()
        })
        .unwrap_or_default()
}

/// What [`apply`] added.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub exchanges: usize,
    pub queues: usize,
    pub bindings: usize,
}

/// Adds the export's durable exchanges, queues and bindings (of the vhosts it defines)
/// to the definitions log in `data_dir`, which no broker may be using.
pub fn apply(
    root: &Value,
    vhosts: &[String],
    data_dir: &Path,
    skipped: &mut Skipped,
) -> Result<Applied, String> {
    let fail = |e: std::io::Error| format!("data dir {}: {e}", data_dir.display());
    std::fs::create_dir_all(data_dir).map_err(fail)?;
    let _lock = crate::store::lock_data_dir(data_dir).map_err(fail)?;
    let mut defs = definitions::load(data_dir).map_err(fail)?.definitions;
    let mut applied = Applied::default();
    let known_vhost = |v: &str| vhosts.iter().any(|n| n == v);
    for x in list(root, "exchanges") {
        let (name, vhost) = (text(x, "name"), text(x, "vhost"));
        let what = format!("'{name}' in vhost '{vhost}'");
        let reason = if !known_vhost(vhost) {
            Some("its vhost is not defined")
        } else if !flag(x, "durable") {
            Some("not durable")
        } else if name.is_empty() || name.starts_with("amq.") {
            Some("a built-in exchange")
        } else if name.len() > 255 {
            Some("a name longer than 255 bytes")
        } else {
            None
        };
        if let Some(reason) = reason {
            skipped.add("exchanges", format!("{what}: {reason}"));
            continue;
        }
        let Some(kind) = ExchangeKind::parse(text(x, "type").as_bytes()) else {
            skipped.add(
                "exchanges",
                format!("{what}: unknown exchange type '{}'", text(x, "type")),
            );
            continue;
        };
        let key = (vhost.to_owned(), ShortStr::from(name));
        if defs.exchanges.contains_key(&key) {
            skipped.add("exchanges", format!("{what}: already in the data dir"));
            continue;
        }
        defs.exchanges.insert(
            key,
            ExchangeDef {
                name: ShortStr::from(name),
                kind,
                durable: true,
                auto_delete: flag(x, "auto_delete"),
                internal: flag(x, "internal"),
                arguments: x.get("arguments").map(field_table).unwrap_or_default(),
            },
        );
        applied.exchanges += 1;
    }
    for q in list(root, "queues") {
        let (name, vhost) = (text(q, "name"), text(q, "vhost"));
        let what = format!("'{name}' in vhost '{vhost}'");
        let arguments = q.get("arguments").map(field_table).unwrap_or_default();
        let reason = if !known_vhost(vhost) {
            Some("its vhost is not defined".to_owned())
        } else if !flag(q, "durable") {
            Some("not durable".to_owned())
        } else if flag(q, "exclusive") {
            Some("exclusive".to_owned())
        } else if name.is_empty() || name.len() > 255 {
            Some("not a valid queue name".to_owned())
        } else {
            queue_args::validate(&arguments).err().map(|e| match e {
                queue_args::QueueArgError::Invalid { argument, reason } => {
                    format!("argument {argument} refused: {reason}")
                }
                other => format!("arguments refused: {other:?}"),
            })
        };
        if let Some(reason) = reason {
            skipped.add("queues", format!("{what}: {reason}"));
            continue;
        }
        let key = (vhost.to_owned(), ShortStr::from(name));
        if defs.queues.contains_key(&key) {
            skipped.add("queues", format!("{what}: already in the data dir"));
            continue;
        }
        let id = QueueId(defs.next_queue_id.max(1));
        defs.next_queue_id = id.0 + 1;
        defs.queues.insert(
            key,
            DurableQueue {
                id,
                auto_delete: flag(q, "auto_delete"),
                arguments,
            },
        );
        applied.queues += 1;
    }
    let exchange_exists = |defs: &definitions::Definitions, vhost: &str, name: &str| {
        PREDECLARED.iter().any(|(n, _)| *n == name)
            || defs
                .exchanges
                .contains_key(&(vhost.to_owned(), ShortStr::from(name)))
    };
    for b in list(root, "bindings") {
        let (source, vhost, dest) = (text(b, "source"), text(b, "vhost"), text(b, "destination"));
        let to_queue = text(b, "destination_type") != "exchange";
        let what = format!("'{source}' -> '{dest}' in vhost '{vhost}'");
        let dest_durable = if to_queue {
            defs.queues
                .contains_key(&(vhost.to_owned(), ShortStr::from(dest)))
        } else {
            exchange_exists(&defs, vhost, dest)
        };
        let reason = if !known_vhost(vhost) {
            Some("its vhost is not defined")
        } else if source.is_empty() {
            Some("the default exchange binds every queue by itself")
        } else if [source, dest, text(b, "routing_key")]
            .iter()
            .any(|t| t.len() > 255)
        {
            Some("a name or routing key longer than 255 bytes")
        } else if !exchange_exists(&defs, vhost, source) || !dest_durable {
            Some("an end is not a durable object in the data dir")
        } else {
            None
        };
        if let Some(reason) = reason {
            skipped.add("bindings", format!("{what}: {reason}"));
            continue;
        }
        let binding = DurableBinding {
            source: ShortStr::from(source),
            destination: ShortStr::from(dest),
            routing_key: ShortStr::from(text(b, "routing_key")),
            arguments: b.get("arguments").map(field_table).unwrap_or_default(),
        };
        let list = if to_queue {
            defs.bindings.entry(vhost.to_owned()).or_default()
        } else {
            defs.exchange_bindings.entry(vhost.to_owned()).or_default()
        };
        if list.contains(&binding) {
            continue;
        }
        list.push(binding);
        applied.bindings += 1;
    }
    definitions::compact(data_dir, &defs).map_err(fail)?;
    Ok(applied)
}

//! Owns: reading a RabbitMQ definitions export (`rabbitmqctl export_definitions`, the
//! management API's `/api/definitions`) — users, vhosts and permissions become `[auth]`
//! and `[vhosts]` configuration entries; policies and durable exchanges, queues and
//! bindings are added to a data dir's definitions log — and the account of everything
//! not imported.
//!
//! The export is read by `crate::definitions` (the one parser of the format, shared with
//! `POST /api/definitions`); an item it cannot read is skipped with its reason.
//!
//! Does not: encode definitions records (`store::definitions` does: the log is loaded,
//! extended and rewritten with the store's own snapshot), or run next to a broker (the
//! data dir's lock is taken first).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::definitions::{self as defs, Item};
use crate::model::exchange::{ExchangeDef, ExchangeKind};
use crate::model::ids::QueueId;
use crate::model::routing::PREDECLARED;
use crate::policy::queue_args;
use crate::policy::set::{self, Policy};
use crate::protocol::ShortStr;
use crate::store::definitions::{self, DurableBinding, DurableQueue};
use crate::store::policies::PolicyChange;

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

fn quoted(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// Items `definitions` could not read, noted as skipped; the rest.
fn readable<T>(items: Vec<Item<T>>, kind: &str, skipped: &mut Skipped) -> Vec<T> {
    items
        .into_iter()
        .filter_map(|item| {
            item.map_err(|e| skipped.add(kind, format!("{}: {}", e.what, e.reason)))
                .ok()
        })
        .collect()
}

/// Users, vhosts and permissions as configuration; everything else that is not a
/// queue, exchange or binding is counted in `skipped`.
pub fn convert(root: &Value, skipped: &mut Skipped) -> Result<Conversion, String> {
    let obj = defs::root(root)
        .map_err(|_| "the file is not a JSON object (a RabbitMQ definitions export)")?;
    for (key, value) in obj {
        let read = [
            "users",
            "vhosts",
            "permissions",
            "policies",
            "queues",
            "exchanges",
            "bindings",
        ];
        if read.contains(&key.as_str()) || defs::INFORMATIONAL.contains(&key.as_str()) {
            continue;
        }
        match value.as_array() {
            Some(items) => {
                for item in items {
                    let name = ["name", "user", "vhost"]
                        .iter()
                        .filter_map(|k| item.get(k).and_then(Value::as_str))
                        .find(|n| !n.is_empty())
                        .unwrap_or("(unnamed)");
                    skipped.add(key, format!("'{name}': not imported by sluice"));
                }
            }
            None => skipped.add(key, "not imported by sluice".into()),
        }
    }
    let vhosts: Vec<String> = readable(defs::vhosts(root), "vhosts", skipped)
        .into_iter()
        .map(|v| v.name)
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
    for u in readable(defs::users(root), "users", skipped) {
        let name = u.name.as_str();
        let algorithm = u.hashing_algorithm.as_deref();
        if u.password_hash.is_empty() {
            skipped.add(
                "users",
                format!("'{name}': no password hash (a passwordless user)"),
            );
            continue;
        }
        if let Err(e) = Password::from_hash(&u.password_hash, algorithm) {
            skipped.add("users", format!("'{name}': {e}"));
            continue;
        }
        if u.has_limits {
            skipped.add("user limits", format!("'{name}': not imported by sluice"));
        }
        let tags: Vec<String> = u.tags.iter().map(|t| quoted(t)).collect();
        let mut entry = format!(
            "  {{ name = {}, password_hash = {}",
            quoted(name),
            quoted(&u.password_hash)
        );
        if let Some(alg) = algorithm {
            entry.push_str(&format!(", hashing_algorithm = {}", quoted(alg)));
        }
        entry.push_str(&format!(", tags = [{}] }},\n", tags.join(", ")));
        toml.push_str(&entry);
        users.push(name.to_owned());
    }
    toml.push_str("]\npermissions = [\n");
    for p in readable(defs::permissions(root), "permissions", skipped) {
        let (user, vhost) = (p.user.as_str(), p.vhost.as_str());
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
        if let Err(e) = crate::auth::permissions::Grant::compile(&p.configure, &p.write, &p.read) {
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
            quoted(&p.configure),
            quoted(&p.write),
            quoted(&p.read),
        ));
    }
    toml.push_str("]\n");
    Ok(Conversion { toml, vhosts })
}

/// What [`apply`] added.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub policies: usize,
    pub exchanges: usize,
    pub queues: usize,
    pub bindings: usize,
}

/// Adds the export's policies and durable exchanges, queues and bindings (of the vhosts
/// it defines) to the definitions log in `data_dir`, which no broker may be using.
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
    applied.policies = add_policies(root, &known_vhost, &mut defs, skipped);
    for x in readable(defs::exchanges(root), "exchanges", skipped) {
        let (name, vhost) = (x.name.as_str(), x.vhost.as_str());
        let what = format!("'{name}' in vhost '{vhost}'");
        let reason = if !known_vhost(vhost) {
            Some("its vhost is not defined")
        } else if !x.durable {
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
        let Some(kind) = ExchangeKind::parse(x.kind.as_bytes()) else {
            skipped.add(
                "exchanges",
                format!("{what}: unknown exchange type '{}'", x.kind),
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
                auto_delete: x.auto_delete,
                internal: x.internal,
                arguments: x.arguments,
            },
        );
        applied.exchanges += 1;
    }
    for q in readable(defs::queues(root), "queues", skipped) {
        let (name, vhost) = (q.name.as_str(), q.vhost.as_str());
        let what = format!("'{name}' in vhost '{vhost}'");
        let reason = if !known_vhost(vhost) {
            Some("its vhost is not defined".to_owned())
        } else if !q.durable {
            Some("not durable".to_owned())
        } else if q.exclusive {
            Some("exclusive".to_owned())
        } else if name.len() > 255 {
            Some("not a valid queue name".to_owned())
        } else {
            queue_args::validate(&q.arguments).err().map(|e| match e {
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
                auto_delete: q.auto_delete,
                arguments: q.arguments,
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
    for b in readable(defs::bindings(root), "bindings", skipped) {
        let (source, vhost, dest) = (b.source.as_str(), b.vhost.as_str(), b.destination.as_str());
        let what = format!("'{source}' -> '{dest}' in vhost '{vhost}'");
        let dest_durable = if b.to_queue {
            defs.queues
                .contains_key(&(vhost.to_owned(), ShortStr::from(dest)))
        } else {
            exchange_exists(&defs, vhost, dest)
        };
        let reason = if !known_vhost(vhost) {
            Some("its vhost is not defined")
        } else if source.is_empty() {
            Some("the default exchange binds every queue by itself")
        } else if [source, dest, b.routing_key.as_str()]
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
            routing_key: ShortStr::from(b.routing_key.as_str()),
            arguments: b.arguments,
        };
        let list = if b.to_queue {
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

/// The export's policies, validated as the management API validates them (a policy
/// refused there is skipped here with the same reason), put into `defs`. How many.
fn add_policies(
    root: &Value,
    known_vhost: &dyn Fn(&str) -> bool,
    defs: &mut definitions::Definitions,
    skipped: &mut Skipped,
) -> usize {
    let items = root.get("policies").and_then(Value::as_array);
    let mut added = 0;
    for item in items.map_or(&[][..], Vec::as_slice) {
        let field = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or_default();
        let (vhost, name) = (field("vhost"), field("name"));
        let what = format!("'{name}' in vhost '{vhost}'");
        let policy = if name.is_empty() {
            Err("no name".to_owned())
        } else if !known_vhost(vhost) {
            Err("its vhost is not defined".to_owned())
        } else {
            set::draft_of(vhost, name, item).and_then(Policy::validate)
        };
        match policy {
            Ok(policy) => {
                defs.policies.apply(&PolicyChange::Put {
                    vhost: vhost.to_owned(),
                    name: name.to_owned(),
                    json: policy.json().to_string(),
                });
                added += 1;
            }
            Err(reason) => {
                let reason = reason.trim_end().replace("\n\n", ": ").replace('\n', "; ");
                skipped.add("policies", format!("{what}: {reason}"));
            }
        }
    }
    added
}

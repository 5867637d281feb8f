//! Owns: reading RabbitMQ's definitions format (`rabbitmqctl export_definitions`,
//! `GET /api/definitions`) — one function per section (users, vhosts, permissions,
//! topic permissions, parameters, global parameters, policies, exchanges, queues,
//! bindings), each item read into a typed value or refused with which item and why — and
//! declare arguments as JSON to field tables. The one parser of the format: `sluice
//! import-definitions` (offline, `cli::import`) and `POST /api/definitions` (`http::
//! definitions`) both read through it.
//!
//! Does not: decide what an item means to the broker (whether a queue is durable enough
//! to keep, whether a vhost exists: the callers do), write anything, or render an export
//! (the management API does, with its JSON of field tables).

use serde_json::{Map, Value};

use crate::protocol::table::{FieldTable, FieldValue};
use crate::protocol::{LongStr, ShortStr};

/// An item of a section that cannot be read: which one, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemError {
    /// The section (`queues`, ...).
    pub section: &'static str,
    /// The item's place in its section, from 0.
    pub index: usize,
    /// How the item names itself (`'q' in vhost '/'`), as far as it could be read.
    pub what: String,
    pub reason: String,
}

impl std::fmt::Display for ItemError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}[{}] {}: {}",
            self.section, self.index, self.what, self.reason
        )
    }
}

/// One item of a section, read or refused.
pub type Item<T> = Result<T, ItemError>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserDef {
    pub name: String,
    /// Empty for a user without a password.
    pub password_hash: String,
    pub hashing_algorithm: Option<String>,
    pub tags: Vec<String>,
    /// Whether the export gives the user limits (sluice keeps none per user).
    pub has_limits: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VhostDef {
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionDef {
    pub user: String,
    pub vhost: String,
    pub configure: String,
    pub write: String,
    pub read: String,
}

/// A named item of a section sluice does not hold (topic permissions, parameters,
/// global parameters, policies): what it is called, for the account of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherDef {
    pub name: String,
    pub vhost: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ExchangeItem {
    /// Empty in a vhost's own export (`/api/definitions/{vhost}`): the vhost imported to.
    pub vhost: String,
    pub name: String,
    /// The type as written (`direct`, ...); the caller parses it.
    pub kind: String,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    pub arguments: FieldTable,
}

#[derive(Debug, Clone, PartialEq)]
pub struct QueueItem {
    pub vhost: String,
    pub name: String,
    pub durable: bool,
    pub auto_delete: bool,
    pub exclusive: bool,
    pub arguments: FieldTable,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BindingItem {
    pub vhost: String,
    pub source: String,
    pub destination: String,
    /// `destination_type` is `queue` (true) or `exchange` (false).
    pub to_queue: bool,
    pub routing_key: String,
    pub arguments: FieldTable,
}

/// The top-level keys of an export sluice reads, in RabbitMQ 3.10's order.
pub const SECTIONS: [&str; 10] = [
    "users",
    "vhosts",
    "permissions",
    "topic_permissions",
    "parameters",
    "global_parameters",
    "policies",
    "queues",
    "exchanges",
    "bindings",
];

/// Keys that describe the export, not definitions.
pub const INFORMATIONAL: [&str; 4] = [
    "rabbit_version",
    "rabbitmq_version",
    "product_name",
    "product_version",
];

/// The export's top-level object.
pub fn root(v: &Value) -> Result<&Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| "the definitions are not a JSON object".to_owned())
}

/// The items of `section` (none when the key is absent); `Err` when it is not a list.
fn section<'a>(root: &'a Value, section: &str) -> Result<&'a [Value], String> {
    match root.get(section) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(format!("{section} must be a list")),
    }
}

/// Reads every item of a section with `read`; a section that is not a list is one
/// refused item.
fn items<T>(
    root: &Value,
    name: &'static str,
    read: impl Fn(&Fields<'_>) -> Result<T, String>,
) -> Vec<Item<T>> {
    let list = match section(root, name) {
        Ok(list) => list,
        Err(reason) => {
            return vec![Err(ItemError {
                section: name,
                index: 0,
                what: "(the section)".into(),
                reason,
            })]
        }
    };
    list.iter()
        .enumerate()
        .map(|(index, v)| {
            let fields = Fields(v);
            let refuse = |reason| ItemError {
                section: name,
                index,
                what: fields.what(),
                reason,
            };
            match v.as_object() {
                Some(_) => read(&fields).map_err(refuse),
                None => Err(refuse("not a JSON object".into())),
            }
        })
        .collect()
}

/// One item's fields, read with their types checked: a missing field is its default, a
/// field of the wrong type refuses the item.
struct Fields<'a>(&'a Value);

impl Fields<'_> {
    fn text(&self, key: &str) -> Result<String, String> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(format!("{key} must be a string, not {other}")),
        }
    }

    fn opt_text(&self, key: &str) -> Result<Option<String>, String> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(format!("{key} must be a string, not {other}")),
        }
    }

    fn flag(&self, key: &str) -> Result<bool, String> {
        self.flag_or(key, false)
    }

    /// A flag whose absence means `default` (`durable`: RabbitMQ's import takes a queue
    /// or exchange without it as durable).
    fn flag_or(&self, key: &str, default: bool) -> Result<bool, String> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            // RabbitMQ's management takes the strings too.
            Some(Value::String(s)) if s == "true" => Ok(true),
            Some(Value::String(s)) if s == "false" => Ok(false),
            Some(other) => Err(format!("{key} must be true or false, not {other}")),
        }
    }

    fn arguments(&self) -> Result<FieldTable, String> {
        match self.0.get("arguments") {
            None | Some(Value::Null) => Ok(FieldTable::default()),
            Some(v @ Value::Object(_)) => Ok(field_table(v)),
            Some(other) => Err(format!("arguments must be an object, not {other}")),
        }
    }

    fn tags(&self) -> Result<Vec<String>, String> {
        tags(self.0.get("tags"))
    }

    /// `'name' in vhost 'v'` (or `user 'u' on vhost 'v'`), as far as the item has them.
    fn what(&self) -> String {
        let s = |k: &str| self.0.get(k).and_then(Value::as_str);
        let name = s("name").or_else(|| s("destination"));
        match (name, s("user"), s("vhost")) {
            (Some(n), _, Some(v)) => format!("'{n}' in vhost '{v}'"),
            (Some(n), _, None) => format!("'{n}'"),
            (None, Some(u), Some(v)) => format!("user '{u}' on vhost '{v}'"),
            (None, Some(u), None) => format!("user '{u}'"),
            (None, None, _) => "(unnamed)".to_owned(),
        }
    }
}

/// `tags` as RabbitMQ writes them: a list (3.9 on) or a comma-separated string.
pub fn tags(v: Option<&Value>) -> Result<Vec<String>, String> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(s
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|t| match t {
                Value::String(s) => Ok(s.trim().to_owned()),
                other => Err(format!("a tag must be a string, not {other}")),
            })
            .filter(|t| t.as_ref().map_or(true, |t| !t.is_empty()))
            .collect(),
        Some(other) => Err(format!("tags must be a string or a list, not {other}")),
    }
}

fn named(name: String) -> Result<String, String> {
    if name.is_empty() {
        Err("no name".into())
    } else {
        Ok(name)
    }
}

pub fn users(root: &Value) -> Vec<Item<UserDef>> {
    items(root, "users", |f| {
        Ok(UserDef {
            name: named(f.text("name")?)?,
            password_hash: f.text("password_hash")?,
            hashing_algorithm: f.opt_text("hashing_algorithm")?,
            tags: f.tags()?,
            has_limits: f.0.get("limits").is_some_and(|l| match l {
                Value::Object(m) => !m.is_empty(),
                Value::Null => false,
                _ => true,
            }),
        })
    })
}

pub fn vhosts(root: &Value) -> Vec<Item<VhostDef>> {
    items(root, "vhosts", |f| {
        let meta = f.0.get("metadata").map(Fields);
        let description = match f.opt_text("description")? {
            Some(d) => d,
            None => match &meta {
                Some(m) => m.text("description")?,
                None => String::new(),
            },
        };
        let tags = match f.0.get("tags") {
            Some(t) if !t.is_null() => tags(Some(t))?,
            _ => match &meta {
                Some(m) => m.tags()?,
                None => Vec::new(),
            },
        };
        Ok(VhostDef {
            name: named(f.text("name")?)?,
            description,
            tags,
        })
    })
}

pub fn permissions(root: &Value) -> Vec<Item<PermissionDef>> {
    items(root, "permissions", |f| {
        let user = f.text("user")?;
        if user.is_empty() {
            return Err("no user".into());
        }
        Ok(PermissionDef {
            user,
            vhost: f.text("vhost")?,
            configure: f.text("configure")?,
            write: f.text("write")?,
            read: f.text("read")?,
        })
    })
}

/// The items of a section sluice holds nothing of (`topic_permissions`, `parameters`,
/// `global_parameters`): their names.
pub fn others(root: &Value, name: &'static str) -> Vec<Item<OtherDef>> {
    items(root, name, |f| {
        let name = f.text("name")?;
        let name = if name.is_empty() {
            f.text("user")?
        } else {
            name
        };
        Ok(OtherDef {
            name,
            vhost: f.text("vhost")?,
        })
    })
}

pub fn exchanges(root: &Value) -> Vec<Item<ExchangeItem>> {
    items(root, "exchanges", |f| {
        let kind = f.text("type")?;
        Ok(ExchangeItem {
            vhost: f.text("vhost")?,
            name: f.text("name")?,
            kind: if kind.is_empty() {
                "direct".into()
            } else {
                kind
            },
            durable: f.flag_or("durable", true)?,
            auto_delete: f.flag("auto_delete")?,
            internal: f.flag("internal")?,
            arguments: f.arguments()?,
        })
    })
}

pub fn queues(root: &Value) -> Vec<Item<QueueItem>> {
    items(root, "queues", |f| {
        Ok(QueueItem {
            vhost: f.text("vhost")?,
            name: named(f.text("name")?)?,
            durable: f.flag_or("durable", true)?,
            auto_delete: f.flag("auto_delete")?,
            exclusive: f.flag("exclusive")?,
            arguments: f.arguments()?,
        })
    })
}

pub fn bindings(root: &Value) -> Vec<Item<BindingItem>> {
    items(root, "bindings", |f| {
        let to_queue = match f.text("destination_type")?.as_str() {
            "queue" | "" => true,
            "exchange" => false,
            other => {
                return Err(format!(
                    "destination_type '{other}' is not queue or exchange"
                ))
            }
        };
        Ok(BindingItem {
            vhost: f.text("vhost")?,
            source: f.text("source")?,
            destination: named(f.text("destination")?).map_err(|_| "no destination")?,
            to_queue,
            routing_key: f.text("routing_key")?,
            arguments: f.arguments()?,
        })
    })
}

/// A JSON value as an AMQP field value, as RabbitMQ's management API takes one:
/// integers as `long`, other numbers as `double`, strings as long strings, objects as
/// tables.
pub fn field_value(v: &Value) -> FieldValue {
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

/// A JSON object as a field table (anything else is the empty table).
pub fn field_table(v: &Value) -> FieldTable {
    v.as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (ShortStr::from(k.as_str()), field_value(v)))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sections_are_read_with_their_types_checked() {
        let root = json!({
            "queues": [
                {"name": "q", "vhost": "/", "durable": true, "arguments": {"x-max-length": 5}},
                {"name": "bad", "vhost": "/", "durable": "yes"},
            ],
            "bindings": [{"source": "x", "vhost": "/", "destination": "q",
                          "destination_type": "exchange", "routing_key": "k"}],
            "users": [{"name": "u", "password_hash": "h", "tags": "a, b"}],
            "vhosts": [{"name": "v", "metadata": {"description": "d", "tags": ["t"]}}],
        });
        let queues = queues(&root);
        let q = queues[0].as_ref().expect("first queue");
        assert!(q.durable && q.arguments.get("x-max-length") == Some(&FieldValue::I64(5)));
        let err = queues[1].as_ref().expect_err("second queue");
        assert_eq!(
            err.to_string(),
            "queues[1] 'bad' in vhost '/': durable must be true or false, not \"yes\""
        );
        let b = bindings(&root).remove(0).expect("binding");
        assert!(!b.to_queue && b.routing_key == "k");
        let u = users(&root).remove(0).expect("user");
        assert_eq!(u.tags, ["a", "b"]);
        let v = vhosts(&root).remove(0).expect("vhost");
        assert_eq!(
            (v.description.as_str(), v.tags),
            ("d", vec!["t".to_owned()])
        );
        assert!(
            exchanges(&root).is_empty(),
            "an absent section has no items"
        );
        let not_list = exchanges(&json!({"exchanges": {}}));
        assert_eq!(
            not_list[0].as_ref().map(|_| ()).unwrap_err().reason,
            "exchanges must be a list"
        );
    }
}

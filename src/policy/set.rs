//! Owns: the policies set at run time over the management API (RabbitMQ's `policy`
//! runtime parameters) as data — a policy's vhost, name, pattern (compiled once),
//! `apply-to`, priority and definition; RabbitMQ's validation of them with its reasons
//! (`rabbit_policy`, `rabbit_policies`, `rabbit_parameter_validation`); which policy
//! applies to a queue or an exchange (the highest priority wins); and what a definition
//! amounts to for a queue: the declare arguments it stands for, merged with the queue's
//! own by RabbitMQ's rules (the smaller of the two limits, the argument's
//! dead-letter and overflow settings).
//!
//! Does not: store, send or apply anything (`admin::policy` changes the set in force,
//! `store::policies` records it, the shard applies it), or read a queue's state.
//!
//! The definition keys sluice implements: RabbitMQ's `message-ttl`, `expires`,
//! `max-length`, `max-length-bytes`, `overflow`, `dead-letter-exchange`,
//! `dead-letter-routing-key`, and sluice's own `sluice-slow-consumer-*` (the seven
//! `x-slow-consumer-*` settings) and `sluice-capacity` / `sluice-flow-resume-capacity`
//! (`x-qpid-capacity` / `x-qpid-flow-resume-capacity`). `x-max-priority` stays a
//! declare argument, as in RabbitMQ.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::protocol::{FieldTable, FieldValue};

use super::capacity::{self, CapacitySettings};
use super::queue_args::arg;
use super::slow_consumer::{self, SlowConsumerSettings};

/// What kinds of objects a policy applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyTo {
    Queues,
    Exchanges,
    All,
}

impl ApplyTo {
    pub fn name(self) -> &'static str {
        match self {
            ApplyTo::Queues => "queues",
            ApplyTo::Exchanges => "exchanges",
            ApplyTo::All => "all",
        }
    }

    /// RabbitMQ's names; `classic_queues` is every queue sluice has.
    fn parse(s: &str) -> Option<ApplyTo> {
        match s {
            "queues" | "classic_queues" => Some(ApplyTo::Queues),
            "exchanges" => Some(ApplyTo::Exchanges),
            "all" => Some(ApplyTo::All),
            _ => None,
        }
    }
}

/// The kind of object a policy is matched against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Queue,
    Exchange,
}

/// One policy, validated.
#[derive(Clone, Debug)]
pub struct Policy {
    pub vhost: String,
    pub name: String,
    pub pattern: String,
    regex: regex::Regex,
    pub apply_to: ApplyTo,
    pub priority: i64,
    /// The definition as given (a JSON object of the keys above).
    pub definition: Map<String, Value>,
    /// The definition as the declare arguments it stands for.
    pub arguments: FieldTable,
}

impl PartialEq for Policy {
    fn eq(&self, other: &Policy) -> bool {
        self.vhost == other.vhost
            && self.name == other.name
            && self.pattern == other.pattern
            && self.apply_to == other.apply_to
            && self.priority == other.priority
            && self.definition == other.definition
    }
}

/// The policies in force, shared by every shard (`Config::runtime_policies`).
pub type PolicySet = Arc<Vec<Arc<Policy>>>;

/// A policy as a request or the store gives it, before validation.
#[derive(Clone, Debug, PartialEq)]
pub struct Draft {
    pub vhost: String,
    pub name: String,
    pub pattern: Value,
    pub apply_to: Option<Value>,
    pub priority: Option<Value>,
    pub definition: Value,
}

/// A policy's fields from RabbitMQ's JSON of it (the body of a PUT, one entry of a
/// definitions export): `pattern` and `definition` are required, as RabbitMQ requires
/// them (`[{key_missing,pattern}]`).
pub fn draft_of(vhost: &str, name: &str, v: &Value) -> Result<Draft, String> {
    let Value::Object(map) = v else {
        return Err("body must be a JSON object".into());
    };
    let missing: Vec<String> = ["pattern", "definition"]
        .iter()
        .filter(|k| !map.contains_key(**k))
        .map(|k| format!("{{key_missing,{k}}}"))
        .collect();
    if !missing.is_empty() {
        return Err(format!("[{}]", missing.join(",")));
    }
    Ok(Draft {
        vhost: vhost.to_owned(),
        name: name.to_owned(),
        pattern: map.get("pattern").cloned().unwrap_or(Value::Null),
        apply_to: map.get("apply-to").cloned(),
        priority: map.get("priority").cloned(),
        definition: map.get("definition").cloned().unwrap_or(Value::Null),
    })
}

/// A definition key: its policy name, the declare argument it stands for, how the two
/// combine, and its check.
struct Key {
    name: &'static str,
    argument: &'static str,
    merge: Merge,
    check: Check,
    /// RabbitMQ's "~tp is not a valid ~ts" wording.
    what: &'static str,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Merge {
    /// The smaller of the argument and the policy value (`res_min`).
    Min,
    /// The declare argument where there is one (`res_arg`).
    Argument,
}

#[derive(Clone, Copy)]
enum Check {
    /// An integer at or above this.
    IntAtLeast(i64),
    /// Any string.
    Text,
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// A non-negative number (integer or not).
    Number,
    Bool,
}

/// RabbitMQ's keys (`rabbit_policies:validate_policy0`), then sluice's.
const KEYS: [Key; 16] = [
    Key {
        name: "dead-letter-exchange",
        argument: arg::DEAD_LETTER_EXCHANGE,
        merge: Merge::Argument,
        check: Check::Text,
        what: "dead letter exchange name",
    },
    Key {
        name: "dead-letter-routing-key",
        argument: arg::DEAD_LETTER_ROUTING_KEY,
        merge: Merge::Argument,
        check: Check::Text,
        what: "dead letter routing key",
    },
    Key {
        name: "message-ttl",
        argument: arg::MESSAGE_TTL,
        merge: Merge::Min,
        check: Check::IntAtLeast(0),
        what: "message TTL",
    },
    Key {
        name: "expires",
        argument: arg::EXPIRES,
        merge: Merge::Min,
        check: Check::IntAtLeast(1),
        what: "queue expiry",
    },
    Key {
        name: "max-length",
        argument: arg::MAX_LENGTH,
        merge: Merge::Min,
        check: Check::IntAtLeast(0),
        what: "maximum length",
    },
    Key {
        name: "max-length-bytes",
        argument: arg::MAX_LENGTH_BYTES,
        merge: Merge::Min,
        check: Check::IntAtLeast(0),
        what: "maximum length in bytes",
    },
    Key {
        name: "overflow",
        argument: arg::OVERFLOW,
        merge: Merge::Argument,
        check: Check::OneOf(&["drop-head", "reject-publish", "reject-publish-dlx"]),
        what: "overflow value",
    },
    Key {
        name: "sluice-slow-consumer-max-depth",
        argument: slow_consumer::arg::MAX_DEPTH,
        merge: Merge::Argument,
        check: Check::IntAtLeast(0),
        what: "slow-consumer maximum depth in bytes",
    },
    Key {
        name: "sluice-slow-consumer-max-count",
        argument: slow_consumer::arg::MAX_COUNT,
        merge: Merge::Argument,
        check: Check::IntAtLeast(0),
        what: "slow-consumer maximum message count",
    },
    Key {
        name: "sluice-slow-consumer-max-age",
        argument: slow_consumer::arg::MAX_AGE,
        merge: Merge::Argument,
        check: Check::IntAtLeast(0),
        what: "slow-consumer maximum age in milliseconds",
    },
    Key {
        name: "sluice-slow-consumer-min-rate",
        argument: slow_consumer::arg::MIN_RATE,
        merge: Merge::Argument,
        check: Check::Number,
        what: "slow-consumer minimum rate",
    },
    Key {
        name: "sluice-slow-consumer-policy",
        argument: slow_consumer::arg::POLICY,
        merge: Merge::Argument,
        check: Check::OneOf(&["delete", "cycle"]),
        what: "slow-consumer policy",
    },
    Key {
        name: "sluice-slow-consumer-include-persistent",
        argument: slow_consumer::arg::INCLUDE_PERSISTENT,
        merge: Merge::Argument,
        check: Check::Bool,
        what: "slow-consumer include-persistent flag",
    },
    Key {
        name: "sluice-slow-consumer-include-durable",
        argument: slow_consumer::arg::INCLUDE_DURABLE,
        merge: Merge::Argument,
        check: Check::Bool,
        what: "slow-consumer include-durable flag",
    },
    Key {
        name: "sluice-capacity",
        argument: capacity::arg::CAPACITY,
        merge: Merge::Argument,
        check: Check::IntAtLeast(0),
        what: "capacity in bytes",
    },
    Key {
        name: "sluice-flow-resume-capacity",
        argument: capacity::arg::FLOW_RESUME_CAPACITY,
        merge: Merge::Argument,
        check: Check::IntAtLeast(0),
        what: "flow resume capacity in bytes",
    },
];

/// The definition keys sluice accepts, in the order above.
pub fn key_names() -> impl Iterator<Item = &'static str> {
    KEYS.iter().map(|k| k.name)
}

/// A JSON value as Erlang's `~tp` prints the term RabbitMQ decodes it to (a string is a
/// binary, `<<"x">>`; an object a map), so the reasons read as RabbitMQ's.
pub fn erl(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("<<{}>>", Value::String(s.clone())),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(erl).collect();
            format!("[{}]", inner.join(","))
        }
        Value::Object(map) => {
            let inner: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{} => {}", erl(&Value::String(k.clone())), erl(v)))
                .collect();
            format!("#{{{}}}", inner.join(","))
        }
    }
}

fn check_value(key: &Key, v: &Value) -> Result<FieldValue, String> {
    let refused = || format!("{} is not a valid {}", erl(v), key.what);
    match key.check {
        Check::IntAtLeast(min) => match v.as_i64() {
            Some(n) if n >= min => Ok(FieldValue::I64(n)),
            _ => Err(refused()),
        },
        Check::Text => match v {
            Value::String(s) => Ok(FieldValue::LongStr(s.as_str().into())),
            _ => Err(refused()),
        },
        Check::OneOf(choices) => match v {
            Value::String(s) if choices.contains(&s.as_str()) => {
                Ok(FieldValue::LongStr(s.as_str().into()))
            }
            _ => Err(refused()),
        },
        Check::Number => match v.as_f64() {
            Some(x) if x >= 0.0 && x.is_finite() => Ok(FieldValue::F64(x)),
            _ => Err(refused()),
        },
        Check::Bool => match v {
            Value::Bool(b) => Ok(FieldValue::Bool(*b)),
            _ => Err(refused()),
        },
    }
}

/// RabbitMQ's check of a definition (`rabbit_policy:validation/3`): an empty one, keys
/// nobody knows, then the first bad value; and sluice's own combined checks (a resume
/// capacity above the capacity). The declare arguments it stands for.
fn definition_arguments(definition: &Value) -> Result<(Map<String, Value>, FieldTable), String> {
    let map = match definition {
        Value::Object(map) => map.clone(),
        other => return Err(format!("definition must be a dictionary: {}", erl(other))),
    };
    if map.is_empty() {
        return Err("no policy provided".into());
    }
    let unknown: Vec<String> = map
        .iter()
        .filter(|(k, _)| !KEYS.iter().any(|key| key.name == k.as_str()))
        .map(|(k, v)| format!("{{{},{}}}", erl(&Value::String(k.clone())), erl(v)))
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "[{}] are not recognised policy settings",
            unknown.join(",")
        ));
    }
    let mut arguments = FieldTable::default();
    for key in &KEYS {
        if let Some(v) = map.get(key.name) {
            arguments.insert(key.argument, check_value(key, v)?);
        }
    }
    CapacitySettings::from_arguments(&arguments).map_err(|e| e.reason)?;
    SlowConsumerSettings::from_arguments(&arguments).map_err(|e| e.to_string())?;
    Ok((map, arguments))
}

/// The longest pattern accepted (RabbitMQ's `rabbit_re:max_pattern_length/0` default).
const MAX_PATTERN: usize = 16 * 1024;

impl Policy {
    /// Validates `draft` as RabbitMQ validates a policy, collecting every refusal in
    /// its order (definition, apply-to, pattern, priority); the reason is RabbitMQ's
    /// text: `Validation failed`, a blank line, one line per refusal.
    pub fn validate(draft: Draft) -> Result<Policy, String> {
        let mut errors = Vec::new();
        let definition = definition_arguments(&draft.definition)
            .map_err(|e| errors.push(e))
            .ok();
        let apply_to = match &draft.apply_to {
            None | Some(Value::Null) => Some(ApplyTo::All),
            Some(Value::String(s)) => match ApplyTo::parse(s) {
                Some(a) => Some(a),
                None => {
                    errors.push(format!(
                        "apply-to '{s}' unrecognised; should be one of: 'queues', \
                         'classic_queues',  'quorum_queues', 'streams', 'exchanges', or 'all'"
                    ));
                    None
                }
            },
            Some(other) => {
                errors.push(format!("apply-to '{}' unrecognised", erl(other)));
                None
            }
        };
        let regex = match &draft.pattern {
            Value::String(p) if p.len() > MAX_PATTERN => {
                errors.push(format!("pattern must not exceed {MAX_PATTERN} bytes"));
                None
            }
            Value::String(p) => match regex::Regex::new(p) {
                Ok(r) => Some(r),
                Err(e) => {
                    let detail = e.to_string().replace('\n', " ");
                    errors.push(format!(
                        "pattern should be regular expression but is invalid: {detail}"
                    ));
                    None
                }
            },
            other => {
                errors.push(format!("pattern should be a binary but was {}", erl(other)));
                None
            }
        };
        let priority = match &draft.priority {
            None | Some(Value::Null) => Some(0),
            Some(v) => match v.as_i64() {
                Some(n) => Some(n),
                // RabbitMQ takes a number; a fraction is not a priority sluice keeps.
                None => {
                    errors.push(format!(
                        "priority should be a number, actually was {}",
                        erl(v)
                    ));
                    None
                }
            },
        };
        match (definition, apply_to, regex, priority) {
            (Some((definition, arguments)), Some(apply_to), Some(regex), Some(priority))
                if errors.is_empty() =>
            {
                Ok(Policy {
                    vhost: draft.vhost,
                    name: draft.name,
                    pattern: regex.as_str().to_owned(),
                    regex,
                    apply_to,
                    priority,
                    definition,
                    arguments,
                })
            }
            _ => {
                let mut reason = String::from("Validation failed\n\n");
                for e in errors {
                    reason.push_str(&e);
                    reason.push('\n');
                }
                Err(reason)
            }
        }
    }

    /// The policy as a draft again (for the store and re-validation).
    pub fn draft(&self) -> Draft {
        Draft {
            vhost: self.vhost.clone(),
            name: self.name.clone(),
            pattern: Value::String(self.pattern.clone()),
            apply_to: Some(Value::String(self.apply_to.name().into())),
            priority: Some(Value::from(self.priority)),
            definition: Value::Object(self.definition.clone()),
        }
    }

    /// Whether this policy is for an object of `kind` named `name` in `vhost`.
    pub fn matches(&self, vhost: &str, name: &str, kind: Kind) -> bool {
        let kind_ok = matches!(
            (self.apply_to, kind),
            (ApplyTo::All, _)
                | (ApplyTo::Queues, Kind::Queue)
                | (ApplyTo::Exchanges, Kind::Exchange)
        );
        kind_ok && self.vhost == vhost && self.regex.is_match(name)
    }

    /// The policy as RabbitMQ's API and its definitions export list it.
    pub fn json(&self) -> Value {
        serde_json::json!({
            "vhost": self.vhost,
            "name": self.name,
            "pattern": self.pattern,
            "apply-to": self.apply_to.name(),
            "definition": Value::Object(self.definition.clone()),
            "priority": self.priority,
        })
    }
}

/// The policy that applies to `name`: the highest priority among those that match.
/// RabbitMQ leaves equal priorities to its storage order; sluice takes the first by
/// name, so the choice is the same on every shard and after every restart.
pub fn select<'a>(
    policies: &'a [Arc<Policy>],
    vhost: &str,
    name: &str,
    kind: Kind,
) -> Option<&'a Arc<Policy>> {
    policies
        .iter()
        .filter(|p| p.matches(vhost, name, kind))
        .min_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then_with(|| a.name.cmp(&b.name))
        })
}

/// A queue's declare arguments with `policy` merged in by RabbitMQ's rules: for the
/// length limits, TTLs and expiry the smaller value wins; for the dead-letter settings,
/// the overflow mode and sluice's keys the declare argument wins where there is one.
pub fn effective_arguments(declared: &FieldTable, policy: Option<&Policy>) -> FieldTable {
    let Some(policy) = policy else {
        return declared.clone();
    };
    let mut out = declared.clone();
    for key in &KEYS {
        let Some(from_policy) = policy.arguments.get(key.argument) else {
            continue;
        };
        match (declared.get(key.argument), key.merge) {
            (None, _) => out.insert(key.argument, from_policy.clone()),
            (Some(own), Merge::Min) => {
                if let (Some(a), Some(p)) = (own.as_i64(), from_policy.as_i64()) {
                    if p < a {
                        out.insert(key.argument, from_policy.clone());
                    }
                }
            }
            (Some(_), Merge::Argument) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn draft(pattern: &str, priority: i64, definition: Value) -> Draft {
        Draft {
            vhost: "/".into(),
            name: format!("p{priority}"),
            pattern: json!(pattern),
            apply_to: Some(json!("queues")),
            priority: Some(json!(priority)),
            definition,
        }
    }

    #[test]
    fn reasons_are_rabbitmqs() {
        let bad = Policy::validate(draft("^a", 0, json!({"message-ttl": "x"}))).unwrap_err();
        assert_eq!(
            bad,
            "Validation failed\n\n<<\"x\">> is not a valid message TTL\n"
        );
        let unknown = Policy::validate(draft("^a", 0, json!({"foo": 1}))).unwrap_err();
        assert_eq!(
            unknown,
            "Validation failed\n\n[{<<\"foo\">>,1}] are not recognised policy settings\n"
        );
        let empty = Policy::validate(draft("^a", 0, json!({}))).unwrap_err();
        assert_eq!(empty, "Validation failed\n\nno policy provided\n");
        let regex = Policy::validate(draft("(", 0, json!({"max-length": 1}))).unwrap_err();
        assert!(
            regex.starts_with(
                "Validation failed\n\npattern should be regular expression but is invalid: "
            ),
            "{regex}"
        );
        assert_eq!(
            Policy::validate(draft("a", 0, json!({"expires": 0}))).unwrap_err(),
            "Validation failed\n\n0 is not a valid queue expiry\n"
        );
        let mut both = draft("(", 0, json!({"overflow": "drop-tail"}));
        both.apply_to = Some(json!("queue"));
        let both = Policy::validate(both).unwrap_err();
        let lines: Vec<&str> = both.lines().collect();
        assert_eq!(lines[2], "<<\"drop-tail\">> is not a valid overflow value");
        assert!(lines[3].starts_with("apply-to 'queue' unrecognised"));
        assert!(lines[4].starts_with("pattern should be regular expression"));
    }

    #[test]
    fn the_highest_priority_wins_then_the_first_name() {
        let set: Vec<Arc<Policy>> = [
            draft("^q", 1, json!({"max-length": 1})),
            draft("^q", 5, json!({"max-length": 5})),
            draft("^x", 9, json!({"max-length": 9})),
        ]
        .into_iter()
        .map(|d| Arc::new(Policy::validate(d).expect("valid")))
        .collect();
        assert_eq!(
            select(&set, "/", "q1", Kind::Queue).map(|p| p.priority),
            Some(5)
        );
        assert!(select(&set, "/", "q1", Kind::Exchange).is_none());
        assert!(select(&set, "other", "q1", Kind::Queue).is_none());
        let mut tie = draft("^q", 5, json!({"max-length": 7}));
        tie.name = "a-first".into();
        let mut with_tie = set.clone();
        with_tie.push(Arc::new(Policy::validate(tie).expect("valid")));
        assert_eq!(
            select(&with_tie, "/", "q1", Kind::Queue).map(|p| p.name.as_str()),
            Some("a-first")
        );
    }

    #[test]
    fn limits_take_the_smaller_dead_letter_the_argument() {
        let policy = Policy::validate(draft(
            ".*",
            0,
            json!({"max-length": 10, "message-ttl": 500, "dead-letter-exchange": "p",
                   "sluice-slow-consumer-max-count": 3}),
        ))
        .expect("valid");
        let mut declared = FieldTable::default();
        declared.insert("x-max-length", FieldValue::I32(4));
        declared.insert("x-message-ttl", FieldValue::I32(9000));
        declared.insert("x-dead-letter-exchange", FieldValue::LongStr("own".into()));
        let merged = effective_arguments(&declared, Some(&policy));
        assert_eq!(merged.get("x-max-length").and_then(|v| v.as_i64()), Some(4));
        assert_eq!(
            merged.get("x-message-ttl").and_then(|v| v.as_i64()),
            Some(500)
        );
        assert_eq!(
            merged
                .get("x-dead-letter-exchange")
                .and_then(|v| v.as_bytes()),
            Some(&b"own"[..])
        );
        assert_eq!(
            merged
                .get("x-slow-consumer-max-count")
                .and_then(|v| v.as_i64()),
            Some(3)
        );
    }
}

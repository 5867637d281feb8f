//! Owns: what a run-time change of the policies asks for and becomes — a policy put
//! (validated by `policy::set`, against the vhosts in force) or deleted, the store
//! records of either, the policy set in force after it, the policies a deleted vhost
//! takes with it, the POL-1001..1004 log lines, and the definitions export and import
//! of policies in RabbitMQ's format.
//!
//! Does not: write, send or apply anything (`super` persists through the coordinator
//! and has every shard apply the new set before it answers), or parse HTTP.

use std::sync::Arc;

use serde_json::Value;

use crate::config::Config;
use crate::ops::policy_event::PolicyEvent;
pub use crate::policy::set::draft_of;
use crate::policy::set::{Draft, Policy, PolicySet};
use crate::store::policies::PolicyChange;

use super::{AdminError, Changed};

/// A change of the policies, with who asks.
#[derive(Clone, Debug)]
pub enum PolicyRequest {
    /// Creates or replaces the policy the draft names.
    Put { draft: Draft, acting: String },
    Delete {
        vhost: String,
        name: String,
        acting: String,
    },
}

impl PolicyRequest {
    pub fn acting(&self) -> &str {
        match self {
            PolicyRequest::Put { acting, .. } | PolicyRequest::Delete { acting, .. } => acting,
        }
    }

    fn target(&self) -> (&str, &str) {
        match self {
            PolicyRequest::Put { draft, .. } => (&draft.vhost, &draft.name),
            PolicyRequest::Delete { vhost, name, .. } => (vhost, name),
        }
    }
}

/// What a checked policy change is: its record, the set in force after it, and what
/// the answer says.
pub struct Planned {
    pub change: PolicyChange,
    pub set: PolicySet,
    pub outcome: Changed,
    /// The policy put (for the log line).
    pub put: Option<Arc<Policy>>,
}

/// Checks `request` against the configuration in force; POL-1004 when refused.
pub fn plan(config: &Config, request: &PolicyRequest) -> Result<Planned, AdminError> {
    let planned = plan_quietly(config, request);
    if let Err(AdminError::Invalid(reason) | AdminError::NotFound(reason)) = &planned {
        let (vhost, name) = request.target();
        PolicyEvent::Refused {
            vhost: vhost.to_owned(),
            policy: name.to_owned(),
            reason: reason.clone(),
            acting: request.acting().to_owned(),
        }
        .emit();
    }
    planned
}

fn plan_quietly(config: &Config, request: &PolicyRequest) -> Result<Planned, AdminError> {
    let (vhost, name) = request.target();
    if !config.vhosts.iter().any(|v| v == vhost) {
        return Err(AdminError::NotFound("vhost_not_found".into()));
    }
    let existing = config
        .runtime_policies
        .iter()
        .position(|p| p.vhost == vhost && p.name == name);
    let mut set: Vec<Arc<Policy>> = config.runtime_policies.iter().cloned().collect();
    match request {
        PolicyRequest::Put { draft, .. } => {
            let policy = Arc::new(Policy::validate(draft.clone()).map_err(AdminError::Invalid)?);
            let outcome = match existing {
                Some(at) => {
                    set[at] = Arc::clone(&policy);
                    Changed::Updated
                }
                None => {
                    set.push(Arc::clone(&policy));
                    Changed::Created
                }
            };
            set.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
            Ok(Planned {
                change: PolicyChange::Put {
                    vhost: vhost.to_owned(),
                    name: name.to_owned(),
                    json: policy.json().to_string(),
                },
                set: Arc::new(set),
                outcome,
                put: Some(policy),
            })
        }
        PolicyRequest::Delete { .. } => {
            let at = existing.ok_or_else(|| AdminError::NotFound("Object Not Found".into()))?;
            set.remove(at);
            Ok(Planned {
                change: PolicyChange::Delete {
                    vhost: vhost.to_owned(),
                    name: name.to_owned(),
                },
                set: Arc::new(set),
                outcome: Changed::Deleted,
                put: None,
            })
        }
    }
}

/// The log lines of a policy change put in force on every shard, `queues` of whose
/// queues changed their effective policy.
pub fn log(planned: &Planned, acting: &str, queues: usize) {
    let (vhost, name) = match &planned.change {
        PolicyChange::Put { vhost, name, .. } | PolicyChange::Delete { vhost, name } => {
            (vhost.clone(), name.clone())
        }
    };
    match &planned.put {
        Some(policy) => PolicyEvent::Set {
            vhost: vhost.clone(),
            policy: name.clone(),
            pattern: policy.pattern.clone(),
            apply_to: policy.apply_to.name(),
            priority: policy.priority,
            definition: Value::Object(policy.definition.clone()).to_string(),
            acting: acting.to_owned(),
        },
        None => PolicyEvent::Cleared {
            vhost: vhost.clone(),
            policy: name.clone(),
            acting: acting.to_owned(),
        },
    }
    .emit();
    PolicyEvent::Applied {
        vhost,
        policy: name,
        queues,
    }
    .emit();
}

/// The policies of the vhosts `deleted` takes away: their delete records and the set
/// left.
pub fn of_deleted_vhosts(config: &Config, deleted: &[String]) -> (Vec<PolicyChange>, PolicySet) {
    let (gone, kept): (Vec<_>, Vec<_>) = config
        .runtime_policies
        .iter()
        .cloned()
        .partition(|p| deleted.contains(&p.vhost));
    let changes = gone
        .iter()
        .map(|p| PolicyChange::Delete {
            vhost: p.vhost.clone(),
            name: p.name.clone(),
        })
        .collect();
    (changes, Arc::new(kept))
}

/// The policies in force at start: the store's, each validated again (one that no
/// longer validates is left out with POL-1004).
pub fn recovered(stored: &crate::store::policies::StoredPolicies) -> PolicySet {
    let mut set = Vec::new();
    for ((vhost, name), json) in &stored.policies {
        let parsed = serde_json::from_str::<Value>(json)
            .map_err(|e| format!("stored policy is not JSON: {e}"))
            .and_then(|v| draft_of(vhost, name, &v))
            .and_then(Policy::validate);
        match parsed {
            Ok(policy) => set.push(Arc::new(policy)),
            Err(reason) => PolicyEvent::Refused {
                vhost: vhost.clone(),
                policy: name.clone(),
                reason,
                acting: "store".into(),
            }
            .emit(),
        }
    }
    Arc::new(set)
}

/// The policies in force as RabbitMQ's definitions export lists them (`policies`).
pub fn export(config: &Config) -> Value {
    Value::Array(config.runtime_policies.iter().map(|p| p.json()).collect())
}

/// The requests a definitions import's `policies` list becomes, each checked for its
/// shape (vhost and name as strings, then as a PUT body); the admin thread applies
/// them one at a time.
pub fn import_requests(list: &[Value], acting: &str) -> Result<Vec<PolicyRequest>, AdminError> {
    list.iter()
        .map(|entry| {
            let field = |key: &str| match entry.get(key) {
                Some(Value::String(s)) => Ok(s.clone()),
                _ => Err(AdminError::Invalid(format!(
                    "policy {entry}: {key} must be a string"
                ))),
            };
            let (vhost, name) = (field("vhost")?, field("name")?);
            let draft = draft_of(&vhost, &name, entry).map_err(AdminError::Invalid)?;
            Ok(PolicyRequest::Put {
                draft,
                acting: acting.to_owned(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn put(vhost: &str, name: &str, body: Value) -> PolicyRequest {
        PolicyRequest::Put {
            draft: draft_of(vhost, name, &body).expect("shape"),
            acting: "guest".into(),
        }
    }

    #[test]
    fn put_replace_delete_and_vhost_deletion() {
        let mut config = Config::from_test_text("");
        let body = json!({"pattern": "^a", "definition": {"max-length": 3}});
        let first = plan(&config, &put("/", "p", body.clone())).expect("valid");
        assert_eq!(first.outcome, Changed::Created);
        config.runtime_policies = first.set;
        let again = plan(&config, &put("/", "p", body)).expect("valid");
        assert_eq!(again.outcome, Changed::Updated);
        assert_eq!(again.set.len(), 1);
        assert!(matches!(
            plan(&config, &put("nope", "p", json!({"pattern": "", "definition": {"max-length": 1}}))),
            Err(AdminError::NotFound(r)) if r == "vhost_not_found"
        ));
        let delete = |name: &str| PolicyRequest::Delete {
            vhost: "/".into(),
            name: name.into(),
            acting: "guest".into(),
        };
        assert!(matches!(
            plan(&config, &delete("other")),
            Err(AdminError::NotFound(_))
        ));
        let (changes, left) = of_deleted_vhosts(&config, &["/".to_owned()]);
        assert_eq!(changes.len(), 1);
        assert!(left.is_empty());
        let gone = plan(&config, &delete("p")).expect("exists");
        assert_eq!(gone.outcome, Changed::Deleted);
        assert!(gone.set.is_empty());
        assert_eq!(
            draft_of("/", "p", &json!({"definition": {}})).unwrap_err(),
            "[{key_missing,pattern}]"
        );
    }

    #[test]
    fn export_and_import_round_trip() {
        let mut config = Config::from_test_text("");
        let body = json!({"pattern": "^q\\.", "apply-to": "queues", "priority": 7,
                          "definition": {"max-length": 3, "overflow": "reject-publish"}});
        config.runtime_policies = plan(&config, &put("/", "p", body)).expect("valid").set;
        let exported = export(&config);
        assert_eq!(
            exported,
            json!([{"vhost": "/", "name": "p", "pattern": "^q\\.", "apply-to": "queues",
                    "priority": 7, "definition": {"max-length": 3, "overflow": "reject-publish"}}])
        );
        let requests = import_requests(exported.as_array().expect("list"), "guest").expect("ok");
        let mut fresh = Config::from_test_text("");
        for r in &requests {
            fresh.runtime_policies = plan(&fresh, r).expect("valid").set;
        }
        assert_eq!(fresh.runtime_policies, config.runtime_policies);
    }
}

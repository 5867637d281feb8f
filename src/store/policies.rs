//! Owns: the policies set at run time, as the definitions log records them — kind 14,
//! a policy put (its vhost, name and RabbitMQ's JSON of it: pattern, apply-to,
//! priority, definition), kind 15, a policy cleared (vhost, name) — their replay into
//! the set recorded, and the snapshot written when the log is compacted.
//!
//! Does not: validate a policy (`policy::set` does when the broker starts and when one
//! is put), or write at run time (the coordinator's `definitions_writer` appends the
//! records this module encodes).

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};

use super::access::{get_str, put_str};
use super::record;

/// Record kinds in the definitions log (reserved in `super::access`).
pub const POLICY: u8 = 14;
pub const POLICY_DELETED: u8 = 15;

/// Whether a record kind is one of this module's.
pub fn is_policy_record(tag: u8) -> bool {
    tag == POLICY || tag == POLICY_DELETED
}

/// One change of the policies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyChange {
    /// Put (created or replaced): `json` is the policy as RabbitMQ exports it.
    Put {
        vhost: String,
        name: String,
        json: String,
    },
    Delete {
        vhost: String,
        name: String,
    },
}

/// The policies recorded, by (vhost, name): RabbitMQ's JSON of each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoredPolicies {
    pub policies: BTreeMap<(String, String), String>,
}

impl StoredPolicies {
    pub fn apply(&mut self, change: &PolicyChange) {
        match change {
            PolicyChange::Put { vhost, name, json } => {
                self.policies
                    .insert((vhost.clone(), name.clone()), json.clone());
            }
            PolicyChange::Delete { vhost, name } => {
                self.policies.remove(&(vhost.clone(), name.clone()));
            }
        }
    }

    /// Applies one record of kind `tag` (its payload after the kind byte).
    pub fn replay(&mut self, tag: u8, mut payload: Bytes) -> Result<(), String> {
        let vhost = get_str(&mut payload, "vhost")?;
        let name = get_str(&mut payload, "policy name")?;
        let change = match tag {
            POLICY => PolicyChange::Put {
                vhost,
                name,
                json: get_str(&mut payload, "policy")?,
            },
            POLICY_DELETED => PolicyChange::Delete { vhost, name },
            other => return Err(format!("record type {other}")),
        };
        self.apply(&change);
        Ok(())
    }

    /// The policies as records, for the compacted log.
    pub fn snapshot_into(&self, out: &mut BytesMut) {
        for ((vhost, name), json) in &self.policies {
            encode(
                out,
                &PolicyChange::Put {
                    vhost: vhost.clone(),
                    name: name.clone(),
                    json: json.clone(),
                },
            );
        }
    }
}

/// Appends the record of one change.
pub fn encode(out: &mut BytesMut, change: &PolicyChange) {
    record::append(out, 0, |o| match change {
        PolicyChange::Put { vhost, name, json } => {
            o.put_u8(POLICY);
            put_str(o, vhost);
            put_str(o, name);
            put_str(o, json);
        }
        PolicyChange::Delete { vhost, name } => {
            o.put_u8(POLICY_DELETED);
            put_str(o, vhost);
            put_str(o, name);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;

    #[test]
    fn puts_and_deletes_round_trip_through_the_log_and_the_snapshot() {
        let changes = [
            PolicyChange::Put {
                vhost: "/".into(),
                name: "a".into(),
                json: "{\"pattern\":\"^a\"}".into(),
            },
            PolicyChange::Put {
                vhost: "/".into(),
                name: "b".into(),
                json: "{}".into(),
            },
            PolicyChange::Delete {
                vhost: "/".into(),
                name: "b".into(),
            },
        ];
        let mut out = BytesMut::new();
        for c in &changes {
            encode(&mut out, c);
        }
        let replay = |bytes: BytesMut| {
            let mut set = StoredPolicies::default();
            for mut payload in record::Records::new(bytes.freeze(), 0) {
                let tag = payload.get_u8();
                set.replay(tag, payload).expect("replays");
            }
            set
        };
        let set = replay(out);
        assert_eq!(set.policies.len(), 1);
        assert_eq!(
            set.policies[&("/".into(), "a".into())],
            "{\"pattern\":\"^a\"}"
        );
        let mut snap = BytesMut::new();
        set.snapshot_into(&mut snap);
        assert_eq!(replay(snap), set);
        let mut empty = StoredPolicies::default();
        assert_eq!(
            empty.replay(POLICY, Bytes::from_static(&[1, 0, 0, 0])),
            Err("short vhost".into())
        );
    }
}

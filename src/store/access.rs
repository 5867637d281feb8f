//! Owns: the access definitions changed at run time (over the management API) — users
//! (a password hash and tags, or deleted), permissions (three patterns per user and
//! vhost, or cleared), virtual hosts (created with a description and tags, or
//! deleted) and the vhost and user limits (RabbitMQ's `max-connections`, `max-queues`,
//! `max-channels`: a value, or cleared) — kept as an overlay on the configuration file's, their records in
//! `definitions.log`, and their replay.
//!
//! Does not: hash or check passwords, compile patterns (`auth` does), decide what wins
//! over the file (`config::access`), or write at run time (the coordinator's
//! `definitions_writer` appends the records this module encodes).
//!
//! A deletion is kept as a tombstone (`None`): a user deleted at run time stays deleted
//! after a restart even though the configuration file still lists it.

use std::collections::BTreeMap;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::record;

/// Record kinds in the definitions log (after the directory's, 1..=9).
pub const USER: u8 = 10;
pub const USER_DELETED: u8 = 11;
pub const PERMISSION: u8 = 12;
pub const PERMISSION_CLEARED: u8 = 13;
// 14 and 15 are the operator policies' (`super::policies`).
pub const VHOST: u8 = 16;
pub const VHOST_DELETED: u8 = 17;
pub const LIMIT: u8 = 18;
pub const LIMIT_CLEARED: u8 = 19;

/// Whether a record kind is one of this module's.
pub fn is_access_record(tag: u8) -> bool {
    (USER..=PERMISSION_CLEARED).contains(&tag) || (VHOST..=LIMIT_CLEARED).contains(&tag)
}

/// What a limit set at run time limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LimitSubject {
    /// RabbitMQ's vhost limits (`/api/vhost-limits`).
    Vhost,
    /// RabbitMQ's user limits (`/api/user-limits`).
    User,
}

impl LimitSubject {
    fn code(self) -> u8 {
        match self {
            LimitSubject::Vhost => 0,
            LimitSubject::User => 1,
        }
    }

    fn of_code(code: u8) -> Result<LimitSubject, String> {
        match code {
            0 => Ok(LimitSubject::Vhost),
            1 => Ok(LimitSubject::User),
            other => Err(format!("limit subject {other}")),
        }
    }
}

/// A limit's key: the subject kind, the vhost or user name, RabbitMQ's limit name.
pub type LimitKey = (LimitSubject, String, String);

/// A virtual host created at run time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoredVhost {
    pub description: String,
    pub tags: Vec<String>,
}

/// A user as stored: never a plain-text password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredUser {
    /// RabbitMQ's `password_hash` (base64 of salt and digest); empty: no password (the
    /// user can only log in with SASL EXTERNAL).
    pub password_hash: String,
    /// RabbitMQ's module name (`rabbit_password_hashing_sha256` …).
    pub hashing_algorithm: String,
    pub tags: Vec<String>,
}

/// A permission as stored: RabbitMQ's three patterns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredGrant {
    pub configure: String,
    pub write: String,
    pub read: String,
}

/// One change made at run time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AccessChange {
    PutUser {
        name: String,
        user: StoredUser,
    },
    DeleteUser {
        name: String,
    },
    SetPermission {
        user: String,
        vhost: String,
        grant: StoredGrant,
    },
    ClearPermission {
        user: String,
        vhost: String,
    },
    PutVhost {
        name: String,
        vhost: StoredVhost,
    },
    DeleteVhost {
        name: String,
    },
    /// A vhost or user limit set to `value` (RabbitMQ's: negative is no limit).
    SetLimit {
        subject: LimitSubject,
        name: String,
        limit: String,
        value: i64,
    },
    ClearLimit {
        subject: LimitSubject,
        name: String,
        limit: String,
    },
}

/// What was changed at run time, on top of the file: `None` is a deletion.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessOverlay {
    pub users: BTreeMap<String, Option<StoredUser>>,
    /// Keyed by (user, vhost).
    pub permissions: BTreeMap<(String, String), Option<StoredGrant>>,
    pub vhosts: BTreeMap<String, Option<StoredVhost>>,
    /// Vhost and user limits: `None` is cleared (the file's limit no longer applies).
    pub limits: BTreeMap<LimitKey, Option<i64>>,
}

impl AccessOverlay {
    /// Whether nothing was ever changed at run time.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
            && self.permissions.is_empty()
            && self.vhosts.is_empty()
            && self.limits.is_empty()
    }

    /// The vhosts in force: the file's, less those deleted at run time, then those
    /// created at run time that the file does not name.
    pub fn vhosts_over(&self, file: &[String]) -> Vec<String> {
        let mut out: Vec<String> = file
            .iter()
            .filter(|v| !matches!(self.vhosts.get(*v), Some(None)))
            .cloned()
            .collect();
        for (name, vhost) in &self.vhosts {
            if vhost.is_some() && !out.contains(name) {
                out.push(name.clone());
            }
        }
        out
    }

    /// Whether any permission was set or cleared at run time (which puts RabbitMQ's
    /// permission rules in force even where the file configures none).
    pub fn has_permissions(&self) -> bool {
        !self.permissions.is_empty()
    }

    pub fn apply(&mut self, change: &AccessChange) {
        match change {
            AccessChange::PutUser { name, user } => {
                self.users.insert(name.clone(), Some(user.clone()));
            }
            AccessChange::DeleteUser { name } => {
                self.users.insert(name.clone(), None);
            }
            AccessChange::SetPermission { user, vhost, grant } => {
                self.permissions
                    .insert((user.clone(), vhost.clone()), Some(grant.clone()));
            }
            AccessChange::ClearPermission { user, vhost } => {
                self.permissions.insert((user.clone(), vhost.clone()), None);
            }
            AccessChange::PutVhost { name, vhost } => {
                self.vhosts.insert(name.clone(), Some(vhost.clone()));
            }
            AccessChange::DeleteVhost { name } => {
                self.vhosts.insert(name.clone(), None);
            }
            AccessChange::SetLimit {
                subject,
                name,
                limit,
                value,
            } => {
                let key = (*subject, name.clone(), limit.clone());
                self.limits.insert(key, Some(*value));
            }
            AccessChange::ClearLimit {
                subject,
                name,
                limit,
            } => {
                self.limits
                    .insert((*subject, name.clone(), limit.clone()), None);
            }
        }
    }

    /// Applies one record of kind `tag` (its payload after the kind byte).
    pub fn replay(&mut self, tag: u8, mut payload: Bytes) -> Result<(), String> {
        let change = match tag {
            USER => {
                let name = get_str(&mut payload, "user name")?;
                let password_hash = get_str(&mut payload, "password hash")?;
                let hashing_algorithm = get_str(&mut payload, "hashing algorithm")?;
                let count = get_u16(&mut payload, "tag count")?;
                let tags = (0..count)
                    .map(|_| get_str(&mut payload, "tag"))
                    .collect::<Result<_, _>>()?;
                AccessChange::PutUser {
                    name,
                    user: StoredUser {
                        password_hash,
                        hashing_algorithm,
                        tags,
                    },
                }
            }
            USER_DELETED => AccessChange::DeleteUser {
                name: get_str(&mut payload, "user name")?,
            },
            PERMISSION => AccessChange::SetPermission {
                user: get_str(&mut payload, "user name")?,
                vhost: get_str(&mut payload, "vhost")?,
                grant: StoredGrant {
                    configure: get_str(&mut payload, "configure")?,
                    write: get_str(&mut payload, "write")?,
                    read: get_str(&mut payload, "read")?,
                },
            },
            PERMISSION_CLEARED => AccessChange::ClearPermission {
                user: get_str(&mut payload, "user name")?,
                vhost: get_str(&mut payload, "vhost")?,
            },
            VHOST => {
                let name = get_str(&mut payload, "vhost")?;
                let description = get_str(&mut payload, "description")?;
                let count = get_u16(&mut payload, "tag count")?;
                let tags = (0..count)
                    .map(|_| get_str(&mut payload, "tag"))
                    .collect::<Result<_, _>>()?;
                AccessChange::PutVhost {
                    name,
                    vhost: StoredVhost { description, tags },
                }
            }
            VHOST_DELETED => AccessChange::DeleteVhost {
                name: get_str(&mut payload, "vhost")?,
            },
            LIMIT | LIMIT_CLEARED => {
                if payload.remaining() < 1 {
                    return Err("short limit subject".into());
                }
                let subject = LimitSubject::of_code(payload.get_u8())?;
                let name = get_str(&mut payload, "limit's vhost or user")?;
                let limit = get_str(&mut payload, "limit name")?;
                if tag == LIMIT_CLEARED {
                    AccessChange::ClearLimit {
                        subject,
                        name,
                        limit,
                    }
                } else {
                    if payload.remaining() < 8 {
                        return Err("short limit value".into());
                    }
                    AccessChange::SetLimit {
                        subject,
                        name,
                        limit,
                        value: payload.get_i64_le(),
                    }
                }
            }
            other => return Err(format!("record type {other}")),
        };
        self.apply(&change);
        Ok(())
    }

    /// The overlay as records (tombstones included), for the snapshot written at start.
    pub fn snapshot_into(&self, out: &mut BytesMut) {
        // Vhosts first: a replay in order never sees a permission on a vhost it lacks.
        for (name, vhost) in &self.vhosts {
            let change = match vhost {
                Some(vhost) => AccessChange::PutVhost {
                    name: name.clone(),
                    vhost: vhost.clone(),
                },
                None => AccessChange::DeleteVhost { name: name.clone() },
            };
            encode(out, &change);
        }
        for (name, user) in &self.users {
            let change = match user {
                Some(user) => AccessChange::PutUser {
                    name: name.clone(),
                    user: user.clone(),
                },
                None => AccessChange::DeleteUser { name: name.clone() },
            };
            encode(out, &change);
        }
        for ((subject, name, limit), value) in &self.limits {
            let (subject, name, limit) = (*subject, name.clone(), limit.clone());
            let change = match value {
                Some(value) => AccessChange::SetLimit {
                    subject,
                    name,
                    limit,
                    value: *value,
                },
                None => AccessChange::ClearLimit {
                    subject,
                    name,
                    limit,
                },
            };
            encode(out, &change);
        }
        for ((user, vhost), grant) in &self.permissions {
            let (user, vhost) = (user.clone(), vhost.clone());
            let change = match grant {
                Some(grant) => AccessChange::SetPermission {
                    user,
                    vhost,
                    grant: grant.clone(),
                },
                None => AccessChange::ClearPermission { user, vhost },
            };
            encode(out, &change);
        }
    }
}

/// Appends the record of one change.
pub fn encode(out: &mut BytesMut, change: &AccessChange) {
    record::append(out, 0, |o| match change {
        AccessChange::PutUser { name, user } => {
            o.put_u8(USER);
            put_str(o, name);
            put_str(o, &user.password_hash);
            put_str(o, &user.hashing_algorithm);
            put_tags(o, &user.tags);
        }
        AccessChange::DeleteUser { name } => {
            o.put_u8(USER_DELETED);
            put_str(o, name);
        }
        AccessChange::SetPermission { user, vhost, grant } => {
            o.put_u8(PERMISSION);
            put_str(o, user);
            put_str(o, vhost);
            put_str(o, &grant.configure);
            put_str(o, &grant.write);
            put_str(o, &grant.read);
        }
        AccessChange::ClearPermission { user, vhost } => {
            o.put_u8(PERMISSION_CLEARED);
            put_str(o, user);
            put_str(o, vhost);
        }
        AccessChange::PutVhost { name, vhost } => {
            o.put_u8(VHOST);
            put_str(o, name);
            put_str(o, &vhost.description);
            put_tags(o, &vhost.tags);
        }
        AccessChange::DeleteVhost { name } => {
            o.put_u8(VHOST_DELETED);
            put_str(o, name);
        }
        AccessChange::SetLimit {
            subject,
            name,
            limit,
            value,
        } => {
            o.put_u8(LIMIT);
            o.put_u8(subject.code());
            put_str(o, name);
            put_str(o, limit);
            o.put_i64_le(*value);
        }
        AccessChange::ClearLimit {
            subject,
            name,
            limit,
        } => {
            o.put_u8(LIMIT_CLEARED);
            o.put_u8(subject.code());
            put_str(o, name);
            put_str(o, limit);
        }
    });
}

fn put_tags(out: &mut BytesMut, tags: &[String]) {
    out.put_u16_le(tags.len().min(usize::from(u16::MAX)) as u16);
    for tag in tags.iter().take(usize::from(u16::MAX)) {
        put_str(out, tag);
    }
}

/// A string with a u32 length (patterns, hashes and policies may be long); also the
/// encoding of `super::policies`.
pub(super) fn put_str(out: &mut BytesMut, s: &str) {
    out.put_u32_le(s.len() as u32);
    out.put_slice(s.as_bytes());
}

fn get_u16(b: &mut Bytes, what: &str) -> Result<u16, String> {
    if b.remaining() < 2 {
        return Err(format!("short {what}"));
    }
    Ok(b.get_u16_le())
}

pub(super) fn get_str(b: &mut Bytes, what: &str) -> Result<String, String> {
    if b.remaining() < 4 {
        return Err(format!("short {what}"));
    }
    let len = b.get_u32_le() as usize;
    if b.remaining() < len {
        return Err(format!("short {what}"));
    }
    String::from_utf8(b.split_to(len).to_vec()).map_err(|_| format!("{what} is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(tags: &[&str]) -> StoredUser {
        StoredUser {
            password_hash: "aGFzaA==".into(),
            hashing_algorithm: "rabbit_password_hashing_sha256".into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
        }
    }

    /// Every record read back (checksums checked) into a fresh overlay.
    fn replayed(bytes: &BytesMut) -> AccessOverlay {
        let mut overlay = AccessOverlay::default();
        for payload in record::Records::new(bytes.clone().freeze(), 0) {
            let mut payload = payload;
            let tag = payload.get_u8();
            overlay.replay(tag, payload).expect("replays");
        }
        overlay
    }

    #[test]
    fn changes_round_trip_and_the_last_one_wins() {
        let changes = [
            AccessChange::PutUser {
                name: "app".into(),
                user: user(&["management"]),
            },
            AccessChange::SetPermission {
                user: "app".into(),
                vhost: "/".into(),
                grant: StoredGrant {
                    configure: "^app\\.".into(),
                    write: ".*".into(),
                    read: "".into(),
                },
            },
            AccessChange::DeleteUser {
                name: "guest".into(),
            },
            AccessChange::ClearPermission {
                user: "guest".into(),
                vhost: "/".into(),
            },
            AccessChange::PutUser {
                name: "app".into(),
                user: user(&["administrator", "monitoring"]),
            },
            AccessChange::PutVhost {
                name: "orders".into(),
                vhost: StoredVhost {
                    description: "shop".into(),
                    tags: vec!["prod".into()],
                },
            },
            AccessChange::DeleteVhost { name: "/".into() },
            AccessChange::SetLimit {
                subject: LimitSubject::Vhost,
                name: "orders".into(),
                limit: "max-connections".into(),
                value: 0,
            },
            AccessChange::SetLimit {
                subject: LimitSubject::User,
                name: "app".into(),
                limit: "max-channels".into(),
                value: -1,
            },
            AccessChange::ClearLimit {
                subject: LimitSubject::User,
                name: "app".into(),
                limit: "max-connections".into(),
            },
        ];
        let mut out = BytesMut::new();
        let mut expected = AccessOverlay::default();
        for c in &changes {
            encode(&mut out, c);
            expected.apply(c);
        }
        let overlay = replayed(&out);
        assert_eq!(overlay, expected);
        assert_eq!(
            overlay.users["app"].as_ref().map(|u| u.tags.clone()),
            Some(vec!["administrator".to_owned(), "monitoring".to_owned()])
        );
        assert_eq!(overlay.users["guest"], None);
        let key = |s, n: &str, l: &str| (s, n.to_owned(), l.to_owned());
        let limit = |s, n, l| overlay.limits[&key(s, n, l)];
        assert_eq!(
            limit(LimitSubject::Vhost, "orders", "max-connections"),
            Some(0)
        );
        assert_eq!(limit(LimitSubject::User, "app", "max-channels"), Some(-1));
        assert_eq!(limit(LimitSubject::User, "app", "max-connections"), None);
        assert_eq!(overlay.permissions[&("guest".into(), "/".into())], None);
        assert_eq!(
            overlay.vhosts_over(&["/".to_owned(), "other".to_owned()]),
            ["other", "orders"]
        );
        // The snapshot replays to the same overlay, tombstones included.
        let mut snap = BytesMut::new();
        overlay.snapshot_into(&mut snap);
        assert_eq!(replayed(&snap), overlay);
    }

    #[test]
    fn a_short_record_is_refused() {
        let mut overlay = AccessOverlay::default();
        let err = overlay
            .replay(USER, Bytes::from_static(&[9, 0, 0, 0, b'a']))
            .unwrap_err();
        assert_eq!(err, "short user name");
        assert!(overlay.is_empty());
    }
}

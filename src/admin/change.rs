//! Owns: what a run-time change of users and permissions asks for, the checks it must
//! pass against the configuration in force (RabbitMQ's rules and reasons), and the
//! store records it becomes — including RabbitMQ's side effects: deleting a user clears
//! its permissions, and the first permission set or cleared where the file configures
//! none writes every other user's implicit full grant out, so that nobody loses access
//! when RabbitMQ's permission rules come into force.
//!
//! Does not: write, send or apply anything (`super` does).

use crate::auth::password::Password;
use crate::config::Config;
use crate::ops::admin_event::AdminEvent;
use crate::store::access::{AccessChange, LimitSubject, StoredGrant, StoredUser, StoredVhost};

/// RabbitMQ's vhost limits.
pub const VHOST_LIMITS: [&str; 2] = ["max-connections", "max-queues"];
/// RabbitMQ's user limits.
pub const USER_LIMITS: [&str; 2] = ["max-connections", "max-channels"];

/// A user's new password.
#[derive(Clone, Debug)]
pub enum NewPassword {
    /// Plain text from the request: hashed (SHA-256, random salt) before it is stored.
    Plain(String),
    /// A RabbitMQ `password_hash` with its `hashing_algorithm` (`None`: SHA-256).
    Hash {
        hash: String,
        algorithm: Option<String>,
    },
    /// Neither: the user has no password (RabbitMQ clears it).
    None,
}

/// A change of users or permissions, with who asks.
#[derive(Clone, Debug)]
pub enum AccessRequest {
    PutUser {
        name: String,
        password: NewPassword,
        tags: Vec<String>,
        acting: String,
    },
    DeleteUser {
        name: String,
        acting: String,
    },
    SetPermission {
        user: String,
        vhost: String,
        configure: String,
        write: String,
        read: String,
        acting: String,
    },
    ClearPermission {
        user: String,
        vhost: String,
        acting: String,
    },
    /// Creates a vhost (or changes its description and tags).
    PutVhost {
        name: String,
        description: String,
        tags: Vec<String>,
        acting: String,
    },
    /// Deletes a vhost: its connections are closed, its permissions cleared, its queues
    /// and exchanges deleted.
    DeleteVhost {
        name: String,
        acting: String,
    },
    /// Sets one vhost or user limit (RabbitMQ's: negative is no limit, 0 admits
    /// nothing).
    SetLimit {
        subject: LimitSubject,
        name: String,
        limit: String,
        value: i64,
        acting: String,
    },
    ClearLimit {
        subject: LimitSubject,
        name: String,
        limit: String,
        acting: String,
    },
}

/// What a change did (the management API answers 201 or 204).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Changed {
    Created,
    Updated,
    Deleted,
}

/// Why a change was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminError {
    /// The object to change or delete does not exist (404).
    NotFound(String),
    /// The request is invalid (400), with RabbitMQ's reason where it has one.
    Invalid(String),
    /// The broker is stopping (503).
    Stopping,
}

impl std::fmt::Display for AdminError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminError::NotFound(what) => write!(f, "{what}"),
            AdminError::Invalid(why) => write!(f, "{why}"),
            AdminError::Stopping => f.write_str("the broker is stopping"),
        }
    }
}

/// The records `request` becomes, checked against the configuration in force.
pub fn plan(
    config: &Config,
    request: AccessRequest,
) -> Result<(Vec<AccessChange>, Changed), AdminError> {
    let exists = |name: &str| config.users.iter().any(|u| u.name == name);
    match request {
        AccessRequest::PutUser {
            name,
            password,
            tags,
            ..
        } => {
            crate::config::access::check_user_name(&name).map_err(AdminError::Invalid)?;
            let stored = stored_password(password)?;
            let changed = if exists(&name) {
                Changed::Updated
            } else {
                Changed::Created
            };
            let user = StoredUser {
                password_hash: stored.encoded().unwrap_or_default(),
                hashing_algorithm: stored.algorithm().to_owned(),
                tags,
            };
            Ok((vec![AccessChange::PutUser { name, user }], changed))
        }
        AccessRequest::DeleteUser { name, .. } => {
            if !exists(&name) {
                return Err(AdminError::NotFound("Object Not Found".into()));
            }
            let mut changes = vec![AccessChange::DeleteUser { name: name.clone() }];
            for entry in config.permissions.entries.iter().flatten() {
                if entry.user == name {
                    changes.push(AccessChange::ClearPermission {
                        user: name.clone(),
                        vhost: entry.vhost.clone(),
                    });
                }
            }
            changes.extend(limits_cleared(config, LimitSubject::User, &name));
            Ok((changes, Changed::Deleted))
        }
        AccessRequest::SetPermission {
            user,
            vhost,
            configure,
            write,
            read,
            ..
        } => {
            if !exists(&user) || !config.vhosts.contains(&vhost) {
                return Err(AdminError::Invalid("vhost_or_user_not_found".into()));
            }
            crate::auth::permissions::Grant::compile(&configure, &write, &read)
                .map_err(AdminError::Invalid)?;
            let changed = if config.permissions.grant(&user, &vhost).is_some() {
                Changed::Updated
            } else {
                Changed::Created
            };
            let mut changes = implicit_grants(config, &user, &vhost);
            changes.push(AccessChange::SetPermission {
                user,
                vhost,
                grant: StoredGrant {
                    configure,
                    write,
                    read,
                },
            });
            Ok((changes, changed))
        }
        AccessRequest::ClearPermission { user, vhost, .. } => {
            if !exists(&user) || config.permissions.grant(&user, &vhost).is_none() {
                return Err(AdminError::NotFound("Object Not Found".into()));
            }
            let mut changes = implicit_grants(config, &user, &vhost);
            changes.push(AccessChange::ClearPermission { user, vhost });
            Ok((changes, Changed::Deleted))
        }
        AccessRequest::PutVhost {
            name,
            description,
            tags,
            acting,
        } => {
            check_vhost_name(&name)?;
            let exists = config.vhosts.contains(&name);
            let mut changes = vec![AccessChange::PutVhost {
                name: name.clone(),
                vhost: StoredVhost { description, tags },
            }];
            // RabbitMQ gives the user who creates a vhost full permissions on it (only
            // where permissions are in force: without them everybody has them).
            if !exists && config.permissions.entries.is_some() {
                changes.push(AccessChange::SetPermission {
                    user: acting,
                    vhost: name,
                    grant: full_grant(),
                });
            }
            let changed = if exists {
                Changed::Updated
            } else {
                Changed::Created
            };
            Ok((changes, changed))
        }
        AccessRequest::DeleteVhost { name, .. } => {
            if !config.vhosts.contains(&name) {
                return Err(AdminError::NotFound("Object Not Found".into()));
            }
            let mut changes = vec![AccessChange::DeleteVhost { name: name.clone() }];
            for entry in config.permissions.entries.iter().flatten() {
                if entry.vhost == name {
                    changes.push(AccessChange::ClearPermission {
                        user: entry.user.clone(),
                        vhost: name.clone(),
                    });
                }
            }
            changes.extend(limits_cleared(config, LimitSubject::Vhost, &name));
            Ok((changes, Changed::Deleted))
        }
        AccessRequest::SetLimit {
            subject,
            name,
            limit,
            value,
            ..
        } => {
            check_limit(config, subject, &name, &limit, Some(value))?;
            let change = AccessChange::SetLimit {
                subject,
                name,
                limit,
                value,
            };
            Ok((vec![change], Changed::Updated))
        }
        AccessRequest::ClearLimit {
            subject,
            name,
            limit,
            ..
        } => {
            check_limit(config, subject, &name, &limit, None)?;
            // Clearing a limit that is not set is no change (RabbitMQ answers 204).
            let set = limit_in_force(config, subject, &name, &limit).is_some();
            let changes = if set {
                vec![AccessChange::ClearLimit {
                    subject,
                    name,
                    limit,
                }]
            } else {
                Vec::new()
            };
            Ok((changes, Changed::Deleted))
        }
    }
}

/// RabbitMQ's checks of a limit change: the vhost or user exists (404 with its reason),
/// the limit is one it knows for that subject.
fn check_limit(
    config: &Config,
    subject: LimitSubject,
    name: &str,
    limit: &str,
    value: Option<i64>,
) -> Result<(), AdminError> {
    let (exists, known, missing) = match subject {
        LimitSubject::Vhost => (
            config.vhosts.iter().any(|v| v == name),
            VHOST_LIMITS.contains(&limit),
            "vhost_not_found",
        ),
        LimitSubject::User => (
            config.users.iter().any(|u| u.name == name),
            USER_LIMITS.contains(&limit),
            "user_not_found",
        ),
    };
    if !exists {
        return Err(AdminError::NotFound(missing.into()));
    }
    if let (false, Some(value)) = (known, value) {
        return Err(AdminError::Invalid(format!(
            "Validation failed\n\nUnrecognised terms [{{<<\"{limit}\">>,{value}}}] in limits\n"
        )));
    }
    Ok(())
}

/// A limit in force (the file's or the store's), `None` where there is none.
pub fn limit_in_force(
    config: &Config,
    subject: LimitSubject,
    name: &str,
    limit: &str,
) -> Option<u32> {
    let limits = &config.limits.resources;
    match (subject, limit) {
        (LimitSubject::Vhost, "max-connections") => limits.vhost(name).max_connections,
        (LimitSubject::Vhost, "max-queues") => limits.vhost(name).max_queues,
        (LimitSubject::User, "max-connections") => limits.user(name).max_connections,
        (LimitSubject::User, "max-channels") => limits.user(name).max_channels,
        _ => None,
    }
}

/// The limits of a vhost or user being deleted, cleared with it (as RabbitMQ deletes
/// them with their vhost or user).
fn limits_cleared(config: &Config, subject: LimitSubject, name: &str) -> Vec<AccessChange> {
    let names: &[&str] = match subject {
        LimitSubject::Vhost => &VHOST_LIMITS,
        LimitSubject::User => &USER_LIMITS,
    };
    names
        .iter()
        .filter(|l| limit_in_force(config, subject, name, l).is_some())
        .map(|l| AccessChange::ClearLimit {
            subject,
            name: name.to_owned(),
            limit: (*l).to_owned(),
        })
        .collect()
}

/// `vhost 'x'` or `user 'x'`, for log lines.
fn limit_subject(subject: LimitSubject, name: &str) -> String {
    match subject {
        LimitSubject::Vhost => format!("vhost '{name}'"),
        LimitSubject::User => format!("user '{name}'"),
    }
}

fn check_vhost_name(name: &str) -> Result<(), AdminError> {
    if name.is_empty() {
        return Err(AdminError::Invalid("vhost name must not be empty".into()));
    }
    if name.len() > 255 {
        return Err(AdminError::Invalid(
            "vhost name is longer than 255 bytes".into(),
        ));
    }
    Ok(())
}

fn full_grant() -> StoredGrant {
    StoredGrant {
        configure: ".*".into(),
        write: ".*".into(),
        read: ".*".into(),
    }
}

/// Where the file configures no permissions (every user may do everything), the full
/// grants every user has, written out — except the one being changed.
fn implicit_grants(config: &Config, user: &str, vhost: &str) -> Vec<AccessChange> {
    if config.permissions.entries.is_some() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for u in &config.users {
        for v in &config.vhosts {
            if u.name == user && v == vhost {
                continue;
            }
            out.push(AccessChange::SetPermission {
                user: u.name.clone(),
                vhost: v.clone(),
                grant: full_grant(),
            });
        }
    }
    out
}

fn stored_password(password: NewPassword) -> Result<Password, AdminError> {
    match password {
        NewPassword::Plain(plain) => Password::hash_sha256(plain.as_bytes())
            .map_err(|e| AdminError::Invalid(format!("no randomness for a salt: {e}"))),
        NewPassword::Hash { hash, algorithm } => {
            Password::from_hash(&hash, algorithm.as_deref()).map_err(AdminError::Invalid)
        }
        NewPassword::None => Ok(Password::Disabled),
    }
}

/// The log line of a change that was put in force.
pub fn log(change: &AccessChange, acting: &str) {
    let acting = acting.to_owned();
    match change {
        AccessChange::PutUser { name, user } => AdminEvent::UserPut {
            user: name.clone(),
            tags: user.tags.clone(),
            acting,
        },
        AccessChange::DeleteUser { name } => AdminEvent::UserDeleted {
            user: name.clone(),
            acting,
        },
        AccessChange::SetPermission { user, vhost, grant } => AdminEvent::PermissionSet {
            user: user.clone(),
            vhost: vhost.clone(),
            configure: grant.configure.clone(),
            write: grant.write.clone(),
            read: grant.read.clone(),
            acting,
        },
        AccessChange::ClearPermission { user, vhost } => AdminEvent::PermissionCleared {
            user: user.clone(),
            vhost: vhost.clone(),
            acting,
        },
        AccessChange::PutVhost { name, .. } => AdminEvent::VhostPut {
            vhost: name.clone(),
            acting,
        },
        AccessChange::DeleteVhost { name } => AdminEvent::VhostDeleted {
            vhost: name.clone(),
            acting,
        },
        AccessChange::SetLimit {
            subject,
            name,
            limit,
            value,
        } => AdminEvent::LimitSet {
            subject: limit_subject(*subject, name),
            limit: limit.clone(),
            value: *value,
            acting,
        },
        AccessChange::ClearLimit {
            subject,
            name,
            limit,
        } => AdminEvent::LimitCleared {
            subject: limit_subject(*subject, name),
            limit: limit.clone(),
            acting,
        },
    }
    .emit();
}

impl AccessRequest {
    /// The user who asked.
    pub fn acting(&self) -> &str {
        match self {
            AccessRequest::PutUser { acting, .. }
            | AccessRequest::DeleteUser { acting, .. }
            | AccessRequest::SetPermission { acting, .. }
            | AccessRequest::ClearPermission { acting, .. }
            | AccessRequest::PutVhost { acting, .. }
            | AccessRequest::DeleteVhost { acting, .. }
            | AccessRequest::SetLimit { acting, .. }
            | AccessRequest::ClearLimit { acting, .. } => acting,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(toml: &str) -> Config {
        Config::from_test_text(toml)
    }

    fn set(user: &str) -> AccessRequest {
        AccessRequest::SetPermission {
            user: user.into(),
            vhost: "/".into(),
            configure: "^a".into(),
            write: ".*".into(),
            read: ".*".into(),
            acting: "guest".into(),
        }
    }

    const TWO: &str = "[auth]\nusers = [{ name = \"guest\", password = \"guest\" }, { name = \"app\", password = \"x\" }]\n";

    #[test]
    fn the_first_permission_writes_the_implicit_ones_out() {
        let config = load(TWO);
        let (changes, changed) = plan(&config, set("app")).expect("ok");
        assert_eq!(changed, Changed::Updated, "app could do everything before");
        assert_eq!(changes.len(), 2, "{changes:?}");
        assert!(
            matches!(&changes[0], AccessChange::SetPermission { user, grant, .. }
            if user == "guest" && grant.configure == ".*")
        );
        assert!(
            matches!(&changes[1], AccessChange::SetPermission { user, grant, .. }
            if user == "app" && grant.configure == "^a")
        );
    }

    #[test]
    fn rabbitmq_reasons() {
        let config = load(TWO);
        assert_eq!(
            plan(&config, set("nobody")).unwrap_err(),
            AdminError::Invalid("vhost_or_user_not_found".into())
        );
        let bad = AccessRequest::SetPermission {
            user: "app".into(),
            vhost: "/".into(),
            configure: "(".into(),
            write: "".into(),
            read: "".into(),
            acting: "guest".into(),
        };
        assert!(
            matches!(plan(&config, bad), Err(AdminError::Invalid(e)) if e.starts_with("configure: invalid regex '('"))
        );
        let delete = AccessRequest::DeleteUser {
            name: "nobody".into(),
            acting: "guest".into(),
        };
        assert!(matches!(
            plan(&config, delete),
            Err(AdminError::NotFound(_))
        ));
        let reserved = AccessRequest::PutUser {
            name: crate::auth::local_link::LINK_USER.into(),
            password: NewPassword::None,
            tags: vec![],
            acting: "guest".into(),
        };
        assert!(matches!(
            plan(&config, reserved),
            Err(AdminError::Invalid(_))
        ));
    }

    #[test]
    fn a_plain_password_is_stored_hashed() {
        let config = load(TWO);
        let put = AccessRequest::PutUser {
            name: "new".into(),
            password: NewPassword::Plain("s3cret".into()),
            tags: vec!["monitoring".into()],
            acting: "guest".into(),
        };
        let (changes, changed) = plan(&config, put).expect("ok");
        assert_eq!(changed, Changed::Created);
        let AccessChange::PutUser { user, .. } = &changes[0] else {
            panic!("{changes:?}")
        };
        assert!(!user.password_hash.contains("s3cret"));
        let back = crate::config::access::user_of("new", user).expect("usable");
        assert!(back.password.verify(b"s3cret"));
        assert!(!back.password.verify(b"other"));
    }

    #[test]
    fn deleting_a_user_clears_its_permissions() {
        let config = load(&format!(
            "{TWO}permissions = [{{ user = \"app\", vhost = \"/\", configure = \".*\", write = \".*\", read = \".*\" }}]\n"
        ));
        let delete = AccessRequest::DeleteUser {
            name: "app".into(),
            acting: "guest".into(),
        };
        let (changes, _) = plan(&config, delete).expect("ok");
        assert_eq!(
            changes,
            [
                AccessChange::DeleteUser { name: "app".into() },
                AccessChange::ClearPermission {
                    user: "app".into(),
                    vhost: "/".into()
                }
            ]
        );
    }
}

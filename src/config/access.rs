//! Owns: what wins when the configuration file and the store both say something about
//! users and permissions — the file's `[auth] users` and `permissions` are the initial
//! state, and every change made at run time (the store's [`AccessOverlay`]) is put over
//! them, user by user and (user, vhost) by (user, vhost): a user changed or created at
//! run time is the store's, one deleted at run time stays deleted, the others are the
//! file's (and follow its SIGHUP reloads). Also turning a stored user or grant back into
//! the configuration's types, and what a run-time change may say.
//!
//! Does not: read or write the store, or send anything anywhere (`admin` does).

use std::sync::Arc;

use crate::auth::password::Password;
use crate::auth::permissions::{Grant, PermissionEntry};
use crate::store::access::{AccessOverlay, LimitSubject, StoredGrant, StoredUser};

use super::{Config, User};

/// Where the users in force came from, for the start-up log line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Sources {
    /// Users as the file gives them.
    pub from_file: Vec<String>,
    /// Users created or changed at run time (the store's), including ones the file
    /// also names.
    pub from_store: Vec<String>,
    /// Users of the file that were deleted at run time.
    pub deleted: Vec<String>,
    /// Stored entries that could not be used (an unreadable hash, a pattern that no
    /// longer compiles): what and why.
    pub unusable: Vec<String>,
}

/// `file` with the run-time changes of `overlay` put over its users and permissions.
pub fn overlay(file: &Config, overlay: &AccessOverlay) -> (Config, Sources) {
    let mut config = file.clone();
    let mut sources = Sources::default();
    config.vhosts = overlay.vhosts_over(&file.vhosts);
    config.vhost_metadata = overlay
        .vhosts
        .iter()
        .filter_map(|(name, v)| v.as_ref().map(|v| (name.clone(), v.clone())))
        .collect();
    if overlay.is_empty() {
        sources.from_file = config.users.iter().map(|u| u.name.clone()).collect();
        return (config, sources);
    }
    limits_over(&mut config, overlay);
    let mut users: Vec<User> = Vec::with_capacity(file.users.len() + overlay.users.len());
    for user in &file.users {
        match overlay.users.get(&user.name) {
            None => {
                sources.from_file.push(user.name.clone());
                users.push(user.clone());
            }
            Some(None) => sources.deleted.push(user.name.clone()),
            // Replaced below, in the store's order.
            Some(Some(_)) => {}
        }
    }
    for (name, stored) in &overlay.users {
        let Some(stored) = stored else { continue };
        match user_of(name, stored) {
            Ok(user) => {
                sources.from_store.push(name.clone());
                users.push(user);
            }
            Err(e) => sources.unusable.push(format!("user '{name}': {e}")),
        }
    }
    config.users = users;
    if overlay.has_permissions() {
        let mut entries: Vec<PermissionEntry> =
            file.permissions.entries.clone().unwrap_or_default();
        for ((user, vhost), grant) in &overlay.permissions {
            entries.retain(|e| !(&e.user == user && &e.vhost == vhost));
            let Some(grant) = grant else { continue };
            match grant_of(grant) {
                Ok(grant) => entries.push(PermissionEntry {
                    user: user.clone(),
                    vhost: vhost.clone(),
                    grant,
                }),
                Err(e) => sources
                    .unusable
                    .push(format!("permission of '{user}' on '{vhost}': {e}")),
            }
        }
        config.permissions.entries = Some(entries);
    }
    (config, sources)
}

/// The vhost and user limits set or cleared at run time, over the file's, limit by
/// limit (RabbitMQ's values: negative is no limit).
fn limits_over(config: &mut Config, overlay: &AccessOverlay) {
    let limits = &mut config.limits.resources;
    for ((subject, name, limit), value) in &overlay.limits {
        let value = value.and_then(|v| u32::try_from(v.min(i64::from(u32::MAX))).ok());
        match subject {
            LimitSubject::Vhost => {
                let mut l = limits.vhost(name);
                match limit.as_str() {
                    "max-connections" => l.max_connections = value,
                    "max-queues" => l.max_queues = value,
                    _ => continue,
                }
                limits.set_vhost(name, l);
            }
            LimitSubject::User => {
                let mut l = limits.user(name);
                match limit.as_str() {
                    "max-connections" => l.max_connections = value,
                    "max-channels" => l.max_channels = value,
                    _ => continue,
                }
                limits.set_user(name, l);
            }
        }
    }
}

/// A stored user as the configuration holds it.
pub fn user_of(name: &str, stored: &StoredUser) -> Result<User, String> {
    Ok(User {
        name: name.to_owned(),
        password: Password::from_hash(&stored.password_hash, Some(&stored.hashing_algorithm))?,
        tags: stored.tags.clone(),
    })
}

/// A stored grant compiled.
pub fn grant_of(stored: &StoredGrant) -> Result<Arc<Grant>, String> {
    Grant::compile(&stored.configure, &stored.write, &stored.read).map(Arc::new)
}

/// RabbitMQ's tags as the API gives them: a comma-separated string (`"a,b"`, spaces
/// allowed) or a list; empty entries are dropped.
pub fn parse_tags(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The reason a user name given at run time is refused, if it is.
pub fn check_user_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("user name must not be empty".into());
    }
    if name == crate::auth::local_link::LINK_USER {
        return Err(format!(
            "'{name}' is reserved for this broker's own federation links"
        ));
    }
    if name.len() > 255 {
        return Err("user name is longer than 255 bytes".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(toml: &str) -> Config {
        Config::from_test_text(toml)
    }

    fn stored(password: &str, tags: &[&str]) -> StoredUser {
        let hash = Password::hash_sha256(password.as_bytes()).expect("random");
        StoredUser {
            password_hash: hash.encoded().expect("hashed"),
            hashing_algorithm: hash.algorithm().to_owned(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
        }
    }

    const FILE: &str =
        "[auth]\nusers = [{ name = \"guest\", password = \"guest\", tags = [\"administrator\"] }, \
                        { name = \"app\", password = \"one\" }]\n";

    #[test]
    fn the_store_wins_user_by_user() {
        let file = load(FILE);
        let mut o = AccessOverlay::default();
        o.users
            .insert("app".into(), Some(stored("two", &["monitoring"])));
        o.users.insert("guest".into(), None);
        o.users.insert("ops".into(), Some(stored("three", &[])));
        let (c, sources) = overlay(&file, &o);
        assert!(c.authenticate("guest", b"guest").is_none(), "deleted");
        assert!(c.authenticate("app", b"one").is_none(), "replaced");
        assert_eq!(
            c.authenticate("app", b"two").map(|u| u.tags.clone()),
            Some(vec!["monitoring".to_owned()])
        );
        assert!(c.authenticate("ops", b"three").is_some(), "created");
        assert_eq!(sources.from_file, Vec::<String>::new());
        assert_eq!(sources.from_store, ["app", "ops"]);
        assert_eq!(sources.deleted, ["guest"]);
        // No permission was touched: everyone may still do everything.
        assert!(c.permissions.entries.is_none());
    }

    #[test]
    fn run_time_permissions_put_rabbitmq_rules_in_force() {
        let file = load(FILE);
        let mut o = AccessOverlay::default();
        o.permissions.insert(
            ("app".into(), "/".into()),
            Some(StoredGrant {
                configure: "^app\\.".into(),
                write: ".*".into(),
                read: ".*".into(),
            }),
        );
        let (c, _) = overlay(&file, &o);
        let grant = c.permissions.grant("app", "/").expect("app has a grant");
        assert!(!grant.configure.matches(b"other"));
        assert!(grant.configure.matches(b"app.q"));
        // Rules are in force: no entry, no vhost.
        assert!(c.permissions.grant("guest", "/").is_none());
    }

    #[test]
    fn a_cleared_permission_removes_the_files_entry() {
        let file = load(&format!(
            "{FILE}permissions = [{{ user = \"app\", vhost = \"/\", configure = \".*\", write = \".*\", read = \".*\" }}]\n"
        ));
        assert!(file.permissions.grant("app", "/").is_some());
        let mut o = AccessOverlay::default();
        o.permissions.insert(("app".into(), "/".into()), None);
        let (c, _) = overlay(&file, &o);
        assert!(c.permissions.grant("app", "/").is_none());
    }

    #[test]
    fn an_unusable_stored_user_is_reported_not_fatal() {
        let file = load(FILE);
        let mut o = AccessOverlay::default();
        o.users.insert(
            "bad".into(),
            Some(StoredUser {
                password_hash: "!!".into(),
                hashing_algorithm: crate::auth::password::SHA256.into(),
                tags: vec![],
            }),
        );
        let (c, sources) = overlay(&file, &o);
        assert_eq!(c.users.len(), 2);
        assert_eq!(sources.unusable.len(), 1, "{sources:?}");
        assert!(sources.unusable[0].starts_with("user 'bad': "));
    }

    #[test]
    fn tags_parse_as_rabbitmq_writes_them() {
        assert_eq!(
            parse_tags("administrator, monitoring,,"),
            ["administrator", "monitoring"]
        );
        assert!(parse_tags("").is_empty());
    }
}

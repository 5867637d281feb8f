//! Owns: the `[auth]` entries of the configuration file that carry secrets and grants —
//! a user's `password` / `password_hash` / `hashing_algorithm`, and `permissions` — and
//! their checks at start (a malformed hash or an invalid regex stops the broker with a
//! message naming the user and vhost).
//!
//! Does not: read the file (`config::file` does and hands these entries over) or decide
//! defaults (`Config::default`).

use std::sync::Arc;

use serde::Deserialize;

use crate::auth::password::Password;
use crate::auth::permissions::{Grant, PermissionEntry, Permissions};

use super::{Config, ConfigError, User};

/// One `[auth] users` entry as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserEntry {
    name: String,
    password: Option<String>,
    password_hash: Option<String>,
    hashing_algorithm: Option<String>,
    tags: Option<Vec<String>>,
}

impl UserEntry {
    /// The user, or why the entry is wrong (naming it).
    pub fn into_user(self) -> Result<User, String> {
        let key = format!("auth.users (user '{}')", self.name);
        let password = match (self.password, self.password_hash) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "{key}: give either password or password_hash, not both"
                ))
            }
            (None, None) => return Err(format!("{key}: password or password_hash is needed")),
            (Some(plain), None) => {
                if self.hashing_algorithm.is_some() {
                    return Err(format!(
                        "{key}: hashing_algorithm applies to password_hash only"
                    ));
                }
                Password::Plain(plain)
            }
            (None, Some(hash)) => Password::from_hash(&hash, self.hashing_algorithm.as_deref())
                .map_err(|e| format!("{key}: {e}"))?,
        };
        Ok(User {
            name: self.name,
            password,
            tags: self.tags.unwrap_or_default(),
        })
    }
}

/// One `[auth] permissions` entry as written (RabbitMQ's `set_permissions`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionSection {
    user: String,
    vhost: String,
    configure: String,
    write: String,
    read: String,
}

/// Compiles the `permissions` list; an invalid regex names its entry.
pub fn compile_permissions(list: Vec<PermissionSection>) -> Result<Permissions, String> {
    let mut entries = Vec::with_capacity(list.len());
    for (i, p) in list.into_iter().enumerate() {
        let grant = Grant::compile(&p.configure, &p.write, &p.read).map_err(|e| {
            format!(
                "auth.permissions[{i}] (user '{}', vhost '{}'): {e}",
                p.user, p.vhost
            )
        })?;
        entries.push(PermissionEntry {
            user: p.user,
            vhost: p.vhost,
            grant: Arc::new(grant),
        });
    }
    Ok(Permissions {
        entries: Some(entries),
    })
}

/// Cross-checks once everything is loaded: user names are unique, and each permission
/// entry names a configured user and vhost, once.
pub fn validate(config: &Config) -> Result<(), ConfigError> {
    let invalid = |key: String, reason: String| Err(ConfigError::Invalid { key, reason });
    for (i, u) in config.users.iter().enumerate() {
        if config.users[..i].iter().any(|o| o.name == u.name) {
            return invalid(
                "auth.users".into(),
                format!("user '{}' is listed twice", u.name),
            );
        }
    }
    let Some(entries) = &config.permissions.entries else {
        return Ok(());
    };
    for (i, e) in entries.iter().enumerate() {
        let key = format!("auth.permissions[{i}]");
        if !config.users.iter().any(|u| u.name == e.user) {
            return invalid(key, format!("user '{}' is not in auth.users", e.user));
        }
        if !config.vhosts.contains(&e.vhost) {
            return invalid(key, format!("vhost '{}' is not in vhosts.names", e.vhost));
        }
        if entries[..i]
            .iter()
            .any(|o| o.user == e.user && o.vhost == e.vhost)
        {
            return invalid(
                key,
                format!(
                    "user '{}' has a second entry for vhost '{}'",
                    e.user, e.vhost
                ),
            );
        }
    }
    Ok(())
}

/// The users whose password is stored in plain text in the configuration (named in one
/// warning at start); none when the users are the built-in default (guest/guest, which
/// nobody wrote down and which may log in from loopback only: BRK-1024 says so).
pub fn plaintext_users(config: &Config) -> Vec<String> {
    if config.built_in_users {
        return Vec::new();
    }
    config
        .users
        .iter()
        .filter(|u| u.password.is_plain())
        .map(|u| u.name.clone())
        .collect()
}

/// At start: BRK-1024, the configuration file in use (or none) and, with the built-in
/// users, that guest may log in from loopback only; then BRK-1017 when a configured
/// user's password is in plain text.
pub fn announce(config: &Config) {
    let guest_loopback_only = config.built_in_users
        && config.loopback_users.iter().any(|u| u == "guest")
        && config.users.iter().any(|u| u.name == "guest");
    crate::ops::config_event::ConfigEvent::InUse {
        file: config.config_file.as_ref().map(|p| p.display().to_string()),
        built_in_guest: guest_loopback_only,
    }
    .emit();
    let users = plaintext_users(config);
    if !users.is_empty() {
        crate::ops::event::OpsEvent::PlaintextPasswords { users }.emit();
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{file, Config};

    fn load(text: &str) -> Result<Config, String> {
        let mut c = Config::default();
        file::apply_text(&mut c, text)?;
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }

    // base64(908dc60a ‖ sha256(908dc60a ‖ "guest")), computed with Python's hashlib.
    const HASH: &str = "kI3GCrswBLNZQzHJJ95QLoyfAVooYhnvf7jbqiW9BjOYUloe";

    #[test]
    fn hashed_and_plain_users_load() {
        let c = load(&format!(
            "[auth]\nusers = [{{ name = \"a\", password_hash = \"{HASH}\" }}, \
             {{ name = \"b\", password = \"pw\", tags = [\"administrator\"] }}]\n"
        ))
        .expect("loads");
        assert!(c.authenticate("a", b"guest").is_some());
        assert!(c.authenticate("a", b"guesT").is_none());
        assert!(c.authenticate("b", b"pw").is_some());
        assert_eq!(super::plaintext_users(&c), vec!["b".to_owned()]);
    }

    #[test]
    fn bad_user_entries_name_the_user() {
        let both = load(&format!(
            "[auth]\nusers = [{{ name = \"a\", password = \"x\", password_hash = \"{HASH}\" }}]\n"
        ))
        .expect_err("both");
        assert!(
            both.contains("user 'a'") && both.contains("not both"),
            "{both}"
        );
        let neither = load("[auth]\nusers = [{ name = \"n\" }]\n").expect_err("neither");
        assert!(neither.contains("user 'n'"), "{neither}");
        let bad = load("[auth]\nusers = [{ name = \"h\", password_hash = \"AAAA\" }]\n")
            .expect_err("malformed");
        assert!(
            bad.contains("user 'h'") && bad.contains("decodes to"),
            "{bad}"
        );
        let md5 = load(&format!(
            "[auth]\nusers = [{{ name = \"m\", password_hash = \"{HASH}\", \
             hashing_algorithm = \"rabbit_password_hashing_md5\" }}]\n"
        ))
        .expect_err("md5");
        assert!(md5.contains("user 'm'") && md5.contains("MD5"), "{md5}");
    }

    #[test]
    fn permission_entries_are_checked() {
        let users = "[auth]\nusers = [{ name = \"u\", password = \"p\" }]\n";
        let ok = load(&format!(
            "{users}permissions = [{{ user = \"u\", vhost = \"/\", configure = \"\", write = \"^x$\", read = \".*\" }}]\n"
        ))
        .expect("loads");
        assert!(ok.permissions.grant("u", "/").is_some());
        let regex = load(&format!(
            "{users}permissions = [{{ user = \"u\", vhost = \"/\", configure = \"(\", write = \"\", read = \"\" }}]\n"
        ))
        .expect_err("regex");
        assert!(
            regex.contains("user 'u', vhost '/'") && regex.contains("configure: invalid regex"),
            "{regex}"
        );
        let user = load(&format!(
            "{users}permissions = [{{ user = \"x\", vhost = \"/\", configure = \"\", write = \"\", read = \"\" }}]\n"
        ))
        .expect_err("user");
        assert!(user.contains("user 'x' is not in auth.users"), "{user}");
        let vhost = load(&format!(
            "{users}[[auth.permissions]]\nuser = \"u\"\nvhost = \"v9\"\nconfigure = \"\"\nwrite = \"\"\nread = \"\"\n"
        ))
        .expect_err("vhost");
        assert!(
            vhost.contains("vhost 'v9' is not in vhosts.names"),
            "{vhost}"
        );
    }
}

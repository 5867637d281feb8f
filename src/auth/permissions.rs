//! Owns: per-vhost permissions as RabbitMQ defines them — for each (user, vhost) three
//! regular expressions (configure, write, read), compiled once at config load — and a
//! connection's [`Access`]: the grant for its user on its vhost, with the last publish
//! decision cached so the publish path costs one name comparison.
//!
//! Does not: decide which method needs which permission (the shard's handler does, as
//! `rabbit_channel` does), build error texts, or log.
//!
//! RabbitMQ semantics kept exactly: a pattern is searched for in the name (unanchored;
//! write `^…$` to match whole names), an empty pattern means `^$` (it matches nothing a
//! client can name), and the default exchange is checked under the name `amq.default`.

use std::sync::{Arc, OnceLock};

use regex::bytes::Regex;

use crate::protocol::ShortStr;

/// One of RabbitMQ's three permissions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Perm {
    Configure,
    Write,
    Read,
}

impl Perm {
    /// The word RabbitMQ puts in its refusal text.
    pub fn name(self) -> &'static str {
        match self {
            Perm::Configure => "configure",
            Perm::Write => "write",
            Perm::Read => "read",
        }
    }
}

/// A compiled permission pattern.
#[derive(Clone, Debug)]
pub struct Pattern {
    source: String,
    /// `None` when the pattern matches every name (`.*`): no regex runs.
    regex: Option<Regex>,
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.source == other.source
    }
}

impl Pattern {
    /// Compiles a pattern as RabbitMQ reads it (empty = `^$`).
    pub fn compile(source: &str) -> Result<Pattern, String> {
        if matches!(source, ".*" | "^.*" | "^.*$" | ".*$") {
            return Ok(Pattern {
                source: source.to_owned(),
                regex: None,
            });
        }
        let effective = if source.is_empty() { "^$" } else { source };
        let regex = Regex::new(effective).map_err(|e| format!("invalid regex '{source}': {e}"))?;
        Ok(Pattern {
            source: source.to_owned(),
            regex: Some(regex),
        })
    }

    /// The pattern as configured.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the pattern occurs in `name`.
    pub fn matches(&self, name: &[u8]) -> bool {
        self.regex.as_ref().is_none_or(|re| re.is_match(name))
    }

    /// Whether every name matches (no regex to run).
    pub fn matches_all(&self) -> bool {
        self.regex.is_none()
    }
}

/// A user's permissions on one vhost.
#[derive(Clone, Debug, PartialEq)]
pub struct Grant {
    pub configure: Pattern,
    pub write: Pattern,
    pub read: Pattern,
}

impl Grant {
    /// Compiles the three patterns; the error names the one that failed.
    pub fn compile(configure: &str, write: &str, read: &str) -> Result<Grant, String> {
        Ok(Grant {
            configure: Pattern::compile(configure).map_err(|e| format!("configure: {e}"))?,
            write: Pattern::compile(write).map_err(|e| format!("write: {e}"))?,
            read: Pattern::compile(read).map_err(|e| format!("read: {e}"))?,
        })
    }

    /// `.*` for all three (what every user has when no permissions are configured).
    pub fn full() -> Arc<Grant> {
        static FULL: OnceLock<Arc<Grant>> = OnceLock::new();
        Arc::clone(FULL.get_or_init(|| {
            let all = Pattern {
                source: ".*".to_owned(),
                regex: None,
            };
            Arc::new(Grant {
                configure: all.clone(),
                write: all.clone(),
                read: all,
            })
        }))
    }

    fn pattern(&self, perm: Perm) -> &Pattern {
        match perm {
            Perm::Configure => &self.configure,
            Perm::Write => &self.write,
            Perm::Read => &self.read,
        }
    }
}

/// One configured permission entry.
#[derive(Clone, Debug, PartialEq)]
pub struct PermissionEntry {
    pub user: String,
    pub vhost: String,
    pub grant: Arc<Grant>,
}

/// `[auth] permissions`. `None` (the key absent): every user has `.*` on every vhost,
/// as sluice did before permissions existed. `Some`: RabbitMQ's rules — a user with no
/// entry for a vhost may not open it.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Permissions {
    pub entries: Option<Vec<PermissionEntry>>,
}

impl Permissions {
    /// The grant of `user` on `vhost`, or `None`: the vhost is refused to them.
    pub fn grant(&self, user: &str, vhost: &str) -> Option<Arc<Grant>> {
        match &self.entries {
            None => Some(Grant::full()),
            Some(list) => list
                .iter()
                .find(|e| e.user == user && e.vhost == vhost)
                .map(|e| Arc::clone(&e.grant)),
        }
    }
}

/// The name a permission is checked against: the default exchange is `amq.default`.
pub fn exchange_resource(name: &[u8]) -> &[u8] {
    if name.is_empty() {
        b"amq.default"
    } else {
        name
    }
}

/// A connection's permissions on its vhost (set at `connection.open`; before that,
/// nothing is allowed).
#[derive(Debug, Default)]
pub struct Access {
    grant: Option<Arc<Grant>>,
    /// The last exchange published to and whether write was allowed on it.
    last_publish: Option<(ShortStr, bool)>,
}

impl Access {
    pub fn new(grant: Arc<Grant>) -> Access {
        Access {
            grant: Some(grant),
            last_publish: None,
        }
    }

    /// Whether `perm` is granted on the resource called `name` (for an exchange, give
    /// it through [`exchange_resource`]).
    pub fn allows(&self, perm: Perm, name: &[u8]) -> bool {
        self.grant
            .as_ref()
            .is_some_and(|g| g.pattern(perm).matches(name))
    }

    /// Whether any of the three permissions is granted (a passive declare needs one).
    pub fn allows_any(&self, name: &[u8]) -> bool {
        [Perm::Read, Perm::Write, Perm::Configure]
            .into_iter()
            .any(|p| self.allows(p, name))
    }

    /// Write on the exchange of a publish: one comparison when the channel publishes to
    /// the same exchange again (the usual case), nothing when write is `.*`.
    pub fn allows_publish(&mut self, exchange: &ShortStr) -> bool {
        let Some(grant) = &self.grant else {
            return false;
        };
        if grant.write.matches_all() {
            return true;
        }
        if let Some((last, allowed)) = &self.last_publish {
            if last == exchange {
                return *allowed;
            }
        }
        let allowed = grant.write.matches(exchange_resource(exchange.as_bytes()));
        self.last_publish = Some((exchange.clone(), allowed));
        allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_search_unanchored_and_empty_matches_nothing() {
        let p = Pattern::compile("orders").expect("compiles");
        assert!(p.matches(b"orders"));
        assert!(p.matches(b"my-orders-eu"), "unanchored, as re:run");
        assert!(!p.matches(b"order"));
        let anchored = Pattern::compile("^orders$").expect("compiles");
        assert!(!anchored.matches(b"my-orders"));
        let empty = Pattern::compile("").expect("compiles");
        assert!(!empty.matches(b"q"));
        assert!(!empty.matches(b"amq.default"));
        assert!(Pattern::compile(".*").expect("compiles").matches_all());
        assert!(Pattern::compile("(").is_err());
    }

    #[test]
    fn no_entries_means_full_access_and_entries_are_exact() {
        let open = Permissions::default();
        assert_eq!(open.grant("anyone", "/"), Some(Grant::full()));
        let strict = Permissions {
            entries: Some(vec![PermissionEntry {
                user: "u".into(),
                vhost: "/".into(),
                grant: Arc::new(Grant::compile("^u-", "", ".*").expect("compiles")),
            }]),
        };
        assert!(strict.grant("u", "v2").is_none());
        assert!(strict.grant("other", "/").is_none());
        let access = Access::new(strict.grant("u", "/").expect("granted"));
        assert!(access.allows(Perm::Configure, b"u-q"));
        assert!(!access.allows(Perm::Configure, b"q"));
        assert!(!access.allows(Perm::Write, b"u-q"));
        assert!(access.allows_any(b"q"), "read .*");
    }

    #[test]
    fn publish_decision_is_cached_per_exchange() {
        let grant = Arc::new(Grant::compile(".*", "^amq\\.default$|^ok$", ".*").expect("ok"));
        let mut access = Access::new(grant);
        assert!(
            access.allows_publish(&ShortStr::from("")),
            "default exchange"
        );
        assert!(access.allows_publish(&ShortStr::from("ok")));
        assert!(access.allows_publish(&ShortStr::from("ok")));
        assert!(!access.allows_publish(&ShortStr::from("no")));
        assert!(!access.allows_publish(&ShortStr::from("no")));
        assert!(access.allows_publish(&ShortStr::from("ok")));
        assert!(!Access::default().allows_publish(&ShortStr::from("")));
    }
}

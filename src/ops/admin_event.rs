//! Owns: [`AdminEvent`], the operational lines of run-time administration of users,
//! permissions and vhosts (USR-1001..1008), rendered and emitted under `sluice::ops` like every
//! [`super::event::OpsEvent`]. Documented in `config/log-codes.md`.
//!
//! Does not: decide when they happen (`crate::admin` and `server` do). Lines never carry
//! a password or a hash.

use std::fmt;

use tracing::Level;

use super::escape::Escaped;
use super::fields::{LineFields, LogFields};

/// One administration event; `acting` is the management API user who asked.
#[derive(Debug, Clone, PartialEq)]
pub enum AdminEvent {
    /// USR-1001: a user was created or changed at run time (password and tags).
    UserPut {
        user: String,
        tags: Vec<String>,
        acting: String,
    },
    /// USR-1002: a user was deleted at run time (its connections are closed with 320).
    UserDeleted { user: String, acting: String },
    /// USR-1003: a user's permissions on a vhost were set at run time.
    PermissionSet {
        user: String,
        vhost: String,
        configure: String,
        write: String,
        read: String,
        acting: String,
    },
    /// USR-1004: a user's permissions on a vhost were cleared at run time.
    PermissionCleared {
        user: String,
        vhost: String,
        acting: String,
    },
    /// USR-1005: at start, where the users in force come from: the configuration file,
    /// the store (created or changed at run time), or deleted at run time although the
    /// file names them.
    UserSources {
        from_file: Vec<String>,
        from_store: Vec<String>,
        deleted: Vec<String>,
    },
    /// USR-1006: at start, a stored user or permission that could not be used (skipped).
    StoredEntryUnusable { what: String },
    /// USR-1007: a vhost was created (or its description and tags changed) at run time.
    VhostPut { vhost: String, acting: String },
    /// USR-1008: a vhost was deleted at run time: its connections closed, its queues
    /// and exchanges deleted (`messages` dropped with them, once known).
    VhostDeleted { vhost: String, acting: String },
    /// USR-1009: a vhost or user limit was set at run time (`subject` is `vhost 'x'` or
    /// `user 'x'`; a negative value is no limit).
    LimitSet {
        subject: String,
        limit: String,
        value: i64,
        acting: String,
    },
    /// USR-1010: a vhost or user limit was cleared at run time.
    LimitCleared {
        subject: String,
        limit: String,
        acting: String,
    },
}

impl AdminEvent {
    pub fn code(&self) -> &'static str {
        match self {
            AdminEvent::UserPut { .. } => "USR-1001",
            AdminEvent::UserDeleted { .. } => "USR-1002",
            AdminEvent::PermissionSet { .. } => "USR-1003",
            AdminEvent::PermissionCleared { .. } => "USR-1004",
            AdminEvent::UserSources { .. } => "USR-1005",
            AdminEvent::StoredEntryUnusable { .. } => "USR-1006",
            AdminEvent::VhostPut { .. } => "USR-1007",
            AdminEvent::VhostDeleted { .. } => "USR-1008",
            AdminEvent::LimitSet { .. } => "USR-1009",
            AdminEvent::LimitCleared { .. } => "USR-1010",
        }
    }

    pub fn emit(&self) {
        super::fields::emit(self);
    }
}

impl LogFields for AdminEvent {
    fn level(&self) -> Level {
        match self {
            AdminEvent::StoredEntryUnusable { .. } => Level::WARN,
            _ => Level::INFO,
        }
    }

    fn fields(&self) -> LineFields<'_> {
        LineFields::code(self.code())
    }
}

/// `'a', 'b'` (or `none`).
struct Names<'a>(&'a [String]);

impl fmt::Display for Names<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        for (i, name) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "'{}'", Escaped(name))?;
        }
        Ok(())
    }
}

impl fmt::Display for AdminEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self.code();
        match self {
            AdminEvent::UserPut { user, tags, acting } => write!(
                f,
                "{code} : User put : '{}' tags [{}] by '{}'",
                Escaped(user),
                Escaped(&tags.join(",")),
                Escaped(acting)
            ),
            AdminEvent::UserDeleted { user, acting } => write!(
                f,
                "{code} : User deleted : '{}' by '{}' : its connections are closed",
                Escaped(user),
                Escaped(acting)
            ),
            AdminEvent::PermissionSet {
                user,
                vhost,
                configure,
                write,
                read,
                acting,
            } => write!(
                f,
                "{code} : Permissions set : '{}' on vhost '{}' configure '{}' write '{}' read '{}' by '{}'",
                Escaped(user),
                Escaped(vhost),
                Escaped(configure),
                Escaped(write),
                Escaped(read),
                Escaped(acting)
            ),
            AdminEvent::PermissionCleared {
                user,
                vhost,
                acting,
            } => write!(
                f,
                "{code} : Permissions cleared : '{}' on vhost '{}' by '{}'",
                Escaped(user),
                Escaped(vhost),
                Escaped(acting)
            ),
            AdminEvent::UserSources {
                from_file,
                from_store,
                deleted,
            } => write!(
                f,
                "{code} : Users : from the configuration file {} : from the store (changed at run time) {} : deleted at run time {}",
                Names(from_file),
                Names(from_store),
                Names(deleted)
            ),
            AdminEvent::VhostPut { vhost, acting } => write!(
                f,
                "{code} : Vhost put : '{}' by '{}'",
                Escaped(vhost),
                Escaped(acting)
            ),
            AdminEvent::VhostDeleted { vhost, acting } => write!(
                f,
                "{code} : Vhost deleted : '{}' by '{}' : its connections are closed, its queues and exchanges deleted",
                Escaped(vhost),
                Escaped(acting)
            ),
            AdminEvent::LimitSet {
                subject,
                limit,
                value,
                acting,
            } => write!(
                f,
                "{code} : Limit set : {} {} = {value} by '{}'",
                Escaped(subject),
                Escaped(limit),
                Escaped(acting)
            ),
            AdminEvent::LimitCleared {
                subject,
                limit,
                acting,
            } => write!(
                f,
                "{code} : Limit cleared : {} {} by '{}'",
                Escaped(subject),
                Escaped(limit),
                Escaped(acting)
            ),
            AdminEvent::StoredEntryUnusable { what } => write!(
                f,
                "{code} : Stored definition skipped : {}",
                Escaped(what)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let sources = AdminEvent::UserSources {
            from_file: vec!["guest".into()],
            from_store: vec!["app".into(), "ops".into()],
            deleted: vec![],
        };
        assert_eq!(
            sources.to_string(),
            "USR-1005 : Users : from the configuration file 'guest' : from the store (changed at run time) 'app', 'ops' : deleted at run time none"
        );
        let put = AdminEvent::UserPut {
            user: "a\nBRK-1003".into(),
            tags: vec!["administrator".into()],
            acting: "guest".into(),
        };
        assert!(!put.to_string().contains('\n'), "{put}");
    }
}

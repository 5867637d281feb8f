//! Owns: [`PolicyEvent`], the operational lines of the policies set at run time over
//! the management API (POL-1001..1004), rendered and emitted under `sluice::ops` like
//! every [`super::event::OpsEvent`]. Documented in `config/log-codes.md`.
//!
//! Does not: decide when they happen (`crate::admin::policy` does).

use std::fmt;

use tracing::Level;

use super::escape::Escaped;
use super::fields::{LineFields, LogFields};

/// One policy event; `acting` is the management API user who asked.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyEvent {
    /// POL-1001: a policy was created or replaced.
    Set {
        vhost: String,
        policy: String,
        pattern: String,
        apply_to: &'static str,
        priority: i64,
        definition: String,
        acting: String,
    },
    /// POL-1002: a policy was cleared (deleted, or with its vhost).
    Cleared {
        vhost: String,
        policy: String,
        acting: String,
    },
    /// POL-1003: a policy change was applied on every shard: this many queues changed
    /// their effective policy.
    Applied {
        vhost: String,
        policy: String,
        queues: usize,
    },
    /// POL-1004: a policy was refused (over the API: the 400/404 reason; at start: a
    /// stored policy that no longer validates, left out).
    Refused {
        vhost: String,
        policy: String,
        reason: String,
        acting: String,
    },
}

impl PolicyEvent {
    pub fn code(&self) -> &'static str {
        match self {
            PolicyEvent::Set { .. } => "POL-1001",
            PolicyEvent::Cleared { .. } => "POL-1002",
            PolicyEvent::Applied { .. } => "POL-1003",
            PolicyEvent::Refused { .. } => "POL-1004",
        }
    }

    pub fn emit(&self) {
        super::fields::emit(self);
    }
}

impl LogFields for PolicyEvent {
    fn level(&self) -> Level {
        match self {
            PolicyEvent::Refused { .. } => Level::WARN,
            _ => Level::INFO,
        }
    }

    fn fields(&self) -> LineFields<'_> {
        LineFields::code(self.code())
    }
}

impl fmt::Display for PolicyEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self.code();
        match self {
            PolicyEvent::Set {
                vhost,
                policy,
                pattern,
                apply_to,
                priority,
                definition,
                acting,
            } => write!(
                f,
                "{code} : Policy set : '{}' on vhost '{}' pattern '{}' apply-to {apply_to} priority {priority} definition {} by '{}'",
                Escaped(policy),
                Escaped(vhost),
                Escaped(pattern),
                Escaped(definition),
                Escaped(acting)
            ),
            PolicyEvent::Cleared {
                vhost,
                policy,
                acting,
            } => write!(
                f,
                "{code} : Policy cleared : '{}' on vhost '{}' by '{}'",
                Escaped(policy),
                Escaped(vhost),
                Escaped(acting)
            ),
            PolicyEvent::Applied {
                vhost,
                policy,
                queues,
            } => write!(
                f,
                "{code} : Policy applied : '{}' on vhost '{}' : {queues} queues changed their effective policy",
                Escaped(policy),
                Escaped(vhost)
            ),
            PolicyEvent::Refused {
                vhost,
                policy,
                reason,
                acting,
            } => write!(
                f,
                "{code} : Policy refused : '{}' on vhost '{}' by '{}' : {}",
                Escaped(policy),
                Escaped(vhost),
                Escaped(acting),
                Escaped(reason.trim_end())
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let applied = PolicyEvent::Applied {
            vhost: "/".into(),
            policy: "limit".into(),
            queues: 3,
        };
        assert_eq!(
            applied.to_string(),
            "POL-1003 : Policy applied : 'limit' on vhost '/' : 3 queues changed their effective policy"
        );
        let cleared = PolicyEvent::Cleared {
            vhost: "/".into(),
            policy: "limit".into(),
            acting: "guest".into(),
        };
        assert_eq!(
            cleared.to_string(),
            "POL-1002 : Policy cleared : 'limit' on vhost '/' by 'guest'"
        );
    }
}

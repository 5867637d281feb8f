//! Owns: [`DefinitionsEvent`], the operational lines of definitions imported over the
//! management API (BRK-1021, BRK-1022), rendered and emitted under `sluice::ops` like
//! every [`super::event::OpsEvent`]. Documented in `config/log-codes.md`.
//!
//! Does not: decide when they happen (`crate::http::definitions` does). Lines never
//! carry a password or a hash.

use std::fmt;

use tracing::Level;

use super::escape::Escaped;
use super::fields::{LineFields, LogFields};

/// How many items of each section an import applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportCounts {
    pub users: usize,
    pub vhosts: usize,
    pub permissions: usize,
    pub policies: usize,
    pub queues: usize,
    pub exchanges: usize,
    pub bindings: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum DefinitionsEvent {
    /// BRK-1021: definitions were imported over the management API (`vhost`: into one
    /// vhost, `POST /api/definitions/{vhost}`).
    Imported {
        vhost: Option<String>,
        counts: ImportCounts,
        acting: String,
    },
    /// BRK-1022: an import was refused at an item; the items before it stay applied.
    ImportRefused {
        vhost: Option<String>,
        reason: String,
        applied: ImportCounts,
        acting: String,
    },
}

impl DefinitionsEvent {
    pub fn code(&self) -> &'static str {
        match self {
            DefinitionsEvent::Imported { .. } => "BRK-1021",
            DefinitionsEvent::ImportRefused { .. } => "BRK-1022",
        }
    }

    pub fn emit(&self) {
        super::fields::emit(self);
    }
}

impl LogFields for DefinitionsEvent {
    fn level(&self) -> Level {
        match self {
            DefinitionsEvent::Imported { .. } => Level::INFO,
            DefinitionsEvent::ImportRefused { .. } => Level::WARN,
        }
    }

    fn fields(&self) -> LineFields<'_> {
        let mut fields = LineFields::code(self.code());
        match self {
            DefinitionsEvent::Imported { vhost, .. }
            | DefinitionsEvent::ImportRefused { vhost, .. } => fields.vhost = vhost.as_deref(),
        }
        fields
    }
}

impl fmt::Display for ImportCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} users, {} vhosts, {} permissions, {} policies, {} queues, {} exchanges, {} bindings",
            self.users,
            self.vhosts,
            self.permissions,
            self.policies,
            self.queues,
            self.exchanges,
            self.bindings
        )
    }
}

/// ` into vhost 'v'` for a vhost's import, nothing for the broker's.
struct Into<'a>(&'a Option<String>);

impl fmt::Display for Into<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(v) => write!(f, " into vhost '{}'", Escaped(v)),
            None => Ok(()),
        }
    }
}

impl fmt::Display for DefinitionsEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self.code();
        match self {
            DefinitionsEvent::Imported {
                vhost,
                counts,
                acting,
            } => write!(
                f,
                "{code} : Definitions imported{} : {counts} by '{}'",
                Into(vhost),
                Escaped(acting)
            ),
            DefinitionsEvent::ImportRefused {
                vhost,
                reason,
                applied,
                acting,
            } => write!(
                f,
                "{code} : Definitions import refused{} : {} : applied before it {applied} by '{}'",
                Into(vhost),
                Escaped(reason),
                Escaped(acting)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let counts = ImportCounts {
            users: 1,
            queues: 2,
            ..ImportCounts::default()
        };
        let done = DefinitionsEvent::Imported {
            vhost: None,
            counts,
            acting: "guest".into(),
        };
        assert_eq!(
            done.to_string(),
            "BRK-1021 : Definitions imported : 1 users, 0 vhosts, 0 permissions, 0 policies, 2 queues, 0 exchanges, 0 bindings by 'guest'"
        );
        let refused = DefinitionsEvent::ImportRefused {
            vhost: Some("/".into()),
            reason: "queues[1] 'q': no\nname".into(),
            applied: ImportCounts::default(),
            acting: "guest".into(),
        };
        assert!(refused
            .to_string()
            .starts_with("BRK-1022 : Definitions import refused into vhost '/' : queues[1] 'q': no\\nname : applied"));
        assert_eq!(refused.level(), Level::WARN);
    }
}

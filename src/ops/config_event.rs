//! Owns: [`ConfigEvent`], the operational lines of a configuration reload on SIGHUP
//! (BRK-1018..1020), rendered and emitted under `sluice::ops` like every
//! [`super::event::OpsEvent`]. Documented in `config/log-codes.md`.
//!
//! Does not: decide what is reloaded (`config::reload`) or apply it (`server`).

use std::fmt;

use tracing::Level;

use super::escape::Escaped;
use super::fields::{LineFields, LogFields};

/// One reload event.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigEvent {
    /// BRK-1018: SIGHUP: the file was read and these sections are in force (none: the
    /// file changed nothing that can be reloaded).
    Reloaded { file: String, applied: Vec<String> },
    /// BRK-1019: sections of the file that changed but keep their running value until
    /// the broker is restarted.
    NeedsRestart { keys: Vec<String> },
    /// BRK-1020: SIGHUP: the file could not be read or is invalid; the running
    /// configuration stays.
    ReloadFailed { error: String },
}

impl ConfigEvent {
    pub fn code(&self) -> &'static str {
        match self {
            ConfigEvent::Reloaded { .. } => "BRK-1018",
            ConfigEvent::NeedsRestart { .. } => "BRK-1019",
            ConfigEvent::ReloadFailed { .. } => "BRK-1020",
        }
    }

    /// Logs the event (info for a reload, warn otherwise).
    pub fn emit(&self) {
        super::fields::emit(self);
    }
}

impl LogFields for ConfigEvent {
    fn level(&self) -> Level {
        match self {
            ConfigEvent::Reloaded { .. } => Level::INFO,
            ConfigEvent::NeedsRestart { .. } | ConfigEvent::ReloadFailed { .. } => Level::WARN,
        }
    }

    fn fields(&self) -> LineFields<'_> {
        LineFields::code(self.code())
    }
}

impl fmt::Display for ConfigEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self.code();
        match self {
            ConfigEvent::Reloaded { file, applied } if applied.is_empty() => write!(
                f,
                "{code} : Configuration reloaded : {} : nothing that can be reloaded changed",
                Escaped(file)
            ),
            ConfigEvent::Reloaded { file, applied } => write!(
                f,
                "{code} : Configuration reloaded : {} : {} in force for new logins and declarations",
                Escaped(file),
                Escaped(&applied.join(", "))
            ),
            ConfigEvent::NeedsRestart { keys } => write!(
                f,
                "{code} : Configuration change needs a restart : {} : the running values stay",
                Escaped(&keys.join(", "))
            ),
            ConfigEvent::ReloadFailed { error } => write!(
                f,
                "{code} : Configuration reload failed : {} : the running configuration stays",
                Escaped(error)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let reloaded = ConfigEvent::Reloaded {
            file: "/etc/sluice.toml".into(),
            applied: vec!["auth.users".into(), "auth.permissions".into()],
        };
        assert_eq!(
            reloaded.to_string(),
            "BRK-1018 : Configuration reloaded : /etc/sluice.toml : auth.users, auth.permissions in force for new logins and declarations"
        );
        let restart = ConfigEvent::NeedsRestart {
            keys: vec!["broker.listen".into(), "net".into()],
        };
        assert_eq!(
            restart.to_string(),
            "BRK-1019 : Configuration change needs a restart : broker.listen, net : the running values stay"
        );
        let failed = ConfigEvent::ReloadFailed {
            error: "config file x: bad\nBRK-1004 : Ready".into(),
        };
        assert!(!failed.to_string().contains('\n'), "{failed}");
    }
}

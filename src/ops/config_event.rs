//! Owns: [`ConfigEvent`], the operational lines of a configuration reload on SIGHUP
//! (BRK-1018..1020) the configuration in use at start (BRK-1024), a default management address
//! that is taken (BRK-1025) and a `[::]` listener without IPv6 (BRK-1026), rendered and emitted under `sluice::ops` like every
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
    /// BRK-1024: at start, the configuration file in use (`None`: none, built-in
    /// defaults and flags), and whether the users are the built-in guest/guest, which
    /// may log in from loopback only.
    InUse {
        file: Option<String>,
        built_in_guest: bool,
    },
    /// BRK-1025: at start, the management listener's default address (no `http.listen`,
    /// no `--http-listen`) is taken; the broker starts without it.
    ManagementPortTaken {
        addr: std::net::SocketAddr,
        error: String,
    },
    /// BRK-1026: at start, a `[::]` listener address could not be bound because the
    /// kernel has no IPv6; `0.0.0.0` on the same port is bound instead.
    Ipv4Only {
        addr: std::net::SocketAddr,
        instead: std::net::SocketAddr,
        error: String,
    },
}

impl ConfigEvent {
    pub fn code(&self) -> &'static str {
        match self {
            ConfigEvent::Reloaded { .. } => "BRK-1018",
            ConfigEvent::NeedsRestart { .. } => "BRK-1019",
            ConfigEvent::ReloadFailed { .. } => "BRK-1020",
            ConfigEvent::InUse { .. } => "BRK-1024",
            ConfigEvent::ManagementPortTaken { .. } => "BRK-1025",
            ConfigEvent::Ipv4Only { .. } => "BRK-1026",
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
            ConfigEvent::Reloaded { .. } | ConfigEvent::InUse { .. } => Level::INFO,
            ConfigEvent::NeedsRestart { .. }
            | ConfigEvent::ReloadFailed { .. }
            | ConfigEvent::ManagementPortTaken { .. }
            | ConfigEvent::Ipv4Only { .. } => Level::WARN,
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
            ConfigEvent::ManagementPortTaken { addr, error } => write!(
                f,
                "{code} : Management listener not started : the default address {addr} is taken ({}) : the broker goes on without it; set http.listen or --http-listen (or \"off\")",
                Escaped(error)
            ),
            ConfigEvent::Ipv4Only {
                addr,
                instead,
                error,
            } => write!(
                f,
                "{code} : IPv6 not available : {addr} ({}) : listening on {instead} instead",
                Escaped(error)
            ),
            ConfigEvent::InUse {
                file,
                built_in_guest,
            } => {
                match file {
                    Some(file) => write!(f, "{code} : Configuration file : {}", Escaped(file))?,
                    None => write!(
                        f,
                        "{code} : Configuration file : none (built-in defaults and flags)"
                    )?,
                }
                if *built_in_guest {
                    f.write_str(
                        " : built-in user 'guest' (password 'guest') may log in from loopback only",
                    )?;
                }
                Ok(())
            }
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
        assert_eq!(
            ConfigEvent::InUse {
                file: None,
                built_in_guest: true
            }
            .to_string(),
            "BRK-1024 : Configuration file : none (built-in defaults and flags) : built-in \
             user 'guest' (password 'guest') may log in from loopback only"
        );
        assert_eq!(
            ConfigEvent::InUse {
                file: Some("/etc/sluice.toml".into()),
                built_in_guest: false
            }
            .to_string(),
            "BRK-1024 : Configuration file : /etc/sluice.toml"
        );
        let failed = ConfigEvent::ReloadFailed {
            error: "config file x: bad\nBRK-1004 : Ready".into(),
        };
        assert!(!failed.to_string().contains('\n'), "{failed}");
    }
}

//! Owns: the TOML configuration file format (`config/sluice.toml` is its annotated
//! example) and how its values override the defaults.
//!
//! Does not: decide defaults (that is `Config::default`) or read the command line.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::{parse_core_list, Config, ConfigError, User};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    broker: Option<BrokerSection>,
    auth: Option<AuthSection>,
    vhosts: Option<VhostsSection>,
    limits: Option<LimitsSection>,
    net: Option<NetSection>,
    shard: Option<ShardSection>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BrokerSection {
    listen: Option<Vec<SocketAddr>>,
    shards: Option<usize>,
    pin_cores: Option<String>,
    data_dir: Option<String>,
    log_level: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthSection {
    users: Option<Vec<UserEntry>>,
    loopback_users: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserEntry {
    name: String,
    password: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VhostsSection {
    names: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsSection {
    frame_max: Option<u32>,
    channel_max: Option<u16>,
    heartbeat: Option<u16>,
    max_message_size: Option<u64>,
    max_tx_operations: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NetSection {
    read_buffer: Option<usize>,
    write_high_water: Option<usize>,
    write_low_water: Option<usize>,
    inline_body_max: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShardSection {
    inbox_capacity: Option<usize>,
    dispatch_budget: Option<usize>,
    no_ack_window: Option<u32>,
    tick_ms: Option<u64>,
}

fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}

/// Reads `path` and applies every key it sets onto `config`.
pub fn apply_file(config: &mut Config, path: &Path) -> Result<(), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
        file: path.to_owned(),
        reason: e.to_string(),
    })?;
    apply_text(config, &text).map_err(|reason| ConfigError::Parse {
        file: path.to_owned(),
        reason,
    })
}

/// Applies TOML text onto `config`. The error names the offending key and line.
pub fn apply_text(config: &mut Config, text: &str) -> Result<(), String> {
    let file: FileConfig = toml::from_str(text).map_err(|e| e.to_string())?;
    if let Some(b) = file.broker {
        set(&mut config.listen, b.listen);
        set(&mut config.shards, b.shards);
        if let Some(list) = b.pin_cores {
            config.pin_cores =
                Some(parse_core_list(&list).map_err(|e| format!("broker.pin_cores: {e}"))?);
        }
        set(&mut config.data_dir, b.data_dir.map(Into::into));
        set(&mut config.log_level, b.log_level);
    }
    if let Some(a) = file.auth {
        if let Some(users) = a.users {
            config.users = users
                .into_iter()
                .map(|u| User {
                    name: u.name,
                    password: u.password,
                })
                .collect();
        }
        set(&mut config.loopback_users, a.loopback_users);
    }
    if let Some(v) = file.vhosts {
        set(&mut config.vhosts, v.names);
    }
    if let Some(l) = file.limits {
        set(&mut config.limits.frame_max, l.frame_max);
        set(&mut config.limits.channel_max, l.channel_max);
        set(&mut config.limits.heartbeat, l.heartbeat);
        set(&mut config.limits.max_message_size, l.max_message_size);
        set(&mut config.limits.max_tx_operations, l.max_tx_operations);
    }
    if let Some(n) = file.net {
        set(&mut config.net.read_buffer, n.read_buffer);
        set(&mut config.net.write_high_water, n.write_high_water);
        set(&mut config.net.write_low_water, n.write_low_water);
        set(&mut config.net.inline_body_max, n.inline_body_max);
    }
    if let Some(s) = file.shard {
        set(&mut config.shard.inbox_capacity, s.inbox_capacity);
        set(&mut config.shard.dispatch_budget, s.dispatch_budget);
        set(&mut config.shard.no_ack_window, s.no_ack_window);
        set(&mut config.shard.tick, s.tick_ms.map(Duration::from_millis));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_key_is_named() {
        let mut c = Config::default();
        let err = apply_text(&mut c, "[limits]\nframe_maxx = 5\n").expect_err("unknown key");
        assert!(err.contains("frame_maxx"), "{err}");
    }

    #[test]
    fn bad_value_is_named() {
        let mut c = Config::default();
        let err = apply_text(&mut c, "[broker]\nshards = \"two\"\n").expect_err("bad type");
        assert!(err.contains("shards"), "{err}");
    }

    #[test]
    fn example_config_parses_to_the_defaults() {
        let text = include_str!("../../config/sluice.toml");
        let mut c = Config::default();
        apply_text(&mut c, text).expect("example parses");
        // The example spells out every default, so applying it changes nothing.
        assert_eq!(c, Config::default());
    }
}

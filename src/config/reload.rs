//! Owns: what reloading the configuration file (SIGHUP) changes in a running broker —
//! comparing a freshly loaded [`Config`] with the one in force, section by section, into
//! the configuration to apply (the running one with the reloadable sections replaced)
//! and the keys whose change waits for a restart.
//!
//! Does not: read the file (`Config::load` does, with the flags on top, as at start),
//! send anything to the shards (`server` does, through their inboxes) or log.

use super::Config;

/// The outcome of comparing a loaded configuration with the running one.
#[derive(Debug)]
pub struct Reload {
    /// The configuration to put in force: the running one with every reloadable section
    /// of the loaded one. Equal to the running one when `applied` is empty.
    pub config: Config,
    /// The reloadable sections that changed and are applied now.
    pub applied: Vec<&'static str>,
    /// The sections that changed but keep their running value until a restart.
    pub restart: Vec<&'static str>,
}

/// Compares `loaded` with `running`. Applied without a restart: users and their
/// passwords and tags, `loopback_users`, `permissions` (checked at each login and
/// `connection.open`), and the `[[queue]]`, `[[topic]]` and `[vhost."…"]` policies
/// (looked up when a queue is declared or gets its first topic binding; queues that
/// exist keep what they resolved). Everything else is bound into sockets, threads,
/// counters or files at start and is reported in `restart`.
pub fn plan(running: &Config, loaded: Config) -> Reload {
    let mut config = running.clone();
    let mut applied = Vec::new();
    let mut restart = Vec::new();
    if loaded.users != running.users {
        applied.push("auth.users");
        config.users = loaded.users.clone();
    }
    if loaded.loopback_users != running.loopback_users {
        applied.push("auth.loopback_users");
        config.loopback_users = loaded.loopback_users.clone();
    }
    if loaded.permissions != running.permissions {
        applied.push("auth.permissions");
        config.permissions = loaded.permissions.clone();
    }
    let (new, old) = (&loaded.policies, &running.policies);
    if new.queues != old.queues {
        applied.push("queue");
        config.policies.queues = new.queues.clone();
    }
    if new.topics != old.topics {
        applied.push("topic");
        config.policies.topics = new.topics.clone();
    }
    if new.vhosts != old.vhosts {
        // Store quotas are set on the disk board at start.
        let quotas = |c: &Config| -> Vec<_> {
            c.vhosts
                .iter()
                .map(|v| c.policies.vhost(v).store_quota)
                .collect()
        };
        if quotas(&loaded) == quotas(running) {
            applied.push("vhost");
            config.policies.vhosts = new.vhosts.clone();
        } else {
            restart.push("vhost (store_overfull_size, store_underfull_size)");
        }
    }
    let (new_limits, old_limits) = (&loaded.limits.resources, &running.limits.resources);
    if new_limits.vhosts != old_limits.vhosts || new_limits.users != old_limits.users {
        // The shared connection counts take their new limits from the admin thread.
        applied.push("limits (per vhost and per user)");
        config.limits.resources.vhosts = new_limits.vhosts.clone();
        config.limits.resources.users = new_limits.users.clone();
    }
    let fixed: [(&'static str, bool); 19] = [
        ("broker.listen", loaded.listen != running.listen),
        ("broker.node_name", loaded.node_name != running.node_name),
        ("federation", loaded.federation != running.federation),
        ("broker.shards", loaded.shards != running.shards),
        ("broker.pin_cores", loaded.pin_cores != running.pin_cores),
        ("broker.data_dir", loaded.data_dir != running.data_dir),
        ("broker.log_level", loaded.log_level != running.log_level),
        ("broker.log_format", loaded.log_format != running.log_format),
        ("vhosts.names", loaded.vhosts != running.vhosts),
        ("limits", !limits_equal(&loaded, running)),
        ("limits (connections, objects)", {
            let (a, b) = (&loaded.limits.resources, &running.limits.resources);
            a.connections != b.connections
                || a.consumers_per_channel != b.consumers_per_channel
                || a.bindings_per_exchange != b.bindings_per_exchange
        }),
        (
            "limits.login",
            loaded.limits.resources.login != running.limits.resources.login,
        ),
        ("net", loaded.net != running.net),
        ("shard", loaded.shard != running.shard),
        ("policy", new.tuning != old.tuning),
        ("flow", new.flow != old.flow),
        ("memory", new.memory != old.memory),
        ("store", loaded.store != running.store),
        (
            "http / tls",
            loaded.http != running.http || loaded.tls != running.tls,
        ),
    ];
    restart.extend(
        fixed
            .iter()
            .filter(|(_, changed)| *changed)
            .map(|(k, _)| *k),
    );
    Reload {
        config,
        applied,
        restart,
    }
}

/// The protocol limits of `[limits]` (the connection, object and login limits are
/// reported on their own).
fn limits_equal(a: &Config, b: &Config) -> bool {
    let (a, b) = (&a.limits, &b.limits);
    a.frame_max == b.frame_max
        && a.channel_max == b.channel_max
        && a.heartbeat == b.heartbeat
        && a.max_message_size == b.max_message_size
        && a.max_tx_operations == b.max_tx_operations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(toml: &str) -> Config {
        Config::from_test_text(toml)
    }

    const BASE: &str = "[auth]\nusers = [{ name = \"a\", password = \"one\" }]\n";

    #[test]
    fn an_unchanged_file_changes_nothing() {
        let running = load(BASE);
        let r = plan(&running, load(BASE));
        assert!(r.applied.is_empty() && r.restart.is_empty(), "{r:?}");
        assert_eq!(r.config, running);
    }

    #[test]
    fn users_and_permissions_are_applied() {
        let running = load(BASE);
        let changed = load(
            "[auth]\nusers = [{ name = \"a\", password = \"two\" }, { name = \"b\", password = \"x\" }]\n\
             loopback_users = []\n\
             permissions = [{ user = \"b\", vhost = \"/\", configure = \".*\", write = \".*\", read = \".*\" }]\n",
        );
        let r = plan(&running, changed.clone());
        assert_eq!(
            r.applied,
            ["auth.users", "auth.loopback_users", "auth.permissions"]
        );
        assert!(r.restart.is_empty(), "{:?}", r.restart);
        assert_eq!(r.config, changed);
        assert!(r.config.authenticate("a", b"two").is_some());
        assert!(r.config.authenticate("a", b"one").is_none());
    }

    #[test]
    fn bound_sections_wait_for_a_restart() {
        let running = load(BASE);
        let loaded = load(&format!(
            "[broker]\nlisten = [\"127.0.0.1:5999\"]\nshards = 3\n\
             [limits]\nframe_max = 65536\n[net]\nread_buffer = 65536\n{BASE}"
        ));
        let r = plan(&running, loaded);
        assert!(r.applied.is_empty(), "{:?}", r.applied);
        assert_eq!(
            r.restart,
            ["broker.listen", "broker.shards", "limits", "net"]
        );
        // The running values stay.
        assert_eq!(r.config, running);
    }

    #[test]
    fn queue_policies_apply_but_store_quotas_wait() {
        let running = load(BASE);
        let r = plan(
            &running,
            load(&format!(
                "{BASE}[[queue]]\nvhost = \"/\"\nname = \"q\"\ncapacity = 100000\n"
            )),
        );
        assert_eq!(r.applied, ["queue"]);
        assert_eq!(r.config.policies.queues.len(), 1);
        let r = plan(
            &running,
            load(&format!(
                "{BASE}[vhost.\"/\"]\nstore_overfull_size = 1000000\n"
            )),
        );
        assert!(r.applied.is_empty());
        assert_eq!(
            r.restart,
            ["vhost (store_overfull_size, store_underfull_size)"]
        );
    }
}

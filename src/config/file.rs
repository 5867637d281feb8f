//! Owns: the TOML configuration file format (`config/sluice.toml` is its annotated
//! example) and how its values override the defaults.
//!
//! Does not: decide defaults (that is `Config::default`) or read the command line.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::policy::capacity::CapacitySettings;
use crate::policy::slow_consumer::{Action, SlowConsumerSettings};
use crate::policy::watermark::MemoryLimit;

use super::policy::{QueueEntry, StoreQuota, TopicEntry, VhostDefaults};
use super::{parse_core_list, Config, ConfigError};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    broker: Option<BrokerSection>,
    auth: Option<AuthSection>,
    vhosts: Option<VhostsSection>,
    limits: Option<LimitsSection>,
    net: Option<NetSection>,
    shard: Option<ShardSection>,
    store: Option<StoreSection>,
    stream: Option<super::stream::StreamSection>,
    policy: Option<PolicySection>,
    flow: Option<FlowSection>,
    memory: Option<MemorySection>,
    vhost: Option<BTreeMap<String, VhostSection>>,
    topic: Option<Vec<TopicSection>>,
    queue: Option<Vec<QueueSection>>,
    http: Option<HttpSection>,
    tls: Option<super::tls::TlsSection>,
    federation: Option<super::federation::FederationSection>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpSection {
    /// An address or "off".
    listen: Option<String>,
    per_queue_metrics: Option<bool>,
    /// Milliseconds; 0 = no limit.
    header_read_timeout_ms: Option<u64>,
    /// Milliseconds; 0 = never.
    idle_timeout_ms: Option<u64>,
    max_connections: Option<u32>,
    /// An address or "off".
    prometheus_listen: Option<String>,
    /// Milliseconds, at least 100.
    stats_interval_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicySection {
    housekeeping_interval_ms: Option<u64>,
    rate_window_ms: Option<u64>,
    warn_horizon_ms: Option<u64>,
    alert_repeat_gap_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FlowSection {
    grace_bytes: Option<u64>,
    enforcement_timeout_ms: Option<u64>,
}

/// A memory limit: an integer (bytes), a float (fraction of memory) or a string
/// ("512MiB", "40%").
#[derive(Deserialize)]
#[serde(untagged)]
enum LimitValue {
    Bytes(u64),
    Fraction(f64),
    Text(String),
}

impl LimitValue {
    fn parse(self, key: &str) -> Result<MemoryLimit, String> {
        match self {
            LimitValue::Bytes(b) => Ok(MemoryLimit::Bytes(b)),
            LimitValue::Fraction(f) => MemoryLimit::fraction(f),
            LimitValue::Text(t) => MemoryLimit::parse(&t),
        }
        .map_err(|e| format!("{key}: {e}"))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MemorySection {
    high_watermark: Option<LimitValue>,
    low_watermark: Option<LimitValue>,
    report_interval_ms: Option<u64>,
    return_interval_ms: Option<u64>,
    huge_pages: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SlowConsumerSection {
    policy: Option<String>,
    max_depth: Option<u64>,
    max_count: Option<u64>,
    max_age_ms: Option<u64>,
    min_rate: Option<f64>,
    include_persistent: Option<bool>,
    include_durable: Option<bool>,
}

impl SlowConsumerSection {
    fn settings(self, key: &str) -> Result<SlowConsumerSettings, String> {
        let action = match self.policy.as_deref() {
            None => None,
            Some(text) => Some(
                Action::CHOICES
                    .iter()
                    .find(|(name, _)| name.eq_ignore_ascii_case(text))
                    .map(|(_, a)| *a)
                    .ok_or_else(|| {
                        format!("{key}.policy: expected \"delete\" or \"cycle\", got \"{text}\"")
                    })?,
            ),
        };
        if let Some(rate) = self.min_rate {
            if !rate.is_finite() || rate < 0.0 {
                return Err(format!("{key}.min_rate: expected a non-negative number"));
            }
        }
        Ok(SlowConsumerSettings {
            action,
            max_depth: self.max_depth,
            max_count: self.max_count,
            max_age: self.max_age_ms.map(Duration::from_millis),
            min_rate: self.min_rate,
            include_persistent: self.include_persistent,
            include_durable: self.include_durable,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VhostSection {
    capacity: Option<u64>,
    flow_resume_capacity: Option<u64>,
    store_overfull_size: Option<u64>,
    store_underfull_size: Option<u64>,
    slow_consumer: Option<SlowConsumerSection>,
    max_connections: Option<u32>,
    max_queues: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicSection {
    vhost: Option<String>,
    exchange: Option<String>,
    binding: Option<String>,
    queue: Option<String>,
    slow_consumer: SlowConsumerSection,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueSection {
    vhost: Option<String>,
    name: String,
    capacity: u64,
    flow_resume_capacity: Option<u64>,
}

/// Capacity settings from a file section: 0 means unlimited, a resume capacity of 0 (or
/// none) means "the capacity".
fn capacity(capacity: Option<u64>, resume: Option<u64>) -> CapacitySettings {
    CapacitySettings {
        capacity,
        flow_resume_capacity: resume.filter(|r| *r > 0),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BrokerSection {
    listen: Option<Vec<SocketAddr>>,
    shards: Option<usize>,
    pin_cores: Option<String>,
    data_dir: Option<String>,
    log_level: Option<String>,
    log_format: Option<String>,
    node_name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthSection {
    users: Option<Vec<super::auth::UserEntry>>,
    loopback_users: Option<Vec<String>>,
    permissions: Option<Vec<super::auth::PermissionSection>>,
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
    consumers_per_channel: Option<u32>,
    bindings_per_exchange: Option<u32>,
    connections: Option<super::limits::ConnectionsSection>,
    login: Option<super::limits::LoginSection>,
    user: Option<BTreeMap<String, super::limits::UserSection>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NetSection {
    read_buffer: Option<usize>,
    read_buffer_min: Option<usize>,
    write_high_water: Option<usize>,
    write_low_water: Option<usize>,
    inline_body_max: Option<usize>,
    reader_park_after_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShardSection {
    inbox_capacity: Option<usize>,
    inbox_bytes: Option<u64>,
    dispatch_budget: Option<usize>,
    dispatch_at_write: Option<bool>,
    no_ack_window: Option<u32>,
    no_ack_window_bytes: Option<u64>,
    tick_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreSection {
    segment_size: Option<u64>,
    fsync: Option<bool>,
    page_out_fraction: Option<f64>,
    disk_free_limit: Option<SizeValue>,
    disk_free_limit_relative: Option<f64>,
}

/// A size: an integer (bytes) or a string with a unit ("50MB").
#[derive(Deserialize)]
#[serde(untagged)]
enum SizeValue {
    Bytes(u64),
    Text(String),
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
    let mut file: FileConfig = toml::from_str(text).map_err(|e| e.to_string())?;
    let policies = PolicyFile {
        policy: file.policy.take(),
        flow: file.flow.take(),
        memory: file.memory.take(),
        vhost: file.vhost.take(),
        topic: file.topic.take(),
        queue: file.queue.take(),
    };
    if let Some(b) = file.broker {
        set(&mut config.listen, b.listen);
        set(&mut config.shards, b.shards);
        if let Some(list) = b.pin_cores {
            config.pin_cores =
                Some(parse_core_list(&list).map_err(|e| format!("broker.pin_cores: {e}"))?);
        }
        set(&mut config.data_dir, b.data_dir.map(Into::into));
        set(&mut config.log_level, b.log_level);
        set(&mut config.node_name, b.node_name);
        if let Some(format) = b.log_format {
            config.log_format =
                super::LogFormat::parse(&format).map_err(|e| format!("broker.log_format: {e}"))?;
        }
    }
    if let Some(a) = file.auth {
        if let Some(users) = a.users {
            config.built_in_users = false;
            config.users = users
                .into_iter()
                .map(super::auth::UserEntry::into_user)
                .collect::<Result<_, _>>()?;
        }
        set(&mut config.loopback_users, a.loopback_users);
        if let Some(list) = a.permissions {
            config.permissions = super::auth::compile_permissions(list)?;
        }
    }
    if let Some(h) = file.http {
        if let Some(listen) = h.listen {
            config.http.listen_chosen = true;
            config.http.listen =
                super::parse_listen_or_off(&listen).map_err(|e| format!("http.listen: {e}"))?;
        }
        set(&mut config.http.per_queue_metrics, h.per_queue_metrics);
        let optional_ms = |ms: u64| (ms > 0).then(|| Duration::from_millis(ms));
        if let Some(ms) = h.header_read_timeout_ms {
            config.http.header_read_timeout = optional_ms(ms);
        }
        if let Some(ms) = h.idle_timeout_ms {
            config.http.idle_timeout = optional_ms(ms);
        }
        set(&mut config.http.max_connections, h.max_connections);
        if let Some(listen) = h.prometheus_listen {
            config.http.prometheus_listen = super::parse_listen_or_off(&listen)
                .map_err(|e| format!("http.prometheus_listen: {e}"))?;
        }
        if let Some(ms) = h.stats_interval_ms {
            if ms < 100 {
                return Err(format!(
                    "http.stats_interval_ms: {ms} is below the minimum of 100"
                ));
            }
            config.http.stats_interval = Duration::from_millis(ms);
        }
    }
    if let Some(f) = file.federation {
        config.federation = f.parse()?;
    }
    if let Some(t) = file.tls {
        t.apply(&mut config.tls);
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
        let keys = super::limits::LimitsKeys {
            consumers_per_channel: l.consumers_per_channel,
            bindings_per_exchange: l.bindings_per_exchange,
            connections: l.connections,
            login: l.login,
            user: l.user,
        };
        super::limits::apply(&mut config.limits.resources, keys);
    }
    if let Some(n) = file.net {
        set(&mut config.net.read_buffer, n.read_buffer);
        set(&mut config.net.read_buffer_min, n.read_buffer_min);
        set(&mut config.net.write_high_water, n.write_high_water);
        set(&mut config.net.write_low_water, n.write_low_water);
        set(&mut config.net.inline_body_max, n.inline_body_max);
        if let Some(ms) = n.reader_park_after_ms {
            config.net.reader_park_after = (ms > 0).then(|| Duration::from_millis(ms));
        }
    }
    if let Some(s) = file.shard {
        set(&mut config.shard.inbox_capacity, s.inbox_capacity);
        set(&mut config.shard.dispatch_budget, s.dispatch_budget);
        set(&mut config.shard.dispatch_at_write, s.dispatch_at_write);
        set(&mut config.shard.no_ack_window, s.no_ack_window);
        set(&mut config.shard.inbox_bytes, s.inbox_bytes);
        set(&mut config.shard.no_ack_window_bytes, s.no_ack_window_bytes);
        set(&mut config.shard.tick, s.tick_ms.map(Duration::from_millis));
    }
    if let Some(s) = file.store {
        set(&mut config.store.segment_size, s.segment_size);
        set(&mut config.store.fsync, s.fsync);
        set(&mut config.store.page_out_fraction, s.page_out_fraction);
        // Relative wins over absolute when both are given (documented in sluice.toml).
        match (s.disk_free_limit_relative, s.disk_free_limit) {
            (Some(r), _) => {
                config.store.disk_free_limit = super::DiskFreeLimit::relative(r)
                    .map_err(|e| format!("store.disk_free_limit_relative: {e}"))?;
            }
            (None, Some(SizeValue::Bytes(b))) => {
                config.store.disk_free_limit = super::DiskFreeLimit::Bytes(b);
            }
            (None, Some(SizeValue::Text(t))) => {
                config.store.disk_free_limit = super::DiskFreeLimit::parse_bytes(&t)
                    .map_err(|e| format!("store.disk_free_limit: {e}"))?;
            }
            (None, None) => {}
        }
    }
    if let Some(s) = file.stream {
        s.apply(&mut config.stream)?;
    }
    apply_policies(config, policies)
}

/// The policy sections of a file, taken out of it.
struct PolicyFile {
    policy: Option<PolicySection>,
    flow: Option<FlowSection>,
    memory: Option<MemorySection>,
    vhost: Option<BTreeMap<String, VhostSection>>,
    topic: Option<Vec<TopicSection>>,
    queue: Option<Vec<QueueSection>>,
}

fn apply_policies(config: &mut Config, file: PolicyFile) -> Result<(), String> {
    let p = &mut config.policies;
    let ms = |v: Option<u64>| v.map(Duration::from_millis);
    if let Some(s) = file.policy {
        let t = &mut p.tuning;
        set(&mut t.housekeeping_interval, ms(s.housekeeping_interval_ms));
        set(&mut t.rate_window, ms(s.rate_window_ms));
        set(&mut t.warn_horizon, ms(s.warn_horizon_ms));
        set(&mut t.alert_repeat_gap, ms(s.alert_repeat_gap_ms));
    }
    if let Some(f) = file.flow {
        set(&mut p.flow.grace_bytes, f.grace_bytes);
        set(
            &mut p.flow.enforcement_timeout,
            ms(f.enforcement_timeout_ms),
        );
    }
    if let Some(m) = file.memory {
        if let Some(v) = m.high_watermark {
            p.memory.high_watermark = v.parse("memory.high_watermark")?;
        }
        if let Some(v) = m.low_watermark {
            p.memory.low_watermark = Some(v.parse("memory.low_watermark")?);
        }
        set(&mut p.memory.report_interval, ms(m.report_interval_ms));
        set(&mut p.memory.return_interval, ms(m.return_interval_ms));
        set(&mut p.memory.huge_pages, m.huge_pages);
    }
    for (name, v) in file.vhost.unwrap_or_default() {
        let key = format!("vhost.\"{name}\"");
        let limits = &mut config.limits.resources;
        super::limits::apply_vhost(limits, &name, v.max_connections, v.max_queues);
        let store_quota = StoreQuota::new(
            v.store_overfull_size.unwrap_or(0),
            v.store_underfull_size.unwrap_or(0),
        )
        .map_err(|reason| format!("{key}: {reason}"))?;
        let defaults = VhostDefaults {
            store_quota,
            capacity: capacity(v.capacity, v.flow_resume_capacity),
            slow_consumer: v
                .slow_consumer
                .unwrap_or_default()
                .settings(&format!("{key}.slow_consumer"))?,
        };
        p.vhosts.retain(|(n, _)| *n != name);
        // A section that only repeats the defaults changes nothing.
        let unlimited = VhostDefaults {
            capacity: capacity(Some(0), None),
            ..VhostDefaults::default()
        };
        if defaults != VhostDefaults::default() && defaults != unlimited {
            p.vhosts.push((name, defaults));
        }
    }
    for (i, t) in file.topic.unwrap_or_default().into_iter().enumerate() {
        p.topics.push(TopicEntry {
            vhost: t.vhost.unwrap_or_else(|| "/".to_owned()),
            exchange: t.exchange.unwrap_or_else(|| "amq.topic".to_owned()),
            binding: t.binding,
            queue: t.queue,
            slow_consumer: t
                .slow_consumer
                .settings(&format!("topic[{i}].slow_consumer"))?,
        });
    }
    for q in file.queue.unwrap_or_default() {
        p.queues.push(QueueEntry {
            vhost: q.vhost.unwrap_or_else(|| "/".to_owned()),
            name: q.name,
            capacity: capacity(Some(q.capacity), q.flow_resume_capacity),
        });
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
    fn policy_sections_parse() {
        let mut c = Config::default();
        let text = r#"
[policy]
housekeeping_interval_ms = 50
rate_window_ms = 500
[flow]
grace_bytes = 1000
[memory]
high_watermark = "512MiB"
low_watermark = 0.1
[vhost."/"]
capacity = 1000
flow_resume_capacity = 800
[vhost."/".slow_consumer]
policy = "cycle"
max_count = 10
[[topic]]
binding = "prices.#"
slow_consumer = { max_depth = 1024, min_rate = 2.5 }
[[topic]]
queue = "durable-sub"
exchange = "events"
slow_consumer = { policy = "delete", max_age_ms = 1500, include_durable = true }
[[queue]]
name = "orders"
capacity = 2000
"#;
        apply_text(&mut c, text).expect("parses");
        c.validate().expect("valid");
        let p = &c.policies;
        assert_eq!(p.tuning.housekeeping_interval, Duration::from_millis(50));
        assert_eq!(p.flow.grace_bytes, 1000);
        assert_eq!(p.memory.high_watermark, MemoryLimit::Bytes(512 << 20));
        assert_eq!(p.memory.low_watermark, Some(MemoryLimit::Fraction(0.1)));
        let vhost = p.vhost("/");
        assert_eq!(
            vhost.capacity.resolve().map(|c| (c.capacity, c.resume)),
            Some((1000, 800))
        );
        assert_eq!(vhost.slow_consumer.action, Some(Action::Cycle));
        let t = p
            .topic_for_binding("/", "amq.topic", "prices.#")
            .expect("topic entry");
        assert_eq!(t.slow_consumer.max_depth, Some(1024));
        let t = p.topic_for_queue("/", "durable-sub").expect("queue entry");
        assert_eq!(t.exchange, "events");
        assert_eq!(t.slow_consumer.include_durable, Some(true));
        let q = p.queue_capacity("/", "orders").resolve().expect("limited");
        assert_eq!((q.capacity, q.resume), (2000, 2000));
        assert_eq!(
            p.queue_capacity("/", "other").resolve().map(|c| c.capacity),
            Some(1000)
        );
    }

    #[test]
    fn policy_errors_name_their_key() {
        let bad = [
            (
                "[vhost.\"/\".slow_consumer]\npolicy = \"drop\"\n",
                "vhost.\"/\".slow_consumer.policy",
            ),
            (
                "[memory]\nhigh_watermark = \"12 parsecs\"\n",
                "memory.high_watermark",
            ),
            ("[memory]\nhigh_watermark = 1.5\n", "memory.high_watermark"),
            (
                "[[topic]]\nbinding = \"a\"\nslow_consumer = { max_count = 1, colour = 3 }\n",
                "colour",
            ),
        ];
        for (text, key) in bad {
            let mut c = Config::default();
            let err = apply_text(&mut c, text).expect_err(text);
            assert!(err.contains(key), "{err} should name {key}");
        }
        let invalid = [
            (
                "[[queue]]\nname = \"q\"\ncapacity = 100\nflow_resume_capacity = 200\n",
                "queue[0].flow_resume_capacity",
            ),
            ("[vhost.\"nope\"]\ncapacity = 5\n", "vhost.\"nope\""),
            (
                "[[topic]]\nbinding = \"a\"\nqueue = \"b\"\nslow_consumer = { max_count = 1 }\n",
                "topic[0]",
            ),
            (
                "[[topic]]\nbinding = \"a\"\nslow_consumer = { policy = \"cycle\" }\n",
                "topic[0].slow_consumer",
            ),
            (
                "[policy]\nhousekeeping_interval_ms = 5\n",
                "policy.housekeeping_interval_ms",
            ),
        ];
        for (text, key) in invalid {
            let mut c = Config::default();
            apply_text(&mut c, text).expect("parses");
            let err = c.validate().expect_err(text);
            assert!(err.to_string().contains(key), "{err} should name {key}");
        }
    }

    #[test]
    fn example_config_parses_to_the_defaults() {
        let text = include_str!("../../config/sluice.toml");
        let mut c = Config::default();
        apply_text(&mut c, text).expect("example parses");
        // The file did set users (where they came from, not what they are); it leaves
        // the management address to its default.
        assert!(!c.built_in_users && !c.http.listen_chosen);
        c.built_in_users = true;
        // The example spells out every default, so applying it changes nothing else.
        assert_eq!(c, Config::default());
    }
}

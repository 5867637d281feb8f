//! Owns: the broker's immutable [`Config`] — built from embedded defaults, then the TOML
//! file (`--config`), then command-line flags — and its validation. Every option is listed
//! with its default and unit in `config/sluice.toml`.
//!
//! Does not: read globals, open sockets or start threads. The `Config` is passed down to
//! each shard at construction; nothing reads it ambiently.

pub mod access;
pub mod auth;
pub mod cli;
pub mod federation;
pub mod file;
pub mod limits;
pub mod policy;
pub mod reload;
pub mod stream;
pub mod tls;

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use crate::ops::log::LogFormat;
pub use cli::Cli;
pub use policy::Policies;

/// A user allowed to log in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    /// Plain text or a RabbitMQ-format salted hash (`crate::auth::password`).
    pub password: crate::auth::password::Password,
    /// RabbitMQ-style tags; `administrator` may change things through the management API.
    pub tags: Vec<String>,
}

impl User {
    /// RabbitMQ's `administrator` tag: the management API lets this user change users,
    /// vhosts, permissions and definitions, and reach every vhost.
    pub fn is_administrator(&self) -> bool {
        self.tags.iter().any(|t| t == "administrator")
    }

    /// Whether the user may change policies: RabbitMQ's `policymaker` or
    /// `administrator` tag.
    pub fn is_policymaker(&self) -> bool {
        self.tags
            .iter()
            .any(|t| t == "policymaker" || t == "administrator")
    }

    /// Whether the management API admits this user once `[auth] permissions` is set:
    /// RabbitMQ's management-family tags.
    pub fn may_use_management(&self) -> bool {
        const TAGS: [&str; 4] = ["management", "policymaker", "monitoring", "administrator"];
        self.tags.iter().any(|t| TAGS.contains(&t.as_str()))
    }
}

/// `[http]`: the management listener (metrics and API).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpConfig {
    /// Where to listen; `None` = off.
    pub listen: Option<SocketAddr>,
    /// `listen` was set by the file or a flag. The default address being taken (another
    /// broker's management port) is a warning (BRK-1025) and the broker starts without
    /// it; an address the operator chose that cannot be bound stops the start.
    pub listen_chosen: bool,
    /// One series per queue (`true`) or per-vhost totals (`false`).
    pub per_queue_metrics: bool,
    /// How long a client has to send a request's headers, from the moment the listener
    /// waits for them (accept, or the end of the previous response); `None` = no limit.
    pub header_read_timeout: Option<Duration>,
    /// A connection with no request being served and no byte moving either way for this
    /// long is closed; `None` = never.
    pub idle_timeout: Option<Duration>,
    /// Open management connections at most; over it a new one is closed as accepted.
    /// 0 = no limit.
    pub max_connections: u32,
    /// The Prometheus listener (`GET /metrics` under RabbitMQ's names, no credentials,
    /// as rabbitmq_prometheus serves 15692); `None` = off (the default).
    pub prometheus_listen: Option<SocketAddr>,
    /// How often the management thread samples the shards' message counters for the
    /// rates of `/api` (`http::rates`; RabbitMQ's `collect_statistics_interval`).
    pub stats_interval: Duration,
}

impl Default for HttpConfig {
    fn default() -> HttpConfig {
        HttpConfig {
            listen: Some(SocketAddr::from(([127, 0, 0, 1], 15672))),
            listen_chosen: false,
            per_queue_metrics: true,
            header_read_timeout: Some(Duration::from_secs(10)),
            idle_timeout: Some(Duration::from_secs(60)),
            max_connections: 1024,
            prometheus_listen: None,
            stats_interval: Duration::from_secs(5),
        }
    }
}

impl HttpConfig {
    /// The management address is the built-in default (127.0.0.1:15672, with [::1]
    /// beside it), not one the operator chose: taken, it is a warning, not an error.
    pub fn default_listen(&self) -> bool {
        !self.listen_chosen && self.listen == HttpConfig::default().listen
    }
}

/// Parses `ADDR` or `off` (the management listener's address).
pub fn parse_listen_or_off(text: &str) -> Result<Option<SocketAddr>, String> {
    if text.trim().eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    text.trim()
        .parse()
        .map(Some)
        .map_err(|_| format!("'{text}' is neither an address (127.0.0.1:15672) nor \"off\""))
}

/// Connection-level protocol limits offered in `connection.tune`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest frame, bytes, including header and end octet (min 4096).
    pub frame_max: u32,
    /// Highest channel number a client may open.
    pub channel_max: u16,
    /// Heartbeat interval offered, seconds (0 disables).
    pub heartbeat: u16,
    /// Largest message body accepted, bytes.
    pub max_message_size: u64,
    /// Most publishes plus acks buffered in one open transaction.
    pub max_tx_operations: usize,
    /// Connection, queue, consumer and binding limits, and login throttling.
    pub resources: limits::ResourceLimits,
}

/// Socket-level tuning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetTuning {
    /// The most bytes requested per socket read (a busy connection's read buffer); also
    /// the reader's per-turn budget.
    pub read_buffer: usize,
    /// The read buffer a connection starts with and shrinks back to when its traffic is
    /// light (an idle subscriber holds this much).
    pub read_buffer_min: usize,
    /// Outbound bytes queued for one connection above which deliveries stop.
    pub write_high_water: usize,
    /// Outbound bytes below which deliveries resume.
    pub write_low_water: usize,
    /// Bodies up to this many bytes are copied into the outbound buffer instead of being
    /// written as their own iovec (cheaper than an iovec for tiny bodies).
    pub inline_body_max: usize,
    /// A plain connection that has sent nothing for this long has its reader parked:
    /// the reader task ends and the shard's epoll set watches the socket until it has
    /// bytes (`net::park`); a connection its client restarts soon after waits longer
    /// before its next park (`shard::reader_park::park_backoff_after`). `None`: readers
    /// never park.
    pub reader_park_after: Option<std::time::Duration>,
}

/// Shard event-loop tuning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardTuning {
    /// Publish batches a shard's inbox holds before senders wait.
    pub inbox_capacity: usize,
    /// Bytes of message data in flight to one shard's publish inbox before senders wait
    /// (a message counts its bytes and the entries it will make there).
    pub inbox_bytes: u64,
    /// Messages one queue dispatches per turn before others get a go.
    pub dispatch_budget: usize,
    /// A queue whose only consumer is a no-ack one on the queue's own shard is
    /// dispatched when the write pass reaches the consumer's connection (once per
    /// write), not at the end of every turn that gave it a message.
    pub dispatch_at_write: bool,
    /// Messages in flight to a no-ack (or unlimited-prefetch) consumer before the queue
    /// waits for the consumer's socket to drain.
    pub no_ack_window: u32,
    /// Bytes of message data in flight to such a consumer (the same window, in bytes:
    /// a window of messages is unbounded when messages are large).
    pub no_ack_window_bytes: u64,
    /// Timer wheel tick.
    pub tick: Duration,
}

/// The whole broker configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub listen: Vec<SocketAddr>,
    pub shards: usize,
    pub pin_cores: Option<Vec<usize>>,
    pub data_dir: PathBuf,
    pub log_level: String,
    /// `text` or `json` (`--log-format`, `[broker] log_format`).
    pub log_format: LogFormat,
    /// The vhosts in force (the file's, with those created or deleted at run time).
    pub vhosts: Vec<String>,
    /// The vhosts' slots in every shard's directory in this run, by position (`None`:
    /// deleted at run time; a slot is never reused within a run). Empty until the broker
    /// starts (then `vhosts` in order): see [`Config::vhost_index`].
    pub vhost_slots: Vec<Option<String>>,
    /// Description and tags of the vhosts created at run time (RabbitMQ's metadata).
    pub vhost_metadata: Vec<(String, crate::store::access::StoredVhost)>,
    /// The policies set over the management API (never from the file): the store's,
    /// changed by the admin thread (`crate::admin`), applied by every shard.
    pub runtime_policies: crate::policy::set::PolicySet,
    pub users: Vec<User>,
    /// `users` is the built-in default (guest/guest, loopback only): no file set
    /// `[auth] users`. BRK-1017 does not warn about a password nobody chose.
    pub built_in_users: bool,
    /// The configuration file read at start (`--config`), if any (BRK-1024).
    pub config_file: Option<PathBuf>,
    /// Users that may only connect from loopback addresses.
    pub loopback_users: Vec<String>,
    pub limits: Limits,
    pub net: NetTuning,
    pub shard: ShardTuning,
    /// Slow-consumer and flow-control settings, memory watermark.
    pub policies: Policies,
    /// The persistent message store.
    pub store: StoreConfig,
    /// `[stream]`: the broker's settings for streams.
    pub stream: stream::StreamConfig,
    /// The management listener.
    pub http: HttpConfig,
    /// `[auth] permissions`: per-vhost configure/write/read patterns (`crate::auth`).
    pub permissions: crate::auth::permissions::Permissions,
    /// TLS (amqps) listeners.
    pub tls: tls::TlsConfig,
    /// `[broker] node_name`: this node in federation loop detection and link names
    /// (RabbitMQ's cluster name); unique in a topology. Default: the host name.
    pub node_name: String,
    /// `[[federation.upstream]]` and `[[federation.exchange]]`.
    pub federation: federation::FederationConfig,
}

/// `[store]`: the persistent message store under `data_dir`.
#[derive(Clone, Debug, PartialEq)]
pub struct StoreConfig {
    /// A segment file rolls over once it holds this many bytes.
    pub segment_size: u64,
    /// fdatasync every group commit before its confirms go out. Off, confirms follow
    /// the write alone: a crash of the process loses nothing, a power cut may.
    pub fsync: bool,
    /// Above this fraction of the memory high watermark, shards release the bodies of
    /// persistent messages on durable queues (they are on disk) and read them back as
    /// they are delivered. 0 = never.
    pub page_out_fraction: f64,
    /// Free space on the data dir's file system below which every publisher is
    /// blocked (the disk alarm).
    pub disk_free_limit: DiskFreeLimit,
}

/// `store.disk_free_limit` / `store.disk_free_limit_relative`: the free disk space the
/// broker keeps, as RabbitMQ's `disk_free_limit.absolute` / `.relative`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DiskFreeLimit {
    /// Bytes.
    Bytes(u64),
    /// A multiple of the memory available to the broker (RAM or the cgroup limit).
    Relative(f64),
}

impl DiskFreeLimit {
    /// RabbitMQ's default: 50 MB.
    pub const DEFAULT: DiskFreeLimit = DiskFreeLimit::Bytes(50_000_000);

    /// Bytes, given the memory available to the broker.
    pub fn resolve(&self, memory: u64) -> u64 {
        match *self {
            DiskFreeLimit::Bytes(b) => b,
            DiskFreeLimit::Relative(r) => (memory as f64 * r) as u64,
        }
    }

    /// Parses bytes or a size with a unit (`"50MB"`, `"1GiB"`, `"0"`); a fraction is
    /// refused (that is `disk_free_limit_relative`).
    pub fn parse_bytes(text: &str) -> Result<DiskFreeLimit, String> {
        match crate::policy::watermark::MemoryLimit::parse(text)? {
            crate::policy::watermark::MemoryLimit::Bytes(b) => Ok(DiskFreeLimit::Bytes(b)),
            crate::policy::watermark::MemoryLimit::Fraction(_) => Err(format!(
                "'{text}' is not a size (bytes or e.g. 50MB; a multiple of RAM is disk_free_limit_relative)"
            )),
        }
    }

    /// A multiple of memory: finite and not negative (RabbitMQ suggests 1.0 to 2.0).
    pub fn relative(r: f64) -> Result<DiskFreeLimit, String> {
        if r.is_finite() && r >= 0.0 {
            Ok(DiskFreeLimit::Relative(r))
        } else {
            Err(format!(
                "{r} is not a multiple of memory (a number, 0 or more)"
            ))
        }
    }
}

impl std::fmt::Display for DiskFreeLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DiskFreeLimit::Bytes(b) => write!(f, "{b} bytes"),
            DiskFreeLimit::Relative(r) => write!(f, "{r} x available memory"),
        }
    }
}

/// A configuration problem, naming where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The file could not be read.
    Read { file: PathBuf, reason: String },
    /// The file is not valid TOML or has an unknown key or a bad value.
    Parse { file: PathBuf, reason: String },
    /// A value is out of range.
    Invalid { key: String, reason: String },
    /// A value of the configuration file is out of range.
    InvalidInFile {
        file: PathBuf,
        key: String,
        reason: String,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read { file, reason } => {
                write!(f, "cannot read config file {}: {reason}", file.display())
            }
            ConfigError::Parse { file, reason } => {
                write!(f, "config file {}: {reason}", file.display())
            }
            ConfigError::Invalid { key, reason } => write!(f, "option '{key}': {reason}"),
            ConfigError::InvalidInFile { file, key, reason } => {
                write!(
                    f,
                    "config file {}: option '{key}': {reason}",
                    file.display()
                )
            }
        }
    }
}

impl std::error::Error for ConfigError {}

impl Default for Config {
    fn default() -> Config {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Config {
            // Dual-stack (`net::listener`), as RabbitMQ: `localhost` may be ::1 or
            // 127.0.0.1; 0.0.0.0 where the kernel has no IPv6.
            listen: vec![SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 5672))],
            shards: cores,
            pin_cores: None,
            data_dir: PathBuf::from("./sluice-data"),
            log_level: "info".to_owned(),
            log_format: LogFormat::Text,
            vhosts: vec!["/".to_owned()],
            vhost_slots: Vec::new(),
            vhost_metadata: Vec::new(),
            runtime_policies: Default::default(),
            users: vec![User {
                name: "guest".to_owned(),
                password: crate::auth::password::Password::Plain("guest".to_owned()),
                tags: vec!["administrator".to_owned()],
            }],
            built_in_users: true,
            config_file: None,
            loopback_users: vec!["guest".to_owned()],
            limits: Limits {
                frame_max: 131_072,
                channel_max: 2047,
                heartbeat: 60,
                max_message_size: 128 * 1024 * 1024,
                max_tx_operations: 65_536,
                resources: limits::ResourceLimits::default(),
            },
            net: NetTuning {
                read_buffer: 128 * 1024,
                read_buffer_min: 2048,
                write_high_water: 1024 * 1024,
                write_low_water: 256 * 1024,
                inline_body_max: 512,
                reader_park_after: Some(Duration::from_millis(250)),
            },
            shard: ShardTuning {
                inbox_capacity: 256,
                inbox_bytes: 4 * 1024 * 1024,
                dispatch_budget: 256,
                dispatch_at_write: true,
                no_ack_window: 2000,
                no_ack_window_bytes: 1024 * 1024,
                tick: Duration::from_millis(10),
            },
            policies: Policies::default(),
            store: StoreConfig {
                segment_size: 64 << 20,
                fsync: true,
                page_out_fraction: 0.5,
                disk_free_limit: DiskFreeLimit::DEFAULT,
            },
            stream: stream::StreamConfig::default(),
            http: HttpConfig::default(),
            permissions: crate::auth::permissions::Permissions::default(),
            tls: tls::TlsConfig::default(),
            node_name: federation::default_node_name(),
            federation: federation::FederationConfig::default(),
        }
    }
}

impl Config {
    /// The configured user with this name and password: the check of a login (PLAIN or
    /// AMQPLAIN) and of the management API's basic auth.
    /// An unknown user costs hashing too, so the time of a refusal does not tell
    /// whether the user exists.
    /// Defaults with `toml` applied and validated (unit tests of configuration users).
    #[cfg(test)]
    pub fn from_test_text(toml: &str) -> Config {
        let mut c = Config::default();
        file::apply_text(&mut c, toml).expect("parses");
        c.validate().expect("valid");
        c
    }

    /// The directory slot (`VhostIdx`) of the vhost called `name` in this run, if it is
    /// in force: its position among the slots, or among `vhosts` before the start.
    pub fn vhost_index(&self, name: &str) -> Option<usize> {
        if self.vhost_slots.is_empty() {
            return self.vhosts.iter().position(|v| v == name);
        }
        self.vhost_slots
            .iter()
            .position(|v| v.as_deref() == Some(name))
    }

    pub fn authenticate(&self, user: &str, password: &[u8]) -> Option<&User> {
        match self.users.iter().find(|u| u.name == user) {
            Some(u) => u.password.verify(password).then_some(u),
            None => {
                let unknown = crate::auth::password::Password::sha256_with_salt([0; 4], b"");
                let _ = std::hint::black_box(unknown.verify(password));
                None
            }
        }
    }

    /// Defaults, then the file named by `--config` (if any), then the flags.
    pub fn load(cli: &Cli) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        if let Some(path) = &cli.config {
            file::apply_file(&mut config, path)?;
            config.config_file = Some(path.clone());
        }
        cli.apply(&mut config)?;
        config.validate().map_err(|e| match (e, &cli.config) {
            // A key of the file (not a flag) is reported with the file it came from.
            (ConfigError::Invalid { key, reason }, Some(file)) if !key.starts_with("--") => {
                ConfigError::InvalidInFile {
                    file: file.clone(),
                    key,
                    reason,
                }
            }
            (e, _) => e,
        })?;
        Ok(config)
    }

    /// Checks ranges and cross-field rules.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, reason: String| {
            Err(ConfigError::Invalid {
                key: key.to_owned(),
                reason,
            })
        };
        // A TLS-only broker has no plain listener (`listen = []` with `[tls] listen`).
        if self.listen.is_empty() && self.tls.listen.is_empty() {
            return invalid(
                "broker.listen",
                "at least one address is needed (here or in tls.listen)".into(),
            );
        }
        if self.node_name.trim().is_empty() {
            return invalid("broker.node_name", "must not be empty".into());
        }
        if self.federation.is_enabled() {
            if self.listen.is_empty() {
                return invalid(
                    "broker.listen",
                    "federation links publish into this broker over a plain AMQP listener; \
                     listen on at least one address (127.0.0.1:5672 will do)"
                        .into(),
                );
            }
            for (i, x) in self.federation.exchanges.iter().enumerate() {
                if !self.vhosts.contains(&x.vhost) {
                    return invalid(
                        &format!("federation.exchange[{i}].vhost"),
                        format!("\"{}\" is not in vhosts.names", x.vhost),
                    );
                }
            }
        }
        if self.shards == 0 || self.shards > 256 {
            return invalid(
                "broker.shards",
                format!("{} is not in 1..=256", self.shards),
            );
        }
        if let Some(cores) = &self.pin_cores {
            if cores.len() < self.shards {
                return invalid(
                    "pin_cores (--pin-cores / broker.pin_cores)",
                    format!(
                        "{} cores listed for {} shards; list one core per shard",
                        cores.len(),
                        self.shards
                    ),
                );
            }
        }
        if self.limits.frame_max < 4096 {
            return invalid(
                "limits.frame_max",
                format!(
                    "{} is below the AMQP minimum of 4096",
                    self.limits.frame_max
                ),
            );
        }
        if self.vhosts.is_empty() {
            return invalid("vhosts.names", "at least one virtual host is needed".into());
        }
        if self.net.write_low_water > self.net.write_high_water {
            return invalid(
                "net.write_low_water",
                "must not exceed net.write_high_water".into(),
            );
        }
        if self.net.read_buffer < 4096 {
            return invalid("net.read_buffer", "must be at least 4096 bytes".into());
        }
        if self.net.read_buffer_min < 512 || self.net.read_buffer_min > self.net.read_buffer {
            return invalid(
                "net.read_buffer_min",
                "must be at least 512 bytes and at most net.read_buffer".into(),
            );
        }
        if self.shard.inbox_capacity == 0 || self.shard.dispatch_budget == 0 {
            return invalid(
                "shard.inbox_capacity",
                "inbox_capacity and dispatch_budget must be at least 1".into(),
            );
        }
        if self.shard.no_ack_window == 0 {
            return invalid("shard.no_ack_window", "must be at least 1".into());
        }
        if self.store.segment_size < 4096 {
            return invalid("store.segment_size", "must be at least 4096 bytes".into());
        }
        if !(0.0..=1.0).contains(&self.store.page_out_fraction) {
            return invalid(
                "store.page_out_fraction",
                "must be between 0 and 1 (a fraction of memory.high_watermark)".into(),
            );
        }
        if self.shard.tick.is_zero() {
            return invalid("shard.tick_ms", "must be at least 1 ms".into());
        }
        if self.shard.inbox_bytes < 64 * 1024 {
            return invalid("shard.inbox_bytes", "must be at least 65536".into());
        }
        if self.shard.no_ack_window_bytes == 0 {
            return invalid("shard.no_ack_window_bytes", "must be at least 1".into());
        }
        auth::validate(self)?;
        self.limits.resources.validate(&self.vhosts)?;
        if let Err((key, reason)) = self.tls.check() {
            return invalid(key, reason);
        }
        self.validate_policies()
    }

    fn validate_policies(&self) -> Result<(), ConfigError> {
        let invalid = |key: String, reason: String| Err(ConfigError::Invalid { key, reason });
        let p = &self.policies;
        if p.tuning.housekeeping_interval < Duration::from_millis(10) {
            return invalid(
                "policy.housekeeping_interval_ms".into(),
                "must be at least 10 ms".into(),
            );
        }
        if p.tuning.rate_window < p.tuning.housekeeping_interval {
            return invalid(
                "policy.rate_window_ms".into(),
                "must be at least policy.housekeeping_interval_ms".into(),
            );
        }
        if p.tuning.alert_repeat_gap.is_zero() {
            return invalid(
                "policy.alert_repeat_gap_ms".into(),
                "must be at least 1 ms".into(),
            );
        }
        for (name, defaults) in &p.vhosts {
            if !self.vhosts.contains(name) {
                return invalid(
                    format!("vhost.\"{name}\""),
                    format!("'{name}' is not in vhosts.names {:?}", self.vhosts),
                );
            }
            if let Err(reason) = defaults.capacity.check() {
                return invalid(format!("vhost.\"{name}\".flow_resume_capacity"), reason);
            }
        }
        for (i, q) in p.queues.iter().enumerate() {
            if !self.vhosts.contains(&q.vhost) {
                return invalid(
                    format!("queue[{i}].vhost"),
                    format!("'{}' is not in vhosts.names", q.vhost),
                );
            }
            if let Err(reason) = q.capacity.check() {
                return invalid(format!("queue[{i}].flow_resume_capacity"), reason);
            }
        }
        for (i, t) in p.topics.iter().enumerate() {
            if !self.vhosts.contains(&t.vhost) {
                return invalid(
                    format!("topic[{i}].vhost"),
                    format!("'{}' is not in vhosts.names", t.vhost),
                );
            }
            if t.binding.is_some() == t.queue.is_some() {
                return invalid(
                    format!("topic[{i}]"),
                    "give exactly one of 'binding' (with 'exchange') or 'queue'".into(),
                );
            }
            if t.slow_consumer.resolve().is_none() {
                return invalid(
                    format!("topic[{i}].slow_consumer"),
                    "sets no threshold (max_depth, max_count, max_age_ms or min_rate)".into(),
                );
            }
        }
        if let (
            crate::policy::watermark::MemoryLimit::Bytes(high),
            Some(crate::policy::watermark::MemoryLimit::Bytes(low)),
        ) = (p.memory.high_watermark, p.memory.low_watermark)
        {
            if low > high {
                return invalid(
                    "memory.low_watermark".into(),
                    format!("{low} is above memory.high_watermark {high}"),
                );
            }
        }
        Ok(())
    }
}

/// Parses a core list such as `0,1`, `0-3` or `0-1,4`.
pub fn parse_core_list(text: &str) -> Result<Vec<usize>, String> {
    let mut cores = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if let Some((a, b)) = part.split_once('-') {
            let a: usize = a
                .trim()
                .parse()
                .map_err(|_| format!("'{part}' is not a range"))?;
            let b: usize = b
                .trim()
                .parse()
                .map_err(|_| format!("'{part}' is not a range"))?;
            if a > b {
                return Err(format!("'{part}' is an empty range"));
            }
            cores.extend(a..=b);
        } else {
            cores.push(
                part.parse()
                    .map_err(|_| format!("'{part}' is not a core number"))?,
            );
        }
    }
    if cores.is_empty() {
        return Err("the core list is empty".into());
    }
    Ok(cores)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_amqp_listener_is_dual_stack() {
        assert_eq!(
            Config::default().listen,
            vec!["[::]:5672".parse::<SocketAddr>().expect("addr")]
        );
    }

    #[test]
    fn core_lists() {
        assert_eq!(parse_core_list("0,1"), Ok(vec![0, 1]));
        assert_eq!(parse_core_list("0-3"), Ok(vec![0, 1, 2, 3]));
        assert_eq!(parse_core_list("0-1, 4"), Ok(vec![0, 1, 4]));
        assert!(parse_core_list("3-1").is_err());
        assert!(parse_core_list("x").is_err());
        assert!(parse_core_list("").is_err());
    }

    #[test]
    fn http_listen_takes_an_address_or_off() {
        assert_eq!(parse_listen_or_off("off"), Ok(None));
        assert_eq!(
            parse_listen_or_off("127.0.0.1:0"),
            Ok(Some(SocketAddr::from(([127, 0, 0, 1], 0))))
        );
        assert!(parse_listen_or_off("nowhere").is_err());
        let mut c = Config::default();
        file::apply_text(
            &mut c,
            "[http]\nlisten = \"off\"\nper_queue_metrics = false\n",
        )
        .expect("parses");
        assert_eq!(c.http.listen, None);
        assert!(!c.http.per_queue_metrics);
        assert_eq!(c.http.header_read_timeout, Some(Duration::from_secs(10)));
        assert_eq!(c.http.max_connections, 1024);
        file::apply_text(
            &mut c,
            "[http]\nheader_read_timeout_ms = 0\nidle_timeout_ms = 1500\nmax_connections = 3\n",
        )
        .expect("parses");
        assert_eq!(c.http.header_read_timeout, None);
        assert_eq!(c.http.idle_timeout, Some(Duration::from_millis(1500)));
        assert_eq!(c.http.max_connections, 3);
        assert!(file::apply_text(&mut c, "[http]\nlisten = \"x\"\n").is_err());
        assert_eq!(
            c.http.prometheus_listen, None,
            "the Prometheus listener is off by default"
        );
        file::apply_text(&mut c, "[http]\nprometheus_listen = \"0.0.0.0:15692\"\n")
            .expect("parses");
        assert_eq!(
            c.http.prometheus_listen,
            Some(SocketAddr::from(([0, 0, 0, 0], 15692)))
        );
        assert!(file::apply_text(&mut c, "[http]\nprometheus_listen = \"x\"\n").is_err());
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(Config::default().validate(), Ok(()));
    }

    #[test]
    fn a_broker_needs_a_plain_or_a_tls_listener() {
        let mut c = Config::default();
        file::apply_text(&mut c, "[broker]\nlisten = []\n").expect("parses");
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Invalid { key, .. }) if key == "broker.listen"
        ));
        let tls_only =
            "[tls]\nlisten = [\"0.0.0.0:5671\"]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\n";
        file::apply_text(&mut c, tls_only).expect("parses");
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn frame_max_below_minimum_is_rejected() {
        let mut c = Config::default();
        c.limits.frame_max = 1000;
        let err = c.validate().expect_err("must fail");
        assert!(err.to_string().contains("limits.frame_max"), "{err}");
    }
}

//! Owns: the broker's command-line flags (`sluice --help`; the tools beside the broker
//! are `crate::cli`'s) and how flags override the file.
//!
//! Does not: hold defaults (they live in `Config::default` and are shown in `--help` only
//! where they cannot differ from it).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

use crate::policy::watermark::MemoryLimit;

use super::{parse_core_list, Config, ConfigError, LogFormat};

/// sluice — an AMQP 0-9-1 broker for heavy topic fan-out, one io_uring event loop per core.
#[derive(Parser, Debug, Clone, Default)]
#[command(name = "sluice", version, about, long_about = None)]
pub struct Cli {
    /// Address to accept AMQP connections on (repeatable) [default: [::]:5672, dual-stack].
    #[arg(long = "listen", value_name = "ADDR")]
    pub listen: Vec<SocketAddr>,

    /// Number of shards (event-loop threads) [default: number of cores].
    #[arg(long, value_name = "N")]
    pub shards: Option<usize>,

    /// Pin shard i to the i-th listed core, e.g. `0,1` or `0-3`.
    #[arg(long = "pin-cores", value_name = "LIST")]
    pub pin_cores: Option<String>,

    /// TOML configuration file (see config/sluice.toml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Directory for the message store and durable definitions [default: ./sluice-data].
    #[arg(long = "data-dir", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// Log filter: error, warn, info, debug, trace, or a tracing directive [default: info].
    #[arg(long = "log-level", value_name = "LEVEL")]
    pub log_level: Option<String>,

    /// Log output: `text` (one line per event) or `json` (one object per line, the
    /// parts of operational lines as their own fields) [default: text].
    #[arg(long = "log-format", value_name = "FORMAT", value_parser = LogFormat::NAMES)]
    pub log_format: Option<String>,

    /// Message memory above which every publisher is blocked: bytes, a fraction of the
    /// machine's memory (0.4), a percentage (40%) or a size (512MiB) [default: 0.4].
    #[arg(long = "memory-high-watermark", value_name = "LIMIT")]
    pub memory_high_watermark: Option<String>,

    /// Message memory below which blocked publishers resume, same forms
    /// [default: 90% of the high watermark].
    #[arg(long = "memory-low-watermark", value_name = "LIMIT")]
    pub memory_low_watermark: Option<String>,

    /// Free disk space on the data dir's file system below which every publisher is
    /// blocked: bytes or a size (50MB, 1GiB) [default: 50MB]. Overrides
    /// `store.disk_free_limit_relative` from the file.
    #[arg(long = "disk-free-limit", value_name = "BYTES")]
    pub disk_free_limit: Option<String>,

    /// Management listener (metrics and HTTP API): an address, or `off`
    /// [default: 127.0.0.1:15672].
    #[arg(long = "http-listen", value_name = "ADDR|off")]
    pub http_listen: Option<String>,

    /// Prometheus listener (`GET /metrics` under RabbitMQ's metric names, no
    /// credentials; RabbitMQ serves it on 15692): an address, or `off` [default: off].
    #[arg(long = "prometheus-listen", value_name = "ADDR|off")]
    pub prometheus_listen: Option<String>,

    /// This node's name in federation (loop detection, link and queue names); unique
    /// in a topology [default: the host name].
    #[arg(long = "node-name", value_name = "NAME")]
    pub node_name: Option<String>,

    #[command(flatten)]
    pub tls: super::tls::TlsFlags,
}

impl Cli {
    /// Applies the flags that were given onto `config`.
    pub fn apply(&self, config: &mut Config) -> Result<(), ConfigError> {
        if !self.listen.is_empty() {
            config.listen = self.listen.clone();
        }
        if let Some(n) = self.shards {
            config.shards = n;
        }
        if let Some(list) = &self.pin_cores {
            config.pin_cores =
                Some(
                    parse_core_list(list).map_err(|reason| ConfigError::Invalid {
                        key: "--pin-cores".to_owned(),
                        reason,
                    })?,
                );
        }
        if let Some(dir) = &self.data_dir {
            config.data_dir = dir.clone();
        }
        if let Some(level) = &self.log_level {
            config.log_level = level.clone();
        }
        if let Some(format) = &self.log_format {
            config.log_format =
                LogFormat::parse(format).map_err(|reason| ConfigError::Invalid {
                    key: "--log-format".to_owned(),
                    reason,
                })?;
        }
        let limit = |flag: &str, text: &str| {
            MemoryLimit::parse(text).map_err(|reason| ConfigError::Invalid {
                key: flag.to_owned(),
                reason,
            })
        };
        if let Some(text) = &self.memory_high_watermark {
            config.policies.memory.high_watermark = limit("--memory-high-watermark", text)?;
        }
        if let Some(text) = &self.disk_free_limit {
            config.store.disk_free_limit =
                super::DiskFreeLimit::parse_bytes(text).map_err(|reason| ConfigError::Invalid {
                    key: "--disk-free-limit".to_owned(),
                    reason,
                })?;
        }
        if let Some(text) = &self.http_listen {
            config.http.listen_chosen = true;
            config.http.listen =
                super::parse_listen_or_off(text).map_err(|reason| ConfigError::Invalid {
                    key: "--http-listen".to_owned(),
                    reason,
                })?;
        }
        if let Some(text) = &self.prometheus_listen {
            config.http.prometheus_listen =
                super::parse_listen_or_off(text).map_err(|reason| ConfigError::Invalid {
                    key: "--prometheus-listen".to_owned(),
                    reason,
                })?;
        }
        self.tls.apply(&mut config.tls);
        if let Some(name) = &self.node_name {
            config.node_name = name.clone();
        }
        if let Some(text) = &self.memory_low_watermark {
            config.policies.memory.low_watermark = Some(limit("--memory-low-watermark", text)?);
        }
        Ok(())
    }
}

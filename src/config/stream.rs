//! Owns: `[stream]`, the settings of streams (`x-queue-type = stream`) that are the
//! broker's rather than a stream's own (those are declare arguments): how much of each
//! stream's newest messages stays in memory, how many disk reads for readers a shard
//! runs at once, how many consumer offsets a stream tracks, how often retention by age
//! is checked.
//!
//! Does not: apply them (the shards do) or know a stream's arguments
//! (`policy::stream_args`).

use std::time::Duration;

use serde::Deserialize;

/// `[stream]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamConfig {
    /// Bytes of each stream's newest messages kept in memory for readers at the tail
    /// (less while message memory is above `store.page_out_fraction` of the watermark).
    pub tail_cache_bytes: u64,
    /// Disk reads for readers behind the tail cache a shard runs at once.
    pub max_concurrent_reads: usize,
    /// Consumer tags whose offset a stream tracks, at most.
    pub max_tracked_consumers: usize,
    /// How often each stream checks retention by age and predicts its readers' lag.
    pub retention_check: Duration,
}

impl Default for StreamConfig {
    fn default() -> StreamConfig {
        StreamConfig {
            tail_cache_bytes: 8 << 20,
            max_concurrent_reads: 16,
            max_tracked_consumers: 65_536,
            retention_check: Duration::from_secs(1),
        }
    }
}

/// `[stream]` as written in the file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamSection {
    tail_cache_bytes: Option<u64>,
    max_concurrent_reads: Option<usize>,
    max_tracked_consumers: Option<usize>,
    retention_check_ms: Option<u64>,
}

impl StreamSection {
    /// Puts the keys the file sets over `config`.
    pub fn apply(self, config: &mut StreamConfig) -> Result<(), String> {
        if let Some(n) = self.tail_cache_bytes {
            config.tail_cache_bytes = n;
        }
        if let Some(n) = self.max_concurrent_reads {
            if n == 0 {
                return Err("stream.max_concurrent_reads: at least 1".into());
            }
            config.max_concurrent_reads = n;
        }
        if let Some(n) = self.max_tracked_consumers {
            if n == 0 {
                return Err("stream.max_tracked_consumers: at least 1".into());
            }
            config.max_tracked_consumers = n;
        }
        if let Some(ms) = self.retention_check_ms {
            if ms < 10 {
                return Err("stream.retention_check_ms: at least 10".into());
            }
            config.retention_check = Duration::from_millis(ms);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_apply_and_bad_values_are_refused() {
        let section: StreamSection = toml::from_str(
            "tail_cache_bytes = 1024\nmax_concurrent_reads = 2\nretention_check_ms = 50\n",
        )
        .expect("parses");
        let mut c = StreamConfig::default();
        section.apply(&mut c).expect("valid");
        assert_eq!(c.tail_cache_bytes, 1024);
        assert_eq!(c.max_concurrent_reads, 2);
        assert_eq!(c.retention_check, Duration::from_millis(50));
        assert_eq!(c.max_tracked_consumers, 65_536);
        let bad: StreamSection = toml::from_str("max_concurrent_reads = 0").expect("parses");
        assert!(bad.apply(&mut StreamConfig::default()).is_err());
        assert!(toml::from_str::<StreamSection>("nope = 1").is_err());
    }
}

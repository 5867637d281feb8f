//! Owns: which shard is a queue's home — `hash(vhost, name) mod shards`, with a stable
//! FNV-1a hash so homes survive restarts — and server-generated queue names (`amq.gen-…`)
//! chosen so that they hash to the declaring connection's shard.
//!
//! Does not: keep state; every function is pure.

use crate::model::ids::ShardId;

fn fnv1a(vhost: &str, name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in vhost.as_bytes().iter().chain(&[0u8]).chain(name) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The home shard of queue `name` in `vhost`.
pub fn home_shard(vhost: &str, name: &[u8], shards: usize) -> ShardId {
    let shards = shards.max(1) as u64;
    // `shards` is at most 256 (validated), so the remainder fits.
    (fnv1a(vhost, name) % shards) as ShardId
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// A server-named queue name whose home is `shard`. `seed` must differ per call (the
/// caller passes a per-shard counter mixed with time); names are `amq.gen-` plus 22
/// URL-safe characters, as RabbitMQ's are.
pub fn generated_name(vhost: &str, shard: ShardId, shards: usize, seed: u64) -> String {
    let mut state = seed ^ 0x9E37_79B9_7F4A_7C15 ^ (u64::from(shard) << 48);
    loop {
        let mut name = String::with_capacity(30);
        name.push_str("amq.gen-");
        for _ in 0..22 {
            // xorshift64*
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let r = state.wrapping_mul(0x2545_F491_4F6C_DD1D);
            name.push(char::from(ALPHABET[(r >> 58) as usize]));
        }
        if home_shard(vhost, name.as_bytes(), shards) == shard {
            return name;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_are_local() {
        for shards in 1..6 {
            for shard in 0..shards {
                for seed in 0..20u64 {
                    let n = generated_name("/", shard as ShardId, shards, seed);
                    assert!(n.starts_with("amq.gen-") && n.len() == 30, "{n}");
                    assert_eq!(home_shard("/", n.as_bytes(), shards), shard as ShardId);
                }
            }
        }
    }

    #[test]
    fn home_is_stable_and_spreads() {
        assert_eq!(home_shard("/", b"orders", 4), home_shard("/", b"orders", 4));
        let homes: std::collections::HashSet<_> = (0..64)
            .map(|i| home_shard("/", format!("q{i}").as_bytes(), 4))
            .collect();
        assert_eq!(homes.len(), 4);
    }
}

//! Owns: the names of direct reply-to (RabbitMQ's `amq.rabbitmq.reply-to`) — the
//! pseudo-queue a channel consumes from, and the per-channel reply address
//! `amq.rabbitmq.reply-to.<token>` that a requester's `reply_to` is rewritten to — and
//! the token: the channel it names ([`ChannelRef`]: shard, connection slot and
//! generation, channel number and epoch) followed by an HMAC-SHA256 of those bytes
//! under a key drawn at random once per process, truncated to 128 bits, in unpadded
//! base64url. A token cannot be guessed or altered to name another channel: without the
//! key no MAC checks, and a channel closed (or a connection slot reused) fails the
//! epoch or generation check where the channel lives.
//!
//! Does not: deliver, route or keep any per-channel state (the channel keeps its reply
//! consumer; the shard delivers).

use std::sync::OnceLock;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

use crate::model::ids::{ChannelRef, ConnId};

/// The pseudo-queue a requester consumes its replies from (no-ack only).
pub const PSEUDO_QUEUE: &str = "amq.rabbitmq.reply-to";

/// What a reply address starts with.
pub const PREFIX: &str = "amq.rabbitmq.reply-to.";

/// Bytes of the channel it names: shard 2, slot 4, generation 4, channel 2, epoch 4.
const PAYLOAD: usize = 16;
/// Bytes of the MAC kept.
const MAC: usize = 16;
/// SHA-256's block size, for HMAC.
const BLOCK: usize = 64;

/// This process's key, drawn on first use; `None` when the OS gave no randomness (then
/// no reply address can be made, and a reply consumer is refused).
fn key() -> Option<&'static [u8; 32]> {
    static KEY: OnceLock<Option<[u8; 32]>> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut k = [0u8; 32];
        getrandom::getrandom(&mut k).ok().map(|()| k)
    })
    .as_ref()
}

/// HMAC-SHA256 (RFC 2104) of `data` under `key` (32 bytes, shorter than a block).
fn hmac(key: &[u8; 32], data: &[u8]) -> [u8; 32] {
    let mut ipad = [0x36u8; BLOCK];
    let mut opad = [0x5cu8; BLOCK];
    for (i, k) in key.iter().enumerate() {
        ipad[i] ^= k;
        opad[i] ^= k;
    }
    let inner = Sha256::new()
        .chain_update(ipad)
        .chain_update(data)
        .finalize();
    Sha256::new()
        .chain_update(opad)
        .chain_update(inner)
        .finalize()
        .into()
}

fn payload(ch: &ChannelRef) -> [u8; PAYLOAD] {
    let mut p = [0u8; PAYLOAD];
    p[0..2].copy_from_slice(&ch.shard.to_be_bytes());
    p[2..6].copy_from_slice(&ch.conn.slot.to_be_bytes());
    p[6..10].copy_from_slice(&ch.conn.generation.to_be_bytes());
    p[10..12].copy_from_slice(&ch.channel.to_be_bytes());
    p[12..16].copy_from_slice(&ch.epoch.to_be_bytes());
    p
}

/// The reply address of `ch`: `amq.rabbitmq.reply-to.<token>`; `None` without a key.
pub fn address(ch: &ChannelRef) -> Option<String> {
    let key = key()?;
    let p = payload(ch);
    let mac = hmac(key, &p);
    let mut raw = [0u8; PAYLOAD + MAC];
    raw[..PAYLOAD].copy_from_slice(&p);
    raw[PAYLOAD..].copy_from_slice(&mac[..MAC]);
    Some(format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(raw)))
}

/// Whether `name` is in direct reply-to's namespace (the pseudo-queue or an address):
/// no queue of that name can be declared, bound or used as an ordinary queue.
pub fn is_reply_name(name: &[u8]) -> bool {
    name.starts_with(PSEUDO_QUEUE.as_bytes())
}

/// The channel a reply address names, if its MAC checks (constant time). `None` for
/// anything else, including a routing key outside the namespace.
pub fn resolve(routing_key: &[u8]) -> Option<ChannelRef> {
    let token = routing_key.strip_prefix(PREFIX.as_bytes())?;
    let key = key()?;
    let mut raw = [0u8; PAYLOAD + MAC];
    match URL_SAFE_NO_PAD.decode_slice(token, &mut raw) {
        Ok(n) if n == PAYLOAD + MAC => {}
        _ => return None,
    }
    let (p, mac) = raw.split_at(PAYLOAD);
    let expected = hmac(key, p);
    let diff = mac
        .iter()
        .zip(&expected[..MAC])
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    if diff != 0 {
        return None;
    }
    let u16_at = |i: usize| u16::from_be_bytes([p[i], p[i + 1]]);
    let u32_at = |i: usize| u32::from_be_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]);
    Some(ChannelRef {
        shard: u16_at(0),
        conn: ConnId {
            slot: u32_at(2),
            generation: u32_at(6),
        },
        channel: u16_at(10),
        epoch: u32_at(12),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ch(n: u16) -> ChannelRef {
        ChannelRef {
            shard: 1,
            conn: ConnId {
                slot: 7,
                generation: 3,
            },
            channel: n,
            epoch: 42,
        }
    }

    #[test]
    fn an_address_names_its_channel() {
        let a = address(&ch(5)).expect("key");
        assert!(a.starts_with(PREFIX) && a.len() < 255, "{a}");
        assert_eq!(resolve(a.as_bytes()), Some(ch(5)));
        assert_ne!(address(&ch(6)), Some(a));
        assert!(is_reply_name(PSEUDO_QUEUE.as_bytes()));
        assert!(!is_reply_name(b"amq.rabbitmq.reply"));
    }

    #[test]
    fn a_forged_or_altered_token_names_nothing() {
        let a = address(&ch(5)).expect("key");
        // Every single-character change of the token is refused.
        let token_at = PREFIX.len();
        for i in token_at..a.len() {
            let mut b = a.clone().into_bytes();
            b[i] = if b[i] == b'A' { b'B' } else { b'A' };
            assert_eq!(resolve(&b), None, "altered at {i}");
        }
        // A payload naming another channel with a MAC of zeros, or none.
        let mut raw = [0u8; PAYLOAD + MAC];
        raw[..PAYLOAD].copy_from_slice(&payload(&ch(9)));
        let forged = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(raw));
        assert_eq!(resolve(forged.as_bytes()), None);
        let short = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(&raw[..PAYLOAD]));
        assert_eq!(resolve(short.as_bytes()), None);
        assert_eq!(resolve(b"amq.rabbitmq.reply-to."), None);
        assert_eq!(resolve(b"amq.rabbitmq.reply-to"), None);
        assert_eq!(resolve(&a.as_bytes()[1..]), None);
        let longer = format!("{a}AA");
        assert_eq!(resolve(longer.as_bytes()), None);
    }

    #[test]
    fn hmac_matches_rfc_4231_case_1() {
        // RFC 4231 test case 1: key = 0x0b × 20, data "Hi There" (a 20-byte key padded
        // with zeros to 32 gives the same HMAC: keys shorter than a block are padded).
        let mut key = [0u8; 32];
        key[..20].copy_from_slice(&[0x0b; 20]);
        let mac = hmac(&key, b"Hi There");
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
    }
}

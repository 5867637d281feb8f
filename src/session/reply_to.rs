//! Owns: the names of direct reply-to (RabbitMQ's `amq.rabbitmq.reply-to`) — the
//! pseudo-queue a channel consumes from, and the per-channel reply address
//! `amq.rabbitmq.reply-to.<token>` that a requester's `reply_to` is rewritten to — and
//! the token: the channel it names ([`ChannelRef`]: shard, connection slot and
//! generation, channel number and epoch) followed by an HMAC-SHA256 of those bytes
//! under a key drawn at random once per process (`ring::hmac`), in unpadded
//! base64url. A token cannot be guessed or altered to name another channel: without the
//! key no MAC checks, and a channel closed (or a connection slot reused) fails the
//! epoch or generation check where the channel lives.
//!
//! Does not: deliver, route or keep any per-channel state (the channel keeps its reply
//! consumer; the shard delivers).

use std::sync::OnceLock;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::hmac;

use crate::model::ids::{ChannelRef, ConnId};

/// The pseudo-queue a requester consumes its replies from (no-ack only).
pub const PSEUDO_QUEUE: &str = "amq.rabbitmq.reply-to";

/// What a reply address starts with.
pub const PREFIX: &str = "amq.rabbitmq.reply-to.";

/// Bytes of the channel it names: shard 2, slot 4, generation 4, channel 2, epoch 4.
const PAYLOAD: usize = 16;
/// Bytes of the MAC (the whole HMAC-SHA256 tag, checked by `ring` in constant time).
const MAC: usize = 32;

/// This process's key, drawn on first use; `None` when the OS gave no randomness (then
/// no reply address can be made, and a reply consumer is refused).
fn key() -> Option<&'static hmac::Key> {
    static KEY: OnceLock<Option<hmac::Key>> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut k = [0u8; 32];
        getrandom::getrandom(&mut k)
            .ok()
            .map(|()| hmac::Key::new(hmac::HMAC_SHA256, &k))
    })
    .as_ref()
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
    let mac = hmac::sign(key, &p);
    let mac = mac.as_ref();
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
    hmac::verify(key, p, mac).ok()?;
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
}

//! Owns: stored passwords — plain text, or RabbitMQ's salted hashes
//! (`rabbit_password_hashing_sha256` / `_sha512`: base64 of a 4-byte salt followed by
//! SHA-2(salt ‖ password)), so users exported from RabbitMQ's definitions log in
//! unchanged — making a new hash, and checking a password in constant time.
//!
//! Does not: know users, vhosts or the wire; it compares bytes.

use base64::Engine;
use sha2::{Digest, Sha256, Sha512};

/// RabbitMQ's default hashing module name, as written in definitions exports.
pub const SHA256: &str = "rabbit_password_hashing_sha256";
/// The SHA-512 variant RabbitMQ can be configured with.
pub const SHA512: &str = "rabbit_password_hashing_sha512";
/// RabbitMQ's legacy MD5 module: refused.
pub const MD5: &str = "rabbit_password_hashing_md5";

const SALT_LEN: usize = 4;

/// How a user's password is stored.
#[derive(Clone, PartialEq, Eq)]
pub enum Password {
    /// Plain text from the configuration file.
    Plain(String),
    /// A salted SHA-256 digest.
    Sha256 {
        salt: [u8; SALT_LEN],
        digest: [u8; 32],
    },
    /// A salted SHA-512 digest.
    Sha512 {
        salt: [u8; SALT_LEN],
        digest: [u8; 64],
    },
    /// No password (RabbitMQ's empty `password_hash`): no password logs in; the user
    /// can only authenticate with SASL EXTERNAL.
    Disabled,
}

impl std::fmt::Debug for Password {
    /// Never prints the secret or the digest.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Password::Plain(_) => "Password::Plain(..)",
            Password::Sha256 { .. } => "Password::Sha256(..)",
            Password::Sha512 { .. } => "Password::Sha512(..)",
            Password::Disabled => "Password::Disabled",
        })
    }
}

impl Password {
    /// A stored hash, `algorithm` being RabbitMQ's module name (`None` = SHA-256, its
    /// default). Errors say what is wrong, without the hash.
    pub fn from_hash(encoded: &str, algorithm: Option<&str>) -> Result<Password, String> {
        let algorithm = algorithm.unwrap_or(SHA256);
        if encoded.trim().is_empty() && algorithm != MD5 {
            return Ok(Password::Disabled);
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|e| format!("password_hash is not base64 ({e})"))?;
        let wrong_len = |want: usize| {
            format!(
                "password_hash decodes to {} bytes; {algorithm} needs {want} (4 of salt, then the digest)",
                raw.len()
            )
        };
        let mut salt = [0u8; SALT_LEN];
        match algorithm {
            SHA256 => {
                if raw.len() != SALT_LEN + 32 {
                    return Err(wrong_len(SALT_LEN + 32));
                }
                salt.copy_from_slice(&raw[..SALT_LEN]);
                let mut digest = [0u8; 32];
                digest.copy_from_slice(&raw[SALT_LEN..]);
                Ok(Password::Sha256 { salt, digest })
            }
            SHA512 => {
                if raw.len() != SALT_LEN + 64 {
                    return Err(wrong_len(SALT_LEN + 64));
                }
                salt.copy_from_slice(&raw[..SALT_LEN]);
                let mut digest = [0u8; 64];
                digest.copy_from_slice(&raw[SALT_LEN..]);
                Ok(Password::Sha512 { salt, digest })
            }
            MD5 => Err(format!(
                "{MD5} is not accepted (MD5 is broken); set a new password with `sluice hash-password`"
            )),
            other => Err(format!(
                "unknown hashing_algorithm '{other}' (expected {SHA256} or {SHA512})"
            )),
        }
    }

    /// A new SHA-256 hash of `password` with a random salt, as RabbitMQ makes it.
    pub fn hash_sha256(password: &[u8]) -> Result<Password, getrandom::Error> {
        let mut salt = [0u8; SALT_LEN];
        getrandom::getrandom(&mut salt)?;
        Ok(Password::sha256_with_salt(salt, password))
    }

    /// The SHA-256 hash of `password` with this salt.
    pub fn sha256_with_salt(salt: [u8; SALT_LEN], password: &[u8]) -> Password {
        let mut h = Sha256::new();
        h.update(salt);
        h.update(password);
        Password::Sha256 {
            salt,
            digest: h.finalize().into(),
        }
    }

    /// The `password_hash` text (base64 of salt ‖ digest; empty for no password);
    /// `None` for plain text.
    pub fn encoded(&self) -> Option<String> {
        let mut raw = Vec::with_capacity(SALT_LEN + 64);
        match self {
            Password::Plain(_) => return None,
            Password::Disabled => return Some(String::new()),
            Password::Sha256 { salt, digest } => {
                raw.extend_from_slice(salt);
                raw.extend_from_slice(digest);
            }
            Password::Sha512 { salt, digest } => {
                raw.extend_from_slice(salt);
                raw.extend_from_slice(digest);
            }
        }
        Some(base64::engine::general_purpose::STANDARD.encode(raw))
    }

    /// The `password_hash` a definitions export carries: the stored hash, or for plain
    /// text a salted SHA-256 of it made now (RabbitMQ's exports always carry a hash, and
    /// an import of an empty one is a user without password). Without randomness the
    /// salt is taken from the password's own digest: still a valid hash of it.
    pub fn exported(&self) -> String {
        match self {
            Password::Plain(plain) => {
                let hashed = Password::hash_sha256(plain.as_bytes()).unwrap_or_else(|_| {
                    let digest = Sha256::digest(plain.as_bytes());
                    let mut salt = [0u8; SALT_LEN];
                    salt.copy_from_slice(&digest[..SALT_LEN]);
                    Password::sha256_with_salt(salt, plain.as_bytes())
                });
                hashed.encoded().unwrap_or_default()
            }
            other => other.encoded().unwrap_or_default(),
        }
    }

    /// Whether the password is stored in plain text.
    pub fn is_plain(&self) -> bool {
        matches!(self, Password::Plain(_))
    }

    /// Whether `candidate` is this password. The comparison takes the same time
    /// wherever the first difference is.
    pub fn verify(&self, candidate: &[u8]) -> bool {
        match self {
            Password::Plain(stored) => {
                // Compare digests: equal lengths, so the time does not tell the length.
                let a = Sha256::digest(stored.as_bytes());
                let b = Sha256::digest(candidate);
                constant_time_eq(&a, &b)
            }
            Password::Sha256 { salt, digest } => {
                let mut h = Sha256::new();
                h.update(salt);
                h.update(candidate);
                constant_time_eq(&h.finalize(), digest)
            }
            Password::Sha512 { salt, digest } => {
                let mut h = Sha512::new();
                h.update(salt);
                h.update(candidate);
                constant_time_eq(&h.finalize(), digest)
            }
            Password::Disabled => {
                // The same work as a stored hash, so the time does not tell.
                let unknown = Password::sha256_with_salt([0; SALT_LEN], b"");
                let _ = std::hint::black_box(unknown.verify(candidate));
                false
            }
        }
    }

    /// RabbitMQ's hashing module name for the stored form (SHA-256 for plain text,
    /// which is hashed before it is written anywhere).
    pub fn algorithm(&self) -> &'static str {
        match self {
            Password::Sha512 { .. } => SHA512,
            _ => SHA256,
        }
    }
}

/// Equal-length byte strings compared without an early exit.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    // Computed independently with Python's hashlib:
    // base64.b64encode(salt + hashlib.sha256(salt + b"guest").digest()),
    // salt = bytes.fromhex("908dc60a").
    const GUEST_SHA256: &str = "kI3GCrswBLNZQzHJJ95QLoyfAVooYhnvf7jbqiW9BjOYUloe";

    /// The worked example of RabbitMQ's passwords guide: salt 908DC60A, "test12".
    #[test]
    fn rabbitmq_documented_example_verifies() {
        let p = Password::from_hash("kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR", None)
            .expect("parses");
        assert!(p.verify(b"test12"));
        assert!(!p.verify(b"test13"));
    }

    #[test]
    fn known_sha256_vector_verifies() {
        let p = Password::from_hash(GUEST_SHA256, None).expect("parses");
        assert!(p.verify(b"guest"));
        assert!(!p.verify(b"guesT"));
        assert!(!p.verify(b""));
        assert_eq!(p.encoded().as_deref(), Some(GUEST_SHA256));
        assert_eq!(
            Password::sha256_with_salt([0x90, 0x8d, 0xc6, 0x0a], b"guest"),
            p
        );
    }

    #[test]
    fn exports_carry_a_hash_that_verifies_also_for_plain_text() {
        let plain = Password::Plain("guest".to_owned());
        let exported = plain.exported();
        let back = Password::from_hash(&exported, None).expect("a hash");
        assert!(back.verify(b"guest") && !back.verify(b"other"));
        let stored = Password::from_hash(GUEST_SHA256, None).expect("parses");
        assert_eq!(stored.exported(), GUEST_SHA256);
        assert_eq!(Password::Disabled.exported(), "");
    }

    #[test]
    fn new_hashes_round_trip_and_differ_by_salt() {
        let a = Password::hash_sha256(b"s3cret").expect("random");
        let b = Password::hash_sha256(b"s3cret").expect("random");
        let text = a.encoded().expect("hash");
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(&text)
                .map(|r| r.len()),
            Ok(36)
        );
        let back = Password::from_hash(&text, Some(SHA256)).expect("parses");
        assert!(back.verify(b"s3cret"));
        assert!(!back.verify(b"s3cret "));
        assert_ne!(a.encoded(), b.encoded(), "a random salt each time");
    }

    #[test]
    fn sha512_is_accepted() {
        let salt = [1u8, 2, 3, 4];
        let mut raw = salt.to_vec();
        raw.extend_from_slice(
            &Sha512::new()
                .chain_update(salt)
                .chain_update(b"pw")
                .finalize(),
        );
        let text = base64::engine::general_purpose::STANDARD.encode(raw);
        let p = Password::from_hash(&text, Some(SHA512)).expect("parses");
        assert!(p.verify(b"pw"));
        assert!(!p.verify(b"pW"));
        assert!(
            Password::from_hash(&text, None).is_err(),
            "68 bytes is not SHA-256"
        );
    }

    #[test]
    fn bad_hashes_are_refused_with_a_reason() {
        let md5 = Password::from_hash(GUEST_SHA256, Some(MD5)).expect_err("md5");
        assert!(md5.contains("not accepted"), "{md5}");
        assert!(Password::from_hash("not base64!", None)
            .expect_err("bad")
            .contains("not base64"));
        assert!(Password::from_hash("AAAA", None)
            .expect_err("short")
            .contains("decodes to 3 bytes"));
        assert!(Password::from_hash(GUEST_SHA256, Some("bcrypt"))
            .expect_err("unknown")
            .contains("unknown hashing_algorithm 'bcrypt'"));
    }

    #[test]
    fn plain_passwords_still_verify() {
        let p = Password::Plain("guest".into());
        assert!(p.verify(b"guest"));
        assert!(!p.verify(b"gues"));
        assert!(p.is_plain());
        assert_eq!(p.encoded(), None);
        assert_eq!(format!("{p:?}"), "Password::Plain(..)");
    }
}

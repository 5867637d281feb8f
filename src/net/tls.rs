//! Owns: TLS (amqps) on the shard's io_uring event loop — the rustls server
//! configuration built at start from `[tls]` (PEM certificate chain, key, CA bundle,
//! client-certificate verification), the TLS handshake of an accepted socket (bounded by
//! the AMQP handshake timeout; a failure closes the socket and logs CON-1010,
//! rate-limited), and afterwards the record layer shared by the connection's reader
//! (ciphertext in, plaintext into its `ReadBuffer`) and writer (plaintext buffers in,
//! records out) through one `Rc<RefCell<ServerConnection>>`. Also reading the verified
//! client certificate's subject CN, the identity of SASL EXTERNAL.
//!
//! Does not: run a runtime or thread of its own, know AMQP, or decide whether a user may
//! log in (the handler looks the CN from `session::connection::external_identity` up
//! among the users).

use std::cell::{Cell, RefCell};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection};
use tokio_uring::buf::BoundedBuf;
use tokio_uring::net::TcpStream;

use super::read_buf::ReadBuffer;
use crate::config::tls::TlsConfig;
use crate::config::ConfigError;
use crate::limits::report::Reporter;
use crate::ops::event::OpsEvent;
use crate::session::connection::TlsPeer;
use crate::session::signal::Signal;
use crate::shard::Shard;

/// Most plaintext waiting to be encrypted plus records waiting for the socket that one
/// connection's rustls session holds (`set_buffer_limit`); the writer drains it to the
/// socket before it encrypts more.
const TLS_BUFFER_LIMIT: usize = 64 * 1024;

/// Bytes read from the socket at a time during the TLS handshake (a client hello, or a
/// client certificate chain, fits; rustls keeps a partial record itself).
const HANDSHAKE_READ: usize = 16 * 1024;

/// A TLS listener's settings, shared by every shard (rustls' configuration is `Sync`).
pub struct TlsListener {
    pub config: Arc<ServerConfig>,
    /// Client certificates are asked for and verified: SASL EXTERNAL is offered.
    pub offer_external: bool,
}

fn invalid(key: &str, path: &std::path::Path, reason: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        reason: format!("{}: {reason}", path.display()),
    }
}

fn read_certs(
    key: &str,
    path: &std::path::Path,
) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| invalid(key, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(key, path, e))?;
    if certs.is_empty() {
        return Err(invalid(key, path, "no PEM certificate in the file"));
    }
    Ok(certs)
}

/// Builds the TLS listeners' configuration from `[tls]`, or `None` when no TLS listener
/// is configured. A file that cannot be read or used is an error naming its key.
pub fn load(tls: &TlsConfig) -> Result<Option<Arc<TlsListener>>, ConfigError> {
    if tls.listen.is_empty() {
        return Ok(None);
    }
    let missing = |key: &str| ConfigError::Invalid {
        key: key.to_owned(),
        reason: "not set".into(),
    };
    let cert_path = tls
        .cert_file
        .as_deref()
        .ok_or_else(|| missing("tls.cert_file"))?;
    let key_path = tls
        .key_file
        .as_deref()
        .ok_or_else(|| missing("tls.key_file"))?;
    let chain = read_certs("tls.cert_file", cert_path)?;
    let key = PrivateKeyDer::from_pem_file(key_path).map_err(|e| {
        invalid(
            "tls.key_file",
            key_path,
            format!("{e} (a PEM private key is expected)"),
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::Invalid {
            key: "tls".into(),
            reason: e.to_string(),
        })?;
    let builder = if tls.verify_peer {
        let ca_path = tls
            .ca_file
            .as_deref()
            .ok_or_else(|| missing("tls.ca_file"))?;
        let mut roots = RootCertStore::empty();
        for cert in read_certs("tls.ca_file", ca_path)? {
            roots
                .add(cert)
                .map_err(|e| invalid("tls.ca_file", ca_path, e))?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
        let verifier = if tls.fail_if_no_peer_cert {
            verifier
        } else {
            verifier.allow_unauthenticated()
        };
        let verifier = verifier
            .build()
            .map_err(|e| invalid("tls.ca_file", ca_path, e))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let config = builder.with_single_cert(chain, key).map_err(|e| {
        invalid(
            "tls.key_file",
            key_path,
            format!("{e} (does the key belong to tls.cert_file?)"),
        )
    })?;
    Ok(Some(Arc::new(TlsListener {
        config: Arc::new(config),
        offer_external: tls.verify_peer,
    })))
}

/// The first subject CN of a DER certificate, if it has one in a string form.
pub fn subject_common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_owned)
}

/// One connection's TLS session, shared by its reader and writer tasks.
pub struct Session {
    tls: RefCell<ServerConnection>,
    /// The reader's ciphertext buffer between reads (taken while a read is in flight).
    cipher: Cell<Option<Vec<u8>>>,
    /// The peer's close_notify has arrived: the plaintext before it is handled, then
    /// the next read ends the connection.
    peer_closed: Cell<bool>,
}

/// Why reading a TLS connection stopped.
fn record_error(what: &str, e: impl std::fmt::Display) {
    tracing::debug!("TLS {what}: {e}");
}

impl Session {
    /// Reads ciphertext from the socket, decrypts it, and appends the plaintext to `rb`.
    /// Returns the ciphertext bytes read (0 when only plaintext already decrypted was
    /// moved), or `None` when the socket ended, failed, sent a bad record or a
    /// close_notify. Holds at most one read of ciphertext (`rb`'s target size); rustls
    /// holds at most one partial record.
    pub async fn read(
        &self,
        stream: &TcpStream,
        rb: &mut ReadBuffer,
        frame_max: u32,
        writer: &Signal,
    ) -> Option<usize> {
        // Plaintext that arrived with the end of the handshake is served first.
        if self.drain_plaintext(rb, frame_max)? {
            return Some(0);
        }
        if self.peer_closed.get() {
            return None;
        }
        let offered = rb.target();
        let mut cipher = self.cipher.take().unwrap_or_default();
        cipher.clear();
        cipher.reserve(offered);
        let (res, cipher) = stream.read(cipher).await;
        let n = match res {
            Ok(0) | Err(_) => return None,
            Ok(n) => n,
        };
        let mut data = &cipher[..n];
        {
            let mut tls = self.tls.borrow_mut();
            while !data.is_empty() {
                match tls.read_tls(&mut data) {
                    Ok(0) => {
                        record_error("read", "rustls took no ciphertext");
                        return None;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        record_error("read", e);
                        return None;
                    }
                }
                let state = match tls.process_new_packets() {
                    Ok(state) => state,
                    Err(e) => {
                        record_error("record", e);
                        return None;
                    }
                };
                let plain = state.plaintext_bytes_to_read();
                if plain > 0 && !move_plaintext(&mut tls, rb, plain, frame_max) {
                    return None;
                }
                if state.peer_has_closed() {
                    // Nothing after close_notify counts (rustls takes no more); the
                    // frames before it are handled before the connection ends.
                    self.peer_closed.set(true);
                    break;
                }
            }
            if tls.wants_write() {
                // Handshake messages (key update) or an alert to send.
                writer.notify();
            }
        }
        rb.note_read(n, offered);
        // An idle connection keeps no ciphertext buffer larger than its read target.
        if cipher.capacity() <= offered.max(HANDSHAKE_READ) {
            self.cipher.set(Some(cipher));
        }
        Some(n)
    }

    /// Moves plaintext rustls already decrypted into `rb`. `Some(true)` if there was
    /// some, `None` on a broken session.
    fn drain_plaintext(&self, rb: &mut ReadBuffer, frame_max: u32) -> Option<bool> {
        let mut tls = self.tls.borrow_mut();
        let state = tls.process_new_packets().ok()?;
        let plain = state.plaintext_bytes_to_read();
        if plain == 0 {
            return Some(false);
        }
        move_plaintext(&mut tls, rb, plain, frame_max).then_some(true)
    }

    /// Encrypts `bufs` and writes the records to the socket, at most
    /// [`TLS_BUFFER_LIMIT`] of them buffered at a time. Returns the plaintext bytes
    /// written, which is what the outbound buffer accounts in.
    pub async fn write(&self, stream: &TcpStream, bufs: Vec<Bytes>) -> std::io::Result<usize> {
        let mut plain = 0;
        let mut index = 0;
        let mut offset = 0;
        loop {
            let records = {
                let mut tls = self.tls.borrow_mut();
                while index < bufs.len() {
                    let rest = &bufs[index][offset..];
                    let n = tls.writer().write(rest)?;
                    plain += n;
                    if n == rest.len() {
                        index += 1;
                        offset = 0;
                    } else {
                        offset += n;
                        break;
                    }
                }
                take_records(&mut tls)?
            };
            if records.is_empty() {
                if index >= bufs.len() {
                    return Ok(plain);
                }
                return Err(std::io::Error::other("TLS session took no plaintext"));
            }
            write_out(stream, records).await?;
        }
    }

    /// Writes whatever records rustls has queued (handshake messages, alerts, a
    /// close_notify); `close` queues a close_notify first.
    pub async fn flush(&self, stream: &TcpStream, close: bool) -> std::io::Result<()> {
        let records = {
            let mut tls = self.tls.borrow_mut();
            if close {
                tls.send_close_notify();
            }
            if !tls.wants_write() {
                return Ok(());
            }
            take_records(&mut tls)?
        };
        write_out(stream, records).await
    }
}

/// Moves `plain` decrypted bytes into the read buffer. False on a short read (a broken
/// session).
fn move_plaintext(
    tls: &mut ServerConnection,
    rb: &mut ReadBuffer,
    plain: usize,
    frame_max: u32,
) -> bool {
    let buf = rb.room_for(plain, frame_max);
    let len = buf.len();
    buf.resize(len + plain, 0);
    match tls.reader().read_exact(&mut buf[len..]) {
        Ok(()) => true,
        Err(e) => {
            buf.truncate(len);
            record_error("plaintext", e);
            false
        }
    }
}

/// Everything rustls has queued for the socket, as one buffer.
fn take_records(tls: &mut ServerConnection) -> std::io::Result<Vec<u8>> {
    let mut records = Vec::new();
    while tls.wants_write() {
        if tls.write_tls(&mut records)? == 0 {
            break;
        }
    }
    Ok(records)
}

async fn write_out(stream: &TcpStream, records: Vec<u8>) -> std::io::Result<()> {
    let (res, _) = stream.write_all(records).await;
    res
}

/// Runs the TLS handshake of an accepted socket, then serves the connection like a
/// plain one (`reader::serve`) with the record layer in between. A handshake that
/// fails or does not finish within the AMQP handshake timeout closes the socket and is
/// logged (CON-1010) without touching any other connection.
pub async fn serve(
    shard: Rc<Shard>,
    stream: TcpStream,
    peer: SocketAddr,
    listener: Arc<TlsListener>,
) {
    // Until `reader::serve_transport` makes it a connection, the socket counts as
    // unauthenticated (`ShardLimits::admit_socket`); every early return gives it back.
    let accepted = shard.clock.now();
    let mut tls = match ServerConnection::new(Arc::clone(&listener.config)) {
        Ok(tls) => tls,
        Err(e) => {
            handshake_failed(peer, &e.to_string(), shard.clock.now());
            shard.limits.socket_gone();
            return;
        }
    };
    tls.set_buffer_limit(Some(TLS_BUFFER_LIMIT));
    let limit = crate::session::connection::HANDSHAKE_TIMEOUT;
    let outcome = tokio::time::timeout(limit, handshake(&stream, &mut tls)).await;
    let failure = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(reason)) => Some(reason),
        Err(_) => Some(format!(
            "no TLS handshake within {} s (the AMQP handshake timeout)",
            limit.as_secs()
        )),
    };
    if let Some(reason) = failure {
        handshake_failed(peer, &reason, shard.clock.now());
        let _ = stream.shutdown(std::net::Shutdown::Both);
        shard.limits.socket_gone();
        return;
    }
    if shard.stopping.get() {
        shard.limits.socket_gone();
        return;
    }
    let identity = TlsPeer {
        offer_external: listener.offer_external,
        common_name: tls
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|leaf| subject_common_name(leaf)),
    };
    let session = Rc::new(Session {
        tls: RefCell::new(tls),
        cipher: Cell::new(None),
        peer_closed: Cell::new(false),
    });
    super::reader::serve_transport(
        shard,
        stream,
        peer,
        accepted,
        super::Transport::Tls(session),
        Some(identity),
    )
    .await;
}

/// Reads and writes the handshake until rustls has finished it. The error is the reason
/// for the log line (the peer's garbage or certificate problem, as rustls words it).
async fn handshake(stream: &TcpStream, tls: &mut ServerConnection) -> Result<(), String> {
    let mut buf = Vec::with_capacity(HANDSHAKE_READ);
    loop {
        if tls.wants_write() {
            let records = take_records(tls).map_err(|e| e.to_string())?;
            write_out(stream, records)
                .await
                .map_err(|e| format!("write failed during the TLS handshake: {e}"))?;
        }
        if !tls.is_handshaking() {
            return Ok(());
        }
        buf.clear();
        let (res, returned) = stream.read(buf.slice(0..HANDSHAKE_READ)).await;
        buf = returned.into_inner();
        let n = match res {
            Ok(0) => return Err("the peer closed the socket during the TLS handshake".into()),
            Err(e) => return Err(format!("read failed during the TLS handshake: {e}")),
            Ok(n) => n,
        };
        let mut data = &buf[..n];
        while !data.is_empty() {
            match tls.read_tls(&mut data) {
                Ok(0) => return Err("rustls took no ciphertext".into()),
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
            if let Err(e) = tls.process_new_packets() {
                // Tell the peer why (the alert rustls queued), best effort.
                if let Ok(records) = take_records(tls) {
                    let _ = write_out(stream, records).await;
                }
                return Err(e.to_string());
            }
        }
    }
}

/// Handshake failures logged per shard per [`FAILURE_WINDOW`]; the rest are counted
/// and reported with the next line.
const FAILURES_PER_WINDOW: u32 = 10;
const FAILURE_WINDOW: Duration = Duration::from_secs(10);

thread_local! {
    // Each shard is one thread: a per-shard limit without a lock.
    static FAILURES: Reporter = const { Reporter::new(FAILURE_WINDOW, FAILURES_PER_WINDOW) };
}

/// Logs CON-1010 for a failed TLS handshake, at most [`FAILURES_PER_WINDOW`] lines per
/// shard per [`FAILURE_WINDOW`] (a flood of bad clients cannot flood the log); `now` is
/// the shard's clock.
fn handshake_failed(peer: SocketAddr, reason: &str, now: Instant) {
    // The count includes this failure; the line reports the ones suppressed before it.
    if let Some(count) = FAILURES.with(|f| f.note(now)) {
        OpsEvent::TlsHandshakeFailed {
            peer,
            reason: reason.to_owned(),
            suppressed: count - 1,
        }
        .emit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_no_certificate() {
        assert_eq!(subject_common_name(b"not DER"), None);
    }
}

//! A raw AMQP client over a blocking rustls stream: enough frames to read
//! `connection.start`'s mechanisms and try a SASL mechanism.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

/// A rustls client configuration (ring) trusting `ca`, with a client certificate when
/// `client` is given.
pub fn client_config(ca: &Path, client: Option<(&Path, &Path)>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("ca file") {
        roots.add(cert.expect("ca cert")).expect("add root");
    }
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .expect("cert file")
                .collect::<Result<Vec<_>, _>>()
                .expect("certs");
            let key = PrivateKeyDer::from_pem_file(key).expect("key file");
            builder
                .with_client_auth_cert(chain, key)
                .expect("client cert")
        }
    };
    Arc::new(config)
}

pub struct TlsAmqp {
    stream: StreamOwned<ClientConnection, TcpStream>,
}

/// One frame: type, channel, payload.
pub type Frame = (u8, u16, Vec<u8>);

impl TlsAmqp {
    /// Connects to `port` on 127.0.0.1 as `localhost` and sends the protocol header.
    pub fn connect(port: u16, config: Arc<ClientConfig>) -> std::io::Result<TlsAmqp> {
        TlsAmqp::over(TcpStream::connect(("127.0.0.1", port))?, config)
    }

    /// As [`TlsAmqp::connect`], on a socket already connected (the TLS handshake
    /// starts now).
    pub fn over(sock: TcpStream, config: Arc<ClientConfig>) -> std::io::Result<TlsAmqp> {
        sock.set_read_timeout(Some(Duration::from_secs(10)))?;
        let name = ServerName::try_from("localhost").expect("name");
        let conn = ClientConnection::new(config, name).map_err(std::io::Error::other)?;
        let mut stream = StreamOwned::new(conn, sock);
        stream.write_all(b"AMQP\x00\x00\x09\x01")?;
        stream.flush()?;
        Ok(TlsAmqp { stream })
    }

    pub fn read_frame(&mut self) -> std::io::Result<Frame> {
        let mut head = [0u8; 7];
        self.stream.read_exact(&mut head)?;
        let size = u32::from_be_bytes([head[3], head[4], head[5], head[6]]) as usize;
        let mut payload = vec![0u8; size + 1];
        self.stream.read_exact(&mut payload)?;
        assert_eq!(payload.pop(), Some(0xCE), "frame end");
        Ok((head[0], u16::from_be_bytes([head[1], head[2]]), payload))
    }

    /// Reads `connection.start` and returns its mechanisms.
    pub fn read_mechanisms(&mut self) -> std::io::Result<String> {
        let (ty, _, p) = self.read_frame()?;
        assert_eq!((ty, &p[..4]), (1, &[0, 10, 0, 10][..]), "connection.start");
        let props_len = u32::from_be_bytes([p[6], p[7], p[8], p[9]]) as usize;
        let at = 10 + props_len;
        let len = u32::from_be_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]]) as usize;
        Ok(String::from_utf8_lossy(&p[at + 4..at + 4 + len]).into_owned())
    }

    /// Sends `connection.start-ok` with `mechanism` and `response`.
    pub fn send_start_ok(&mut self, mechanism: &str, response: &[u8]) -> std::io::Result<()> {
        let mut args = vec![0, 10, 0, 11];
        args.extend_from_slice(&0u32.to_be_bytes()); // empty client-properties
        args.push(mechanism.len() as u8);
        args.extend_from_slice(mechanism.as_bytes());
        args.extend_from_slice(&(response.len() as u32).to_be_bytes());
        args.extend_from_slice(response);
        args.push(5);
        args.extend_from_slice(b"en_US");
        self.send_method(&args)
    }

    fn send_method(&mut self, args: &[u8]) -> std::io::Result<()> {
        let mut frame = vec![1, 0, 0];
        frame.extend_from_slice(&(args.len() as u32).to_be_bytes());
        frame.extend_from_slice(args);
        frame.push(0xCE);
        self.stream.write_all(&frame)?;
        self.stream.flush()
    }

    /// Logs in with PLAIN guest/guest and opens vhost `/` (no heartbeats).
    pub fn open_as_guest(&mut self) -> std::io::Result<()> {
        self.read_mechanisms()?;
        self.send_start_ok("PLAIN", b"\0guest\0guest")?;
        let (_, _, tune) = self.read_frame()?;
        assert_eq!(&tune[..4], &[0, 10, 0, 30], "connection.tune");
        let mut tune_ok = vec![0, 10, 0, 31];
        tune_ok.extend_from_slice(&tune[4..10]); // channel-max, frame-max as offered
        tune_ok.extend_from_slice(&[0, 0]); // no heartbeats
        self.send_method(&tune_ok)?;
        self.send_method(&[0, 10, 0, 40, 1, b'/', 0, 0])?;
        let (_, _, open_ok) = self.read_frame()?;
        assert_eq!(&open_ok[..4], &[0, 10, 0, 41], "connection.open-ok");
        Ok(())
    }

    /// Reads frames until `connection.close`, answers close-ok, and returns the close's
    /// code and text.
    pub fn expect_close(&mut self) -> std::io::Result<(u16, String)> {
        loop {
            let (ty, _, p) = self.read_frame()?;
            if ty == 1 && p[..4] == [0, 10, 0, 50] {
                let code = u16::from_be_bytes([p[4], p[5]]);
                let len = p[6] as usize;
                let text = String::from_utf8_lossy(&p[7..7 + len]).into_owned();
                self.send_method(&[0, 10, 0, 51])?;
                return Ok((code, text));
            }
        }
    }

    /// Reads once more: `Ok(0)` once the server's close_notify has arrived (a TCP close
    /// without it is an error in rustls).
    pub fn read_after_close(&mut self) -> std::io::Result<usize> {
        let mut buf = [0u8; 64];
        self.stream.read(&mut buf)
    }

    /// Sends `frames` (already framed AMQP bytes) and a close_notify as one TCP write,
    /// so the broker reads the last frames and the end of the session together.
    pub fn send_then_close_notify(&mut self, frames: &[u8]) -> std::io::Result<()> {
        self.stream.conn.writer().write_all(frames)?;
        self.stream.conn.send_close_notify();
        let mut records = Vec::new();
        while self.stream.conn.wants_write() {
            self.stream.conn.write_tls(&mut records)?;
        }
        self.stream.sock.write_all(&records)?;
        self.stream.sock.flush()
    }

    /// Reads the reply to start-ok: `Ok(None)` for connection.tune, `Ok(Some((code,
    /// text)))` for connection.close.
    pub fn read_login_reply(&mut self) -> std::io::Result<Option<(u16, String)>> {
        let (ty, _, p) = self.read_frame()?;
        assert_eq!(ty, 1, "method frame");
        match (&p[..4], p.len()) {
            ([0, 10, 0, 30], _) => Ok(None),
            ([0, 10, 0, 50], _) => {
                let code = u16::from_be_bytes([p[4], p[5]]);
                let len = p[6] as usize;
                Ok(Some((
                    code,
                    String::from_utf8_lossy(&p[7..7 + len]).into_owned(),
                )))
            }
            (other, _) => panic!("unexpected method {other:?}"),
        }
    }
}

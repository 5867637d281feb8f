//! Owns: [`Connection`] — opening the socket, the AMQP handshake (protocol header,
//! `start`/`start-ok` with PLAIN or EXTERNAL, `tune`/`tune-ok`, `open`/`open-ok`), announcing the
//! client's capabilities (`connection.blocked`, `consumer_cancel_notify`,
//! `publisher_confirms`, …), spawning the connection task, opening channels and
//! closing.
//! Does not: touch channel state after the handshake (the task in `io.rs` owns it).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use super::channel::Channel;
use super::error::ClientError;
use super::io::{BoxRead, BoxWrite, Cmd, ConnTask, Pending, Tuning};
use super::shared::{ConnShared, FlowOptions};
use super::url::AmqpUrl;
use crate::protocol::frame::{encode_method, split_frame, FrameKind, PROTOCOL_HEADER};
use crate::protocol::method::*;
use crate::protocol::{FieldTable, FieldValue, LongStr, Method, ShortStr};

/// How long [`Connection::close`] waits for the server's close-ok.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connection settings beyond the URL.
///
/// `ConnectionOptions::default()` reads the producer flow-control periods from the
/// environment (see [`ConnectionOptions::flow`]); build the options once and clone
/// them when opening many connections.
#[derive(Clone, Debug)]
pub struct ConnectionOptions {
    /// Heartbeat interval asked for, in seconds (0 = off). The lower non-zero of this
    /// and the server's proposal is used.
    pub heartbeat: u16,
    /// Largest frame asked for (bytes, header included; 0 = the server's value).
    pub frame_max: u32,
    /// Highest channel number asked for (0 = the server's value).
    pub channel_max: u16,
    /// Producer flow control for publishes on this connection's channels: the WARN
    /// period and failure timeout of a held publish, and whether to wait at all. The
    /// default reads `SLUICE_FLOW_CONTROL_WAIT_FAILURE` (default 60000) and
    /// `SLUICE_FLOW_CONTROL_WAIT_NOTIFY_PERIOD` (default 5000), in milliseconds; a
    /// value that is not a non-negative integer is ignored with a WARN naming the
    /// variable. See [`FlowOptions`].
    pub flow: FlowOptions,
    /// `connection_name` in client-properties.
    pub name: Option<String>,
    /// Commands (publishes, acks, …) that may wait for the connection task before a
    /// sender waits.
    pub command_queue: usize,
    /// Limit on the whole connect and handshake.
    pub connect_timeout: Duration,
    /// Set `TCP_NODELAY` (default on: the task batches writes itself).
    pub nodelay: bool,
    /// Trust roots (and client certificate) for `amqps://` URLs; an `amqps://` URL
    /// without them is refused.
    pub tls: Option<super::tls::TlsOptions>,
    /// How the client authenticates (default PLAIN, with the URL's user and password).
    pub mechanism: SaslMechanism,
}

/// The SASL mechanism `connection.start-ok` names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SaslMechanism {
    /// The URL's user and password (`\0user\0password`).
    #[default]
    Plain,
    /// An empty response: the broker takes the user from the TLS client certificate
    /// (give one in [`ConnectionOptions::tls`]); the URL's user and password are not
    /// sent.
    External,
}

impl SaslMechanism {
    /// The name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::External => "EXTERNAL",
        }
    }

    /// The `start-ok` response for `url`.
    fn response(self, url: &AmqpUrl) -> Vec<u8> {
        match self {
            SaslMechanism::Plain => {
                let mut response = Vec::with_capacity(url.user.len() + url.password.len() + 2);
                response.push(0);
                response.extend_from_slice(url.user.as_bytes());
                response.push(0);
                response.extend_from_slice(url.password.as_bytes());
                response
            }
            SaslMechanism::External => Vec::new(),
        }
    }
}

impl Default for ConnectionOptions {
    fn default() -> Self {
        ConnectionOptions {
            heartbeat: 60,
            frame_max: 131_072,
            channel_max: 2047,
            flow: FlowOptions::default(),
            name: None,
            command_queue: 8192,
            connect_timeout: Duration::from_secs(30),
            nodelay: true,
            tls: None,
            mechanism: SaslMechanism::Plain,
        }
    }
}

/// An open AMQP connection. Cheap handles ([`Channel`]s) are opened from it; the
/// socket belongs to a background task that lives while any handle does.
pub struct Connection {
    cmd: mpsc::Sender<Cmd>,
    shared: Arc<ConnShared>,
    tuning: Tuning,
    flow: FlowOptions,
    server_properties: FieldTable,
}

fn client_properties(name: Option<&str>) -> FieldTable {
    let mut caps = FieldTable::new();
    for cap in [
        "connection.blocked",
        "consumer_cancel_notify",
        "publisher_confirms",
        "basic.nack",
        "exchange_exchange_bindings",
        "authentication_failure_close",
    ] {
        caps.insert(cap, FieldValue::Bool(true));
    }
    let mut props = FieldTable::new();
    let s = |v: &str| FieldValue::LongStr(LongStr::from(v));
    props.insert("product", s("sluice-client"));
    props.insert("version", s(env!("CARGO_PKG_VERSION")));
    props.insert("platform", s("Rust/tokio"));
    props.insert("capabilities", FieldValue::Table(caps));
    if let Some(n) = name {
        props.insert("connection_name", s(n));
    }
    props
}

/// Reads one frame during the handshake.
async fn read_frame<S: AsyncRead + Unpin>(
    sock: &mut S,
    buf: &mut BytesMut,
) -> Result<crate::protocol::frame::Frame, ClientError> {
    loop {
        if let Some(f) = split_frame(buf, 0)? {
            return Ok(f);
        }
        buf.reserve(4096);
        if sock.read_buf(buf).await? == 0 {
            return Err(ClientError::io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "server closed the socket during the handshake",
            )));
        }
    }
}

/// Reads the next connection-level method of the handshake; a `connection.close`
/// becomes [`ClientError::ConnectionClosed`].
async fn read_method<S: AsyncRead + AsyncWrite + Unpin>(
    sock: &mut S,
    buf: &mut BytesMut,
) -> Result<Method, ClientError> {
    loop {
        let f = read_frame(sock, buf).await?;
        match f.kind {
            FrameKind::Heartbeat => continue,
            FrameKind::Method => {}
            FrameKind::Header | FrameKind::Body => {
                return Err(ClientError::UnexpectedFrame {
                    channel: f.channel,
                    got: "content frame during handshake",
                })
            }
        }
        return match Method::decode(f.payload)? {
            Method::ConnectionClose(c) => {
                let mut out = BytesMut::new();
                encode_method(&mut out, 0, &Method::ConnectionCloseOk(ConnectionCloseOk));
                let _ = sock.write_all(&out).await;
                Err(ClientError::ConnectionClosed {
                    code: c.reply_code,
                    text: c.reply_text.to_string(),
                    class_id: c.class_id,
                    method_id: c.method_id,
                })
            }
            m => Ok(m),
        };
    }
}

fn negotiate<T: Copy + Ord + Default>(ours: T, theirs: T) -> T {
    let zero = T::default();
    match (ours == zero, theirs == zero) {
        (true, _) => theirs,
        (_, true) => ours,
        _ => ours.min(theirs),
    }
}

impl Connection {
    /// Connects with default options to `amqp://user:pass@host:port/vhost`.
    pub async fn connect(url: &str) -> Result<Connection, ClientError> {
        Connection::connect_with(url, ConnectionOptions::default()).await
    }

    /// Connects with the given options.
    pub async fn connect_with(
        url: &str,
        opts: ConnectionOptions,
    ) -> Result<Connection, ClientError> {
        let parsed = AmqpUrl::parse(url)?;
        let limit = opts.connect_timeout;
        tokio::time::timeout(limit, Connection::handshake(parsed, opts))
            .await
            .map_err(|_| ClientError::HandshakeTimeout(limit))?
    }

    async fn handshake(url: AmqpUrl, opts: ConnectionOptions) -> Result<Connection, ClientError> {
        let sock = TcpStream::connect((url.host.as_str(), url.port)).await?;
        sock.set_nodelay(opts.nodelay)?;
        if !url.tls {
            return Connection::amqp_handshake(sock, url, opts, |sock| {
                let (r, w) = sock.into_split();
                (Box::new(r) as BoxRead, Box::new(w) as BoxWrite)
            })
            .await;
        }
        let tls = opts.tls.clone().ok_or_else(|| {
            ClientError::io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "an amqps:// URL needs trust roots (ConnectionOptions::tls, --tls-ca)",
            ))
        })?;
        let sock = tls.connect(&url.host, sock).await?;
        Connection::amqp_handshake(sock, url, opts, |sock| {
            let (r, w) = tokio::io::split(sock);
            (Box::new(r) as BoxRead, Box::new(w) as BoxWrite)
        })
        .await
    }

    /// The AMQP handshake on a connected (and, for amqps, TLS-wrapped) stream; `split`
    /// hands its halves to the connection task.
    async fn amqp_handshake<S: AsyncRead + AsyncWrite + Unpin>(
        mut sock: S,
        url: AmqpUrl,
        opts: ConnectionOptions,
        split: impl FnOnce(S) -> (BoxRead, BoxWrite),
    ) -> Result<Connection, ClientError> {
        sock.write_all(&PROTOCOL_HEADER).await?;
        let mut rbuf = BytesMut::with_capacity(8192);
        let mut out = BytesMut::with_capacity(1024);

        let start = match read_method(&mut sock, &mut rbuf).await? {
            Method::ConnectionStart(s) => s,
            other => {
                return Err(ClientError::UnexpectedReply {
                    expected: "connection.start",
                    got: other.name(),
                })
            }
        };
        let mechanisms = start.mechanisms.as_str_lossy().to_string();
        let mechanism = opts.mechanism;
        if !mechanisms.split(' ').any(|m| m == mechanism.name()) {
            return Err(ClientError::UnsupportedMechanism {
                wanted: mechanism.name(),
                offered: mechanisms,
            });
        }
        encode_method(
            &mut out,
            0,
            &Method::ConnectionStartOk(ConnectionStartOk {
                client_properties: client_properties(opts.name.as_deref()),
                mechanism: ShortStr::from_static(mechanism.name()),
                response: LongStr::from(bytes::Bytes::from(mechanism.response(&url))),
                locale: ShortStr::from_static("en_US"),
            }),
        );
        sock.write_all(&out).await?;
        out.clear();

        let tune = match read_method(&mut sock, &mut rbuf).await? {
            Method::ConnectionTune(t) => t,
            other => {
                return Err(ClientError::UnexpectedReply {
                    expected: "connection.tune",
                    got: other.name(),
                })
            }
        };
        let tuning = Tuning {
            frame_max: negotiate(opts.frame_max, tune.frame_max).max(FRAME_MIN_SIZE),
            channel_max: match negotiate(opts.channel_max, tune.channel_max) {
                0 => u16::MAX,
                n => n,
            },
            heartbeat: negotiate(opts.heartbeat, tune.heartbeat),
        };
        let tuning = Tuning {
            heartbeat: if opts.heartbeat == 0 {
                0
            } else {
                tuning.heartbeat
            },
            ..tuning
        };
        encode_method(
            &mut out,
            0,
            &Method::ConnectionTuneOk(ConnectionTuneOk {
                channel_max: tuning.channel_max,
                frame_max: tuning.frame_max,
                heartbeat: tuning.heartbeat,
            }),
        );
        encode_method(
            &mut out,
            0,
            &Method::ConnectionOpen(ConnectionOpen {
                virtual_host: ShortStr::from(url.vhost.as_str()),
                capabilities: ShortStr::default(),
                insist: false,
            }),
        );
        sock.write_all(&out).await?;
        match read_method(&mut sock, &mut rbuf).await? {
            Method::ConnectionOpenOk(_) => {}
            other => {
                return Err(ClientError::UnexpectedReply {
                    expected: "connection.open-ok",
                    got: other.name(),
                })
            }
        }

        let shared = Arc::new(ConnShared::default());
        let (cmd, cmds) = mpsc::channel(opts.command_queue.max(16));
        let (reader, writer) = split(sock);
        let task = ConnTask::new(reader, writer, rbuf, cmds, Arc::clone(&shared), tuning);
        tokio::spawn(task.run());
        Ok(Connection {
            cmd,
            shared,
            tuning,
            flow: opts.flow,
            server_properties: start.server_properties,
        })
    }

    /// Opens a new channel.
    pub async fn open_channel(&self) -> Result<Channel, ClientError> {
        self.check()?;
        let (tx, rx) = oneshot::channel();
        self.cmd
            .send(Cmd::OpenChannel(tx))
            .await
            .map_err(|_| self.gone())?;
        let opened = rx.await.map_err(|_| self.gone())??;
        let channel = Channel::new(
            opened,
            self.cmd.clone(),
            Arc::clone(&self.shared),
            self.flow,
            self.tuning,
        );
        let (tx, rx) = oneshot::channel();
        self.cmd
            .send(Cmd::Rpc {
                channel: channel.id(),
                method: Method::ChannelOpen(ChannelOpen {
                    out_of_band: ShortStr::default(),
                }),
                pending: Pending::Method(tx),
            })
            .await
            .map_err(|_| self.gone())?;
        match rx.await.map_err(|_| self.gone())?? {
            Method::ChannelOpenOk(_) => Ok(channel),
            other => Err(ClientError::UnexpectedReply {
                expected: "channel.open-ok",
                got: other.name(),
            }),
        }
    }

    /// Closes the connection (code 200) and waits for the server's close-ok.
    pub async fn close(self) -> Result<(), ClientError> {
        if self.shared.error.get().is_some() {
            return Ok(());
        }
        let (tx, rx) = oneshot::channel();
        self.cmd
            .send(Cmd::Close {
                code: 200,
                text: ShortStr::from_static("Goodbye"),
                reply: tx,
            })
            .await
            .map_err(|_| self.gone())?;
        // A server that never answers close-ok must not hang the application.
        match tokio::time::timeout(CLOSE_TIMEOUT, rx).await {
            Ok(r) => r.map_err(|_| self.gone())?,
            Err(_) => Err(ClientError::io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no connection.close-ok from the server",
            ))),
        }
    }

    /// The negotiated frame-max, channel-max and heartbeat.
    pub fn tuning(&self) -> Tuning {
        self.tuning
    }

    /// What the server said about itself in `connection.start`.
    pub fn server_properties(&self) -> &FieldTable {
        &self.server_properties
    }

    /// `true` while the server has this connection blocked (`connection.blocked`).
    pub fn is_blocked(&self) -> bool {
        self.shared.blocked.load(Ordering::Acquire)
    }

    /// How many times the server has blocked this connection (`connection.blocked`).
    pub fn blocked_count(&self) -> u64 {
        self.shared.blocks.load(Ordering::Relaxed)
    }

    /// Why the connection ended, if it has.
    pub fn error(&self) -> Option<ClientError> {
        self.shared.error.get().cloned()
    }

    fn check(&self) -> Result<(), ClientError> {
        match self.shared.error.get() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn gone(&self) -> ClientError {
        self.shared
            .error
            .get()
            .cloned()
            .unwrap_or_else(ClientError::disconnected)
    }
}

//! Owns: one connection's state — handshake phase, negotiated limits (channel-max,
//! frame-max, heartbeat), the client's capabilities, its channels, its outbound bytes and
//! the signals that wake its writer and reader — plus the pure parts of the handshake:
//! server properties and SASL (PLAIN, AMQPLAIN) parsing, and the identity SASL EXTERNAL
//! takes from a TLS peer ([`TlsPeer`]).
//!
//! Does not: write to the socket (the writer task drains `out`) or act on other shards.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;

use crate::model::ids::{ConnId, QueueId, QueueRef};
use crate::model::prefetch;
use crate::model::routing::VhostIdx;
use crate::protocol::{FieldTable, FieldValue, LongStr, ShortStr};
use crate::session::channel_table::ChannelTable;
use crate::session::outbound::Outbound;
use crate::session::properties_cache::Interned;
use crate::session::signal::ConnSignals;

/// How long a client has from TCP accept to `connection.open` (the shard arms this
/// deadline when it registers the connection; `limits.login.max_delay_ms` must stay
/// below it).
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Where the handshake is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the 8-byte protocol header.
    AwaitHeader,
    AwaitStartOk,
    AwaitTuneOk,
    AwaitOpen,
    Open,
    /// The broker sent `connection.close`; waiting for close-ok (bounded by the close
    /// timeout, as RabbitMQ bounds it).
    Closing,
    /// The client sent `connection.close` and was answered with close-ok: its channels
    /// are released, and the socket is left for the client to close, as RabbitMQ leaves
    /// it (closing first races clients that still read, such as amqp091-go). The reader
    /// discards what arrives; the close timeout or broker shutdown ends it.
    Lingering,
    /// Done: the writer flushes and shuts the socket.
    Closed,
}

/// What the client told us it understands (client-properties capabilities).
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientCapabilities {
    pub connection_blocked: bool,
    pub consumer_cancel_notify: bool,
}

/// A run of no-ack deliveries to one consumer, on the wire once the connection has
/// written `end` bytes in total: then its queue stops holding them, and they count as
/// consumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteMark {
    pub end: u64,
    pub queue: QueueRef,
    pub key: u64,
    pub count: u32,
    pub bytes: u64,
}

/// Starts a connection's writer task (given by its reader, which owns the socket).
pub type StartWriter = Box<dyn FnOnce(ConnId)>;

/// A table this module encoded (empty when there is none).
fn decode_kept(encoded: &Bytes) -> FieldTable {
    if encoded.is_empty() {
        return FieldTable::default();
    }
    let mut r = crate::protocol::codec::Reader::new(encoded.clone());
    // It decoded once already (and was encoded here): nothing else can come out.
    FieldTable::decode(&mut r).unwrap_or_default()
}

/// Restarts a parked connection's reader task (made by the reader as it parks,
/// `net::park`).
pub type RestartReader = Box<dyn FnOnce()>;

/// One connection, owned by its shard's slab.
pub struct Conn {
    pub id: ConnId,
    /// Broker-wide serial for logs and consumer tags.
    pub serial: u64,
    pub peer: SocketAddr,
    phase: Phase,
    pub user: String,
    /// Logged in with this broker's own federation-link credential
    /// (`auth::local_link`): every permission on every vhost.
    pub federation_link: bool,
    pub vhost: VhostIdx,
    pub vhost_name: String,
    pub channel_max: u16,
    pub frame_max: u32,
    pub heartbeat: u16,
    pub capabilities: ClientCapabilities,
    /// By number, the first one inline (`session::channel_table`).
    pub channels: ChannelTable,
    pub out: Outbound,
    /// The writer's, progress, writer-done and resume signals (`ConnSignals`): wakes the
    /// writer task ([`Conn::wake_writer`]); raised when bytes reached the socket; woken
    /// when a reason to hold the reader may have gone, when the connection becomes
    /// `Closed` (a lingering connection's socket is then cut off), and to ask an idle
    /// reader to park.
    pub signals: Rc<ConnSignals>,
    /// Starts the writer task; taken the first time it is woken. A plain connection's
    /// bytes normally go out in the shard's write pass, so most connections never start
    /// one (issue 23: an idle task per connection was half a KiB).
    start_writer: Option<StartWriter>,
    pub last_recv: Instant,
    pub last_send: Instant,
    /// Exclusive queues this connection declared (deleted when it goes).
    pub exclusive_queues: Vec<ShortStr>,
    /// No-ack deliveries queued and not yet written, in order.
    pub write_marks: VecDeque<WriteMark>,
    /// Epoch for the next channel opened.
    pub next_channel_epoch: u32,
    /// `connection.blocked` was sent (memory alarm) and not yet reversed.
    pub blocked_sent: bool,
    /// A channel went on publishing past its grace after being told to stop: the reader
    /// is to stop reading this socket.
    pub hold_requested: bool,
    /// Since when the reader has deliberately not read this socket (flow enforcement,
    /// backpressure): liveness is not judged meanwhile.
    pub read_paused_since: Option<Instant>,
    /// While the connection's reader is parked (its task ended, the shard's park set
    /// watches the socket): what starts it again (`net::park`).
    parked_reader: Option<RestartReader>,
    /// The shard asked the reader to park at its next wait for bytes (the connection
    /// has been idle); cleared when it reads, parks or declines.
    pub park_asked: bool,
    /// Doublings of `net.reader_park_after` before the reader may park next: raised by a
    /// park its peer ended soon, lowered by a long one (`shard::reader_park`).
    pub park_backoff: u8,
    /// The broker already logged why it closed this connection (CON-1002).
    pub close_logged: bool,
    /// On the shard's list of connections to write (so marking one is O(1) however
    /// many connections a turn touches).
    pub writer_marked: bool,
    /// Home queues of this shard whose only consumer is a no-ack one on this
    /// connection, with messages for it: the write pass dispatches them when it
    /// reaches the connection, just before writing (`shard::State::pull`).
    pub pulls: smallvec::SmallVec<[QueueId; 1]>,
    /// The socket of a plain connection, written straight from the outbound buffer by
    /// the shard's write pass while `writer_owns` is false (`None` on TLS).
    pub socket: Option<std::os::fd::RawFd>,
    /// The connection's writer task has the socket (a write in flight or a full socket:
    /// it waits for room), or must finish it (closed, TLS): the write pass leaves the
    /// connection to it until it drained the buffer.
    pub writer_owns: bool,
    /// The user's permissions on the vhost (set at `connection.open`).
    pub access: crate::auth::permissions::Access,
    /// On a TLS listener: whether EXTERNAL is offered and the client certificate's CN.
    /// Boxed: a plain connection's 8 bytes keep `Conn` in mimalloc's 640-byte class
    /// (issue 23).
    pub tls: Option<Box<TlsPeer>>,
    /// The broker's side of the socket (`None` when it could not be read).
    pub local: Option<SocketAddr>,
    /// When the socket was accepted, milliseconds since the Unix epoch.
    pub connected_at_ms: u64,
    /// `client-properties` of `connection.start-ok` but their `connection_name`, as the
    /// client sent them, encoded (a decoded table is a few hundred bytes of entries per
    /// connection; they are read rarely: [`Conn::client_properties`]) and shared with
    /// the connections of the shard that sent the same (`session::properties_cache`).
    client_properties: Bytes,
    /// Its `connection_name` entry, encoded as a table of its own.
    own_properties: Option<Box<[u8]>>,
    /// The SASL mechanism of the accepted `start-ok` (empty before).
    pub auth_mechanism: String,
    /// AMQP bytes read from the socket and written to it (`recv_oct`, `send_oct`; on a
    /// TLS listener, the plaintext: the record layer is not counted).
    pub recv_oct: u64,
    pub send_oct: u64,
}

impl Conn {
    /// Hints what a delivery to this connection touches (`model::prefetch`): its id,
    /// channel table, outbound buffer, write marks and write-pass flag. Computes field
    /// addresses only; reads nothing.
    #[inline(always)]
    pub fn prefetch_for_delivery(&self) {
        prefetch::line(&self.id);
        prefetch::line(&self.channels);
        prefetch::line(&self.out);
        prefetch::line(&self.write_marks);
        prefetch::line(&self.writer_marked);
    }

    /// Where the connection is in its life.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Whether frames from the client are still handled (not after close-ok to its
    /// close, not once closed).
    pub fn reading(&self) -> bool {
        !matches!(self.phase, Phase::Lingering | Phase::Closed)
    }

    /// The protocol header was accepted and `connection.start` sent.
    pub fn header_accepted(&mut self) {
        self.advance(Phase::AwaitHeader, Phase::AwaitStartOk);
    }

    /// `connection.start-ok` was accepted and `connection.tune` sent.
    pub fn start_ok_accepted(&mut self) {
        self.advance(Phase::AwaitStartOk, Phase::AwaitTuneOk);
    }

    /// `connection.tune-ok` was accepted.
    pub fn tune_ok_accepted(&mut self) {
        self.advance(Phase::AwaitTuneOk, Phase::AwaitOpen);
    }

    /// `connection.open` was accepted and `open-ok` sent.
    pub fn opened(&mut self) {
        self.advance(Phase::AwaitOpen, Phase::Open);
    }

    /// The broker sent `connection.close`: from now on only the client's close-ok (or
    /// its own close) counts. A connection already lingering or closed stays so.
    pub fn close_sent(&mut self) {
        if !matches!(self.phase, Phase::Lingering | Phase::Closed) {
            self.phase = Phase::Closing;
        }
    }

    /// The client's `connection.close` was answered with close-ok: the socket is left
    /// for the client to close. A closed connection stays closed.
    pub fn close_answered(&mut self) {
        if self.phase != Phase::Closed {
            self.phase = Phase::Lingering;
        }
    }

    /// Wakes the writer task, starting it the first time.
    pub fn wake_writer(&mut self) {
        self.ensure_writer();
        self.signals.writer.notify();
    }

    /// Starts the writer task if it is not running yet (a TLS connection's, which its
    /// reader also wakes, starts with the connection).
    pub fn ensure_writer(&mut self) {
        if let Some(start) = self.start_writer.take() {
            start(self.id);
        }
    }

    /// Gives the connection what starts its writer task when it is first needed.
    pub fn set_writer_start(&mut self, start: StartWriter) {
        self.start_writer = Some(start);
    }

    /// Done: the writer flushes and shuts the socket, and a reader waiting on the
    /// connection (lingering, held, paused) is woken.
    pub fn finish(&mut self) {
        self.phase = Phase::Closed;
        self.signals.resume.notify();
        // A parked reader must see the close to release the connection.
        if let Some(restart) = self.take_parked_reader() {
            restart();
        }
    }

    /// The reader parked: `restart` starts it again.
    pub fn reader_parked(&mut self, restart: RestartReader) {
        self.park_asked = false;
        self.parked_reader = Some(restart);
    }

    /// Whether the reader is parked.
    pub fn is_reader_parked(&self) -> bool {
        self.parked_reader.is_some()
    }

    /// What restarts the parked reader (taken: the caller calls it), if it is parked.
    pub fn take_parked_reader(&mut self) -> Option<RestartReader> {
        self.park_asked = false;
        self.parked_reader.take()
    }

    /// Moves from `from` to `to`; from any other phase nothing changes (a handshake
    /// step never reopens a closing connection).
    fn advance(&mut self, from: Phase, to: Phase) {
        if self.phase == from {
            self.phase = to;
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: ConnId,
        serial: u64,
        peer: SocketAddr,
        now: Instant,
        inline_max: usize,
        frame_max: u32,
        signals: Rc<ConnSignals>,
    ) -> Conn {
        Conn {
            id,
            serial,
            peer,
            phase: Phase::AwaitHeader,
            user: String::new(),
            federation_link: false,
            vhost: 0,
            vhost_name: String::new(),
            channel_max: 0,
            frame_max,
            heartbeat: 0,
            capabilities: ClientCapabilities::default(),
            channels: ChannelTable::default(),
            out: Outbound::new(inline_max, frame_max),
            signals,
            start_writer: None,
            last_recv: now,
            last_send: now,
            exclusive_queues: Vec::new(),
            write_marks: VecDeque::new(),
            next_channel_epoch: 1,
            blocked_sent: false,
            hold_requested: false,
            read_paused_since: None,
            parked_reader: None,
            park_asked: false,
            park_backoff: 0,
            close_logged: false,
            writer_marked: false,
            pulls: smallvec::SmallVec::new(),
            socket: None,
            writer_owns: false,
            access: crate::auth::permissions::Access::default(),
            tls: None,
            local: None,
            connected_at_ms: 0,
            client_properties: Bytes::new(),
            own_properties: None,
            auth_mechanism: String::new(),
            recv_oct: 0,
            send_oct: 0,
        }
    }

    /// An epoch for a channel being opened.
    pub fn channel_epoch(&mut self) -> u32 {
        let e = self.next_channel_epoch;
        self.next_channel_epoch = self.next_channel_epoch.wrapping_add(1);
        e
    }

    /// Whether any channel holds deliveries the client has not acknowledged (its acks
    /// arrive on this socket, so it must not be left unread for long).
    pub fn holds_unacked(&self) -> bool {
        self.channels.values().any(|ch| !ch.unacked.is_empty())
    }

    /// Whether a channel has published more than `grace` bytes since it (or the
    /// connection) was told to stop.
    pub fn over_grace(&self, grace: u64) -> bool {
        self.channels
            .values()
            .any(|ch| ch.publisher().is_some_and(|p| p.excess > grace))
    }

    /// The operator's name of the connection, as RabbitMQ forms it: `PEER -> HOST:PORT`
    /// (`127.0.0.1:40312 -> 127.0.0.1:5672`), unique while the socket is open. Without
    /// the broker's side, the peer and the serial (`127.0.0.1:40312 #7`).
    pub fn name(&self) -> String {
        match self.local {
            Some(local) => format!("{} -> {}", self.peer, local),
            None => format!("{} #{}", self.peer, self.serial),
        }
    }

    /// Keeps the client's `client-properties`, encoded and detached from the frame:
    /// what it may share with other connections, and its own `connection_name`
    /// (`session::properties_cache`).
    pub fn set_client_properties(&mut self, interned: Interned) {
        self.client_properties = interned.shared;
        self.own_properties = interned.own;
    }

    /// The client's `client-properties` (empty before `connection.start-ok`); its
    /// `connection_name` comes last.
    pub fn client_properties(&self) -> FieldTable {
        let mut table = decode_kept(&self.client_properties);
        if let Some(own) = &self.own_properties {
            let own = decode_kept(&Bytes::copy_from_slice(own));
            table = table
                .iter()
                .chain(own.iter())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
        }
        table
    }

    /// The `connection_name` the client gave in `client-properties`, if any.
    pub fn client_name(&self) -> Option<String> {
        let own = decode_kept(&Bytes::copy_from_slice(self.own_properties.as_deref()?));
        match own.get("connection_name")? {
            FieldValue::LongStr(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
            FieldValue::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }

    /// `con:7(guest@127.0.0.1:5000/)`, the Qpid-style subject of log lines.
    pub fn log_subject(&self) -> String {
        format!(
            "con:{}({}@{}{})",
            self.serial, self.user, self.peer, self.vhost_name
        )
    }
}

/// The `server-properties` table of `connection.start`, advertising exactly the RabbitMQ
/// extensions sluice implements, and `cluster_name` = this node's name
/// (`[broker] node_name`), where RabbitMQ sends its cluster name: a federation
/// downstream records it as the `cluster-name` of its `x-received-from` hops.
pub fn server_properties(node_name: &str) -> FieldTable {
    let mut caps = FieldTable::default();
    for cap in [
        "publisher_confirms",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "per_consumer_qos",
        "authentication_failure_close",
        "exchange_exchange_bindings",
        "consumer_priorities",
        "direct_reply_to",
    ] {
        caps.insert(cap, FieldValue::Bool(true));
    }
    let mut props = FieldTable::default();
    let text = |s: &str| FieldValue::LongStr(LongStr::from(s));
    props.insert("product", text("sluice"));
    props.insert("version", text(env!("CARGO_PKG_VERSION")));
    props.insert("platform", text("Rust / Linux io_uring"));
    props.insert(
        "information",
        text("AMQP 0-9-1 broker for heavy topic fan-out"),
    );
    props.insert("capabilities", FieldValue::Table(caps));
    props.insert("cluster_name", text(node_name));
    props
}

/// Reads the capabilities a client announced in `client-properties`.
pub fn client_capabilities(props: &FieldTable) -> ClientCapabilities {
    let caps = props.get("capabilities").and_then(|v| v.as_table());
    let flag = |name: &str| {
        caps.and_then(|t| t.get(name))
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
    };
    ClientCapabilities {
        connection_blocked: flag("connection.blocked"),
        consumer_cancel_notify: flag("consumer_cancel_notify"),
    }
}

/// Credentials extracted from a SASL response.
#[derive(Debug, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

/// Parses the `response` of `connection.start-ok` for `mechanism`.
pub fn parse_sasl(mechanism: &[u8], response: &Bytes) -> Option<Credentials> {
    match mechanism {
        b"PLAIN" => {
            // authzid \0 authcid \0 password
            let mut parts = response.split(|&b| b == 0);
            let authzid = parts.next()?;
            let user = parts.next()?;
            let password = parts.next()?;
            if parts.next().is_some() {
                return None;
            }
            // Acting as another identity is not supported: an authzid other than the
            // authcid is refused, as RabbitMQ refuses it.
            if !authzid.is_empty() && authzid != user {
                return None;
            }
            Some(Credentials {
                user: String::from_utf8(user.to_vec()).ok()?,
                password: String::from_utf8(password.to_vec()).ok()?,
            })
        }
        b"AMQPLAIN" => {
            // A field table without its length prefix.
            let mut framed = Vec::with_capacity(response.len() + 4);
            framed.extend_from_slice(&(response.len() as u32).to_be_bytes());
            framed.extend_from_slice(response);
            let mut reader = crate::protocol::codec::Reader::new(Bytes::from(framed));
            let table = reader.table("AMQPLAIN response").ok()?;
            let text = |key: &str| match table.get(key)? {
                FieldValue::LongStr(s) => Some(s.as_str_lossy().into_owned()),
                _ => None,
            };
            Some(Credentials {
                user: text("LOGIN")?,
                password: text("PASSWORD")?,
            })
        }
        _ => None,
    }
}

/// Mechanisms offered in `connection.start`.
pub const MECHANISMS: &str = "PLAIN AMQPLAIN";

/// Mechanisms offered on a TLS listener that verifies client certificates.
pub const EXTERNAL_MECHANISMS: &str = "EXTERNAL PLAIN AMQPLAIN";

/// The mechanisms `connection.start` offers a connection: EXTERNAL only on a TLS
/// listener that verifies client certificates.
pub fn offered_mechanisms(peer: Option<&TlsPeer>) -> &'static str {
    match peer {
        Some(p) if p.offer_external => EXTERNAL_MECHANISMS,
        _ => MECHANISMS,
    }
}

/// Whether a `start-ok`'s mechanism is one of those `connection.start` offered. One
/// that is not gets no reply: the 0-9-1 spec says the server closes the socket, and
/// RabbitMQ's reader does so (after its silent-close delay) during the handshake.
pub fn mechanism_offered(chosen: &[u8], offered: &str) -> bool {
    offered.split(' ').any(|m| m.as_bytes() == chosen)
}

/// What a TLS connection's transport tells about its peer (`net::tls`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsPeer {
    /// The listener verifies client certificates: SASL EXTERNAL is offered.
    pub offer_external: bool,
    /// The subject CN of the verified client certificate, if one was sent.
    pub common_name: Option<String>,
}

/// The user name SASL EXTERNAL logs in as: the verified client certificate's CN (the
/// handler checks that such a user exists; no password is checked). `None` on a plain
/// connection, on a listener that does not verify peers, or without a certificate or CN.
pub fn external_identity(peer: Option<&TlsPeer>) -> Option<&str> {
    peer.filter(|p| p.offer_external)?.common_name.as_deref()
}

/// Locales offered in `connection.start`.
pub const LOCALES: &str = "en_US";

/// The vhost name from `connection.open` (clients send "/" or "/name" or "name").
pub fn vhost_name(path: &ShortStr) -> String {
    path.as_str_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_needs_a_verified_certificate_cn() {
        let with = |cn: Option<&str>| TlsPeer {
            offer_external: true,
            common_name: cn.map(str::to_owned),
        };
        assert_eq!(external_identity(None), None);
        assert_eq!(external_identity(Some(&with(None))), None);
        assert_eq!(external_identity(Some(&with(Some("alice")))), Some("alice"));
        let unverified = TlsPeer {
            offer_external: false,
            common_name: Some("alice".into()),
        };
        assert_eq!(external_identity(Some(&unverified)), None);
    }

    #[test]
    fn plain_and_amqplain() {
        let creds = parse_sasl(b"PLAIN", &Bytes::from_static(b"\0guest\0secret"));
        assert_eq!(
            creds,
            Some(Credentials {
                user: "guest".into(),
                password: "secret".into()
            })
        );
        assert_eq!(parse_sasl(b"PLAIN", &Bytes::from_static(b"guest")), None);
        // An authzid is accepted only when it names the authcid itself.
        let same = parse_sasl(b"PLAIN", &Bytes::from_static(b"guest\0guest\0secret"));
        assert_eq!(same.map(|c| c.user), Some("guest".to_string()));
        let other = Bytes::from_static(b"admin\0guest\0secret");
        assert_eq!(parse_sasl(b"PLAIN", &other), None);
        let mut t = FieldTable::default();
        t.insert("LOGIN", FieldValue::LongStr("u".into()));
        t.insert("PASSWORD", FieldValue::LongStr("p".into()));
        let mut buf = bytes::BytesMut::new();
        t.encode(&mut buf);
        let body = Bytes::from(buf).slice(4..);
        assert_eq!(
            parse_sasl(b"AMQPLAIN", &body),
            Some(Credentials {
                user: "u".into(),
                password: "p".into()
            })
        );
        assert_eq!(parse_sasl(b"EXTERNAL", &body), None);
    }

    fn conn() -> Conn {
        Conn::new(
            ConnId {
                slot: 0,
                generation: 1,
            },
            1,
            "127.0.0.1:1".parse().expect("address"),
            Instant::now(),
            512,
            131_072,
            Rc::new(ConnSignals::default()),
        )
    }

    #[test]
    fn the_handshake_moves_forward_one_step_at_a_time() {
        let mut c = conn();
        assert_eq!(c.phase(), Phase::AwaitHeader);
        // Out of order, nothing changes.
        c.opened();
        c.tune_ok_accepted();
        assert_eq!(c.phase(), Phase::AwaitHeader);
        c.header_accepted();
        c.start_ok_accepted();
        c.tune_ok_accepted();
        assert_eq!(c.phase(), Phase::AwaitOpen);
        c.opened();
        assert_eq!(c.phase(), Phase::Open);
        assert!(c.reading());
    }

    #[test]
    fn a_closing_connection_never_reopens() {
        let mut c = conn();
        c.header_accepted();
        c.close_sent();
        assert_eq!(c.phase(), Phase::Closing);
        assert!(c.reading(), "close-ok must still be read");
        c.start_ok_accepted();
        assert_eq!(c.phase(), Phase::Closing);
        c.finish();
        assert_eq!(c.phase(), Phase::Closed);
        c.close_sent();
        c.close_answered();
        assert_eq!(c.phase(), Phase::Closed);
        assert!(!c.reading());
    }

    #[test]
    fn after_close_ok_to_the_client_nothing_more_is_read() {
        let mut c = conn();
        c.header_accepted();
        c.start_ok_accepted();
        c.tune_ok_accepted();
        c.opened();
        c.close_answered();
        assert_eq!(c.phase(), Phase::Lingering);
        assert!(!c.reading());
        // A broker-side close after that (shutdown) does not make it read again.
        c.close_sent();
        assert_eq!(c.phase(), Phase::Lingering);
        c.finish();
        assert_eq!(c.phase(), Phase::Closed);
    }

    #[test]
    fn a_connection_fits_the_allocators_640_byte_class() {
        // Every subscriber has one (issue 23); 648 bytes would take 768.
        assert!(std::mem::size_of::<Conn>() <= 640);
    }

    /// The broker's close restarts a parked reader (which then sees the connection
    /// closed and releases it), once; taking the restart clears a request to park.
    #[test]
    fn finishing_a_parked_connection_restarts_its_reader_once() {
        let restarts = Rc::new(std::cell::Cell::new(0));
        let mut c = conn();
        c.opened();
        c.park_asked = true;
        let counted = Rc::clone(&restarts);
        c.reader_parked(Box::new(move || counted.set(counted.get() + 1)));
        assert!(c.is_reader_parked() && !c.park_asked);
        c.finish();
        assert_eq!(restarts.get(), 1);
        assert!(!c.is_reader_parked());
        c.finish();
        assert_eq!(restarts.get(), 1);
        c.park_asked = true;
        assert!(c.take_parked_reader().is_none());
        assert!(!c.park_asked);
    }

    /// What a connection keeps of its client-properties reads back as the client sent
    /// them (its `connection_name` last), and gives its name.
    #[test]
    fn client_properties_read_back_with_their_name() {
        let mut sent = FieldTable::new();
        sent.insert("connection_name", FieldValue::LongStr("orders".into()));
        sent.insert("product", FieldValue::LongStr("lib".into()));
        let mut cache = crate::session::properties_cache::PropertiesCache::default();
        let mut c = conn();
        assert_eq!(c.client_properties(), FieldTable::default());
        assert_eq!(c.client_name(), None);
        c.set_client_properties(cache.intern(&sent));
        let back = c.client_properties();
        assert_eq!(back.len(), 2);
        assert_eq!(back.get("product"), sent.get("product"));
        assert_eq!(
            back.iter().last().map(|(k, _)| k.as_bytes().to_vec()),
            Some(b"connection_name".to_vec())
        );
        assert_eq!(c.client_name().as_deref(), Some("orders"));
    }
}

//! Raw connections for the limit suites: from a chosen loopback source address, as a
//! chosen user, ending in `open-ok` or the broker's `connection.close`.

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use crate::common::raw::{Ending, RawConn, READ_TIMEOUT};
use crate::common::wire::m;
use crate::common::Broker;

/// A TCP connection to the broker from `source` (any 127.0.0.0/8 address works on
/// Linux loopback), not yet speaking AMQP.
pub fn tcp_from(broker: &Broker, source: &str) -> RawConn {
    if source == "127.0.0.1" {
        // connect() without a bind picks the port by the whole 4-tuple (a bound port 0
        // cannot reuse one in TIME_WAIT: thousands of logins would run out).
        return RawConn::connect(&broker.addr());
    }
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).expect("socket");
    let from: SocketAddr = format!("{source}:0").parse().expect("source address");
    socket.bind(&from.into()).expect("bind source address");
    let to: SocketAddr = broker.addr().parse().expect("broker address");
    socket.connect(&to.into()).expect("connect");
    let stream: TcpStream = socket.into();
    stream.set_nodelay(true).expect("nodelay");
    stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .expect("timeout");
    stream
        .set_write_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    RawConn { stream, tune: None }
}

/// How a handshake ended.
pub enum Opened {
    Open(RawConn),
    /// `connection.close` from the broker: code, text, class id, method id.
    Refused(u16, String, u16, u16),
    /// The socket was closed without a reply.
    Dropped,
}

impl Opened {
    pub fn conn(self) -> RawConn {
        match self {
            Opened::Open(c) => c,
            other => panic!("expected open-ok, got {other:?}"),
        }
    }

    pub fn refusal(self) -> (u16, String) {
        match self {
            Opened::Refused(code, text, ..) => (code, text),
            Opened::Open(_) => panic!("expected a refusal, the connection opened"),
            Opened::Dropped => panic!("expected a refusal, the socket was dropped"),
        }
    }
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Opened::Open(_) => f.write_str("Open"),
            Opened::Refused(code, text, class, method) => {
                write!(f, "Refused({code} {text}, {class}/{method})")
            }
            Opened::Dropped => f.write_str("Dropped"),
        }
    }
}

/// Handshake as `user`/`password` on `vhost` from `source`, with the broker's tune.
pub fn open_as(broker: &Broker, source: &str, user: &str, password: &str, vhost: &str) -> Opened {
    let mut c = tcp_from(broker, source);
    c.send_protocol_header();
    match c.read_method() {
        Ok(mth) if mth.id == m::CONNECTION_START => {}
        Ok(mth) => panic!("expected connection.start, got {:?}", mth.id),
        Err(_) => return Opened::Dropped,
    }
    let response = format!("\0{user}\0{password}");
    c.send_start_ok("PLAIN", response.as_bytes());
    match next(&mut c) {
        Step::Method(id, args) if id == m::CONNECTION_TUNE => {
            let mut d = crate::common::wire::Dec::new(&args);
            let tune = crate::common::raw::Tune {
                channel_max: d.short(),
                frame_max: d.long(),
                heartbeat: 0,
            };
            d.short();
            c.send_tune_ok(tune);
        }
        Step::Method(id, _) => panic!("expected connection.tune, got {id:?}"),
        Step::Closed(code, text, class, method) => {
            return Opened::Refused(code, text, class, method)
        }
        Step::Eof => return Opened::Dropped,
    }
    c.send_open(vhost);
    match next(&mut c) {
        Step::Method(id, _) if id == m::CONNECTION_OPEN_OK => Opened::Open(c),
        Step::Method(id, _) => panic!("expected connection.open-ok, got {id:?}"),
        Step::Closed(code, text, class, method) => Opened::Refused(code, text, class, method),
        Step::Eof => Opened::Dropped,
    }
}

/// guest/guest on "/" from 127.0.0.1.
pub fn open(broker: &Broker) -> Opened {
    open_as(broker, "127.0.0.1", "guest", "guest", "/")
}

enum Step {
    Method((u16, u16), Vec<u8>),
    Closed(u16, String, u16, u16),
    Eof,
}

fn next(c: &mut RawConn) -> Step {
    match c.read_method() {
        Ok(mth) if mth.id == m::CONNECTION_CLOSE => {
            let mut d = mth.dec();
            let (code, text) = (d.short(), d.shortstr());
            let (class, method) = (d.short(), d.short());
            let _ = c.send_method(0, m::CONNECTION_CLOSE_OK, &[]);
            Step::Closed(code, text, class, method)
        }
        Ok(mth) => Step::Method(mth.id, mth.args),
        Err(_) => Step::Eof,
    }
}

/// Closes a connection politely and waits for the broker to release it (close-ok,
/// then the socket closed by us).
pub fn close(mut c: RawConn) {
    let args = crate::common::wire::Enc::new()
        .short(200)
        .shortstr("bye")
        .short(0)
        .short(0)
        .done();
    c.send_method(0, m::CONNECTION_CLOSE, &args).expect("close");
    c.expect_method(0, m::CONNECTION_CLOSE_OK);
}

/// Retries `f` until it opens (a released place is given back when the broker has
/// seen the socket go, a moment after the client's close), for at most 5 s.
pub fn open_eventually(mut f: impl FnMut() -> Opened) -> RawConn {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match f() {
            Opened::Open(c) => return c,
            other if Instant::now() >= deadline => panic!("never admitted again: {other:?}"),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The connection's ending, expecting a `connection.close`.
pub fn expect_close(c: &mut RawConn) -> (u16, String, u16, u16) {
    match c.read_until_closed(Duration::from_secs(5)) {
        Some(Ending::Close {
            code,
            text,
            class_id,
            method_id,
        }) => (code, text, class_id, method_id),
        other => panic!("expected connection.close, got {other:?}"),
    }
}

/// Lines of the broker's log containing `needle`.
pub fn log_count(broker: &Broker, needle: &str) -> usize {
    broker.logs().iter().filter(|l| l.contains(needle)).count()
}

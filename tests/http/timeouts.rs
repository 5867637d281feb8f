//! Issue 18 item 11: the management listener closes sockets that send no request
//! headers (`http.header_read_timeout_ms`), keep-alive connections left idle
//! (`http.idle_timeout_ms`), and connections over `http.max_connections` as they are
//! accepted (CON-1017), while a normal request is served once under the cap.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::{http, wait_until, Broker};

/// How long a test waits for the broker to close a socket (the timeouts under test are
/// a second or two; this is only the bound that fails the test).
const CLOSE_WAIT: Duration = Duration::from_secs(15);

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to HTTP");
    s.set_read_timeout(Some(CLOSE_WAIT)).expect("timeout");
    s
}

/// Reads until the broker closes the socket; returns what it sent first. Panics if it
/// is still open after [`CLOSE_WAIT`].
fn read_until_closed(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("socket still open after {CLOSE_WAIT:?} ({e})"),
        }
    }
}

/// One `GET /api/overview` (HTTP/1.1, keep-alive) on `s`, as guest: the status, with
/// the whole response read (by its content-length).
fn get_keep_alive(s: &mut TcpStream) -> u16 {
    s.write_all(
        b"GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\r\n",
    )
    .expect("send request");
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).expect("read response");
        assert!(n > 0, "closed before the response was complete");
        raw.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&raw);
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let length: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().expect("content-length"))
            })
            .expect("content-length header");
        if body.len() >= length {
            return head
                .split(' ')
                .nth(1)
                .and_then(|c| c.parse().ok())
                .expect("status");
        }
    }
}

/// A request that may be refused: its status, or `None` when the socket was closed
/// without a response.
fn try_get(port: u16) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(CLOSE_WAIT)).ok()?;
    let sent = s.write_all(
        b"GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\nConnection: close\r\n\r\n",
    );
    let mut raw = Vec::new();
    if sent.is_err() || s.read_to_end(&mut raw).is_err() {
        return None;
    }
    let text = String::from_utf8_lossy(&raw);
    text.split(' ').nth(1).and_then(|c| c.parse().ok())
}

#[test]
fn silent_sockets_are_closed_after_the_header_timeout() {
    let broker = Broker::start_with_config(2, "[http]\nheader_read_timeout_ms = 1000\n");
    let port = broker.http_port();
    let mut silent: Vec<TcpStream> = (0..50).map(|_| connect(port)).collect();
    // A socket that sent half a request head is cut off the same way (slowloris).
    let mut partial = connect(port);
    partial
        .write_all(b"GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .expect("send a partial head");
    let started = Instant::now();
    for s in &mut silent {
        assert_eq!(read_until_closed(s), b"", "a silent socket got an answer");
    }
    assert_eq!(read_until_closed(&mut partial), b"");
    // Not closed at accept: they were held until the header timeout.
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "closed after {:?}, before the 1 s header timeout",
        started.elapsed()
    );
    assert_eq!(http::get(port, "/api/overview").status, 200);
}

#[test]
fn idle_keep_alive_connections_are_closed() {
    // The header timeout is far away: the close comes from the idle timeout.
    let broker = Broker::start_with_config(
        2,
        "[http]\nheader_read_timeout_ms = 60000\nidle_timeout_ms = 1000\n",
    );
    let port = broker.http_port();
    let mut s = connect(port);
    // Keep-alive works: two requests on one connection.
    assert_eq!(get_keep_alive(&mut s), 200);
    assert_eq!(get_keep_alive(&mut s), 200);
    let idle_from = Instant::now();
    assert_eq!(
        read_until_closed(&mut s),
        b"",
        "no further bytes before the close"
    );
    assert!(
        idle_from.elapsed() >= Duration::from_millis(500),
        "closed after {:?}, before the 1 s idle timeout",
        idle_from.elapsed()
    );
    // Without the idle timeout the same connection stays open (the header timeout is
    // 60 s): what closed it was the idle timeout.
    let broker = Broker::start_with_config(
        2,
        "[http]\nheader_read_timeout_ms = 60000\nidle_timeout_ms = 0\n",
    );
    let mut s = connect(broker.http_port());
    assert_eq!(get_keep_alive(&mut s), 200);
    s.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let mut buf = [0u8; 16];
    let err = s.read(&mut buf).expect_err("still open, nothing sent");
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err}"
    );
    assert_eq!(get_keep_alive(&mut s), 200);
    // hyper's header timer also runs while a keep-alive connection waits for its next
    // request (as config/sluice.toml says): closed without any idle timeout.
    let broker = Broker::start_with_config(
        2,
        "[http]\nheader_read_timeout_ms = 1000\nidle_timeout_ms = 0\n",
    );
    let mut s = connect(broker.http_port());
    assert_eq!(get_keep_alive(&mut s), 200);
    assert_eq!(read_until_closed(&mut s), b"");
}

#[test]
fn connections_over_the_cap_are_closed_at_accept() {
    const CAP: usize = 5;
    let broker = Broker::start_with_config(
        2,
        &format!("[http]\nmax_connections = {CAP}\nheader_read_timeout_ms = 60000\n"),
    );
    let port = broker.http_port();
    let mut held: Vec<TcpStream> = (0..CAP).map(|_| connect(port)).collect();
    // Every place is taken: the next connections are closed without an answer.
    for _ in 0..3 {
        let mut over = connect(port);
        assert_eq!(read_until_closed(&mut over), b"");
    }
    assert_eq!(try_get(port), None, "a request over the cap was served");
    let line = broker
        .wait_for_log(
            "CON-1017 : Management connection from 127.0.0.1:",
            Duration::from_secs(5),
        )
        .expect("a CON-1017 line");
    assert!(
        line.contains(": 5 management connections are open (http.max_connections)"),
        "{line}"
    );
    // Rate-limited: one line for the four refusals (the first, then one per 10 s).
    let lines = broker
        .logs()
        .iter()
        .filter(|l| l.contains("CON-1017"))
        .count();
    assert_eq!(lines, 1);
    // One place comes back when a held connection goes: a normal request is served.
    drop(held.pop());
    assert!(
        wait_until(CLOSE_WAIT, || try_get(port) == Some(200)),
        "no request served after a place came back"
    );
    // The other held connections were open all along.
    for s in &mut held {
        s.set_nonblocking(true).expect("nonblocking");
        let mut buf = [0u8; 1];
        let err = s.read(&mut buf).expect_err("still open, nothing sent");
        assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    }
}

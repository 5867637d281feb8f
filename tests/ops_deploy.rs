//! Running sluice on a Linux host: the systemd readiness protocol (`$NOTIFY_SOCKET`:
//! `READY=1` once every shard accepts, `STOPPING=1` at SIGTERM, path and abstract
//! sockets, a failed send logged once and survived) and `--log-format json` (every line
//! a JSON object, operational parts as their own fields).
//!
//! Each test starts its own `sluice` child (the shared harness passes neither extra flags
//! nor environment), waits on deadlines only, and ends only the child it started.

mod common;

use std::io::BufRead;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::wire::{m, Enc};
use common::{unique, wait_until, RawConn, TestDir};

const START: Duration = Duration::from_secs(15);

/// A `sluice` child with extra flags and environment; killed if the test fails.
struct Sluice {
    child: Option<Child>,
    logs: Arc<Mutex<Vec<String>>>,
    _dir: TestDir,
}

impl Sluice {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Sluice {
        let dir = TestDir::new("sluice-ops");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.args([
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "off",
            "--shards",
            "2",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(args)
        .env_remove("NOTIFY_SOCKET")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn sluice");
        let logs = Arc::new(Mutex::new(Vec::new()));
        for pipe in [
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let logs = Arc::clone(&logs);
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                    logs.lock().unwrap().push(line);
                }
            });
        }
        Sluice {
            child: Some(child),
            logs,
            _dir: dir,
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    /// The first line containing `needle`, polling until `timeout`; panics with the log.
    fn wait_for(&self, needle: &str, timeout: Duration) -> String {
        let mut found = None;
        wait_until(timeout, || {
            found = self.logs().into_iter().find(|l| l.contains(needle));
            found.is_some()
        });
        found.unwrap_or_else(|| {
            panic!(
                "no log line with {needle:?} within {timeout:?}; log:\n{}",
                self.logs().join("\n")
            )
        })
    }

    /// The AMQP port, from the BRK-1002 line (text or JSON).
    fn port(&self) -> u16 {
        let line = self.wait_for("Listening on TCP 127.0.0.1:", START);
        let marker = "Listening on TCP 127.0.0.1:";
        let rest = &line[line.find(marker).expect("marker") + marker.len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().expect("port")
    }

    fn sigterm(&self) {
        // SAFETY: plain kill(2) on the pid of a child we own and have not reaped.
        let rc = unsafe { libc::kill(self.pid() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0, "kill(SIGTERM)");
    }

    fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let child = self.child.as_mut().expect("running");
        let mut status = None;
        wait_until(timeout, || {
            status = child.try_wait().expect("try_wait");
            status.is_some()
        });
        self.child = None;
        status.unwrap_or_else(|| panic!("sluice did not exit within {timeout:?}"))
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Receives one datagram, waiting at most `timeout`.
fn recv(socket: &UnixDatagram, timeout: Duration) -> String {
    socket.set_read_timeout(Some(timeout)).expect("timeout");
    let mut buf = [0u8; 4096];
    let n = socket
        .recv(&mut buf)
        .expect("a notification within the deadline");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// READY=1 (with MAINPID and STATUS) once the broker accepts AMQP connections; SIGTERM
/// then sends STOPPING=1 and the broker exits 0.
fn ready_then_stopping(socket: &UnixDatagram, notify_socket: &str) {
    let started = Instant::now();
    let mut broker = Sluice::start(&[], &[("NOTIFY_SOCKET", notify_socket)]);
    let ready = recv(socket, START);
    let lines: Vec<&str> = ready.lines().collect();
    assert!(lines.contains(&"READY=1"), "{ready:?}");
    assert!(
        lines.contains(&format!("MAINPID={}", broker.pid()).as_str()),
        "{ready:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("STATUS=ready: 2 shards")),
        "{ready:?}"
    );
    // Readiness follows BRK-1004 (every shard accepts): a full handshake succeeds now.
    broker.wait_for("BRK-1004 : Ready", START);
    let mut conn = RawConn::connect(&format!("127.0.0.1:{}", broker.port()));
    conn.handshake();
    broker.sigterm();
    let stopping = recv(socket, Duration::from_secs(10));
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping:?}");
    let status = broker.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "exit {status}");
    assert!(started.elapsed() < Duration::from_secs(40));
}

#[test]
fn systemd_notify_on_a_path_socket() {
    let dir = TestDir::new("sluice-notify");
    let path: PathBuf = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).expect("bind notify socket");
    ready_then_stopping(&socket, &path.to_string_lossy());
}

#[test]
fn systemd_notify_on_an_abstract_socket() {
    use std::os::linux::net::SocketAddrExt;
    let name = unique("sluice-notify-abstract");
    let addr =
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract name");
    let socket = UnixDatagram::bind_addr(&addr).expect("bind abstract socket");
    ready_then_stopping(&socket, &format!("@{name}"));
}

#[test]
fn systemd_notify_failure_is_logged_once_and_harmless() {
    let dir = TestDir::new("sluice-notify-missing");
    let missing = dir.path().join("nobody-listens.sock");
    let mut broker = Sluice::start(&[], &[("NOTIFY_SOCKET", &missing.to_string_lossy())]);
    broker.wait_for("BRK-1004 : Ready", START);
    broker.wait_for("BRK-1013 : systemd notification failed", START);
    let mut conn = RawConn::connect(&format!("127.0.0.1:{}", broker.port()));
    conn.handshake();
    broker.sigterm();
    let status = broker.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "exit {status}");
    let warnings = broker
        .logs()
        .iter()
        .filter(|l| l.contains("BRK-1013"))
        .count();
    assert_eq!(warnings, 1, "READY and STOPPING both failed, one warning");
}

/// The parsed JSON line whose `code` is `code`, polling until the deadline.
fn json_line(broker: &Sluice, code: &str) -> serde_json::Value {
    let mut found = None;
    wait_until(Duration::from_secs(5), || {
        found = broker
            .logs()
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["code"] == code);
        found.is_some()
    });
    found.unwrap_or_else(|| {
        panic!(
            "no JSON line with code {code}; log:\n{}",
            broker.logs().join("\n")
        )
    })
}

#[test]
fn json_log_lines_carry_their_parts_as_fields() {
    let mut broker = Sluice::start(
        &[
            "--log-format",
            "json",
            "--log-level",
            "info,sluice::ops=debug",
        ],
        &[],
    );
    json_line(&broker, "BRK-1004");
    let mut conn = RawConn::connect(&format!("127.0.0.1:{}", broker.port()));
    conn.handshake();
    conn.channel_open(1);
    let queue = unique("json-q");
    conn.queue_declare(1, &queue, false, false, false);
    let exchange = unique("json-x");
    let args = Enc::new()
        .short(0)
        .shortstr(&exchange)
        .shortstr("topic")
        .bits(&[false, false, false, false, false])
        .table(&vec![])
        .done();
    conn.send_method(1, m::EXCHANGE_DECLARE, &args)
        .expect("send exchange.declare");
    conn.expect_method(1, m::EXCHANGE_DECLARE_OK);

    let open = json_line(&broker, "CON-1001");
    let subject = open["connection"].as_str().expect("connection field");
    assert!(subject.starts_with("con:"), "{open}");
    let message = open["message"].as_str().expect("message");
    assert!(
        message.starts_with(&format!("[{subject}] CON-1001 : Open")),
        "{open}"
    );
    assert_eq!(open["level"], "INFO");
    assert_eq!(open["target"], "sluice::ops");
    assert!(open.get("queue").is_none(), "no queue on CON-1001: {open}");

    let channel = json_line(&broker, "CHN-1001");
    assert_eq!(channel["connection"], subject);
    assert_eq!(channel["channel"], 1);

    let created = json_line(&broker, "QUE-1001");
    assert_eq!(created["vhost"], "/");
    assert_eq!(created["queue"], queue.as_str());
    assert!(created.get("connection").is_none(), "{created}");
    assert_eq!(
        created["message"],
        format!("[vh(/)/qu({queue})] QUE-1001 : Create")
    );

    let declared = json_line(&broker, "EXH-1001");
    assert_eq!(declared["vhost"], "/");
    assert_eq!(declared["exchange"], exchange.as_str());

    drop(conn);
    broker.sigterm();
    let status = broker.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "exit {status}");
    for line in broker.logs() {
        let value: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(value.is_object(), "{line}");
        assert!(value["timestamp"].is_string(), "{line}");
    }
}

//! A new user's first start (issue 24, "the first five minutes"), against the real
//! `sluice` binary started by hand (the shared harness always passes `--http-listen`):
//!
//! - the management listener's default addresses (127.0.0.1:15672 and [::1]:15672)
//!   taken, as by a RabbitMQ on the same machine: the broker starts anyway, without
//!   them, and says so (BRK-1025); one of them taken, the other is served; AMQP is
//!   served;
//! - `[::]` listens dual-stack;
//! - an address the operator chose that is taken (the management one, the AMQP one)
//!   stops the start, naming it — and every listener is bound before the store, so the
//!   failed start leaves no data directory behind.

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{RawConn, TestDir};

fn sluice(data_dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.arg("--shards")
        .arg("1")
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--log-level")
        .arg("info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Runs `cmd`, expecting it to exit by itself: its status and everything it printed.
fn run_to_exit(mut cmd: Command) -> (std::process::ExitStatus, String) {
    let out = cmd.output().expect("run sluice");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status, text)
}

/// A broker started by hand on `data_dir` with `args`, its output collected.
struct Running {
    child: std::process::Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Running {
    fn start(data_dir: &Path, args: &[&str]) -> Running {
        let mut cmd = sluice(data_dir);
        cmd.args(args);
        let mut child = cmd.spawn().expect("spawn sluice");
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        for stream in [
            Box::new(child.stdout.take().expect("stdout")) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().expect("stderr")),
        ] {
            let lines = Arc::clone(&lines);
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    lines.lock().expect("lines").push(line);
                }
            });
        }
        let mut running = Running { child, lines };
        let deadline = Instant::now() + Duration::from_secs(15);
        while running.find("BRK-1004 : Ready").is_none() {
            if let Some(status) = running.child.try_wait().expect("try_wait") {
                panic!("sluice exited with {status}: {:#?}", running.all());
            }
            assert!(Instant::now() < deadline, "{:#?}", running.all());
            std::thread::sleep(Duration::from_millis(20));
        }
        running
    }

    fn all(&self) -> Vec<String> {
        self.lines.lock().expect("lines").clone()
    }

    fn find(&self, needle: &str) -> Option<String> {
        self.all().into_iter().find(|l| l.contains(needle))
    }

    fn amqp_port(&self) -> u16 {
        self.find("BRK-1002 : Starting : Listening on TCP 127.0.0.1:")
            .and_then(|l| l.rsplit(':').next().and_then(|p| p.trim().parse().ok()))
            .expect("AMQP port")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // The broker this test started, by its own handle.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` with guest's basic auth on `addr`: the status line.
fn http_status(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply.lines().next().unwrap_or_default().to_owned()
}

/// The management listener's default is loopback on both families, 127.0.0.1:15672 and
/// [::1]:15672. One of them taken: the other is served. Both taken (a RabbitMQ on the
/// machine): the broker starts without them and says so (BRK-1025 for each). AMQP is
/// served either way. (One test: the phases share the fixed default ports.)
#[test]
fn a_taken_default_management_port_is_a_warning() {
    let dir = TestDir::new("sluice-first-start");
    // 127.0.0.1:15672 held (if something else holds it already, it is taken all the
    // same); [::1]:15672 free, if this machine has IPv6 and nobody holds it.
    let v4 = TcpListener::bind("127.0.0.1:15672");
    let v6_free = TcpListener::bind("[::1]:15672").is_ok();
    {
        let broker = Running::start(&dir.path().join("a"), &["--listen", "127.0.0.1:0"]);
        let warning = broker.find("BRK-1025").expect("BRK-1025 line");
        assert!(
            warning.contains(
                "BRK-1025 : Management listener not started : the default address \
                 127.0.0.1:15672 is taken ("
            ) && warning.contains(
                ") : the broker goes on without it; set http.listen or --http-listen (or \"off\")"
            ),
            "{warning}"
        );
        if v6_free {
            assert!(
                broker
                    .find("BRK-1014 : Management listening on http://[::1]:15672")
                    .is_some(),
                "{:#?}",
                broker.all()
            );
            assert_eq!(
                http_status("[::1]:15672", "/api/overview"),
                "HTTP/1.1 200 OK"
            );
        }
        let mut c = RawConn::connect(&format!("127.0.0.1:{}", broker.amqp_port()));
        c.handshake();
        c.channel_open(1);
    }
    // Both held.
    let _v6 = TcpListener::bind("[::1]:15672");
    let broker = Running::start(&dir.path().join("b"), &["--listen", "127.0.0.1:0"]);
    let warnings: Vec<String> = broker
        .all()
        .into_iter()
        .filter(|l| l.contains("BRK-1025"))
        .collect();
    assert!(
        warnings
            .iter()
            .any(|l| l.contains("127.0.0.1:15672 is taken")),
        "{warnings:#?}"
    );
    if v6_free {
        assert!(
            warnings.iter().any(|l| l.contains("[::1]:15672 is taken")),
            "{warnings:#?}"
        );
    }
    assert!(broker.find("BRK-1014").is_none(), "{:#?}", broker.all());
    let mut c = RawConn::connect(&format!("127.0.0.1:{}", broker.amqp_port()));
    c.handshake();
    drop(v4);
}

#[test]
fn a_chosen_management_address_taken_stops_the_start_and_leaves_nothing() {
    let holder = TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken = holder.local_addr().expect("addr");
    let dir = TestDir::new("sluice-first-start");
    let data = dir.path().join("data");
    let mut cmd = sluice(&data);
    cmd.arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--http-listen")
        .arg(taken.to_string());
    let (status, text) = run_to_exit(cmd);
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("sluice: cannot listen for HTTP on {taken}: ")),
        "{text}"
    );
    assert!(!text.contains("BRK-1002"), "{text}");
    assert!(
        !data.exists(),
        "the failed start created {}",
        data.display()
    );
}

#[test]
fn a_taken_amqp_address_stops_the_start_and_leaves_nothing() {
    let holder = TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken = holder.local_addr().expect("addr");
    let dir = TestDir::new("sluice-first-start");
    let data = dir.path().join("data");
    let mut cmd = sluice(&data);
    cmd.arg("--listen")
        .arg(taken.to_string())
        .arg("--http-listen")
        .arg("off");
    let (status, text) = run_to_exit(cmd);
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(text.contains("cannot listen"), "{text}");
    assert!(text.contains(&taken.to_string()), "{text}");
    assert!(
        !data.exists(),
        "the failed start created {}",
        data.display()
    );
}

/// `[::]` (the default address's form) listens dual-stack: an IPv4 client (`localhost`
/// as 127.0.0.1) and an IPv6 one (`::1`) both log in, and the IPv4 one is seen, logged
/// and admitted as the IPv4 loopback address it is (guest may log in from loopback
/// only).
#[test]
fn a_wildcard_ipv6_listener_takes_ipv4_clients_too() {
    let broker = common::Broker::start_prepared(1, None, |cmd| {
        cmd.arg("--listen").arg("[::]:0");
    });
    let line = broker
        .wait_for_log(
            "BRK-1002 : Starting : Listening on TCP [::]:",
            Duration::from_secs(5),
        )
        .expect("the [::] listener");
    let port: u16 = line
        .rsplit(':')
        .next()
        .and_then(|p| p.trim().parse().ok())
        .expect("port");
    for addr in [format!("127.0.0.1:{port}"), format!("[::1]:{port}")] {
        let mut c = RawConn::connect(&addr);
        c.handshake();
        c.channel_open(1);
    }
    assert!(
        broker
            .wait_for_log(
                "CON-1001 : Open : Client: 127.0.0.1:",
                Duration::from_secs(5)
            )
            .is_some(),
        "{:#?}",
        broker.logs()
    );
    assert!(
        broker
            .wait_for_log("CON-1001 : Open : Client: [::1]:", Duration::from_secs(5))
            .is_some(),
        "{:#?}",
        broker.logs()
    );
    assert!(!broker.logs().iter().any(|l| l.contains("::ffff:")));
}

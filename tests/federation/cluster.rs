//! The multi-broker harness of the federation suite.
//!
//! Owns: [`Node`], one `sluice --shards 2` process with its own fixed AMQP port (so that
//! its downstreams' upstream URIs survive its restart), its own data directory (kept
//! across [`Node::restart`]), its own `node_name` and config file, optionally inside a
//! network namespace; the TOML of `[[federation.upstream]]` / `[[federation.exchange]]`
//! entries, keyed exactly as issue 20's example; waits for `FED-1002` lines; the
//! upstream's bindings and queues read from its management API; numbered publishes and
//! subscribers that check count and order per publisher.
//!
//! Does not: sleep to synchronise (every wait polls against a deadline), or know how the
//! link is built: it sees only what a user sees (log lines, the management API, AMQP).

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use amqprs::channel::{
    BasicPublishArguments, BasicQosArguments, ConfirmSelectArguments, ConsumerMessage,
    ExchangeDeclareArguments, QueueBindArguments, QueueDeclareArguments, QueueUnbindArguments,
};
use amqprs::{BasicProperties, FieldTable, FieldValue};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::common::{http, Broker, Chan, Conn, Delivery, TestDir};

/// Shards of every node, as the issue asks.
pub const SHARDS: usize = 2;
/// How long a link may take to print FED-1002 after its node (or its upstream) is ready.
pub const LINK_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a binding may take to show at the upstream.
pub const BINDING_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a subscriber may wait for the messages it expects.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long "nothing more arrives" is watched for.
pub const QUIET: Duration = Duration::from_millis(700);

/// Says on the test's real stderr (not captured by the test harness, so that it shows in
/// CI's log) that a test skipped, and why.
pub fn skip(test: &str, why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIP {test}: {why}");
}

/// A free TCP port on 127.0.0.1 that a node keeps across restarts, taken from below the
/// kernel's ephemeral range (`ip_local_port_range`): a port-0 bind (every other test
/// broker's listeners) or an outgoing connection never gets such a port, so a node
/// killed with -9 finds its port free again when it restarts. Checked free by binding it.
pub fn free_port() -> u16 {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| {
            r.split_whitespace()
                .next()
                .and_then(|p| p.parse::<u16>().ok())
        })
        .unwrap_or(32768);
    let (first, span) = (10_000u16, low.saturating_sub(10_000).max(1));
    // Each call of this process differs (the counter in `unique`), each process too.
    let mut seed = crate::common::unique("port")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
    seed ^= std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    for _ in 0..1000 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let port = first + ((seed >> 33) % u64::from(span)) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// One broker of a federation topology.
pub struct Node {
    pub name: String,
    /// The fixed AMQP port (on 127.0.0.1, or on every address of its namespace).
    pub port: u16,
    dir: TestDir,
    toml: String,
    listen: Vec<String>,
    netns: Option<PathBuf>,
    broker: Option<Broker>,
}

impl Node {
    /// Starts node `name` on loopback with `body` (TOML sections) after its `[broker]`
    /// `node_name` line, on a fresh port.
    pub fn start(name: &str, body: &str) -> Node {
        Self::start_on(name, free_port(), body)
    }

    /// As [`Node::start`], on `port`.
    pub fn start_on(name: &str, port: u16, body: &str) -> Node {
        Self::launch(name, port, body, vec![format!("127.0.0.1:{port}")], None)
    }

    /// Starts node `name` inside the network namespace at `netns` (a file under
    /// /var/run/netns), listening on `0.0.0.0:port` there besides the harness's own
    /// loopback listener.
    pub fn start_in_netns(name: &str, port: u16, body: &str, netns: PathBuf) -> Node {
        Self::launch(
            name,
            port,
            body,
            vec![format!("0.0.0.0:{port}")],
            Some(netns),
        )
    }

    fn launch(
        name: &str,
        port: u16,
        body: &str,
        listen: Vec<String>,
        netns: Option<PathBuf>,
    ) -> Node {
        let toml = format!("[broker]\nnode_name = \"{name}\"\n\n{body}");
        let mut node = Node {
            name: name.to_owned(),
            port,
            dir: TestDir::new(&format!("sluice-fed-{name}")),
            toml,
            listen,
            netns,
            broker: None,
        };
        node.boot();
        node
    }

    fn boot(&mut self) {
        let listen = self.listen.clone();
        let netns = self.netns.as_ref().map(|path| {
            std::fs::File::open(path)
                .map(OwnedFd::from)
                .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
        });
        let broker = Broker::start_in_prepared(
            &self.dir.path().join("data"),
            SHARDS,
            Some(&self.toml),
            move |cmd: &mut Command| {
                for addr in &listen {
                    cmd.arg("--listen").arg(addr);
                }
                if let Some(fd) = netns {
                    let raw = fd.as_raw_fd();
                    // The fd must stay open until the child has called setns.
                    std::mem::forget(fd);
                    // SAFETY: setns(2) only, in the forked child before exec.
                    unsafe {
                        cmd.pre_exec(move || {
                            if libc::setns(raw, libc::CLONE_NEWNET) != 0 {
                                return Err(std::io::Error::last_os_error());
                            }
                            Ok(())
                        });
                    }
                }
            },
        );
        self.broker = Some(broker);
    }

    pub fn broker(&self) -> &Broker {
        self.broker.as_ref().expect("the node is running")
    }

    /// `amqp://guest:guest@127.0.0.1:PORT/%2f`.
    pub fn uri(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    pub fn http_port(&self) -> u16 {
        self.broker().http_port()
    }

    pub fn pid(&self) -> u32 {
        self.broker().pid()
    }

    /// `kill -9`; the data directory stays.
    pub fn kill9(&mut self) {
        let mut broker = self.broker.take().expect("the node is running");
        broker.kill9();
    }

    /// Starts the node again on its port, data directory and config. A node killed with
    /// -9 may hold its listening socket for some milliseconds after it was reaped (the
    /// kernel releases a pending io_uring accept's file in deferred work; longer on a
    /// loaded machine), so a loopback node first waits, bounded, for its port to be free.
    pub fn restart(&mut self) {
        assert!(self.broker.is_none(), "restart: the node is still running");
        if self.netns.is_none() {
            let port = self.port;
            assert!(
                crate::common::wait_until(Duration::from_secs(10), || {
                    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
                }),
                "port {port} still taken 10 s after the node stopped"
            );
        }
        self.boot();
    }

    /// A connection to the node (from this process's network namespace).
    pub async fn connect(&self) -> Conn {
        self.broker().connect().await
    }

    /// How many `FED-1002` lines name `upstream` and `exchange` so far.
    pub fn links_running(&self, upstream: &str, exchange: &str) -> usize {
        link_lines(self.broker(), "FED-1002", upstream, exchange)
    }

    /// Waits until the node has printed its `nth` FED-1002 line for (`upstream`,
    /// `exchange`), and returns how long that took; panics with the log past `timeout`.
    pub fn wait_link_running(
        &self,
        upstream: &str,
        exchange: &str,
        nth: usize,
        timeout: Duration,
    ) -> Duration {
        let start = Instant::now();
        let held =
            crate::common::wait_until(timeout, || self.links_running(upstream, exchange) >= nth);
        assert!(
            held,
            "{}: no FED-1002 #{nth} for upstream {upstream} exchange {exchange} within \
             {timeout:?}; FED lines:\n{}",
            self.name,
            fed_lines(self.broker()).join("\n")
        );
        start.elapsed()
    }

    /// Fails the test if the node printed a panic or exited.
    pub fn assert_healthy(&mut self) {
        if let Some(b) = self.broker.as_mut() {
            b.assert_healthy();
        }
    }
}

/// The log lines of `broker` with `code` naming `upstream` and `exchange`.
fn link_lines(broker: &Broker, code: &str, upstream: &str, exchange: &str) -> usize {
    broker
        .logs()
        .iter()
        .filter(|l| l.contains(code) && l.contains(upstream) && l.contains(exchange))
        .count()
}

/// Every FED- line of `broker`, for failure messages.
pub fn fed_lines(broker: &Broker) -> Vec<String> {
    broker
        .logs()
        .into_iter()
        .filter(|l| l.contains("FED-"))
        .collect()
}

// ---------------------------------------------------------------------------------------
// Configuration: the keys of issue 20's example
// ---------------------------------------------------------------------------------------

/// One `[[federation.upstream]]` entry; `extra` holds further `key = value` lines.
pub fn upstream_toml(name: &str, uri: &str, extra: &str) -> String {
    format!("[[federation.upstream]]\nname = \"{name}\"\nuri = \"{uri}\"\n{extra}\n")
}

/// One `[[federation.exchange]]` entry on vhost "/".
pub fn exchange_toml(exchange: &str, upstreams: &[&str]) -> String {
    let list: Vec<String> = upstreams.iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        "[[federation.exchange]]\nvhost = \"/\"\nexchange = \"{exchange}\"\nupstreams = [{}]\n",
        list.join(", ")
    )
}

/// The upstream queue's name for exchange `x` federated to `node` (same vhost, same
/// exchange name), as RabbitMQ names it.
pub fn upstream_queue(x: &str, node: &str) -> String {
    format!("federation: {x} -> {node}")
}

// ---------------------------------------------------------------------------------------
// The upstream, seen through its management API
// ---------------------------------------------------------------------------------------

/// Every binding on `http_port`'s broker as (source, destination, routing key).
pub fn bindings(http_port: u16) -> Vec<(String, String, String)> {
    let reply = http::get(http_port, "/api/bindings");
    assert_eq!(reply.status, 200, "GET /api/bindings: {}", reply.body);
    let json = reply.json();
    let list = json.as_array().expect("an array of bindings");
    list.iter()
        .map(|b| {
            let field = |k: &str| b[k].as_str().unwrap_or_default().to_owned();
            (field("source"), field("destination"), field("routing_key"))
        })
        .collect()
}

/// The routing keys bound from exchange `x` on the upstream for `downstream`'s link
/// (destinations named `federation: X -> DOWNSTREAM…`).
pub fn propagated_keys(http_port: u16, x: &str, downstream: &str) -> BTreeSet<String> {
    let prefix = format!("federation: {x} -> {downstream}");
    bindings(http_port)
        .into_iter()
        .filter(|(source, destination, _)| source == x && destination.starts_with(&prefix))
        .map(|(_, _, key)| key)
        .collect()
}

/// Polls until `pred` holds over the propagated keys for `downstream`'s link; returns
/// the time it took. Panics with the keys seen after `timeout`.
pub fn wait_keys(
    http_port: u16,
    x: &str,
    downstream: &str,
    timeout: Duration,
    what: &str,
    mut pred: impl FnMut(&BTreeSet<String>) -> bool,
) -> Duration {
    let start = Instant::now();
    let deadline = start + timeout;
    loop {
        let keys = propagated_keys(http_port, x, downstream);
        if pred(&keys) {
            return start.elapsed();
        }
        if Instant::now() >= deadline {
            let shown: Vec<&String> = keys.iter().take(20).collect();
            panic!(
                "upstream bindings for {downstream} on {x}: not {what} within {timeout:?}; \
                 {} keys, first: {shown:?}",
                keys.len()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `GET /api/queues/%2F/{name}` as JSON, or `None` for 404.
pub fn queue_json(http_port: u16, name: &str) -> Option<serde_json::Value> {
    let path = format!("/api/queues/%2F/{}", percent(name));
    let reply = http::get(http_port, &path);
    match reply.status {
        200 => Some(reply.json()),
        404 => None,
        other => panic!("GET {path}: {other} {}", reply.body),
    }
}

/// Percent-encodes everything but unreserved characters.
pub fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// VmRSS of `pid` in bytes, from /proc/PID/status.
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS line");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS value");
    kb * 1024
}

// ---------------------------------------------------------------------------------------
// AMQP: numbered publishes and checking subscribers
// ---------------------------------------------------------------------------------------

/// The body of publisher `publisher`'s message `seq`.
pub fn body(publisher: &str, seq: u32) -> Vec<u8> {
    format!("{publisher}:{seq:07}").into_bytes()
}

/// (publisher, seq) of a body made by [`body`].
pub fn parse_body(body: &[u8]) -> (String, u32) {
    let text = String::from_utf8_lossy(body);
    let (publisher, seq) = text
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("not a numbered body: {text:?}"));
    let seq = seq
        .get(..7)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a numbered body: {text:?}"));
    (publisher.to_owned(), seq)
}

/// Publishes `count` numbered messages `publisher:0000000…` to `exchange` with `key`.
pub async fn publish_numbered(ch: &Chan, exchange: &str, key: &str, publisher: &str, count: u32) {
    for seq in 0..count {
        ch.publish(exchange, key, &body(publisher, seq)).await;
    }
}

/// Declares a topic exchange `name` (durable).
pub async fn declare_topic(ch: &Chan, name: &str) {
    ch.exchange_declare(
        ExchangeDeclareArguments::new(name, "topic")
            .durable(true)
            .finish(),
    )
    .await
    .expect("exchange.declare");
}

/// A subscriber: an exclusive server-named queue bound to `exchange` with each key,
/// consumed with auto-ack.
pub struct Subscriber {
    pub label: String,
    pub conn: Conn,
    pub ch: Chan,
    pub queue: String,
    pub rx: UnboundedReceiver<ConsumerMessage>,
    pub got: Vec<Delivery>,
}

impl Subscriber {
    pub async fn new(node: &Node, label: &str, exchange: &str, keys: &[&str]) -> Subscriber {
        Self::on(node.connect().await, label, exchange, keys).await
    }

    /// As [`Subscriber::new`], on a connection to any broker.
    pub async fn on(conn: Conn, label: &str, exchange: &str, keys: &[&str]) -> Subscriber {
        let ch = conn.channel().await;
        let queue = ch.declare_server_named().await;
        for key in keys {
            bind(&ch, &queue, exchange, key).await;
        }
        let (_, rx) = ch.consume_auto(&queue).await;
        Subscriber {
            label: label.to_owned(),
            conn,
            ch,
            queue,
            rx,
            got: Vec::new(),
        }
    }

    pub async fn close(self) {
        self.conn.close().await
    }

    /// Receives until it holds `n` deliveries; panics with what it has after `timeout`.
    pub async fn collect(&mut self, n: usize, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.got.len() < n {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(m)) => self.got.push(Delivery::from(m)),
                Ok(None) => panic!(
                    "{}: consumer stream ended at {}",
                    self.label,
                    self.got.len()
                ),
                Err(_) => panic!(
                    "{}: {} of {n} messages within {timeout:?}",
                    self.label,
                    self.got.len()
                ),
            }
        }
    }

    /// Receives for [`QUIET`] and fails on anything that arrives beyond what it holds.
    pub async fn assert_quiet(&mut self) {
        if let Ok(Some(m)) = tokio::time::timeout(QUIET, self.rx.recv()).await {
            let d = Delivery::from(m);
            panic!(
                "{}: unexpected message after {}: {:?} (x-received-from entries {})",
                self.label,
                self.got.len(),
                String::from_utf8_lossy(&d.body),
                received_from(&d).len()
            );
        }
    }

    /// Every publisher's sequence numbers, in arrival order.
    pub fn sequences(&self) -> BTreeMap<String, Vec<u32>> {
        let mut by_publisher: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for d in &self.got {
            let (publisher, seq) = parse_body(&d.body);
            by_publisher.entry(publisher).or_default().push(seq);
        }
        by_publisher
    }

    /// Asserts that it got exactly `0..count` from each of `publishers`, in order, and
    /// nothing else.
    pub fn assert_exactly(&self, publishers: &[&str], count: u32) {
        let seqs = self.sequences();
        let names: Vec<&str> = seqs.keys().map(String::as_str).collect();
        let mut expected: Vec<&str> = publishers.to_vec();
        expected.sort_unstable();
        assert_eq!(names, expected, "{}: publishers seen", self.label);
        let want: Vec<u32> = (0..count).collect();
        for (publisher, got) in &seqs {
            if *got != want {
                let first_bad = got
                    .iter()
                    .zip(&want)
                    .position(|(g, w)| g != w)
                    .unwrap_or(got.len().min(want.len()));
                panic!(
                    "{}: from {publisher}: {} messages (want {count} in order); first \
                     difference at index {first_bad}: {:?}",
                    self.label,
                    got.len(),
                    &got[first_bad..got.len().min(first_bad + 5)]
                );
            }
        }
    }
}

/// queue.bind `queue` to `exchange` with `key`.
pub async fn bind(ch: &Chan, queue: &str, exchange: &str, key: &str) {
    ch.queue_bind(QueueBindArguments::new(queue, exchange, key))
        .await
        .expect("queue.bind");
}

/// queue.unbind `queue` from `exchange` with `key`.
pub async fn unbind(ch: &Chan, queue: &str, exchange: &str, key: &str) {
    ch.queue_unbind(QueueUnbindArguments::new(queue, exchange, key))
        .await
        .expect("queue.unbind");
}

/// Declares a durable queue `name` and binds it to `exchange` with `key`.
pub async fn declare_durable_bound(ch: &Chan, name: &str, exchange: &str, key: &str) {
    ch.queue_declare(QueueDeclareArguments::durable_client_named(name))
        .await
        .expect("queue.declare")
        .expect("declare-ok");
    bind(ch, name, exchange, key).await;
}

/// basic.qos prefetch `n` on `ch`.
pub async fn qos(ch: &Chan, n: u16) {
    ch.basic_qos(BasicQosArguments::new(0, n, false))
        .await
        .expect("basic.qos");
}

/// confirm.select on `ch`.
pub async fn confirm_select(ch: &Chan) {
    ch.confirm_select(ConfirmSelectArguments::default())
        .await
        .expect("confirm.select");
}

/// Publishes one persistent message.
pub async fn publish_persistent(
    ch: &Chan,
    exchange: &str,
    key: &str,
    body: Vec<u8>,
) -> Result<(), amqprs::error::Error> {
    let props = BasicProperties::default().with_persistence(true).finish();
    ch.basic_publish(props, body, BasicPublishArguments::new(exchange, key))
        .await
}

/// The `x-received-from` entries of a delivery, as (cluster-name, exchange) pairs.
pub fn received_from(d: &Delivery) -> Vec<(String, String)> {
    let Some(headers) = d.props.headers() else {
        return Vec::new();
    };
    let Some(value) = headers.get(&"x-received-from".try_into().expect("key")) else {
        return Vec::new();
    };
    let FieldValue::A(array) = value else {
        panic!("x-received-from is not an array: {value:?}");
    };
    let text = |t: &FieldTable, k: &str| match t.get(&k.try_into().expect("key")) {
        Some(FieldValue::S(s)) => AsRef::<String>::as_ref(s).clone(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    };
    Vec::<FieldValue>::from(array.clone())
        .iter()
        .map(|entry| match entry {
            FieldValue::F(table) => (text(table, "cluster-name"), text(table, "exchange")),
            other => panic!("x-received-from entry is not a table: {other:?}"),
        })
        .collect()
}

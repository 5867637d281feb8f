//! Shared harness for the black-box suites in `tests/`.
//!
//! Owns: starting a real `sluice` process on `127.0.0.1:0` (one per test), collecting its
//! log lines, a hand-written AMQP 0-9-1 wire codec over a blocking socket (`RawConn`), and
//! thin helpers around the amqprs client (event sinks for server-initiated methods,
//! bystander connections).
//!
//! Does not: sleep to synchronise. Every wait polls a condition against a deadline, and
//! every test body runs under [`bounded`].
#![allow(dead_code)]

pub mod http;
pub mod raw;
pub mod wire;

use std::future::Future;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use amqprs::callbacks::{ChannelCallback, ConnectionCallback};
use amqprs::channel::{
    BasicConsumeArguments, BasicGetArguments, BasicPublishArguments, Channel, ConsumerMessage,
    QueueDeclareArguments,
};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::{Ack, BasicProperties, Cancel, Close, CloseChannel, Nack, Return};
use tokio::sync::mpsc;

pub use raw::RawConn;

/// Upper bound for one test body.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a single expected event may take to arrive.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the broker may take to print `BRK-1004 : Ready`.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// Generates `mod $name { shards_1, shards_2 }` wrappers around `async fn $name(shards)`,
/// each one bounded by [`TEST_TIMEOUT`].
#[macro_export]
macro_rules! shard_tests {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn shards_1() {
                    $crate::common::bounded(super::$name(1)).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn shards_2() {
                    $crate::common::bounded(super::$name(2)).await
                }
            }
        )*
    };
}

/// `n` with a comma every three digits, as the log lines print numbers.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Runs `fut` and fails the test if it takes longer than [`TEST_TIMEOUT`].
pub async fn bounded<F: Future<Output = ()>>(fut: F) {
    bounded_for(TEST_TIMEOUT, fut).await
}

/// Runs `fut` and fails the test if it takes longer than `limit`.
pub async fn bounded_for<F: Future<Output = ()>>(limit: Duration, fut: F) {
    if tokio::time::timeout(limit, fut).await.is_err() {
        panic!("test exceeded its time bound of {limit:?}");
    }
}

/// Polls `cond` every 10 ms until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Async version of [`wait_until`]: polls an async condition every 20 ms.
pub async fn eventually<F, Fut>(timeout: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if cond().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A name unique across this test process and across concurrently running test binaries.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

// ---------------------------------------------------------------------------------------
// Broker process
// ---------------------------------------------------------------------------------------

/// One running `sluice` process, owned by one test.
pub struct Broker {
    child: Option<Child>,
    port: u16,
    pid: u32,
    shards: usize,
    data_dir: PathBuf,
    /// Set by [`Broker::start_in`]: the directory belongs to the test, and outlives this
    /// process so that the next one can start on it.
    keep_dir: bool,
    /// The `--config` file, if one was passed.
    config: Option<PathBuf>,
    logs: Arc<Mutex<Vec<String>>>,
}

impl Broker {
    /// Starts `sluice --listen 127.0.0.1:0 --shards N` with a fresh data directory and waits
    /// until it has printed `BRK-1004 : Ready`.
    pub fn start(shards: usize) -> Broker {
        Self::spawn(shards, None)
    }

    /// As [`Broker::start`], with `toml` written to a config file passed as `--config`.
    pub fn start_with_config(shards: usize, toml: &str) -> Broker {
        Self::spawn(shards, Some(toml))
    }

    /// As [`Broker::start`] (with `toml` as the config file, if any), with `prepare`
    /// applied to the command before it is spawned: extra flags, or a `pre_exec` hook.
    pub fn start_prepared(
        shards: usize,
        toml: Option<&str>,
        prepare: impl FnOnce(&mut Command),
    ) -> Broker {
        let (base, data_dir, config) = Self::fresh_dir(toml);
        Self::launch_prepared(shards, &data_dir, config.as_deref(), base, false, prepare)
    }

    /// Starts `sluice --shards N --data-dir DIR` on a data directory the caller owns and
    /// keeps across restarts (created if missing; never removed by the `Broker`), with
    /// `toml`, if any, written next to it as `DIR.toml` (outside DIR, so it is not part of
    /// what the broker stores there) and passed as `--config`. Waits for
    /// `BRK-1004 : Ready` as [`Broker::start`] does.
    pub fn start_in(dir: &Path, shards: usize, toml: Option<&str>) -> Broker {
        std::fs::create_dir_all(dir).expect("create data dir");
        let config = toml.map(|toml| {
            let mut path = dir.as_os_str().to_owned();
            path.push(".toml");
            let path = PathBuf::from(path);
            std::fs::write(&path, toml).expect("write config");
            path
        });
        Self::launch(shards, dir, config.as_deref(), dir.to_path_buf(), true)
    }

    fn spawn(shards: usize, config: Option<&str>) -> Broker {
        let (base, data_dir, config) = Self::fresh_dir(config);
        Self::launch(shards, &data_dir, config.as_deref(), base, false)
    }

    /// A fresh base directory with `data/` and, given `toml`, `sluice.toml` in it.
    fn fresh_dir(toml: Option<&str>) -> (PathBuf, PathBuf, Option<PathBuf>) {
        let base = std::env::temp_dir().join(unique("sluice-itest"));
        let data_dir = base.join("data");
        std::fs::create_dir_all(&data_dir).expect("create data dir");
        let config = toml.map(|toml| {
            let path = base.join("sluice.toml");
            std::fs::write(&path, toml).expect("write config");
            path
        });
        (base, data_dir, config)
    }

    fn launch(
        shards: usize,
        data_dir: &Path,
        config: Option<&Path>,
        base: PathBuf,
        keep_dir: bool,
    ) -> Broker {
        Self::launch_prepared(shards, data_dir, config, base, keep_dir, |_| {})
    }

    fn launch_prepared(
        shards: usize,
        data_dir: &Path,
        config: Option<&Path>,
        base: PathBuf,
        keep_dir: bool,
        prepare: impl FnOnce(&mut Command),
    ) -> Broker {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--shards")
            .arg(shards.to_string())
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--log-level")
            .arg("info")
            .arg("--http-listen")
            .arg("127.0.0.1:0");
        if let Some(path) = config {
            cmd.arg("--config").arg(path);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        prepare(&mut cmd);
        let mut child = cmd.spawn().expect("spawn sluice");
        let logs = Arc::new(Mutex::new(Vec::new()));
        spawn_log_reader(child.stdout.take().expect("stdout"), logs.clone(), "");
        spawn_log_reader(
            child.stderr.take().expect("stderr"),
            logs.clone(),
            "[stderr] ",
        );
        let pid = child.id();
        let mut broker = Broker {
            child: Some(child),
            port: 0,
            pid,
            shards,
            data_dir: base,
            keep_dir,
            config: config.map(Path::to_path_buf),
            logs,
        };
        broker.port = broker.await_ready();
        broker
    }

    /// Waits for the listening and ready lines; panics with the log if the process dies
    /// first or the deadline passes.
    fn await_ready(&mut self) -> u16 {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let port = self
                .find_log("BRK-1002 : Starting : Listening on TCP 127.0.0.1:")
                .and_then(|line| parse_port(&line));
            if let (Some(port), Some(_)) = (port, self.find_log("BRK-1004 : Ready")) {
                return port;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                // Let the reader threads drain what the process printed.
                std::thread::sleep(Duration::from_millis(50));
                panic!(
                    "sluice exited with {status} before it was ready; log:\n{}",
                    self.logs().join("\n")
                );
            }
            if Instant::now() >= deadline {
                panic!(
                    "sluice was not ready within {START_TIMEOUT:?}; log:\n{}",
                    self.logs().join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The management listener's port (the harness starts it on `127.0.0.1:0`), from
    /// its BRK-1014 line.
    pub fn http_port(&self) -> u16 {
        let marker = "Management listening on http://127.0.0.1:";
        let line = self
            .find_log(marker)
            .expect("BRK-1014 line (the management listener)");
        let rest = &line[line.find(marker).expect("marker") + marker.len()..];
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        digits.parse().expect("HTTP port")
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn shards(&self) -> usize {
        self.shards
    }

    /// A snapshot of every line the broker printed so far.
    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    fn find_log(&self, needle: &str) -> Option<String> {
        self.logs
            .lock()
            .unwrap()
            .iter()
            .find(|l| l.contains(needle))
            .cloned()
    }

    /// The first log line containing `needle`, polling until `timeout`.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> Option<String> {
        let mut found = None;
        wait_until(timeout, || {
            found = self.find_log(needle);
            found.is_some()
        });
        found
    }

    /// Fails the test if the broker printed a panic or is no longer running.
    pub fn assert_healthy(&mut self) {
        let panics: Vec<String> = self
            .logs()
            .into_iter()
            .filter(|l| l.contains("panicked"))
            .collect();
        assert!(
            panics.is_empty(),
            "the broker panicked:\n{}",
            panics.join("\n")
        );
        if let Some(child) = self.child.as_mut() {
            if let Some(status) = child.try_wait().expect("try_wait") {
                panic!(
                    "the broker exited with {status}; log:\n{}",
                    self.logs().join("\n")
                );
            }
        }
    }

    /// Sends SIGTERM.
    pub fn sigterm(&self) {
        self.signal(libc::SIGTERM);
    }

    /// Sends `signal` (while the child runs).
    pub fn signal(&self, signal: libc::c_int) {
        if self.child.is_some() {
            // SAFETY: plain kill(2) on the pid of a child we own and have not reaped.
            let rc = unsafe { libc::kill(self.pid as libc::pid_t, signal) };
            assert_eq!(rc, 0, "kill({signal}) failed");
        }
    }

    /// The `--config` file the broker was started with, if any.
    pub fn config_path(&self) -> Option<&Path> {
        self.config.as_deref()
    }

    /// Whether the process has not exited.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Polls for the process to exit, up to `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let mut status = None;
        wait_until(timeout, || {
            status = child.try_wait().expect("try_wait");
            status.is_some()
        });
        if status.is_some() {
            self.child = None;
        }
        status
    }

    /// SIGTERM, then waits up to 10 s for a clean exit; panics if the broker hangs.
    pub fn stop(&mut self) -> ExitStatus {
        self.sigterm();
        match self.wait_exit(Duration::from_secs(10)) {
            Some(status) => status,
            None => panic!("sluice did not exit within 10 s of SIGTERM"),
        }
    }

    /// SIGKILL (`kill -9`): the process gets no chance to flush or close anything. Waits
    /// for it to be reaped and returns its status (killed by signal 9).
    pub fn kill9(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("kill9: the broker is not running");
        // SAFETY: plain kill(2) on the pid of a child we own and have not reaped.
        let rc = unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGKILL) };
        assert_eq!(rc, 0, "kill(SIGKILL) failed");
        let status = child.wait().expect("wait for the killed broker");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(libc::SIGKILL),
            "the broker exited with {status} before SIGKILL reached it; log:\n{}",
            self.logs().join("\n")
        );
        status
    }

    /// amqprs arguments for guest/guest on "/".
    pub fn amqprs_args(&self) -> OpenConnectionArguments {
        OpenConnectionArguments::new("127.0.0.1", self.port, "guest", "guest")
    }

    /// Opens an amqprs connection with an event-forwarding connection callback.
    pub async fn connect(&self) -> Conn {
        let conn = Connection::open(&self.amqprs_args())
            .await
            .expect("amqprs connection open");
        let (tx, rx) = mpsc::unbounded_channel();
        conn.register_callback(ConnEvents { tx })
            .await
            .expect("register connection callback");
        Conn { conn, events: rx }
    }

    /// Opens a raw, fully handshaken connection.
    pub fn raw(&self) -> RawConn {
        let mut c = RawConn::connect(&self.addr());
        c.handshake();
        c
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.data_dir);
        }
    }
}

/// A temporary directory owned by one test (for data directories kept across broker
/// restarts, see [`Broker::start_in`]); removed with everything in it when dropped,
/// including when the test fails.
pub struct TestDir {
    path: PathBuf,
}

impl TestDir {
    /// Creates `<tmp>/<prefix>-<pid>-<n>`.
    pub fn new(prefix: &str) -> TestDir {
        let path = std::env::temp_dir().join(unique(prefix));
        std::fs::create_dir_all(&path).expect("create test dir");
        TestDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn spawn_log_reader(
    pipe: impl Read + Send + 'static,
    logs: Arc<Mutex<Vec<String>>>,
    prefix: &'static str,
) {
    std::thread::spawn(move || {
        let reader = BufReader::new(pipe);
        for line in reader.split(b'\n') {
            let Ok(line) = line else { break };
            let line = String::from_utf8_lossy(&line).into_owned();
            if std::env::var_os("SLUICE_TEST_ECHO").is_some() {
                eprintln!("{prefix}{line}");
            }
            logs.lock().unwrap().push(format!("{prefix}{line}"));
        }
    });
}

fn parse_port(line: &str) -> Option<u16> {
    let marker = "Listening on TCP 127.0.0.1:";
    let rest = &line[line.find(marker)? + marker.len()..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

// ---------------------------------------------------------------------------------------
// amqprs helpers
// ---------------------------------------------------------------------------------------

type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
type CbResult = Result<(), amqprs::error::Error>;

/// Something the server sent on its own initiative.
#[derive(Debug)]
pub enum Event {
    ChannelClose {
        code: u16,
        text: String,
        class_id: u16,
        method_id: u16,
    },
    ConnectionClose {
        code: u16,
        text: String,
    },
    Cancel {
        consumer_tag: String,
    },
    Ack {
        tag: u64,
        multiple: bool,
    },
    Nack {
        tag: u64,
        multiple: bool,
    },
    Return {
        code: u16,
        text: String,
        exchange: String,
        routing_key: String,
        props: Box<BasicProperties>,
        body: Vec<u8>,
    },
    Flow {
        active: bool,
    },
    Blocked {
        reason: String,
    },
    Unblocked,
}

/// An amqprs connection plus the server-initiated connection events.
pub struct Conn {
    pub conn: Connection,
    pub events: mpsc::UnboundedReceiver<Event>,
}

impl Conn {
    /// Opens a channel whose server-initiated methods arrive on the returned receiver.
    pub async fn channel(&self) -> Chan {
        let ch = self.conn.open_channel(None).await.expect("open channel");
        let (tx, rx) = mpsc::unbounded_channel();
        ch.register_callback(ChanEvents { tx })
            .await
            .expect("register channel callback");
        Chan { ch, events: rx }
    }

    pub async fn close(self) {
        close_amqprs(self.conn).await;
    }
}

/// connection.close through amqprs, tolerating one known client-side race: amqprs's
/// `Connection::close` marks the connection closed before it registers for close-ok, and if
/// its reader task is just finishing another frame it sees the flag, shuts the socket down
/// itself and the close then fails with "failed to register responder". The broker then
/// sees the socket close instead of connection.close; the raw-socket suites cover the
/// close handshake itself.
pub async fn close_amqprs(conn: Connection) {
    match conn.close().await {
        Ok(()) => {}
        Err(amqprs::error::Error::ConnectionCloseError(msg))
            if msg.starts_with("failed to register responder") => {}
        // The same race, lost one step later (after close was sent, before close-ok).
        Err(amqprs::error::Error::InternalChannelError(_)) => {}
        Err(e) => panic!("connection.close failed: {e}"),
    }
}

/// An amqprs channel plus the server-initiated channel events.
pub struct Chan {
    pub ch: Channel,
    pub events: mpsc::UnboundedReceiver<Event>,
}

impl std::ops::Deref for Chan {
    type Target = Channel;
    fn deref(&self) -> &Channel {
        &self.ch
    }
}

impl Chan {
    /// Next event within [`EVENT_TIMEOUT`]; panics if none arrives.
    pub async fn next_event(&mut self) -> Event {
        next_event(&mut self.events).await
    }

    /// Waits for the server's channel.close and returns (code, text).
    pub async fn expect_close(&mut self) -> (u16, String) {
        loop {
            match self.next_event().await {
                Event::ChannelClose { code, text, .. } => return (code, text),
                Event::Flow { .. } => continue,
                other => panic!("expected channel.close, got {other:?}"),
            }
        }
    }

    /// Declares a plain (non-durable, non-exclusive) queue named by the caller.
    pub async fn declare_queue(&self, name: &str) {
        self.ch
            .queue_declare(QueueDeclareArguments::new(name))
            .await
            .expect("queue.declare")
            .expect("declare-ok");
    }

    /// Declares a server-named exclusive queue and returns its name.
    pub async fn declare_server_named(&self) -> String {
        let (name, _, _) = self
            .ch
            .queue_declare(QueueDeclareArguments::exclusive_server_named())
            .await
            .expect("queue.declare")
            .expect("declare-ok");
        name
    }

    pub async fn publish(&self, exchange: &str, routing_key: &str, body: &[u8]) {
        self.publish_props(exchange, routing_key, BasicProperties::default(), body)
            .await
    }

    pub async fn publish_props(
        &self,
        exchange: &str,
        routing_key: &str,
        props: BasicProperties,
        body: &[u8],
    ) {
        self.ch
            .basic_publish(
                props,
                body.to_vec(),
                BasicPublishArguments::new(exchange, routing_key),
            )
            .await
            .expect("basic.publish");
    }

    /// Message count of `queue` from a passive declare.
    pub async fn message_count(&self, queue: &str) -> u32 {
        let (_, count, _) = self
            .ch
            .queue_declare(QueueDeclareArguments::new(queue).passive(true).finish())
            .await
            .expect("passive queue.declare")
            .expect("declare-ok");
        count
    }

    /// Polls the passive message count until it equals `n`; panics after 5 s.
    pub async fn wait_message_count(&self, queue: &str, n: u32) {
        let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
        loop {
            let got = self.message_count(queue).await;
            if got == n {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "queue {queue} has {got} messages, expected {n}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// basic.get (auto-ack as given).
    pub async fn get(&self, queue: &str, no_ack: bool) -> Option<amqprs::channel::GetMessage> {
        self.ch
            .basic_get(BasicGetArguments::new(queue).no_ack(no_ack).finish())
            .await
            .expect("basic.get")
    }

    /// Polls basic.get until a message arrives; panics after 5 s.
    pub async fn get_eventually(&self, queue: &str, no_ack: bool) -> amqprs::channel::GetMessage {
        let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
        loop {
            if let Some(m) = self.get(queue, no_ack).await {
                return m;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no message in {queue} within {EVENT_TIMEOUT:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// In confirm mode: waits until the broker has acked every tag up to `last`; panics on
    /// a nack or an unrelated event.
    pub async fn wait_acked(&mut self, last: u64) {
        let mut acked = std::collections::BTreeSet::new();
        let mut upto = 0u64;
        while !(upto >= last || (1..=last).all(|t| t <= upto || acked.contains(&t))) {
            match self.next_event().await {
                Event::Ack { tag, multiple } => {
                    assert!(
                        tag >= 1 && tag <= last,
                        "ack for tag {tag}, only 1..={last} published"
                    );
                    if multiple {
                        upto = upto.max(tag);
                    } else {
                        assert!(tag > upto && acked.insert(tag), "tag {tag} acked twice");
                    }
                }
                other => panic!("waiting for publisher acks up to {last}, got {other:?}"),
            }
        }
    }

    /// basic.consume with auto-ack; returns the consumer tag and the delivery stream.
    pub async fn consume_auto(
        &self,
        queue: &str,
    ) -> (String, mpsc::UnboundedReceiver<ConsumerMessage>) {
        let args = BasicConsumeArguments::new(queue, "")
            .auto_ack(true)
            .finish();
        self.ch.basic_consume_rx(args).await.expect("basic.consume")
    }

    /// basic.consume with manual ack.
    pub async fn consume_manual(
        &self,
        queue: &str,
    ) -> (String, mpsc::UnboundedReceiver<ConsumerMessage>) {
        let args = BasicConsumeArguments::new(queue, "")
            .manual_ack(true)
            .finish();
        self.ch.basic_consume_rx(args).await.expect("basic.consume")
    }
}

/// Next event within [`EVENT_TIMEOUT`]; panics if none arrives.
pub async fn next_event(rx: &mut mpsc::UnboundedReceiver<Event>) -> Event {
    match tokio::time::timeout(EVENT_TIMEOUT, rx.recv()).await {
        Ok(Some(ev)) => ev,
        Ok(None) => panic!("event stream ended"),
        Err(_) => panic!("no server event within {EVENT_TIMEOUT:?}"),
    }
}

/// Next delivery within [`EVENT_TIMEOUT`]; panics if none arrives.
pub async fn next_delivery(rx: &mut mpsc::UnboundedReceiver<ConsumerMessage>) -> Delivery {
    match tokio::time::timeout(EVENT_TIMEOUT, rx.recv()).await {
        Ok(Some(msg)) => Delivery::from(msg),
        Ok(None) => panic!("consumer stream ended"),
        Err(_) => panic!("no delivery within {EVENT_TIMEOUT:?}"),
    }
}

/// Asserts that no delivery arrives within `quiet`.
pub async fn assert_no_delivery(
    rx: &mut mpsc::UnboundedReceiver<ConsumerMessage>,
    quiet: Duration,
) {
    if let Ok(Some(msg)) = tokio::time::timeout(quiet, rx.recv()).await {
        let d = Delivery::from(msg);
        panic!(
            "unexpected delivery tag {} body {:?}",
            d.delivery_tag,
            String::from_utf8_lossy(&d.body)
        );
    }
}

/// A delivery with its pieces unwrapped.
#[derive(Debug)]
pub struct Delivery {
    pub consumer_tag: String,
    pub delivery_tag: u64,
    pub redelivered: bool,
    pub exchange: String,
    pub routing_key: String,
    pub props: BasicProperties,
    pub body: Vec<u8>,
}

impl From<ConsumerMessage> for Delivery {
    fn from(mut m: ConsumerMessage) -> Self {
        let d = m.deliver.take().expect("deliver");
        Delivery {
            consumer_tag: d.consumer_tag().clone(),
            delivery_tag: d.delivery_tag(),
            redelivered: d.redelivered(),
            exchange: d.exchange().clone(),
            routing_key: d.routing_key().clone(),
            props: m.basic_properties.take().expect("properties"),
            body: m.content.take().expect("content"),
        }
    }
}

struct ConnEvents {
    tx: mpsc::UnboundedSender<Event>,
}

impl ConnectionCallback for ConnEvents {
    fn close<'a, 'b, 'c>(&'a mut self, _c: &'b Connection, close: Close) -> BoxFut<'c, CbResult>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let _ = self.tx.send(Event::ConnectionClose {
            code: close.reply_code(),
            text: close.reply_text().clone(),
        });
        Box::pin(async { Ok(()) })
    }

    fn blocked<'a, 'b, 'c>(&'a mut self, _c: &'b Connection, reason: String) -> BoxFut<'c, ()>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let _ = self.tx.send(Event::Blocked { reason });
        Box::pin(async {})
    }

    fn unblocked<'a, 'b, 'c>(&'a mut self, _c: &'b Connection) -> BoxFut<'c, ()>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let _ = self.tx.send(Event::Unblocked);
        Box::pin(async {})
    }

    fn secret_updated<'a, 'b, 'c>(&'a mut self, _c: &'b Connection) -> BoxFut<'c, ()>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        Box::pin(async {})
    }
}

struct ChanEvents {
    tx: mpsc::UnboundedSender<Event>,
}

impl ChannelCallback for ChanEvents {
    fn close<'a, 'b, 'c>(&'a mut self, _c: &'b Channel, close: CloseChannel) -> BoxFut<'c, CbResult>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let _ = self.tx.send(Event::ChannelClose {
            code: close.reply_code(),
            text: close.reply_text().clone(),
            class_id: close.class_id(),
            method_id: close.method_id(),
        });
        Box::pin(async { Ok(()) })
    }

    fn cancel<'a, 'b, 'c>(&'a mut self, _c: &'b Channel, cancel: Cancel) -> BoxFut<'c, CbResult>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let _ = self.tx.send(Event::Cancel {
            consumer_tag: cancel.consumer_tag().clone(),
        });
        Box::pin(async { Ok(()) })
    }

    fn flow<'a, 'b, 'c>(
        &'a mut self,
        _c: &'b Channel,
        active: bool,
    ) -> BoxFut<'c, Result<bool, amqprs::error::Error>>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let _ = self.tx.send(Event::Flow { active });
        Box::pin(async move { Ok(active) })
    }

    fn publish_ack<'a, 'b, 'c>(&'a mut self, _c: &'b Channel, ack: Ack) -> BoxFut<'c, ()>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let _ = self.tx.send(Event::Ack {
            tag: ack.delivery_tag(),
            multiple: ack.mutiple(),
        });
        Box::pin(async {})
    }

    fn publish_nack<'a, 'b, 'c>(&'a mut self, _c: &'b Channel, nack: Nack) -> BoxFut<'c, ()>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let _ = self.tx.send(Event::Nack {
            tag: nack.delivery_tag(),
            multiple: nack.multiple(),
        });
        Box::pin(async {})
    }

    fn publish_return<'a, 'b, 'c>(
        &'a mut self,
        _c: &'b Channel,
        ret: Return,
        props: BasicProperties,
        body: Vec<u8>,
    ) -> BoxFut<'c, ()>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let _ = self.tx.send(Event::Return {
            code: ret.reply_code(),
            text: ret.reply_text().clone(),
            exchange: ret.exchange().clone(),
            routing_key: ret.routing_key().clone(),
            props: Box::new(props),
            body,
        });
        Box::pin(async {})
    }
}

// ---------------------------------------------------------------------------------------
// Bystanders: connections that must not notice someone else's misbehaviour
// ---------------------------------------------------------------------------------------

/// A set of healthy connections, each consuming from its own queue, opened before a test
/// misbehaves. With several of them at least one usually shares the misbehaving
/// connection's shard.
pub struct Bystanders {
    members: Vec<(Conn, Chan, String, mpsc::UnboundedReceiver<ConsumerMessage>)>,
    round: u32,
}

impl Bystanders {
    pub async fn start(broker: &Broker, count: usize) -> Bystanders {
        let mut members = Vec::new();
        for _ in 0..count {
            let conn = broker.connect().await;
            let ch = conn.channel().await;
            let queue = unique("bystander");
            ch.declare_queue(&queue).await;
            let (_, rx) = ch.consume_auto(&queue).await;
            members.push((conn, ch, queue, rx));
        }
        Bystanders { members, round: 0 }
    }

    /// Publishes one message per bystander from a brand-new connection and asserts every
    /// bystander receives it, and that its connection and channel are still open.
    pub async fn assert_unharmed(&mut self, broker: &Broker) {
        self.round += 1;
        let publisher = broker.connect().await;
        let pch = publisher.channel().await;
        for (_, _, queue, _) in &self.members {
            let body = format!("still-here-{}-{queue}", self.round);
            pch.publish("", queue, body.as_bytes()).await;
        }
        for (conn, ch, queue, rx) in &mut self.members {
            let d = next_delivery(rx).await;
            assert_eq!(
                String::from_utf8_lossy(&d.body),
                format!("still-here-{}-{queue}", self.round),
                "bystander on queue {queue} got the wrong message"
            );
            assert!(conn.conn.is_open(), "bystander connection was closed");
            assert!(ch.ch.is_open(), "bystander channel was closed");
            if let Ok(ev) = ch.events.try_recv() {
                panic!("bystander channel got an unexpected event {ev:?}");
            }
            if let Ok(ev) = conn.events.try_recv() {
                panic!("bystander connection got an unexpected event {ev:?}");
            }
        }
        publisher.close().await;
    }
}

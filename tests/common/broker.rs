//! `Broker`: one `sluice` child process per test, on `127.0.0.1:0` with its own data
//! directory, its log lines collected for assertions, signals and restarts; and `TestDir`,
//! a directory a test keeps across restarts.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use amqprs::connection::{Connection, OpenConnectionArguments};
use tokio::sync::mpsc;

use super::amqprs_client::Conn;
use super::amqprs_events::ConnEvents;
use super::raw::RawConn;
use super::{unique, wait_until};

/// How long the broker may take to print `BRK-1004 : Ready`.
const START_TIMEOUT: Duration = Duration::from_secs(15);

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
        Self::start_in_prepared(dir, shards, toml, |_| {})
    }

    /// As [`Broker::start_in`], with `prepare` applied to the command before it is
    /// spawned (extra `--listen` addresses, a `pre_exec` hook), as
    /// [`Broker::start_prepared`] does.
    pub fn start_in_prepared(
        dir: &Path,
        shards: usize,
        toml: Option<&str>,
        prepare: impl FnOnce(&mut Command),
    ) -> Broker {
        std::fs::create_dir_all(dir).expect("create data dir");
        let config = toml.map(|toml| {
            let mut path = dir.as_os_str().to_owned();
            path.push(".toml");
            let path = PathBuf::from(path);
            std::fs::write(&path, toml).expect("write config");
            path
        });
        Self::launch_prepared(
            shards,
            dir,
            config.as_deref(),
            dir.to_path_buf(),
            true,
            prepare,
        )
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

    /// The broker's resident set size, bytes, from /proc (memory is judged by RSS, not
    /// by the broker's own accounting).
    pub fn rss(&self) -> u64 {
        self.status_bytes("VmRSS:")
    }

    /// The broker's highest RSS so far (`VmHWM`): a peak between two samples of
    /// [`Broker::rss`] is in it.
    pub fn peak_rss(&self) -> u64 {
        self.status_bytes("VmHWM:")
    }

    fn status_bytes(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .expect("read /proc/PID/status");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{field} in /proc/PID/status"));
        kib * 1024
    }

    pub fn shards(&self) -> usize {
        self.shards
    }

    /// A snapshot of every line the broker printed so far.
    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    /// How many log lines so far contain `needle`.
    pub fn count_logs(&self, needle: &str) -> usize {
        self.logs
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
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
        connect_to(&self.amqprs_args()).await
    }

    /// Opens a raw, fully handshaken connection.
    pub fn raw(&self) -> RawConn {
        let mut c = RawConn::connect(&self.addr());
        c.handshake();
        c
    }
}

/// Lines of the broker's log a failing test prints (the end, where the failure is).
const LOG_LINES_ON_FAILURE: usize = 200;

impl Drop for Broker {
    fn drop(&mut self) {
        // A test that fails shows what the broker said: a client error such as "channel
        // closed" is often explained only there.
        if std::thread::panicking() {
            if let Ok(logs) = self.logs.lock() {
                let from = logs.len().saturating_sub(LOG_LINES_ON_FAILURE);
                eprintln!(
                    "--- the broker's log (lines {}..{} of {}) ---",
                    from + 1,
                    logs.len(),
                    logs.len()
                );
                for line in &logs[from..] {
                    eprintln!("{line}");
                }
            }
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.data_dir);
        }
    }
}

/// Opens an amqprs connection to any broker (this one, or another the test started)
/// with an event-forwarding connection callback.
pub async fn connect_to(args: &OpenConnectionArguments) -> Conn {
    let conn = Connection::open(args)
        .await
        .expect("amqprs connection open");
    let (tx, rx) = mpsc::unbounded_channel();
    conn.register_callback(ConnEvents { tx })
        .await
        .expect("register connection callback");
    Conn { conn, events: rx }
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

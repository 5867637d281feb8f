//! Owns: the broker under test as the tool sees it — an embedded sluice (a child
//! process of the `sluice` binary when one sits next to this tool, else in-process
//! shards), started with any extra sluice flags (`--broker-arg`), or an external
//! broker given by `--url` (optionally `--broker-pid`) — reading CPU time and RSS
//! from /proc, for the broker and for the tool itself, counting the operational log
//! codes (`QUE-1003`, `SUB-…`) an embedded broker process writes (and copying its
//! log to `--broker-log`), and stopping it: then its store counters (`MST-1003`,
//! per shard at shutdown) are read from its log — the embedded process's output, or
//! an external broker's `--broker-log` file (after SIGTERM to `--broker-pid` with
//! `--stop-broker`).
//! Does not: know AMQP (scenarios connect with the client).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, LineWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a broker may take to exit after SIGTERM (a store closes its files)
/// before an embedded one is killed, or an external one is given up on.
const STOP_LIMIT: Duration = Duration::from_secs(30);

/// CPU time and resident memory of a process or a set of threads.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// user + system CPU time, nanoseconds.
    pub cpu_ns: u64,
    /// Resident set size, bytes (0 if unknown).
    pub rss: u64,
}

fn clk_tck() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// utime + stime (clock ticks) and thread name from a `stat` file.
fn stat_ticks(path: &str) -> Option<(u64, String)> {
    let s = std::fs::read_to_string(path).ok()?;
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = s.get(close + 2..)?.split_whitespace().collect();
    // After "pid (comm) ": state=0, ..., utime=11, stime=12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime, comm))
}

fn ticks_to_ns(ticks: u64) -> u64 {
    ticks.saturating_mul(1_000_000_000) / clk_tck()
}

fn rss_of(pid: &str) -> u64 {
    status_bytes(pid, "VmRSS:")
}

/// A size field of `/proc/<pid>/status` in bytes (0 if unknown).
fn status_bytes(pid: &str, field: &str) -> u64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return 0;
    };
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Usage of a whole process.
pub fn process_usage(pid: u32) -> Option<Usage> {
    let (ticks, _) = stat_ticks(&format!("/proc/{pid}/stat"))?;
    Some(Usage {
        cpu_ns: ticks_to_ns(ticks),
        rss: rss_of(&pid.to_string()),
    })
}

/// CPU of this process's threads, split into (threads named `sluice-shard-*`, the rest).
pub fn self_threads_split() -> (u64, u64) {
    let mut shard = 0;
    let mut rest = 0;
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for e in dir.flatten() {
            let p = format!("{}/stat", e.path().display());
            if let Some((t, comm)) = stat_ticks(&p) {
                if comm.starts_with("sluice-shard") {
                    shard += t;
                } else {
                    rest += t;
                }
            }
        }
    }
    (ticks_to_ns(shard), ticks_to_ns(rest))
}

fn flags_label(extra: &[String]) -> String {
    if extra.is_empty() {
        String::new()
    } else {
        format!(", flags {}", extra.join(" "))
    }
}

/// How the broker under test runs.
pub enum BrokerKind {
    /// A child process of the sluice binary.
    Process(Child),
    /// Shards running in this process.
    InProcess(Box<sluice::server::Broker>),
    /// Some broker at `--url`; `pid` from `--broker-pid`.
    External(Option<u32>),
}

/// The broker under test.
pub struct BrokerUnderTest {
    /// Where to connect.
    pub url: String,
    /// How it runs.
    pub kind: BrokerKind,
    /// Label for reports (`sluice (embedded process /path)`, `external`, …).
    pub label: String,
    /// Log lines per operational code written so far (embedded process only).
    log_codes: Arc<Mutex<BTreeMap<String, u64>>>,
    /// The store counters of the embedded process's log so far.
    store_log: Arc<Mutex<StoreLog>>,
    /// The thread reading the embedded process's log (it ends when the process does).
    reader: Option<JoinHandle<()>>,
    /// `--broker-log`: where an embedded process's log is copied, or where an
    /// external broker's is read.
    log_path: Option<PathBuf>,
    /// `--stop-broker`: SIGTERM an external broker's `--broker-pid` after the run.
    stop_external: bool,
    /// The embedded broker's own data dir, removed when it is dropped.
    _data_dir: Option<ScratchDir>,
}

/// A temporary data dir for an embedded broker: every run starts from an empty store
/// (durable queues of an earlier run would otherwise be there, with their messages).
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// A fresh directory, unless `extra` already gives `--data-dir`; returns the flags to
    /// start the broker with.
    fn unless_given(extra: &[String]) -> (Option<ScratchDir>, Vec<String>) {
        let mut args = extra.to_vec();
        if extra
            .iter()
            .any(|a| a == "--data-dir" || a.starts_with("--data-dir="))
        {
            return (None, args);
        }
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("sluice-bench-data-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        args.extend(["--data-dir".to_string(), dir.display().to_string()]);
        (Some(ScratchDir(dir)), args)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A broker's persistent-store counters from its `MST-1003 : Closed : <commits>
/// commits, <fsyncs> fsyncs, <bytes> bytes written` lines (one per shard at
/// shutdown), summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreCounters {
    /// Lines summed (shards).
    pub shards: usize,
    pub commits: u64,
    pub fsyncs: u64,
    pub bytes: u64,
}

/// Parses an `MST-1003 : Closed : …` line: its shard (`[shard:<i>]` before the
/// code, if any) and its counts. Numbers may carry thousands separators (`1,024`).
pub fn parse_store_closed(line: &str) -> Option<(Option<u32>, StoreCounters)> {
    let at = line.find("MST-1003")?;
    let shard = line[..at].rfind("[shard:").and_then(|i| {
        let rest = &line[i + 7..at];
        rest[..rest.find(']')?].trim().parse().ok()
    });
    let words: Vec<&str> = line[at..].split_whitespace().collect();
    let before = |unit: &str| -> Option<u64> {
        let i = words.iter().position(|w| w.trim_end_matches(',') == unit)?;
        words.get(i.checked_sub(1)?)?.replace(',', "").parse().ok()
    };
    Some((
        shard,
        StoreCounters {
            shards: 1,
            commits: before("commits")?,
            fsyncs: before("fsyncs")?,
            bytes: before("bytes")?,
        },
    ))
}

/// The `MST-1003` lines of a broker's log since its last start (`BRK-1001`), one per
/// shard (the last line of a shard wins).
#[derive(Default, Debug)]
pub struct StoreLog {
    by_shard: BTreeMap<u32, StoreCounters>,
    /// Lines without a `[shard:<i>]` prefix, each counted.
    unlabelled: Vec<StoreCounters>,
}

impl StoreLog {
    /// Takes one line of the log.
    pub fn feed(&mut self, line: &str) {
        if log_code(line) == Some("BRK-1001") {
            // A (re)start: only the last life of the broker counts.
            self.by_shard.clear();
            self.unlabelled.clear();
        } else if let Some((shard, c)) = parse_store_closed(line) {
            match shard {
                Some(i) => {
                    self.by_shard.insert(i, c);
                }
                None => self.unlabelled.push(c),
            }
        }
    }

    /// Every line of `text`.
    pub fn of_text(text: &str) -> StoreLog {
        let mut log = StoreLog::default();
        for line in text.lines() {
            log.feed(line);
        }
        log
    }

    /// The counters summed over the shards; `None` when no line was seen.
    pub fn counters(&self) -> Option<StoreCounters> {
        let all = self.by_shard.values().chain(&self.unlabelled);
        let sum = all.fold(StoreCounters::default(), |a, c| StoreCounters {
            shards: a.shards + 1,
            commits: a.commits + c.commits,
            fsyncs: a.fsyncs + c.fsyncs,
            bytes: a.bytes + c.bytes,
        });
        (sum.shards > 0).then_some(sum)
    }
}

/// What stopping the broker gave: its store counters (or why there are none) and
/// where they were read.
pub struct Stopped {
    pub store: Result<StoreCounters, String>,
    pub source: String,
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rfind(')')
            .and_then(|i| s.get(i + 2..i + 3))
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// Sends SIGTERM to `pid`; whether it exited within [`STOP_LIMIT`].
fn terminate(pid: u32) -> bool {
    // SAFETY: kill with a pid and a valid signal number.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
    let t0 = Instant::now();
    while t0.elapsed() < STOP_LIMIT {
        if exited(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The Qpid-style code a log line carries (`QUE-1003`, `CHN-1005`, …), if any: three
/// capital letters, a dash and four digits, as a word of its own.
pub fn log_code(line: &str) -> Option<&str> {
    let b = line.as_bytes();
    (0..b.len().saturating_sub(7)).find_map(|i| {
        let w = b.get(i..i + 8)?;
        let shape = w[..3].iter().all(u8::is_ascii_uppercase)
            && w[3] == b'-'
            && w[4..].iter().all(u8::is_ascii_digit);
        let starts = i == 0 || !b[i - 1].is_ascii_alphanumeric();
        let ends = b.get(i + 8).is_none_or(|c| !c.is_ascii_alphanumeric());
        (shape && starts && ends)
            .then(|| line.get(i..i + 8))
            .flatten()
    })
}

/// Where to start the embedded broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Embedded {
    /// A child process if a `sluice` binary sits next to this tool, else in-process.
    Auto,
    /// Always a child process (fails if no binary is found).
    Process,
    /// Always in this process.
    Inproc,
}

fn sluice_binary(explicit: Option<&PathBuf>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.clone());
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join("sluice"), dir.join("../sluice")]
        .into_iter()
        .find(|cand| cand.is_file())
}

impl BrokerUnderTest {
    /// Starts an embedded sluice on an ephemeral loopback port, with `extra` sluice
    /// command-line flags (a child process gets them on its command line; in-process
    /// shards get them parsed by sluice's own flag parser).
    /// `log`: a file to copy a child process's log to.
    pub fn embedded(
        shards: usize,
        pin_cores: Option<&str>,
        how: Embedded,
        binary: Option<&PathBuf>,
        extra: &[String],
        log: Option<&Path>,
    ) -> Result<BrokerUnderTest, String> {
        let (data_dir, extra) = ScratchDir::unless_given(extra);
        let extra = extra.as_slice();
        let log_codes: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
        let store_log: Arc<Mutex<StoreLog>> = Arc::default();
        let bin = match how {
            Embedded::Inproc => None,
            Embedded::Auto => sluice_binary(binary),
            Embedded::Process => Some(sluice_binary(binary).ok_or(
                "no sluice binary next to sluice-bench (build it: cargo build --release)",
            )?),
        };
        if let Some(bin) = bin {
            let mut cmd = Command::new(&bin);
            cmd.args(["--listen", "127.0.0.1:0", "--shards", &shards.to_string()]);
            // Not on the default management port: two tools may run side by side.
            if !extra.iter().any(|a| a.starts_with("--http-listen")) {
                cmd.args(["--http-listen", "off"]);
            }
            if let Some(p) = pin_cores {
                cmd.args(["--pin-cores", p]);
            }
            cmd.args(extra);
            cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
            // Its own process group: a terminal's Ctrl-C reaches the tool only, which
            // prints its summary and then stops the broker itself.
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
            let mut copy = match log {
                Some(p) => Some(LineWriter::new(
                    std::fs::File::create(p)
                        .map_err(|e| format!("--broker-log {}: {e}", p.display()))?,
                )),
                None => None,
            };
            let mut child = cmd
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
            let stdout = child.stdout.take().ok_or("no stdout")?;
            let (tx, rx) = std::sync::mpsc::channel();
            let codes = Arc::clone(&log_codes);
            let store = Arc::clone(&store_log);
            let reader = std::thread::spawn(move || {
                let mut addr = None;
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Some(f) = copy.as_mut() {
                        let _ = writeln!(f, "{line}");
                    }
                    if let Ok(mut s) = store.lock() {
                        s.feed(&line);
                    }
                    if addr.is_none() {
                        if let Some(i) = line.find("Listening on TCP ") {
                            addr = line.get(i + 17..).map(|a| a.trim().to_string());
                        }
                    }
                    if line.contains("BRK-1004") {
                        let _ = tx.send(addr.clone());
                    }
                    if let (Some(code), Ok(mut m)) = (log_code(&line), codes.lock()) {
                        *m.entry(code.to_string()).or_default() += 1;
                    }
                    // keep draining so the broker never blocks on a full pipe
                }
            });
            let addr = match rx.recv_timeout(Duration::from_secs(20)).ok().flatten() {
                Some(a) => a,
                None => {
                    // Not ready (e.g. a bad --broker-arg): do not leave it running.
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "embedded sluice did not report Listening/Ready (flags: {extra:?}; its \
                         errors are above)"
                    ));
                }
            };
            return Ok(BrokerUnderTest {
                url: format!("amqp://guest:guest@{addr}/"),
                kind: BrokerKind::Process(child),
                label: format!(
                    "sluice embedded process ({}), {shards} shards{}",
                    bin.display(),
                    flags_label(extra)
                ),
                log_codes,
                store_log,
                reader: Some(reader),
                log_path: log.map(Path::to_path_buf),
                stop_external: false,
                _data_dir: data_dir,
            });
        }
        let mut args = vec![
            "sluice".to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--shards".into(),
            shards.to_string(),
        ];
        if let Some(p) = pin_cores {
            args.extend(["--pin-cores".into(), p.to_string()]);
        }
        args.extend(extra.iter().cloned());
        let cli = <sluice::config::Cli as clap::Parser>::try_parse_from(&args)
            .map_err(|e| format!("--broker-arg: {e}"))?;
        let mut config = sluice::config::Config::load(&cli).map_err(|e| e.to_string())?;
        if cli.log_level.is_none() {
            config.log_level = "warn".into();
        }
        // The embedded broker runs the management listener only when asked to.
        if cli.http_listen.is_none() {
            config.http.listen = None;
        }
        let broker = sluice::server::start(config).map_err(|e| e.to_string())?;
        let addr = *broker
            .addresses
            .first()
            .ok_or("embedded sluice listens nowhere")?;
        Ok(BrokerUnderTest {
            url: format!("amqp://guest:guest@{addr}/"),
            kind: BrokerKind::InProcess(Box::new(broker)),
            label: format!(
                "sluice embedded in-process, {shards} shards{}",
                flags_label(extra)
            ),
            log_codes,
            store_log,
            reader: None,
            log_path: None,
            stop_external: false,
            _data_dir: data_dir,
        })
    }

    /// A broker somebody else runs; `log` its log file (`--broker-log`), `stop`
    /// whether to SIGTERM `pid` after the run (`--stop-broker`).
    pub fn external(
        url: String,
        pid: Option<u32>,
        log: Option<PathBuf>,
        stop: bool,
    ) -> BrokerUnderTest {
        BrokerUnderTest {
            url,
            kind: BrokerKind::External(pid),
            label: "external".into(),
            log_codes: Arc::default(),
            store_log: Arc::default(),
            reader: None,
            log_path: log,
            stop_external: stop,
            _data_dir: None,
        }
    }

    /// Lines per operational log code the embedded broker process has written so far
    /// (empty for in-process and external brokers).
    pub fn log_codes(&self) -> BTreeMap<String, u64> {
        self.log_codes.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// The broker's process id, when it has its own process.
    pub fn pid(&self) -> Option<u32> {
        match &self.kind {
            BrokerKind::Process(c) => Some(c.id()),
            BrokerKind::External(p) => *p,
            BrokerKind::InProcess(_) => None,
        }
    }

    /// The broker's CPU and RSS now (`None` when unknown). In-process: the shard
    /// threads' CPU; RSS is then the whole process's.
    pub fn usage(&self) -> Option<Usage> {
        match &self.kind {
            BrokerKind::InProcess(_) => Some(Usage {
                cpu_ns: self_threads_split().0,
                rss: rss_of("self"),
            }),
            _ => process_usage(self.pid()?),
        }
    }

    /// The highest RSS the broker has had so far (`VmHWM`: a peak between two samples,
    /// such as the moment every subscriber disconnects, is in it); `None` when unknown.
    /// In-process: the whole process's, the tool's included.
    pub fn peak_rss(&self) -> Option<u64> {
        let pid = match &self.kind {
            BrokerKind::InProcess(_) => "self".to_owned(),
            _ => self.pid()?.to_string(),
        };
        Some(status_bytes(&pid, "VmHWM:")).filter(|&b| b > 0)
    }

    /// The tool's own CPU (in-process broker threads excluded).
    pub fn tool_cpu_ns(&self) -> u64 {
        self_threads_split().1
    }

    /// Stops an embedded broker (SIGTERM; killed after [`STOP_LIMIT`]), or an external
    /// one with `--stop-broker`, and reads its store counters from its log.
    pub fn stop(self) -> Stopped {
        let BrokerUnderTest {
            kind,
            store_log,
            reader,
            log_path,
            stop_external,
            ..
        } = self;
        let copied = log_path
            .as_ref()
            .map_or(String::new(), |p| format!(", copied to {}", p.display()));
        match kind {
            BrokerKind::Process(mut c) => {
                let exited = terminate(c.id());
                if !exited {
                    let _ = c.kill();
                }
                let _ = c.wait();
                if let Some(r) = reader {
                    let _ = r.join();
                }
                let found = store_log.lock().ok().and_then(|s| s.counters());
                Stopped {
                    store: found.ok_or_else(|| {
                        if exited {
                            "no MST-1003 line in the broker's log: a sluice without the \
                             persistent store"
                                .to_string()
                        } else {
                            format!(
                                "the broker did not exit within {} s of SIGTERM (killed)",
                                STOP_LIMIT.as_secs()
                            )
                        }
                    }),
                    source: format!("embedded broker's log{copied}"),
                }
            }
            BrokerKind::InProcess(b) => {
                b.shutdown();
                Stopped {
                    store: Err(
                        "in-process broker: its log is not captured (use --embedded process)"
                            .into(),
                    ),
                    source: String::new(),
                }
            }
            BrokerKind::External(pid) => Self::read_external_log(pid, log_path, stop_external),
        }
    }

    fn read_external_log(pid: Option<u32>, log: Option<PathBuf>, stop: bool) -> Stopped {
        let Some(path) = log else {
            return Stopped {
                store: Err("no broker log given (--broker-log FILE)".into()),
                source: String::new(),
            };
        };
        let source = format!("--broker-log {}", path.display());
        if stop {
            let why = match pid {
                None => Some("--stop-broker needs --broker-pid".to_string()),
                Some(p) if !terminate(p) => Some(format!(
                    "broker {p} did not exit within {} s of SIGTERM",
                    STOP_LIMIT.as_secs()
                )),
                Some(_) => None,
            };
            if let Some(why) = why {
                return Stopped {
                    store: Err(why),
                    source,
                };
            }
        }
        let store = match std::fs::read_to_string(&path) {
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
            Ok(text) => StoreLog::of_text(&text).counters().ok_or_else(|| {
                let hint = if stop {
                    ": a broker without the persistent store"
                } else {
                    " (each shard logs it at shutdown: pass --stop-broker, or read the log \
                     after stopping the broker)"
                };
                format!("no MST-1003 line in {}{hint}", path.display())
            }),
        };
        Stopped { store, source }
    }
}

#[cfg(test)]
mod tests {
    use super::{log_code, parse_store_closed, StoreCounters, StoreLog};

    #[test]
    fn store_counters_are_summed_over_the_shards_of_the_last_start() {
        let line = "2026-12-01T10:00:00.000000Z  INFO sluice::ops: [shard:1] MST-1003 : Closed : \
                    1,204 commits, 1,200 fsyncs, 1,310,720 bytes written";
        assert_eq!(
            parse_store_closed(line),
            Some((
                Some(1),
                StoreCounters {
                    shards: 1,
                    commits: 1204,
                    fsyncs: 1200,
                    bytes: 1_310_720
                }
            ))
        );
        assert_eq!(
            parse_store_closed("MST-1003 : Closed : 0 commits, 0 fsyncs, 0 bytes written")
                .map(|(s, c)| (s, c.fsyncs)),
            Some((None, 0))
        );
        assert_eq!(parse_store_closed("MST-1003 : Closed : garbled"), None);
        assert_eq!(parse_store_closed("BRK-1004 : Ready"), None);
        let log = "\
            x INFO sluice::ops: BRK-1001 : Startup : Version: 0.1.0 Shards: 2
            x INFO sluice::ops: [shard:0] MST-1003 : Closed : 9 commits, 9 fsyncs, 9 bytes written
            x INFO sluice::ops: BRK-1001 : Startup : Version: 0.1.0 Shards: 2
            x INFO sluice::ops: BRK-1004 : Ready
            x INFO sluice::ops: [shard:0] MST-1003 : Closed : 10 commits, 8 fsyncs, 4,096 bytes written
            x INFO sluice::ops: [shard:1] MST-1003 : Closed : 5 commits, 4 fsyncs, 1,024 bytes written
            x INFO sluice::ops: BRK-1005 : Stopped";
        assert_eq!(
            StoreLog::of_text(log).counters(),
            Some(StoreCounters {
                shards: 2,
                commits: 15,
                fsyncs: 12,
                bytes: 5120
            })
        );
        assert_eq!(StoreLog::of_text("BRK-1004 : Ready").counters(), None);
    }

    #[test]
    fn finds_the_code_of_a_log_line() {
        let line =
            "2026-11-30T03:20:39Z INFO [vh(/)/qu(q)] QUE-1003 : Overfull : Size : 1,200 bytes";
        assert_eq!(log_code(line), Some("QUE-1003"));
        assert_eq!(
            log_code("SUB-1003 : Slow consumer detected"),
            Some("SUB-1003")
        );
        assert_eq!(log_code("xQUE-1003 no"), None);
        assert_eq!(log_code("QUE-10034"), None);
        assert_eq!(log_code("nothing here"), None);
        assert_eq!(log_code("ÄÖÜ-1234 é"), None);
    }
}

//! Owns: the broker under test as the tool sees it — an embedded sluice (a child
//! process of the `sluice` binary when one sits next to this tool, else in-process
//! shards), started with any extra sluice flags (`--broker-arg`), or an external
//! broker given by `--url` (optionally `--broker-pid`) — reading CPU time and RSS
//! from /proc, for the broker and for the tool itself, and counting the operational
//! log codes (`QUE-1003`, `SUB-…`) an embedded broker process writes.
//! Does not: know AMQP (scenarios connect with the client).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return 0;
    };
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
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
    InProcess(sluice::server::Broker),
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
    pub fn embedded(
        shards: usize,
        pin_cores: Option<&str>,
        how: Embedded,
        binary: Option<&PathBuf>,
        extra: &[String],
    ) -> Result<BrokerUnderTest, String> {
        let (data_dir, extra) = ScratchDir::unless_given(extra);
        let extra = extra.as_slice();
        let log_codes: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
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
            if let Some(p) = pin_cores {
                cmd.args(["--pin-cores", p]);
            }
            cmd.args(extra);
            cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
            // Its own process group: a terminal's Ctrl-C reaches the tool only, which
            // prints its summary and then stops the broker itself.
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
            let mut child = cmd
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
            let stdout = child.stdout.take().ok_or("no stdout")?;
            let (tx, rx) = std::sync::mpsc::channel();
            let codes = Arc::clone(&log_codes);
            std::thread::spawn(move || {
                let mut addr = None;
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
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
        let broker = sluice::server::start(config).map_err(|e| e.to_string())?;
        let addr = *broker
            .addresses
            .first()
            .ok_or("embedded sluice listens nowhere")?;
        Ok(BrokerUnderTest {
            url: format!("amqp://guest:guest@{addr}/"),
            kind: BrokerKind::InProcess(broker),
            label: format!(
                "sluice embedded in-process, {shards} shards{}",
                flags_label(extra)
            ),
            log_codes,
            _data_dir: data_dir,
        })
    }

    /// A broker somebody else runs.
    pub fn external(url: String, pid: Option<u32>) -> BrokerUnderTest {
        BrokerUnderTest {
            url,
            kind: BrokerKind::External(pid),
            label: "external".into(),
            log_codes: Arc::default(),
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

    /// The tool's own CPU (in-process broker threads excluded).
    pub fn tool_cpu_ns(&self) -> u64 {
        self_threads_split().1
    }

    /// Stops an embedded broker.
    pub fn stop(self) {
        match self.kind {
            BrokerKind::Process(mut c) => {
                // SAFETY: kill with a valid pid and signal number.
                unsafe {
                    libc::kill(c.id() as libc::pid_t, libc::SIGTERM);
                }
                for _ in 0..100 {
                    if let Ok(Some(_)) = c.try_wait() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = c.kill();
                let _ = c.wait();
            }
            BrokerKind::InProcess(b) => b.shutdown(),
            BrokerKind::External(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::log_code;

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

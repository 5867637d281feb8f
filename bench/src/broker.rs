//! Owns: the broker under test as the tool sees it — an embedded sluice (a child
//! process of the `sluice` binary when one sits next to this tool, else in-process
//! shards) or an external broker given by `--url` (optionally `--broker-pid`) — and
//! reading CPU time and RSS from /proc, for the broker and for the tool itself.
//! Does not: know AMQP (scenarios connect with the client).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
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
    /// Starts an embedded sluice on an ephemeral loopback port.
    pub fn embedded(
        shards: usize,
        pin_cores: Option<&str>,
        how: Embedded,
        binary: Option<&PathBuf>,
    ) -> Result<BrokerUnderTest, String> {
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
            cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
            // Its own process group: a terminal's Ctrl-C reaches the tool only, which
            // prints its summary and then stops the broker itself.
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
            let mut child = cmd
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
            let stdout = child.stdout.take().ok_or("no stdout")?;
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut addr = None;
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if addr.is_none() {
                        if let Some(i) = line.find("Listening on TCP ") {
                            addr = Some(line[i + 17..].trim().to_string());
                        }
                    }
                    if line.contains("BRK-1004") {
                        let _ = tx.send(addr.clone());
                    }
                    // keep draining so the broker never blocks on a full pipe
                }
            });
            let addr = rx
                .recv_timeout(Duration::from_secs(20))
                .ok()
                .flatten()
                .ok_or("embedded sluice did not report Listening/Ready")?;
            return Ok(BrokerUnderTest {
                url: format!("amqp://guest:guest@{addr}/"),
                kind: BrokerKind::Process(child),
                label: format!(
                    "sluice embedded process ({}), {shards} shards",
                    bin.display()
                ),
            });
        }
        let mut config = sluice::config::Config {
            listen: vec!["127.0.0.1:0".parse().map_err(|e| format!("{e}"))?],
            shards,
            ..Default::default()
        };
        if let Some(p) = pin_cores {
            config.pin_cores = Some(sluice::config::parse_core_list(p)?);
        }
        config.log_level = "warn".into();
        let broker = sluice::server::start(config).map_err(|e| e.to_string())?;
        let addr = broker.addresses[0];
        Ok(BrokerUnderTest {
            url: format!("amqp://guest:guest@{addr}/"),
            kind: BrokerKind::InProcess(broker),
            label: format!("sluice embedded in-process, {shards} shards"),
        })
    }

    /// A broker somebody else runs.
    pub fn external(url: String, pid: Option<u32>) -> BrokerUnderTest {
        BrokerUnderTest {
            url,
            kind: BrokerKind::External(pid),
            label: "external".into(),
        }
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

//! Out of file descriptors: a child broker under RLIMIT_NOFILE 64 (soft and hard) keeps
//! serving the connections it has when accept fails with EMFILE, logs the failure
//! rate-limited (CON-1005), neither exits nor spins, and accepts again once descriptors
//! free up.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::raw::{is_timeout, RawConn, READ_TIMEOUT};
use crate::common::wire::{m, Enc, Props};
use crate::common::{unique, wait_until};

const LIMIT: u64 = 64;

/// A broker child process started with RLIMIT_NOFILE = `limit` (soft and hard).
struct LimitedBroker {
    child: Child,
    logs: Arc<Mutex<Vec<String>>>,
    addr: String,
    dir: PathBuf,
}

impl LimitedBroker {
    fn start(limit: u64) -> LimitedBroker {
        let dir = std::env::temp_dir().join(unique("sluice-emfile"));
        std::fs::create_dir_all(&dir).expect("create data dir");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.args([
            "--listen",
            "127.0.0.1:0",
            "--shards",
            "1",
            "--log-level",
            "info",
        ])
        .arg("--data-dir")
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        // SAFETY: only setrlimit(2) and close_range(2), async-signal-safe, between fork
        // and exec.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: limit as libc::rlim_t,
                    rlim_max: limit as libc::rlim_t,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Descriptors the test process inherited without close-on-exec (cargo's
                // jobserver pipe) would count against the broker's limit: close them at
                // exec (close_range with CLOSE_RANGE_CLOEXEC; best effort).
                libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 4u32);
                Ok(())
            });
        }
        let mut child = cmd.spawn().expect("spawn sluice");
        let logs = Arc::new(Mutex::new(Vec::new()));
        read_lines(child.stdout.take().unwrap(), Arc::clone(&logs), "");
        read_lines(child.stderr.take().unwrap(), Arc::clone(&logs), "[stderr] ");
        let mut broker = LimitedBroker {
            child,
            logs,
            addr: String::new(),
            dir,
        };
        let marker = "BRK-1002 : Starting : Listening on TCP ";
        let ready = wait_until(Duration::from_secs(15), || {
            broker.find(marker).is_some() && broker.find("BRK-1004 : Ready").is_some()
        });
        if !ready {
            panic!(
                "the limited broker did not start (exit status {:?}); log:\n{}",
                broker.child.try_wait(),
                broker.logs().join("\n")
            );
        }
        let line = broker.find(marker).unwrap();
        broker.addr = line[line.find(marker).unwrap() + marker.len()..]
            .trim()
            .to_owned();
        broker
    }

    fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    fn find(&self, needle: &str) -> Option<String> {
        self.logs().into_iter().find(|l| l.contains(needle))
    }

    /// Operational lines (after the tracing prefix) containing `needle`.
    fn ops(&self, needle: &str) -> Vec<String> {
        self.logs()
            .iter()
            .filter_map(|l| l.split_once("sluice::ops: ").map(|(_, t)| t.to_owned()))
            .filter(|t| t.contains(needle))
            .collect()
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn assert_alive(&mut self) {
        if let Some(status) = self.child.try_wait().expect("try_wait") {
            panic!(
                "the broker exited with {status}; log:\n{}",
                self.logs().join("\n")
            );
        }
        let panics = self.ops("BRK-1012");
        assert!(panics.is_empty(), "the broker panicked: {panics:?}");
    }

    /// Descriptors the broker has open now.
    fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// User + system CPU time the broker has used so far.
    fn cpu_time(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).expect("stat");
        // Fields after the command name: state is field 3, utime 14, stime 15.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        Duration::from_millis(ticks * 1000 / hz)
    }
}

impl Drop for LimitedBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn read_lines(
    pipe: impl Read + Send + 'static,
    logs: Arc<Mutex<Vec<String>>>,
    prefix: &'static str,
) {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).split(b'\n') {
            let Ok(line) = line else { break };
            let line = String::from_utf8_lossy(&line).into_owned();
            if std::env::var_os("SLUICE_TEST_ECHO").is_some() {
                eprintln!("{prefix}{line}");
            }
            logs.lock().unwrap().push(format!("{prefix}{line}"));
        }
    });
}

/// Connects and sends the protocol header, then [`await_start`].
fn try_open(addr: &str, wait: Duration) -> Result<RawConn, RawConn> {
    let mut raw = RawConn::connect(addr);
    raw.send_protocol_header();
    await_start(raw, wait)
}

/// `Ok` with a handshaken connection (channel 1 open) if the broker sends
/// connection.start within `wait`; `Err` with the connection if it does not (it waits in
/// the listen backlog: the broker has not accepted it).
fn await_start(mut raw: RawConn, wait: Duration) -> Result<RawConn, RawConn> {
    raw.stream.set_read_timeout(Some(wait)).unwrap();
    match raw.read_method() {
        Ok(mth) => {
            assert_eq!(mth.id, m::CONNECTION_START, "first method from the broker");
            raw.stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
            raw.send_start_ok("PLAIN", b"\0guest\0guest");
            let offer = raw.read_tune();
            raw.send_tune_ok(crate::common::raw::Tune {
                heartbeat: 0,
                ..offer
            });
            raw.send_open("/");
            raw.read_open_ok();
            raw.channel_open(1);
            Ok(raw)
        }
        Err(e) if is_timeout(&e) => Err(raw),
        Err(e) => panic!("connection to the broker failed: {e}"),
    }
}

/// Declares `queue` on channel 1, publishes `payload` to it and gets it back.
fn round_trip(raw: &mut RawConn, queue: &str, payload: &[u8]) {
    raw.queue_declare(1, queue, false, false, true);
    raw.publish(1, "", queue, &Props::default(), payload)
        .expect("publish");
    let args = Enc::new().short(0).shortstr(queue).bits(&[true]).done();
    raw.send_method(1, m::BASIC_GET, &args).expect("basic.get");
    let got = raw.read_delivery(1);
    assert_eq!(got.method.id, m::BASIC_GET_OK);
    assert_eq!(got.body, payload, "basic.get returns what was published");
}

#[test]
fn accept_failures_under_a_low_descriptor_limit() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(emfile_scenario));
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Ok(())) => {}
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("test exceeded its time bound of 60 s"),
    }
}

fn emfile_scenario() {
    let mut broker = LimitedBroker::start(LIMIT);
    let limit_lines = broker.ops("BRK-1011");
    assert_eq!(
        limit_lines,
        vec![format!(
            "BRK-1011 : Open files limit : {LIMIT} (hard limit {LIMIT})"
        )],
        "start-up line for the open-files limit"
    );
    let base_fds = broker.open_fds();

    // 1. Handshaken connections until one is not accepted.
    let mut open = Vec::new();
    let mut waiting = Vec::new();
    while waiting.is_empty() {
        assert!(
            open.len() as u64 <= LIMIT,
            "{} connections accepted under a limit of {LIMIT} descriptors",
            open.len()
        );
        let mut attempt = try_open(&broker.addr, Duration::from_secs(2));
        if let Err(raw) = attempt {
            // Slow (a busy machine) rather than refused while the broker has descriptors
            // to spare: give it longer.
            attempt = if broker.open_fds() < LIMIT as usize {
                await_start(raw, Duration::from_secs(10))
            } else {
                Err(raw)
            };
        }
        match attempt {
            Ok(raw) => open.push(raw),
            Err(raw) => waiting.push(raw.stream),
        }
    }
    let accepted = open.len();
    assert!(
        accepted >= 10,
        "only {accepted} connections before the limit"
    );
    // More connections than the limit, in all.
    while accepted + waiting.len() <= LIMIT as usize + 4 {
        let mut raw = RawConn::connect(&broker.addr);
        raw.send_protocol_header();
        waiting.push(raw.stream);
    }

    // 2. The failure is logged, and rate-limited.
    let failed = "CON-1005 : Accept failed on shard 0 : ";
    assert!(
        wait_until(Duration::from_secs(5), || !broker.ops(failed).is_empty()),
        "no `{failed}` line; log:\n{}",
        broker.logs().join("\n")
    );
    let line = broker.ops(failed).remove(0);
    assert!(
        line.contains("Too many open files"),
        "CON-1005 names the error: {line}"
    );

    // 3. No spinning: little CPU over 2 s in the failing state, and still no
    //    connection.start for the waiting connections.
    let cpu0 = broker.cpu_time();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let cpu = broker.cpu_time() - cpu0;
    let wall = t0.elapsed();
    assert!(
        cpu < Duration::from_millis(500),
        "the broker used {cpu:?} CPU in {wall:?} while accept kept failing"
    );
    for sock in &mut waiting {
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let mut byte = [0u8; 1];
        match sock.read(&mut byte) {
            Err(e) if is_timeout(&e) => {}
            other => panic!("a connection beyond the limit got {other:?} instead of nothing"),
        }
    }
    broker.assert_alive();
    let fds_at_limit = broker.open_fds();
    assert!(
        fds_at_limit as u64 <= LIMIT,
        "{fds_at_limit} descriptors open: {:?}",
        std::fs::read_dir(format!("/proc/{}/fd", broker.pid()))
            .unwrap()
            .filter_map(|e| {
                let e = e.ok()?;
                Some(format!(
                    "{:?}->{:?}",
                    e.file_name(),
                    std::fs::read_link(e.path()).ok()?
                ))
            })
            .collect::<Vec<_>>()
    );

    // 4. The connections opened earlier still work.
    round_trip(&mut open[0], "emfile-first", b"first still served");
    let last = open.len() - 1;
    round_trip(&mut open[last], "emfile-last", b"last still served");

    let reports = broker.ops("CON-1005").len();
    assert!(
        (1..=3).contains(&reports),
        "CON-1005 is rate-limited: {reports} lines in a few seconds:\n{}",
        broker.ops("CON-1005").join("\n")
    );

    // 5. Free descriptors: the waiting connections give up, five open ones close.
    //    A new connection then completes the handshake and works.
    drop(waiting);
    for mut raw in open.drain(..5) {
        raw.close_cleanly();
    }
    let mut fresh = None;
    let deadline = Instant::now() + Duration::from_secs(15);
    while fresh.is_none() && Instant::now() < deadline {
        fresh = try_open(&broker.addr, Duration::from_secs(5)).ok();
    }
    let mut fresh = fresh.unwrap_or_else(|| {
        panic!(
            "no new connection was accepted after descriptors were freed; log:\n{}",
            broker.ops("CON-").join("\n")
        )
    });
    round_trip(&mut fresh, "emfile-fresh", b"accepting again");
    round_trip(&mut open[0], "emfile-sixth", b"old ones too");
    broker.assert_alive();
    eprintln!(
        "fanout_scale emfile: {base_fds} descriptors at start, {accepted} connections \
         accepted, {fds_at_limit} descriptors at the limit, {cpu:?} CPU in {wall:?} while \
         failing, {reports} CON-1005 line(s)"
    );
}

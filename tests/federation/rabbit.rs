//! A private RabbitMQ node for the interop tests.
//!
//! Owns: starting Debian's `rabbitmq-server` (3.10) as a node of its own — its own node
//! name, AMQP port (`RABBITMQ_NODE_PORT`, on 127.0.0.1), distribution port
//! (`RABBITMQ_DIST_PORT`), epmd port (`ERL_EPMD_PORT`), data, log, config and
//! enabled-plugins files in a temporary directory and `HOME` there for the Erlang
//! cookie — so that it works beside a RabbitMQ already running on the machine;
//! `rabbitmqctl -n NODE` against it; stopping it by its PID and its private epmd.
//!
//! How it runs as root or as any user: Debian's `/usr/sbin/rabbitmq-server` is a wrapper
//! that, for root, re-runs the script as the `rabbitmq` user through `su`, which drops
//! the environment (and so every private path above) and writes into /var/lib/rabbitmq.
//! The harness calls the real script, `/usr/lib/rabbitmq/bin/rabbitmq-server`, directly:
//! the Erlang VM needs no particular user, and every file it touches is in the test's
//! directory, owned by whoever runs the test. `RUNNING_UNDER_SYSTEMD=true` makes that
//! script `exec` the VM instead of supervising it from a shell, so the child's PID is
//! the node's, and SIGTERM to it is RabbitMQ's clean shutdown.
//!
//! Does not: touch /var/lib/rabbitmq, /etc/rabbitmq or another node, or kill anything it
//! did not start.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::free_port;
use crate::common::{unique, TestDir};

/// Where Debian's package puts the real scripts.
const BIN: &str = "/usr/lib/rabbitmq/bin";
/// How long the node may take to start (a debug test build runs beside it).
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// How long one `rabbitmqctl` call may take.
const CTL_TIMEOUT: Duration = Duration::from_secs(60);

pub struct RabbitNode {
    /// `NAME@localhost`.
    pub node: String,
    /// Its cluster name (the `cluster_name` server property, and what it puts in
    /// x-received-from and its upstream queue names).
    pub cluster_name: String,
    pub port: u16,
    epmd_port: u16,
    dir: TestDir,
    env: Vec<(String, String)>,
    child: Option<Child>,
}

impl RabbitNode {
    /// Starts a node with rabbitmq_federation enabled, or returns `None` (after printing
    /// why) where `rabbitmq-server` is not installed.
    pub fn start() -> Option<RabbitNode> {
        let script = Path::new(BIN).join("rabbitmq-server");
        if !script.exists() {
            crate::cluster::skip(
                "RabbitMQ interop",
                &format!(
                    "rabbitmq-server is not installed ({} missing); `apt-get install \
                     rabbitmq-server` (as .ci/run does as root) runs these tests",
                    script.display()
                ),
            );
            return None;
        }
        let dir = TestDir::new("sluice-fed-rabbit");
        let base = dir.path().to_path_buf();
        let name = unique("sluicefed").replace('-', "_");
        let node = format!("{name}@localhost");
        let cluster_name = format!("rabbit-{name}");
        let (port, dist_port, epmd_port) = (free_port(), free_port(), free_port());
        let path = |p: &str| base.join(p).display().to_string();
        for sub in ["mnesia", "log", "home", "plugins-expand"] {
            std::fs::create_dir_all(base.join(sub)).expect("create RabbitMQ dir");
        }
        std::fs::write(
            base.join("rabbitmq.conf"),
            format!(
                "listeners.tcp.default = 127.0.0.1:{port}\n\
                 cluster_name = {cluster_name}\n\
                 loopback_users.guest = true\n\
                 log.console = true\n\
                 log.console.level = info\n\
                 log.file = false\n"
            ),
        )
        .expect("write rabbitmq.conf");
        std::fs::write(base.join("enabled_plugins"), "[rabbitmq_federation].\n")
            .expect("write enabled_plugins");
        let env: Vec<(String, String)> = [
            ("HOME", path("home")),
            ("RABBITMQ_NODENAME", node.clone()),
            ("RABBITMQ_NODE_PORT", port.to_string()),
            ("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1".to_owned()),
            ("RABBITMQ_DIST_PORT", dist_port.to_string()),
            ("ERL_EPMD_PORT", epmd_port.to_string()),
            ("ERL_EPMD_ADDRESS", "127.0.0.1".to_owned()),
            ("RABBITMQ_MNESIA_BASE", path("mnesia")),
            ("RABBITMQ_LOG_BASE", path("log")),
            ("RABBITMQ_CONFIG_FILE", path("rabbitmq.conf")),
            ("RABBITMQ_ENABLED_PLUGINS_FILE", path("enabled_plugins")),
            ("RABBITMQ_PLUGINS_EXPAND_DIR", path("plugins-expand")),
            ("RABBITMQ_PID_FILE", path("rabbitmq.pid")),
            ("RABBITMQ_ADVANCED_CONFIG_FILE", path("advanced.config")),
            ("RUNNING_UNDER_SYSTEMD", "true".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let stdout = std::fs::File::create(base.join("stdout.log")).expect("stdout.log");
        let stderr = std::fs::File::create(base.join("stderr.log")).expect("stderr.log");
        let mut cmd = Command::new(&script);
        cmd.current_dir(&base)
            .env_remove("NOTIFY_SOCKET")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        let child = cmd.spawn().expect("spawn rabbitmq-server");
        let mut rabbit = RabbitNode {
            node,
            cluster_name,
            port,
            epmd_port,
            dir,
            env,
            child: Some(child),
        };
        rabbit.await_ready();
        Some(rabbit)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("stdout.log")
    }

    fn log(&self) -> String {
        let out = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let err = std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default();
        format!("{out}\n[stderr]\n{err}")
    }

    fn await_ready(&mut self) {
        let start = Instant::now();
        loop {
            let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
            if log.contains("Server startup complete") {
                println!("RabbitMQ node {} ready in {:?}", self.node, start.elapsed());
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                panic!(
                    "rabbitmq-server exited with {status} before it was ready:\n{}",
                    self.log()
                );
            }
            if start.elapsed() > START_TIMEOUT {
                panic!(
                    "rabbitmq-server not ready within {START_TIMEOUT:?}:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs `rabbitmqctl -n NODE ARGS…` and returns its stdout; panics on failure.
    pub fn ctl(&self, args: &[&str]) -> String {
        let out = self.run(&Path::new(BIN).join("rabbitmqctl"), args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "rabbitmqctl {args:?} failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    fn run(&self, program: &Path, args: &[&str]) -> Output {
        let mut child = Command::new(program)
            .arg("-n")
            .arg(&self.node)
            .args(args)
            .current_dir(self.dir.path())
            .env_remove("NOTIFY_SOCKET")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rabbitmqctl");
        let deadline = Instant::now() + CTL_TIMEOUT;
        loop {
            if child.try_wait().expect("try_wait").is_some() {
                return child.wait_with_output().expect("rabbitmqctl output");
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("rabbitmqctl {args:?} did not finish within {CTL_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The node's bindings as (source, destination, routing key).
    pub fn bindings(&self) -> Vec<(String, String, String)> {
        let out = self.ctl(&[
            "list_bindings",
            "-q",
            "--no-table-headers",
            "source_name",
            "destination_name",
            "routing_key",
        ]);
        out.lines()
            .filter_map(|l| {
                let mut f = l.split('\t');
                Some((
                    f.next()?.to_owned(),
                    f.next()?.to_owned(),
                    f.next().unwrap_or_default().to_owned(),
                ))
            })
            .collect()
    }

    /// amqprs arguments for guest on "/".
    pub fn amqprs_args(&self) -> amqprs::connection::OpenConnectionArguments {
        amqprs::connection::OpenConnectionArguments::new("127.0.0.1", self.port, "guest", "guest")
    }

    /// `amqp://guest:guest@127.0.0.1:PORT/%2f`.
    pub fn uri(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }
}

impl Drop for RabbitNode {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the pid of our own unreaped child.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(20);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
        // The node started an epmd of its own on its private port: ask it to stop.
        let _ = Command::new("epmd")
            .arg("-port")
            .arg(self.epmd_port.to_string())
            .arg("-kill")
            .env("ERL_EPMD_PORT", self.epmd_port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

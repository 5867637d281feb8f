//! Network namespaces for the federation suite: a star of namespaces (a root and its
//! relays) joined by veth pairs, with `tc netem` delay where the kernel has it, and a
//! way to run client code inside one.
//!
//! Owns: creating and deleting the namespaces it names (`sfN…`, per process) and the
//! veth pairs between them (deleted with the namespaces); the addresses 10.231.R.1 (the
//! root's end of the pair to relay R) and 10.231.R.2 (the relay's end), which exist
//! only inside those namespaces; threads that enter a namespace before they open
//! sockets.
//!
//! Does not: touch the host's own interfaces, routes or sysctls, or any namespace it did
//! not create.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The root's address on the pair to relay `r` (1-based).
pub fn root_addr(r: usize) -> String {
    format!("10.231.{r}.1")
}

/// Relay `r`'s address on its pair to the root.
pub fn relay_addr(r: usize) -> String {
    format!("10.231.{r}.2")
}

/// The delay `tc netem` adds on each end of each pair.
pub const DELAY: &str = "20ms";

/// A root namespace and `relays` relay namespaces, each relay joined to the root by a
/// veth pair. Deleted on drop.
pub struct Star {
    /// `names[0]` is the root's namespace, `names[r]` relay r's.
    pub names: Vec<String>,
    /// Whether netem delay is on every pair.
    pub delayed: bool,
}

/// Runs `ip ARGS…`; returns its error output on failure.
fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args)
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Star {
    /// Creates the namespaces and pairs, or says why it cannot (not root, no `ip netns`).
    pub fn new(relays: usize) -> Result<Star, String> {
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not running as root".to_owned());
        }
        let tag = std::process::id() % 100_000;
        let mut star = Star {
            names: Vec::new(),
            delayed: true,
        };
        for i in 0..=relays {
            let name = format!("sf{tag}n{i}");
            ip(&["netns", "add", &name])?;
            star.names.push(name.clone());
            ip(&["-n", &name, "link", "set", "lo", "up"])?;
        }
        for r in 1..=relays {
            let (root_end, relay_end) = (format!("sf{tag}r{r}"), format!("sf{tag}l{r}"));
            ip(&[
                "link", "add", &root_end, "type", "veth", "peer", "name", &relay_end,
            ])?;
            ip(&["link", "set", &root_end, "netns", &star.names[0]])?;
            ip(&["link", "set", &relay_end, "netns", &star.names[r]])?;
            for (ns, dev, addr) in [
                (&star.names[0], &root_end, root_addr(r)),
                (&star.names[r], &relay_end, relay_addr(r)),
            ] {
                ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
                ip(&["-n", ns, "link", "set", dev, "up"])?;
                if star.delayed {
                    let netem = run(
                        "tc",
                        &[
                            "-n", ns, "qdisc", "add", "dev", dev, "root", "netem", "delay", DELAY,
                        ],
                    );
                    if let Err(e) = netem {
                        println!("NOTE: no netem delay on this kernel ({e}); pairs run undelayed");
                        star.delayed = false;
                    }
                }
            }
        }
        Ok(star)
    }

    /// The namespace file of `names[i]`.
    pub fn path(&self, i: usize) -> PathBuf {
        PathBuf::from("/var/run/netns").join(&self.names[i])
    }
}

impl Drop for Star {
    fn drop(&mut self) {
        for name in &self.names {
            if let Err(e) = ip(&["netns", "del", name]) {
                eprintln!("could not delete namespace {name}: {e}");
            }
        }
    }
}

/// Runs `f` on a new thread inside the namespace at `ns` (sockets it opens live there),
/// with a current-thread tokio runtime for async client code.
pub fn in_netns<T, F, Fut>(ns: PathBuf, f: F) -> std::thread::JoinHandle<T>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T>,
{
    std::thread::spawn(move || {
        let file =
            std::fs::File::open(&ns).unwrap_or_else(|e| panic!("open {}: {e}", ns.display()));
        // SAFETY: setns(2) on this thread only, with a namespace fd we hold open.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(
            rc,
            0,
            "setns {}: {}",
            ns.display(),
            std::io::Error::last_os_error()
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        runtime.block_on(f())
    })
}

/// Joins `handle`, re-raising its panic in the caller.
pub fn join<T>(handle: std::thread::JoinHandle<T>) -> T {
    match handle.join() {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

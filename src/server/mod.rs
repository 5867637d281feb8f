//! Owns: starting the broker — binding the listeners, creating the shard mesh, starting
//! one thread per shard (pinned when asked), announcing readiness — coordinating
//! shutdown on SIGINT/SIGTERM, and putting a configuration reloaded on SIGHUP in force
//! (sent to every shard's inbox and, over a watch channel, to the management thread).
//!
//! Does not: contain protocol, routing or policy logic. Each shard's thread is
//! composed in `shard_thread`.

pub mod shard_thread;

use std::sync::Arc;

use crate::config::{Config, ConfigError};
use crate::ops::config_event::ConfigEvent;
use crate::ops::event::OpsEvent;
use crate::ops::notify;
use crate::shard::inbox::{self, ShardMsg};
use crate::shard::memory::MemoryBoard;
use crate::store::quota::DiskBoard;
use shard_thread::{RecoveredSeed, ShardSeed};

/// Why the broker could not start.
#[derive(Debug)]
pub enum StartError {
    Config(ConfigError),
    Store(crate::store::StoreError),
    Bind(std::io::Error),
    Thread(std::io::Error),
    /// The management listener could not bind.
    Http(std::net::SocketAddr, std::io::Error),
    /// The Prometheus listener could not bind.
    Prometheus(std::net::SocketAddr, std::io::Error),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Config(e) => write!(f, "{e}"),
            StartError::Store(e) => write!(f, "{e}"),
            StartError::Bind(e) => write!(f, "cannot listen: {e}"),
            StartError::Thread(e) => write!(f, "cannot start shard thread: {e}"),
            StartError::Http(addr, e) => write!(
                f,
                "cannot listen for HTTP on {addr}: {e} (set http.listen or --http-listen, or \"off\")"
            ),
            StartError::Prometheus(addr, e) => write!(
                f,
                "cannot listen for Prometheus on {addr}: {e} (set http.prometheus_listen or --prometheus-listen, or \"off\")"
            ),
        }
    }
}

impl std::error::Error for StartError {}

/// A running broker.
pub struct Broker {
    threads: Vec<std::thread::JoinHandle<std::io::Result<()>>>,
    peers: inbox::Peers,
    /// The data dir's lock, released when the broker is dropped.
    _data_dir_lock: crate::store::DataDirLock,
    /// The addresses actually bound (ephemeral ports resolved).
    pub addresses: Vec<std::net::SocketAddr>,
    /// The TLS (amqps) addresses actually bound.
    pub tls_addresses: Vec<std::net::SocketAddr>,
    /// The management listener, when `http.listen` is not off.
    http: Option<crate::http::HttpServer>,
    /// The same on `[::1]`, beside the default `127.0.0.1` address.
    http_v6: Option<crate::http::HttpServer>,
    /// The Prometheus listener, when `http.prometheus_listen` is not off.
    prometheus: Option<crate::http::HttpServer>,
    /// The owner of the configuration in force: SIGHUP reloads and the management
    /// API's changes of users and permissions, one at a time (`crate::admin`).
    admin: Option<crate::admin::Admin>,
    /// The federation links' thread, when `[[federation.exchange]]` is configured.
    federation: Option<crate::federation::Federation>,
}

/// The file's users and permissions with the store's run-time changes over them, and
/// the start-up lines saying where the users come from (USR-1005) and what stored entry
/// could not be used (USR-1006).
fn users_in_force(file: &Config, overlay: &crate::store::access::AccessOverlay) -> Config {
    use crate::ops::admin_event::AdminEvent;
    let (config, sources) = crate::config::access::overlay(file, overlay);
    for what in sources.unusable {
        AdminEvent::StoredEntryUnusable { what }.emit();
    }
    AdminEvent::UserSources {
        from_file: sources.from_file,
        from_store: sources.from_store,
        deleted: sources.deleted,
    }
    .emit();
    config
}

/// Checks the core list against the cores this process may use.
fn check_cores(config: &Config) -> Result<(), ConfigError> {
    let Some(cores) = &config.pin_cores else {
        return Ok(());
    };
    let available = shard_thread::available_cores();
    for core in cores.iter().take(config.shards) {
        if !available.contains(core) {
            return Err(ConfigError::Invalid {
                key: "--pin-cores".into(),
                reason: format!(
                    "core {core} is not available to this process (available: {available:?})"
                ),
            });
        }
    }
    Ok(())
}

/// Raises the soft open-files limit to the hard limit (every connection is a
/// descriptor; distributions default the soft limit to 1,024) and logs both (BRK-1011).
pub fn raise_file_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write one rlimit struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return;
        }
        let was = lim.rlim_cur;
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
        OpsEvent::FileLimit {
            soft_was: was,
            soft: lim.rlim_cur,
            hard: lim.rlim_max,
        }
        .emit();
    }
}

/// Keeps the heap on 4 KiB pages unless `memory.huge_pages` (BRK-1028): mimalloc
/// advises its arenas for transparent huge pages, and a 2 MiB page partly in use is
/// resident whole — at 10,000 subscribers 111 MiB of RSS at peak instead of 77, for an
/// idle broker 18 MiB instead of 9. Sets it for the whole process (`PR_SET_THP_DISABLE`,
/// future page faults), so the `sluice` binary calls it before starting the broker
/// (after [`huge_pages_off_at_load`]); a program that embeds the broker decides for
/// itself.
pub fn set_huge_pages(allowed: bool) {
    let error = thp_disable(!allowed).err().map(|e| e.to_string());
    OpsEvent::HugePages { allowed, error }.emit();
}

/// Turns transparent huge pages off before the runtime's first allocation: the `sluice`
/// binary runs it as a load-time constructor (`.init_array`), since pages the allocator
/// touched before the configuration is read would otherwise be 2 MiB ones (about 5 MiB
/// more for an idle broker). Allocates nothing; a failure is reported by
/// [`set_huge_pages`], which sets the flag again.
pub extern "C" fn huge_pages_off_at_load() {
    let _ = thp_disable(true);
}

/// `prctl(PR_SET_THP_DISABLE, disable)`.
fn thp_disable(disable: bool) -> std::io::Result<()> {
    let zero: libc::c_ulong = 0;
    // SAFETY: prctl takes its arguments as unsigned longs (passed as such: the kernel
    // refuses PR_SET_THP_DISABLE unless arguments 3 to 5 are zero), allocates nothing
    // and only sets or clears a flag on this process's memory descriptor.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_THP_DISABLE,
            libc::c_ulong::from(disable),
            zero,
            zero,
            zero,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Makes any panic, on any thread, log BRK-1012 and abort the process. A shard whose
/// task panicked would otherwise be silently gone (its connections and queues with it)
/// while the rest of the broker goes on; a supervisor (systemd `Restart=on-failure`)
/// restarts a broker that stopped, but nothing restarts one that is half alive. The
/// release profile also sets `panic = "abort"`.
pub fn abort_on_panic() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        let thread = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_string();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string payload".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        OpsEvent::Panic {
            thread,
            message: format!("{message}{at}"),
        }
        .emit();
        std::process::abort();
    }));
}

/// The systemd status line sent with `READY=1`.
fn ready_status(
    config: &Config,
    addresses: &[std::net::SocketAddr],
    tls_addresses: &[std::net::SocketAddr],
) -> String {
    let plain = addresses.iter().map(|a| a.to_string());
    let tls = tls_addresses.iter().map(|a| format!("{a} (TLS)"));
    let listening: Vec<String> = plain.chain(tls).collect();
    format!(
        "ready: {} shards, listening on {}",
        config.shards,
        listening.join(", ")
    )
}

/// Starts all shards and returns once every one accepts connections; then tells systemd
/// (`READY=1`, when `$NOTIFY_SOCKET` is set).
pub fn start(config: Config) -> Result<Broker, StartError> {
    check_cores(&config).map_err(StartError::Config)?;
    let started = crate::timer::clock::os_now();
    // The file's (and the flags') users and permissions; the store's run-time changes
    // are put over them once it is open.
    let file = config.clone();
    let config = Arc::new(config);
    OpsEvent::BrokerStartup {
        version: env!("CARGO_PKG_VERSION"),
        shards: config.shards,
    }
    .emit();
    raise_file_limit();
    let tls = crate::net::tls::load(&config.tls).map_err(StartError::Config)?;
    let (listeners, addresses) =
        crate::net::listener::bind_all(&config.listen, config.shards).map_err(StartError::Bind)?;
    let (tls_listeners, tls_addresses) =
        crate::net::listener::bind_all(&config.tls.listen, config.shards)
            .map_err(StartError::Bind)?;
    // The management and Prometheus listeners are bound here too, before the store is
    // opened (its directory created): a start that fails on an address leaves nothing.
    let http_listener = match config.http.listen {
        Some(addr) => match crate::http::bind(addr) {
            Ok(listener) => Some(listener),
            // The default address taken (another broker's management port): go on
            // without the management listener, and say so.
            Err(e) if config.http.default_listen() && e.kind() == std::io::ErrorKind::AddrInUse => {
                crate::ops::config_event::ConfigEvent::ManagementPortTaken {
                    addr,
                    error: e.to_string(),
                }
                .emit();
                None
            }
            Err(e) => return Err(StartError::Http(addr, e)),
        },
        None => None,
    };
    // The default management address is loopback on both families: [::1] beside
    // 127.0.0.1 (`localhost` may be either). Taken: BRK-1025 as above; no IPv6: none.
    let http_v6_listener = match config.http.listen {
        Some(v4) if config.http.default_listen() => {
            let addr = std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, v4.port()));
            match crate::http::bind(addr) {
                Ok(listener) => Some(listener),
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                    crate::ops::config_event::ConfigEvent::ManagementPortTaken {
                        addr,
                        error: e.to_string(),
                    }
                    .emit();
                    None
                }
                Err(_) => None,
            }
        }
        _ => None,
    };
    let prometheus_listener = match config.http.prometheus_listen {
        Some(addr) => Some(crate::http::bind(addr).map_err(|e| StartError::Prometheus(addr, e))?),
        None => None,
    };
    let (peers, inboxes) = inbox::mesh(
        config.shards,
        config.shard.inbox_capacity,
        config.shard.inbox_bytes,
    );
    let available = crate::shard::memory::available_memory();
    let (low, high) = config.policies.watermarks(available.bytes);
    if low > high {
        return Err(StartError::Config(ConfigError::Invalid {
            key: "memory.low_watermark".into(),
            reason: format!("{low} bytes is above the high watermark, {high} bytes"),
        }));
    }
    OpsEvent::MemoryWatermarks {
        high,
        low,
        available: available.bytes,
        cgroup_file: available.cgroup_file,
    }
    .emit();
    let memory = Arc::new(MemoryBoard::new(config.shards, low, high));
    let store_options = crate::store::StoreOptions {
        data_dir: config.data_dir.clone(),
        shards: config.shards,
        vhosts: config.vhosts.clone(),
        segment_size: config.store.segment_size,
    };
    let mut recovered = crate::store::open(&store_options, crate::shard::placement::home_shard)
        .map_err(StartError::Store)?;
    let overlay = std::mem::take(&mut recovered.access);
    let mut in_force = users_in_force(&file, &overlay);
    in_force.runtime_policies = crate::admin::policy::recovered(&recovered.policies);
    // Every shard's directory starts with the vhosts in force, in this order.
    in_force.vhost_slots = in_force.vhosts.iter().cloned().map(Some).collect();
    let config = Arc::new(in_force);
    let quotas = config
        .vhosts
        .iter()
        .map(|v| (v.clone(), config.policies.vhost(v).store_quota))
        .collect();
    // The disk alarm watches the data dir's file system; the last slot is the
    // definitions log's.
    let free = crate::store::disk_free::DiskFree::new(
        config.data_dir.clone(),
        config.store.disk_free_limit.resolve(available.bytes),
        config.shards + 1,
    );
    free.check();
    let disk = Arc::new(DiskBoard::new(config.shards, quotas, free));
    let changes = Arc::new(recovered.changes);
    let (live, live_rx) = tokio::sync::watch::channel(Arc::clone(&config));
    let limits = Arc::new(crate::limits::ConnectionCounts::new(
        &config.limits.resources,
    ));
    let admin_seed = crate::admin::AdminSeed {
        file,
        overlay,
        in_force: Arc::clone(&config),
        peers: peers.clone(),
        live,
        counts: Arc::clone(&limits),
    };
    let link_credential = if config.federation.is_enabled() {
        Some(Arc::new(
            crate::auth::local_link::LinkCredential::generate().ok_or_else(|| {
                StartError::Config(ConfigError::Invalid {
                    key: "federation".into(),
                    reason: "the OS gave no randomness for the links' local credential".into(),
                })
            })?,
        ))
    } else {
        None
    };
    let mut recovered_shards = recovered.shards.into_iter();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let mut threads = Vec::with_capacity(config.shards);
    let mut tls_listeners = tls_listeners.into_iter();
    for (i, (inbox, listeners)) in inboxes.into_iter().zip(listeners).enumerate() {
        let seed = ShardSeed {
            id: i as u16,
            config: Arc::clone(&config),
            peers: peers.clone(),
            memory: Arc::clone(&memory),
            inbox,
            listeners,
            tls_listeners: tls_listeners.next().unwrap_or_default(),
            tls: tls.clone(),
            core: config.pin_cores.as_ref().and_then(|c| c.get(i).copied()),
            ready: ready_tx.clone(),
            recovered: RecoveredSeed {
                changes: Arc::clone(&changes),
                shard: recovered_shards.next().unwrap_or_default(),
                next_queue_id: recovered.next_queue_id,
                definitions_bytes: recovered.definitions_bytes,
                disk: Arc::clone(&disk),
            },
            limits: Arc::clone(&limits),
            link_credential: link_credential.clone(),
        };
        let handle = std::thread::Builder::new()
            .name(format!("sluice-shard-{i}"))
            .spawn(move || shard_thread::run(seed))
            .map_err(StartError::Thread)?;
        threads.push(handle);
    }
    drop(ready_tx);
    for _ in 0..config.shards {
        if ready_rx.recv().is_err() {
            break;
        }
    }
    for addr in &addresses {
        OpsEvent::BrokerListening { addr: *addr }.emit();
    }
    for addr in &tls_addresses {
        OpsEvent::TlsListening { addr: *addr }.emit();
    }
    // Federation links publish through this broker's own plain listener, on loopback.
    let federation = match (&link_credential, addresses.first()) {
        (Some(credential), Some(addr)) => {
            let local = std::net::SocketAddr::new(
                match addr.ip() {
                    ip if !ip.is_unspecified() => ip,
                    std::net::IpAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                    std::net::IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
                },
                addr.port(),
            );
            let seed = crate::federation::FederationSeed {
                config: Arc::clone(&config),
                peers: peers.clone(),
                local,
                credential: Arc::clone(credential),
            };
            Some(crate::federation::Federation::start(seed).map_err(StartError::Thread)?)
        }
        _ => None,
    };
    let admin = crate::admin::Admin::start(admin_seed).map_err(StartError::Thread)?;
    // The management and Prometheus listeners start once every shard answers its inbox;
    // each has its own thread and its own copy of the handles.
    let context = || crate::http::Context {
        config: Arc::clone(&config),
        live: live_rx.clone(),
        peers: peers.clone(),
        memory: Arc::clone(&memory),
        disk: Arc::clone(&disk),
        started,
        amqp: addresses.clone(),
        amqps: tls_addresses.clone(),
        http: None,
        limits: Arc::clone(&limits),
        federation: federation.as_ref().map(|f| f.handle()),
        admin: admin.handle(),
        rates: crate::http::rates::Board::default(),
    };
    let http = match (http_listener, config.http.listen) {
        (Some(listener), Some(addr)) => match crate::http::start(listener, context()) {
            Ok(server) => Some(server),
            Err(e) => {
                stop_shards(&peers, threads);
                return Err(StartError::Http(addr, e));
            }
        },
        _ => None,
    };
    let http_v6 = match http_v6_listener {
        Some(listener) => match crate::http::start(listener, context()) {
            Ok(server) => Some(server),
            Err(e) => {
                if let Some(http) = http {
                    http.stop();
                }
                stop_shards(&peers, threads);
                let addr = std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 0));
                return Err(StartError::Http(addr, e));
            }
        },
        None => None,
    };
    let prometheus = match (prometheus_listener, config.http.prometheus_listen) {
        (Some(listener), Some(addr)) => match crate::http::start_prometheus(listener, context()) {
            Ok(server) => Some(server),
            Err(e) => {
                for server in [http, http_v6].into_iter().flatten() {
                    server.stop();
                }
                stop_shards(&peers, threads);
                return Err(StartError::Prometheus(addr, e));
            }
        },
        _ => None,
    };
    OpsEvent::BrokerReady.emit();
    notify::ready(&ready_status(&config, &addresses, &tls_addresses));
    Ok(Broker {
        threads,
        peers,
        _data_dir_lock: recovered.lock,
        addresses,
        tls_addresses,
        http,
        http_v6,
        prometheus,
        admin: Some(admin),
        federation,
    })
}

/// A start that failed after the shards started: they are stopped and joined.
fn stop_shards(peers: &inbox::Peers, threads: Vec<std::thread::JoinHandle<std::io::Result<()>>>) {
    for shard in 0..peers.len() {
        peers.send(shard as u16, ShardMsg::Shutdown);
    }
    for t in threads {
        let _ = t.join();
    }
}

impl Broker {
    /// SIGHUP: puts the reloadable sections of `loaded` (the file read again, flags on
    /// top, with the store's run-time changes of users and permissions over it) in force
    /// on every shard and the management thread, and logs what was reloaded (BRK-1018)
    /// and what waits for a restart (BRK-1019); the admin thread does it, after any
    /// change it is applying. A file that cannot be read or is invalid is logged
    /// (BRK-1020) and the running configuration stays. Returns once every shard has the
    /// new configuration; no connection is dropped.
    pub fn reload(&mut self, file: &std::path::Path, loaded: Result<Config, ConfigError>) {
        let loaded = match loaded {
            Ok(loaded) => loaded,
            Err(e) => {
                ConfigEvent::ReloadFailed {
                    error: e.to_string(),
                }
                .emit();
                return;
            }
        };
        if let Some(admin) = &self.admin {
            let _ = admin.handle().reload_blocking(file, loaded);
        }
    }

    /// Asks every shard to close its connections (320) and stop, then joins them.
    pub fn shutdown(mut self) {
        OpsEvent::BrokerShuttingDown.emit();
        notify::stopping("shutting down: closing connections (320 CONNECTION_FORCED)");
        for http in [self.http.take(), self.http_v6.take()]
            .into_iter()
            .flatten()
        {
            http.stop();
        }
        if let Some(prometheus) = self.prometheus.take() {
            prometheus.stop();
        }
        if let Some(admin) = self.admin.take() {
            admin.stop();
        }
        if let Some(federation) = self.federation.take() {
            federation.shutdown();
        }
        for shard in 0..self.peers.len() {
            self.peers.send(shard as u16, ShardMsg::Shutdown);
        }
        for t in self.threads {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!("shard failed: {e}"),
                Err(_) => tracing::error!("shard thread panicked"),
            }
        }
        OpsEvent::BrokerStopped.emit();
    }
}

/// What a signal asks of the broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT or SIGTERM: shut down.
    Stop,
    /// SIGHUP: reload the configuration file (RabbitMQ ignores it; it must not kill).
    Reload,
}

/// The signals [`wait_for_signal`] takes.
fn signal_set() -> libc::sigset_t {
    // SAFETY: plain libc signal-set manipulation on a zeroed sigset_t we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        set
    }
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread (and the threads it starts
/// afterwards), so that [`wait_for_signal`] can take them synchronously and none of
/// them kills the process by its default action.
pub fn block_signals() {
    let set = signal_set();
    // SAFETY: pthread_sigmask reads the set we own.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Waits for SIGINT, SIGTERM or SIGHUP.
pub fn wait_for_signal() -> Signal {
    let set = signal_set();
    loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: sigwait reads the set and writes the received signal into `sig`.
        let rc = unsafe { libc::sigwait(&set, &mut sig) };
        match (rc, sig) {
            (0, libc::SIGHUP) => return Signal::Reload,
            (0, _) => return Signal::Stop,
            // EINTR is not returned by sigwait on Linux; anything else: wait again.
            _ => continue,
        }
    }
}

/// SIGHUP, from `main`: reads the configuration again as at start (defaults, the
/// `--config` file, then the flags) and reloads what can be reloaded.
pub fn reload_signalled(broker: &mut Broker, cli: &crate::config::Cli) {
    let file = cli
        .config
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from("(no --config file)"));
    broker.reload(&file, Config::load(cli));
}

//! Owns: a shard's OS thread — the composition root of one shard: core pinning, the
//! tokio-uring runtime, the shard built from its seed (configuration, peers, boards,
//! recovered store), and the long-lived tasks it runs: accept loops (`net::listener`),
//! the inbox loop (`shard::mailbox`), the housekeeping and deferred-flush loops
//! (`shard::housekeeping`).
//!
//! Does not: contain broker logic; it wires `net` and `shard` together and waits.

use std::rc::Rc;
use std::sync::Arc;

use crate::config::Config;
use crate::model::ids::ShardId;
use crate::ops::event::OpsEvent;
use crate::shard::home::persist::Persistence;
use crate::shard::inbox::{Inbox, Peers};
use crate::shard::memory::MemoryBoard;
use crate::shard::{housekeeping, mailbox, Shard};

/// Everything a shard thread needs.
pub struct ShardSeed {
    pub id: ShardId,
    pub config: Arc<Config>,
    pub peers: Peers,
    pub memory: Arc<MemoryBoard>,
    pub inbox: Inbox,
    pub listeners: Vec<std::net::TcpListener>,
    /// TLS listeners and their settings (`[tls]`), if any.
    pub tls_listeners: Vec<std::net::TcpListener>,
    pub tls: Option<Arc<crate::net::tls::TlsListener>>,
    pub core: Option<usize>,
    /// Told once the shard accepts connections.
    pub ready: std::sync::mpsc::Sender<ShardId>,
    /// What the store recovered for this shard, and what every shard applies.
    pub recovered: RecoveredSeed,
    /// The connection counts every shard shares (`crate::limits`).
    pub limits: Arc<crate::limits::ConnectionCounts>,
    /// The credential of this broker's federation links, if federation runs.
    pub link_credential: Option<Arc<crate::auth::local_link::LinkCredential>>,
}

/// The store's part of a shard's start.
pub struct RecoveredSeed {
    /// The durable definitions, as directory changes (shared by all shards).
    pub changes: Arc<Vec<crate::model::routing::DirectoryChange>>,
    pub shard: crate::store::RecoveredShard,
    pub next_queue_id: u64,
    pub definitions_bytes: u64,
    pub disk: Arc<crate::store::quota::DiskBoard>,
}

/// Pins the calling thread to `core`.
pub fn pin_to_core(core: usize) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write inside it, and
    // sched_setaffinity reads `size_of::<cpu_set_t>()` bytes from it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(core, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The cores this process may run on.
pub fn available_cores() -> Vec<usize> {
    // SAFETY: as above; sched_getaffinity writes at most size_of::<cpu_set_t>() bytes.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Runs a shard on the current thread until it is told to stop.
pub fn run(seed: ShardSeed) -> std::io::Result<()> {
    if let Some(core) = seed.core {
        pin_to_core(core)?;
    }
    let ShardSeed {
        id,
        config,
        peers,
        memory,
        inbox,
        listeners,
        tls_listeners,
        tls,
        core,
        ready,
        recovered,
        limits,
        link_credential,
    } = seed;
    tokio_uring::start(async move {
        let RecoveredSeed {
            changes,
            shard: mut recovered_shard,
            next_queue_id,
            definitions_bytes,
            disk,
        } = recovered;
        let persistence =
            Persistence::recovered(&config, id, &mut recovered_shard, definitions_bytes, disk);
        let shard = Rc::new(Shard::new(
            id,
            config,
            peers,
            memory,
            persistence,
            limits,
            link_credential,
        ));
        crate::shard::home::persist::restore(
            &mut shard.state.borrow_mut(),
            &shard,
            &changes,
            recovered_shard,
            next_queue_id,
        );
        drop(changes);
        for listener in listeners {
            tokio_uring::spawn(crate::net::listener::accept_loop(
                Rc::clone(&shard),
                listener,
                None,
            ));
        }
        if let Some(tls) = &tls {
            for listener in tls_listeners {
                tokio_uring::spawn(crate::net::listener::accept_loop(
                    Rc::clone(&shard),
                    listener,
                    Some(Arc::clone(tls)),
                ));
            }
        }
        tokio_uring::spawn(crate::net::write_pass::run(Rc::clone(&shard)));
        tokio_uring::spawn(crate::net::park::run(Rc::clone(&shard)));
        tokio_uring::spawn(mailbox::inbox_loop(Rc::clone(&shard), inbox));
        tokio_uring::spawn(housekeeping::housekeeping_loop(Rc::clone(&shard)));
        tokio_uring::spawn(housekeeping::deferred_flush_loop(Rc::clone(&shard)));
        OpsEvent::ShardStarted { shard: id, core }.emit();
        let _ = ready.send(id);
        shard.stopped.wait().await;
    });
    Ok(())
}

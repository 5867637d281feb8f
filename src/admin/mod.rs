//! Owns: the configuration in force and every change to it while the broker runs — the
//! file reloaded on SIGHUP, and the users, permissions and vhosts created, changed and
//! deleted over the management API — applied one at a time on its own thread (`sluice-admin`,
//! a current-thread tokio runtime): a run-time change is validated against the
//! configuration in force, written to the store's definitions log by the coordinator
//! (`ShardMsg::PersistRuntime`, answered once synced), put over the file's users and
//! permissions (`config::access`), sent to every shard (`ShardMsg::Reload`, each acked)
//! and only then to the management thread and the caller. So when a change is answered
//! it survives a restart and every shard has it.
//!
//! Does not: parse HTTP or JSON (the management API does), read the file (`server`
//! loads it on SIGHUP and hands it over), or touch a shard's state (the shards apply a
//! reload themselves: refreshed grants, deleted users' connections closed).

mod change;
pub mod policy;

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};

use crate::config::Config;
use crate::limits::ConnectionCounts;
use crate::ops::config_event::ConfigEvent;
use crate::shard::inbox::{Peers, RuntimeRecords, ShardMsg};
use crate::store::access::AccessOverlay;

pub use change::{AccessRequest, AdminError, Changed, NewPassword, USER_LIMITS, VHOST_LIMITS};
pub use policy::PolicyRequest;

/// Requests waiting for the admin thread at most; the management listener's own
/// connection cap bounds the callers, this bounds the queue between.
const INBOX: usize = 64;

enum Request {
    /// The file (with the flags on top) as read again on SIGHUP.
    Reload(
        Box<Config>,
        std::path::PathBuf,
        oneshot::Sender<Arc<Config>>,
    ),
    Access(AccessRequest, oneshot::Sender<Result<Changed, AdminError>>),
    Policy(PolicyRequest, oneshot::Sender<Result<Changed, AdminError>>),
}

/// What the admin thread starts from.
pub struct AdminSeed {
    /// The configuration the file and the flags give (before the store's changes).
    pub file: Config,
    /// The run-time changes recovered from the store.
    pub overlay: AccessOverlay,
    /// The configuration in force (`file` with `overlay` put over it).
    pub in_force: Arc<Config>,
    pub peers: Peers,
    /// Hands the configuration in force to the management thread.
    pub live: watch::Sender<Arc<Config>>,
    /// The connection counts every shard shares: their per-vhost and per-user limits
    /// follow the configuration in force.
    pub counts: Arc<ConnectionCounts>,
}

/// The running admin thread.
pub struct Admin {
    handle: AdminHandle,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How the management thread and `server` reach the admin thread.
#[derive(Clone)]
pub struct AdminHandle {
    tx: mpsc::Sender<Request>,
}

impl Admin {
    pub fn start(seed: AdminSeed) -> std::io::Result<Admin> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (tx, rx) = mpsc::channel(INBOX);
        let thread = std::thread::Builder::new()
            .name("sluice-admin".into())
            .spawn(move || runtime.block_on(serve(seed, rx)))?;
        Ok(Admin {
            handle: AdminHandle { tx },
            thread: Some(thread),
        })
    }

    pub fn handle(&self) -> AdminHandle {
        self.handle.clone()
    }

    /// Stops taking requests and joins the thread (after the one in progress).
    pub fn stop(mut self) {
        drop(self.handle);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl AdminHandle {
    /// Puts the reloadable sections of the file read again in force (logging
    /// BRK-1018/1019) and returns the configuration now in force. Blocks: for the
    /// signal loop, never for a runtime thread.
    pub fn reload_blocking(&self, file: &std::path::Path, loaded: Config) -> Option<Arc<Config>> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .blocking_send(Request::Reload(Box::new(loaded), file.to_path_buf(), tx))
            .ok()?;
        rx.blocking_recv().ok()
    }

    /// Applies a change of users or permissions; answers once it is on disk and in
    /// force on every shard.
    pub async fn access(&self, request: AccessRequest) -> Result<Changed, AdminError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Request::Access(request, tx))
            .await
            .map_err(|_| AdminError::Stopping)?;
        rx.await.map_err(|_| AdminError::Stopping)?
    }

    /// Puts or deletes a policy; answers once it is on disk and every shard's home
    /// queues have it in force.
    pub async fn policy(&self, request: PolicyRequest) -> Result<Changed, AdminError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Request::Policy(request, tx))
            .await
            .map_err(|_| AdminError::Stopping)?;
        rx.await.map_err(|_| AdminError::Stopping)?
    }
}

/// Brings the directory slots in line with the vhosts in force: a new vhost takes the
/// next slot, a deleted one leaves its slot empty (never reused in this run). Returns the
/// slots just emptied.
fn slots_for(slots: &mut Vec<Option<String>>, vhosts: &[String]) -> Vec<usize> {
    let mut closed = Vec::new();
    for (i, slot) in slots.iter_mut().enumerate() {
        if slot.as_ref().is_some_and(|name| !vhosts.contains(name)) {
            *slot = None;
            closed.push(i);
        }
    }
    for name in vhosts {
        if !slots.iter().any(|s| s.as_deref() == Some(name.as_str())) {
            slots.push(Some(name.clone()));
        }
    }
    closed
}

/// The admin thread's state.
struct Authority {
    file: Config,
    overlay: AccessOverlay,
    in_force: Arc<Config>,
    peers: Peers,
    live: watch::Sender<Arc<Config>>,
    counts: Arc<ConnectionCounts>,
}

async fn serve(seed: AdminSeed, mut rx: mpsc::Receiver<Request>) {
    let mut authority = Authority {
        file: seed.file,
        overlay: seed.overlay,
        in_force: seed.in_force,
        peers: seed.peers,
        live: seed.live,
        counts: seed.counts,
    };
    while let Some(request) = rx.recv().await {
        match request {
            Request::Reload(loaded, file, reply) => {
                authority.reload(*loaded, &file).await;
                let _ = reply.send(Arc::clone(&authority.in_force));
            }
            Request::Access(request, reply) => {
                let outcome = authority.access(request).await;
                let _ = reply.send(outcome);
            }
            Request::Policy(request, reply) => {
                let outcome = authority.policy(request).await;
                let _ = reply.send(outcome);
            }
        }
    }
}

impl Authority {
    /// SIGHUP: the file's new users and permissions, with the store's changes over them,
    /// and the other reloadable sections (`config::reload::plan`).
    async fn reload(&mut self, loaded: Config, file: &std::path::Path) {
        let (merged, _) = crate::config::access::overlay(&loaded, &self.overlay);
        let plan = crate::config::reload::plan(&self.in_force, merged);
        self.file = loaded;
        if !plan.applied.is_empty() {
            self.put_in_force(Arc::new(plan.config)).await;
        }
        ConfigEvent::Reloaded {
            file: file.display().to_string(),
            applied: plan.applied.iter().map(|s| s.to_string()).collect(),
        }
        .emit();
        if !plan.restart.is_empty() {
            ConfigEvent::NeedsRestart {
                keys: plan.restart.iter().map(|s| s.to_string()).collect(),
            }
            .emit();
        }
    }

    /// A run-time change: checked, written, then put in force everywhere.
    async fn access(&mut self, request: AccessRequest) -> Result<Changed, AdminError> {
        let acting = request.acting().to_owned();
        let (changes, outcome) = change::plan(&self.in_force, request)?;
        if changes.is_empty() {
            return Ok(outcome);
        }
        self.persist(RuntimeRecords::Access(changes.clone())).await;
        for c in &changes {
            self.overlay.apply(c);
        }
        let (merged, _) = crate::config::access::overlay(&self.file, &self.overlay);
        // A deleted vhost takes its policies with it (as RabbitMQ clears its runtime
        // parameters).
        let deleted: Vec<String> = self
            .in_force
            .vhosts
            .iter()
            .filter(|v| !merged.vhosts.contains(v))
            .cloned()
            .collect();
        let (gone_policies, policies_left) = policy::of_deleted_vhosts(&self.in_force, &deleted);
        if !gone_policies.is_empty() {
            self.persist(RuntimeRecords::Policies(gone_policies)).await;
        }
        let mut config = (*self.in_force).clone();
        config.runtime_policies = policies_left;
        config.users = merged.users;
        config.permissions = merged.permissions;
        let closed = slots_for(&mut config.vhost_slots, &merged.vhosts);
        config.vhosts = merged.vhosts;
        config.vhost_metadata = merged.vhost_metadata;
        config.limits.resources.vhosts = merged.limits.resources.vhosts;
        config.limits.resources.users = merged.limits.resources.users;
        self.put_in_force(Arc::new(config)).await;
        // A deleted vhost is closed everywhere now (no connection, no lookup by name):
        // the coordinator empties it.
        for vhost in closed {
            let (tx, rx) = oneshot::channel();
            let req = crate::shard::inbox::ControlRequest::EmptyVhost { vhost };
            self.peers.send(0, ShardMsg::Control(req, tx));
            let _ = rx.await;
        }
        for c in &changes {
            change::log(c, &acting);
        }
        Ok(outcome)
    }

    /// A policy put or deleted: checked, written, then applied on every shard.
    async fn policy(&mut self, request: PolicyRequest) -> Result<Changed, AdminError> {
        let acting = request.acting().to_owned();
        let planned = policy::plan(&self.in_force, &request)?;
        self.persist(RuntimeRecords::Policies(vec![planned.change.clone()]))
            .await;
        let mut config = (*self.in_force).clone();
        config.runtime_policies = Arc::clone(&planned.set);
        let config = Arc::new(config);
        let changed = self
            .ask_every_shard(|tx| ShardMsg::Policies(Arc::clone(&config), tx))
            .await;
        let queues = changed.iter().sum();
        self.live.send_replace(Arc::clone(&config));
        self.in_force = config;
        policy::log(&planned, &acting, queues);
        Ok(planned.outcome)
    }

    /// Sends every shard the message `make` builds around a reply sender, then waits for
    /// each answer. A shard that stopped drops its sender: nothing to wait for.
    async fn ask_every_shard<T>(&self, make: impl Fn(oneshot::Sender<T>) -> ShardMsg) -> Vec<T> {
        let mut replies = Vec::with_capacity(self.peers.len());
        for shard in 0..self.peers.len() {
            let (tx, rx) = oneshot::channel();
            self.peers.send(shard as u16, make(tx));
            replies.push(rx);
        }
        let mut answers = Vec::with_capacity(replies.len());
        for reply in replies {
            if let Ok(answer) = reply.await {
                answers.push(answer);
            }
        }
        answers
    }

    /// Written to the definitions log by the coordinator; returns once synced (or at
    /// once if shard 0 is gone: the broker is stopping).
    async fn persist(&self, records: RuntimeRecords) {
        let (tx, rx) = oneshot::channel();
        self.peers.send(0, ShardMsg::PersistRuntime(records, tx));
        let _ = rx.await;
    }

    /// Sends `config` to every shard, waits for each, then to the management thread.
    async fn put_in_force(&mut self, config: Arc<Config>) {
        self.ask_every_shard(|tx| ShardMsg::Reload(Arc::clone(&config), tx))
            .await;
        // The shards check max-queues from the configuration they now hold; the
        // connection and channel limits are the shared counts'.
        self.counts.set_limits(&config.limits.resources);
        self.live.send_replace(Arc::clone(&config));
        self.in_force = config;
    }
}

#[cfg(test)]
mod tests {
    use super::slots_for;

    #[test]
    fn slots_are_appended_and_emptied_never_reused() {
        let mut slots = vec![Some("/".to_owned()), Some("a".to_owned())];
        assert_eq!(
            slots_for(&mut slots, &["/".into(), "a".into(), "b".into()]),
            Vec::<usize>::new()
        );
        assert_eq!(slots_for(&mut slots, &["/".into(), "b".into()]), [1]);
        assert_eq!(
            slots_for(&mut slots, &["/".into(), "b".into(), "a".into()]),
            Vec::<usize>::new()
        );
        assert_eq!(
            slots,
            [Some("/".into()), None, Some("b".into()), Some("a".into())]
        );
    }
}

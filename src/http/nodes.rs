//! Owns: what the management API says about this node and the caller — `GET /api/nodes`
//! and `/api/nodes/{name}` (one node: RabbitMQ's fields for memory and its watermark,
//! disk free space and its alarm, file descriptors and sockets against the process's
//! limit, threads, uptime, processors, the process id; read from the boards and from
//! `/proc/self`), `GET /api/cluster-name` (the node name, as a single node's cluster) and
//! `GET /api/whoami` (the authenticated user's name and tags).
//!
//! Does not: ask the shards anything (every figure is posted on the boards or read
//! from the kernel), or change the node name (it is configuration, `[broker]
//! node_name`).

use hyper::{Method, StatusCode};
use serde_json::{json, Value};

use super::{respond, Call, Context, HttpResponse};

/// The exchange types sluice implements, as RabbitMQ's `exchange_types` lists them.
pub const EXCHANGE_TYPES: [(&str, &str); 4] = [
    ("direct", "routing key equals the binding key"),
    ("fanout", "every bound queue"),
    ("headers", "header values match the binding's arguments"),
    ("topic", "dotted routing key matches a `*` / `#` pattern"),
];

/// Routes `GET /api/nodes[/{name}]`, `/api/cluster-name` and `/api/whoami`; `None` for
/// any other request (another method falls through to the caller's 405).
pub async fn route(call: &Call<'_>) -> Option<HttpResponse> {
    if call.method != Method::GET {
        return None;
    }
    let ctx = call.ctx;
    let node = &call.config.node_name;
    Some(match call.path {
        ["nodes"] => ok(&Value::Array(vec![node_json(ctx, call.config)])),
        ["nodes", name] if *name == node.as_str() => ok(&node_json(ctx, call.config)),
        ["nodes", _] => super::object_not_found(),
        ["cluster-name"] => ok(&json!({ "name": node })),
        ["whoami"] => ok(&json!({
            "name": call.user.name,
            "tags": call.user.tags,
            "is_internal_user": true,
        })),
        _ => return None,
    })
}

fn ok(body: &Value) -> HttpResponse {
    respond(StatusCode::OK, "application/json", body.to_string().into())
}

/// One node as RabbitMQ's `/api/nodes` shows it.
pub fn node_json(ctx: &Context, config: &crate::config::Config) -> Value {
    let fds = FdCount::read();
    // SAFETY (both): getrlimit writes one rlimit we own.
    let fd_total = limit(|l| unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, l) });
    let proc_total = match limit(|l| unsafe { libc::getrlimit(libc::RLIMIT_NPROC, l) }) {
        None => threads_max(),
        some => some,
    };
    let processors = std::thread::available_parallelism().map_or(1, |n| n.get());
    json!({
        "name": config.node_name,
        "type": "disc",
        "running": true,
        "os_pid": std::process::id().to_string(),
        // The figure the memory watermark compares (message memory of every shard).
        "mem_used": ctx.memory.used(),
        "mem_limit": ctx.memory.high,
        "mem_alarm": ctx.memory.alarm(),
        "disk_free": ctx.disk.free.free(),
        "disk_free_limit": ctx.disk.free.limit(),
        "disk_free_alarm": ctx.disk.free.alarm(),
        // sluice's store quota (seed 001): the store's size on disk and, per vhost that
        // has a quota, its thresholds and whether its producers are blocked (MST-1008).
        "store_size": ctx.disk.total(),
        "store_quotas": ctx.disk.quotas().map(|(vhost, quota, blocked)| json!({
            "vhost": vhost,
            "overfull_size": quota.overfull,
            "underfull_size": quota.underfull,
            "alarm": blocked,
        })).collect::<Vec<_>>(),
        "fd_used": fds.as_ref().map(|f| f.all),
        "fd_total": fd_total,
        "sockets_used": fds.as_ref().map(|f| f.sockets),
        // Every socket is a descriptor: the open-files limit bounds both.
        "sockets_total": fd_total,
        "proc_used": threads(),
        "proc_total": proc_total,
        "uptime": (ctx.uptime() * 1000.0) as u64,
        "processors": processors,
        "shards": ctx.peers.len(),
        "partitions": [],
        "exchange_types": exchange_types(),
        "auth_mechanisms": auth_mechanisms(ctx),
    })
}

/// `exchange_types` of `/api/nodes` and `/api/overview`.
pub fn exchange_types() -> Vec<Value> {
    EXCHANGE_TYPES
        .iter()
        .map(|(name, description)| {
            json!({ "name": name, "description": description, "enabled": true })
        })
        .collect()
}

fn auth_mechanisms(ctx: &Context) -> Vec<Value> {
    let plain = crate::session::connection::offered_mechanisms(None);
    // EXTERNAL is offered on a TLS listener that verifies client certificates.
    let external = !ctx.amqps.is_empty() && ctx.config.tls.verify_peer;
    plain
        .split(' ')
        .map(|m| (m, true))
        .chain(std::iter::once(("EXTERNAL", external)))
        .map(|(name, enabled)| json!({ "name": name, "enabled": enabled }))
        .collect()
}

/// The open descriptors of this process, and how many of them are sockets.
struct FdCount {
    all: u64,
    sockets: u64,
}

impl FdCount {
    fn read() -> Option<FdCount> {
        let mut count = FdCount { all: 0, sockets: 0 };
        for entry in std::fs::read_dir("/proc/self/fd").ok()? {
            let Ok(entry) = entry else { continue };
            count.all += 1;
            let target = std::fs::read_link(entry.path()).ok();
            if target.is_some_and(|t| t.as_os_str().as_encoded_bytes().starts_with(b"socket:")) {
                count.sockets += 1;
            }
        }
        // The directory's own descriptor, open while it is read, is not the broker's.
        count.all = count.all.saturating_sub(1);
        Some(count)
    }
}

/// The soft limit `get` reads (a `getrlimit`); `None` when unlimited or unreadable.
fn limit(get: impl FnOnce(&mut libc::rlimit) -> libc::c_int) -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    if get(&mut lim) != 0 || lim.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    Some(lim.rlim_cur)
}

/// Threads of this process (`Threads:` in `/proc/self/status`).
fn threads() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

/// The kernel's limit on threads, when the process has none of its own.
fn threads_max() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/threads-max")
        .ok()?
        .trim()
        .parse()
        .ok()
}

//! Checks the module boundaries written in each module's doc ("Does not: …") by scanning
//! `use crate::…` imports and forbidden names. A new import that crosses a boundary fails
//! here, where it is cheap to discuss.

use std::fs;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Lines of non-test code (stops at the first `#[cfg(test)]`).
fn code_lines(path: &Path) -> Vec<String> {
    let text = fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(str::to_owned)
        .collect()
}

/// Every `crate::X` module a file refers to.
fn crate_deps(path: &Path) -> Vec<String> {
    let mut deps = Vec::new();
    for line in code_lines(path) {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && !deps.contains(&name) {
                deps.push(name);
            }
        }
    }
    deps
}

fn check_layer(module: &str, allowed: &[&str]) {
    let dir = src().join(module);
    let files = if dir.is_dir() {
        rust_files(&dir)
    } else {
        vec![src().join(format!("{module}.rs"))]
    };
    assert!(!files.is_empty(), "module {module} not found");
    for file in files {
        for dep in crate_deps(&file) {
            assert!(
                dep == module || allowed.contains(&dep.as_str()),
                "{} uses crate::{dep}, which module '{module}' may not depend on (allowed: {allowed:?})",
                file.display()
            );
        }
    }
}

#[test]
fn dependencies_point_one_way() {
    check_layer("protocol", &[]);
    check_layer("timer", &[]);
    check_layer("policy", &["timer", "protocol"]);
    check_layer("model", &["protocol"]);
    check_layer("queue", &["protocol", "model", "policy"]);
    check_layer("ops", &[]);
    // The store gets its options from the caller (`store::StoreOptions`), not `Config`.
    check_layer("store", &["protocol", "model", "ops"]);
    check_layer(
        "session",
        &["protocol", "model", "queue", "policy", "timer", "auth"],
    );
    // The management listener reaches the broker only through shard inboxes and the
    // boards: never a connection, a queue or a socket of a shard. From `limits` it takes
    // the login throttle's table and the log rate limit (plain values it owns); from
    // `timer` the OS clock's one function (it has no shard clock).
    check_layer(
        "http",
        &[
            "config", "shard", "store", "ops", "protocol", "model", "limits", "timer",
        ],
    );
    // Users and permissions: a leaf the handler and the configuration ask. Its file
    // section is `config::auth`'s, the tools that use it are `cli`'s.
    check_layer("auth", &["protocol"]);
    if src().join("client").is_dir() {
        check_layer("client", &["protocol"]);
    }
}

#[test]
fn no_locks_in_the_broker() {
    for file in rust_files(&src()) {
        if file.components().any(|c| c.as_os_str() == "client") {
            continue;
        }
        // The one exception: the per-source-address connection counts, a striped map
        // locked only when a connection opens or closes and only when
        // limits.connections.per_ip is set (ARCHITECTURE.md, "Limits").
        if file.ends_with("limits/connections.rs") {
            continue;
        }
        for (i, line) in code_lines(&file).iter().enumerate() {
            for forbidden in ["Mutex", "RwLock", "parking_lot"] {
                assert!(
                    !line.contains(forbidden),
                    "{}:{}: '{forbidden}' in broker code; shards share nothing, use a ShardMsg",
                    file.display(),
                    i + 1
                );
            }
        }
    }
}

#[test]
fn runtime_specific_code_stays_at_the_edges() {
    for file in rust_files(&src()) {
        let rel = file
            .strip_prefix(src())
            .unwrap_or(&file)
            .to_string_lossy()
            .into_owned();
        // The other edge is file I/O: the store's files go through io_uring too.
        let allowed = rel.starts_with("net/")
            || rel.starts_with("store/")
            || rel.starts_with("server/")
            || rel == "shard/mailbox.rs"
            || rel == "shard/control.rs"
            || rel == "shard/home/persist.rs"
            || rel == "shard/home/paging.rs";
        if allowed {
            continue;
        }
        for (i, line) in code_lines(&file).iter().enumerate() {
            assert!(
                !line.contains("tokio_uring::"),
                "{rel}:{}: tokio_uring outside net/, store/, server/ and the shard files that spawn tasks",
                i + 1
            );
        }
    }
}

#[test]
fn main_is_only_an_entry_point() {
    let lines = fs::read_to_string(src().join("main.rs")).unwrap_or_default();
    assert!(
        lines.lines().count() < 60,
        "src/main.rs must stay under 60 lines"
    );
}

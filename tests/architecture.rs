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

/// The rows of ARCHITECTURE.md's "Layers" table: each module and the modules it may use.
fn drawn_layers() -> Vec<(String, Vec<String>)> {
    let doc = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md"))
        .unwrap_or_default();
    let Some(start) = doc.find("## Layers") else {
        return Vec::new();
    };
    let names = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    doc[start..]
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| {
            let mut cells = l.split('|').skip(1);
            let module = names(cells.next()?).into_iter().next()?;
            Some((module, names(cells.next()?)))
        })
        .collect()
}

/// Every top-level module of `src/` (a folder or a file), but the binary's entry points.
fn top_modules() -> Vec<String> {
    let mut out = Vec::new();
    for entry in fs::read_dir(src()).into_iter().flatten().flatten() {
        let path = entry.path();
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let module = path.is_dir() || path.extension().is_some_and(|e| e == "rs");
        if module && !["lib", "main", "bin"].contains(&name.as_str()) {
            out.push(name);
        }
    }
    out.sort();
    out
}

#[test]
fn dependencies_point_one_way() {
    let layers = drawn_layers();
    assert!(
        layers.len() >= 10,
        "ARCHITECTURE.md has no Layers table (found {} rows)",
        layers.len()
    );
    for module in top_modules() {
        let Some((_, allowed)) = layers.iter().find(|(m, _)| *m == module) else {
            panic!("src/{module} has no row in ARCHITECTURE.md's Layers table");
        };
        let allowed: Vec<&str> = allowed.iter().map(String::as_str).collect();
        check_layer(&module, &allowed);
    }
}

#[test]
fn the_layers_drawn_have_no_cycle() {
    // A module may only use modules drawn in rows above its own.
    let layers = drawn_layers();
    for (i, (module, allowed)) in layers.iter().enumerate() {
        for dep in allowed {
            assert!(
                layers[..i].iter().any(|(m, _)| m == dep),
                "ARCHITECTURE.md: {module} may use {dep}, which is not drawn below it"
            );
        }
    }
}

#[test]
fn the_queue_side_does_not_reach_connections() {
    for file in rust_files(&src().join("shard").join("home")) {
        for (i, line) in code_lines(&file).iter().enumerate() {
            for forbidden in ["conns::", "ConnSide"] {
                assert!(
                    !line.contains(forbidden),
                    "{}:{}: the queue side names the connection side ('{forbidden}'); hand \
                     it data instead (home::ForConnections, the outbox)",
                    file.display(),
                    i + 1
                );
            }
        }
    }
}

#[test]
fn net_hands_over_to_the_shard_and_returns() {
    for file in rust_files(&src().join("net")) {
        for (i, line) in code_lines(&file).iter().enumerate() {
            for forbidden in [".state.borrow", ".flush()", "wheel", "TimerKey"] {
                assert!(
                    !line.contains(forbidden),
                    "{}:{}: '{forbidden}' in net; the shard owns its turn (shard::turn)",
                    file.display(),
                    i + 1
                );
            }
        }
    }
}

#[test]
fn no_locks_in_the_broker() {
    for file in rust_files(&src()) {
        if file.components().any(|c| c.as_os_str() == "client") {
            continue;
        }
        // The exceptions: the per-source-address connection counts, a striped map
        // locked only when a connection opens or closes and only when
        // limits.connections.per_ip is set (ARCHITECTURE.md, "Limits").
        // The second: the per-vhost and per-user counts, a striped map locked only to
        // find a name's counter when a connection opens, or to change a limit.
        if file.ends_with("limits/connections.rs") || file.ends_with("limits/named.rs") {
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
        // A ring of sluice's own (the write pass's send ring) is the network's alone.
        if !rel.starts_with("net/") {
            for (i, line) in code_lines(&file).iter().enumerate() {
                let raw = line.match_indices("io_uring::").any(|(at, _)| {
                    !line[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                });
                assert!(!raw, "{rel}:{}: a raw io_uring outside net/", i + 1);
            }
        }
        let allowed = rel.starts_with("net/")
            || rel.starts_with("store/")
            || rel.starts_with("server/")
            || rel == "shard/mailbox.rs"
            || rel == "shard/control/own_deletes.rs"
            || rel == "shard/home/persist.rs"
            || rel == "shard/home/paging.rs"
            || rel == "shard/home/stream_io.rs";
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

//! Figures for perf/RESULTS.md ("Limits and login throttling (issue 11)"), printed, not
//! asserted: run with
//! `cargo test --release --test limits measure -- --ignored --nocapture --test-threads 1`.
//! Every loop is bounded in time and count; loopback only.

use std::io::Read;
use std::time::{Duration, Instant};

use super::support::{close, open, open_as, Opened};
use crate::common::raw::RawConn;
use crate::common::Broker;

/// Failed logins answered per second from one address, one client after another, for
/// `window`: without throttling (what the broker did before) and with the defaults.
#[test]
#[ignore = "measurement"]
fn measure_failed_logins_per_second() {
    let window = Duration::from_secs(5);
    let off = "[limits.login]\ninitial_delay_ms = 0\nburst = 0\n";
    for (label, toml, clients) in [
        ("throttling off, 1 client", off, 1),
        (
            "defaults (100 ms doubling to 5 s, burst 20), 1 client",
            "",
            1,
        ),
        ("throttling off, 8 parallel clients", off, 8),
        ("defaults, 8 parallel clients", "", 8),
    ] {
        let broker = Broker::start_with_config(2, toml);
        let started = Instant::now();
        let counts: Vec<(u64, u64)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..clients)
                .map(|_| {
                    s.spawn(|| {
                        let (mut refused, mut dropped) = (0u64, 0u64);
                        while started.elapsed() < window && refused + dropped < 200_000 {
                            match open_as(&broker, "127.0.0.1", "intruder", "guess", "/") {
                                Opened::Refused(403, ..) => refused += 1,
                                Opened::Dropped => dropped += 1,
                                other => panic!("{other:?}"),
                            }
                        }
                        (refused, dropped)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or((0, 0)))
                .collect()
        });
        let refused: u64 = counts.iter().map(|c| c.0).sum();
        let dropped: u64 = counts.iter().map(|c| c.1).sum();
        let secs = started.elapsed().as_secs_f64();
        println!(
            "failed logins, 2 shards, {label}: {refused} answered with 403 in {secs:.1} s ({:.0}/s); {dropped} dropped without a reply ({:.0}/s)",
            refused as f64 / secs,
            dropped as f64 / secs
        );
    }
}

/// Connections opened and closed per second (full handshake, `connection.close`) by 4
/// clients for `window`, without limits and with every connection limit set (high
/// enough never to refuse).
#[test]
#[ignore = "measurement"]
fn measure_reconnect_storm() {
    let window = Duration::from_secs(5);
    let limited = r#"
[limits.connections]
max = 1000000
per_ip = 1000000
unauthenticated_per_shard = 100000
[limits.user."guest"]
max_connections = 1000000
[vhost."/"]
max_connections = 1000000
"#;
    // Interleaved, twice each: the VM is shared, so compare neighbouring runs.
    let runs = [
        ("no limits", ""),
        ("every connection limit set", limited),
        ("no limits", ""),
        ("every connection limit set", limited),
    ];
    for (label, toml) in runs {
        let broker = Broker::start_with_config(2, toml);
        let started = Instant::now();
        let total: u64 = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        let mut n = 0u64;
                        while started.elapsed() < window && n < 500_000 {
                            close(open(&broker).conn());
                            n += 1;
                        }
                        n
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
        });
        let secs = started.elapsed().as_secs_f64();
        println!(
            "reconnect storm, 2 shards, 4 clients, {label}: {total} connections opened and closed in {secs:.1} s ({:.0}/s)",
            total as f64 / secs
        );
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// RSS of the broker holding `SILENT` sockets that never speak, without a cap and with
/// `unauthenticated_per_shard = 1000`, and how many of them the broker kept.
#[test]
#[ignore = "measurement"]
fn measure_silent_sockets() {
    // The open-files limit here is 20,000 for this process and the broker alike.
    const SILENT: usize = 18_000;
    for (label, toml) in [
        ("no cap", ""),
        (
            "unauthenticated_per_shard = 1000",
            "[limits.connections]\nunauthenticated_per_shard = 1000\n",
        ),
    ] {
        let broker = Broker::start_with_config(2, toml);
        std::thread::sleep(Duration::from_millis(500));
        let before = rss_kib(broker.pid());
        let started = Instant::now();
        // Eight threads connect, so that all are open well inside the 10 s handshake
        // deadline (which closes silent sockets).
        let mut socks: Vec<RawConn> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        // connect() without a bind picks ports by the whole 4-tuple,
                        // so it is not starved by earlier runs' TIME_WAIT sockets.
                        (0..SILENT / 8)
                            .map(|_| RawConn::connect(&broker.addr()))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_default())
                .collect()
        });
        let opened_in = started.elapsed();
        std::thread::sleep(Duration::from_millis(500));
        let during = rss_kib(broker.pid());
        let mut kept = 0;
        let mut buf = [0u8; 64];
        for s in &mut socks {
            s.stream.set_nonblocking(true).expect("nonblocking");
            match s.stream.read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => kept += 1,
                _ => {}
            }
        }
        println!(
            "{} silent sockets, 2 shards, {label}: opened in {:.1} s; broker kept {kept}; RSS {} KiB before, {} KiB with them ({} bytes per kept socket)",
            socks.len(),
            opened_in.as_secs_f64(),
            before,
            during,
            (during.saturating_sub(before) * 1024) / (kept.max(1) as u64)
        );
        drop(socks);
    }
}

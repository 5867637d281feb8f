//! The minimal fan-out server (`minimal-fanout`, the floor issue 23 measures sluice
//! against) is only a floor if it does the job: driven by sluice-bench as an embedded
//! process with the wire client, every subscriber gets every message once and in
//! order, with one event-loop thread and with two (publishes handed between threads),
//! at a fixed rate and closed loop. Bounded in time; asserts nothing about speed.

use std::process::Command;

use serde_json::Value;

fn run(name: &str, threads: &str, load: &[&str]) -> Value {
    let dir = std::env::temp_dir().join(format!("minimal-fanout-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("out.json");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice-bench"))
        .arg("fanout")
        .args(load)
        .args(["--embedded", "process", "--broker-bin"])
        .arg(env!("CARGO_BIN_EXE_minimal-fanout"))
        .args([
            "--shards",
            threads,
            "--subscriber-client",
            "wire",
            "--quiet",
        ])
        .args(["--ack", "no-ack", "--duration", "1.5", "--warmup", "0.5"])
        .args(["--drain-timeout", "10", "--settle", "0.2", "--json"])
        .arg(&json)
        .output()
        .expect("run sluice-bench");
    assert!(
        out.status.success(),
        "{name} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    v
}

fn every_message_once_in_order(v: &Value, subscribers: u64) {
    let published = v["published"].as_u64().unwrap();
    assert!(published > 0);
    assert_eq!(v["delivered"].as_u64(), Some(published * subscribers));
    let subs = v["subscribers"].as_array().unwrap();
    assert_eq!(subs.len() as u64, subscribers);
    for s in subs {
        assert_eq!(s["delivered"].as_u64(), Some(published), "{s}");
        assert_eq!(s["gaps"].as_u64(), Some(0), "{s}");
        assert_eq!(s["reordered"].as_u64(), Some(0), "{s}");
        assert!(s["closed_code"].is_null(), "{s}");
    }
}

#[test]
fn one_thread_at_a_fixed_rate() {
    let v = run(
        "one",
        "1",
        &["--subscribers", "200", "--rate", "2000", "--size", "64"],
    );
    every_message_once_in_order(&v, 200);
}

#[test]
fn two_threads_hand_publishes_across() {
    let v = run(
        "two",
        "2",
        &["--subscribers", "200", "--rate", "2000", "--size", "64"],
    );
    every_message_once_in_order(&v, 200);
}

#[test]
fn closed_loop_with_long_passes() {
    let v = run(
        "closed",
        "2",
        &[
            "--subscribers",
            "16",
            "--max-backlog",
            "2000",
            "--size",
            "3000",
        ],
    );
    every_message_once_in_order(&v, 16);
}

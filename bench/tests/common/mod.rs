//! Helpers of the sluice-bench integration tests: run the tool through its real
//! command line against an embedded in-process sluice and read its `--json`.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// Runs a scenario; its summary must contain `delivered/s`.
pub fn run(name: &str, args: &[&str]) -> Value {
    run_expecting(name, args, "delivered/s")
}

/// Runs a scenario (it must succeed, print `in_summary` and plot something) and
/// returns its `--json`.
pub fn run_expecting(name: &str, args: &[&str], in_summary: &str) -> Value {
    let dir = std::env::temp_dir().join(format!("sluice-bench-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("out.json");
    let html = dir.join("out.html");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice-bench"))
        .args(args)
        .args(["--embedded", "inproc", "--quiet", "--shards", "2"])
        .arg("--json")
        .arg(&json)
        .arg("--report")
        .arg(&html)
        .output()
        .expect("run sluice-bench");
    assert!(
        out.status.success(),
        "{name} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(
        summary.contains(in_summary),
        "summary table printed: {summary}"
    );
    let html_text = std::fs::read_to_string(&html).unwrap();
    assert!(
        html_text.contains("<svg") && html_text.contains("<polyline"),
        "plots in the report"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(PathBuf::from(&dir));
    v
}

pub fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing or not a number in {v}"))
}

pub fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64()
        .unwrap_or_else(|| panic!("{k} missing or not a number"))
}

/// Runs the tool expecting it to refuse: its exit code and stderr.
pub fn refused(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice-bench"))
        .args(args)
        .args(["--embedded", "inproc", "--quiet", "--shards", "1"])
        .output()
        .expect("run sluice-bench");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

//! A second broker started on the AMQP port of a running one exits non-zero naming the
//! address, and the first goes on serving every connection.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{wait_until, Broker, TestDir};

crate::shard_tests!(a_second_broker_on_the_same_port_refuses_to_start);

async fn a_second_broker_on_the_same_port_refuses_to_start(shards: usize) {
    let mut first = Broker::start(shards);
    let addr = first.addr();
    let dir = TestDir::new("sluice-second");
    let mut second = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["--listen", &addr, "--http-listen", "off", "--shards", "2"])
        .arg("--data-dir")
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the second sluice");
    let mut status = None;
    wait_until(Duration::from_secs(10), || {
        status = second.try_wait().expect("try_wait");
        status.is_some()
    });
    let Some(status) = status else {
        let _ = second.kill();
        let _ = second.wait();
        panic!("the second broker on {addr} is still running");
    };
    let output = second.wait_with_output().expect("second broker output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(status.code(), Some(1), "stderr: {stderr}\nstdout: {stdout}");
    assert!(
        stderr.contains(&format!(
            "sluice: cannot listen: {addr} is already in use: another process (another sluice?) listens on it"
        )),
        "{stderr}"
    );
    assert!(!stdout.contains("BRK-1004 : Ready"), "{stdout}");
    // Every connection lands on the first broker and is served.
    let mut conns = Vec::new();
    for n in 0..10u16 {
        let mut c = first.raw();
        c.channel_open(1 + n % 3);
        conns.push(c);
    }
    first.assert_healthy();
    drop(conns);
}

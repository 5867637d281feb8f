//! Stored passwords: RabbitMQ-format hashes log in, wrong passwords get today's 403, the
//! plain-text warning, `sluice hash-password`, and start-up errors for bad hashes.

use std::io::Write;
use std::process::{Command, Stdio};

use amqprs::connection::{Connection, OpenConnectionArguments};

use crate::common::{close_amqprs, http, Broker, TestDir};
use crate::login;

/// RabbitMQ's documented example (passwords guide): salt 908DC60A, password "test12".
const TEST12: &str = "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR";
const LOGIN_REFUSED: &str = "ACCESS_REFUSED - Login was refused using authentication \
                             mechanism PLAIN. For details see the broker logfile.";

fn users_config() -> String {
    format!(
        "[auth]\nusers = [{{ name = \"guest\", password = \"guest\", tags = [\"administrator\"] }}, \
         {{ name = \"hashy\", password_hash = \"{TEST12}\" }}, \
         {{ name = \"plain\", password = \"p\" }}]\n"
    )
}

shard_tests!(
    hashed_password_logs_in_and_a_wrong_one_is_refused,
    plaintext_warning_names_the_plaintext_users,
    the_built_in_guest_is_announced_not_warned_about,
    hash_password_output_logs_in,
);

async fn hashed_password_logs_in_and_a_wrong_one_is_refused(shards: usize) {
    let broker = Broker::start_with_config(shards, &users_config());
    let mut c = login(&broker, "hashy", "test12", "/").expect("hashed login");
    c.channel_open(1);
    for wrong in [
        "test13",
        "",
        "TEST12",
        "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR",
    ] {
        let refused = login(&broker, "hashy", wrong, "/").err();
        assert_eq!(
            refused,
            Some((403, LOGIN_REFUSED.to_owned())),
            "password {wrong:?}"
        );
    }
    let args = OpenConnectionArguments::new("127.0.0.1", broker.port(), "hashy", "test12");
    let conn = Connection::open(&args)
        .await
        .expect("amqprs login with a hashed password");
    close_amqprs(conn).await;
    let args = OpenConnectionArguments::new("127.0.0.1", broker.port(), "hashy", "nope");
    assert!(
        Connection::open(&args).await.is_err(),
        "wrong password accepted"
    );
    // The management API's basic auth checks the same stored hash.
    let port = broker.http_port();
    let (ok, bad) = tokio::task::spawn_blocking(move || {
        (
            http::request(port, "GET", "/api/overview", Some(("hashy", "test12"))).status,
            http::request(port, "GET", "/api/overview", Some(("hashy", "test13"))).status,
        )
    })
    .await
    .expect("http requests");
    assert_eq!((ok, bad), (200, 401));
}

async fn plaintext_warning_names_the_plaintext_users(shards: usize) {
    let broker = Broker::start_with_config(shards, &users_config());
    let lines: Vec<String> = broker
        .logs()
        .into_iter()
        .filter(|l| l.contains("BRK-1017"))
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains(
            "BRK-1017 : Plain-text passwords : users 'guest', 'plain' have a plain-text \
             password in the configuration; store password_hash instead (sluice hash-password)"
        ),
        "{lines:?}"
    );
    let hashed_only =
        format!("[auth]\nusers = [{{ name = \"hashy\", password_hash = \"{TEST12}\" }}]\n");
    let broker = Broker::start_with_config(shards, &hashed_only);
    assert!(
        !broker.logs().iter().any(|l| l.contains("BRK-1017")),
        "warning without plain-text users"
    );
}

/// Without `[auth] users` the users are the built-in guest/guest, a password nobody
/// wrote down: no BRK-1017 for it, and BRK-1024 says which file is in use (none here)
/// and that guest may log in from loopback only. With a file, BRK-1024 names it.
async fn the_built_in_guest_is_announced_not_warned_about(shards: usize) {
    let broker = Broker::start(shards);
    assert!(
        !broker.logs().iter().any(|l| l.contains("BRK-1017")),
        "{:#?}",
        broker.logs()
    );
    assert!(
        broker.logs().iter().any(|l| l.ends_with(
            "BRK-1024 : Configuration file : none (built-in defaults and flags) : built-in \
             user 'guest' (password 'guest') may log in from loopback only"
        )),
        "{:#?}",
        broker.logs()
    );
    // A file that does not set users: still the built-in guest, named file.
    let broker = Broker::start_with_config(shards, "[broker]\nnode_name = \"n1\"\n");
    let path = broker.config_path().expect("a file").display().to_string();
    assert!(
        broker.logs().iter().any(|l| l.ends_with(&format!(
            "BRK-1024 : Configuration file : {path} : built-in user 'guest' (password \
             'guest') may log in from loopback only"
        ))),
        "{:#?}",
        broker.logs()
    );
    assert!(!broker.logs().iter().any(|l| l.contains("BRK-1017")));
    // Users from the file: no built-in note, and BRK-1017 for the plain-text ones.
    let broker = Broker::start_with_config(shards, &users_config());
    assert!(
        broker.logs().iter().any(|l| l.ends_with(&format!(
            "BRK-1024 : Configuration file : {}",
            broker.config_path().expect("file").display()
        ))),
        "{:#?}",
        broker.logs()
    );
}

/// `sluice hash-password`, with the password as argument or on stdin.
fn hash_password(arg: Option<&str>, stdin: &str) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.arg("hash-password");
    if let Some(a) = arg {
        cmd.arg(a);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice hash-password");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("hash-password output");
    assert!(
        out.status.success(),
        "{:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        text.ends_with('\n') && text.lines().count() == 1,
        "{text:?}"
    );
    text.trim_end().to_owned()
}

async fn hash_password_output_logs_in(shards: usize) {
    let from_arg = hash_password(Some("s3cret pw"), "");
    let from_stdin = hash_password(None, "piped-pw\n");
    let again = hash_password(Some("s3cret pw"), "");
    assert_ne!(from_arg, again, "a fresh salt each time");
    assert_eq!(from_arg.len(), 48, "base64 of 36 bytes: {from_arg}");
    let config = format!(
        "[auth]\nusers = [{{ name = \"a\", password_hash = \"{from_arg}\" }}, \
         {{ name = \"b\", password_hash = \"{from_stdin}\" }}, \
         {{ name = \"c\", password_hash = \"{again}\", hashing_algorithm = \"rabbit_password_hashing_sha256\" }}]\n"
    );
    let broker = Broker::start_with_config(shards, &config);
    login(&broker, "a", "s3cret pw", "/").expect("a");
    login(&broker, "b", "piped-pw", "/").expect("b (the newline is not part of it)");
    login(&broker, "c", "s3cret pw", "/").expect("c");
    assert!(login(&broker, "b", "piped-pw\n", "/").is_err());
    assert!(login(&broker, "a", "s3cret", "/").is_err());
}

/// `sluice --config FILE` with `users` as the `[auth] users` list: exit status and stderr.
fn start_with_users(users: &str) -> (Option<i32>, String) {
    let dir = TestDir::new("sluice-auth-bad");
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, format!("[auth]\nusers = [{users}]\n")).expect("write config");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.path().join("data"))
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .output()
        .expect("run sluice");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_stored_passwords_stop_the_broker_naming_the_user() {
    let (code, err) = start_with_users("{ name = \"eve\", password_hash = \"AAAA\" }");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("auth.users (user 'eve'): password_hash decodes to 3 bytes"),
        "{err}"
    );
    let (code, err) = start_with_users(&format!(
        "{{ name = \"old\", password_hash = \"{TEST12}\", hashing_algorithm = \"rabbit_password_hashing_md5\" }}"
    ));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("auth.users (user 'old'): rabbit_password_hashing_md5 is not accepted"),
        "{err}"
    );
    let (code, err) = start_with_users(&format!(
        "{{ name = \"two\", password = \"x\", password_hash = \"{TEST12}\" }}"
    ));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("auth.users (user 'two'): give either password or password_hash, not both"),
        "{err}"
    );
}

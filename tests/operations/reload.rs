//! SIGHUP: the broker stays up, reloads users, passwords and permissions from its file
//! (BRK-1018), says what needs a restart (BRK-1019), keeps every open connection, and
//! keeps its configuration when the file is broken (BRK-1020).

use crate::common::raw::Tune;
use crate::common::wire::m;
use crate::common::{http, Broker, RawConn, EVENT_TIMEOUT};

const LOGIN_REFUSED: &str = "ACCESS_REFUSED - Login was refused using authentication \
                             mechanism PLAIN. For details see the broker logfile.";

crate::shard_tests!(sighup_reloads_users_and_keeps_connections);

/// Logs in with PLAIN and opens `/`: the open connection, or the close's code and text.
fn login(broker: &Broker, user: &str, password: &str) -> Result<RawConn, (u16, String)> {
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    c.send_start_ok("PLAIN", format!("\0{user}\0{password}").as_bytes());
    let mth = c.read_method().expect("tune or close");
    if mth.id == m::CONNECTION_CLOSE {
        let mut d = mth.dec();
        return Err((d.short(), d.shortstr()));
    }
    assert_eq!(mth.id, m::CONNECTION_TUNE, "expected connection.tune");
    c.send_tune_ok(Tune {
        channel_max: 2047,
        frame_max: 131072,
        heartbeat: 0,
    });
    c.send_open("/");
    c.expect_method(0, m::CONNECTION_OPEN_OK);
    Ok(c)
}

fn users(app_password: &str, extra: &str) -> String {
    format!(
        "[auth]\nusers = [{{ name = \"guest\", password = \"guest\", tags = [\"administrator\"] }}, \
         {{ name = \"app\", password = \"{app_password}\" }}{extra}]\n"
    )
}

fn count(broker: &Broker, needle: &str) -> usize {
    broker.logs().iter().filter(|l| l.contains(needle)).count()
}

fn wait_count(broker: &Broker, needle: &str, n: usize) {
    assert!(
        crate::common::wait_until(EVENT_TIMEOUT, || count(broker, needle) >= n),
        "no {n}th line with {needle:?}; log:\n{}",
        broker.logs().join("\n")
    );
}

async fn sighup_reloads_users_and_keeps_connections(shards: usize) {
    let mut broker = Broker::start_with_config(shards, &users("old", ""));
    let file = broker.config_path().expect("config file").to_path_buf();
    let mut before = login(&broker, "app", "old").expect("app logs in with the old password");
    before.channel_open(1);
    assert_eq!(
        login(&broker, "new", "fresh").err(),
        Some((403, LOGIN_REFUSED.to_owned()))
    );

    // A new password for app, a new user, and a change that needs a restart.
    let changed = format!(
        "[limits]\nframe_max = 65536\n{}",
        users("newer", ", { name = \"new\", password = \"fresh\" }")
    );
    std::fs::write(&file, changed).expect("rewrite config");
    broker.signal(libc::SIGHUP);
    wait_count(&broker, "BRK-1018 : Configuration reloaded : ", 1);
    let reloaded = broker
        .wait_for_log("BRK-1018", EVENT_TIMEOUT)
        .expect("BRK-1018");
    assert!(
        reloaded.ends_with(&format!(
            "BRK-1018 : Configuration reloaded : {} : auth.users in force for new logins and declarations",
            file.display()
        )),
        "{reloaded}"
    );
    let restart = broker
        .wait_for_log("BRK-1019", EVENT_TIMEOUT)
        .expect("BRK-1019");
    assert!(
        restart.ends_with(
            "BRK-1019 : Configuration change needs a restart : limits : the running values stay"
        ),
        "{restart}"
    );
    broker.assert_healthy();
    assert_eq!(count(&broker, "BRK-1003"), 0, "SIGHUP began a shutdown");

    let mut new = login(&broker, "new", "fresh").expect("the added user logs in");
    new.channel_open(1);
    assert_eq!(
        login(&broker, "app", "old").err(),
        Some((403, LOGIN_REFUSED.to_owned())),
        "the old password still works"
    );
    login(&broker, "app", "newer").expect("the new password logs in");
    // The management API checks the same reloaded users.
    let port = broker.http_port();
    let (new_user, old_password) = tokio::task::spawn_blocking(move || {
        let get = |u, p| http::request(port, "GET", "/api/overview", Some((u, p))).status;
        (get("new", "fresh"), get("app", "old"))
    })
    .await
    .expect("http requests");
    assert_eq!((new_user, old_password), (200, 401));
    // The connection opened before the reload is still served.
    before.channel_open(2);
    // frame_max waits for a restart: still offered as at start.
    let mut c = RawConn::connect(&broker.addr());
    let tune = c.handshake();
    assert_eq!(tune.frame_max, 131_072);

    // A broken file: logged, ignored, the broker and its users stay.
    std::fs::write(&file, "[auth\nusers = 1\n").expect("break config");
    broker.signal(libc::SIGHUP);
    let failed = broker
        .wait_for_log("BRK-1020", EVENT_TIMEOUT)
        .expect("BRK-1020");
    assert!(
        failed.contains("BRK-1020 : Configuration reload failed : config file ")
            && failed.ends_with(" : the running configuration stays"),
        "{failed}"
    );
    broker.assert_healthy();
    login(&broker, "new", "fresh").expect("the reloaded user survives a broken file");
    before.channel_open(3);
    new.channel_open(2);
    assert_eq!(count(&broker, "BRK-1018"), 1);
    assert_eq!(broker.stop().code(), Some(0));
}

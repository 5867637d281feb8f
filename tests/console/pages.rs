//! The console's pages in a browser: logging in (a wrong password is refused on the
//! page, without the browser's own dialog), a queue declared over AMQP found through the
//! queue list's filter with its depth, purging it and closing a connection (with a
//! reason its client is told) from the page, a user declared on the admin page
//! logging in over AMQP, and definitions exported and imported there.

use amqprs::connection::OpenConnectionArguments;

use crate::browser::Browser;
use crate::common::broker::connect_to;
use crate::common::{eventually, http, unique, Broker, Event, EVENT_TIMEOUT};

use crate::browser_test;

browser_test!(login_is_checked_and_shows_the_node, 1);
browser_test!(a_queue_declared_over_amqp_appears_with_its_depth, 2);
browser_test!(purge_a_queue_and_close_a_connection_from_the_page, 1);
browser_test!(a_user_declared_on_the_admin_page_logs_in_over_amqp, 1);

async fn login_is_checked_and_shows_the_node(broker: &Broker, b: &Browser) {
    b.login("guest", "wrong").await;
    b.wait_text("#login-message", |t| t.contains("Login failed"))
        .await;
    b.login("guest", "guest").await;
    let port = broker.http_port();
    let overview = tokio::task::spawn_blocking(move || http::get(port, "/api/overview"))
        .await
        .expect("overview")
        .json();
    let node = overview["node"].as_str().expect("node name").to_owned();
    b.wait_text("#ov-node", |t| t.starts_with(&node)).await;
    b.wait_text("#who", |t| t.contains("guest")).await;
    // Logging out forgets the credentials: the login form is back.
    b.click("#logout").await;
    b.find("#login-user").await;
}

async fn a_queue_declared_over_amqp_appears_with_its_depth(broker: &Broker, b: &Browser) {
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let queue = unique("console-depth");
    ch.declare_queue(&queue).await;
    for _ in 0..3 {
        ch.publish("", &queue, b"hello").await;
    }
    ch.wait_message_count(&queue, 3).await;
    b.login("guest", "guest").await;
    b.find("#ov-node").await;
    b.goto("#/queues").await;
    b.fill("#queue-filter", &queue).await;
    let row = b
        .wait_text("#queue-list tbody", |t| t.contains(&queue))
        .await;
    let line = row.lines().find(|l| l.contains(&queue)).unwrap_or_default();
    assert!(
        line.split_whitespace().any(|w| w == "3"),
        "the queue's row shows 3 messages: {line}"
    );
    // The queue's own page, opened from its row.
    b.click("#queue-list tbody a").await;
    b.wait_text("#queue-name", |t| t == queue).await;
    b.wait_text("#q-messages", |t| t.starts_with('3')).await;
    conn.close().await;
}

async fn purge_a_queue_and_close_a_connection_from_the_page(broker: &Broker, b: &Browser) {
    let args = broker.amqprs_args();
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let queue = unique("console-purge");
    ch.declare_queue(&queue).await;
    for _ in 0..5 {
        ch.publish("", &queue, b"x").await;
    }
    ch.wait_message_count(&queue, 5).await;
    b.login("guest", "guest").await;
    b.find("#ov-node").await;
    b.goto(&format!("#/queues/%2F/{queue}")).await;
    b.wait_text("#q-messages", |t| t.starts_with('5')).await;
    b.click("#purge").await;
    b.accept_confirm().await;
    assert!(
        eventually(EVENT_TIMEOUT, || async {
            ch.message_count(&queue).await == 0
        })
        .await,
        "the purge from the page emptied the queue"
    );
    b.wait_text("#q-messages", |t| t.starts_with('0')).await;

    // A connection with a name of its own, closed from the connections page.
    let name = unique("console-victim");
    let mut victim_args = args.clone();
    victim_args.connection_name(&name);
    let mut victim = connect_to(&victim_args).await;
    b.goto("#/connections").await;
    b.wait_text("#connection-list tbody", |t| t.contains(&name))
        .await;
    // A reason a browser cannot put in a header is refused on the page, and the
    // connection stays open.
    b.fill("#close-reason", "fermé par la console").await;
    click_close_in_row(b, &name).await;
    b.accept_confirm().await;
    b.wait_text("#toast", |t| t.contains("printable ASCII"))
        .await;
    // Still listed: still open.
    b.wait_text("#connection-list tbody", |t| t.contains(&name))
        .await;
    b.fill("#close-reason", "closed by the console test").await;
    click_close_in_row(b, &name).await;
    b.accept_confirm().await;
    loop {
        match crate::common::next_event(&mut victim.events).await {
            Event::ConnectionClose { code, text } => {
                assert_eq!(code, 320, "{text}");
                assert!(text.contains("closed by the console test"), "{text}");
                break;
            }
            _ => continue,
        }
    }
    b.wait_text("#connection-list tbody", |t| !t.contains(&name))
        .await;
    conn.close().await;
}

/// Clicks the close button in the connections list's row that names `name`.
async fn click_close_in_row(b: &Browser, name: &str) {
    let row_button = format!(
        "//*[@id='connection-list']//tr[contains(., '{name}')]//button[contains(@class, 'close-connection')]"
    );
    b.click_at(fantoccini::Locator::XPath(&row_button)).await;
}

async fn a_user_declared_on_the_admin_page_logs_in_over_amqp(broker: &Broker, b: &Browser) {
    let port = broker.port();
    let user = unique("console-user");
    b.login("guest", "guest").await;
    b.find("#ov-node").await;
    b.goto("#/admin").await;
    b.wait_text("#users-list", |t| t.contains("guest")).await;
    b.fill("#add-user input[name=name]", &user).await;
    b.fill("#add-user input[name=password]", "s3cret").await;
    b.fill("#add-user input[name=tags]", "monitoring").await;
    b.click("#add-user button").await;
    b.wait_text("#users-list", |t| t.contains(&user)).await;
    b.fill("#set-permission input[name=user]", &user).await;
    b.click("#set-permission button").await;
    b.wait_text("#permissions-list", |t| t.contains(&user))
        .await;
    let args = OpenConnectionArguments::new("127.0.0.1", port, &user, "s3cret");
    let conn = connect_to(&args).await;
    let ch = conn.channel().await;
    let queue = unique("console-user-q");
    ch.declare_queue(&queue).await;
    conn.close().await;
    // Definitions: exported (a download), and imported from the page.
    b.click("#export-definitions").await;
    b.wait_text("#toast", |t| t.contains("export definitions: done"))
        .await;
    let vhost = unique("console-imported");
    b.fill(
        "#import-text",
        &format!("{{\"vhosts\": [{{\"name\": \"{vhost}\"}}]}}"),
    )
    .await;
    b.click("#import-definitions").await;
    b.wait_text("#vhosts-list", |t| t.contains(&vhost)).await;
    // The new user logs in to the console too (its monitoring tag lets it read).
    b.click("#logout").await;
    b.login(&user, "s3cret").await;
    b.wait_text("#who", |t| t.contains(&user)).await;
    b.find("#ov-node").await;
}

//! Exchanges, bindings and policies from the console: an exchange declared on the page,
//! a queue bound to it and a message published through it from the page, seen over
//! AMQP, then unbound and deleted; a policy set on the admin page taking effect on a
//! queue over AMQP, and deleted from the page; and a script error shown by the page
//! (what every test checks at its end).

use crate::browser::Browser;
use crate::browser_test;
use crate::common::{eventually, http, unique, Broker, EVENT_TIMEOUT};

browser_test!(
    an_exchange_is_declared_bound_and_published_to_from_the_page,
    1
);
browser_test!(a_policy_set_on_the_admin_page_applies_over_amqp, 1);
browser_test!(a_script_error_is_shown_on_the_page, 1);

/// The status of `GET path` as guest.
async fn status(broker: &Broker, path: &str) -> u16 {
    let (port, path) = (broker.http_port(), path.to_owned());
    tokio::task::spawn_blocking(move || http::get(port, &path).status)
        .await
        .expect("request")
}

async fn an_exchange_is_declared_bound_and_published_to_from_the_page(
    broker: &Broker,
    b: &Browser,
) {
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let queue = unique("console-bound");
    ch.declare_queue(&queue).await;
    let exchange = unique("console-x");
    b.login("guest", "guest").await;
    b.find("#ov-node").await;
    b.goto("#/exchanges").await;
    b.fill("#declare-exchange input[name=name]", &exchange)
        .await;
    b.click("#declare-exchange button").await;
    let path = format!("/api/exchanges/%2F/{exchange}");
    assert!(
        eventually(EVENT_TIMEOUT, || async {
            status(broker, &path).await == 200
        })
        .await,
        "the exchange declared on the page exists"
    );
    b.goto(&format!("#/exchanges/%2F/{exchange}")).await;
    b.fill("#bind-form input[name=destination]", &queue).await;
    b.fill("#bind-form input[name=routing_key]", "k").await;
    b.click("#bind-form button").await;
    b.wait_text("#exchange-live", |t| t.contains(&queue)).await;
    b.fill(".publish-form input[name=routing_key]", "k").await;
    b.fill(".publish-form textarea[name=payload]", "from the page")
        .await;
    b.click(".publish-form button").await;
    let got = ch.get_eventually(&queue, true).await;
    assert_eq!(got.2, b"from the page");
    // Unbind from the page, then delete the exchange.
    b.click_at(fantoccini::Locator::XPath(
        "//div[@id='exchange-live']//button[text()='Unbind']",
    ))
    .await;
    b.wait_text("#exchange-live", |t| !t.contains(&queue)).await;
    b.click("#delete-exchange").await;
    b.accept_confirm().await;
    assert!(
        eventually(EVENT_TIMEOUT, || async {
            status(broker, &path).await == 404
        })
        .await,
        "the exchange deleted on the page is gone"
    );
    conn.close().await;
}

async fn a_policy_set_on_the_admin_page_applies_over_amqp(broker: &Broker, b: &Browser) {
    b.login("guest", "guest").await;
    b.find("#ov-node").await;
    b.goto("#/admin").await;
    b.wait_text("#policies-list", |t| t.contains("definition"))
        .await;
    let queue = unique("console-policy");
    b.fill("#set-policy input[name=name]", "console-max-length")
        .await;
    b.fill("#set-policy input[name=pattern]", &format!("^{queue}$"))
        .await;
    b.fill("#set-policy input[name=definition]", "{\"max-length\": 2}")
        .await;
    b.click("#set-policy button").await;
    b.wait_text("#policies-list", |t| t.contains("console-max-length"))
        .await;
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    ch.declare_queue(&queue).await;
    for _ in 0..5 {
        ch.publish("", &queue, b"p").await;
    }
    assert!(
        eventually(EVENT_TIMEOUT, || async {
            ch.message_count(&queue).await == 2
        })
        .await,
        "the policy's max-length holds the queue at 2"
    );
    b.goto(&format!("#/queues/%2F/{queue}")).await;
    b.wait_text("#queue-live", |t| t.contains("console-max-length"))
        .await;
    b.goto("#/admin").await;
    b.click_at(fantoccini::Locator::XPath(
        "//section[@id='policies']//tr[contains(., 'console-max-length')]//button",
    ))
    .await;
    b.accept_confirm().await;
    assert!(
        eventually(EVENT_TIMEOUT, || async {
            status(broker, "/api/policies/%2F/console-max-length").await == 404
        })
        .await,
        "the policy deleted on the page is gone"
    );
    conn.close().await;
}

async fn a_script_error_is_shown_on_the_page(_broker: &Broker, b: &Browser) {
    b.login("guest", "guest").await;
    b.find("#ov-node").await;
    b.client
        .execute(
            "window.dispatchEvent(new ErrorEvent('error', { message: 'deliberate' })); return null;",
            vec![],
        )
        .await
        .expect("run a script");
    b.wait_text("#script-error", |t| t.contains("deliberate"))
        .await;
    // Taken away, so that the end-of-test check passes for the right reason.
    b.client
        .execute(
            "document.getElementById('script-error').remove(); return null;",
            vec![],
        )
        .await
        .expect("remove the banner");
    b.assert_no_script_error().await;
}

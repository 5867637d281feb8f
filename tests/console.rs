//! The web console (`/` on the management listener) in a real browser: a headless
//! Chromium driven over WebDriver (`console/browser.rs`) against a child broker, doing
//! what an operator does — logging in, finding a queue declared over AMQP with its depth,
//! purging it and closing a connection from the page, declaring a user on the admin page
//! and logging in with it over AMQP, watching a slow subscriber rise to the top of
//! "subscriptions at risk" and a held publisher's flow state (`console/pages.rs`,
//! `console/risk.rs`), declaring, binding and publishing to an exchange and setting a
//! policy (`console/topology.rs`), seeing a stream reader's lag (`console/streams.rs`) —
//! and the static files' caching headers over plain
//! HTTP (`console/assets.rs`). `console/screenshots.rs` saves a PNG of each page. Every
//! browser test ends by checking that the page showed no script error.
//!
//! Without Chromium and chromedriver installed the browser tests say so and pass; with
//! `CI=true` they fail instead.

mod common;

#[path = "console/assets.rs"]
mod assets;
#[path = "console/browser.rs"]
mod browser;
#[path = "console/pages.rs"]
mod pages;
#[path = "console/risk.rs"]
mod risk;
#[path = "console/screenshots.rs"]
mod screenshots;
#[path = "console/streams.rs"]
mod streams;
#[path = "console/topology.rs"]
mod topology;

use std::time::Duration;

/// Upper bound for one browser test (a browser's start is most of it).
pub const BROWSER_TEST_TIMEOUT: Duration = Duration::from_secs(90);

/// One browser at a time in this binary: each is a few processes, and the machine's
/// cores are shared with the broker under test.
pub static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Generates `#[tokio::test] fn $name` running `async fn $name(&Broker, &Browser)` on a
/// fresh broker with `$shards` shards (and `$config` as its configuration file, if
/// given) and a fresh browser, bounded by [`BROWSER_TEST_TIMEOUT`]; it returns at once
/// (after saying so) where no browser is installed.
#[macro_export]
macro_rules! browser_test {
    ($name:ident, $shards:expr) => {
        $crate::browser_test!($name, $shards, None);
    };
    ($name:ident, $shards:expr, $config:expr) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn in_chromium() {
                {
                    #[allow(unused_imports)]
                    use super::*;
                    $crate::run_in_browser($shards, $config, super::$name).await
                }
            }
        }
    };
}

/// The body of every [`browser_test!`].
pub async fn run_in_browser(
    shards: usize,
    config: Option<&str>,
    body: impl AsyncFn(&common::Broker, &browser::Browser),
) {
    let _one = ONE_BROWSER.lock().await;
    common::bounded_for(BROWSER_TEST_TIMEOUT, async {
        let broker = match config {
            Some(toml) => common::Broker::start_with_config(shards, toml),
            None => common::Broker::start(shards),
        };
        let Some(browser) = browser::Browser::open(broker.http_port()).await else {
            return;
        };
        body(&broker, &browser).await;
        browser.close().await;
    })
    .await;
}

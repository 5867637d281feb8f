//! A headless Chromium driven over WebDriver (`chromedriver`, started here on a free
//! loopback port in a process group of its own, killed by that group's id on drop) with
//! the fantoccini client, pointed at one broker's management listener.
//!
//! Where Chromium or chromedriver is not installed, [`Browser::open`] says so and
//! returns `None` (the test then returns); with `CI=true` a missing browser fails the
//! test instead, so CI never passes by skipping.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};

/// How long a page may take to show what a test waits for.
pub const PAGE_TIMEOUT: Duration = Duration::from_secs(15);

/// One browser tab over one broker's console.
pub struct Browser {
    pub client: Client,
    base: String,
    _driver: Driver,
}

/// The first of `names` found on PATH.
fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| p.is_file())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Browser {
    /// A headless Chromium on the console of the broker whose management listener is
    /// `http_port`; `None` (after saying why) where no browser is installed, unless CI.
    pub async fn open(http_port: u16) -> Option<Browser> {
        let chromium = on_path(&["chromium", "chromium-browser", "google-chrome"]);
        let driver = on_path(&["chromedriver"]);
        let (Some(chromium), Some(driver)) = (chromium, driver) else {
            let why = "Chromium and chromedriver are not both installed \
                       (apt-get install chromium chromium-driver)";
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("CI=true and {why}: the console's browser tests must run");
            }
            eprintln!("skipping the console's browser test: {why}");
            return None;
        };
        let port = free_port();
        let mut cmd = Command::new(driver);
        cmd.arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // Its own process group: chromedriver and the browsers it starts end together.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().expect("spawn chromedriver");
        let url = format!("http://127.0.0.1:{port}");
        let caps = serde_json::json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,1000",
                         "--no-first-run", "--disable-extensions"],
            },
        });
        let serde_json::Value::Object(caps) = caps else {
            unreachable!("an object literal")
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(c) => break c,
                Err(e) if Instant::now() < deadline => {
                    if let Ok(Some(status)) = child.try_wait() {
                        panic!("chromedriver exited ({status}): {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("no WebDriver session on {url}: {e}"),
            }
        };
        Some(Browser {
            client,
            base: format!("http://127.0.0.1:{http_port}/"),
            _driver: Driver(child),
        })
    }

    /// Opens the console at `hash` (`#/queues`, ...).
    pub async fn goto(&self, hash: &str) {
        self.client
            .goto(&format!("{}{hash}", self.base))
            .await
            .expect("navigate");
    }

    /// Loads the console and logs in through its login form.
    pub async fn login(&self, user: &str, password: &str) {
        self.goto("#/").await;
        self.fill("#login-user", user).await;
        self.fill("#login-password", password).await;
        self.click("#login-submit").await;
    }

    /// The element `css` once it exists.
    pub async fn find(&self, css: &str) -> Element {
        self.client
            .wait()
            .at_most(PAGE_TIMEOUT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element {css}: {e}"))
    }

    /// Replaces the value of the input `css` with `text`.
    pub async fn fill(&self, css: &str, text: &str) {
        let input = self.find(css).await;
        input.clear().await.expect("clear input");
        input.send_keys(text).await.expect("type into input");
    }

    pub async fn click(&self, css: &str) {
        self.click_at(Locator::Css(css)).await;
    }

    /// Clicks the element `locator` finds, finding it again when the page redrew it
    /// between the find and the click (a live page re-renders its lists on every
    /// refresh, and a handle to the old element is then stale).
    pub async fn click_at(&self, locator: Locator<'_>) {
        let deadline = Instant::now() + PAGE_TIMEOUT;
        loop {
            let element = self
                .client
                .wait()
                .at_most(PAGE_TIMEOUT)
                .for_element(locator)
                .await
                .unwrap_or_else(|e| panic!("no element {locator:?}: {e}"));
            match element.click().await {
                Ok(_) => return,
                Err(e) if e.is_stale_element_reference() && Instant::now() < deadline => continue,
                Err(e) => panic!("click {locator:?}: {e}"),
            }
        }
    }

    /// Accepts the page's `confirm()` once it is open.
    pub async fn accept_confirm(&self) {
        let deadline = Instant::now() + PAGE_TIMEOUT;
        while self.client.accept_alert().await.is_err() {
            assert!(Instant::now() < deadline, "no confirm dialog opened");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the text of `css` satisfies `ok`; returns it (fails with the last
    /// text seen).
    pub async fn wait_text(&self, css: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PAGE_TIMEOUT;
        let mut last = String::from("(no element)");
        loop {
            if let Ok(el) = self.client.find(Locator::Css(css)).await {
                if let Ok(text) = el.text().await {
                    if ok(&text) {
                        return text;
                    }
                    last = text;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{css} never showed what was expected; last: {last}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A PNG of the window.
    pub async fn screenshot(&self) -> Vec<u8> {
        self.client.screenshot().await.expect("screenshot")
    }

    /// Fails the test if the console showed a script error (its `#script-error`
    /// banner: an exception or a rejected promise nothing handled).
    pub async fn assert_no_script_error(&self) {
        if let Ok(banner) = self.client.find(Locator::Css("#script-error")).await {
            let text = banner.text().await.unwrap_or_default();
            panic!("the console showed a script error: {text}");
        }
    }

    /// Checks that no script error was shown, then ends the WebDriver session (the
    /// browser exits); chromedriver ends on drop.
    pub async fn close(self) {
        self.assert_no_script_error().await;
        let _ = self.client.close().await;
    }
}

/// Kills chromedriver's process group (its id is the chromedriver we started) when the
/// browser is dropped, whether the test ended or panicked.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        if let Ok(pgid) = i32::try_from(self.0.id()) {
            // SAFETY: kill only sends a signal, to the group this test started.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
        let _ = self.0.wait();
    }
}

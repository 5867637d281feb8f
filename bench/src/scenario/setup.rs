//! Owns: the tool's connections to the broker — their options (no heartbeats, a
//! connection name, the publishers' flow-control settings) — and the short-lived
//! set-up and clean-up connections that declare exchanges and queues.
//! Does not: publish or consume.

use std::sync::OnceLock;

use sluice::client::{
    ClientError, Connection, ConnectionOptions, ExchangeDeclareOptions, FlowOptions,
    QueueDeclareOptions, TlsOptions,
};
use sluice::protocol::FieldTable;

/// The client's defaults, read once (`ConnectionOptions::default` reads the
/// flow-control environment variables, which would log a bad value per connection).
fn defaults() -> &'static ConnectionOptions {
    static DEFAULTS: OnceLock<ConnectionOptions> = OnceLock::new();
    DEFAULTS.get_or_init(|| ConnectionOptions {
        tls: TLS.get().cloned(),
        ..ConnectionOptions::default()
    })
}

/// Trust roots for amqps:// URLs (`--tls-ca`), set once before any connection.
static TLS: OnceLock<TlsOptions> = OnceLock::new();

/// Makes every connection of the tool trust `tls` for amqps:// URLs.
pub fn use_tls(tls: TlsOptions) {
    let _ = TLS.set(tls);
}

/// Connects with the tool's options. `flow` and `command_queue` (commands that may
/// wait for the socket; 0 = the client's default) matter for publishers only.
pub async fn connect(
    url: &str,
    name: &str,
    flow: FlowOptions,
    command_queue: usize,
) -> Result<Connection, ClientError> {
    let base = defaults();
    let opts = ConnectionOptions {
        name: Some(name.into()),
        heartbeat: 0,
        flow,
        command_queue: if command_queue == 0 {
            base.command_queue
        } else {
            command_queue
        },
        ..base.clone()
    };
    Connection::connect_with(url, opts).await
}

/// Connects a connection that never publishes.
pub async fn connect_plain(url: &str, name: &str) -> Result<Connection, ClientError> {
    connect(url, name, defaults().flow, 0).await
}

/// Declares an exchange on a short-lived connection.
pub async fn declare_exchange(
    url: &str,
    name: &str,
    kind: &str,
    durable: bool,
) -> Result<(), ClientError> {
    let conn = connect_plain(url, "sluice-bench setup").await?;
    let ch = conn.open_channel().await?;
    ch.exchange_declare(
        name,
        kind,
        ExchangeDeclareOptions {
            durable,
            ..Default::default()
        },
    )
    .await?;
    drop(ch);
    conn.close().await
}

/// Declares (and empties) a named queue on a short-lived connection.
pub async fn declare_queue(
    url: &str,
    name: &str,
    durable: bool,
    arguments: FieldTable,
) -> Result<(), ClientError> {
    let conn = connect_plain(url, "sluice-bench setup").await?;
    let ch = conn.open_channel().await?;
    ch.queue_declare(
        name,
        QueueDeclareOptions {
            durable,
            arguments,
            ..Default::default()
        },
    )
    .await?;
    ch.queue_purge(name).await?;
    drop(ch);
    conn.close().await
}

/// Deletes a queue on a short-lived connection (best effort).
pub async fn delete_queue(url: &str, name: &str) {
    if let Ok(conn) = connect_plain(url, "sluice-bench cleanup").await {
        if let Ok(ch) = conn.open_channel().await {
            let _ = ch.queue_delete(name, false, false).await;
        }
        let _ = conn.close().await;
    }
}

//! A scripted broker for fuzzing sluice's client: it completes a real handshake over a
//! loopback socket (start, tune, open, one channel, one no-ack consumer with tag
//! `ctag`), then sends the fuzz input as raw bytes and closes. The client, driven only
//! through its public API, must end with a value or an error — never a panic or a hang.
//!
//! Shared by the `client_frames` fuzz target and `tests/client_corpus.rs` (the corpus
//! replay in `cargo test`), each including it with `#[path]`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;
use std::time::Duration;

use bytes::BytesMut;
use sluice::client::{Connection, ConnectionOptions, ConsumeOptions};
use sluice::protocol::frame::{encode_method, split_frame};
use sluice::protocol::method::{
    BasicConsumeOk, ChannelOpenOk, ConnectionOpenOk, ConnectionStart, ConnectionTune,
};
use sluice::protocol::{FieldTable, LongStr, Method, ShortStr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long one input may take end to end (a stuck client is a finding).
const INPUT_LIMIT: Duration = Duration::from_secs(5);
/// How long the client waits for another delivery before it is done.
const QUIET: Duration = Duration::from_millis(50);

/// Set by the panic hook [`run`] installs: a panic inside the client's connection task
/// is caught by tokio and would otherwise go unnoticed.
static PANICKED: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

/// Runs one input through the client and returns how many deliveries reached the
/// consumer. Panics if the client panicked anywhere (its own task included) or hung.
pub fn run(data: &[u8]) -> usize {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICKED.store(true, Ordering::SeqCst);
            previous(info);
        }));
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let delivered = rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let input = data.to_vec();
        let broker = tokio::spawn(async move {
            if let Ok((sock, _)) = listener.accept().await {
                let _ = serve(sock, &input).await;
            }
        });
        let client = async {
            let url = format!("amqp://guest:guest@{addr}/");
            let opts = ConnectionOptions::default();
            let Ok(conn) = Connection::connect_with(&url, opts).await else {
                return 0;
            };
            let Ok(channel) = conn.open_channel().await else {
                return 0;
            };
            let consume = ConsumeOptions {
                no_ack: true,
                ..ConsumeOptions::default()
            };
            let Ok(mut consumer) = channel.basic_consume("q", consume).await else {
                return 0;
            };
            let mut delivered = 0;
            while let Ok(Ok(_)) = tokio::time::timeout(QUIET, consumer.recv()).await {
                delivered += 1;
            }
            let _ = tokio::time::timeout(QUIET, conn.close()).await;
            delivered
        };
        let delivered = tokio::time::timeout(INPUT_LIMIT, client)
            .await
            .expect("the client finished within the limit");
        broker.abort();
        delivered
    });
    drop(rt);
    assert!(
        !PANICKED.load(Ordering::SeqCst),
        "the client panicked on this input"
    );
    delivered
}

async fn serve(mut sock: TcpStream, input: &[u8]) -> std::io::Result<()> {
    let mut header = [0u8; 8];
    sock.read_exact(&mut header).await?;
    let mut rbuf = BytesMut::new();
    send(
        &mut sock,
        0,
        Method::ConnectionStart(ConnectionStart {
            version_major: 0,
            version_minor: 9,
            server_properties: FieldTable::default(),
            mechanisms: LongStr::from_static("PLAIN"),
            locales: LongStr::from_static("en_US"),
        }),
    )
    .await?;
    expect(&mut sock, &mut rbuf).await?; // start-ok
    send(
        &mut sock,
        0,
        Method::ConnectionTune(ConnectionTune {
            channel_max: 16,
            frame_max: 131_072,
            heartbeat: 0,
        }),
    )
    .await?;
    expect(&mut sock, &mut rbuf).await?; // tune-ok
    expect(&mut sock, &mut rbuf).await?; // open
    send(
        &mut sock,
        0,
        Method::ConnectionOpenOk(ConnectionOpenOk::default()),
    )
    .await?;
    expect(&mut sock, &mut rbuf).await?; // channel.open
    send(
        &mut sock,
        1,
        Method::ChannelOpenOk(ChannelOpenOk::default()),
    )
    .await?;
    expect(&mut sock, &mut rbuf).await?; // basic.consume
    send(
        &mut sock,
        1,
        Method::BasicConsumeOk(BasicConsumeOk {
            consumer_tag: ShortStr::from("ctag"),
        }),
    )
    .await?;
    // Then answer nothing more: the socket closes, and the client must end on its own.
    sock.write_all(input).await
}

async fn send(sock: &mut TcpStream, channel: u16, method: Method) -> std::io::Result<()> {
    let mut out = BytesMut::new();
    encode_method(&mut out, channel, &method);
    sock.write_all(&out).await
}

/// Reads until one whole frame is there (the client's next method).
async fn expect(sock: &mut TcpStream, rbuf: &mut BytesMut) -> std::io::Result<()> {
    loop {
        if let Ok(Some(_)) = split_frame(rbuf, 131_072) {
            return Ok(());
        }
        let mut chunk = [0u8; 4096];
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        rbuf.extend_from_slice(&chunk[..n]);
    }
}

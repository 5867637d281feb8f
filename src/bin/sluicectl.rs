//! `sluicectl`: a command-line tool on sluice's management API (`[http] listen`). Lists
//! queues, connections, channels, consumers, exchanges, bindings and federation links as
//! aligned tables (or the API's JSON with `--json`), and closes connections, purges and
//! deletes queues.
//!
//! It speaks plain HTTP/1.1 over a blocking `TcpStream`, one request per connection
//! (`Connection: close`), with basic auth.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::Duration;

use base64::Engine;
use clap::{Parser, Subcommand};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::Value;

/// sluicectl — list and manage a sluice broker through its management API.
#[derive(Parser, Debug)]
#[command(
    name = "sluicectl",
    version,
    about = "sluice's management tool: lists queues, connections, channels, consumers, exchanges, bindings and federation links from the management API; closes connections, purges and deletes queues"
)]
struct Args {
    /// The management listener's address.
    #[arg(long, default_value = "127.0.0.1:15672", value_name = "ADDR")]
    server: String,
    /// User name (basic auth).
    #[arg(long, short = 'u', default_value = "guest")]
    user: String,
    /// Password (basic auth).
    #[arg(long, short = 'p', default_value = "guest")]
    password: String,
    /// Print the API's JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Broker totals.
    Overview,
    /// Queues: depth, consumers, flow state, slow-consumer prediction.
    Queues,
    Connections,
    Channels,
    Consumers,
    Exchanges,
    Bindings,
    /// Federation links: upstream, status, URI, messages forwarded and dropped, lag,
    /// last change, and why a link is down.
    Federation {
        /// Only this vhost's links.
        #[arg(long)]
        vhost: Option<String>,
    },
    /// Close a connection (320 CONNECTION_FORCED); NAME as listed by `connections`.
    CloseConnection {
        name: String,
    },
    /// Purge a queue.
    Purge {
        queue: String,
        #[arg(long, default_value = "/")]
        vhost: String,
    },
    /// Queues refreshed every interval, like `top`: soonest predicted slow-consumer
    /// breach first, then the largest.
    Top {
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// Stop after this many refreshes (default: until interrupted).
        #[arg(long)]
        iterations: Option<u64>,
        /// Rows shown.
        #[arg(long, default_value_t = 40)]
        rows: usize,
    },
    /// Delete a queue.
    DeleteQueue {
        queue: String,
        #[arg(long, default_value = "/")]
        vhost: String,
    },
}

struct Reply {
    status: u16,
    body: String,
}

fn request(args: &Args, method: &str, path: &str) -> Result<Reply, String> {
    let mut stream = TcpStream::connect(&args.server)
        .map_err(|e| format!("cannot connect to {}: {e}", args.server))?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let token = base64::engine::general_purpose::STANDARD
        .encode(format!("{}:{}", args.user, args.password));
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Basic {token}\r\nConnection: close\r\n\r\n",
        args.server
    );
    stream
        .write_all(req.as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .map_err(|e| format!("receive: {e}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or("malformed HTTP response")?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("malformed HTTP status line")?;
    Ok(Reply {
        status,
        body: body.to_owned(),
    })
}

fn enc(s: &str) -> String {
    utf8_percent_encode(s, NON_ALPHANUMERIC).to_string()
}

/// A field rendered for a table cell: strings bare, null as "", numbers as they are.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{f:.1}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// The value at a `/`-separated path of keys.
fn field<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('/').fold(v, |v, k| &v[k])
}

/// An aligned table: a header row, then one row per item; the last column is not padded.
fn table(items: &[Value], columns: &[(&str, &str)]) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|item| columns.iter().map(|(_, p)| cell(field(item, p))).collect())
        .collect();
    let mut widths: Vec<usize> = columns.iter().map(|(h, _)| h.len()).collect();
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let last = cells.len().saturating_sub(1);
        let mut out = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$}  "));
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(columns.iter().map(|(h, _)| (*h).to_owned()).collect());
    for row in rows {
        out.push_str(&line(row));
    }
    out
}

const QUEUE_COLUMNS: &[(&str, &str)] = &[
    ("vhost", "vhost"),
    ("name", "name"),
    ("shard", "home_shard"),
    ("ready", "messages_ready"),
    ("unacked", "messages_unacknowledged"),
    ("bytes", "message_bytes"),
    ("consumers", "consumers"),
    ("flow_blocked", "flow/blocked"),
    ("slow_policy", "slow_consumer/policy"),
    ("predicted_s", "slow_consumer/predicted_seconds"),
];

/// Orders queues for `top`: a predicted breach first (soonest first), then by bytes held.
fn top_order(a: &Value, b: &Value) -> std::cmp::Ordering {
    let predicted = |v: &Value| v["slow_consumer"]["predicted_seconds"].as_f64();
    let bytes = |v: &Value| v["message_bytes"].as_u64().unwrap_or(0);
    match (predicted(a), predicted(b)) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => bytes(b).cmp(&bytes(a)),
    }
}

fn top(args: &Args, interval: f64, iterations: Option<u64>, rows: usize) -> Result<String, String> {
    let pause = Duration::from_secs_f64(interval.max(0.1));
    let mut n = 0u64;
    loop {
        let reply = request(args, "GET", "/api/queues")?;
        if reply.status != 200 {
            return Err(format!("GET /api/queues: {} {}", reply.status, reply.body));
        }
        let mut queues: Vec<Value> = serde_json::from_str(&reply.body)
            .map_err(|e| format!("bad JSON from the broker: {e}"))?;
        queues.sort_by(top_order);
        queues.truncate(rows);
        let clear = if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
            "\x1b[2J\x1b[H"
        } else {
            ""
        };
        print!("{clear}{}", table(&queues, QUEUE_COLUMNS));
        let _ = std::io::stdout().flush();
        n += 1;
        if iterations.is_some_and(|max| n >= max) {
            return Ok(String::new());
        }
        std::thread::sleep(pause);
    }
}

fn columns(command: &Command) -> &'static [(&'static str, &'static str)] {
    match command {
        Command::Queues => QUEUE_COLUMNS,
        Command::Connections => &[
            ("name", "name"),
            ("user", "user"),
            ("vhost", "vhost"),
            ("shard", "home_shard"),
            ("channels", "channels"),
            ("state", "state"),
        ],
        Command::Channels => &[
            ("name", "name"),
            ("user", "user"),
            ("prefetch", "prefetch_count"),
            ("unacked", "messages_unacknowledged"),
            ("consumers", "consumer_count"),
            ("state", "state"),
        ],
        Command::Consumers => &[
            ("queue", "queue/name"),
            ("tag", "consumer_tag"),
            ("channel", "channel_details/name"),
            ("ack_required", "ack_required"),
            ("prefetch", "prefetch_count"),
        ],
        Command::Exchanges => &[
            ("vhost", "vhost"),
            ("name", "name"),
            ("type", "type"),
            ("durable", "durable"),
        ],
        Command::Bindings => &[
            ("vhost", "vhost"),
            ("source", "source"),
            ("destination", "destination"),
            ("type", "destination_type"),
            ("routing_key", "routing_key"),
        ],
        Command::Federation { .. } => &[
            ("upstream", "upstream"),
            ("vhost", "vhost"),
            ("exchange", "exchange"),
            ("status", "status"),
            ("uri", "uri"),
            ("forwarded", "forwarded"),
            ("dropped", "dropped"),
            ("lag", "lag"),
            ("since", "timestamp"),
            ("error", "error"),
        ],
        _ => &[],
    }
}

fn run(args: &Args) -> Result<String, String> {
    let (method, path) = match &args.command {
        Command::Top {
            interval,
            iterations,
            rows,
        } => return top(args, *interval, *iterations, *rows),
        Command::Overview => ("GET", "/api/overview".to_owned()),
        Command::Queues => ("GET", "/api/queues".to_owned()),
        Command::Connections => ("GET", "/api/connections".to_owned()),
        Command::Channels => ("GET", "/api/channels".to_owned()),
        Command::Consumers => ("GET", "/api/consumers".to_owned()),
        Command::Exchanges => ("GET", "/api/exchanges".to_owned()),
        Command::Bindings => ("GET", "/api/bindings".to_owned()),
        Command::Federation { vhost: None } => ("GET", "/api/federation-links".to_owned()),
        Command::Federation { vhost: Some(v) } => {
            ("GET", format!("/api/federation-links/{}", enc(v)))
        }
        Command::CloseConnection { name } => ("DELETE", format!("/api/connections/{}", enc(name))),
        Command::Purge { queue, vhost } => (
            "DELETE",
            format!("/api/queues/{}/{}/contents", enc(vhost), enc(queue)),
        ),
        Command::DeleteQueue { queue, vhost } => (
            "DELETE",
            format!("/api/queues/{}/{}", enc(vhost), enc(queue)),
        ),
    };
    let reply = request(args, method, &path)?;
    if !(200..300).contains(&reply.status) {
        let reason = serde_json::from_str::<Value>(&reply.body)
            .ok()
            .and_then(|v| v["reason"].as_str().map(str::to_owned))
            .unwrap_or(reply.body);
        return Err(format!("{} {path}: {} {reason}", method, reply.status));
    }
    if method == "DELETE" {
        return Ok(String::new());
    }
    let value: Value =
        serde_json::from_str(&reply.body).map_err(|e| format!("bad JSON from the broker: {e}"))?;
    if args.json {
        return serde_json::to_string_pretty(&value)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string());
    }
    match &value {
        Value::Array(items) => Ok(table(items, columns(&args.command))),
        Value::Object(map) => Ok(map
            .iter()
            .map(|(k, v)| format!("{k}: {}\n", cell(v)))
            .collect()),
        other => Ok(format!("{other}\n")),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluicectl: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_aligned() {
        let items: Vec<Value> = serde_json::from_str(
            r#"[{"name":"a","n":1,"s":{"p":"x"}},{"name":"longer","n":22,"s":null}]"#,
        )
        .expect("json");
        let out = table(&items, &[("name", "name"), ("n", "n"), ("p", "s/p")]);
        assert_eq!(out, "name    n   p\na       1   x\nlonger  22\n");
    }
}

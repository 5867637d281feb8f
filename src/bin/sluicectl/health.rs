//! Owns: the health checks (as rabbitmq-diagnostics check_running, check_local_alarms,
//! check_port_connectivity ...: exit 0 when healthy, 1 with the reason otherwise) and
//! `top` (a header of broker totals over the queues, refreshed).

use std::io::Write;
use std::time::Duration;

use serde_json::Value;

use crate::args::{Args, Command};
use crate::client::{enc, Client, Error};
use crate::commands::{pretty, vhost};
use crate::tables::{table, QUEUES};

/// Runs a health command or `top`; None for the others.
pub fn run(c: &Client, args: &Args) -> Option<Result<String, Error>> {
    let path = match &args.command {
        Command::CheckRunning => "/api/overview".to_owned(),
        Command::CheckAlarms => "/api/health/checks/local-alarms".to_owned(),
        Command::CheckPort { port } => format!("/api/health/checks/port-listener/{port}"),
        Command::CheckProtocol { proto } => {
            format!("/api/health/checks/protocol-listener/{}", enc(proto))
        }
        Command::CheckVirtualHosts => "/api/health/checks/virtual-hosts".to_owned(),
        Command::Aliveness { target } => format!(
            "/api/aliveness-test/{}",
            enc(target.as_deref().unwrap_or(vhost(args)))
        ),
        Command::Top {
            interval,
            iterations,
            rows,
        } => return Some(top(c, *interval, *iterations, *rows)),
        _ => return None,
    };
    Some(c.get(&path).and_then(|v| {
        if args.json {
            pretty(&v)
        } else {
            Ok("ok\n".to_owned())
        }
    }))
}

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

/// The header line: node, connections, queues, messages, and publish/deliver rates
/// from the change of the overview's counters since the last refresh.
fn header(o: &Value, last: Option<&Value>, secs: f64) -> String {
    let n = |v: &Value, p: &str| crate::tables::field(v, p).as_u64().unwrap_or(0);
    let mut line = format!(
        "node {}  connections {}  channels {}  queues {}  messages {} (ready {}, unacked {})",
        o["node"].as_str().unwrap_or("?"),
        n(o, "object_totals/connections"),
        n(o, "object_totals/channels"),
        n(o, "object_totals/queues"),
        n(o, "queue_totals/messages"),
        n(o, "queue_totals/messages_ready"),
        n(o, "queue_totals/messages_unacknowledged"),
    );
    if let Some(prev) = last {
        let rate = |p: &str| n(o, p).saturating_sub(n(prev, p)) as f64 / secs;
        line.push_str(&format!(
            "  publish {:.1}/s  deliver {:.1}/s",
            rate("message_stats/publish"),
            rate("message_stats/deliver_get")
        ));
    }
    line + "\n"
}

fn top(c: &Client, interval: f64, iterations: Option<u64>, rows: usize) -> Result<String, Error> {
    let pause = Duration::from_secs_f64(interval.max(0.1));
    let mut n = 0u64;
    let mut last: Option<(Value, std::time::Instant)> = None;
    loop {
        let overview = c.get("/api/overview")?;
        let now = std::time::Instant::now();
        let mut queues: Vec<Value> = match c.get("/api/queues")? {
            Value::Array(items) => items,
            _ => Vec::new(),
        };
        queues.sort_by(top_order);
        queues.truncate(rows);
        let clear = if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
            "\x1b[2J\x1b[H"
        } else {
            ""
        };
        let head = match &last {
            Some((prev, at)) => header(
                &overview,
                Some(prev),
                now.duration_since(*at).as_secs_f64().max(0.001),
            ),
            None => header(&overview, None, 1.0),
        };
        print!("{clear}{head}{}", table(&queues, QUEUES));
        let _ = std::io::stdout().flush();
        last = Some((overview, now));
        n += 1;
        if iterations.is_some_and(|max| n >= max) {
            return Ok(String::new());
        }
        std::thread::sleep(pause);
    }
}

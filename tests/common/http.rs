//! A minimal blocking HTTP/1.1 client for the management-listener tests (one request per
//! connection, `Connection: close`, the body read to the end), and a parser of the
//! OpenMetrics text exposition so that tests assert on samples, not substrings.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use base64::Engine;

/// A response: status, lower-cased headers, body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: BTreeMap<String, String>,
    pub body: String,
}

impl Response {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// Sends `method path` to `port` with basic auth `user:password` (none when `auth` is
/// `None`).
pub fn request(port: u16, method: &str, path: &str, auth: Option<(&str, &str)>) -> Response {
    send(port, method, path, auth, None)
}

/// As [`request`], with a JSON body (`Content-Type: application/json`).
pub fn request_json(
    port: u16,
    method: &str,
    path: &str,
    auth: Option<(&str, &str)>,
    body: &serde_json::Value,
) -> Response {
    send(port, method, path, auth, Some(&body.to_string()))
}

/// As [`request`], with `body` sent as it is (`Content-Type: application/json`), for
/// bodies that are not JSON.
pub fn request_raw(
    port: u16,
    method: &str,
    path: &str,
    auth: Option<(&str, &str)>,
    body: &str,
) -> Response {
    send(port, method, path, auth, Some(body))
}

fn send(
    port: u16,
    method: &str,
    path: &str,
    auth: Option<(&str, &str)>,
    body: Option<&str>,
) -> Response {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to HTTP");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    if let Some((user, password)) = auth {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        req.push_str(&format!("Authorization: Basic {token}\r\n"));
    }
    if let Some(body) = body {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    if let Some(body) = body {
        req.push_str(body);
    }
    stream.write_all(req.as_bytes()).expect("send request");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read response");
    let text = String::from_utf8(raw).expect("UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("header end");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Response {
        status,
        headers,
        body: body.to_owned(),
    }
}

pub fn get(port: u16, path: &str) -> Response {
    request(port, "GET", path, Some(("guest", "guest")))
}

/// One sample: metric name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses an OpenMetrics text exposition: `# TYPE`/`# HELP`/`# UNIT` lines, samples
/// `name{label="value",...} number`, and the closing `# EOF`. Panics on anything else,
/// so a malformed exposition fails the test.
pub fn parse_openmetrics(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut saw_eof = false;
    for line in text.lines() {
        assert!(!saw_eof, "content after # EOF: {line}");
        if line == "# EOF" {
            saw_eof = true;
            continue;
        }
        if let Some(meta) = line.strip_prefix("# ") {
            let kind = meta.split(' ').next().unwrap_or("");
            assert!(
                ["TYPE", "HELP", "UNIT"].contains(&kind),
                "bad comment line: {line}"
            );
            continue;
        }
        samples.push(parse_sample(line));
    }
    assert!(saw_eof, "no # EOF");
    samples
}

fn parse_sample(line: &str) -> Sample {
    let name_end = line
        .find(['{', ' '])
        .unwrap_or_else(|| panic!("bad sample: {line}"));
    let name = &line[..name_end];
    assert!(
        name.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
        "bad metric name in {line}"
    );
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices().peekable();
        let mut key = String::new();
        let end;
        loop {
            let (i, c) = chars
                .next()
                .unwrap_or_else(|| panic!("unterminated labels: {line}"));
            match c {
                '}' => {
                    end = i + 1;
                    break;
                }
                ',' => {}
                '=' => {
                    assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "{line}");
                    let mut value = String::new();
                    loop {
                        match chars.next().map(|(_, c)| c) {
                            Some('\\') => match chars.next().map(|(_, c)| c) {
                                Some('n') => value.push('\n'),
                                Some(c) => value.push(c),
                                None => panic!("bad escape: {line}"),
                            },
                            Some('"') => break,
                            Some(c) => value.push(c),
                            None => panic!("unterminated value: {line}"),
                        }
                    }
                    labels.insert(std::mem::take(&mut key), value);
                }
                c => key.push(c),
            }
        }
        rest = &body[end..];
    }
    let value_text = rest.trim().split(' ').next().unwrap_or("");
    let value = match value_text {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v
            .parse()
            .unwrap_or_else(|_| panic!("bad value '{v}' in {line}")),
    };
    Sample {
        name: name.to_owned(),
        labels,
        value,
    }
}

/// Parses the Prometheus text format 0.0.4 (what rabbitmq_prometheus serves): `# HELP`
/// and `# TYPE` lines (each TYPE one of counter, gauge, untyped, histogram, summary,
/// before its samples), and samples; no `# EOF`. Panics on anything else.
pub fn parse_prometheus_text(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut typed = std::collections::BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(meta) = line.strip_prefix("# ") {
            let mut words = meta.splitn(3, ' ');
            match (words.next(), words.next(), words.next()) {
                (Some("HELP"), Some(_), _) => {}
                (Some("TYPE"), Some(name), Some(kind)) => {
                    assert!(
                        ["counter", "gauge", "untyped", "histogram", "summary"].contains(&kind),
                        "bad type: {line}"
                    );
                    assert!(
                        typed.insert(name.to_owned(), kind.to_owned()).is_none(),
                        "family typed twice: {line}"
                    );
                }
                _ => panic!("bad comment line: {line}"),
            }
            continue;
        }
        let sample = parse_sample(line);
        // A histogram's samples are its name with _bucket, _sum and _count.
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|suffix| sample.name.strip_suffix(suffix))
            .find(|base| typed.get(*base).is_some_and(|k| k == "histogram"));
        assert!(
            typed.contains_key(&sample.name) || family.is_some(),
            "sample before its # TYPE: {line}"
        );
        samples.push(sample);
    }
    samples
}

/// The value of `name` with exactly these labels (others ignored if not listed).
pub fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

//! Owns: the `[[federation.upstream]]` and `[[federation.exchange]]` sections — RabbitMQ's
//! upstream fields and defaults (`rabbit_federation_upstream`), their file form and their
//! checks (an unparsable URI, an unknown upstream name or a bad pattern is a start-up
//! error naming the key) — and `[broker] node_name`'s default, the host name.
//!
//! Does not: connect, declare or forward (`crate::federation` runs the links).

use std::time::Duration;

use serde::Deserialize;

use crate::client::AmqpUrl;

/// `ack-mode` of an upstream: when the upstream's delivery is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckMode {
    /// Once the republished message is on every local queue it was routed to (and on
    /// disk where it is persistent on a durable queue): the local publisher confirm.
    OnConfirm,
    /// As soon as the message is published locally.
    OnPublish,
    /// The upstream consumer is no-ack.
    NoAck,
}

impl AckMode {
    /// RabbitMQ's names, as the file and the API spell them.
    pub const CHOICES: [(&'static str, AckMode); 3] = [
        ("on-confirm", AckMode::OnConfirm),
        ("on-publish", AckMode::OnPublish),
        ("no-ack", AckMode::NoAck),
    ];

    pub fn name(self) -> &'static str {
        match self {
            AckMode::OnConfirm => "on-confirm",
            AckMode::OnPublish => "on-publish",
            AckMode::NoAck => "no-ack",
        }
    }
}

/// A value of `queue_arguments`: what a TOML scalar can be.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum ArgValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

/// One `[[federation.upstream]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Upstream {
    pub name: String,
    /// One or more URIs (with credentials); a link tries them in random order.
    pub uris: Vec<String>,
    /// The upstream exchange; `None` = the downstream exchange's name.
    pub exchange: Option<String>,
    pub max_hops: u16,
    pub prefetch_count: u16,
    pub reconnect_delay: Duration,
    pub ack_mode: AckMode,
    /// `x-expires` of the upstream queue, milliseconds.
    pub expires: Option<u64>,
    /// `x-message-ttl` of the upstream queue, milliseconds.
    pub message_ttl: Option<u64>,
    /// Keep `user-id` on forwarded messages (default: cleared).
    pub trust_user_id: bool,
    /// Extra `queue.declare` arguments for the upstream queue, in key order.
    pub queue_arguments: Vec<(String, ArgValue)>,
}

/// Which exchanges of a vhost a `[[federation.exchange]]` federates.
#[derive(Clone, Debug)]
pub enum ExchangeMatch {
    Name(String),
    Pattern(regex::Regex),
}

impl PartialEq for ExchangeMatch {
    fn eq(&self, other: &ExchangeMatch) -> bool {
        match (self, other) {
            (ExchangeMatch::Name(a), ExchangeMatch::Name(b)) => a == b,
            (ExchangeMatch::Pattern(a), ExchangeMatch::Pattern(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

/// One `[[federation.exchange]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct FederatedExchanges {
    pub vhost: String,
    pub exchange: ExchangeMatch,
    /// Upstream names (`["all"]` in the file is every upstream).
    pub upstreams: Vec<String>,
}

impl FederatedExchanges {
    /// Whether the exchange `name` of `vhost` is federated by this entry. The default
    /// exchange never is.
    pub fn matches(&self, vhost: &str, name: &str) -> bool {
        if name.is_empty() || vhost != self.vhost {
            return false;
        }
        match &self.exchange {
            ExchangeMatch::Name(n) => n == name,
            ExchangeMatch::Pattern(p) => p.is_match(name),
        }
    }
}

/// `[federation]`: upstreams and the exchanges federated from them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FederationConfig {
    pub upstreams: Vec<Upstream>,
    pub exchanges: Vec<FederatedExchanges>,
}

impl FederationConfig {
    pub fn is_enabled(&self) -> bool {
        !self.exchanges.is_empty()
    }

    pub fn upstream(&self, name: &str) -> Option<&Upstream> {
        self.upstreams.iter().find(|u| u.name == name)
    }

    /// Whether some `[[federation.exchange]]` federates `vhost`'s exchange `name`.
    pub fn covers(&self, vhost: &str, name: &str) -> bool {
        self.exchanges.iter().any(|e| e.matches(vhost, name))
    }

    /// The upstreams that federate `vhost`'s exchange `name`, each once, in the order
    /// first named.
    pub fn upstreams_of(&self, vhost: &str, name: &str) -> Vec<&Upstream> {
        let mut found: Vec<&Upstream> = Vec::new();
        for entry in self.exchanges.iter().filter(|e| e.matches(vhost, name)) {
            for u in entry.upstreams.iter().filter_map(|n| self.upstream(n)) {
                if !found.iter().any(|f| f.name == u.name) {
                    found.push(u);
                }
            }
        }
        found
    }
}

/// The `[federation]` table of the file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FederationSection {
    upstream: Option<Vec<UpstreamSection>>,
    exchange: Option<Vec<ExchangeSection>>,
}

/// `uri`: one string or a list.
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpstreamSection {
    name: String,
    uri: OneOrMany,
    exchange: Option<String>,
    max_hops: Option<u16>,
    prefetch_count: Option<u16>,
    /// Seconds, as RabbitMQ's `reconnect-delay`.
    reconnect_delay: Option<f64>,
    ack_mode: Option<String>,
    /// Milliseconds.
    expires: Option<u64>,
    /// Milliseconds.
    message_ttl: Option<u64>,
    trust_user_id: Option<bool>,
    queue_arguments: Option<std::collections::BTreeMap<String, ArgValue>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExchangeSection {
    vhost: Option<String>,
    exchange: Option<String>,
    /// A regular expression over exchange names (instead of `exchange`).
    pattern: Option<String>,
    upstreams: Option<OneOrMany>,
}

impl FederationSection {
    /// The checked configuration; an error names the key.
    pub fn parse(self) -> Result<FederationConfig, String> {
        let mut upstreams = Vec::new();
        for (i, u) in self.upstream.unwrap_or_default().into_iter().enumerate() {
            let key = format!("federation.upstream[{i}]");
            let upstream = u.parse(&key)?;
            if upstreams.iter().any(|x: &Upstream| x.name == upstream.name) {
                return Err(format!(
                    "{key}.name: \"{}\" names two upstreams",
                    upstream.name
                ));
            }
            upstreams.push(upstream);
        }
        let mut exchanges = Vec::new();
        for (i, x) in self.exchange.unwrap_or_default().into_iter().enumerate() {
            let key = format!("federation.exchange[{i}]");
            exchanges.push(x.parse(&key, &upstreams)?);
        }
        Ok(FederationConfig {
            upstreams,
            exchanges,
        })
    }
}

impl UpstreamSection {
    fn parse(self, key: &str) -> Result<Upstream, String> {
        if self.name.is_empty() {
            return Err(format!("{key}.name: must not be empty"));
        }
        let uris = match self.uri {
            OneOrMany::One(u) => vec![u],
            OneOrMany::Many(list) => list,
        };
        if uris.is_empty() {
            return Err(format!("{key}.uri: give at least one URI"));
        }
        for uri in &uris {
            if let Err(e) = AmqpUrl::parse(uri) {
                return Err(format!("{key}.uri: {}", redacted(&e.to_string(), uri)));
            }
        }
        let ack_mode = match self.ack_mode {
            None => AckMode::OnConfirm,
            Some(text) => AckMode::CHOICES
                .iter()
                .find(|(n, _)| *n == text)
                .map(|(_, m)| *m)
                .ok_or_else(|| {
                    format!(
                        "{key}.ack_mode: expected \"on-confirm\", \"on-publish\" or \"no-ack\", got \"{text}\""
                    )
                })?,
        };
        let reconnect_delay = match self.reconnect_delay {
            None => Duration::from_secs(5),
            Some(s) if (0.0..86_400.0).contains(&s) => Duration::from_secs_f64(s),
            Some(s) => {
                return Err(format!(
                    "{key}.reconnect_delay: expected seconds between 0 and 86400, got {s}"
                ))
            }
        };
        let max_hops = self.max_hops.unwrap_or(1);
        if max_hops == 0 {
            return Err(format!("{key}.max_hops: must be at least 1"));
        }
        Ok(Upstream {
            name: self.name,
            uris,
            exchange: self.exchange.filter(|e| !e.is_empty()),
            max_hops,
            prefetch_count: self.prefetch_count.unwrap_or(1000),
            reconnect_delay,
            ack_mode,
            expires: self.expires,
            message_ttl: self.message_ttl,
            trust_user_id: self.trust_user_id.unwrap_or(false),
            queue_arguments: self
                .queue_arguments
                .unwrap_or_default()
                .into_iter()
                .collect(),
        })
    }
}

impl ExchangeSection {
    fn parse(self, key: &str, upstreams: &[Upstream]) -> Result<FederatedExchanges, String> {
        let exchange = match (self.exchange, self.pattern) {
            (Some(name), None) if !name.is_empty() => ExchangeMatch::Name(name),
            (Some(_), None) => {
                return Err(format!(
                    "{key}.exchange: the default exchange cannot be federated"
                ))
            }
            (None, Some(p)) => ExchangeMatch::Pattern(
                regex::Regex::new(&p).map_err(|e| format!("{key}.pattern: {e}"))?,
            ),
            (Some(_), Some(_)) => return Err(format!("{key}: give exchange or pattern, not both")),
            (None, None) => return Err(format!("{key}: give exchange or pattern")),
        };
        let names = match self.upstreams {
            None => vec!["all".to_owned()],
            Some(OneOrMany::One(n)) => vec![n],
            Some(OneOrMany::Many(list)) => list,
        };
        let names = if names.iter().any(|n| n == "all") {
            upstreams.iter().map(|u| u.name.clone()).collect()
        } else {
            for n in &names {
                if !upstreams.iter().any(|u| &u.name == n) {
                    return Err(format!(
                        "{key}.upstreams: no [[federation.upstream]] is named \"{n}\""
                    ));
                }
            }
            names
        };
        if names.is_empty() {
            return Err(format!(
                "{key}.upstreams: no upstream is configured ([[federation.upstream]])"
            ));
        }
        Ok(FederatedExchanges {
            vhost: self.vhost.unwrap_or_else(|| "/".to_owned()),
            exchange,
            upstreams: names,
        })
    }
}

/// An error text about `uri` with its password replaced.
fn redacted(text: &str, uri: &str) -> String {
    let safe = safe_uri(uri);
    text.replace(uri, &safe)
}

/// `uri` without credentials, as RabbitMQ shows an upstream's URI
/// (`amqp://host:port/vhost`).
pub fn safe_uri(uri: &str) -> String {
    let (scheme, rest) = match uri.find("://") {
        Some(i) => (&uri[..i + 3], &uri[i + 3..]),
        None => return uri.to_owned(),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}{}", &rest[at + 1..]),
        None => uri.to_owned(),
    }
}

/// The host name, `[broker] node_name`'s default.
pub fn default_node_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "sluice".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<FederationConfig, String> {
        #[derive(Deserialize)]
        struct File {
            federation: FederationSection,
        }
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        file.federation.parse()
    }

    #[test]
    fn rabbitmq_defaults() {
        let c = parse(
            r#"
            [[federation.upstream]]
            name = "root"
            uri = "amqp://relay:secret@root.example:5672/%2f"
            [[federation.exchange]]
            exchange = "amq.topic"
            upstreams = ["root"]
            "#,
        )
        .unwrap();
        let u = &c.upstreams[0];
        assert_eq!(u.max_hops, 1);
        assert_eq!(u.prefetch_count, 1000);
        assert_eq!(u.reconnect_delay, Duration::from_secs(5));
        assert_eq!(u.ack_mode, AckMode::OnConfirm);
        assert!(!u.trust_user_id);
        assert_eq!(u.expires, None);
        assert!(c.exchanges[0].matches("/", "amq.topic"));
        assert!(!c.exchanges[0].matches("/", ""));
        assert_eq!(c.upstreams_of("/", "amq.topic").len(), 1);
    }

    #[test]
    fn errors_name_their_key() {
        let bad_uri = parse(
            r#"
            [[federation.upstream]]
            name = "a"
            uri = ["amqp://h/", "http://u:pw@h/"]
            "#,
        )
        .unwrap_err();
        assert!(
            bad_uri.starts_with("federation.upstream[0].uri:"),
            "{bad_uri}"
        );
        assert!(!bad_uri.contains("pw"), "{bad_uri}");
        let unknown = parse(
            r#"
            [[federation.upstream]]
            name = "a"
            uri = "amqp://h/"
            [[federation.exchange]]
            exchange = "x"
            upstreams = ["b"]
            "#,
        )
        .unwrap_err();
        assert_eq!(
            unknown,
            "federation.exchange[0].upstreams: no [[federation.upstream]] is named \"b\""
        );
        let mode = parse(
            r#"
            [[federation.upstream]]
            name = "a"
            uri = "amqp://h/"
            ack_mode = "later"
            "#,
        )
        .unwrap_err();
        assert!(
            mode.starts_with("federation.upstream[0].ack_mode:"),
            "{mode}"
        );
    }

    #[test]
    fn safe_uri_drops_credentials() {
        assert_eq!(safe_uri("amqp://u:p@h:5672/%2f"), "amqp://h:5672/%2f");
        assert_eq!(safe_uri("amqps://h/v"), "amqps://h/v");
    }

    #[test]
    fn all_and_patterns() {
        let c = parse(
            r#"
            [[federation.upstream]]
            name = "a"
            uri = "amqp://h/"
            [[federation.upstream]]
            name = "b"
            uri = "amqp://i/"
            [[federation.exchange]]
            vhost = "v"
            pattern = "^fed\\."
            upstreams = "all"
            "#,
        )
        .unwrap();
        assert_eq!(c.upstreams_of("v", "fed.x").len(), 2);
        assert!(c.upstreams_of("/", "fed.x").is_empty());
        assert!(c.upstreams_of("v", "other").is_empty());
    }
}

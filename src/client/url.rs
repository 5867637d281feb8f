//! Owns: parsing `amqp://user:pass@host:port/vhost?key=value&…` (or `amqps://`, TLS)
//! into [`AmqpUrl`], with the defaults guest/guest, 127.0.0.1, 5672 (5671 for amqps) and
//! `/`, percent-decoding of user, password, vhost (`%2f` is `/`) and the query's keys
//! and values, which are kept in order as RabbitMQ's URI parser splits them (the
//! authority ends at the first `/`, `?` or `#`; a fragment is dropped).
//! Does not: resolve names, open sockets, or give query parameters a meaning (a caller
//! such as the federation link reads `cacertfile`, `certfile`, `keyfile` and
//! `auth_mechanism` from [`AmqpUrl::query`] and builds its options itself).

use super::error::ClientError;

/// A parsed `amqp://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AmqpUrl {
    /// User name for PLAIN authentication.
    pub user: String,
    /// Password for PLAIN authentication.
    pub password: String,
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Virtual host.
    pub vhost: String,
    /// `amqps://`: the connection runs over TLS (default port 5671).
    pub tls: bool,
    /// The query's parameters in order, percent-decoded: `?a=b&c` is `[("a", "b"),
    /// ("c", "")]`; a key may repeat (RabbitMQ allows `auth_mechanism` more than once).
    pub query: Vec<(String, String)>,
}

impl Default for AmqpUrl {
    fn default() -> Self {
        AmqpUrl {
            user: "guest".into(),
            password: "guest".into(),
            host: "127.0.0.1".into(),
            port: 5672,
            vhost: "/".into(),
            tls: false,
            query: Vec::new(),
        }
    }
}

fn percent_decode(s: &str, url: &str) -> Result<String, ClientError> {
    let bad = || ClientError::InvalidUrl {
        url: url.into(),
        reason: "bad percent-encoding",
    };
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
            let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

impl AmqpUrl {
    /// Parses `amqp://[user[:pass]@]host[:port][/vhost]`. An empty path means `/`;
    /// a path of `/name` means vhost `name` (use `%2f` for a vhost containing `/`).
    pub fn parse(url: &str) -> Result<AmqpUrl, ClientError> {
        let invalid = |reason| ClientError::InvalidUrl {
            url: url.into(),
            reason,
        };
        let (rest, tls) = match url.strip_prefix("amqps://") {
            Some(rest) => (rest, true),
            None => (
                url.strip_prefix("amqp://")
                    .ok_or_else(|| invalid("scheme must be amqp:// or amqps://"))?,
                false,
            ),
        };
        let mut parsed = AmqpUrl {
            tls,
            port: if tls { 5671 } else { 5672 },
            ..AmqpUrl::default()
        };
        let (authority, after) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
        let after = after.split('#').next().unwrap_or("");
        let (path, query) = match after.split_once('?') {
            Some((path, query)) => (path, query),
            None => (after, ""),
        };
        let path = path.strip_prefix('/');
        let hostport = match authority.rfind('@') {
            Some(i) => {
                let userinfo = &authority[..i];
                let (user, pass) = match userinfo.find(':') {
                    Some(j) => (&userinfo[..j], Some(&userinfo[j + 1..])),
                    None => (userinfo, None),
                };
                parsed.user = percent_decode(user, url)?;
                if let Some(p) = pass {
                    parsed.password = percent_decode(p, url)?;
                }
                &authority[i + 1..]
            }
            None => authority,
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let end = v6.find(']').ok_or_else(|| invalid("unclosed [ in host"))?;
            let port = v6[end + 1..].strip_prefix(':');
            (&v6[..end], port)
        } else {
            match hostport.rfind(':') {
                Some(i) => (&hostport[..i], Some(&hostport[i + 1..])),
                None => (hostport, None),
            }
        };
        if !host.is_empty() {
            parsed.host = host.into();
        }
        if let Some(p) = port.filter(|p| !p.is_empty()) {
            parsed.port = p.parse().map_err(|_| invalid("port is not a number"))?;
        }
        if let Some(p) = path.filter(|p| !p.is_empty()) {
            parsed.vhost = percent_decode(p, url)?;
        }
        for param in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = param.split_once('=').unwrap_or((param, ""));
            parsed
                .query
                .push((percent_decode(key, url)?, percent_decode(value, url)?));
        }
        Ok(parsed)
    }

    /// The value of the first query parameter named `key`.
    pub fn query_value(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_full() {
        assert_eq!(AmqpUrl::parse("amqp://").unwrap(), AmqpUrl::default());
        let u = AmqpUrl::parse("amqp://a:b%40c@example:5673/v%2fh").unwrap();
        assert_eq!(
            (
                u.user.as_str(),
                u.password.as_str(),
                u.host.as_str(),
                u.port,
                u.vhost.as_str()
            ),
            ("a", "b@c", "example", 5673, "v/h")
        );
        let u = AmqpUrl::parse("amqp://[::1]:9/").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.vhost.as_str()), ("::1", 9, "/"));
        let u = AmqpUrl::parse("amqp://h/prod").unwrap();
        assert_eq!(u.vhost, "prod");
        assert!(AmqpUrl::parse("http://x").is_err());
        assert!(AmqpUrl::parse("amqp://h:x").is_err());
        assert!(AmqpUrl::parse("amqp://h/%zz").is_err());
        let u = AmqpUrl::parse("amqps://h").unwrap();
        assert_eq!((u.tls, u.port), (true, 5671));
        let u = AmqpUrl::parse("amqps://h:6000/").unwrap();
        assert_eq!((u.tls, u.port), (true, 6000));
        assert!(u.query.is_empty());
    }

    fn pairs(u: &AmqpUrl) -> Vec<(&str, &str)> {
        u.query
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn query_parameters_are_kept_in_order_and_decoded() {
        let u = AmqpUrl::parse(
            "amqps://relay@root.example:5671/%2f?cacertfile=/etc/ca.pem&certfile=%2Fetc%2Fcert.pem\
             &keyfile=/etc/key.pem&auth_mechanism=external&auth_mechanism=plain&verify",
        )
        .unwrap();
        assert_eq!(
            (u.user.as_str(), u.host.as_str(), u.port, u.vhost.as_str()),
            ("relay", "root.example", 5671, "/")
        );
        assert_eq!(
            pairs(&u),
            vec![
                ("cacertfile", "/etc/ca.pem"),
                ("certfile", "/etc/cert.pem"),
                ("keyfile", "/etc/key.pem"),
                ("auth_mechanism", "external"),
                ("auth_mechanism", "plain"),
                ("verify", ""),
            ]
        );
        assert_eq!(u.query_value("auth_mechanism"), Some("external"));
        assert_eq!(u.query_value("heartbeat"), None);
        assert_eq!(u.password, "guest", "no password in the URL: the default");
    }

    #[test]
    fn the_authority_ends_at_a_query_or_fragment() {
        // No path: the query follows the authority, and a `/` inside it is not a path.
        let u = AmqpUrl::parse("amqp://h:5673?cacertfile=/a/b.pem").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.vhost.as_str()),
            ("h", 5673, "/")
        );
        assert_eq!(pairs(&u), vec![("cacertfile", "/a/b.pem")]);
        let u = AmqpUrl::parse("amqp://h/prod?heartbeat=5#frag").unwrap();
        assert_eq!(u.vhost, "prod");
        assert_eq!(pairs(&u), vec![("heartbeat", "5")]);
        let u = AmqpUrl::parse("amqp://h/v#x?y=z").unwrap();
        assert_eq!((u.vhost.as_str(), u.query.len()), ("v", 0));
        let u = AmqpUrl::parse("amqp://h/?a=1&&b=%3D").unwrap();
        assert_eq!(u.vhost, "/");
        assert_eq!(pairs(&u), vec![("a", "1"), ("b", "=")]);
        assert!(AmqpUrl::parse("amqp://h/?a=%zz").is_err());
        assert!(AmqpUrl::parse("amqp://h/?%g0=1").is_err());
    }
}

//! The bus address as operators write it — `nats://[user:pass@]host[:port]`
//! or `nats://token@host[:port]` (`tls://` for TLS) — and connecting to it.
//!
//! The credential never leaves this type in text: [`BusUrl`]'s `Display`,
//! `Debug` and `Serialize` show `nats://user:***@host:4222`, the address
//! handed to the client carries no credential (it is passed as connect
//! options), and [`BusUrl::redact`] scrubs it from any message that might
//! echo it.

use std::fmt;
use std::time::Duration;

/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The default NATS client port.
const DEFAULT_PORT: u16 = 4222;

/// A parsed bus URL with its credential kept apart.
#[derive(Clone, PartialEq, Eq)]
pub struct BusUrl {
    scheme: &'static str,
    /// `host:port`, port filled in.
    host_port: String,
    auth: Credential,
}

#[derive(Clone, PartialEq, Eq)]
enum Credential {
    None,
    Token(String),
    UserPassword(String, String),
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::None => f.write_str("None"),
            Credential::Token(_) => f.write_str("Token(***)"),
            Credential::UserPassword(user, _) => write!(f, "UserPassword({user:?}, ***)"),
        }
    }
}

/// A failed connection: the URL (credential hidden) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NATS bus {url}: {reason}")]
pub struct ConnectError {
    /// The URL as shown, credential hidden.
    pub url: String,
    /// What went wrong, with a hint for the usual causes.
    pub reason: String,
}

impl BusUrl {
    /// Parses `nats://[user[:pass]@]host[:port]` (or `tls://…`); a user
    /// without a password is a token. The credential is percent-decoded
    /// (`edge::percent::component`).
    ///
    /// # Errors
    /// A message naming what is wrong, never quoting the credential.
    pub fn parse(text: &str) -> Result<BusUrl, String> {
        let (scheme, rest) = if let Some(rest) = text.strip_prefix("nats://") {
            ("nats", rest)
        } else if let Some(rest) = text.strip_prefix("tls://") {
            ("tls", rest)
        } else {
            return Err(format!(
                "{} is not a nats:// or tls:// URL",
                common::quoted(&strip_credential(text))
            ));
        };
        let rest = rest.trim_end_matches('/');
        let (credential, host_port) = match rest.rsplit_once('@') {
            Some((credential, host)) => (Some(credential), host),
            None => (None, rest),
        };
        let shown = || format!("{scheme}://{host_port}");
        if host_port.is_empty() || host_port.contains(['/', '?', '#', ' ', ',']) {
            return Err(format!(
                "{} has no host, or more than host:port after it",
                common::quoted(&shown())
            ));
        }
        let host_port = match host_port.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && !port.contains(']') => {
                port.parse::<u16>().map_err(|_| {
                    format!("{}: the port is not a number", common::quoted(&shown()))
                })?;
                host_port.to_owned()
            }
            _ => format!("{host_port}:{DEFAULT_PORT}"),
        };
        let auth = match credential {
            None => Credential::None,
            Some(credential) => match credential.split_once(':') {
                Some((user, password)) => {
                    Credential::UserPassword(percent_decode(user)?, percent_decode(password)?)
                }
                None => Credential::Token(percent_decode(credential)?),
            },
        };
        Ok(BusUrl {
            scheme,
            host_port,
            auth,
        })
    }

    /// The address handed to the client: scheme, host and port, no
    /// credential.
    pub fn address(&self) -> String {
        format!("{}://{}", self.scheme, self.host_port)
    }

    /// `text` with the credential (and its URL-escaped form) replaced by
    /// `***`.
    pub fn redact(&self, text: &str) -> String {
        let secret = match &self.auth {
            Credential::None => return text.to_owned(),
            Credential::Token(token) => token,
            Credential::UserPassword(_, password) => password,
        };
        if secret.is_empty() {
            return text.to_owned();
        }
        text.replace(secret.as_str(), "***")
    }

    fn options(&self, name: &str, tls: &edge::upstream::UpstreamTls) -> async_nats::ConnectOptions {
        let options = match &self.auth {
            Credential::None => async_nats::ConnectOptions::new(),
            Credential::Token(token) => async_nats::ConnectOptions::with_token(token.clone()),
            Credential::UserPassword(user, password) => {
                async_nats::ConnectOptions::with_user_and_password(user.clone(), password.clone())
            }
        };
        options
            .name(name)
            // `tls://` (or a server that requires TLS) is verified against
            // the roots of every upstream: the system's and
            // `upstream_ca_file`'s.
            .tls_client_config((*tls.client_config()).clone())
            .connection_timeout(CONNECT_TIMEOUT)
            // Once connected, the client reconnects by itself, forever.
            .max_reconnects(None)
            .ignore_discovered_servers()
    }

    /// Connects once (the client then reconnects by itself after any
    /// outage); over TLS verified against `tls` when the URL is `tls://` or
    /// the server requires it.
    ///
    /// # Errors
    /// [`ConnectError`] naming the URL (credential hidden) and the cause:
    /// refused credentials, an unreachable or silent address, a
    /// certificate that does not verify.
    pub async fn connect(
        &self,
        name: &str,
        tls: &edge::upstream::UpstreamTls,
    ) -> Result<async_nats::Client, ConnectError> {
        use async_nats::ConnectErrorKind as Kind;
        let attempt = self.options(name, tls).connect(self.address());
        let connected = tokio::time::timeout(CONNECT_TIMEOUT + Duration::from_secs(1), attempt)
            .await
            .map_err(|_| self.error("no answer within the connect timeout"))?;
        connected.map_err(|error| {
            let text = error.to_string();
            let hint = match error.kind() {
                // rustls' refusals arrive as I/O errors.
                _ if text.contains("certificate") => {
                    "TLS: the server's certificate does not verify against the system's roots \
                     and upstream_ca_file"
                }
                Kind::AuthorizationViolation | Kind::Authentication => {
                    "the server refused the credentials (check the user and password, or the \
                     token, in the URL)"
                }
                Kind::Io | Kind::Dns | Kind::TimedOut => {
                    "unreachable (is nats-server running there, with -js?)"
                }
                Kind::Tls => "TLS handshake failed",
                _ => "connection failed",
            };
            self.error(format!("{hint}: {text}"))
        })
    }

    /// An error about this URL; the reason is scrubbed of the credential.
    pub fn error(&self, reason: impl AsRef<str>) -> ConnectError {
        ConnectError {
            url: self.to_string(),
            reason: self.redact(reason.as_ref()),
        }
    }
}

impl fmt::Display for BusUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.auth {
            Credential::None => write!(f, "{}://{}", self.scheme, self.host_port),
            Credential::Token(_) => write!(f, "{}://***@{}", self.scheme, self.host_port),
            Credential::UserPassword(user, _) => {
                write!(f, "{}://{user}:***@{}", self.scheme, self.host_port)
            }
        }
    }
}

impl fmt::Debug for BusUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BusUrl({self})")
    }
}

impl serde::Serialize for BusUrl {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// `text` with anything between `://` and the last `@` replaced by `***`,
/// for quoting a URL that did not parse.
fn strip_credential(text: &str) -> String {
    match (text.find("://"), text.rfind('@')) {
        (Some(start), Some(at)) if at > start + 3 => {
            format!("{}***{}", &text[..start + 3], &text[at..])
        }
        (None, Some(at)) => format!("***{}", &text[at..]),
        _ => text.to_owned(),
    }
}

fn percent_decode(text: &str) -> Result<String, String> {
    edge::percent::component(text)
        .map(std::borrow::Cow::into_owned)
        .map_err(|_| "the URL's credential is not UTF-8 once decoded".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_parsed_apart_and_never_shown() {
        let url = BusUrl::parse("nats://l1gate:s3cr%40t@10.0.0.7:4333").unwrap();
        assert_eq!(url.address(), "nats://10.0.0.7:4333");
        assert_eq!(url.to_string(), "nats://l1gate:***@10.0.0.7:4333");
        assert_eq!(
            format!("{url:?}"),
            "BusUrl(nats://l1gate:***@10.0.0.7:4333)"
        );
        assert_eq!(
            url.auth,
            Credential::UserPassword("l1gate".into(), "s3cr@t".into())
        );
        assert_eq!(url.redact("bad password s3cr@t"), "bad password ***");
        let token = BusUrl::parse("nats://t0ken@bus.internal").unwrap();
        assert_eq!(token.to_string(), "nats://***@bus.internal:4222");
        assert_eq!(token.auth, Credential::Token("t0ken".into()));
        let plain = BusUrl::parse("tls://[::1]:4222/").unwrap();
        assert_eq!(plain.address(), "tls://[::1]:4222");
        let toml = toml::to_string(&std::collections::BTreeMap::from([("u", &url)])).unwrap();
        assert!(!toml.contains("s3cr"), "{toml}");
    }

    #[test]
    fn bad_urls_are_named_without_their_credential() {
        for (text, says) in [
            ("http://u:hunter2@host:4222", "not a nats://"),
            ("nats://u:hunter2@", "no host"),
            ("nats://u:hunter2@host:port", "port is not a number"),
            ("nats://u:hunter2@host/path", "more than host:port"),
            ("u:hunter2@host:4222", "not a nats://"),
        ] {
            let error = BusUrl::parse(text).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
            assert!(!error.contains("hunter2"), "{text}: {error}");
        }
    }
}

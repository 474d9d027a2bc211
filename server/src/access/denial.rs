//! Why a request was refused: the one answer both edges render (HTTP
//! status and JSON body, gRPC status), named by the key id and account only.

use std::net::IpAddr;
use std::time::Duration;

use tonic::Status;

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// No key was sent.
    MissingKey,
    /// The key is unknown or revoked.
    RejectedKey,
    /// The URL path and the `X-Api-Key` header carry different keys.
    ConflictingKeys,
    /// The source address is not on the key's allow-list.
    Forbidden {
        /// The key's id.
        key_id: String,
        /// The TCP peer address, when known.
        peer: Option<IpAddr>,
        /// Where to update the list.
        url: Option<String>,
    },
    /// The account's request rate is used up.
    RateLimited {
        /// The account.
        account: String,
        /// Requests per second allowed.
        rate: u32,
        /// Burst allowed.
        burst: u32,
        /// When a request would conform again.
        retry_after: Duration,
    },
    /// The account has its maximum of streams open.
    TooManyStreams {
        /// The account.
        account: String,
        /// Its cap.
        max: u32,
    },
}

impl Denial {
    /// Short machine-readable reason (metric label, JSON `error`).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::MissingKey => "missing_key",
            Self::RejectedKey | Self::ConflictingKeys => "rejected_key",
            Self::Forbidden { .. } => "forbidden",
            Self::RateLimited { .. } => "rate_limited",
            Self::TooManyStreams { .. } => "too_many_streams",
        }
    }

    /// The HTTP status: 401, 403 or 429.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::MissingKey | Self::RejectedKey | Self::ConflictingKeys => 401,
            Self::Forbidden { .. } => 403,
            Self::RateLimited { .. } | Self::TooManyStreams { .. } => 429,
        }
    }

    /// How long to wait before retrying, for rate limits.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    /// The allow-list update link, for a 403.
    pub fn allow_list_url(&self) -> Option<&str> {
        match self {
            Self::Forbidden { url, .. } => url.as_deref(),
            _ => None,
        }
    }

    /// A human-readable explanation (never containing a key).
    pub fn message(&self) -> String {
        match self {
            Self::MissingKey => "missing API key: send it in the `X-Api-Key` header (gRPC: lowercase `x-api-key` metadata) or, over HTTP, as the first path segment".to_owned(),
            Self::RejectedKey => "API key rejected: unknown or revoked key".to_owned(),
            Self::ConflictingKeys => "API key rejected: the URL path and the X-Api-Key header carry different keys".to_owned(),
            Self::Forbidden { key_id, peer, url } => {
                let source = peer.map_or_else(|| "an unknown address".to_owned(), |p| p.to_canonical().to_string());
                let update = url.as_deref().map_or_else(
                    || "ask the operator to add it with `l1gate keys allow`".to_owned(),
                    |url| format!("update the list at {url}"),
                );
                format!("source address {source} is not on the IP allow-list of key {key_id}; {update}")
            }
            Self::RateLimited { account, rate, burst, retry_after } => format!(
                "rate limit exceeded (not a key problem): account {account} allows {rate} requests/s with bursts of {burst}, pooled across its keys; retry in {} ms",
                retry_after.as_millis().max(1)
            ),
            Self::TooManyStreams { account, max } => format!(
                "rate limit exceeded (not a key problem): account {account} already has its maximum of {max} concurrent streams open, pooled across its keys; close one or retry later"
            ),
        }
    }

    /// The gRPC status: UNAUTHENTICATED, PERMISSION_DENIED or
    /// RESOURCE_EXHAUSTED.
    pub fn to_status(&self) -> Status {
        let message = self.message();
        match self.http_status() {
            401 => Status::unauthenticated(message),
            403 => Status::permission_denied(message),
            _ => Status::resource_exhausted(message),
        }
    }

    /// The gRPC status code's name, for the admissions metric.
    pub fn grpc_code(&self) -> &'static str {
        match self.http_status() {
            401 => "unauthenticated",
            403 => "permission_denied",
            _ => "resource_exhausted",
        }
    }
}

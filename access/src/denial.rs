//! Why a request was refused: the one answer both edges render (HTTP
//! status and JSON body, gRPC status), named by the key id and account only.

use std::net::IpAddr;
use std::time::Duration;

use crate::keys::Rotation;
use crate::quota::{Period, QuotaKind, format_size};

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// No key was sent.
    MissingKey,
    /// The key is unknown or revoked.
    RejectedKey,
    /// The key was rotated and its grace period is over.
    RotatedKey {
        /// The key's id.
        key_id: String,
        /// When, by which key, and the grace end.
        rotation: Rotation,
    },
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
    /// The key used up one of its quotas for the period.
    QuotaExhausted {
        /// The key's id.
        key_id: String,
        /// Which cap.
        kind: QuotaKind,
        /// The cap.
        limit: u64,
        /// Its period.
        period: Period,
        /// When the period ends and usage starts again from zero, Unix ms.
        resets_at_ms: i64,
        /// How long until then.
        retry_after: Duration,
    },
}

impl Denial {
    /// Short machine-readable reason (metric label, JSON `error`).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::MissingKey => "missing_key",
            Self::RejectedKey | Self::ConflictingKeys => "rejected_key",
            Self::RotatedKey { .. } => "rotated_key",
            Self::Forbidden { .. } => "forbidden",
            Self::RateLimited { .. } => "rate_limited",
            Self::TooManyStreams { .. } => "too_many_streams",
            Self::QuotaExhausted { .. } => "quota_exceeded",
        }
    }

    /// The HTTP status: 401, 403 or 429.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::MissingKey
            | Self::RejectedKey
            | Self::ConflictingKeys
            | Self::RotatedKey { .. } => 401,
            Self::Forbidden { .. } => 403,
            Self::RateLimited { .. }
            | Self::TooManyStreams { .. }
            | Self::QuotaExhausted { .. } => 429,
        }
    }

    /// How long to wait before retrying, for rate limits and quotas.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } | Self::QuotaExhausted { retry_after, .. } => {
                Some(*retry_after)
            }
            _ => None,
        }
    }

    /// For a quota: which cap, its period and when it resets (Unix ms).
    pub fn quota(&self) -> Option<(QuotaKind, u64, Period, i64)> {
        match self {
            Self::QuotaExhausted {
                kind,
                limit,
                period,
                resets_at_ms,
                ..
            } => Some((*kind, *limit, *period, *resets_at_ms)),
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
            Self::RotatedKey { key_id, rotation } => format!(
                "API key {key_id} was rotated at {} (replaced by {}); its grace period ended at {}: use the new key",
                feeds::time::format_iso8601_ms(rotation.at_ms),
                rotation.replaced_by,
                feeds::time::format_iso8601_ms(rotation.grace_until_ms),
            ),
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
            Self::QuotaExhausted { key_id, kind, limit, period, resets_at_ms, .. } => {
                let (what, cap) = match kind {
                    QuotaKind::Requests => ("request", format!("{limit} requests")),
                    QuotaKind::Bytes => ("byte", format!("{} sent", format_size(*limit))),
                };
                format!(
                    "usage quota exhausted (not a key problem): key {key_id} has used its {} {what} quota of {cap}; usage resets at {}",
                    period.adjective(),
                    feeds::time::format_iso8601_ms(*resets_at_ms),
                )
            }
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

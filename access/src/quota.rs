//! Per-key usage quotas as the keys file states them: a period (a UTC
//! calendar day or month) and a cap of admitted requests and/or of bytes
//! sent to the client per period; the period arithmetic (where the period
//! holding an instant starts and ends) and the size syntax of
//! `l1gate keys quota --bytes` (`10GB`, `512MiB`).
//!
//! Pure: instants are Unix ms passed in by the caller.

use serde::{Deserialize, Serialize};

const DAY_MS: i64 = 86_400_000;

/// The span a quota's usage is counted over: a UTC calendar day or month,
/// from its first millisecond to the first of the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Period {
    /// 00:00:00 UTC to the next midnight.
    Day,
    /// The 1st, 00:00:00 UTC, to the 1st of the next month.
    Month,
}

impl Period {
    /// The period holding `now_ms`: its start (included) and end (excluded),
    /// Unix ms.
    pub fn bounds(self, now_ms: i64) -> (i64, i64) {
        let day = now_ms.div_euclid(DAY_MS);
        match self {
            Self::Day => (day * DAY_MS, (day + 1) * DAY_MS),
            Self::Month => {
                let (year, month, _) = feeds::time::civil_from_days(day);
                let (next_year, next_month) = if month == 12 {
                    (year + 1, 1)
                } else {
                    (year, month + 1)
                };
                (
                    feeds::time::days_from_civil(year, month, 1) * DAY_MS,
                    feeds::time::days_from_civil(next_year, next_month, 1) * DAY_MS,
                )
            }
        }
    }

    /// `day` or `month`, as the keys file and the command line write it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Day => "day",
            Self::Month => "month",
        }
    }

    /// `daily` or `monthly`, for messages.
    pub fn adjective(self) -> &'static str {
        match self {
            Self::Day => "daily",
            Self::Month => "monthly",
        }
    }
}

/// One key's quota: at most `requests` admitted requests and `bytes` bytes
/// sent to the client per `period` (`None`: no cap of that kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    /// The span usage is counted over.
    pub period: Period,
    /// Admitted requests per period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    /// Bytes sent to the client per period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

impl Quota {
    /// What is wrong with it, if anything: a quota caps something, and caps
    /// are at least 1.
    pub fn problem(&self) -> Option<&'static str> {
        if self.requests.is_none() && self.bytes.is_none() {
            Some("sets neither requests nor bytes")
        } else if self.requests == Some(0) || self.bytes == Some(0) {
            Some("caps must be at least 1 (remove the quota instead)")
        } else {
            None
        }
    }

    /// `1000 requests, 10GB per day`.
    pub fn describe(&self) -> String {
        let mut caps = Vec::new();
        if let Some(requests) = self.requests {
            caps.push(format!("{requests} requests"));
        }
        if let Some(bytes) = self.bytes {
            caps.push(format_size(bytes));
        }
        format!("{} per {}", caps.join(", "), self.period.name())
    }
}

/// Which cap of a quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QuotaKind {
    /// Admitted requests.
    Requests,
    /// Bytes sent to the client.
    Bytes,
}

impl QuotaKind {
    /// `requests` or `bytes`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Requests => "requests",
            Self::Bytes => "bytes",
        }
    }
}

const UNITS: [(&str, u64); 9] = [
    ("b", 1),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
];

/// Parses a byte count: digits, optionally followed by a unit, `B`, `KB`,
/// `MB`, `GB`, `TB` (powers of 1000) or `KiB`, `MiB`, `GiB`, `TiB` (powers
/// of 1024), case-insensitive: `10GB` is 10,000,000,000 bytes.
///
/// # Errors
/// A message naming the accepted forms, for text that is not one or a
/// size over 2^64 − 1 bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let bad = || {
        format!(
            "{text:?}: expected a byte count such as 1000000, 512MiB or 10GB (units B, KB, MB, \
             GB, TB, KiB, MiB, GiB, TiB)"
        )
    };
    let value: u64 = digits.parse().map_err(|_| bad())?;
    let unit = unit.trim_start().to_ascii_lowercase();
    let scale = if unit.is_empty() {
        1
    } else {
        UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|&(_, scale)| scale)
            .ok_or_else(bad)?
    };
    value
        .checked_mul(scale)
        .ok_or_else(|| format!("{text:?}: more than 2^64 - 1 bytes"))
}

/// A byte count in the largest decimal unit that writes it exactly
/// (`10GB`, `1500MB`, `123 bytes`).
pub fn format_size(bytes: u64) -> String {
    for (unit, scale) in [
        ("TB", 1_000_000_000_000_u64),
        ("GB", 1_000_000_000),
        ("MB", 1_000_000),
        ("KB", 1_000),
    ] {
        if bytes >= scale && bytes.is_multiple_of(scale) {
            return format!("{}{unit}", bytes / scale);
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> i64 {
        feeds::time::parse_iso8601_ms(text).unwrap()
    }

    fn bounds(period: Period, at: &str) -> (String, String) {
        let (start, end) = period.bounds(ms(at));
        (
            feeds::time::format_iso8601_ms(start),
            feeds::time::format_iso8601_ms(end),
        )
    }

    #[test]
    fn days_run_from_midnight_to_midnight_utc() {
        assert_eq!(
            bounds(Period::Day, "2026-05-05T17:39:12.345Z"),
            ("2026-05-05T00:00:00Z".into(), "2026-05-06T00:00:00Z".into())
        );
        // The boundary itself belongs to the new day; the millisecond
        // before it to the old.
        assert_eq!(
            bounds(Period::Day, "2026-05-06T00:00:00Z").0,
            "2026-05-06T00:00:00Z"
        );
        assert_eq!(
            bounds(Period::Day, "2026-05-05T23:59:59.999Z").1,
            "2026-05-06T00:00:00Z"
        );
        // Before 1970 too.
        assert_eq!(
            bounds(Period::Day, "1969-12-31T12:00:00Z"),
            ("1969-12-31T00:00:00Z".into(), "1970-01-01T00:00:00Z".into())
        );
    }

    #[test]
    fn months_end_on_the_first_of_the_next_across_years_and_leap_days() {
        for (at, start, end) in [
            (
                "2026-05-05T17:39:00Z",
                "2026-05-01T00:00:00Z",
                "2026-06-01T00:00:00Z",
            ),
            (
                "2026-01-31T23:59:59.999Z",
                "2026-01-01T00:00:00Z",
                "2026-02-01T00:00:00Z",
            ),
            (
                "2026-12-31T23:00:00Z",
                "2026-12-01T00:00:00Z",
                "2027-01-01T00:00:00Z",
            ),
            (
                "2027-01-01T00:00:00Z",
                "2027-01-01T00:00:00Z",
                "2027-02-01T00:00:00Z",
            ),
            // Leap years: every fourth, not centuries, but every fourth
            // century.
            (
                "2024-02-29T12:00:00Z",
                "2024-02-01T00:00:00Z",
                "2024-03-01T00:00:00Z",
            ),
            (
                "2000-02-29T00:00:00Z",
                "2000-02-01T00:00:00Z",
                "2000-03-01T00:00:00Z",
            ),
            (
                "2100-02-28T23:59:59Z",
                "2100-02-01T00:00:00Z",
                "2100-03-01T00:00:00Z",
            ),
            (
                "2026-04-30T10:00:00Z",
                "2026-04-01T00:00:00Z",
                "2026-05-01T00:00:00Z",
            ),
        ] {
            assert_eq!(
                bounds(Period::Month, at),
                (start.to_owned(), end.to_owned()),
                "{at}"
            );
        }
        // Month lengths: 29 days in a leap February, 28 otherwise.
        let length = |at: &str| {
            let (start, end) = Period::Month.bounds(ms(at));
            (end - start) / DAY_MS
        };
        assert_eq!(length("2024-02-10T00:00:00Z"), 29);
        assert_eq!(length("2100-02-10T00:00:00Z"), 28);
        assert_eq!(length("2000-02-10T00:00:00Z"), 29);
        assert_eq!(length("2026-07-10T00:00:00Z"), 31);
    }

    #[test]
    fn sizes_parse_in_decimal_and_binary_units() {
        assert_eq!(parse_size("1000"), Ok(1_000));
        assert_eq!(parse_size("10GB"), Ok(10_000_000_000));
        assert_eq!(parse_size("10gb"), Ok(10_000_000_000));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("3KB"), Ok(3_000));
        assert_eq!(parse_size("7B"), Ok(7));
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        for bad in ["", "GB", "10 XB", "1.5GB", "-1", "99999999999TB"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(format_size(10_000_000_000), "10GB");
        assert_eq!(format_size(1_500_000), "1500KB");
        assert_eq!(format_size(123), "123 bytes");
    }

    #[test]
    fn a_quota_caps_something_and_says_what() {
        let quota = Quota {
            period: Period::Day,
            requests: Some(1_000),
            bytes: Some(10_000_000_000),
        };
        assert_eq!(quota.problem(), None);
        assert_eq!(quota.describe(), "1000 requests, 10GB per day");
        let empty = Quota {
            period: Period::Month,
            requests: None,
            bytes: None,
        };
        assert!(empty.problem().is_some());
        let zero = Quota {
            requests: Some(0),
            ..quota
        };
        assert!(zero.problem().is_some());
    }
}

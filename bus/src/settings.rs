//! Settings of the bus: where the node host publishes (`publish_url`) and
//! how long its streams keep records (`publish_max_age`, by age, and
//! `publish_max_bytes`, by size per stream), resolved from their text forms.

use std::time::Duration;

use crate::url::BusUrl;

/// Default `publish_max_age`: a day of records.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// Default `publish_max_bytes`, per stream: 4 GiB (JetStream reserves it
/// for each of the six streams and the checkpoint bucket).
pub const DEFAULT_MAX_BYTES: u64 = 4 << 30;
/// Longest JetStream duplicate window (`Nats-Msg-Id` memory); shorter when
/// `publish_max_age` is.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(600);

/// What the node host publishes to, and the streams' retention.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PublishSettings {
    /// The bus (credential hidden when shown).
    pub url: BusUrl,
    /// Records older than this (by when they were published) are dropped.
    pub max_age: Duration,
    /// Each stream keeps at most this many bytes, dropping its oldest
    /// records first (0: no size bound).
    pub max_bytes: u64,
    /// How long JetStream remembers a `Nats-Msg-Id`.
    pub duplicate_window: Duration,
}

impl PublishSettings {
    /// Resolves the text settings.
    ///
    /// # Errors
    /// `(setting name, message)` for the first bad value.
    pub fn resolve(
        url: &str,
        max_age: Option<&str>,
        max_bytes: Option<&str>,
    ) -> Result<PublishSettings, (&'static str, String)> {
        let url = BusUrl::parse(url).map_err(|message| ("publish_url", message))?;
        let max_age = match max_age {
            None => DEFAULT_MAX_AGE,
            Some(text) => match common::parse_duration(text.trim()) {
                Ok(age) if age >= Duration::from_secs(60) => age,
                Ok(_) => return Err(("publish_max_age", "must be at least 1m".to_owned())),
                Err(message) => return Err(("publish_max_age", message)),
            },
        };
        let max_bytes = match max_bytes {
            None => DEFAULT_MAX_BYTES,
            Some(text) => access::quota::parse_size(text.trim())
                .map_err(|message| ("publish_max_bytes", message))?,
        };
        Ok(PublishSettings {
            url,
            max_age,
            max_bytes,
            duplicate_window: max_age.min(DUPLICATE_WINDOW),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_resolves_with_defaults_and_names_bad_values() {
        let settings = PublishSettings::resolve("nats://127.0.0.1:4222", None, None).unwrap();
        assert_eq!(settings.max_age, DEFAULT_MAX_AGE);
        assert_eq!(settings.max_bytes, DEFAULT_MAX_BYTES);
        assert_eq!(settings.duplicate_window, DUPLICATE_WINDOW);
        let short = PublishSettings::resolve("nats://h", Some("5m"), Some("512MiB")).unwrap();
        assert_eq!(short.max_age, Duration::from_secs(300));
        assert_eq!(short.duplicate_window, Duration::from_secs(300));
        assert_eq!(short.max_bytes, 512 << 20);
        for (age, bytes, name) in [
            (Some("10"), None, "publish_max_age"),
            (Some("30s"), None, "publish_max_age"),
            (None, Some("lots"), "publish_max_bytes"),
        ] {
            assert_eq!(
                PublishSettings::resolve("nats://h", age, bytes)
                    .unwrap_err()
                    .0,
                name
            );
        }
        assert_eq!(
            PublishSettings::resolve("http://h", None, None)
                .unwrap_err()
                .0,
            "publish_url"
        );
    }
}

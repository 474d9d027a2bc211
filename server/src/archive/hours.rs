//! Hours of the archive: the times `--from` and `--to` take, the range of
//! whole hours they name with its spill-over hours, and the key of an hour
//! in the bucket.
//!
//! An hour file holds what the writing node wrote during that hour of its
//! own clock, so a block of hour H can sit at the end of H−1's file or the
//! start of H+1's (`20251130/12.lz4` begins with a block of 11:59:59.858).
//! A reader of [from, to) therefore needs the hour before `from` and the
//! hour after the last hour too: [`HourRange::with_spill_over`].

use std::fmt;

use super::dataset::Dataset;

/// One hour in milliseconds.
pub const HOUR_MS: i64 = 3_600_000;

/// Parses `--from` / `--to`: ISO-8601 with a `Z` or `±HH:MM` offset
/// (`2025-07-27T08:00:00Z`), or a bare date (`2025-07-27`, midnight UTC).
/// Unix milliseconds.
///
/// # Errors
/// A message naming the accepted forms.
pub fn parse_time(text: &str) -> Result<i64, String> {
    let text = text.trim();
    if text.len() == 10 && text.as_bytes().get(4) == Some(&b'-') {
        return feeds::time::parse_iso8601_ms(&format!("{text}T00:00:00Z"))
            .map_err(|_| format!("{text:?} is not a date (YYYY-MM-DD) nor an ISO-8601 time"));
    }
    feeds::time::parse_iso8601_ms(text).map_err(|e| format!("{e}, or a date (YYYY-MM-DD)"))
}

/// An hour of UTC time: hours since 1970-01-01T00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hour(pub i64);

impl Hour {
    /// The hour holding `ms` (Unix milliseconds).
    pub fn containing(ms: i64) -> Self {
        Self(ms.div_euclid(HOUR_MS))
    }

    /// Its start, Unix milliseconds.
    pub fn start_ms(self) -> i64 {
        self.0 * HOUR_MS
    }

    /// Its day, `YYYYMMDD`, the bucket's date folder.
    pub fn day(self) -> String {
        let (year, month, day) = feeds::time::civil_from_days(self.0.div_euclid(24));
        format!("{year:04}{month:02}{day:02}")
    }

    /// Its hour of the day, 0 to 23.
    pub fn of_day(self) -> i64 {
        self.0.rem_euclid(24)
    }

    /// The day's folder of `dataset` in the bucket, as a listing prefix:
    /// `<dataset>/hourly/YYYYMMDD/`.
    pub fn day_prefix(self, dataset: Dataset) -> String {
        format!("{dataset}/hourly/{}/", self.day())
    }

    /// Its key in the bucket: `<dataset>/hourly/YYYYMMDD/H.lz4`, the hour
    /// not zero-padded.
    pub fn key(self, dataset: Dataset) -> String {
        format!("{}{}.lz4", self.day_prefix(dataset), self.of_day())
    }

    /// The hour a key of `dataset` names, if it is an hour file's key.
    pub fn from_key(dataset: Dataset, key: &str) -> Option<Self> {
        let rest = key
            .strip_prefix(dataset.as_str())?
            .strip_prefix("/hourly/")?;
        let (day, file) = rest.split_once('/')?;
        let hour = file.strip_suffix(".lz4")?;
        let unpadded = hour.len() == 1 || (hour.len() == 2 && !hour.starts_with('0'));
        if day.len() != 8 || !day.bytes().all(|b| b.is_ascii_digit()) || !unpadded {
            return None;
        }
        let hour: i64 = hour.parse().ok().filter(|h| (0..24).contains(h))?;
        let ms = feeds::time::parse_iso8601_ms(&format!(
            "{}-{}-{}T00:00:00Z",
            &day[..4],
            &day[4..6],
            &day[6..]
        ))
        .ok()?;
        Some(Self(ms / HOUR_MS + hour))
    }
}

impl fmt::Display for Hour {
    /// `YYYYMMDD/H`, as the bucket names it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.day(), self.of_day())
    }
}

/// The whole hours [first, end) a `--from` / `--to` pair names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HourRange {
    /// The first hour.
    pub first: Hour,
    /// The hour after the last one.
    pub end: Hour,
}

impl HourRange {
    /// The hours from the one holding `from_ms` up to the one holding the
    /// last millisecond before `to_ms`: a time inside an hour takes that
    /// whole hour. `None` when `to_ms` is not after `from_ms`.
    pub fn new(from_ms: i64, to_ms: i64) -> Option<Self> {
        (to_ms > from_ms).then(|| Self {
            first: Hour::containing(from_ms),
            end: Hour(Hour::containing(to_ms - 1).0 + 1),
        })
    }

    /// How many hours the range holds.
    pub fn len(&self) -> usize {
        (self.end.0 - self.first.0) as usize
    }

    /// Never: a range holds at least one hour.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every hour to fetch, in order: the hour before the first, the range,
    /// and the hour after the last (the spill-over hours).
    pub fn with_spill_over(&self) -> impl Iterator<Item = Hour> + use<> {
        (self.first.0 - 1..=self.end.0).map(Hour)
    }

    /// Whether `hour` is one of the two spill-over hours.
    pub fn is_spill_over(&self, hour: Hour) -> bool {
        hour.0 == self.first.0 - 1 || hour == self.end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> i64 {
        parse_time(text).unwrap()
    }

    #[test]
    fn times_are_iso_8601_or_bare_dates() {
        assert_eq!(at("2025-07-27"), at("2025-07-27T00:00:00Z"));
        assert_eq!(at("2025-07-27T08:00:00Z"), 1_753_603_200_000);
        assert_eq!(at("2025-07-27T10:00:00+02:00"), at("2025-07-27T08:00:00Z"));
        assert!(parse_time("2025-02-30").is_err());
        assert!(parse_time("27/07/2025").is_err());
        assert!(
            parse_time("2025-07-27T08:00:00")
                .unwrap_err()
                .contains("YYYY-MM-DD")
        );
    }

    #[test]
    fn keys_name_unpadded_hours() {
        let dataset = Dataset::NodeFillsByBlock;
        let eight = Hour::containing(at("2025-07-27T08:00:00Z"));
        assert_eq!(
            eight.key(dataset),
            "node_fills_by_block/hourly/20250727/8.lz4"
        );
        assert_eq!(eight.to_string(), "20250727/8");
        let midnight = Hour::containing(at("2025-07-28T00:30:00Z"));
        assert_eq!(
            midnight.key(Dataset::NodeTrades),
            "node_trades/hourly/20250728/0.lz4"
        );
        let late = Hour::containing(at("2025-12-31T23:59:59Z"));
        assert_eq!(
            late.key(Dataset::MiscEventsByBlock),
            "misc_events_by_block/hourly/20251231/23.lz4"
        );
        assert_eq!(
            eight.day_prefix(Dataset::NodeFills),
            "node_fills/hourly/20250727/"
        );
    }

    #[test]
    fn keys_read_back_to_their_hours_and_others_are_not_hours() {
        let dataset = Dataset::NodeFillsByBlock;
        for hour in (0..50).map(|h| Hour(486_000 + h)) {
            assert_eq!(Hour::from_key(dataset, &hour.key(dataset)), Some(hour));
        }
        for key in [
            "node_fills_by_block/hourly/20250727/08.lz4",
            "node_fills_by_block/hourly/20250727/24.lz4",
            "node_fills_by_block/hourly/20250727/8",
            "node_fills_by_block/hourly/20250732/8.lz4",
            "node_fills/hourly/20250727/8.lz4",
            "node_fills_by_block/hourly/20250727/8.lz4.tmp",
        ] {
            assert_eq!(Hour::from_key(dataset, key), None, "{key}");
        }
    }

    #[test]
    fn ranges_are_whole_hours_with_a_spill_over_hour_each_side() {
        let range = HourRange::new(at("2025-07-27T22:00:00Z"), at("2025-07-28T01:00:00Z")).unwrap();
        assert_eq!(range.len(), 3);
        let hours: Vec<String> = range.with_spill_over().map(|h| h.to_string()).collect();
        assert_eq!(
            hours,
            [
                "20250727/21",
                "20250727/22",
                "20250727/23",
                "20250728/0",
                "20250728/1"
            ]
        );
        assert!(range.is_spill_over(Hour::containing(at("2025-07-27T21:00:00Z"))));
        assert!(range.is_spill_over(Hour::containing(at("2025-07-28T01:00:00Z"))));
        assert!(!range.is_spill_over(Hour::containing(at("2025-07-28T00:00:00Z"))));
    }

    #[test]
    fn times_inside_an_hour_take_the_whole_hour() {
        let range = HourRange::new(at("2025-07-27T08:50:10Z"), at("2025-07-27T09:00:01Z")).unwrap();
        assert_eq!(range.first, Hour::containing(at("2025-07-27T08:00:00Z")));
        assert_eq!(range.end, Hour::containing(at("2025-07-27T10:00:00Z")));
        // A bare date to the next one is the day's 24 hours.
        let day = HourRange::new(at("2025-07-27"), at("2025-07-28")).unwrap();
        assert_eq!(day.len(), 24);
        assert_eq!(day.with_spill_over().count(), 26);
        assert_eq!(HourRange::new(at("2025-07-27"), at("2025-07-27")), None);
    }
}

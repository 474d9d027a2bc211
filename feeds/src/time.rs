//! The workspace's one UTC calendar: node timestamps — ISO-8601 without a
//! zone (`2026-04-30T20:46:43.304461819`), always UTC, with 0 to 9
//! fractional digits — converted to and from Unix time; ISO-8601 with a `Z`
//! or an offset, as users write times (`2026-05-05T17:39:00Z`); the node's
//! hourly file partition; and the proleptic Gregorian day arithmetic they
//! all rest on.

use std::fmt::Write as _;

use thiserror::Error;

/// A node time string that is not `YYYY-MM-DDTHH:MM:SS[.fffffffff]`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("time: {reason} in {text:?}")]
pub struct TimeError {
    /// What is wrong with it.
    pub reason: &'static str,
    /// The offending text (at most 40 bytes of it).
    pub text: String,
}

impl TimeError {
    fn new(reason: &'static str, text: &[u8]) -> Self {
        let shown = &text[..text.len().min(40)];
        Self {
            reason,
            text: String::from_utf8_lossy(shown).into_owned(),
        }
    }
}

/// Parses a node time (UTC, no zone, 0–9 fractional digits) into Unix
/// nanoseconds.
///
/// # Errors
/// [`TimeError`] when the text is not of that form or names an impossible
/// date or time of day.
pub fn parse_node_time_ns(text: &[u8]) -> Result<i64, TimeError> {
    // The text is copied into the error only when there is one: every
    // line a node writes carries two node times, and a replay reads them
    // all.
    node_time_ns(text).map_err(|reason| TimeError::new(reason, text))
}

/// [`parse_node_time_ns`], a failure said by its reason alone.
fn node_time_ns(text: &[u8]) -> Result<i64, &'static str> {
    const LAYOUT: &str = "expected YYYY-MM-DDTHH:MM:SS";
    let Some(head) = text.first_chunk::<19>() else {
        return Err(LAYOUT);
    };
    if head[4] != b'-'
        || head[7] != b'-'
        || head[10] != b'T'
        || head[13] != b':'
        || head[16] != b':'
    {
        return Err(LAYOUT);
    }
    let digit = |at: usize| match head[at].wrapping_sub(b'0') {
        d @ 0..=9 => Ok(i64::from(d)),
        _ => Err("non-digit in date or time"),
    };
    let pair = |at: usize| -> Result<i64, &'static str> { Ok(digit(at)? * 10 + digit(at + 1)?) };
    let year = pair(0)? * 100 + pair(2)?;
    let month = pair(5)?;
    let day = pair(8)?;
    let hour = pair(11)?;
    let minute = pair(14)?;
    let second = pair(17)?;
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return Err("date out of range");
    }
    if hour > 23 || minute > 59 || second > 59 {
        return Err("time of day out of range");
    }
    let mut nanos = 0i64;
    if let Some((&point, fraction)) = text[19..].split_first() {
        if point != b'.' {
            return Err("unexpected text after seconds");
        }
        if fraction.len() > 9 {
            return Err("more than 9 fractional digits");
        }
        for &b in fraction {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                return Err("non-digit in fraction");
            }
            nanos = nanos * 10 + i64::from(d);
        }
        nanos *= TENS[9 - fraction.len()];
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3_600 + minute * 60 + second;
    // Years past 2262 do not fit Unix nanoseconds in an i64.
    secs.checked_mul(1_000_000_000)
        .and_then(|ns| ns.checked_add(nanos))
        .ok_or("time out of range")
}

/// 10^0 to 10^9: a fraction of `n` digits is `TENS[9 - n]` nanoseconds a unit.
const TENS: [i64; 10] = {
    let mut tens = [1i64; 10];
    let mut at = 1;
    while at < tens.len() {
        tens[at] = tens[at - 1] * 10;
        at += 1;
    }
    tens
};

/// Parses a node time into Unix milliseconds, truncating below the
/// millisecond (as the node's own `time` fields do).
///
/// # Errors
/// As [`parse_node_time_ns`].
pub fn parse_node_time_ms(text: &[u8]) -> Result<i64, TimeError> {
    parse_node_time_ns(text).map(|ns| ns.div_euclid(1_000_000))
}

/// Formats Unix nanoseconds the way the node does: UTC, no zone, exactly nine
/// fractional digits.
pub fn format_node_time(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let nanos = ns.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{nanos:09}",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

/// Splits Unix nanoseconds into the node's hourly file partition:
/// (`YYYYMMDD`, hour without zero padding).
pub fn hourly_partition(ns: i64) -> (String, u32) {
    let secs = ns.div_euclid(1_000_000_000);
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    let hour = secs.rem_euclid(86_400) / 3_600;
    (format!("{year:04}{month:02}{day:02}"), hour as u32)
}

/// Parses an ISO-8601 time with a `Z` or `±HH:MM` offset into Unix ms.
/// Fractions of a second are allowed down to the millisecond; finer
/// digits must be zero.
///
/// # Errors
/// A message saying what is wrong.
pub fn parse_iso8601_ms(text: &str) -> Result<i64, String> {
    let bad = |why: &str| {
        // Client input: quoted briefly.
        let shown: String = text.chars().take(64).collect();
        let cut = if shown.len() < text.len() { "…" } else { "" };
        format!("{shown:?}{cut} is not an ISO-8601 time ({why}); use e.g. 2026-05-05T17:39:00Z")
    };
    let b = text.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = b.get(range)?;
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(
            digits
                .iter()
                .fold(0i64, |n, d| n * 10 + i64::from(d - b'0')),
        )
    };
    let sep = |at: usize, want: u8| b.get(at) == Some(&want);
    if !(sep(4, b'-')
        && sep(7, b'-')
        && matches!(b.get(10), Some(b'T' | b't'))
        && sep(13, b':')
        && sep(16, b':'))
    {
        return Err(bad("expected YYYY-MM-DDTHH:MM:SS"));
    }
    let (Some(year), Some(month), Some(day), Some(hour), Some(minute), Some(second)) = (
        num(0..4),
        num(5..7),
        num(8..10),
        num(11..13),
        num(14..16),
        num(17..19),
    ) else {
        return Err(bad("expected YYYY-MM-DDTHH:MM:SS"));
    };
    let real_date = (1..=12).contains(&month)
        && (1..=31).contains(&day)
        && civil_from_days(days_from_civil(year, month, day)) == (year, month, day);
    if !real_date {
        return Err(bad("no such date"));
    }
    if hour > 23 || minute > 59 || second > 59 {
        return Err(bad("no such time of day"));
    }
    let mut at = 19;
    let mut millis = 0i64;
    if b.get(at) == Some(&b'.') {
        let digits = b[at + 1..]
            .iter()
            .take_while(|d| d.is_ascii_digit())
            .count();
        if digits == 0 {
            return Err(bad("empty fraction"));
        }
        let fraction = &b[at + 1..at + 1 + digits];
        for (i, d) in fraction.iter().enumerate() {
            let d = i64::from(d - b'0');
            if i < 3 {
                millis += d * [100, 10, 1][i];
            } else if d != 0 {
                return Err(bad("finer than a millisecond"));
            }
        }
        at += 1 + digits;
    }
    let offset_min = match b.get(at..) {
        Some(b"Z" | b"z") => 0,
        Some([sign @ (b'+' | b'-'), rest @ ..]) if rest.len() == 5 && rest[2] == b':' => {
            let (Some(h), Some(m)) = (num(at + 1..at + 3), num(at + 4..at + 6)) else {
                return Err(bad("bad offset"));
            };
            if h > 23 || m > 59 {
                return Err(bad("bad offset"));
            }
            let minutes = h * 60 + m;
            if *sign == b'-' { -minutes } else { minutes }
        }
        _ => return Err(bad("needs Z or an offset like +00:00")),
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_min * 60;
    Ok(seconds * 1_000 + millis)
}

/// Appends `ms` (Unix ms) as ISO-8601 UTC: `YYYY-MM-DDTHH:MM:SSZ`, with
/// `.mmm` when not a whole second.
pub fn write_iso8601_ms(out: &mut String, ms: i64) {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second, millis) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1_000 % 60,
        in_day % 1_000,
    );
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}"
    );
    if millis != 0 {
        let _ = write!(out, ".{millis:03}");
    }
    out.push('Z');
}

/// `ms` as ISO-8601 UTC (see [`write_iso8601_ms`]).
pub fn format_iso8601_ms(ms: i64) -> String {
    let mut out = String::with_capacity(24);
    write_iso8601_ms(&mut out, ms);
    out
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = (month + 9) % 12;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date of a day count since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::nine_digits("2026-04-30T20:46:43.304461819", 1_777_582_003_304)]
    #[case::no_fraction("2026-04-30T20:46:43", 1_777_582_003_000)]
    #[case::three_digits("2026-04-30T20:46:43.304", 1_777_582_003_304)]
    #[case::six_digits("2026-04-30T20:46:43.304461", 1_777_582_003_304)]
    #[case::epoch("1970-01-01T00:00:00", 0)]
    #[case::leap_day("2024-02-29T12:00:00.5", 1_709_208_000_500)]
    fn parses_node_times(#[case] text: &str, #[case] ms: i64) {
        assert_eq!(parse_node_time_ms(text.as_bytes()), Ok(ms));
    }

    #[rstest]
    #[case::zone_suffix("2026-04-30T20:46:43Z")]
    #[case::ten_digits("2026-04-30T20:46:43.3044618191")]
    #[case::bad_month("2026-13-30T20:46:43")]
    #[case::bad_day("2025-02-29T20:46:43")]
    #[case::bad_hour("2026-04-30T24:46:43")]
    #[case::short("2026-04-30")]
    #[case::letters("2026-0a-30T20:46:43")]
    fn rejects_malformed_times(#[case] text: &str) {
        assert!(parse_node_time_ns(text.as_bytes()).is_err());
    }

    /// The parse as it was written first, digit by digit: the reference
    /// the faster one must equal, errors included.
    fn reference_ns(text: &[u8]) -> Result<i64, &'static str> {
        let digits = |at: usize, len: usize| {
            text[at..at + len].iter().try_fold(0i64, |value, &b| {
                b.is_ascii_digit()
                    .then(|| value * 10 + i64::from(b - b'0'))
                    .ok_or("non-digit in date or time")
            })
        };
        if text.len() < 19 || text[4] != b'-' || text[7] != b'-' || text[10] != b'T' {
            return Err("expected YYYY-MM-DDTHH:MM:SS");
        }
        if text[13] != b':' || text[16] != b':' {
            return Err("expected YYYY-MM-DDTHH:MM:SS");
        }
        let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
        let (hour, minute, second) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
        if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
            return Err("date out of range");
        }
        if hour > 23 || minute > 59 || second > 59 {
            return Err("time of day out of range");
        }
        let mut nanos = 0i64;
        if text.len() > 19 {
            if text[19] != b'.' {
                return Err("unexpected text after seconds");
            }
            let fraction = &text[20..];
            if fraction.len() > 9 {
                return Err("more than 9 fractional digits");
            }
            for &b in fraction {
                if !b.is_ascii_digit() {
                    return Err("non-digit in fraction");
                }
                nanos = nanos * 10 + i64::from(b - b'0');
            }
            nanos *= 10i64.pow(9 - fraction.len() as u32);
        }
        let secs = days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second;
        secs.checked_mul(1_000_000_000)
            .and_then(|ns| ns.checked_add(nanos))
            .ok_or("time out of range")
    }

    proptest::proptest! {
        #[test]
        fn node_times_parse_as_the_digit_by_digit_reference(
            // A valid time, then bytes overwritten with ones that break it
            // in every way the layout can break (and ones that do not).
            ns in 0i64..9_000_000_000_000_000_000,
            digits in 0usize..=9,
            edits in proptest::collection::vec(
                (0usize..32, proptest::sample::select(b"0123456789-T:.Z /\x7f\xff".to_vec())),
                0..3,
            ),
            cut in 0usize..32,
        ) {
            let mut text = format_node_time(ns).into_bytes();
            text.truncate(20 + digits);
            if digits == 0 {
                text.truncate(19);
            }
            for (at, byte) in edits {
                if let Some(slot) = text.get_mut(at) {
                    *slot = byte;
                }
            }
            if cut < text.len() && cut % 3 == 0 {
                text.truncate(cut);
            }
            let expected = reference_ns(&text).map_err(|reason| TimeError::new(reason, &text));
            proptest::prop_assert_eq!(parse_node_time_ns(&text), expected);
        }
    }

    #[test]
    fn times_past_what_nanoseconds_hold_are_errors_not_overflows() {
        assert!(parse_node_time_ns(b"3000-01-01T00:00:00").is_err());
        assert!(parse_node_time_ns(b"9999-12-31T23:59:59.999999999").is_err());
        assert!(parse_node_time_ns(b"2262-04-11T23:47:16").is_ok());
        let long = format!("{}Z", "9".repeat(100_000));
        assert!(parse_iso8601_ms(&long).unwrap_err().len() < 200);
    }

    #[test]
    fn format_round_trips_with_nine_digits() {
        let text = "2026-05-05T17:39:13.024084407";
        let ns = parse_node_time_ns(text.as_bytes()).unwrap();
        assert_eq!(format_node_time(ns), text);
        assert_eq!(hourly_partition(ns), ("20260505".to_owned(), 17));
    }

    #[test]
    fn civil_conversions_agree_over_centuries() {
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn times_parse_with_offsets_and_print_back() {
        let ms = parse_iso8601_ms("2025-07-27T08:00:00Z").unwrap();
        assert_eq!(ms, 1_753_603_200_000);
        assert_eq!(format_iso8601_ms(ms), "2025-07-27T08:00:00Z");
        assert_eq!(parse_iso8601_ms("2025-07-27T10:00:00.000+02:00"), Ok(ms));
        assert_eq!(parse_iso8601_ms("2025-07-27t07:30:00-00:30"), Ok(ms));
        assert_eq!(
            parse_iso8601_ms("2024-02-29T23:59:59.5Z").map(format_iso8601_ms),
            Ok("2024-02-29T23:59:59.500Z".to_owned())
        );
        for bad in [
            "2025-07-27",
            "2025-07-27T08:00:00",
            "2025-02-29T00:00:00Z",
            "2025-07-27T24:00:00Z",
            "2025-07-27T08:00:00.0001Z",
            "2025-07-27T08:00:00+2:00",
            "2025-07-27T08:00:00.Z",
            "",
        ] {
            assert!(parse_iso8601_ms(bad).is_err(), "{bad}");
        }
    }
}

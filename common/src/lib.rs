//! The common ground of the server's crates: how client input is quoted and
//! bounded in answers, account addresses, the clock and file locks, and the
//! server's counters with their exposition ([`metrics`]).

pub mod metrics;

/// Longest quote of client input an error message carries, in characters.
pub const QUOTE_MAX_CHARS: usize = 64;

/// Most entries a client-supplied list may hold (coins, users, filter
/// values): more than every market and far more than a scope needs.
pub const MAX_LIST_ENTRIES: usize = 1_000;
/// Longest entry of such a list, in bytes (an address is 42).
pub const MAX_ENTRY_BYTES: usize = 128;

/// A client-supplied list within [`MAX_LIST_ENTRIES`] entries of at most
/// [`MAX_ENTRY_BYTES`] bytes each.
///
/// # Errors
/// The message naming `field` and the bound.
pub fn bounded_list(field: &str, values: &[String]) -> Result<(), String> {
    if values.len() > MAX_LIST_ENTRIES {
        return Err(format!(
            "{field}: at most {MAX_LIST_ENTRIES} entries, got {}",
            values.len()
        ));
    }
    match values.iter().find(|value| value.len() > MAX_ENTRY_BYTES) {
        Some(long) => Err(format!(
            "{field}: an entry of at most {MAX_ENTRY_BYTES} bytes, got {}",
            quoted(long)
        )),
        None => Ok(()),
    }
}

/// Client input as error messages quote it: Debug-quoted, at most
/// [`QUOTE_MAX_CHARS`] characters, with the input's size when cut — so an
/// answer never grows with what the client sent.
pub fn quoted(input: &str) -> String {
    let (head, cut) = cut(input);
    format!("{head:?}{cut}")
}

/// Client input that is already text of its own syntax (a JSON value, say)
/// as error messages show it: as written, cut to [`QUOTE_MAX_CHARS`]
/// characters with its size when longer.
pub fn clipped(input: &str) -> String {
    let (head, cut) = cut(input);
    format!("{head}{cut}")
}

/// The first [`QUOTE_MAX_CHARS`] characters of `input`, and `… (N bytes)`
/// when that cut something off.
fn cut(input: &str) -> (String, String) {
    let mut chars = input.chars();
    let head: String = chars.by_ref().take(QUOTE_MAX_CHARS).collect();
    let rest = if chars.next().is_none() {
        String::new()
    } else {
        format!("… ({} bytes)", input.len())
    };
    (head, rest)
}

/// An error message that may embed client input (a parser's, say), cut to
/// a bound at a character boundary.
pub fn bounded(message: String) -> String {
    const MAX_BYTES: usize = 512;
    if message.len() <= MAX_BYTES {
        return message;
    }
    let mut end = MAX_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… (message cut)", &message[..end])
}

/// A required account address (a user or a builder) as every edge checks
/// it: `0x` and 40 hex digits, any case; lowercased for case-insensitive
/// matching. The error names `field`.
///
/// # Errors
/// The message for a blank value or one that is not an address.
pub fn address(field: &str, value: &str) -> Result<String, String> {
    if value.trim().is_empty() {
        return Err(format!("{field}: required"));
    }
    let hex = value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"));
    match hex {
        Some(digits) if digits.len() == 40 && digits.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Ok(value.to_ascii_lowercase())
        }
        _ => Err(format!(
            "{field}: {} is not an address (0x followed by 40 hex digits)",
            quoted(value)
        )),
    }
}

/// Opens (creating it) the lock file at `path` and takes an exclusive
/// `flock` on it without waiting; `None` when another process holds it.
/// The lock lasts as long as the returned file is open.
///
/// # Errors
/// The file cannot be opened or locked for another reason.
pub fn lock_exclusive(path: &std::path::Path) -> std::io::Result<Option<std::fs::File>> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(file)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(errno) => Err(errno.into()),
    }
}

/// The wall clock in Unix milliseconds (0 if the clock is before 1970).
pub fn unix_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Seconds as `42 s`, `3 min 05 s`, `2 h 07 min` (the progress lines of
/// the archive and import commands).
pub fn duration_text(secs: f64) -> String {
    let secs = secs.round() as u64;
    match secs {
        0..60 => format!("{secs} s"),
        60..3_600 => format!("{} min {:02} s", secs / 60, secs % 60),
        _ => format!("{} h {:02} min", secs / 3_600, secs / 60 % 60),
    }
}

/// Parses `500ms`, `90s`, `10m`, `2h`, `1d`.
///
/// # Errors
/// A message naming the accepted units.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?}: expected a number followed by ms, s, m, h or d"))?;
    let secs = |n: u64| std::time::Duration::from_secs(value.saturating_mul(n));
    match unit {
        "ms" => Ok(std::time::Duration::from_millis(value)),
        "s" => Ok(secs(1)),
        "m" => Ok(secs(60)),
        "h" => Ok(secs(3_600)),
        "d" => Ok(secs(86_400)),
        _ => Err(format!("{text:?}: unit must be ms, s, m, h or d")),
    }
}

#[cfg(test)]
mod duration_tests {
    use super::parse_duration;

    #[test]
    fn durations_parse_with_units_and_reject_garbage() {
        assert_eq!(
            parse_duration("90s"),
            Ok(std::time::Duration::from_secs(90))
        );
        assert_eq!(
            parse_duration("2h"),
            Ok(std::time::Duration::from_secs(7_200))
        );
        assert_eq!(
            parse_duration("250ms"),
            Ok(std::time::Duration::from_millis(250))
        );
        // Grace periods of `keys rotate`.
        for (text, secs) in [("30m", 1_800), ("24h", 86_400), ("7d", 604_800), ("0s", 0)] {
            assert_eq!(
                parse_duration(text),
                Ok(std::time::Duration::from_secs(secs)),
                "{text}"
            );
        }
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("-1h").is_err());
        assert!(parse_duration("1.5h").is_err());
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("5y").is_err());
    }
}

#[cfg(test)]
mod quote_tests {
    #[test]
    fn quotes_are_bounded_whatever_the_input() {
        assert_eq!(super::quoted("BTC"), "\"BTC\"");
        let long = "A".repeat(3 << 20);
        let q = super::quoted(&long);
        assert!(q.len() < 100, "{q}");
        assert!(q.ends_with(&format!("({} bytes)", 3 << 20)), "{q}");
        let multi = "é".repeat(100);
        assert!(super::quoted(&multi).contains("(200 bytes)"));
        let message = super::bounded(format!("filter: unknown field {:?}", "x".repeat(10_000)));
        assert!(message.len() < 600, "{}", message.len());
        assert_eq!(super::bounded("short".into()), "short");
        assert_eq!(super::clipped("[1,2]"), "[1,2]");
        assert!(super::clipped(&"9".repeat(1000)).ends_with("(1000 bytes)"));
    }
}

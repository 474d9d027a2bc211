//! The l1gate server: gRPC and HTTP edges over the node's feeds, API-key
//! auth, configuration and the command line. The binary `l1gate` is a thin
//! `main` over this library so integration tests can start real servers.

pub mod access;
pub mod bus;
pub mod candles;
pub mod cli;
pub mod config;
pub mod demo;
pub mod endpoints;
pub mod grpc;
pub mod host;
pub mod http;
pub mod info;
pub mod metrics;
pub mod node;
pub mod registry;
pub mod serve;
pub mod status;
pub mod upstream;
pub mod ws;

/// Longest quote of client input an error message carries, in characters.
pub const QUOTE_MAX_CHARS: usize = 64;

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

/// The wall clock in Unix milliseconds (0 if the clock is before 1970).
pub fn unix_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
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

//! Percent-decoding, one behaviour wherever l1gate reads text out of a URL
//! (the `percent-encoding` crate does the decoding):
//!
//! - [`component`] — a path segment, a message-bus URL's credential, the
//!   query parameters of l1gate's own routes: RFC 3986, where `+` is a plus
//!   (the candle lookup's `time=…+01:00` needs it so).
//! - [`form`] — a query string a node gateway checks before it forwards
//!   the request: `application/x-www-form-urlencoded`, where `+` is a space,
//!   as the node APIs behind the gateway read their queries.
//!
//! Both keep a `%` that is not followed by two hex digits as written (as
//! browsers and the `url` crate do), and refuse a result that is not UTF-8:
//! the caller answers with an error naming the field.

use std::borrow::Cow;

use percent_encoding::percent_decode_str;

/// The decoded bytes are not UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not UTF-8 once percent-decoded")]
pub struct NotUtf8;

/// `text` percent-decoded, `+` kept.
///
/// # Errors
/// [`NotUtf8`] when the decoded bytes are not UTF-8.
pub fn component(text: &str) -> Result<Cow<'_, str>, NotUtf8> {
    percent_decode_str(text).decode_utf8().map_err(|_| NotUtf8)
}

/// `text` percent-decoded with `+` read as a space.
///
/// # Errors
/// [`NotUtf8`] when the decoded bytes are not UTF-8.
pub fn form(text: &str) -> Result<Cow<'_, str>, NotUtf8> {
    if !text.contains('+') {
        return component(text);
    }
    let spaced = text.replace('+', " ");
    component(&spaced).map(|decoded| Cow::Owned(decoded.into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_decoded_and_plus_depends_on_the_form() {
        assert_eq!(component("s3cr%40t").unwrap(), "s3cr@t");
        assert_eq!(component("xyz%3ANVDA").unwrap(), "xyz:NVDA");
        assert_eq!(component("12:00+01:00").unwrap(), "12:00+01:00");
        assert_eq!(form("a+b%2Bc").unwrap(), "a b+c");
        assert!(matches!(component("plain"), Ok(Cow::Borrowed("plain"))));
    }

    #[test]
    fn a_broken_escape_is_kept_and_a_non_utf8_result_refused() {
        assert_eq!(component("100%").unwrap(), "100%");
        assert_eq!(component("%zz%4").unwrap(), "%zz%4");
        assert_eq!(form("%G1+x").unwrap(), "%G1 x");
        assert_eq!(component("%FF"), Err(NotUtf8));
        assert_eq!(form("%C3+"), Err(NotUtf8));
        assert_eq!(component("%C3%A9").unwrap(), "é");
    }
}

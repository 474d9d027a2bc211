//! Server-side event filters: [`EventFilter`] compiled from `(field, values)`
//! pairs for one source, applied to an envelope line without a full parse.
//!
//! Constraints AND together; the values of one constraint OR together.
//! `users` matches 0x-hex addresses case-insensitively, `coins` matches
//! exactly. The user and coin of each event are found by a key lookup over
//! the event's top-level object (or array, for fills) with the envelope
//! scanner; nothing else in the event is parsed.
//!
//! A filtered line is the same envelope with non-matching events removed:
//! the bytes up to and including the `events` array's `[`, the kept events
//! byte-identical and joined by `,`, then the bytes from the closing `]` on.
//! When every event matches, the line is returned unchanged.

use std::ops::Range;

use bytes::Bytes;
use thiserror::Error;

use crate::envelope::{self, EnvelopeError, skip_string, skip_value};
use crate::index::object_value;
use crate::source::Source;

/// Why a filter cannot be compiled or applied.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FilterError {
    /// The field is not one of the feed's `filter_fields`.
    #[error("filter: unknown field {field:?} for feed {feed} ({})", allowed_text(.feed))]
    UnknownField {
        /// The field as requested.
        field: String,
        /// The feed id.
        feed: &'static str,
    },
    /// A constraint without values.
    #[error("filter: field {field:?} needs at least one value")]
    NoValues {
        /// The field as requested.
        field: String,
    },
    /// The line is not a block envelope.
    #[error("filter: {0}")]
    Envelope(#[from] EnvelopeError),
}

fn allowed_text(feed: &str) -> String {
    let fields = Source::from_feed_id(feed).map_or(&[][..], Source::filter_fields);
    if fields.is_empty() {
        "this feed has no filter fields".to_owned()
    } else {
        format!("allowed: {}", fields.join(", "))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Users,
    Coins,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Constraint {
    field: Field,
    /// `users` values are stored lower-cased.
    values: Vec<Vec<u8>>,
}

/// A compiled event filter for one source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFilter {
    source: Source,
    constraints: Vec<Constraint>,
}

/// The outcome of [`EventFilter::apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filtered {
    /// Events that matched (and were kept).
    pub matched: usize,
    /// Events in the line.
    pub total: usize,
    /// The filtered line (the original bytes when every event matched).
    pub line: Bytes,
}

impl EventFilter {
    /// Compiles `(field, values)` constraints for `source`.
    ///
    /// # Errors
    /// [`FilterError::UnknownField`] when a field is not one of
    /// `source.filter_fields()`; [`FilterError::NoValues`] when a constraint
    /// has no values.
    pub fn new<F, V, S>(source: Source, fields: &[(F, V)]) -> Result<EventFilter, FilterError>
    where
        F: AsRef<str>,
        V: AsRef<[S]>,
        S: AsRef<str>,
    {
        let mut constraints = Vec::with_capacity(fields.len());
        for (name, values) in fields {
            let name = name.as_ref();
            let field = match name {
                "users" if source.filter_fields().contains(&"users") => Field::Users,
                "coins" if source.filter_fields().contains(&"coins") => Field::Coins,
                _ => {
                    return Err(FilterError::UnknownField {
                        field: name.to_owned(),
                        feed: source.feed_id(),
                    });
                }
            };
            let values: Vec<Vec<u8>> = values
                .as_ref()
                .iter()
                .map(|v| match field {
                    Field::Users => v.as_ref().to_ascii_lowercase().into_bytes(),
                    Field::Coins => v.as_ref().as_bytes().to_vec(),
                })
                .collect();
            if values.is_empty() {
                return Err(FilterError::NoValues {
                    field: name.to_owned(),
                });
            }
            constraints.push(Constraint { field, values });
        }
        Ok(EventFilter {
            source,
            constraints,
        })
    }

    /// The source this filter was compiled for.
    pub fn source(&self) -> Source {
        self.source
    }

    /// Whether the filter has no constraint (every event matches).
    pub fn is_empty(&self) -> bool {
        self.constraints.is_empty()
    }

    /// Filters one envelope line (see the module docs for the output).
    ///
    /// # Errors
    /// [`FilterError::Envelope`] when the line is not an envelope or its
    /// events array is malformed.
    pub fn apply(&self, line: &[u8]) -> Result<Filtered, FilterError> {
        self.filter(line, || Bytes::copy_from_slice(line))
    }

    /// As [`EventFilter::apply`], returning `line` itself (no copy) when
    /// every event matches.
    ///
    /// # Errors
    /// As [`EventFilter::apply`].
    pub fn apply_bytes(&self, line: &Bytes) -> Result<Filtered, FilterError> {
        self.filter(line, || line.clone())
    }

    fn filter(&self, line: &[u8], whole: impl FnOnce() -> Bytes) -> Result<Filtered, FilterError> {
        let env = envelope::decode(line)?;
        let mut kept: Vec<Range<usize>> = Vec::new();
        let mut total = 0;
        for span in env.events() {
            let span = span?;
            total += 1;
            if self.matches(line, span.clone()) {
                kept.push(span);
            }
        }
        if kept.len() == total {
            return Ok(Filtered {
                matched: total,
                total,
                line: whole(),
            });
        }
        let head = &line[..=env.events.start];
        let tail = &line[env.events.end - 1..];
        let body: usize = kept.iter().map(|r| r.len() + 1).sum();
        let mut out = Vec::with_capacity(head.len() + body + tail.len());
        out.extend_from_slice(head);
        for (i, span) in kept.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&line[span.clone()]);
        }
        out.extend_from_slice(tail);
        Ok(Filtered {
            matched: kept.len(),
            total,
            line: Bytes::from(out),
        })
    }

    /// Whether the event spanning `event` in `line` passes every constraint.
    pub fn matches(&self, line: &[u8], event: Range<usize>) -> bool {
        let mut fields: Option<EventFields> = None;
        self.constraints.iter().all(|constraint| {
            let found =
                fields.get_or_insert_with(|| event_fields(self.source, line, event.clone()));
            let value = match constraint.field {
                Field::Users => found.user.clone(),
                Field::Coins => found.coin.clone(),
            };
            let Some(text) = value.and_then(|span| string_value(line, span)) else {
                return false;
            };
            constraint.values.iter().any(|v| match constraint.field {
                Field::Users => v.eq_ignore_ascii_case(&text),
                Field::Coins => *v == *text,
            })
        })
    }
}

/// Spans of the user and coin values of one event.
#[derive(Debug, Default)]
struct EventFields {
    user: Option<Range<usize>>,
    coin: Option<Range<usize>>,
}

/// Finds the user and coin of an event by the source's event shape.
fn event_fields(source: Source, line: &[u8], event: Range<usize>) -> EventFields {
    let top = |key: &[u8]| object_value(line, event.clone(), key);
    match source {
        Source::Fills if line.get(event.start) == Some(&b'[') => {
            // `[user, {fill}]`: the user, then the fill object with the coin.
            let (user, fill) = pair_elements(line, event);
            EventFields {
                coin: fill.and_then(|f| object_value(line, f, b"coin")),
                user,
            }
        }
        Source::OrderStatuses => EventFields {
            user: top(b"user"),
            coin: top(b"order")
                .and_then(|order| object_value(line, order, b"coin"))
                .or_else(|| top(b"coin")),
        },
        Source::TwapStatuses => {
            let state = top(b"state");
            let inner = |key: &[u8]| state.clone().and_then(|s| object_value(line, s, key));
            EventFields {
                user: inner(b"user").or_else(|| top(b"user")),
                coin: inner(b"coin").or_else(|| top(b"coin")),
            }
        }
        _ => EventFields {
            user: top(b"user"),
            coin: top(b"coin"),
        },
    }
}

/// Spans of the first two elements of the array spanning `array`.
fn pair_elements(line: &[u8], array: Range<usize>) -> (Option<Range<usize>>, Option<Range<usize>>) {
    let Some(body) = line.get(..array.end) else {
        return (None, None);
    };
    let mut pos = skip_ws(body, array.start + 1);
    let Ok(first_end) = skip_value(body, pos) else {
        return (None, None);
    };
    let first = Some(pos..first_end);
    pos = skip_ws(body, first_end);
    if body.get(pos) != Some(&b',') {
        return (first, None);
    }
    pos = skip_ws(body, pos + 1);
    let second = skip_value(body, pos).ok().map(|end| pos..end);
    (first, second)
}

fn skip_ws(line: &[u8], mut pos: usize) -> usize {
    while pos < line.len() && line[pos].is_ascii_whitespace() {
        pos += 1;
    }
    pos
}

/// The contents of a JSON string value (escapes resolved), or `None` when
/// the value is not a string.
fn string_value(line: &[u8], span: Range<usize>) -> Option<std::borrow::Cow<'_, [u8]>> {
    if line.get(span.start) != Some(&b'"') || skip_string(line, span.start).ok()? != span.end {
        return None;
    }
    let raw = &line[span.start + 1..span.end - 1];
    if memchr::memchr(b'\\', raw).is_none() {
        return Some(std::borrow::Cow::Borrowed(raw));
    }
    let text = std::str::from_utf8(raw).ok()?;
    unescape(text).map(|s| std::borrow::Cow::Owned(s.into_bytes()))
}

/// Resolves JSON string escapes.
fn unescape(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            '"' => out.push('"'),
            '\\' => out.push('\\'),
            '/' => out.push('/'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'u' => {
                let unit = hex4(&mut chars)?;
                let code = if (0xD800..0xDC00).contains(&unit) {
                    if chars.next()? != '\\' || chars.next()? != 'u' {
                        return None;
                    }
                    let low = hex4(&mut chars)?;
                    0x10000 + ((unit - 0xD800) << 10) + low.checked_sub(0xDC00)?
                } else {
                    unit
                };
                out.push(char::from_u32(code)?);
            }
            _ => return None,
        }
    }
    Some(out)
}

fn hex4(chars: &mut std::str::Chars<'_>) -> Option<u32> {
    let mut value = 0;
    for _ in 0..4 {
        value = value * 16 + chars.next()?.to_digit(16)?;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIFFS: &str = r#"{"local_time":"2026-04-30T20:46:46.266630865","block_time":"2026-04-30T20:46:43.304461819","block_number":978995377,"events":[{"user":"0xCA","oid":1,"coin":"BTC","side":"B","px":"76450.0","raw_book_diff":{"new":{"sz":"0.5"}}},{"user":"0xee","oid":2,"coin":"ETH","side":"B","px":"68823.0","raw_book_diff":"remove"},{"user":"0xca","oid":3,"coin":"ETH","side":"B","px":"1.0","raw_book_diff":"remove"}]}"#;

    fn filter(source: Source, fields: &[(&str, Vec<&str>)]) -> EventFilter {
        EventFilter::new(source, fields).unwrap()
    }

    #[test]
    fn keeps_matching_events_byte_exact() {
        let f = filter(
            Source::RawBookDiffs,
            &[("users", vec!["0xcA"]), ("coins", vec!["ETH"])],
        );
        let out = f.apply(DIFFS.as_bytes()).unwrap();
        assert_eq!((out.matched, out.total), (1, 3));
        let text = std::str::from_utf8(&out.line).unwrap();
        assert!(text.ends_with(r#""events":[{"user":"0xca","oid":3,"coin":"ETH","side":"B","px":"1.0","raw_book_diff":"remove"}]}"#));
        assert!(text.starts_with(&DIFFS[..DIFFS.find("\"events\":[").unwrap()]));
    }

    #[test]
    fn no_match_leaves_an_empty_array_and_all_match_is_the_same_line() {
        let none = filter(Source::RawBookDiffs, &[("coins", vec!["btc"])])
            .apply(DIFFS.as_bytes())
            .unwrap();
        assert_eq!(none.matched, 0);
        assert!(none.line.ends_with(br#""events":[]}"#));
        let all = filter(Source::RawBookDiffs, &[("coins", vec!["BTC", "ETH"])]);
        let line = Bytes::from_static(DIFFS.as_bytes());
        let out = all.apply_bytes(&line).unwrap();
        assert_eq!(out.line, line);
        assert_eq!(
            out.line.as_ptr(),
            line.as_ptr(),
            "no copy when everything matches"
        );
    }

    #[test]
    fn reads_users_and_coins_from_each_event_shape() {
        let env = |events: &str| {
            format!(
                r#"{{"block_time":"2026-01-01T00:00:00","block_number":1,"events":[{events}]}}"#
            )
        };
        let fill = env(r#"["0xAA",{"coin":"@142","px":"1"}],["0xbb",{"coin":"xyz:NVDA"}]"#);
        let f = filter(Source::Fills, &[("users", vec!["0xaa"])]);
        assert_eq!(f.apply(fill.as_bytes()).unwrap().matched, 1);
        let f = filter(Source::Fills, &[("coins", vec!["xyz:NVDA"])]);
        assert_eq!(f.apply(fill.as_bytes()).unwrap().matched, 1);

        let status = env(
            r#"{"time":"t","user":"0xAA","status":"open","order":{"coin":"PURR/USDC","oid":1}}"#,
        );
        let f = filter(
            Source::OrderStatuses,
            &[("coins", vec!["PURR/USDC"]), ("users", vec!["0xaa"])],
        );
        assert_eq!(f.apply(status.as_bytes()).unwrap().matched, 1);

        let twap = env(
            r#"{"time":"t","twap_id":3,"state":{"coin":"BTC","user":"0xCC","sz":"1"},"status":"activated"},{"user":"0xcc","coin":"ETH"}"#,
        );
        let f = filter(Source::TwapStatuses, &[("users", vec!["0xcc"])]);
        assert_eq!(f.apply(twap.as_bytes()).unwrap().matched, 2);
        let f = filter(Source::TwapStatuses, &[("coins", vec!["BTC"])]);
        assert_eq!(f.apply(twap.as_bytes()).unwrap().matched, 1);

        let escaped = env(r#"{"user":"0xaa","coin":"PURR\/USDC"}"#);
        let f = filter(Source::RawBookDiffs, &[("coins", vec!["PURR/USDC"])]);
        assert_eq!(f.apply(escaped.as_bytes()).unwrap().matched, 1);
    }

    #[test]
    fn constraints_on_one_field_and_together() {
        let f = filter(
            Source::RawBookDiffs,
            &[("coins", vec!["BTC", "ETH"]), ("coins", vec!["ETH"])],
        );
        assert_eq!(f.apply(DIFFS.as_bytes()).unwrap().matched, 2);
    }

    #[test]
    fn compile_errors_name_the_field() {
        let err = EventFilter::new(Source::Fills, &[("user", vec!["0x1"])]).unwrap_err();
        assert_eq!(
            err,
            FilterError::UnknownField {
                field: "user".into(),
                feed: "fills"
            }
        );
        assert_eq!(
            err.to_string(),
            r#"filter: unknown field "user" for feed fills (allowed: users, coins)"#
        );
        let err = EventFilter::new(Source::MiscEvents, &[("users", vec!["0x1"])]).unwrap_err();
        assert!(err.to_string().contains("no filter fields"), "{err}");
        let err = EventFilter::new(Source::Fills, &[("coins", Vec::<&str>::new())]).unwrap_err();
        assert_eq!(
            err,
            FilterError::NoValues {
                field: "coins".into()
            }
        );
        assert!(err.to_string().contains("\"coins\""));
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let f = filter(Source::Fills, &[("coins", vec!["BTC"])]);
        assert!(f.apply(b"not json").is_err());
        assert!(f.apply(br#"{"block_time":"2026-01-01T00:00:00","block_number":1,"events":[["0x1",{"coin":"BTC"}],[}"#).is_err());
        let odd = br#"{"block_time":"2026-01-01T00:00:00","block_number":1,"events":[1,"x",[],{},["0x1"],["0x1",7],{"user":5}]}"#;
        assert_eq!(f.apply(odd).unwrap().matched, 0);
    }
}

//! Sans-I/O decoding of one block-envelope line, without parsing the whole
//! line: `{"local_time":…,"block_time":…,"block_number":…,"events":[…]}`.
//!
//! [`decode`] reads the three header fields and locates the `events` array;
//! [`Envelope::events`] then walks the array and yields the byte span of each
//! event (string- and nesting-aware, nothing allocated). Keys may come in any
//! order; when `events` is the last key (as the node writes it) the array is
//! located from the end of the line, so the header costs O(header) and not
//! O(line).

use std::ops::Range;

use thiserror::Error;

use crate::time::{TimeError, parse_node_time_ms};

/// Why a line is not a block envelope.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum EnvelopeError {
    /// The JSON structure is broken at a byte offset.
    #[error("envelope: malformed JSON at byte {offset}: {reason}")]
    Malformed {
        /// Offset into the line.
        offset: usize,
        /// What was expected there.
        reason: &'static str,
    },
    /// A required key is absent.
    #[error("envelope: missing key {0:?}")]
    MissingKey(&'static str),
    /// `block_number` is not an unsigned integer.
    #[error("envelope: block_number is not an unsigned integer")]
    BadBlockNumber,
    /// `block_time` is not a node time.
    #[error("envelope: block_time: {0}")]
    BadBlockTime(#[from] TimeError),
    /// `local_time` is not a node time.
    #[error("envelope: local_time: {0}")]
    BadLocalTime(TimeError),
    /// The line is not UTF-8 from this byte offset on.
    #[error("envelope: not UTF-8 at byte {0}")]
    NotUtf8(usize),
}

/// The header of one block envelope and where its events are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope<'a> {
    line: &'a [u8],
    /// `block_number`: the sequential block height.
    pub block_number: u64,
    /// `block_time` in Unix milliseconds (truncated).
    pub block_time_ms: i64,
    /// Span of the `block_time` string's contents (without quotes).
    pub block_time: Range<usize>,
    /// Span of the `local_time` string's contents, when present.
    pub local_time: Option<Range<usize>>,
    /// Span of the `events` array, brackets included.
    pub events: Range<usize>,
}

impl<'a> Envelope<'a> {
    /// The line this envelope was decoded from.
    pub fn line(&self) -> &'a [u8] {
        self.line
    }

    /// The raw `block_time` text.
    pub fn block_time_text(&self) -> &'a [u8] {
        &self.line[self.block_time.clone()]
    }

    /// Iterates the byte spans (into [`Envelope::line`]) of each event.
    pub fn events(&self) -> EventSpans<'a> {
        EventSpans {
            line: self.line,
            pos: self.events.start + 1,
            end: self.events.end - 1,
            first: true,
            done: false,
        }
    }
}

/// Decodes the header of one envelope line (without its trailing newline).
///
/// # Errors
/// [`EnvelopeError`] when the line is not a JSON object with `block_number`
/// (unsigned integer), `block_time` (node time) and `events` (array).
pub fn decode(line: &[u8]) -> Result<Envelope<'_>, EnvelopeError> {
    let mut block_number = None;
    let mut block_time = None;
    let mut local_time = None;
    let mut events = None;
    let mut pos = skip_ws(line, 0);
    expect(line, pos, b'{', "expected '{'")?;
    pos += 1;
    loop {
        pos = skip_ws(line, pos);
        match line.get(pos) {
            Some(b'}') => break,
            Some(b'"') => {}
            _ => return Err(malformed(pos, "expected a key")),
        }
        let key_end = skip_string(line, pos)?;
        let key = &line[pos + 1..key_end - 1];
        pos = skip_ws(line, key_end);
        expect(line, pos, b':', "expected ':'")?;
        pos = skip_ws(line, pos + 1);
        let value_start = pos;
        // Fast path: the node writes `events` last, so its array runs to the
        // last ']' before the closing '}'.
        if key == b"events"
            && block_number.is_some()
            && block_time.is_some()
            && line.get(value_start) == Some(&b'[')
            && let Some(close) = closing_array_at_end(line)
            && close > value_start
        {
            events = Some(value_start..close + 1);
            break;
        }
        let value_end = skip_value(line, pos)?;
        match key {
            b"block_number" => {
                block_number = Some(parse_u64(&line[value_start..value_end])?);
            }
            b"block_time" => {
                block_time = Some(string_contents(line, value_start, value_end)?);
            }
            b"local_time" => {
                local_time = Some(string_contents(line, value_start, value_end)?);
            }
            b"events" => {
                if line[value_start] != b'[' {
                    return Err(malformed(value_start, "events is not an array"));
                }
                events = Some(value_start..value_end);
            }
            _ => {}
        }
        pos = skip_ws(line, value_end);
        match line.get(pos) {
            Some(b',') => pos += 1,
            Some(b'}') => break,
            _ => return Err(malformed(pos, "expected ',' or '}'")),
        }
    }
    let block_number = block_number.ok_or(EnvelopeError::MissingKey("block_number"))?;
    let block_time = block_time.ok_or(EnvelopeError::MissingKey("block_time"))?;
    let events = events.ok_or(EnvelopeError::MissingKey("events"))?;
    let block_time_ms = parse_node_time_ms(&line[block_time.clone()])?;
    Ok(Envelope {
        line,
        block_number,
        block_time_ms,
        block_time,
        local_time,
        events,
    })
}

/// Decodes the header of a line as the node writes it whole: [`decode`],
/// and besides, the line is UTF-8 throughout and carries a `local_time`
/// that is a node time. A line cut short, pieced together or damaged on
/// disk fails here even when its block number still reads, so it never
/// takes the place of its block's real line. (The cost over [`decode`]: one
/// UTF-8 pass, tens of GB/s.)
///
/// # Errors
/// As [`decode`]; [`EnvelopeError::MissingKey`] for a line without
/// `local_time`, [`EnvelopeError::BadLocalTime`],
/// [`EnvelopeError::NotUtf8`].
pub fn decode_whole(line: &[u8]) -> Result<Envelope<'_>, EnvelopeError> {
    if let Err(error) = simdutf8::compat::from_utf8(line) {
        return Err(EnvelopeError::NotUtf8(error.valid_up_to()));
    }
    let envelope = decode(line)?;
    let local_time = envelope
        .local_time
        .clone()
        .ok_or(EnvelopeError::MissingKey("local_time"))?;
    parse_node_time_ms(&line[local_time]).map_err(EnvelopeError::BadLocalTime)?;
    Ok(envelope)
}

/// Iterator over the byte spans of the elements of an envelope's `events`.
#[derive(Debug, Clone)]
pub struct EventSpans<'a> {
    line: &'a [u8],
    pos: usize,
    end: usize,
    first: bool,
    done: bool,
}

impl<'a> EventSpans<'a> {
    /// The next span, like [`Iterator::next`], but `measure` is first asked
    /// for the length of the event at the current position, given the line
    /// from there to the array's closing bracket. A caller that decodes
    /// events anyway passes a decoder that reports how many bytes it read,
    /// so an event it recognises is delimited by its own decode and not
    /// walked twice; the bracket walk runs only when `measure` answers `None`
    /// (or a length that does not fit).
    pub fn next_measured(
        &mut self,
        measure: impl FnOnce(&'a [u8]) -> Option<usize>,
    ) -> Option<Result<Range<usize>, EnvelopeError>> {
        if self.done {
            return None;
        }
        let line: &'a [u8] = &self.line[..self.end];
        let mut pos = skip_ws(line, self.pos);
        if !self.first {
            match line.get(pos) {
                None => {
                    self.done = true;
                    return None;
                }
                Some(b',') => pos = skip_ws(line, pos + 1),
                Some(_) => {
                    self.done = true;
                    return Some(Err(malformed(pos, "expected ',' between events")));
                }
            }
        } else if pos >= line.len() {
            self.done = true;
            return None;
        }
        self.first = false;
        let measured = measure(&line[pos..]).filter(|&len| len > 0 && pos + len <= line.len());
        match measured.map_or_else(|| skip_value(line, pos), |len| Ok(pos + len)) {
            Ok(end) => {
                self.pos = end;
                Some(Ok(pos..end))
            }
            Err(error) => {
                self.done = true;
                Some(Err(error))
            }
        }
    }
}

impl Iterator for EventSpans<'_> {
    type Item = Result<Range<usize>, EnvelopeError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_measured(|_| None)
    }
}

/// Skips one JSON value starting at `pos`; returns the offset just past it.
///
/// # Errors
/// [`EnvelopeError::Malformed`] for unterminated strings, unbalanced
/// brackets or a missing value.
pub fn skip_value(line: &[u8], pos: usize) -> Result<usize, EnvelopeError> {
    match line.get(pos) {
        Some(b'"') => skip_string(line, pos),
        Some(b'{' | b'[') => skip_nested(line, pos),
        Some(_) => {
            let end = line[pos..]
                .iter()
                .position(|&b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n'))
                .map_or(line.len(), |n| pos + n);
            if end == pos {
                Err(malformed(pos, "expected a value"))
            } else {
                Ok(end)
            }
        }
        None => Err(malformed(pos, "expected a value")),
    }
}

/// Skips the string starting at the quote at `pos`; returns the offset just
/// past the closing quote.
///
/// # Errors
/// [`EnvelopeError::Malformed`] when the string is not terminated.
pub fn skip_string(line: &[u8], pos: usize) -> Result<usize, EnvelopeError> {
    let mut at = pos + 1;
    loop {
        match memchr::memchr2(b'"', b'\\', &line[at.min(line.len())..]) {
            Some(n) if line[at + n] == b'"' => return Ok(at + n + 1),
            Some(n) => at += n + 2,
            None => return Err(malformed(pos, "unterminated string")),
        }
    }
}

fn skip_nested(line: &[u8], pos: usize) -> Result<usize, EnvelopeError> {
    match crate::structural::skip_nested(line, pos) {
        Some(end) => Ok(end),
        // Rewalked byte by byte for the exact error and offset.
        None => skip_nested_bytes(line, pos),
    }
}

/// The byte-by-byte walk [`skip_nested`] equals (and reports errors with).
fn skip_nested_bytes(line: &[u8], pos: usize) -> Result<usize, EnvelopeError> {
    let mut depth = 0usize;
    let mut at = pos;
    while at < line.len() {
        match line[at] {
            b'"' => {
                at = skip_string(line, at)?;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return Ok(at + 1);
                }
            }
            _ => {}
        }
        at += 1;
    }
    Err(malformed(pos, "unbalanced brackets"))
}

/// Offset of the `]` that closes an array ending the top-level object, i.e.
/// the line ends with `]` whitespace `}` whitespace.
fn closing_array_at_end(line: &[u8]) -> Option<usize> {
    let mut end = line.len();
    while end > 0 && line[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    if end == 0 || line[end - 1] != b'}' {
        return None;
    }
    end -= 1;
    while end > 0 && line[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    (end > 0 && line[end - 1] == b']').then(|| end - 1)
}

fn skip_ws(line: &[u8], mut pos: usize) -> usize {
    while pos < line.len() && line[pos].is_ascii_whitespace() {
        pos += 1;
    }
    pos
}

fn expect(line: &[u8], pos: usize, byte: u8, reason: &'static str) -> Result<(), EnvelopeError> {
    if line.get(pos) == Some(&byte) {
        Ok(())
    } else {
        Err(malformed(pos, reason))
    }
}

fn string_contents(line: &[u8], start: usize, end: usize) -> Result<Range<usize>, EnvelopeError> {
    if line[start] == b'"' && end >= start + 2 {
        Ok(start + 1..end - 1)
    } else {
        Err(malformed(start, "expected a string"))
    }
}

fn parse_u64(text: &[u8]) -> Result<u64, EnvelopeError> {
    if text.is_empty() || text.len() > 20 {
        return Err(EnvelopeError::BadBlockNumber);
    }
    let mut value: u64 = 0;
    for &b in text {
        if !b.is_ascii_digit() {
            return Err(EnvelopeError::BadBlockNumber);
        }
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or(EnvelopeError::BadBlockNumber)?;
    }
    Ok(value)
}

fn malformed(offset: usize, reason: &'static str) -> EnvelopeError {
    EnvelopeError::Malformed { offset, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY: &str = r#"{"local_time":"2026-04-30T20:46:46.266580134","block_time":"2026-04-30T20:46:43.304461819","block_number":978995377,"events":[]}"#;
    const DIFFS: &str = r#"{"local_time":"2026-04-30T20:46:46.266630865","block_time":"2026-04-30T20:46:43.304461819","block_number":978995377,"events":[{"user":"0xca","oid":1,"coin":"BTC","side":"B","px":"76450.0","raw_book_diff":{"new":{"sz":"0.5"}}},{"user":"0xee","oid":2,"coin":"BTC","side":"B","px":"68823.0","raw_book_diff":"remove"}]}"#;

    fn spans(line: &str) -> Vec<String> {
        let env = decode(line.as_bytes()).unwrap();
        env.events()
            .map(|span| line[span.unwrap()].to_owned())
            .collect()
    }

    #[test]
    fn decodes_the_header_of_an_empty_block() {
        let env = decode(EMPTY.as_bytes()).unwrap();
        assert_eq!(env.block_number, 978_995_377);
        assert_eq!(env.block_time_ms, 1_777_582_003_304);
        assert_eq!(env.block_time_text(), b"2026-04-30T20:46:43.304461819");
        assert!(spans(EMPTY).is_empty());
    }

    #[test]
    fn yields_each_event_byte_exact() {
        let events = spans(DIFFS);
        assert_eq!(events.len(), 2);
        assert!(events[0].starts_with(r#"{"user":"0xca""#));
        assert!(events[1].ends_with(r#""raw_book_diff":"remove"}"#));
    }

    /// A stand-in for a decoder: the event index and the rest of the line
    /// in, a length out.
    type Measure<'m> = &'m dyn Fn(usize, &[u8]) -> Option<usize>;

    #[test]
    fn measured_spans_equal_walked_spans_and_bad_measures_are_ignored() {
        let walked: Vec<_> = decode(DIFFS.as_bytes()).unwrap().events().collect();
        let env = decode(DIFFS.as_bytes()).unwrap();
        // A measure that knows the true lengths (as a decoder would), one
        // that knows nothing, and ones answering lengths that cannot be.
        let truth: Vec<usize> = walked.iter().map(|s| s.as_ref().unwrap().len()).collect();
        let measures: [Measure<'_>; 4] = [
            &|i, _| truth.get(i).copied(),
            &|_, _| None,
            &|_, _| Some(0),
            &|_, rest| Some(rest.len() + 1),
        ];
        for measure in measures {
            let mut spans = env.events();
            let mut got = Vec::new();
            while let Some(span) = spans.next_measured(|rest| measure(got.len(), rest)) {
                got.push(span);
            }
            assert_eq!(got, walked);
        }
        // The rest handed to the measure starts at the event and stops
        // before the closing bracket.
        let mut spans = env.events();
        let mut seen = Vec::new();
        while spans
            .next_measured(|rest| {
                seen.push(String::from_utf8_lossy(rest).into_owned());
                None
            })
            .is_some()
        {}
        assert!(seen[0].starts_with(r#"{"user":"0xca""#));
        assert!(seen[1].starts_with(r#"{"user":"0xee""#) && seen[1].ends_with(r#""remove"}"#));
    }

    #[test]
    fn accepts_keys_in_any_order_and_whitespace() {
        let line = r#"{ "events" : [ ["0xab", {"coin":"B]{\"TC"}] , [] ], "block_number": 7, "block_time": "2026-01-01T00:00:00" }"#;
        let env = decode(line.as_bytes()).unwrap();
        assert_eq!(env.block_number, 7);
        let events = spans(line);
        assert_eq!(events, vec![r#"["0xab", {"coin":"B]{\"TC"}]"#, "[]"]);
    }

    #[test]
    fn reports_missing_and_malformed_fields() {
        assert_eq!(
            decode(br#"{"block_time":"2026-01-01T00:00:00","events":[]}"#),
            Err(EnvelopeError::MissingKey("block_number"))
        );
        assert_eq!(
            decode(br#"{"block_number":-1,"block_time":"2026-01-01T00:00:00","events":[]}"#),
            Err(EnvelopeError::BadBlockNumber)
        );
        assert!(matches!(
            decode(br#"{"block_number":1,"block_time":"2026-01-01T00:00:00","events":[{"a":"#),
            Err(EnvelopeError::Malformed { .. })
        ));
        assert!(matches!(
            decode(br#"{"block_number":1,"block_time":"yesterday","events":[]}"#),
            Err(EnvelopeError::BadBlockTime(_))
        ));
    }

    #[test]
    fn a_truncated_event_array_is_an_error_not_a_panic() {
        let line =
            br#"{"block_number":1,"block_time":"2026-01-01T00:00:00","events":[{"a":1},{"b":]}"#;
        let env = decode(line).unwrap();
        let results: Vec<_> = env.events().collect();
        assert!(results.iter().any(Result::is_err));
    }

    #[test]
    fn a_whole_line_has_utf8_throughout_and_a_node_local_time() {
        for line in [EMPTY, DIFFS] {
            assert_eq!(decode_whole(line.as_bytes()), decode(line.as_bytes()));
        }
        let without = EMPTY.replace(r#""local_time":"2026-04-30T20:46:46.266580134","#, "");
        assert!(decode(without.as_bytes()).is_ok(), "the header alone reads");
        assert_eq!(
            decode_whole(without.as_bytes()),
            Err(EnvelopeError::MissingKey("local_time"))
        );
        let odd = EMPTY.replace("2026-04-30T20:46:46.266580134", "now");
        assert!(matches!(
            decode_whole(odd.as_bytes()),
            Err(EnvelopeError::BadLocalTime(_))
        ));
        let mut bytes = DIFFS.as_bytes().to_vec();
        let at = DIFFS.find("BTC").unwrap();
        bytes[at] = 0xff;
        assert!(decode(&bytes).is_ok());
        assert_eq!(decode_whole(&bytes), Err(EnvelopeError::NotUtf8(at)));
    }

    proptest::proptest! {
        /// A line that is not UTF-8 is refused at the first byte std's
        /// check refuses, however long the line and wherever the byte.
        #[test]
        fn a_line_not_utf8_is_refused_where_std_refuses_it(
            at in 0usize..2_000,
            bad in proptest::sample::select(vec![
                vec![0xffu8], vec![0xc3], vec![0xe2, 0x82], vec![0xed, 0xa0, 0x80], vec![0x80],
            ]),
            wide in proptest::sample::select(vec!["", "é", "€", "😀"]),
        ) {
            let mut line = DIFFS.replace("0xca", &format!("0xca{}", wide.repeat(20))).into_bytes();
            line.extend(std::iter::repeat_n(b' ', 2_000));
            let at = at.min(line.len() - 1);
            line.splice(at..at, bad);
            let expected = std::str::from_utf8(&line).err().map(|error| error.valid_up_to());
            let found = match decode_whole(&line) {
                Err(EnvelopeError::NotUtf8(at)) => Some(at),
                _ => None,
            };
            proptest::prop_assert_eq!(found, expected);
        }

        /// The chunked scanner ends every value where the byte walk does,
        /// escapes, strings and chunk boundaries included.
        #[test]
        fn chunked_skip_equals_the_byte_walk(
            body in proptest::collection::vec(
                proptest::sample::select(b"{}[]\"\\a,:0 ".to_vec()), 0..400),
            open in proptest::sample::select(b"{[".to_vec()),
        ) {
            let mut line = vec![open];
            line.extend_from_slice(&body);
            proptest::prop_assert_eq!(skip_nested(&line, 0), skip_nested_bytes(&line, 0));
        }

        /// Real JSON nesting, long and escaped strings, across many chunks.
        #[test]
        fn chunked_skip_ends_generated_json_exactly(value in json_value(), tail in "[ ,\\]}]{0,3}") {
            let text = serde_json::to_string(&serde_json::json!([value])).unwrap();
            let line = format!("{text}{tail}");
            proptest::prop_assert_eq!(skip_nested(line.as_bytes(), 0), Ok(text.len()));
        }
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            any::<i64>().prop_map(serde_json::Value::from),
            "[a-z{}\\[\\]\"\\\\]{0,90}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(5, 200, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::from),
                proptest::collection::btree_map("[a-z\"]{1,6}", inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }
}

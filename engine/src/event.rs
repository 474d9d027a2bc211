//! Typed node events, decoded from the byte spans that
//! [`feeds::envelope`] yields. Strings borrow from the line; numbers stay
//! exact ([`Decimal`]). Unknown keys are ignored so newer node versions keep
//! decoding.

use serde::Deserialize;
use serde_json::value::RawValue;
use thiserror::Error;

use crate::num::Decimal;

/// An event span that does not decode into its source's event type.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("event: {source_name} event does not decode: {reason}")]
pub struct EventError {
    /// `fills`, `order_statuses`, `raw_book_diffs`, ...
    pub source_name: &'static str,
    /// serde's message.
    pub reason: String,
}

impl EventError {
    /// A trade line whose time is not the node's time text.
    pub(crate) fn unreadable_time(source_name: &'static str) -> Self {
        Self {
            source_name,
            reason: "time is not a UTC time like 2025-03-22T23:00:00.000984711".to_owned(),
        }
    }

    fn from_serde(source_name: &'static str, error: &serde_json::Error) -> Self {
        Self {
            source_name,
            reason: error.to_string(),
        }
    }
}

/// `"B"` (bid / buy) or `"A"` (ask / sell).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
pub enum Side {
    /// Bid / buy.
    #[serde(rename = "B")]
    Bid,
    /// Ask / sell.
    #[serde(rename = "A")]
    Ask,
}

impl Side {
    /// The node's letter.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Bid => "B",
            Side::Ask => "A",
        }
    }

    /// The other side.
    #[must_use]
    pub fn opposite(self) -> Side {
        match self {
            Side::Bid => Side::Ask,
            Side::Ask => Side::Bid,
        }
    }
}

impl serde::Serialize for Side {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// The order object shared by order statuses and L4 snapshots.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeOrder<'a> {
    /// Market.
    pub coin: &'a str,
    /// Side.
    pub side: Side,
    /// Limit price.
    pub limit_px: Decimal,
    /// Remaining size (`"0.0"` on `filled` and for position TP/SL).
    pub sz: Decimal,
    /// Order id.
    pub oid: u64,
    /// Placement time, Unix ms.
    pub timestamp: i64,
    /// `"N/A"`, `"Price above 76717"`, `"Triggered"`, ...
    pub trigger_condition: &'a str,
    /// Untriggered trigger order.
    pub is_trigger: bool,
    /// Trigger price (`"0.0"` if none).
    pub trigger_px: Decimal,
    /// Bracket children, undecoded.
    #[serde(borrow, default)]
    pub children: Option<&'a RawValue>,
    /// Position TP/SL (size follows the position).
    pub is_position_tpsl: bool,
    /// Reduce-only.
    pub reduce_only: bool,
    /// `"Limit"`, `"Stop Market"`, ...
    pub order_type: &'a str,
    /// Original size.
    pub orig_sz: Decimal,
    /// `"Gtc"`, `"Ioc"`, `"Alo"`, ... or null.
    pub tif: Option<&'a str>,
    /// Client order id.
    pub cloid: Option<&'a str>,
}

/// Builder attribution on an order status: `{"b": address, "f": fee}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct BuilderInfo<'a> {
    /// Builder address.
    pub b: &'a str,
    /// Fee in tenths of a basis point.
    pub f: u64,
}

/// One `node_order_statuses` event.
#[derive(Debug, Clone, Deserialize)]
pub struct OrderStatusEvent<'a> {
    /// Block time text.
    pub time: &'a str,
    /// Order owner.
    pub user: &'a str,
    /// Transaction hash, null for system statuses.
    pub hash: Option<&'a str>,
    /// Builder attribution.
    #[serde(borrow)]
    pub builder: Option<BuilderInfo<'a>>,
    /// One of the 32 statuses (an open set).
    pub status: &'a str,
    /// The order.
    #[serde(borrow)]
    pub order: NodeOrder<'a>,
}

impl OrderStatusEvent<'_> {
    /// Whether this status can open a resting order for a raw `new` diff:
    /// `open` (IOC included, not a trigger) or `triggered`.
    pub fn opens_resting_order(&self) -> bool {
        (self.status == "open" && !self.order.is_trigger) || self.status == "triggered"
    }
}

/// What a raw book diff does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawBookDiff {
    /// The order now rests at the diff's `px` with this size.
    New {
        /// Resting size after matching.
        sz: Decimal,
    },
    /// Resting size changed.
    Update {
        /// Size before.
        orig_sz: Decimal,
        /// Size after (may be `"0.0"`).
        new_sz: Decimal,
    },
    /// The order left the book.
    Remove,
}

impl<'de> Deserialize<'de> for RawBookDiff {
    /// `"remove"`, `{"new":{"sz":…}}` or `{"update":{"origSz":…,"newSz":…}}`,
    /// read in place (no buffering of the value, unlike an untagged enum).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct NewBody {
            sz: Decimal,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct UpdateBody {
            orig_sz: Decimal,
            new_sz: Decimal,
        }
        struct DiffVisitor;
        impl<'de> serde::de::Visitor<'de> for DiffVisitor {
            type Value = RawBookDiff;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(r#""remove", {"new":{…}} or {"update":{…}}"#)
            }

            fn visit_str<E: serde::de::Error>(self, word: &str) -> Result<RawBookDiff, E> {
                if word == "remove" {
                    Ok(RawBookDiff::Remove)
                } else {
                    Err(E::custom(format!("unknown raw_book_diff {word:?}")))
                }
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<RawBookDiff, A::Error> {
                use serde::de::Error;
                let Some(tag) = map.next_key::<std::borrow::Cow<'de, str>>()? else {
                    return Err(A::Error::custom("empty raw_book_diff object"));
                };
                let diff = match &*tag {
                    "new" => RawBookDiff::New {
                        sz: map.next_value::<NewBody>()?.sz,
                    },
                    "update" => {
                        let body = map.next_value::<UpdateBody>()?;
                        RawBookDiff::Update {
                            orig_sz: body.orig_sz,
                            new_sz: body.new_sz,
                        }
                    }
                    other => {
                        return Err(A::Error::custom(format!("unknown raw_book_diff {other:?}")));
                    }
                };
                if map.next_key::<serde::de::IgnoredAny>()?.is_some() {
                    return Err(A::Error::custom("raw_book_diff has more than one key"));
                }
                Ok(diff)
            }
        }
        deserializer.deserialize_any(DiffVisitor)
    }
}

/// One `node_raw_book_diffs` event.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct BookDiffEvent<'a> {
    /// Order owner.
    pub user: &'a str,
    /// Order id.
    pub oid: u64,
    /// Market.
    pub coin: &'a str,
    /// Side.
    pub side: Side,
    /// Resting price (authoritative for `new`).
    pub px: Decimal,
    /// The change.
    pub raw_book_diff: RawBookDiff,
}

/// Liquidation details on a fill.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiquidationInfo<'a> {
    /// The liquidated account.
    #[serde(default)]
    pub liquidated_user: Option<&'a str>,
    /// Mark price at liquidation.
    pub mark_px: Decimal,
    /// `"market"` or `"backstop"`.
    pub method: &'a str,
}

/// A fill object (one party's execution).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fill<'a> {
    /// Market.
    pub coin: &'a str,
    /// Price.
    pub px: Decimal,
    /// Size.
    pub sz: Decimal,
    /// This party's side.
    pub side: Side,
    /// Unix ms.
    pub time: i64,
    /// Position before the fill (signed).
    pub start_position: Decimal,
    /// `Open Long`, `Close Short`, `Buy`, ...
    pub dir: &'a str,
    /// Realised PnL.
    pub closed_pnl: Decimal,
    /// Taker's transaction hash (all zeros for TWAP slices).
    pub hash: &'a str,
    /// Order id.
    pub oid: u64,
    /// True = taker.
    pub crossed: bool,
    /// Fee (negative = rebate).
    pub fee: Decimal,
    /// Trade id shared by both fills.
    pub tid: u64,
    /// Client order id.
    #[serde(default)]
    pub cloid: Option<&'a str>,
    /// Fee token.
    pub fee_token: &'a str,
    /// TWAP id on the owner's side.
    #[serde(default)]
    pub twap_id: Option<u64>,
    /// Builder address.
    #[serde(default)]
    pub builder: Option<&'a str>,
    /// Builder fee.
    #[serde(default)]
    pub builder_fee: Option<Decimal>,
    /// HIP-3 deployer fee.
    #[serde(default)]
    pub deployer_fee: Option<Decimal>,
    /// Priority gas.
    #[serde(default)]
    pub priority_gas: Option<Decimal>,
    /// Liquidation details.
    #[serde(borrow, default)]
    pub liquidation: Option<LiquidationInfo<'a>>,
}

/// One `node_fills` event: `[user, fill]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FillEvent<'a>(pub &'a str, #[serde(borrow)] pub Fill<'a>);

impl<'a> FillEvent<'a> {
    /// The fill's own account.
    pub fn user(&self) -> &'a str {
        self.0
    }

    /// The fill.
    pub fn fill(&self) -> &Fill<'a> {
        &self.1
    }
}

/// Decodes one order-status event span.
///
/// # Errors
/// [`EventError`] when the span is not an order status.
pub fn decode_order_status(span: &[u8]) -> Result<OrderStatusEvent<'_>, EventError> {
    if let Some(event) = compact::order_status(span) {
        return Ok(event);
    }
    decode_order_status_generic(span)
}

/// [`decode_order_status`] through serde alone, without the fast path for
/// the node's own layout (the reference the fast path is tested against).
///
/// # Errors
/// [`EventError`] when the span is not an order status.
pub fn decode_order_status_generic(span: &[u8]) -> Result<OrderStatusEvent<'_>, EventError> {
    serde_json::from_slice(span).map_err(|e| EventError::from_serde("order_statuses", &e))
}

/// Decodes the order status that starts `bytes` when it is in the node's
/// own compact layout, returning it and its length in bytes; `None` for
/// anything else (delimit the event and use [`decode_order_status`]). Lets a
/// walk over a line delimit an event by decoding it, instead of walking its
/// brackets first.
pub fn decode_order_status_at(bytes: &[u8]) -> Option<(OrderStatusEvent<'_>, usize)> {
    compact::order_status_at(bytes)
}

/// [`decode_order_status_at`] for raw book diffs: the diff that starts
/// `bytes` and its length, or `None` (use [`decode_book_diff`]).
pub fn decode_book_diff_at(bytes: &[u8]) -> Option<(BookDiffEvent<'_>, usize)> {
    compact::book_diff_at(bytes)
}

/// The contents of the JSON string that starts at `bytes` (its opening quote
/// already passed) when it is plain — no escape and no control byte before
/// its closing quote — as the node writes its strings; `None` otherwise.
pub fn plain_string(bytes: &[u8]) -> Option<&[u8]> {
    compact::plain_string_len(bytes).map(|len| &bytes[..len])
}

/// The JSON integer that starts `bytes` when it fits `u64` (no sign, no
/// leading zero, no fraction or exponent after it), and its length.
pub fn leading_unsigned(bytes: &[u8]) -> Option<(u64, usize)> {
    compact::unsigned_at(bytes)
}

/// Decodes one raw-book-diff event span.
///
/// # Errors
/// [`EventError`] when the span is not a raw book diff.
pub fn decode_book_diff(span: &[u8]) -> Result<BookDiffEvent<'_>, EventError> {
    if let Some(event) = compact::book_diff(span) {
        return Ok(event);
    }
    serde_json::from_slice(span).map_err(|e| EventError::from_serde("raw_book_diffs", &e))
}

/// [`decode_order_status_at`] for fills: the `[user, fill]` event that
/// starts `bytes` and its length, or `None` (use [`decode_fill`]).
pub fn decode_fill_at(bytes: &[u8]) -> Option<(FillEvent<'_>, usize)> {
    compact::fill_at(bytes)
}

/// Decodes one fill event span (`[user, fill]`).
///
/// # Errors
/// [`EventError`] when the span is not a fill pair.
pub fn decode_fill(span: &[u8]) -> Result<FillEvent<'_>, EventError> {
    if let Some(event) = compact::fill(span) {
        return Ok(event);
    }
    serde_json::from_slice(span).map_err(|e| EventError::from_serde("fills", &e))
}

/// One party of a `node_trades` line (the node's older trade format; see
/// `feeds::legacy`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TradeParty<'a> {
    /// The party's account.
    pub user: &'a str,
    /// Its position before the trade (signed).
    pub start_pos: Decimal,
    /// Its order id.
    pub oid: u64,
    /// Its TWAP id, when the order was a TWAP slice.
    #[serde(default)]
    pub twap_id: Option<u64>,
    /// Its client order id.
    #[serde(default)]
    pub cloid: Option<&'a str>,
}

/// One `node_trades` line: a whole trade, both parties in `side_info`
/// (the buyer first, as the exchange's documentation of the format says).
/// It has no trade id, fees, PnL or direction.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TradeLine<'a> {
    /// Market.
    pub coin: &'a str,
    /// The taker's side.
    pub side: Side,
    /// The node's time text (UTC, nanoseconds, no zone).
    pub time: &'a str,
    /// Price.
    pub px: Decimal,
    /// Size.
    pub sz: Decimal,
    /// The taker's transaction hash.
    pub hash: &'a str,
    /// `[buyer, seller]`.
    #[serde(borrow)]
    pub side_info: [TradeParty<'a>; 2],
}

/// Decodes one `node_trades` line.
///
/// # Errors
/// [`EventError`] when the span is not a trade line.
pub fn decode_trade_line(span: &[u8]) -> Result<TradeLine<'_>, EventError> {
    serde_json::from_slice(span).map_err(|e| EventError::from_serde("trades", &e))
}

/// A fast path for the exact compact layout the node writes, tried before
/// serde. It accepts only input that serde decodes to the same value (no
/// whitespace, no escapes or control bytes in strings, keys in the node's
/// order, plain integers) and answers `None` for anything else, which then
/// goes through serde unchanged — errors included.
mod compact {
    use std::sync::LazyLock;

    use serde_json::value::RawValue;

    use super::{
        BookDiffEvent, BuilderInfo, Fill, FillEvent, NodeOrder, OrderStatusEvent, RawBookDiff, Side,
    };
    use crate::digits;
    use crate::num::Decimal;

    struct Cursor<'a> {
        bytes: &'a [u8],
        at: usize,
    }

    impl<'a> Cursor<'a> {
        /// Past `text`, when the bytes go on with it. Its length is known
        /// when compiled, so the test is a few inline word compares rather
        /// than a `memcmp` call (a status has some twenty keys).
        fn literal<const N: usize>(&mut self, text: &[u8; N]) -> Option<()> {
            let next = self.bytes.get(self.at..)?.first_chunk::<N>()?;
            (next == text).then(|| self.at += N)
        }

        /// Past `key` (a field's key and what precedes its value), ready to
        /// read the value: `c.after(br#","sz":""#)?.decimal()`.
        fn after<const N: usize>(&mut self, key: &[u8; N]) -> Option<&mut Self> {
            self.literal(key)?;
            Some(self)
        }

        /// The contents of a string whose opening quote was consumed, up to
        /// and past its closing quote.
        fn string(&mut self) -> Option<&'a str> {
            let (bytes, ascii) = self.string_bytes()?;
            if ascii {
                #[allow(unsafe_code)]
                // SAFETY: the scan found every byte below 0x80, and ASCII
                // text is valid UTF-8. (Validating again cost a tenth of a
                // status decode: a dozen short strings per status, each too
                // short for the validator's word-at-a-time loop.)
                Some(unsafe { std::str::from_utf8_unchecked(bytes) })
            } else {
                std::str::from_utf8(bytes).ok()
            }
        }

        /// A string's contents without escapes, as bytes, and whether they
        /// are all ASCII.
        fn string_bytes(&mut self) -> Option<(&'a [u8], bool)> {
            let rest = self.bytes.get(self.at..)?;
            let (len, ascii) = scan_plain_string(rest)?;
            self.at += len + 1;
            Some((&rest[..len], ascii))
        }

        /// A decimal string's value, opening quote consumed: the node's
        /// plain numbers in one pass, anything else read as a string and
        /// parsed.
        fn decimal(&mut self) -> Option<Decimal> {
            let rest = self.bytes.get(self.at..)?;
            if let Some((value, len)) = Decimal::parse_quoted(rest) {
                self.at += len + 1;
                return Some(value);
            }
            Decimal::parse_bytes(self.string_bytes()?.0).ok()
        }

        /// A JSON integer that fits `u64`: no sign, no leading zero.
        fn unsigned(&mut self) -> Option<u64> {
            let (value, len) = unsigned_at(self.bytes.get(self.at..)?)?;
            self.at += len;
            Some(value)
        }

        /// A JSON integer that fits `i64`.
        fn signed(&mut self) -> Option<i64> {
            let negative = self.literal(b"-").is_some();
            let magnitude = i64::try_from(self.unsigned()?).ok()?;
            Some(if negative { -magnitude } else { magnitude })
        }

        fn boolean(&mut self) -> Option<bool> {
            if self.literal(b"true").is_some() {
                Some(true)
            } else {
                self.literal(b"false").map(|()| false)
            }
        }

        /// A bracket order's `children`: `[]`, or an array delimited by its
        /// brackets and checked as JSON by serde, as the generic decode
        /// would (the children themselves stay undecoded there too).
        fn children(&mut self) -> Option<&'a RawValue> {
            if self.literal(b"[]").is_some() {
                return empty_children();
            }
            let rest = self.bytes.get(self.at..)?;
            if rest.first() != Some(&b'[') {
                return None;
            }
            let end = feeds::envelope::skip_value(rest, 0).ok()?;
            let children: &'a RawValue = serde_json::from_slice(&rest[..end]).ok()?;
            self.at += end;
            Some(children)
        }

        /// `null` or a string (opening quote not yet consumed). The outer
        /// `None` means "not the compact layout", the inner one JSON `null`.
        #[allow(clippy::option_option)]
        fn nullable_string(&mut self) -> Option<Option<&'a str>> {
            if self.literal(b"null").is_some() {
                Some(None)
            } else {
                self.literal(b"\"")?;
                self.string().map(Some)
            }
        }

        /// `B` or `A` and the closing quote: any other string (an escape
        /// included) is not the compact layout.
        fn side(&mut self) -> Option<Side> {
            let side = match self.bytes.get(self.at..)?.first_chunk::<2>()? {
                b"B\"" => Side::Bid,
                b"A\"" => Side::Ask,
                _ => return None,
            };
            self.at += 2;
            Some(side)
        }
    }

    /// The JSON integer that starts `rest` when it fits `u64` (no sign, no
    /// leading zero, no fraction or exponent after it), and its length. The
    /// node's ids and times are read by masks (see `digits`); longer
    /// numbers and the end of a buffer go digit by digit.
    pub(super) fn unsigned_at(rest: &[u8]) -> Option<(u64, usize)> {
        let proper = |len: usize| {
            len > 0 && (len == 1 || rest[0] != b'0') && !matches!(rest[len], b'.' | b'e' | b'E')
        };
        if let Some(chunk) = rest.first_chunk::<16>() {
            let len = (!digits::masks(chunk).0 & 0xFFFF).trailing_zeros() as usize;
            if len < 16 {
                return proper(len).then(|| (digits::value(u128::from_le_bytes(*chunk), len), len));
            }
        }
        let mut value: u64 = 0;
        let mut len = 0;
        loop {
            let digit = rest.get(len)?.wrapping_sub(b'0');
            if digit >= 10 {
                break;
            }
            value = value.checked_mul(10)?.checked_add(u64::from(digit))?;
            len += 1;
        }
        proper(len).then_some((value, len))
    }

    /// Length of the string contents at the start of `rest`, up to its
    /// closing quote; `None` when a backslash or a control byte comes first
    /// (not the compact layout) or the string is not closed.
    pub(super) fn plain_string_len(rest: &[u8]) -> Option<usize> {
        scan_plain_string(rest).map(|(len, _)| len)
    }

    /// [`plain_string_len`], and whether the contents are all ASCII (then
    /// they need no UTF-8 validation).
    ///
    /// Node strings are short (coins, enum words, numbers, 42-byte
    /// addresses), where a `memchr` call costs more in setup than in
    /// scanning. Sixteen bytes are tested per step with SSE2 (part of every
    /// x86-64 CPU), which also yields each byte's top bit — the ASCII test —
    /// for free; the last few bytes of a buffer, and other targets, go eight
    /// at a time in a plain `u64`.
    pub(super) fn scan_plain_string(rest: &[u8]) -> Option<(usize, bool)> {
        const ONES: u64 = u64::from_le_bytes([1; 8]);
        const HIGH: u64 = ONES << 7;
        let mut at = 0;
        let mut high = false;
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        while let Some(chunk) = rest.get(at..).and_then(<[u8]>::first_chunk::<16>) {
            #[allow(unsafe_code)]
            // SAFETY: this code is compiled only where SSE2 is enabled for
            // the whole target (every x86-64 CPU has it).
            let (stop, top) = unsafe { sse2::stops_and_top_bits(chunk) };
            if stop != 0 {
                let end = stop.trailing_zeros();
                high |= top & ((1 << end) - 1) != 0;
                let end = at + end as usize;
                return (rest[end] == b'"').then_some((end, !high));
            }
            high |= top != 0;
            at += 16;
        }
        // A byte equal to `"` or `\\`, or below 0x20, flags its top bit
        // (borrows only run upwards from a flagged byte, so the lowest flag
        // is a true one).
        let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x;
        while let Some(word) = rest.get(at..).and_then(<[u8]>::first_chunk::<8>) {
            let w = u64::from_le_bytes(*word);
            let flags = (zero_byte(w ^ (ONES * u64::from(b'"')))
                | zero_byte(w ^ (ONES * u64::from(b'\\')))
                | (w.wrapping_sub(ONES * 0x20) & !w))
                & HIGH;
            if flags != 0 {
                let end = at + (flags.trailing_zeros() / 8) as usize;
                high |= !rest[at..end].is_ascii();
                return (rest[end] == b'"').then_some((end, !high));
            }
            high |= w & HIGH != 0;
            at += 8;
        }
        let end = at
            + rest[at..]
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        high |= !rest[at..end].is_ascii();
        (rest[end] == b'"').then_some((end, !high))
    }

    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    mod sse2 {
        use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8};

        use crate::digits::sse2::{at_most, load};

        /// Bit `i` of the first mask is set when byte `i` of `chunk` ends a
        /// plain string (`"`, `\\`, or below 0x20); the second mask holds
        /// each byte's top bit.
        #[target_feature(enable = "sse2")]
        #[allow(clippy::cast_possible_wrap, clippy::cast_sign_loss)]
        pub(super) fn stops_and_top_bits(chunk: &[u8; 16]) -> (u32, u32) {
            let v = load(chunk);
            let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
            let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
            let control = at_most(v, 0x1f);
            let stops = _mm_or_si128(_mm_or_si128(quote, backslash), control);
            (_mm_movemask_epi8(stops) as u32, _mm_movemask_epi8(v) as u32)
        }
    }

    /// The node's status layout with `builder` null or `{"b":…,"f":N}` and
    /// `children` an array (empty, or bracket orders taken whole); anything
    /// else goes through serde.
    pub(super) fn order_status(span: &[u8]) -> Option<OrderStatusEvent<'_>> {
        whole(span, order_status_at)
    }

    /// What `decode_at` reads from `span`, when it reads all of it.
    fn whole<'a, T>(span: &'a [u8], decode_at: fn(&'a [u8]) -> Option<(T, usize)>) -> Option<T> {
        let (event, len) = decode_at(span)?;
        (len == span.len()).then_some(event)
    }

    /// [`order_status`] of the event that starts `bytes`, and its length.
    pub(super) fn order_status_at(bytes: &[u8]) -> Option<(OrderStatusEvent<'_>, usize)> {
        let mut c = Cursor { bytes, at: 0 };
        let time = c.after(br#"{"time":""#)?.string()?;
        let user = c.after(br#","user":""#)?.string()?;
        let hash = c.after(br#","hash":"#)?.nullable_string()?;
        c.literal(br#","builder":"#)?;
        let builder = if c.literal(b"null").is_some() {
            None
        } else {
            let b = c.after(br#"{"b":""#)?.string()?;
            let f = c.after(br#","f":"#)?.unsigned()?;
            c.literal(b"}")?;
            Some(BuilderInfo { b, f })
        };
        let status = c.after(br#","status":""#)?.string()?;
        let coin = c.after(br#","order":{"coin":""#)?.string()?;
        let side = c.after(br#","side":""#)?.side()?;
        let limit_px = c.after(br#","limitPx":""#)?.decimal()?;
        let sz = c.after(br#","sz":""#)?.decimal()?;
        let oid = c.after(br#","oid":"#)?.unsigned()?;
        let timestamp = c.after(br#","timestamp":"#)?.signed()?;
        let trigger_condition = c.after(br#","triggerCondition":""#)?.string()?;
        let is_trigger = c.after(br#","isTrigger":"#)?.boolean()?;
        let trigger_px = c.after(br#","triggerPx":""#)?.decimal()?;
        let children = c.after(br#","children":"#)?.children()?;
        let is_position_tpsl = c.after(br#","isPositionTpsl":"#)?.boolean()?;
        let reduce_only = c.after(br#","reduceOnly":"#)?.boolean()?;
        let order_type = c.after(br#","orderType":""#)?.string()?;
        let orig_sz = c.after(br#","origSz":""#)?.decimal()?;
        let tif = c.after(br#","tif":"#)?.nullable_string()?;
        let cloid = c.after(br#","cloid":"#)?.nullable_string()?;
        c.literal(b"}}")?;
        let event = OrderStatusEvent {
            time,
            user,
            hash,
            builder,
            status,
            order: NodeOrder {
                coin,
                side,
                limit_px,
                sz,
                oid,
                timestamp,
                trigger_condition,
                is_trigger,
                trigger_px,
                children: Some(children),
                is_position_tpsl,
                reduce_only,
                order_type,
                orig_sz,
                tif,
                cloid,
            },
        };
        Some((event, c.at))
    }

    /// The `[]` of `"children":[]`, parsed once (parsing it per status cost
    /// more than the rest of the status's numbers).
    fn empty_children() -> Option<&'static RawValue> {
        static EMPTY: LazyLock<Option<Box<RawValue>>> =
            LazyLock::new(|| serde_json::from_str("[]").ok());
        EMPTY.as_deref()
    }

    /// `["0x…",{"coin":…,"px":…,"sz":…,"side":…,"time":N,"startPosition":…,
    /// "dir":…,"closedPnl":…,"hash":…,"oid":N,"crossed":B,"fee":…,"tid":N,
    /// ["cloid":…,]"feeToken":…,["builder":…,]"twapId":null|N}]`, in the
    /// node's order; anything else (a liquidation, builder or deployer fees,
    /// another key or order, an older fill without `twapId`) goes through
    /// serde.
    pub(super) fn fill(span: &[u8]) -> Option<FillEvent<'_>> {
        whole(span, fill_at)
    }

    /// [`fill`] of the event that starts `bytes`, and its length.
    pub(super) fn fill_at(bytes: &[u8]) -> Option<(FillEvent<'_>, usize)> {
        let mut c = Cursor { bytes, at: 0 };
        let user = c.after(br#"[""#)?.string()?;
        let coin = c.after(br#",{"coin":""#)?.string()?;
        let px = c.after(br#","px":""#)?.decimal()?;
        let sz = c.after(br#","sz":""#)?.decimal()?;
        let side = c.after(br#","side":""#)?.side()?;
        let time = c.after(br#","time":"#)?.signed()?;
        let start_position = c.after(br#","startPosition":""#)?.decimal()?;
        let dir = c.after(br#","dir":""#)?.string()?;
        let closed_pnl = c.after(br#","closedPnl":""#)?.decimal()?;
        let hash = c.after(br#","hash":""#)?.string()?;
        let oid = c.after(br#","oid":"#)?.unsigned()?;
        let crossed = c.after(br#","crossed":"#)?.boolean()?;
        let fee = c.after(br#","fee":""#)?.decimal()?;
        let tid = c.after(br#","tid":"#)?.unsigned()?;
        let cloid = if c.literal(br#","cloid":"#).is_some() {
            c.nullable_string()?
        } else {
            None
        };
        let fee_token = c.after(br#","feeToken":""#)?.string()?;
        let builder = if c.literal(br#","builder":"#).is_some() {
            c.nullable_string()?
        } else {
            None
        };
        c.literal(br#","twapId":"#)?;
        let twap_id = if c.literal(b"null").is_some() {
            None
        } else {
            Some(c.unsigned()?)
        };
        c.literal(b"}]")?;
        let fill = Fill {
            coin,
            px,
            sz,
            side,
            time,
            start_position,
            dir,
            closed_pnl,
            hash,
            oid,
            crossed,
            fee,
            tid,
            cloid,
            fee_token,
            twap_id,
            builder,
            builder_fee: None,
            deployer_fee: None,
            priority_gas: None,
            liquidation: None,
        };
        Some((FillEvent(user, fill), c.at))
    }

    /// `{"user":"…","oid":N,"coin":"…","side":"B","px":"…","raw_book_diff":…}`.
    pub(super) fn book_diff(span: &[u8]) -> Option<BookDiffEvent<'_>> {
        whole(span, book_diff_at)
    }

    /// [`book_diff`] of the event that starts `bytes`, and its length.
    pub(super) fn book_diff_at(bytes: &[u8]) -> Option<(BookDiffEvent<'_>, usize)> {
        let mut c = Cursor { bytes, at: 0 };
        let user = c.after(br#"{"user":""#)?.string()?;
        let oid = c.after(br#","oid":"#)?.unsigned()?;
        let coin = c.after(br#","coin":""#)?.string()?;
        let side = c.after(br#","side":""#)?.side()?;
        let px = c.after(br#","px":""#)?.decimal()?;
        c.literal(br#","raw_book_diff":"#)?;
        let raw_book_diff = if c.literal(br#""remove""#).is_some() {
            RawBookDiff::Remove
        } else if c.literal(br#"{"new":{"sz":""#).is_some() {
            let sz = c.decimal()?;
            c.literal(b"}}")?;
            RawBookDiff::New { sz }
        } else {
            let orig_sz = c.after(br#"{"update":{"origSz":""#)?.decimal()?;
            let new_sz = c.after(br#","newSz":""#)?.decimal()?;
            c.literal(b"}}")?;
            RawBookDiff::Update { orig_sz, new_sz }
        };
        c.literal(b"}")?;
        let event = BookDiffEvent {
            user,
            oid,
            coin,
            side,
            px,
            raw_book_diff,
        };
        Some((event, c.at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = r#"{"time":"2026-04-30T20:46:43.304461819","user":"0xca1d1650d13b8fa936dca4efdf1f487766f2abd1","hash":"0x985e","builder":null,"status":"open","order":{"coin":"BTC","side":"B","limitPx":"76450.0","sz":"0.5","oid":405401002917,"timestamp":1777582003304,"triggerCondition":"N/A","isTrigger":false,"triggerPx":"0.0","children":[],"isPositionTpsl":false,"reduceOnly":false,"orderType":"Limit","origSz":"0.5","tif":"Alo","cloid":"0x000000000000000018ab012def14f141"}}"#;
    const TRIGGER: &str = r#"{"time":"2026-04-30T20:46:43.640395958","user":"0x23e5","hash":"0x0252","builder":{"b":"0xb84168cf3be63c6b8dad05ff5d755e97432ff80b","f":50},"status":"open","order":{"coin":"BTC","side":"A","limitPx":"69045.0","sz":"0.0","oid":405401004883,"timestamp":1777582003640,"triggerCondition":"Price above 76717","isTrigger":true,"triggerPx":"76717.0","children":[],"isPositionTpsl":true,"reduceOnly":true,"orderType":"Take Profit Market","origSz":"0.0","tif":null,"cloid":null}}"#;
    const FILL: &str = r#"["0xc8264ebc379e26946e7d31ae4746c27182849755",{"coin":"BTC","px":"76471.0","sz":"0.00153","side":"A","time":1777582006008,"startPosition":"0.10933","dir":"Close Long","closedPnl":"0.00153","hash":"0x0000000000000000000000000000000000000000000000000000000000000000","oid":405400984377,"crossed":false,"fee":"-0.00351","tid":457367674387223,"cloid":"0x00000000000000000000019ddecca7eb","feeToken":"USDC","twapId":null}]"#;

    /// The byte loop `compact::scan_plain_string` must equal.
    fn plain_string_by_bytes(rest: &[u8]) -> Option<(usize, bool)> {
        let end = rest
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        (rest[end] == b'"').then_some((end, rest[..end].is_ascii()))
    }

    proptest::proptest! {
        #[test]
        fn the_plain_string_scan_equals_the_byte_loop(
            // Bytes weighted towards the ones the word and vector tests flag
            // and their neighbours (borrows, signed compares), over every
            // length around both step sizes.
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::sample::select(vec![b'"', b'\\', 0x1f, 0x20, 0x21, 0x00, 0x01, 0x22, 0x23, 0x5b, 0x5c, 0x5d, 0x7f, 0x80, 0x9f, 0xa0, 0xff]),
                    proptest::prelude::any::<u8>(),
                    b'a'..=b'z',
                    b'a'..=b'z',
                ],
                0..70,
            )
        ) {
            let expected = plain_string_by_bytes(&bytes);
            proptest::prop_assert_eq!(compact::scan_plain_string(&bytes), expected);
            proptest::prop_assert_eq!(compact::plain_string_len(&bytes), expected.map(|(len, _)| len));
        }
    }

    /// The digit loop `compact::unsigned_at` must equal.
    fn unsigned_by_bytes(rest: &[u8]) -> Option<(u64, usize)> {
        let len = rest.iter().position(|b| !b.is_ascii_digit())?;
        if len == 0 || (len > 1 && rest[0] == b'0') || matches!(rest[len], b'.' | b'e' | b'E') {
            return None;
        }
        let value = rest[..len].iter().try_fold(0u64, |v, &b| {
            v.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        })?;
        Some((value, len))
    }

    proptest::proptest! {
        #[test]
        fn the_integer_read_equals_the_digit_loop(
            // Mostly digits, so that runs of every length up to past a
            // `u64` (20 digits) and past the 16-byte step occur.
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    12 => b'0'..=b'9',
                    1 => proptest::sample::select(b",.eE}\"-/:".to_vec()),
                ],
                0..40,
            )
        ) {
            proptest::prop_assert_eq!(compact::unsigned_at(&bytes), unsigned_by_bytes(&bytes));
        }
    }

    #[test]
    fn the_integer_read_takes_ids_times_and_the_largest_u64() {
        assert_eq!(
            compact::unsigned_at(b"412036451268,\"timestamp\""),
            Some((412_036_451_268, 12))
        );
        assert_eq!(compact::unsigned_at(b"0,"), Some((0, 1)));
        assert_eq!(compact::unsigned_at(b"01,"), None);
        assert_eq!(compact::unsigned_at(b"1.5,"), None);
        assert_eq!(
            compact::unsigned_at(b"18446744073709551615}"),
            Some((u64::MAX, 20))
        );
        assert_eq!(compact::unsigned_at(b"18446744073709551616}"), None);
        assert_eq!(compact::unsigned_at(b"12"), None, "no end in the buffer");
    }

    #[test]
    fn plain_string_len_stops_at_the_first_quote_in_any_word_position() {
        for at in 0..44 {
            let mut bytes = vec![b'x'; 50];
            bytes[at] = b'"';
            assert_eq!(compact::plain_string_len(&bytes), Some(at), "quote at {at}");
            bytes[at] = b'\\';
            assert_eq!(compact::plain_string_len(&bytes), None, "backslash at {at}");
            bytes[at] = 0x1f;
            assert_eq!(compact::plain_string_len(&bytes), None, "control at {at}");
        }
        assert_eq!(compact::plain_string_len(b"no end"), None);
    }

    #[test]
    fn the_plain_string_scan_sees_non_ascii_only_before_the_quote() {
        for high in (0..44).filter(|&at| at != 30) {
            let mut bytes = vec![b'x'; 50];
            bytes[30] = b'"';
            bytes[high] = 0xc3;
            assert_eq!(
                compact::scan_plain_string(&bytes),
                Some((30, high > 30)),
                "0xc3 at {high}"
            );
        }
    }

    #[test]
    fn decodes_an_open_status() {
        let status = decode_order_status(STATUS.as_bytes()).unwrap();
        assert_eq!(status.status, "open");
        assert_eq!(status.order.oid, 405_401_002_917);
        assert_eq!(status.order.limit_px.to_string(), "76450.0");
        assert_eq!(status.order.tif, Some("Alo"));
        assert!(status.opens_resting_order());
    }

    #[test]
    fn an_untriggered_trigger_open_does_not_rest() {
        let status = decode_order_status(TRIGGER.as_bytes()).unwrap();
        assert_eq!(status.builder.as_ref().map(|b| b.f), Some(50));
        assert!(status.order.is_trigger);
        assert!(!status.opens_resting_order());
    }

    #[test]
    fn decodes_the_three_raw_diff_shapes() {
        let new = br#"{"user":"0xca","oid":1,"coin":"BTC","side":"B","px":"76450.0","raw_book_diff":{"new":{"sz":"0.5"}}}"#;
        let update = br#"{"user":"0xc8","oid":2,"coin":"BTC","side":"A","px":"76471.0","raw_book_diff":{"update":{"origSz":"0.19567","newSz":"0.19414"}}}"#;
        let remove = br#"{"user":"0xee","oid":3,"coin":"BTC","side":"B","px":"68823.0","raw_book_diff":"remove"}"#;
        assert!(matches!(
            decode_book_diff(new).unwrap().raw_book_diff,
            RawBookDiff::New { sz } if sz.to_string() == "0.5"
        ));
        assert!(matches!(
            decode_book_diff(update).unwrap().raw_book_diff,
            RawBookDiff::Update { new_sz, .. } if new_sz.to_string() == "0.19414"
        ));
        assert_eq!(
            decode_book_diff(remove).unwrap().raw_book_diff,
            RawBookDiff::Remove
        );
        let bogus = br#"{"user":"0xee","oid":3,"coin":"BTC","side":"B","px":"1.0","raw_book_diff":"modify"}"#;
        assert!(decode_book_diff(bogus).is_err());
    }

    #[test]
    fn the_compact_diff_path_agrees_with_serde_or_steps_aside() {
        let canonical: [&[u8]; 3] = [
            br#"{"user":"0xca","oid":1,"coin":"BTC","side":"B","px":"76450.0","raw_book_diff":{"new":{"sz":"0.5"}}}"#,
            br#"{"user":"0xc8","oid":2,"coin":"xyz:NVDA","side":"A","px":"76471.0","raw_book_diff":{"update":{"origSz":"0.19567","newSz":"0.0"}}}"#,
            br#"{"user":"0xee","oid":0,"coin":"@107","side":"B","px":"68823","raw_book_diff":"remove"}"#,
        ];
        for raw in canonical {
            let fast = compact::book_diff(raw).expect("canonical layout");
            let slow: BookDiffEvent<'_> = serde_json::from_slice(raw).unwrap();
            assert_eq!(fast, slow);
            assert_eq!(fast.px.to_string(), slow.px.to_string());
        }
        let other: [&[u8]; 8] = [
            br#"{"user":"0xca", "oid":1,"coin":"BTC","side":"B","px":"1.0","raw_book_diff":"remove"}"#,
            br#"{"user":"0x\u0063a","oid":1,"coin":"BTC","side":"B","px":"1.0","raw_book_diff":"remove"}"#,
            br#"{"user":"0xca","oid":01,"coin":"BTC","side":"B","px":"1.0","raw_book_diff":"remove"}"#,
            br#"{"user":"0xca","oid":1.5,"coin":"BTC","side":"B","px":"1.0","raw_book_diff":"remove"}"#,
            br#"{"user":"0xca","oid":1,"coin":"BTC","side":"C","px":"1.0","raw_book_diff":"remove"}"#,
            br#"{"user":"0xca","oid":1,"coin":"BTC","side":"B","px":"x","raw_book_diff":"remove"}"#,
            br#"{"user":"0xca","oid":1,"coin":"BTC","side":"B","px":"1.0","raw_book_diff":"remove","extra":1}"#,
            br#"{"oid":1,"user":"0xca","coin":"BTC","side":"B","px":"1.0","raw_book_diff":"remove"}"#,
        ];
        for raw in other {
            assert!(
                compact::book_diff(raw).is_none(),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
        // The last one is valid JSON in another key order: serde still decodes it.
        assert_eq!(decode_book_diff(other[7]).unwrap().oid, 1);
        assert!(decode_book_diff(other[5]).is_err());
    }

    /// Every fill event of the real captures.
    fn real_fills() -> Vec<Vec<u8>> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/real");
        let mut out = Vec::new();
        for capture in ["fills-unfiltered", "btc-985148182", "btc-978995377"] {
            let hourly = root
                .join(capture)
                .join("hl/data/node_fills_by_block/hourly");
            for day in std::fs::read_dir(&hourly).unwrap() {
                for hour in std::fs::read_dir(day.unwrap().path()).unwrap() {
                    let bytes = std::fs::read(hour.unwrap().path()).unwrap();
                    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                        let env = feeds::envelope::decode(line).unwrap();
                        for span in env.events() {
                            out.push(line[span.unwrap()].to_vec());
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn the_compact_fill_path_agrees_with_serde_or_steps_aside() {
        let mut fills = real_fills();
        assert!(fills.len() > 1_400, "{}", fills.len());
        fills.push(FILL.as_bytes().to_vec());
        // A builder, a TWAP slice, a null cloid.
        fills.push(
            FILL.replace(
                r#""feeToken":"USDC","twapId":null"#,
                r#""feeToken":"USDC","builder":"0xb841","twapId":568722"#,
            )
            .into_bytes(),
        );
        fills.push(
            FILL.replace(
                r#""cloid":"0x00000000000000000000019ddecca7eb""#,
                r#""cloid":null"#,
            )
            .into_bytes(),
        );
        let mut fast_count = 0;
        for raw in &fills {
            let slow: FillEvent<'_> = serde_json::from_slice(raw).unwrap();
            if let Some(fast) = compact::fill(raw) {
                fast_count += 1;
                // Debug shows every decimal's units and scale.
                assert_eq!(format!("{fast:?}"), format!("{slow:?}"));
            }
        }
        assert_eq!(
            fast_count,
            fills.len(),
            "every node-layout fill takes the fast path"
        );
        let liquidation = FILL.replace(
            r#""feeToken":"USDC","#,
            r#""liquidation":{"liquidatedUser":"0x1","markPx":"1.0","method":"market"},"feeToken":"USDC","#,
        );
        let older = FILL.replace(r#","twapId":null"#, "");
        let others = [
            liquidation,
            older,
            FILL.replace(r#""oid":"#, r#""oid": "#),
            FILL.replace(r#""side":"A""#, r#""side":"C""#),
            FILL.replace(r#""time":1777582006008"#, r#""time":1777582006008.5"#),
            FILL.replace(r#""dir":"Close Long""#, r#""dir":"Close\u0020Long""#),
            FILL.replace(r#""twapId":null}"#, r#""twapId":null,"extra":1}"#),
        ];
        for raw in &others {
            assert!(compact::fill(raw.as_bytes()).is_none(), "{raw}");
        }
        // Serde decides those: the liquidation, the older fill, the spaced
        // one and the extra key decode; a side that is no side, and an
        // escape in a borrowed string, do not.
        for raw in [&others[0], &others[1], &others[2], &others[6]] {
            assert!(decode_fill(raw.as_bytes()).is_ok(), "{raw}");
        }
        assert!(decode_fill(others[3].as_bytes()).is_err());
        assert!(decode_fill(others[5].as_bytes()).is_err());
    }

    #[test]
    fn the_compact_status_path_agrees_with_serde_or_steps_aside() {
        for raw in [STATUS, TRIGGER] {
            let fast = compact::order_status(raw.as_bytes()).expect("node layout");
            let slow = decode_order_status_generic(raw.as_bytes()).unwrap();
            assert_eq!(format!("{fast:?}"), format!("{slow:?}"));
        }
        // Bracket children are taken whole, as serde takes them.
        let children = STATUS.replace(
            r#""children":[]"#,
            r#""children":[{"coin":"BTC","side":"A","limitPx":"80000.0","sz":"0.5","oid":0,"children":[]},{"x":[1,"]"]}]"#,
        );
        let fast = compact::order_status(children.as_bytes()).expect("children array");
        let slow = decode_order_status_generic(children.as_bytes()).unwrap();
        assert_eq!(format!("{fast:?}"), format!("{slow:?}"));
        assert_eq!(
            fast.order.children.map(RawValue::get),
            Some(
                r#"[{"coin":"BTC","side":"A","limitPx":"80000.0","sz":"0.5","oid":0,"children":[]},{"x":[1,"]"]}]"#
            )
        );
        let broken = STATUS.replace(r#""children":[]"#, r#""children":[{"coin":}]"#);
        let null_children = STATUS.replace(r#""children":[]"#, r#""children":null"#);
        let reordered = STATUS
            .replace(
                r#""user":"0xca1d1650d13b8fa936dca4efdf1f487766f2abd1","#,
                "",
            )
            .replace(r#""time":"#, r#""user":"0xca","time":"#);
        let spaced = STATUS.replace(r#""oid":"#, r#""oid": "#);
        let negative_oid = STATUS.replace(r#""oid":405401002917"#, r#""oid":-1"#);
        let escaped = STATUS.replace(r#""tif":"Alo""#, r#""tif":"A\u006co""#);
        for raw in [
            &broken,
            &null_children,
            &reordered,
            &spaced,
            &negative_oid,
            &escaped,
        ] {
            assert!(compact::order_status(raw.as_bytes()).is_none(), "{raw}");
        }
        // Serde still decodes the valid ones and rejects the others (a
        // negative oid; an escape in a string that must borrow from the line).
        assert!(decode_order_status(broken.as_bytes()).is_err());
        assert!(
            decode_order_status(null_children.as_bytes())
                .unwrap()
                .order
                .children
                .is_none()
        );
        assert_eq!(
            decode_order_status(reordered.as_bytes()).unwrap().user,
            "0xca"
        );
        assert!(decode_order_status(negative_oid.as_bytes()).is_err());
        assert!(decode_order_status(escaped.as_bytes()).is_err());
    }

    /// Every status of the real captures: the fast path takes nearly all of
    /// them, and each one it takes equals serde's decoding.
    #[test]
    fn the_compact_status_path_takes_real_statuses_exactly() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/real");
        let (mut fast_count, mut total) = (0usize, 0usize);
        for capture in ["btc-978995377", "btc-985148182"] {
            let dir = root
                .join(capture)
                .join("hl/data/node_order_statuses_by_block/hourly");
            let Ok(days) = std::fs::read_dir(&dir) else {
                panic!("real data missing: {}", dir.display());
            };
            for day in days {
                for hour in std::fs::read_dir(day.unwrap().path()).unwrap() {
                    let bytes = std::fs::read(hour.unwrap().path()).unwrap();
                    for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                        let env = feeds::envelope::decode(line).unwrap();
                        for span in env.events() {
                            let raw = &line[span.unwrap()];
                            total += 1;
                            let slow = decode_order_status_generic(raw).unwrap();
                            if let Some(fast) = compact::order_status(raw) {
                                fast_count += 1;
                                assert_eq!(format!("{fast:?}"), format!("{slow:?}"));
                            }
                        }
                    }
                }
            }
        }
        assert!(total > 10_000, "{total} statuses");
        assert!(
            fast_count * 100 >= total * 99,
            "{fast_count} of {total} on the fast path"
        );
    }

    #[test]
    fn decodes_a_fill_pair_element() {
        let fill = decode_fill(FILL.as_bytes()).unwrap();
        assert_eq!(fill.user(), "0xc8264ebc379e26946e7d31ae4746c27182849755");
        assert_eq!(fill.fill().fee.to_string(), "-0.00351");
        assert_eq!(fill.fill().twap_id, None);
        assert!(!fill.fill().crossed);
    }
}

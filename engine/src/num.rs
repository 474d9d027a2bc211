//! Exact decimal numbers for prices and sizes: a fixed-point integer plus the
//! scale read from the node's string, so `"81307.0"` goes back out as
//! `"81307.0"` and no `f64` ever touches the data path.
//!
//! Equality and ordering compare *values* (`"1.50"` == `"1.5"`), while
//! [`Decimal`]'s `Display` prints the scale it was parsed with. Results of
//! arithmetic are printed in the node's canonical form: trailing zeros trimmed
//! but at least one fractional digit (`"0.0"`, `"12.5"`, `"81307.0"`).

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

use thiserror::Error;

use crate::digits;

/// Largest supported number of fractional digits.
pub const MAX_SCALE: u8 = 18;

/// A decimal string that is not an exact number this engine can hold.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("decimal: {reason} in {text:?}")]
pub struct DecimalError {
    /// What is wrong.
    pub reason: &'static str,
    /// The offending text (at most 40 bytes).
    pub text: String,
}

impl DecimalError {
    fn new(reason: &'static str, text: &[u8]) -> Self {
        Self {
            reason,
            text: String::from_utf8_lossy(text).chars().take(40).collect(),
        }
    }
}

/// An exact decimal: `units / 10^scale`.
#[derive(Debug, Clone, Copy)]
pub struct Decimal {
    units: i64,
    scale: u8,
}

/// A price.
pub type Px = Decimal;
/// A size.
pub type Sz = Decimal;

const POW10: [i64; 19] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
    100_000_000_000,
    1_000_000_000_000,
    10_000_000_000_000,
    100_000_000_000_000,
    1_000_000_000_000_000,
    10_000_000_000_000_000,
    100_000_000_000_000_000,
    1_000_000_000_000_000_000,
];

/// `10^exp` for `exp <= 18`.
pub fn pow10(exp: u8) -> i64 {
    POW10[usize::from(exp.min(MAX_SCALE))]
}

impl Decimal {
    /// Zero printed as `"0.0"`.
    pub const ZERO: Decimal = Decimal { units: 0, scale: 1 };

    /// Builds `units / 10^scale`.
    ///
    /// # Errors
    /// When `scale` exceeds [`MAX_SCALE`].
    pub fn new(units: i64, scale: u8) -> Result<Self, DecimalError> {
        if scale > MAX_SCALE {
            return Err(DecimalError::new("scale above 18", b""));
        }
        Ok(Self { units, scale })
    }

    /// The value whose [`Decimal::units`] and [`Decimal::scale`] these
    /// were: for a table that keeps the two apart to pack them, so the
    /// scale is not checked again.
    pub(crate) const fn from_parts(units: i64, scale: u8) -> Self {
        debug_assert!(scale <= MAX_SCALE);
        Self { units, scale }
    }

    /// The integer units.
    pub fn units(self) -> i64 {
        self.units
    }

    /// Digits after the decimal point.
    pub fn scale(self) -> u8 {
        self.scale
    }

    /// Whether the value is zero.
    pub fn is_zero(self) -> bool {
        self.units == 0
    }

    /// Whether the value is below zero.
    pub fn is_negative(self) -> bool {
        self.units < 0
    }

    /// Parses a decimal string (`-`? digits (`.` digits)?) keeping its scale.
    ///
    /// # Errors
    /// [`DecimalError`] for empty, non-numeric, exponent or too-precise input,
    /// or a value that does not fit.
    pub fn parse(text: &str) -> Result<Self, DecimalError> {
        Self::parse_bytes(text.as_bytes())
    }

    /// [`Decimal::parse`] of the bytes of a JSON string's contents (the
    /// decoders read numbers straight from the line; anything but ASCII
    /// digits, `-` and `.` is rejected, so no UTF-8 check is needed first).
    ///
    /// # Errors
    /// As [`Decimal::parse`].
    pub fn parse_bytes(text: &[u8]) -> Result<Self, DecimalError> {
        let (negative, digits) = match text.first() {
            Some(b'-') => (true, &text[1..]),
            _ => (false, text),
        };
        if digits.is_empty() {
            return Err(DecimalError::new("empty number", text));
        }
        if let Some(value) = Self::parse_short(digits) {
            return Ok(if negative { -value } else { value });
        }
        Self::parse_checked(text, negative, digits)
    }

    /// The general loop of [`Decimal::parse_bytes`]: every step checked, and
    /// the exact error for what it rejects.
    fn parse_checked(text: &[u8], negative: bool, digits: &[u8]) -> Result<Self, DecimalError> {
        let mut units: i64 = 0;
        let mut scale: u8 = 0;
        let mut seen_point = false;
        let mut seen_digit = false;
        for &b in digits {
            match b {
                b'0'..=b'9' => {
                    seen_digit = true;
                    units = units
                        .checked_mul(10)
                        .and_then(|u| u.checked_add(i64::from(b - b'0')))
                        .ok_or_else(|| DecimalError::new("number too large", text))?;
                    if seen_point {
                        scale += 1;
                        if scale > MAX_SCALE {
                            return Err(DecimalError::new("more than 18 decimals", text));
                        }
                    }
                }
                b'.' if !seen_point && seen_digit => seen_point = true,
                _ => return Err(DecimalError::new("not a decimal number", text)),
            }
        }
        if !seen_digit || (seen_point && scale == 0) {
            return Err(DecimalError::new("not a decimal number", text));
        }
        Ok(Self {
            units: if negative { -units } else { units },
            scale,
        })
    }

    /// The common case of [`Decimal::parse_bytes`] without overflow checks:
    /// digits with at most one inner point and at most 18 digits in all
    /// (which no `i64` overflows). `None` for anything else, which the
    /// checked loop then parses or rejects with its exact error.
    fn parse_short(digits: &[u8]) -> Option<Self> {
        if digits.is_empty() || digits.len() > 18 {
            return None;
        }
        let (mut units, mut point) = (0, None);
        for (at, &b) in digits.iter().enumerate() {
            Self::short_step(&mut units, &mut point, at, b)?;
        }
        Self::short_end(units, point, digits.len())
    }

    /// The decimal that starts `rest` and ends at a `"` (the closing quote
    /// of the JSON string the compact decoders are reading), with its length
    /// up to that quote, read in one pass. Only what [`Decimal::parse_short`]
    /// accepts is taken — digits with at most one inner point, 18 bytes at
    /// most — and `None` answers anything else (a sign, an escape, no quote
    /// in reach), which the caller then reads the general way; on every
    /// input taken, the value equals [`Decimal::parse_bytes`] of the bytes
    /// before the quote.
    #[allow(clippy::manual_is_power_of_two)]
    pub(crate) fn parse_quoted(rest: &[u8]) -> Option<(Self, usize)> {
        // The node's numbers end well inside sixteen bytes: read them by
        // masks (see `digits`); the byte loop takes longer ones and the end
        // of a buffer.
        if let Some(chunk) = rest.first_chunk::<16>() {
            let (digits, points) = digits::masks(chunk);
            let stop = !(digits | points) & 0xFFFF;
            if stop != 0 {
                let len = stop.trailing_zeros() as usize;
                if chunk[len] != b'"' || len == 0 {
                    return None;
                }
                let points = points & ((1 << len) - 1);
                let loaded = u128::from_le_bytes(*chunk);
                // (Neither `count_ones` nor `is_power_of_two`: both count
                // bits, and the baseline x86-64 target has no instruction
                // for that.)
                let (units, scale) = if points == 0 {
                    (digits::value(loaded, len), 0)
                } else if points & (points - 1) == 0 {
                    // One point: the digits around it read as one run, the
                    // units at the scale after the point.
                    let at = points.trailing_zeros() as usize;
                    if at == 0 || at + 1 == len {
                        return None;
                    }
                    let joined = digits::without_byte(loaded, at);
                    (digits::value(joined, len - 1), len - at - 1)
                } else {
                    return None;
                };
                // At most 15 digits: below 10^15, no overflow.
                let units = i64::try_from(units).ok()?;
                return Some((
                    Self {
                        units,
                        scale: u8::try_from(scale).ok()?,
                    },
                    len,
                ));
            }
        }
        let (mut units, mut point) = (0, None);
        let mut at = 0;
        loop {
            let b = *rest.get(at)?;
            if b == b'"' {
                break;
            }
            if at == 18 {
                return None;
            }
            Self::short_step(&mut units, &mut point, at, b)?;
            at += 1;
        }
        Some((Self::short_end(units, point, at)?, at))
    }

    /// Byte `at` of the short form: a digit joins `units` (18 digits at
    /// most, which no `i64` overflows), the first point is noted; `None` for
    /// any other byte.
    #[inline]
    fn short_step(units: &mut i64, point: &mut Option<usize>, at: usize, b: u8) -> Option<()> {
        let digit = b.wrapping_sub(b'0');
        if digit < 10 {
            *units = *units * 10 + i64::from(digit);
        } else if b == b'.' && point.is_none() {
            *point = Some(at);
        } else {
            return None;
        }
        Some(())
    }

    /// The short form's value after `len` bytes: not empty, and a point
    /// only between digits.
    #[inline]
    fn short_end(units: i64, point: Option<usize>, len: usize) -> Option<Self> {
        let scale = match point {
            None if len > 0 => 0,
            Some(at) if at > 0 && at + 1 < len => len - at - 1,
            _ => return None,
        };
        Some(Self {
            units,
            scale: u8::try_from(scale).ok()?,
        })
    }

    /// The same value with exactly `scale` decimals, if representable
    /// without loss.
    pub fn rescale(self, scale: u8) -> Option<Self> {
        match scale.cmp(&self.scale) {
            Ordering::Equal => Some(self),
            Ordering::Greater => {
                if scale > MAX_SCALE {
                    return None;
                }
                let units = self.units.checked_mul(pow10(scale - self.scale))?;
                Some(Self { units, scale })
            }
            Ordering::Less => {
                let factor = pow10(self.scale - scale);
                (self.units % factor == 0).then(|| Self {
                    units: self.units / factor,
                    scale,
                })
            }
        }
    }

    /// Exact sum, printed canonically. `None` on overflow.
    pub fn checked_add(self, other: Self) -> Option<Self> {
        Some(self.checked_add_wide(other)?.canonical())
    }

    /// Exact difference, printed canonically. `None` on overflow.
    pub fn checked_sub(self, other: Self) -> Option<Self> {
        self.checked_add(-other)
    }

    /// Exact sum at the larger of the two scales, not made canonical: for
    /// running totals, which would otherwise pay a division per trailing zero
    /// on every step ([`Decimal::canonical`] when printing). `None` on
    /// overflow.
    pub fn checked_add_wide(self, other: Self) -> Option<Self> {
        let scale = self.scale.max(other.scale);
        let a = self.rescale(scale)?;
        let b = other.rescale(scale)?;
        Some(Self {
            units: a.units.checked_add(b.units)?,
            scale,
        })
    }

    /// [`Decimal::checked_add_wide`] of `-other`.
    pub fn checked_sub_wide(self, other: Self) -> Option<Self> {
        self.checked_add_wide(-other)
    }

    /// The absolute value.
    #[must_use]
    pub fn abs(self) -> Self {
        Self {
            units: self.units.abs(),
            scale: self.scale,
        }
    }

    /// Exact product as `(units, scale)` in 128 bits (for notional sums).
    pub fn mul_wide(self, other: Self) -> (i128, u8) {
        (
            i128::from(self.units) * i128::from(other.units),
            self.scale + other.scale,
        )
    }

    /// The node's canonical form: trailing zeros trimmed, at least one decimal.
    #[must_use]
    pub fn canonical(self) -> Self {
        let mut d = self;
        while d.scale > 1 && d.units % 10 == 0 {
            d.units /= 10;
            d.scale -= 1;
        }
        if d.scale == 0 {
            d.units = d.units.saturating_mul(10);
            d.scale = 1;
        }
        d
    }

    /// Appends the value's text with its own scale to `out` (no
    /// formatter: JSON of thousands of orders at a time).
    pub fn push_text(self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.ascii(&mut [0; TEXT_ROOM]));
    }

    /// Writes the value with its own scale into `out` (no allocation).
    pub fn write_to(self, out: &mut String) {
        use fmt::Write as _;
        let _ = write!(out, "{self}");
    }
}

impl std::ops::Neg for Decimal {
    type Output = Decimal;

    fn neg(self) -> Decimal {
        Decimal {
            units: -self.units,
            scale: self.scale,
        }
    }
}

impl PartialEq for Decimal {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Decimal {}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> Ordering {
        if self.scale == other.scale {
            return self.units.cmp(&other.units);
        }
        let scale = self.scale.max(other.scale);
        let a = i128::from(self.units) * i128::from(pow10(scale - self.scale));
        let b = i128::from(other.units) * i128::from(pow10(scale - other.scale));
        a.cmp(&b)
    }
}

impl Hash for Decimal {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Equal values must hash equally whatever their scale.
        let mut d = *self;
        while d.scale > 0 && d.units % 10 == 0 {
            d.units /= 10;
            d.scale -= 1;
        }
        d.units.hash(state);
        d.scale.hash(state);
    }
}

/// Room for any decimal's text: a sign, the 19 digits of the units, a point
/// and a leading zero (scales past [`MAX_SCALE`] are refused where values
/// are made).
const TEXT_ROOM: usize = 24;

impl Decimal {
    /// The value's text (`-`, integer digits, then `.` and exactly `scale`
    /// digits when the scale is not zero), written into `room` from its
    /// end: no formatter and no allocation, for the JSON of thousands of
    /// orders at a time.
    fn text(self, room: &mut [u8; TEXT_ROOM]) -> &str {
        // ASCII digits, point and sign only.
        std::str::from_utf8(self.ascii(room)).unwrap_or_default()
    }

    /// [`Decimal::text`] as its bytes, unchecked.
    fn ascii(self, room: &mut [u8; TEXT_ROOM]) -> &[u8] {
        let mut at = TEXT_ROOM;
        let mut put = |byte: u8| {
            at -= 1;
            room[at] = byte;
        };
        let mut magnitude = self.units.unsigned_abs();
        // Within the room whatever a value was made with.
        let scale = self.scale.min(MAX_SCALE);
        for _ in 0..scale {
            put(b'0' + (magnitude % 10) as u8);
            magnitude /= 10;
        }
        if scale > 0 {
            put(b'.');
        }
        loop {
            put(b'0' + (magnitude % 10) as u8);
            magnitude /= 10;
            if magnitude == 0 {
                break;
            }
        }
        if self.units < 0 {
            put(b'-');
        }
        &room[at..]
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text(&mut [0; TEXT_ROOM]))
    }
}

impl FromStr for Decimal {
    type Err = DecimalError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl serde::Serialize for Decimal {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.text(&mut [0; TEXT_ROOM]))
    }
}

impl<'de> serde::Deserialize<'de> for Decimal {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    proptest::proptest! {
        /// The text is the value's: integer digits, then exactly `scale`
        /// digits after the point, as long division in 128 bits writes it.
        #[test]
        fn the_text_is_the_value_at_its_scale(units: i64, scale in 0u8..=MAX_SCALE) {
            let value = Decimal::new(units, scale).unwrap();
            let factor = 10u128.pow(u32::from(scale));
            let magnitude = u128::from(units.unsigned_abs());
            let sign = if units < 0 { "-" } else { "" };
            let expected = if scale == 0 {
                format!("{sign}{magnitude}")
            } else {
                format!(
                    "{sign}{}.{:0width$}",
                    magnitude / factor,
                    magnitude % factor,
                    width = usize::from(scale)
                )
            };
            proptest::prop_assert_eq!(value.to_string(), expected.clone());
            proptest::prop_assert_eq!(
                serde_json::to_string(&value).unwrap(),
                format!("\"{expected}\"")
            );
        }

        /// The unchecked short path answers only where the checked loop
        /// agrees, value and scale.
        #[test]
        fn the_short_parse_agrees_with_the_checked_loop(
            bytes in proptest::collection::vec(
                proptest::sample::select(b"0123456789.-x".to_vec()),
                1..24,
            )
        ) {
            let (negative, digits) = match bytes.first() {
                Some(b'-') => (true, &bytes[1..]),
                _ => (false, &bytes[..]),
            };
            if let Some(short) = Decimal::parse_short(digits) {
                let checked = Decimal::parse_checked(&bytes, false, digits).ok();
                proptest::prop_assert_eq!(Some((short.units(), short.scale())), checked.map(|c| (c.units(), c.scale())));
            }
            let parsed = Decimal::parse_bytes(&bytes).ok();
            let checked = if digits.is_empty() { None } else { Decimal::parse_checked(&bytes, negative, digits).ok() };
            proptest::prop_assert_eq!(parsed.map(|p| (p.units(), p.scale())), checked.map(|c| (c.units(), c.scale())));
        }

        /// The one-pass read of a quoted decimal answers only where the
        /// general parse of the bytes before the quote agrees, value, scale
        /// and length.
        #[test]
        fn the_quoted_parse_agrees_with_the_general_parse(
            bytes in proptest::collection::vec(
                proptest::sample::select(b"0123456789.-\"x".to_vec()),
                0..26,
            )
        ) {
            if let Some((value, len)) = Decimal::parse_quoted(&bytes) {
                proptest::prop_assert_eq!(bytes.get(len), Some(&b'"'));
                let general = Decimal::parse_bytes(&bytes[..len]).ok();
                proptest::prop_assert_eq!(Some((value.units(), value.scale())), general.map(|g| (g.units(), g.scale())));
            } else if let Some(len) = bytes.iter().position(|&b| b == b'"') {
                // Declined: either the general parse rejects it too, or it
                // is outside the short form (a sign, or over 18 bytes).
                let head = &bytes[..len];
                let short_form = !head.is_empty() && head.len() <= 18 && head[0] != b'-';
                proptest::prop_assert!(!short_form || Decimal::parse_bytes(head).is_err());
            }
        }
    }

    #[test]
    fn quoted_decimals_are_read_to_their_quote() {
        let read =
            |text: &[u8]| Decimal::parse_quoted(text).map(|(value, len)| (value.to_string(), len));
        assert_eq!(read(b"76450.0\",\"sz"), Some(("76450.0".into(), 7)));
        assert_eq!(read(b"0.00153\""), Some(("0.00153".into(), 7)));
        assert_eq!(read(b"12\""), Some(("12".into(), 2)));
        assert_eq!(
            read(b"999999999999999999\""),
            Some(("999999999999999999".into(), 18))
        );
        for declined in [
            &b"\""[..],
            b"-1.0\"",
            b"1.\"",
            b".5\"",
            b"1.2.3\"",
            b"1e5\"",
            b"12",
            b"9999999999999999999\"",
        ] {
            assert_eq!(
                read(declined),
                None,
                "{}",
                String::from_utf8_lossy(declined)
            );
        }
    }

    #[test]
    fn eighteen_digits_take_the_short_path_and_longer_ones_the_checked_loop() {
        assert_eq!(
            Decimal::parse("999999999999999999").map(Decimal::units),
            Ok(999_999_999_999_999_999)
        );
        assert_eq!(
            Decimal::parse("9223372036854775807").map(Decimal::units),
            Ok(i64::MAX)
        );
        assert!(Decimal::parse("9223372036854775808").is_err());
        assert_eq!(
            Decimal::parse("12345678901234567.8").map(Decimal::scale),
            Ok(1)
        );
    }

    #[rstest]
    #[case::price("81307.0")]
    #[case::zero("0.0")]
    #[case::small_size("0.00081")]
    #[case::negative_pnl("-0.00351")]
    #[case::integer("15")]
    #[case::trailing_zero_kept("15.50")]
    #[case::many_decimals("0.000000000000000001")]
    fn round_trips_node_strings_byte_for_byte(#[case] text: &str) {
        assert_eq!(Decimal::parse(text).unwrap().to_string(), text);
    }

    #[rstest]
    #[case::empty("")]
    #[case::sign_only("-")]
    #[case::exponent("1e5")]
    #[case::two_points("1.2.3")]
    #[case::dangling_point("1.")]
    #[case::leading_point(".5")]
    #[case::too_precise("0.0000000000000000001")]
    #[case::too_large("99999999999999999999")]
    fn rejects_what_it_cannot_hold_exactly(#[case] text: &str) {
        assert!(Decimal::parse(text).is_err());
    }

    #[test]
    fn compares_by_value_across_scales() {
        let a = Decimal::parse("1.50").unwrap();
        let b = Decimal::parse("1.5").unwrap();
        assert_eq!(a, b);
        assert!(Decimal::parse("81307.0").unwrap() < Decimal::parse("81307.5").unwrap());
        assert!(Decimal::parse("-1").unwrap() < Decimal::ZERO);
    }

    #[rstest]
    #[case::sizes("0.1804", "0.00081", "0.18121")]
    #[case::to_zero("0.5", "-0.5", "0.0")]
    #[case::integers("2", "3", "5.0")]
    #[case::trims("0.15", "0.05", "0.2")]
    fn sums_exactly_in_canonical_form(#[case] a: &str, #[case] b: &str, #[case] sum: &str) {
        let total = Decimal::parse(a)
            .unwrap()
            .checked_add(Decimal::parse(b).unwrap())
            .unwrap();
        assert_eq!(total.to_string(), sum);
    }

    #[test]
    fn rescale_refuses_to_lose_digits() {
        let d = Decimal::parse("1.25").unwrap();
        assert_eq!(d.rescale(1), None);
        assert_eq!(d.rescale(4).unwrap().to_string(), "1.2500");
    }
}

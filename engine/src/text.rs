//! Short owned strings kept inline: the node's addresses, coin names and
//! order metadata (`"Limit"`, `"Gtc"`, `"N/A"`) are copied into every resting
//! order and every typed change, hundreds of thousands of times per second.
//! [`Text`] holds up to `N` bytes in place and only longer text on the heap,
//! so resting an order or recording a change allocates nothing for them.
//!
//! A `Text` compares, hashes, orders and prints exactly like the `str` it
//! holds; where it is stored (inline or heap) is invisible.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// An owned string of up to `N` bytes inline (`N` ≤ 255), longer on the heap.
#[derive(Clone)]
pub struct Text<const N: usize>(Repr<N>);

#[derive(Clone)]
enum Repr<const N: usize> {
    Inline { len: u8, buf: [u8; N] },
    Heap(Box<str>),
}

/// An order's owner or a builder address (`0x` + 40 hex digits fits inline).
pub type Address = Text<46>;

/// A coin name or a short order attribute (`"Limit"`, `"Gtc"`, `"N/A"`,
/// `"Triggered"`); trigger conditions such as `"Price above 76717"` fit too.
pub type Short = Text<22>;

impl<const N: usize> Text<N> {
    /// `text`, copied.
    pub fn new(text: &str) -> Self {
        let bytes = text.as_bytes();
        match u8::try_from(bytes.len()) {
            Ok(len) if bytes.len() <= N => {
                let mut buf = [0u8; N];
                buf[..bytes.len()].copy_from_slice(bytes);
                Self(Repr::Inline { len, buf })
            }
            _ => Self(Repr::Heap(text.into())),
        }
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline { len, buf } => {
                let bytes = &buf[..usize::from(*len)];
                #[allow(unsafe_code)]
                // SAFETY: only `new` writes an inline `buf`, copying the
                // bytes of one whole `&str` and recording their count in
                // `len`; those bytes are therefore valid UTF-8. (Validating
                // them on every read cost more than the allocation this
                // type saves.)
                unsafe {
                    std::str::from_utf8_unchecked(bytes)
                }
            }
            Repr::Heap(text) => text,
        }
    }
}

impl<const N: usize> Deref for Text<N> {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> AsRef<str> for Text<N> {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> Borrow<str> for Text<N> {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> From<&str> for Text<N> {
    fn from(text: &str) -> Self {
        Self::new(text)
    }
}

impl<const N: usize> PartialEq for Text<N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl<const N: usize> Eq for Text<N> {}

impl<const N: usize> PartialEq<str> for Text<N> {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl<const N: usize> PartialEq<&str> for Text<N> {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl<const N: usize> PartialOrd for Text<N> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<const N: usize> Ord for Text<N> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl<const N: usize> Hash for Text<N> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl<const N: usize> fmt::Debug for Text<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl<const N: usize> fmt::Display for Text<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

/// The bytes written as `0x` and exactly `2 * N` lowercase hex digits (the
/// form of the node's addresses and client order ids that prints back the
/// same); `None` for any other text.
pub(crate) fn prefixed_hex_bytes<const N: usize>(text: &str) -> Option<[u8; N]> {
    let hex = text.strip_prefix("0x")?.as_bytes();
    if hex.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    // Looked up, not matched: no branch per digit (a busy book's orders
    // carry hundreds of thousands of them).
    let mut bad = 0u8;
    for (byte, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        let (high, low) = (NIBBLES[usize::from(pair[0])], NIBBLES[usize::from(pair[1])]);
        bad |= high | low;
        *byte = high << 4 | (low & 15);
    }
    (bad & 0x80 == 0).then_some(out)
}

/// `0x` and the lowercase hex digits of `bytes`, written at the start of
/// `out` (`2 + 2 * bytes.len()` bytes; a shorter `out` holds what fits).
pub(crate) fn write_prefixed_hex<'b>(bytes: &[u8], out: &'b mut [u8]) -> &'b str {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let whole = 2 + 2 * bytes.len();
    let len = if let Some([zero, x, digits @ ..]) = out.get_mut(..whole) {
        // The usual case, a pair of digits per byte (an open-orders answer
        // writes tens of thousands of client order ids).
        (*zero, *x) = (b'0', b'x');
        for (pair, byte) in digits.chunks_exact_mut(2).zip(bytes) {
            pair[0] = HEX[usize::from(byte >> 4)];
            pair[1] = HEX[usize::from(byte & 15)];
        }
        whole
    } else {
        let digits = bytes
            .iter()
            .flat_map(|byte| [HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 15)]]);
        let mut len = 0;
        for (slot, byte) in out.iter_mut().zip([b'0', b'x'].into_iter().chain(digits)) {
            *slot = byte;
            len += 1;
        }
        len
    };
    // `0x` and hex digits: ASCII.
    std::str::from_utf8(&out[..len]).unwrap_or_default()
}

/// The value of each lowercase hex digit; 0x80 for any other byte.
const NIBBLES: [u8; 256] = {
    let mut table = [0x80u8; 256];
    let mut digit = 0;
    while digit < 16 {
        table[b"0123456789abcdef"[digit] as usize] = digit as u8;
        digit += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn prefixed_hex_reads_back_what_it_writes_and_only_that_form() {
        let bytes = [0x00, 0xff, 0x1a, 0xb2];
        let mut buf = [0u8; 10];
        let text = write_prefixed_hex(&bytes, &mut buf);
        assert_eq!(text, "0x00ff1ab2");
        assert_eq!(prefixed_hex_bytes::<4>(text), Some(bytes));
        for other in [
            "0x00FF1AB2",
            "00ff1ab2",
            "0x00ff1ab",
            "0x00ff1ab2c0",
            "0x00ff1agg",
        ] {
            assert_eq!(prefixed_hex_bytes::<4>(other), None, "{other}");
        }
        assert_eq!(write_prefixed_hex(&bytes, &mut [0u8; 5]), "0x00f");
    }

    proptest! {
        #[test]
        fn prefixed_hex_is_what_a_formatter_writes(
            bytes in proptest::collection::vec(any::<u8>(), 0..24),
            room in 0usize..60,
        ) {
            let whole: String = std::iter::once("0x".to_owned())
                .chain(bytes.iter().map(|byte| format!("{byte:02x}")))
                .collect();
            let mut out = vec![0u8; room];
            let text = write_prefixed_hex(&bytes, &mut out);
            // What fits of it.
            prop_assert_eq!(text, &whole[..room.min(whole.len())]);
        }
    }

    #[test]
    fn addresses_and_order_attributes_stay_inline() {
        let user = Address::new("0x31ca8395cf837de08b24da3f660e77761dfb974b");
        assert!(matches!(user.0, Repr::Inline { .. }));
        assert_eq!(user, "0x31ca8395cf837de08b24da3f660e77761dfb974b");
        assert!(matches!(
            Short::new("Price above 76717").0,
            Repr::Inline { .. }
        ));
        assert_eq!(std::mem::size_of::<Address>(), 48);
        assert_eq!(std::mem::size_of::<Short>(), 24);
        assert_eq!(std::mem::size_of::<Option<Short>>(), 24);
    }

    #[test]
    fn longer_text_goes_to_the_heap_and_reads_the_same() {
        let long = "Price below 0.000000012345678901234567";
        let text = Short::new(long);
        assert!(matches!(text.0, Repr::Heap(_)));
        assert_eq!(text.as_str(), long);
        assert_eq!(text.to_string(), long);
    }

    proptest! {
        /// Inline or heap, a `Text` behaves as its `str`: same bytes, order,
        /// equality and hash-set membership.
        #[test]
        fn text_behaves_like_its_str(a in "\\PC{0,30}", b in "\\PC{0,30}") {
            let (ta, tb) = (Short::new(&a), Short::new(&b));
            prop_assert_eq!(ta.as_str(), a.as_str());
            let address = Address::new(&a);
            prop_assert_eq!(address.as_str(), a.as_str());
            prop_assert_eq!(ta.cmp(&tb), a.cmp(&b));
            prop_assert_eq!(ta == tb, a == b);
            prop_assert_eq!(ta.to_string(), a.clone());
            prop_assert_eq!(format!("{ta:?}"), format!("{a:?}"));
            let set: HashSet<Short> = [ta.clone()].into_iter().collect();
            prop_assert!(set.contains(a.as_str()));
            prop_assert_eq!(set.contains(b.as_str()), a == b);
        }
    }
}

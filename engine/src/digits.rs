//! Reading the node's ASCII numbers sixteen bytes at a time.
//!
//! Every status and diff carries a handful of numbers — 12-digit order ids,
//! 13-digit millisecond timestamps, prices and sizes such as `"81307.0"` and
//! `"0.00153"` — and a byte-at-a-time loop spent a compare, a branch and a
//! multiply on each digit. Here one vector step classifies sixteen bytes
//! (digit, point, anything else), so a number's length is one
//! trailing-zeros count, and its digits are combined eight at a time in a
//! `u64` by three multiplies (each step merges neighbouring lanes: digit
//! pairs into values below 100, those into values below 10⁴, then 10⁸).
//!
//! The callers take these paths only when sixteen bytes are readable and the
//! number ends inside them; anything else goes through their byte loops,
//! whose results these equal (see the tests).

/// Bit `i` of the first mask is set when byte `i` of `chunk` is an ASCII
/// digit; bit `i` of the second when it is a `.`.
#[inline]
pub(crate) fn masks(chunk: &[u8; 16]) -> (u32, u32) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    {
        #[allow(unsafe_code)]
        // SAFETY: compiled only where SSE2 is enabled for the whole target
        // (every x86-64 CPU has it).
        unsafe {
            sse2::masks(chunk)
        }
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    {
        let (mut digits, mut points) = (0, 0);
        for (at, &b) in chunk.iter().enumerate() {
            digits |= u32::from(b.is_ascii_digit()) << at;
            points |= u32::from(b == b'.') << at;
        }
        (digits, points)
    }
}

/// The SSE2 steps the decoders share: this module's digit and point masks,
/// and the compact decoder's string scan (`event::compact`).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(crate) mod sse2 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_set1_epi8,
        _mm_sub_epi8,
    };

    /// The sixteen bytes of `chunk` in a vector.
    #[target_feature(enable = "sse2")]
    #[allow(clippy::cast_ptr_alignment)]
    pub(crate) fn load(chunk: &[u8; 16]) -> __m128i {
        #[allow(unsafe_code)]
        // SAFETY: `chunk` is 16 readable bytes, and an unaligned load has no
        // alignment requirement.
        unsafe {
            _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>())
        }
    }

    /// All ones in each byte of `v` at most `bound` (unsigned): `min(v,
    /// bound) == v` exactly there.
    #[target_feature(enable = "sse2")]
    #[allow(clippy::cast_possible_wrap)]
    pub(crate) fn at_most(v: __m128i, bound: u8) -> __m128i {
        _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(bound as i8)), v)
    }

    #[target_feature(enable = "sse2")]
    #[allow(clippy::cast_possible_wrap, clippy::cast_sign_loss)]
    pub(super) fn masks(chunk: &[u8; 16]) -> (u32, u32) {
        let v = load(chunk);
        // A digit is a byte whose distance above `0` (wrapping) is at most 9.
        let digit = at_most(_mm_sub_epi8(v, _mm_set1_epi8(b'0' as i8)), 9);
        let point = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'.' as i8));
        (
            _mm_movemask_epi8(digit) as u32,
            _mm_movemask_epi8(point) as u32,
        )
    }
}

/// The value of the first `n` bytes of `chunk` (its bytes in reading order,
/// the first in the lowest byte), ASCII digits the caller has checked; `n`
/// from 1 to 16.
#[inline]
pub(crate) fn value(chunk: u128, n: usize) -> u64 {
    const ZEROS: u128 = u128::from_le_bytes([b'0'; 16]);
    debug_assert!((1..=16).contains(&n));
    // Digit values; a byte past the digits may borrow from the ones above
    // it, never from a digit below. Shifting the digits to the top fills
    // the bottom with zeros: leading zeros, which leave the value as is.
    let digits = chunk.wrapping_sub(ZEROS) << (8 * (16 - n));
    // The high word holds the last eight digits, the low one the rest.
    #[allow(clippy::cast_possible_truncation)]
    let (first, last) = (digits as u64, (digits >> 64) as u64);
    eight(first) * 100_000_000 + eight(last)
}

/// `chunk` without its byte `at` (`at` below 16): the bytes above it move
/// down one, so that a number's digits around its point read as one run.
#[inline]
pub(crate) fn without_byte(chunk: u128, at: usize) -> u128 {
    let below = (1u128 << (8 * at)) - 1;
    (chunk & below) | ((chunk >> 8) & !below)
}

/// The value of eight digit values (0 to 9) in reading order, the first in
/// the lowest byte.
#[inline]
fn eight(w: u64) -> u64 {
    // 16-bit lanes: first × 10 + second.
    let w = ((w & 0x0F0F_0F0F_0F0F_0F0F).wrapping_mul(10 << 8 | 1)) >> 8;
    // 32-bit lanes: first pair × 100 + second.
    let w = ((w & 0x00FF_00FF_00FF_00FF).wrapping_mul(100 << 16 | 1)) >> 16;
    // The whole: first four × 10⁴ + last four.
    ((w & 0x0000_FFFF_0000_FFFF).wrapping_mul(10_000 << 32 | 1)) >> 32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk_of(text: &[u8], fill: u8) -> [u8; 16] {
        let mut chunk = [fill; 16];
        chunk[..text.len()].copy_from_slice(text);
        chunk
    }

    fn value_of(text: &[u8], fill: u8, n: usize) -> u64 {
        value(u128::from_le_bytes(chunk_of(text, fill)), n)
    }

    #[test]
    fn reads_the_node_s_numbers() {
        assert_eq!(value_of(b"412036451268,\"ti", b' ', 12), 412_036_451_268);
        assert_eq!(value_of(b"1778002753024,", b'x', 13), 1_778_002_753_024);
        assert_eq!(value_of(b"7", b'/', 1), 7);
        assert_eq!(value_of(b"0000000000000009", 0, 16), 9);
        assert_eq!(value_of(b"9999999999999999", 0, 16), 9_999_999_999_999_999);
        let px = chunk_of(b"81307.0\",\"sz\":\"0", b'"');
        assert_eq!(masks(&px), (0b1000_0000_0101_1111, 1 << 5));
        let joined = without_byte(u128::from_le_bytes(px), 5);
        assert_eq!(value(joined, 6), 813_070);
        assert_eq!(joined.to_le_bytes()[..7], *b"813070\"");
    }

    proptest::proptest! {
        /// Every byte classified as the plain test does, and every run of
        /// digits (at any offset, with any bytes after it, including ones
        /// below `0` that borrow) valued as the plain loop does.
        #[test]
        fn masks_and_values_agree_with_byte_loops(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    8 => b'0'..=b'9',
                    1 => proptest::sample::select(vec![b'.', b'"', b'/', b':', 0, 0x80, 0xb0, 0xff]),
                    1 => proptest::prelude::any::<u8>(),
                ],
                16,
            ),
            cut in 0usize..16,
        ) {
            let chunk: [u8; 16] = bytes.clone().try_into().unwrap();
            let (digits, points) = masks(&chunk);
            for (at, &b) in chunk.iter().enumerate() {
                proptest::prop_assert_eq!(digits >> at & 1 == 1, b.is_ascii_digit());
                proptest::prop_assert_eq!(points >> at & 1 == 1, b == b'.');
            }
            let loaded = u128::from_le_bytes(chunk);
            let by_loop = |bytes: &[u8], m: usize| {
                bytes[..m].iter().fold(0u64, |v, &b| v * 10 + u64::from(b - b'0'))
            };
            // Every prefix of the leading run of digits.
            let n = chunk.iter().take_while(|b| b.is_ascii_digit()).count();
            for m in 1..=n {
                proptest::prop_assert_eq!(value(loaded, m), by_loop(&chunk, m));
            }
            // The bytes with one taken out, as the plain removal has them.
            let mut removed = chunk.to_vec();
            removed.remove(cut);
            let joined = without_byte(loaded, cut).to_le_bytes();
            proptest::prop_assert_eq!(&joined[..15], &removed[..]);
        }
    }
}

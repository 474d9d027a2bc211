//! Finding the end of a JSON object or array 64 bytes at a time.
//!
//! A node line is mostly short strings and small nested objects, so walking
//! it byte by byte (or one `memchr` call per string) spends its time on
//! per-token overhead. This scanner classifies a 64-byte chunk at once into
//! bit masks — quotes, backslashes, opening and closing brackets — derives
//! which bytes lie inside strings with a prefix XOR over the quote bits, and
//! only then looks at the few brackets outside strings to track depth.
//!
//! A chunk holding a backslash (rare in node output: strings are addresses,
//! numbers and enum words) is walked byte by byte with the same state, so
//! escapes follow JSON exactly. The result always equals the byte-by-byte
//! walk of [`crate::envelope`]; a proptest pins that.

/// One 64-byte chunk's byte classes, bit `i` for byte `i`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Masks {
    quote: u64,
    backslash: u64,
    open: u64,
    close: u64,
}

/// Where the scan stands between chunks.
#[derive(Debug, Clone, Copy, Default)]
struct State {
    depth: usize,
    in_string: bool,
    /// The previous chunk ended on a backslash inside a string.
    escape: bool,
}

/// Offset just past the bracket closing the object or array that opens at
/// `pos`, or `None` when the line ends first (the caller then reports the
/// exact error). `line[pos]` must be `{` or `[`.
pub(crate) fn skip_nested(line: &[u8], pos: usize) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        #[allow(unsafe_code)]
        // SAFETY: the CPU was just checked to support AVX2, the one feature
        // `skip_nested_avx2` is compiled for.
        return unsafe { skip_nested_avx2(line, pos) };
    }
    scan(line, pos, classify)
}

/// [`skip_nested`] compiled for AVX2: 32 bytes per compare instead of 16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn skip_nested_avx2(line: &[u8], pos: usize) -> Option<usize> {
    scan(line, pos, |chunk| classify_avx2(chunk))
}

/// The chunk loop, with the classifier the CPU supports inlined into it.
// Always inlined: only a copy inside the AVX2 function is compiled with AVX2.
#[allow(clippy::inline_always)]
#[inline(always)]
fn scan(line: &[u8], pos: usize, classify: impl Fn(&[u8; 64]) -> Masks) -> Option<usize> {
    let mut state = State::default();
    let mut base = pos;
    while base < line.len() {
        let rest = &line[base..];
        let mut padded = [0u8; 64];
        let chunk: &[u8; 64] = if let Some(chunk) = rest.first_chunk::<64>() {
            chunk
        } else {
            // Zero bytes are neither quotes nor brackets.
            padded[..rest.len()].copy_from_slice(rest);
            &padded
        };
        let masks = classify(chunk);
        let found = if masks.backslash != 0 || state.escape {
            walk_bytes(chunk, &mut state)
        } else {
            walk_masks(&masks, &mut state)
        };
        if let Some(offset) = found {
            return Some(base + offset + 1);
        }
        base += 64;
    }
    None
}

/// Depth tracking from the masks of a chunk without backslashes; the offset
/// of the bracket that brings the depth back to zero.
fn walk_masks(masks: &Masks, state: &mut State) -> Option<usize> {
    let carried = if state.in_string { u64::MAX } else { 0 };
    // Bit i set when byte i is inside a string (opening quote included,
    // closing quote excluded).
    let inside = prefix_xor(masks.quote) ^ carried;
    state.in_string = inside >> 63 == 1;
    let open = masks.open & !inside;
    let close = masks.close & !inside;
    let closes = close.count_ones() as usize;
    if state.depth > closes {
        // The depth cannot reach zero in this chunk.
        state.depth = state.depth + open.count_ones() as usize - closes;
        return None;
    }
    let mut brackets = open | close;
    while brackets != 0 {
        let bit = brackets & brackets.wrapping_neg();
        if open & bit != 0 {
            state.depth += 1;
        } else {
            state.depth -= 1;
            if state.depth == 0 {
                return Some(bit.trailing_zeros() as usize);
            }
        }
        brackets ^= bit;
    }
    None
}

/// The byte-by-byte walk, for chunks with escapes.
fn walk_bytes(chunk: &[u8; 64], state: &mut State) -> Option<usize> {
    for (at, &byte) in chunk.iter().enumerate() {
        if state.escape {
            state.escape = false;
        } else if state.in_string {
            match byte {
                b'\\' => state.escape = true,
                b'"' => state.in_string = false,
                _ => {}
            }
        } else {
            match byte {
                b'"' => state.in_string = true,
                b'{' | b'[' => state.depth += 1,
                b'}' | b']' => {
                    state.depth -= 1;
                    if state.depth == 0 {
                        return Some(at);
                    }
                }
                _ => {}
            }
        }
    }
    None
}

/// Bit `i` of the result is the XOR of bits `0..=i` of `bits`.
fn prefix_xor(mut bits: u64) -> u64 {
    bits ^= bits << 1;
    bits ^= bits << 2;
    bits ^= bits << 4;
    bits ^= bits << 8;
    bits ^= bits << 16;
    bits ^= bits << 32;
    bits
}

#[cfg(target_arch = "x86_64")]
fn classify(chunk: &[u8; 64]) -> Masks {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };
    // `{`/`[` and `}`/`]` differ only in bit 0x20, and no other byte maps
    // onto `{` or `}` when that bit is set.
    let mut masks = Masks::default();
    for (lane, bytes) in chunk.chunks_exact(16).enumerate() {
        #[allow(unsafe_code, clippy::cast_ptr_alignment)]
        // The pointer is never dereferenced as `__m128i`: `_mm_loadu_si128` reads unaligned.
        // SAFETY: SSE2 is part of every x86_64 target, and `bytes` is 16
        // readable bytes (`_mm_loadu_si128` has no alignment requirement).
        let [q, b, o, c] = unsafe {
            let v = _mm_loadu_si128(bytes.as_ptr().cast::<__m128i>());
            let folded = _mm_or_si128(v, _mm_set1_epi8(0x20));
            [
                _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8)),
                _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8)),
                _mm_cmpeq_epi8(folded, _mm_set1_epi8(b'{' as i8)),
                _mm_cmpeq_epi8(folded, _mm_set1_epi8(b'}' as i8)),
            ]
            .map(|eq| u64::from(_mm_movemask_epi8(eq) as u16) << (16 * lane))
        };
        masks.quote |= q;
        masks.backslash |= b;
        masks.open |= o;
        masks.close |= c;
    }
    masks
}

/// [`classify`] with AVX2: two 32-byte halves.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn classify_avx2(chunk: &[u8; 64]) -> Masks {
    use std::arch::x86_64::{
        __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_movemask_epi8, _mm256_or_si256,
        _mm256_set1_epi8,
    };
    let mut masks = Masks::default();
    for (half, bytes) in chunk.chunks_exact(32).enumerate() {
        #[allow(clippy::cast_ptr_alignment)]
        // The pointer is never dereferenced as `__m256i`: `_mm256_loadu_si256` reads unaligned.
        let data = {
            #[allow(unsafe_code)]
            // SAFETY: `bytes` is 32 readable bytes and `_mm256_loadu_si256`
            // has no alignment requirement; AVX2 is enabled for this function.
            unsafe {
                _mm256_loadu_si256(bytes.as_ptr().cast::<__m256i>())
            }
        };
        let folded = _mm256_or_si256(data, _mm256_set1_epi8(0x20));
        let [q, b, o, c] = [
            _mm256_cmpeq_epi8(data, _mm256_set1_epi8(b'"' as i8)),
            _mm256_cmpeq_epi8(data, _mm256_set1_epi8(b'\\' as i8)),
            _mm256_cmpeq_epi8(folded, _mm256_set1_epi8(b'{' as i8)),
            _mm256_cmpeq_epi8(folded, _mm256_set1_epi8(b'}' as i8)),
        ]
        .map(|eq| u64::from(_mm256_movemask_epi8(eq) as u32) << (32 * half));
        masks.quote |= q;
        masks.backslash |= b;
        masks.open |= o;
        masks.close |= c;
    }
    masks
}

#[cfg(not(target_arch = "x86_64"))]
fn classify(chunk: &[u8; 64]) -> Masks {
    classify_bytes(chunk)
}

/// One byte at a time: the portable classifier and the SIMD one's reference.
#[cfg(any(test, not(target_arch = "x86_64")))]
fn classify_bytes(chunk: &[u8; 64]) -> Masks {
    let mut masks = Masks::default();
    for (at, &byte) in chunk.iter().enumerate() {
        let bit = 1u64 << at;
        match byte {
            b'"' => masks.quote |= bit,
            b'\\' => masks.backslash |= bit,
            b'{' | b'[' => masks.open |= bit,
            b'}' | b']' => masks.close |= bit,
            _ => {}
        }
    }
    masks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_agrees_with_a_byte_loop_for_every_byte_value() {
        for start in (0..=255u8).step_by(64) {
            let chunk: [u8; 64] = std::array::from_fn(|i| start.wrapping_add(i as u8));
            assert_eq!(
                classify(&chunk),
                classify_bytes(&chunk),
                "bytes from {start}"
            );
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                #[allow(unsafe_code)]
                // SAFETY: AVX2 support was just checked.
                let avx2 = unsafe { classify_avx2(&chunk) };
                assert_eq!(avx2, classify_bytes(&chunk), "AVX2, bytes from {start}");
            }
        }
    }

    #[test]
    fn prefix_xor_marks_string_interiors() {
        // "ab"{"c"  → quotes at 0, 3, 5, 7
        let quotes = 0b1010_1001;
        assert_eq!(prefix_xor(quotes), 0b0110_0111);
    }

    #[test]
    fn finds_the_end_across_chunks_and_escapes() {
        let object = format!(r#"{{"a":"{}","b":["x\"}}]",{{"c":1}}]}}"#, "y".repeat(100));
        let line = format!("{object}, rest");
        assert_eq!(skip_nested(line.as_bytes(), 0), Some(object.len()));
        assert_eq!(skip_nested(&line.as_bytes()[..object.len() - 1], 0), None);
    }
}

//! A resting order's client order id, kept as its 16 bytes.
//!
//! Most resting orders carry a client order id (market makers tag theirs),
//! and the node writes each as `0x` and 32 lowercase hex digits. Kept as
//! that text inline, an optional id took 40 of a resting order's bytes;
//! kept as the 16 bytes it spells, 24. An id written any other way (none on
//! mainnet) is kept as written, on the heap, and reads back the same.

use std::fmt;

use crate::text::{prefixed_hex_bytes, write_prefixed_hex};

/// A client order id, as the node wrote it.
///
/// It has no `&str` of its own to lend: [`Cloid::as_str`] writes it into a
/// buffer the caller holds. Two ids are equal when their texts are.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Cloid(Repr);

/// One form per text, so that the derived equality is the texts'.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    /// `0x` and these bytes in lowercase hex.
    Bytes([u8; 16]),
    /// Written any other way.
    Text(Box<str>),
}

/// How a [`Cloid`] is kept ([`Cloid::form`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloidForm<'a> {
    /// Written `0x` and these bytes in lowercase hex.
    Bytes(&'a [u8; 16]),
    /// Written any other way: this text.
    Text(&'a str),
}

/// Bytes of the usual form's text: `0x` and 32 hex digits.
pub const CLOID_TEXT_LEN: usize = 34;

impl Cloid {
    /// `text`, kept as its bytes when written the usual way.
    pub fn new(text: &str) -> Self {
        Self(match prefixed_hex_bytes::<16>(text) {
            Some(bytes) => Repr::Bytes(bytes),
            None => Repr::Text(text.into()),
        })
    }

    /// The id from its 16 bytes (`0x` and their lowercase hex).
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(Repr::Bytes(bytes))
    }

    /// How the id is kept: its 16 bytes, or its text.
    pub fn form(&self) -> CloidForm<'_> {
        match &self.0 {
            Repr::Bytes(bytes) => CloidForm::Bytes(bytes),
            Repr::Text(text) => CloidForm::Text(text),
        }
    }

    /// The id's text (`buf` holds it when it is kept as bytes).
    pub fn as_str<'b>(&'b self, buf: &'b mut [u8; CLOID_TEXT_LEN]) -> &'b str {
        match &self.0 {
            Repr::Bytes(bytes) => write_prefixed_hex(bytes, buf),
            Repr::Text(text) => text,
        }
    }
}

impl From<&str> for Cloid {
    fn from(text: &str) -> Self {
        Self::new(text)
    }
}

impl PartialEq<str> for Cloid {
    fn eq(&self, other: &str) -> bool {
        self.as_str(&mut [0; CLOID_TEXT_LEN]) == other
    }
}

impl PartialEq<&str> for Cloid {
    fn eq(&self, other: &&str) -> bool {
        self == *other
    }
}

impl fmt::Debug for Cloid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(&mut [0; CLOID_TEXT_LEN]), f)
    }
}

impl fmt::Display for Cloid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str(&mut [0; CLOID_TEXT_LEN]))
    }
}

impl serde::Serialize for Cloid {
    /// As its text.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str(&mut [0; CLOID_TEXT_LEN]))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_usual_form_is_kept_as_bytes_and_reads_back_the_same() {
        let text = "0x00000000000000000000019a8b3c4d5e";
        let cloid = Cloid::new(text);
        assert!(matches!(cloid.form(), CloidForm::Bytes(_)));
        assert_eq!(cloid, text);
        assert_eq!(cloid.to_string(), text);
        assert_eq!(
            serde_json::to_string(&cloid).unwrap(),
            format!("\"{text}\"")
        );
        assert_eq!(std::mem::size_of::<Option<Cloid>>(), 24);
    }

    #[test]
    fn any_other_text_is_kept_as_written() {
        for text in ["0x00000000000000000000019A8B3C4D5E", "0x1234", "abc", ""] {
            let cloid = Cloid::new(text);
            assert_eq!(cloid.form(), CloidForm::Text(text));
            assert_eq!(cloid, text);
            assert_eq!(format!("{cloid:?}"), format!("{text:?}"));
        }
    }

    proptest! {
        /// Whatever the text, the id reads back as it, and two ids are
        /// equal exactly when their texts are.
        #[test]
        fn a_cloid_is_its_text(
            a in "0x[0-9a-f]{32}|\\PC{0,40}",
            b in "0x[0-9a-f]{32}|\\PC{0,40}",
        ) {
            let (ca, cb) = (Cloid::new(&a), Cloid::new(&b));
            prop_assert_eq!(ca.to_string(), a.clone());
            prop_assert_eq!(ca == cb, a == b);
        }
    }
}

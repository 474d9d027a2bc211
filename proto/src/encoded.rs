//! Pre-encoded `MarketStreaming` responses.
//!
//! A market frame is usually read by many subscribers. [`Encoded`] carries
//! protobuf bytes that were produced once and are shared (by reference
//! count) between every stream that sends them; [`EncodedCodec`] writes
//! those bytes to the wire as they are. The only per-subscriber bytes are
//! small stamps — a trailing `sequence` field, or `seq`/`prev_seq` inside an
//! L2 diff entry — which protobuf allows in any order, so the receiver
//! decodes exactly the message the `.proto` describes.
//!
//! [`market_streaming_server`] is the `MarketStreaming` server generated
//! over these types; clients use the ordinary generated
//! [`crate::v3::market_streaming_client`].

use std::marker::PhantomData;

use bytes::{BufMut, Bytes};
use prost::Message;
use tonic::Status;
use tonic::codec::{Codec, EncodeBuf, Encoder};

/// One response message as wire bytes: shared parts and per-stream stamps,
/// concatenated in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Encoded {
    parts: Parts,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum Parts {
    #[default]
    Empty,
    One(Bytes),
    Two(Bytes, Bytes),
    Many(Vec<Bytes>),
}

impl Encoded {
    /// A message whose bytes are exactly `bytes`.
    pub fn new(bytes: Bytes) -> Self {
        Self {
            parts: Parts::One(bytes),
        }
    }

    /// A message of `body` followed by `tail` (for example a trailing field).
    pub fn with_tail(body: Bytes, tail: Bytes) -> Self {
        Self {
            parts: Parts::Two(body, tail),
        }
    }

    /// A message made of `parts`, in order.
    pub fn from_parts(parts: Vec<Bytes>) -> Self {
        Self {
            parts: Parts::Many(parts),
        }
    }

    /// Encodes `message` (once) into a shareable value.
    pub fn of<M: Message>(message: &M) -> Self {
        Self::new(Bytes::from(message.encode_to_vec()))
    }

    /// Length on the wire, in bytes.
    pub fn len(&self) -> usize {
        match &self.parts {
            Parts::Empty => 0,
            Parts::One(a) => a.len(),
            Parts::Two(a, b) => a.len() + b.len(),
            Parts::Many(parts) => parts.iter().map(Bytes::len).sum(),
        }
    }

    /// Whether the message has no bytes (every field at its default).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes as one contiguous buffer (copies when there are several
    /// parts).
    pub fn to_bytes(&self) -> Bytes {
        match &self.parts {
            Parts::Empty => Bytes::new(),
            Parts::One(a) => a.clone(),
            _ => {
                let mut out = Vec::with_capacity(self.len());
                self.write(&mut out);
                Bytes::from(out)
            }
        }
    }

    /// Decodes the bytes as `M` (tests and tools).
    ///
    /// # Errors
    /// When the bytes are not a valid `M`.
    pub fn decode<M: Message + Default>(&self) -> Result<M, prost::DecodeError> {
        M::decode(self.to_bytes())
    }

    fn write(&self, out: &mut impl BufMut) {
        match &self.parts {
            Parts::Empty => {}
            Parts::One(a) => out.put_slice(a),
            Parts::Two(a, b) => {
                out.put_slice(a);
                out.put_slice(b);
            }
            Parts::Many(parts) => {
                for part in parts {
                    out.put_slice(part);
                }
            }
        }
    }
}

/// Appends a varint-typed field (`field` number, `value`) in wire format.
pub fn put_varint_field(out: &mut Vec<u8>, field: u32, value: u64) {
    prost::encoding::encode_key(field, prost::encoding::WireType::Varint, out);
    prost::encoding::encode_varint(value, out);
}

/// Appends the key and length of a length-delimited field (`field` number,
/// `len` bytes following).
pub fn put_len_prefix(out: &mut Vec<u8>, field: u32, len: usize) {
    prost::encoding::encode_key(field, prost::encoding::WireType::LengthDelimited, out);
    prost::encoding::encode_varint(len as u64, out);
}

/// The codec of the pre-encoded server: responses are [`Encoded`] bytes
/// written as they are; requests are decoded with prost (undecodable ones
/// are `INVALID_ARGUMENT`).
#[derive(Debug, Clone)]
pub struct EncodedCodec<T, U> {
    _types: PhantomData<(T, U)>,
}

impl<T, U> Default for EncodedCodec<T, U> {
    fn default() -> Self {
        Self {
            _types: PhantomData,
        }
    }
}

impl<U> Codec for EncodedCodec<Encoded, U>
where
    U: Message + Default + Send + 'static,
{
    type Encode = Encoded;
    type Decode = U;
    type Encoder = EncodedWriter;
    type Decoder = crate::codec::StrictDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        EncodedWriter
    }

    fn decoder(&mut self) -> Self::Decoder {
        crate::codec::StrictDecoder::default()
    }
}

/// Writes [`Encoded`] bytes into the response body.
#[derive(Debug, Clone, Copy, Default)]
pub struct EncodedWriter;

impl Encoder for EncodedWriter {
    type Item = Encoded;
    type Error = Status;

    fn encode(&mut self, item: Encoded, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.reserve(item.len());
        item.write(buf);
        Ok(())
    }
}

#[allow(missing_docs, clippy::pedantic, clippy::all)]
mod generated {
    include!(concat!(
        env!("OUT_DIR"),
        "/encoded/venue_l1_gateway.v3.MarketStreaming.rs"
    ));
}

pub use generated::market_streaming_server;

// `for_each_market_method!`, made from the same descriptors.
include!(concat!(
    env!("OUT_DIR"),
    "/encoded/market_streaming_methods.rs"
));

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v3 as pb;

    #[test]
    fn a_trailing_field_overrides_nothing_and_decodes_as_the_message() {
        let message = pb::FillsUpdate {
            time: 7,
            block_number: 9,
            ..pb::FillsUpdate::default()
        };
        let mut tail = Vec::new();
        put_varint_field(&mut tail, 4, 3);
        let encoded = Encoded::with_tail(Encoded::of(&message).to_bytes(), Bytes::from(tail));
        let decoded: pb::FillsUpdate = encoded.decode().unwrap();
        assert_eq!(decoded.sequence, 3);
        assert_eq!(decoded.block_number, 9);
        assert_eq!(decoded.time, 7);
    }

    #[test]
    fn parts_concatenate_in_order() {
        let encoded =
            Encoded::from_parts(vec![Bytes::from_static(b"ab"), Bytes::from_static(b"c")]);
        assert_eq!(encoded.len(), 3);
        assert_eq!(encoded.to_bytes(), Bytes::from_static(b"abc"));
        assert!(Encoded::default().is_empty());
    }
}

//! The prost codec with one change: a message that cannot be decoded is the
//! sender's error, `INVALID_ARGUMENT` naming the message type (tonic's own
//! codec answers `INTERNAL`, which tells a client the server failed). Used by
//! every generated service and client of this crate, and for the requests of
//! the pre-encoded market server.

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};

/// Prost encoding; decoding failures are `INVALID_ARGUMENT`.
#[derive(Debug, Clone)]
pub struct StrictCodec<T, U> {
    _types: PhantomData<(T, U)>,
}

impl<T, U> Default for StrictCodec<T, U> {
    fn default() -> Self {
        Self {
            _types: PhantomData,
        }
    }
}

impl<T, U> Codec for StrictCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = tonic_prost::ProstEncoder<T>;
    type Decoder = StrictDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::new(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        StrictDecoder::default()
    }
}

/// Decodes `U`, answering `INVALID_ARGUMENT` for bytes that are not one.
#[derive(Debug, Clone)]
pub struct StrictDecoder<U> {
    _type: PhantomData<U>,
}

impl<U> Default for StrictDecoder<U> {
    fn default() -> Self {
        Self { _type: PhantomData }
    }
}

impl<U: Message + Default> Decoder for StrictDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf).map(Some).map_err(|error| {
            Status::invalid_argument(format!(
                "the message is not a valid {}: {error}",
                std::any::type_name::<U>()
                    .rsplit("::")
                    .next()
                    .unwrap_or("message")
            ))
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

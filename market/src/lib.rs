//! The market edges: every view of the engine as clients already know how
//! to ask for it. The `MarketStreaming` and raw feed gRPC services
//! ([`grpc`]), the exchange's WebSocket API ([`ws`]) and Info lookup
//! ([`info`]), the HTTP API with its health, metrics, feeds and candle
//! routes ([`http`]), and beneath them each view as the edges serve it
//! ([`views`]). They read what the node host's threads publish (the
//! `host` crate) and sit on the edges' shared parts (the `edge` crate).

pub mod grpc;
pub mod http;
pub mod info;
pub mod views;
pub mod ws;

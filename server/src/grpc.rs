//! The gRPC edge: the raw feed (`VenueL1Gateway`, byte-exact node records)
//! and market streaming (`MarketStreaming`, typed views of the engine),
//! behind the access interceptor, with reflection and health. Thin: each RPC
//! validates its request, subscribes, renders frames as protobuf
//! ([`render`]) and maps failures to statuses; every stream is supervised
//! ([`flow`]: a subscriber that lags or stops reading is ended). The
//! sockets gather the frames of many streams into one write ([`batched`]).

pub mod batched;
pub mod flow;
pub mod market;
pub mod raw_feed;
pub mod relay;
pub mod render;
pub mod transaction_stream;

//! Protobuf contract of l1gate: the raw feed service `VenueL1Gateway` and the
//! typed `MarketStreaming` service, both in package `venue_l1_gateway.v3`.
//!
//! The `.proto` files under `proto/proto/` are the source of truth; the Rust
//! types are generated at build time with protox (no `protoc` needed).

#![allow(missing_docs, clippy::pedantic, clippy::all)]

/// Generated types and service stubs of package `venue_l1_gateway.v3`.
pub mod v3 {
    tonic::include_proto!("venue_l1_gateway.v3");
}

pub mod codec;
pub mod encoded;

/// Encoded `FileDescriptorSet` of every l1gate proto, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("l1gate_descriptor");

pub use v3::*;

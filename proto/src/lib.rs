//! Protobuf contract of l1gate: the raw feed service `VenueL1Gateway` and the
//! typed `MarketStreaming` service, both in package `venue_l1_gateway.v3`,
//! and the Aptos Transaction Stream `aptos.indexer.v1.RawData` that l1gate
//! relays (transactions as opaque bytes).
//!
//! The `.proto` files under `proto/proto/` are the source of truth; the Rust
//! types are generated at build time with protox (no `protoc` needed).

#![allow(missing_docs, clippy::pedantic, clippy::all)]

/// Generated types and service stubs of package `venue_l1_gateway.v3`.
pub mod v3 {
    tonic::include_proto!("venue_l1_gateway.v3");
}

/// Generated types and service stubs of package `aptos.indexer.v1`: the
/// public Aptos Transaction Stream, with transactions (and the request's
/// filter) as opaque bytes; see `proto/aptos/indexer/v1/raw_data.proto`.
pub mod aptos {
    pub mod indexer {
        pub mod v1 {
            tonic::include_proto!("aptos.indexer.v1");
        }
    }
}

/// The standard health checking interface, with the strict codec.
pub mod health {
    tonic::include_proto!("grpc.health.v1");
}

pub mod codec;
pub mod encoded;

/// Encoded `FileDescriptorSet` of every l1gate proto, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("l1gate_descriptor");

pub use v3::*;

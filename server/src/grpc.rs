//! The gRPC edge: the raw feed (`VenueL1Gateway`, byte-exact node records)
//! and market streaming (`MarketStreaming`, typed views of the engine),
//! behind the access interceptor, with reflection and health. Thin: each RPC
//! validates its request, subscribes, renders frames as protobuf
//! ([`render`]) and maps failures to statuses; every stream is supervised
//! ([`flow`]: a subscriber that lags or stops reading is ended). The
//! sockets gather the frames of many streams into one write ([`batched`]).

pub mod admission;
pub mod batched;
pub mod flow;
pub mod health;
pub mod market;
pub mod raw_feed;
pub mod relay;
pub mod render;
pub mod transaction_stream;

use std::sync::Arc;

use futures_util::{Stream, StreamExt as _};
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::server::TcpIncoming;

use access::connections::Connections;
use common::metrics::SocketWrites;

/// gRPC reflection over l1gate's contract and health, for both protocol
/// versions: grpcurl and most clients speak v1, older ones (Python's
/// grpc_requests, GUI clients) only v1alpha. Build each with
/// `build_v1()` / `build_v1alpha()`.
pub fn reflection() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        // Health's interface is in this crate's set (compiled with the
        // strict codec, crate::grpc::health).
        .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
}

/// The connections of the gRPC address: each admitted under the
/// connection limits before a byte is read (over a limit it is closed at
/// once), without Nagle delay (frames are small and latency-bound), its
/// writes gathered across its streams ([`batched`]) and counted in
/// `writes`.
pub fn admitted_incoming(
    listener: TcpListener,
    connections: Connections,
    writes: Arc<SocketWrites>,
) -> impl Stream<Item = std::io::Result<batched::BatchedWrites<TcpStream>>> {
    TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .filter_map(move |accepted| {
            let admitted =
                match accepted {
                    Ok(socket) => socket
                        .peer_addr()
                        .ok()
                        .and_then(|peer| connections.admit("grpc", peer.ip()).ok())
                        .map(|guard| {
                            Ok(batched::BatchedWrites::new(socket, Arc::clone(&writes))
                                .admitted(guard))
                        }),
                    Err(error) => Some(Err(error)),
                };
            std::future::ready(admitted)
        })
}

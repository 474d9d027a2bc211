//! The gRPC edge: the raw feed (`VenueL1Gateway`, byte-exact node records)
//! and market streaming (`MarketStreaming`, typed views of the engine),
//! behind the access interceptor, with reflection and health. Thin: each RPC
//! validates its request, subscribes, renders frames as protobuf
//! ([`render`]) and maps failures to statuses; every stream is supervised
//! ([`flow`]: a subscriber that lags or stops reading is ended). The
//! sockets gather the frames of many streams into one write ([`batched`]).

pub mod batched;
pub mod health;
pub mod market;
pub mod raw_feed;
pub mod relay;
pub mod render;

use std::sync::Arc;

use futures_util::{Stream, StreamExt as _};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tonic::transport::server::TcpIncoming;

use access::connections::Connections;
use common::metrics::SocketWrites;

use edge::tls::EdgeStream;

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
/// once), without Nagle delay (frames are small and latency-bound), under
/// TLS when `tls` is given (handshakes run side by side; one that fails or
/// stalls is dropped), its writes gathered across its streams
/// ([`batched`]) and counted in `writes`.
pub fn admitted_incoming(
    listener: TcpListener,
    connections: Connections,
    writes: Arc<SocketWrites>,
    tls: Option<TlsAcceptor>,
) -> impl Stream<Item = std::io::Result<batched::BatchedWrites<EdgeStream>>> {
    TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .filter_map(move |accepted| {
            let admitted = match accepted {
                Ok(socket) => socket
                    .peer_addr()
                    .ok()
                    .and_then(|peer| connections.admit("grpc", peer.ip()).ok())
                    .map(|guard| Ok((socket, guard))),
                Err(error) => Some(Err(error)),
            };
            std::future::ready(admitted)
        })
        .map(move |admitted| {
            let (tls, writes) = (tls.clone(), Arc::clone(&writes));
            async move {
                let (socket, guard) = match admitted {
                    Ok(admitted) => admitted,
                    Err(error) => return Some(Err(error)),
                };
                match EdgeStream::accept(socket, tls.as_ref()).await {
                    Ok(stream) => Some(Ok(
                        batched::BatchedWrites::new(stream, writes).admitted(guard)
                    )),
                    Err(error) => {
                        tracing::debug!(%error, "gRPC: TLS handshake failed");
                        None
                    }
                }
            }
        })
        .buffer_unordered(HANDSHAKES)
        .filter_map(std::future::ready)
}

/// TLS handshakes of the gRPC address in progress at once.
const HANDSHAKES: usize = 256;

//! The l1gate server: gRPC and HTTP edges over the node's feeds, API-key
//! auth, configuration and the command line. The binary `l1gate` is a thin
//! `main` over this library so integration tests can start real servers.

pub mod access;
pub mod candles;
pub mod cli;
pub mod config;
pub mod demo;
pub mod endpoints;
pub mod grpc;
pub mod host;
pub mod http;
pub mod info;
pub mod metrics;
pub mod serve;
pub mod upstream;

/// The wall clock in Unix milliseconds (0 if the clock is before 1970).
pub fn unix_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

//! End-to-end tests of the `l1gate` server over real gRPC on loopback.

// The stand-in upstreams the tests start are axum routers of their own,
// not routes of the server (which registers its own through `Routed`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::pedantic,
    clippy::disallowed_methods
)]

mod server {
    mod access_cli;
    mod access_grpc;
    mod access_http;
    mod access_quota;
    pub mod access_rotation;
    mod access_secrets;
    pub mod access_support;
    pub mod aptos_node;
    mod aptos_sdk;
    mod archive_fetch;
    mod bad_node_data;
    pub mod bus;
    mod bus_views;
    mod candle_import;
    pub mod candles;
    mod cli;
    pub mod compressed_files;
    mod compression;
    mod connection_limits;
    mod docs;
    mod endpoints;
    mod endpoints_cli;
    mod gateway;
    mod grpc_health;
    pub mod harness;
    mod hostile_requests;
    mod house;
    mod info_local;
    mod info_lookup;
    mod info_streams;
    pub mod jsonrpc_node;
    pub mod market_live;
    pub mod market_views;
    pub mod networks;
    pub mod node_clients;
    mod node_pages;
    pub mod python;
    mod python_sdk;
    mod raw_feed_errors;
    mod raw_feed_live;
    mod raw_feed_real;
    mod reflection_clients;
    pub mod research_export;
    mod restart;
    pub mod revocation;
    pub mod slow_subscribers;
    pub mod standin;
    mod status_page;
    pub mod tls;
    pub mod transaction_stream;
    mod typescript_sdk;
    mod untrusted_text;
    mod ws_api;
    pub mod ws_streams;
}

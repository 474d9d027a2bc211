//! The l1gate server: gRPC and HTTP edges over the node's feeds, API-key
//! auth, configuration and the command line. The binary `l1gate` is a thin
//! `main` over this library so integration tests can start real servers.

pub mod auth;
pub mod cli;
pub mod config;
pub mod http;
pub mod keys;
pub mod live;
pub mod raw_feed;
pub mod serve;

//! The l1gate server: gRPC and HTTP edges over the node's feeds, API-key
//! auth, configuration and the command line. The binary `l1gate` is a thin
//! `main` over this library so integration tests can start real servers.

pub mod archive;
pub mod bus_edge;
pub mod cli;
pub mod config;
pub mod demo;
pub mod endpoints;
pub mod serve;
pub mod status;

//! The node gateway: the exchange node's REST and JSON-RPC APIs of every
//! configured chain and network behind l1gate's API keys ([`node`]), the
//! Transaction Stream relay to each network's upstreams
//! ([`transaction_stream`]), and the chains, networks and nodes they serve
//! ([`registry`]). It reads no node file and folds nothing: the server
//! wires it beside the market edges.

pub mod node;
pub mod registry;
pub mod transaction_stream;

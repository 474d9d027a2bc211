//! What every network edge of l1gate shares, below the edges themselves
//! (the market streams, the node gateway, the message bus): the node's
//! files as they grow, with change notifications ([`live`]), HTTP routes that
//! list themselves ([`routes`]), the accept loop with its connection limits
//! and TLS ([`listen`], [`tls`]), the API key check on HTTP ([`http`]) and
//! on gRPC ([`admission`]), the supervision of every gRPC stream
//! ([`flow`]), clients of upstream servers ([`upstream`]), and the small
//! rules they agree on: one percent-decoding ([`percent`]) and one
//! reconnect back-off ([`backoff`]).

pub mod admission;
pub mod backoff;
pub mod flow;
pub mod http;
pub mod listen;
pub mod live;
pub mod percent;
pub mod routes;
pub mod tls;
pub mod upstream;

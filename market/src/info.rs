//! The exchange's Info API: `l2Book`, `allMids`, open orders and candle
//! snapshots answered from l1gate's own state ([`local`]), and market
//! metadata from an Info source: the `POST /info` lookup (cached
//! `meta` / `spotMeta` / `perpDexs`, other types passed through, or `meta` /
//! `spotMeta` derived from the coins in the node's data when no source is
//! configured) and the poller whose `allMids` / `metaAndAssetCtxs` answers
//! feed `StreamAllMids` and `StreamActiveAssetCtx`.
//!
//! The Info source is an HTTP endpoint answering the exchange's Info API
//! (`info_url`, e.g. the node's local info server at
//! `http://127.0.0.1:3001/info` when the node runs with `--serve-info`). It
//! is off by default: l1gate cannot tell whether the node serves it.

pub mod derived;
pub mod local;
pub mod lookup;
pub mod open_orders;
pub mod poller;
pub mod streams;

pub use lookup::InfoLookup;
pub use poller::InfoFeed;

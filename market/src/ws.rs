//! The exchange's WebSocket API, served from the node's files: a client
//! written for the exchange (its SDKs, bots, the node servers' clients)
//! points its base URL at l1gate and subscribes as it always has.
//!
//! # Endpoints (on the HTTP address)
//!
//! - `ws://HOST/{key}/ws` and `ws://HOST/{key}`: the key in the path (the
//!   exchange's SDKs append `/ws` to their base URL, so a base URL of
//!   `http://HOST/{key}` works unchanged);
//! - `ws://HOST/ws` (or `ws://HOST/`) with the key in the upgrade's
//!   `X-Api-Key` header.
//!
//! Before the upgrade, as on every route: 401 for a missing or rejected
//! key, 403 (with the allow-list link) for a source outside the key's
//! allow-list, 429 over the key's usage quota, the account's request rate
//! or its stream cap (an open connection counts as one stream, whatever it
//! subscribes).
//!
//! # Quotas
//!
//! The upgrade counts one request toward the key's quota; so does every
//! `subscribe` and `post` message (`ping` and `unsubscribe` are free). A
//! message over the request quota gets an `error` message naming the
//! quota and when it resets, and the connection stays up. Every message
//! sent to the client counts toward the key's byte quota; the one that
//! uses it up is the connection's last: it is closed with 4003.
//!
//! # Protocol
//!
//! As the exchange's ([`protocol`] parses it): `subscribe` / `unsubscribe`
//! acknowledged with `{"channel":"subscriptionResponse","data":<the
//! message>}`; `{"method":"ping"}` answered `{"channel":"pong"}`; `post`
//! with an `info` request answered `{"channel":"post","data":{"id",
//! "response":{"type":"info","payload":{"type","data"}}}}` from the same
//! lookup as `POST /info`. A message that cannot be served gets
//! `{"channel":"error","data":"…"}` naming the field, and the connection
//! stays up.
//!
//! Channels and where their frames come from (the same views as the gRPC
//! streams, rendered once per block and channel for every connection):
//! `l2Book` (`nSigFigs`, `mantissa`, and the node servers' `nLevels`), `bbo`,
//! `trades`, `candle`, `allMids` (book mids; `dex` picks an exchange),
//! `userFills` and `userTwapSliceFills` (an `isSnapshot` message first,
//! holding no fills: l1gate keeps no fill history), `userEvents` (fills),
//! `orderUpdates` (the account's order statuses, from the `statuses` view),
//! `l4Book` (snapshot, then per-block updates), and `activeAssetCtx` for
//! perps (from the Info source; without `--info-url` it is refused).
//!
//! # Limits (per connection, the exchange's numbers)
//!
//! 1,000 subscriptions, 10 distinct users across user subscriptions, 2,000
//! client messages a minute, 100 posts in flight, 64 KiB per client
//! message. Over a limit the message is refused with an `error` message;
//! an oversize message closes the connection (1009).
//!
//! # Close codes
//!
//! | code | when |
//! |---|---|
//! | 1008 | the key was revoked, rotated past its grace period, or its allow-list no longer admits the source |
//! | 1009 | a client message over 64 KiB |
//! | 1011 | the market engine stopped |
//! | 1013 | market data is stale (`market_stale_after_ms`): reconnect later |
//! | 4001 | an incremental channel (`trades`, `l4Book`, `orderUpdates`, the fills channels) fell over `market_max_lag_ms` behind, or a whole ring behind |
//! | 4002 | the connection took nothing for `send_timeout_ms` |
//! | 4003 | the key's byte quota for the period is used up (the reason names it and when it resets) |
//! | 4004 | more than 50 refused messages in a minute (invalid, over a limit, refused subscriptions) |
//!
//! The close frame's reason is cut to the 123 bytes a frame holds; the full
//! text is sent first as an `error` message. Snapshot channels (`l2Book`,
//! `bbo`, `candle`, `allMids`) never close for lag: they skip to the newest
//! state.

pub mod connection;
pub mod protocol;
pub mod render;

use std::net::SocketAddr;

use axum::Extension;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{ConnectInfo, State};
use axum::response::Response;
use axum::routing::get;

use access::keys::Principal;
use edge::listen::HeldConnection;

pub use connection::{Limits, WsService};
use edge::routes::{Route, Routed};

/// `GET /{key}/ws`: the WebSocket API.
pub const WS: Route = Route {
    method: "GET",
    path: "/ws",
    keyed: true,
    what: "the exchange's WebSocket API (upgrade)",
};
/// `GET /{key}`: the same API at the key's root.
pub const WS_ROOT: Route = Route {
    method: "GET",
    path: "/",
    keyed: true,
    what: "the exchange's WebSocket API (upgrade), as at /ws",
};

/// Bytes gathered before a connection's writer writes to its socket (it
/// also writes whenever its queue is empty).
const WRITE_BUFFER: usize = 16 * 1024;

impl WsService {
    /// Whether the market engine thread has stopped (its streams cannot
    /// come back without a restart).
    fn engine_stopped(&self) -> bool {
        self.relays.status.error().is_some()
    }

    /// The authenticated routes: `GET /ws` and `GET /` (nested under the
    /// key by [`edge::http::authenticated`]).
    pub fn routes(self) -> Routed {
        Routed::new()
            .route(WS, get(upgrade))
            .route(WS_ROOT, get(upgrade))
            .map(|router| router.with_state(self))
    }
}

async fn upgrade(
    State(service): State<WsService>,
    Extension(principal): Extension<Principal>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    held: Option<Extension<HeldConnection>>,
    upgrade: WebSocketUpgrade,
) -> Response {
    let peer = peer.map(|Extension(ConnectInfo(addr))| addr.ip());
    let guard = match service.access.open_stream(&principal, peer) {
        Ok(guard) => guard,
        Err(denial) => {
            // The upgrade request was counted toward the quota on the way
            // in; refused here, it is not.
            service.access.refund_quota(&principal);
            service.access.record_denial("websocket", &denial);
            return edge::http::denial_response(&denial);
        }
    };
    // The connection's own slot holds the account's stream slot and is
    // what a key revocation (or a used-up byte quota) ends. The stream
    // supervisor refuses it once the server is stopping: an upgrade that
    // reaches it in the moment before the listener closes is refused like
    // any request the server cannot take now, and not counted.
    let Ok(connection) = service
        .flow
        .watch("websocket", "connection", None, Some(guard))
    else {
        service.access.refund_quota(&principal);
        return edge::http::unavailable_response("shutting_down", connection::SHUTTING_DOWN, 5);
    };
    let max = service.limits.max_message_bytes;
    // Small starting buffers: thousands of connections are held at once,
    // and what a slow reader leaves behind waits in its views' rings, not
    // here. The write buffer is not capped: one message (an L4 snapshot of
    // a busy coin) can be megabytes, and the outbox bounds how many wait.
    upgrade
        .read_buffer_size(4 * 1024)
        .write_buffer_size(WRITE_BUFFER)
        .max_message_size(max)
        .max_frame_size(max)
        .on_upgrade(move |socket| {
            connection::run(
                socket,
                service,
                principal,
                connection,
                held.map(|Extension(held)| held),
            )
        })
}

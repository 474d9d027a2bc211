//! The `MarketStreaming` gRPC service: a thin edge over the engine thread.
//! Each RPC validates its request, turns it into a view [`Key`], subscribes
//! through the engine thread, sends the opening frame(s), then relays the
//! key's ring.
//!
//! Lagging (see [`edge::flow`]): when a subscriber's oldest untaken
//! frame is over `market_max_lag_ms` behind the newest block, or it falls a
//! whole ring behind, an incremental view (trades, fills family, L2 diff,
//! L4 book, L4 order updates, TP/SL) ends with `ABORTED`; a snapshot view
//! (L2 book, BBO, candle, all mids) re-opens at the engine thread, sends
//! the current state and carries on from there, so the newest state
//! supersedes what was dropped. Each view says which it is
//! ([`engine::views::OnLag`]). A stream whose connection takes nothing for
//! `send_timeout_ms` ends with `DEADLINE_EXCEEDED`.
//!
//! Waking: each key's ring has one signal that all of its streams wait on
//! ([`host::wakeups`]); a stream registers with it before reading
//! the ring.
//!
//! Encode once: frames are built once per key and encoded once, by the
//! first subscriber that sends them; every stream writes the same shared
//! bytes through a pass-through codec, with its own `sequence` (L4 order
//! updates, TP/SL, fills family: 1 on the first frame, +1 per frame) or
//! per-coin `seq` / `prev_seq` (L2 diffs) stamped as extra wire fields. See
//! [`crate::grpc::render`].

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use engine::views::Numbering;
use engine::views::registry::Key;
use futures_util::{Stream, StreamExt as _};
use proto::encoded::{Encoded, market_streaming_server};
use tonic::{Request, Response, Status};

use crate::grpc::relay::RelaySource;
use crate::grpc::render;
use crate::info::InfoFeed;
use crate::info::streams::TypedStream;
use crate::views::request::{MarketRequest, Opening};
use access::{Access, StreamGuard};
use edge::admission::GrpcAccess as _;
use edge::flow::{Measured, Slot, Supervisor, Watched};
use host::engine::{Commands, EngineStatus};

/// A server stream of pre-encoded messages.
pub type MarketStream = Pin<Box<dyn Stream<Item = Result<Encoded, Status>> + Send>>;

/// Encodes a typed stream's messages for the wire (each subscriber its own:
/// the Info-derived views change about once per poll), under supervision.
fn typed<T: prost::Message + 'static>(slot: Arc<Slot>, stream: TypedStream<T>) -> MarketStream {
    let stream = stream.map(|item| item.map(|message| Encoded::of(&message)));
    Box::pin(Watched::new(Box::pin(stream), slot, |message: &Encoded| {
        Measured {
            bytes: message.len(),
            ..Measured::default()
        }
    }))
}

/// The `MarketStreaming` service.
#[derive(Debug, Clone)]
pub struct MarketService {
    commands: Commands,
    status: Arc<EngineStatus>,
    stale_after: Option<Duration>,
    access: Option<Access>,
    info: Option<InfoFeed>,
    flow: Supervisor,
}

impl MarketService {
    /// A service subscribing through `commands`.
    pub fn new(commands: Commands, status: Arc<EngineStatus>) -> Self {
        Self {
            commands,
            status,
            stale_after: None,
            access: None,
            info: None,
            flow: Supervisor::unswept(),
        }
    }

    /// Supervises every stream through `flow` (slow subscribers are ended;
    /// see [`edge::flow`]).
    #[must_use]
    pub fn with_flow(mut self, flow: Supervisor) -> Self {
        self.flow = flow;
        self
    }

    /// Serves StreamAllMids and StreamActiveAssetCtx from an Info source's
    /// poller (`None`: book mids, and no asset contexts).
    #[must_use]
    pub fn with_info(mut self, info: Option<InfoFeed>) -> Self {
        self.info = info;
        self
    }

    /// Admits every stream through `access` (per-account stream caps and
    /// usage counting), as the raw feed does.
    #[must_use]
    pub fn with_access(mut self, access: Access) -> Self {
        self.access = Some(access);
        self
    }

    /// The account's stream slot for this request, if access is enforced.
    fn admit<R>(&self, request: &Request<R>) -> Result<Option<StreamGuard>, Status> {
        self.access
            .as_ref()
            .map(|access| access.grpc_stream(request))
            .transpose()
    }

    /// Refuses (and ends) streams while the newest folded block is older
    /// than `bound` (None = never).
    #[must_use]
    pub fn with_stale_after(mut self, bound: Option<Duration>) -> Self {
        self.stale_after = bound;
        self
    }

    /// The engine thread's status.
    pub fn status(&self) -> &Arc<EngineStatus> {
        &self.status
    }

    async fn stream(&self, guard: Option<StreamGuard>, key: Key) -> Result<MarketStream, Status> {
        let kind = key.kind();
        let slot = self
            .flow
            .watch("market", kind.name(), Some(kind.on_lag()), guard)?;
        let mut numbering = Numbering::default();
        let relay = self
            .relays()
            .open(
                key,
                Arc::clone(&slot),
                Box::new(move |batch| render::encoded(batch, &mut numbering)),
            )
            .await?;
        let stream = futures_util::stream::unfold(relay, |mut relay| async move {
            let item = relay.next().await?;
            Some((item.map(|(message, _)| message), relay))
        });
        Ok(Box::pin(Watched::new(
            Box::pin(stream),
            slot,
            |message: &Encoded| Measured {
                bytes: message.len(),
                ..Measured::default()
            },
        )))
    }

    /// Where this service's relays subscribe.
    pub fn relays(&self) -> RelaySource {
        RelaySource {
            commands: self.commands.clone(),
            status: Arc::clone(&self.status),
            stale_after: self.stale_after,
            max_lag: self.flow.settings().market_max_lag,
        }
    }

    /// Admits `request`, then answers it with the stream of what serves it
    /// (see [`MarketRequest`]).
    async fn serve<R: MarketRequest>(
        &self,
        request: Request<R>,
    ) -> Result<Response<MarketStream>, Status> {
        let guard = self.admit(&request)?;
        match request.into_inner().opening()? {
            Opening::View(key) => self.respond(guard, key).await,
            Opening::Mids(key) => match &self.info {
                Some(info) => {
                    let slot = self.flow.watch("market", "all_mids", None, guard)?;
                    Ok(Response::new(typed(
                        slot,
                        crate::info::streams::all_mids(info),
                    )))
                }
                None => self.respond(guard, key).await,
            },
            Opening::AssetCtx(coin) => {
                let Some(info) = &self.info else {
                    return Err(Status::failed_precondition(
                        "StreamActiveAssetCtx needs an Info source: start l1gate with --info-url \
                         (L1GATE_INFO_URL, info_url)",
                    ));
                };
                let stream = crate::info::streams::active_asset_ctx(info, coin).await?;
                let slot = self.flow.watch("market", "active_asset_ctx", None, guard)?;
                Ok(Response::new(typed(slot, stream)))
            }
        }
    }

    /// Subscribes `key` for a caller holding `guard` and answers with its
    /// stream.
    async fn respond(
        &self,
        guard: Option<StreamGuard>,
        key: Key,
    ) -> Result<Response<MarketStream>, Status> {
        Ok(Response::new(self.stream(guard, key).await?))
    }
}

macro_rules! market_streaming {
    ($($method:ident($request:ty) => $stream:ident),* $(,)?) => {
        /// Every method is [`MarketService::serve`] of its request type.
        #[tonic::async_trait]
        impl market_streaming_server::MarketStreaming for MarketService {
            $(type $stream = MarketStream;)*

            $(
                async fn $method(
                    &self,
                    request: Request<$request>,
                ) -> Result<Response<MarketStream>, Status> {
                    self.serve(request).await
                }
            )*
        }
    };
}

proto::for_each_market_method!(market_streaming);

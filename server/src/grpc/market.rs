//! The `MarketStreaming` gRPC service: a thin edge over the engine thread.
//! Each RPC validates its request, turns it into a view [`Key`], subscribes
//! through the engine thread, sends the opening frame(s), then relays the
//! key's ring.
//!
//! Lagging (see [`crate::grpc::flow`]): when a subscriber's oldest untaken
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
//! ([`crate::host::wakeups`]); a stream registers with it before reading
//! the ring.
//!
//! Encode once: frames are built once per key and encoded once, by the
//! first subscriber that sends them; every stream writes the same shared
//! bytes through a pass-through codec, with its own `sequence` (L4 order
//! updates, TP/SL, fills family: 1 on the first frame, +1 per frame) or
//! per-coin `seq` / `prev_seq` (L2 diffs) stamped as extra wire fields. See
//! [`crate::grpc::render`].

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;
use engine::market::candles::Interval;
use engine::views::bbo::BboKey;
use engine::views::candles::CandleKey;
use engine::views::fills::{FillsFilter, FillsKey};
use engine::views::l2book::L2BookKey;
use engine::views::l2diff::L2DiffKey;
use engine::views::l4book::L4BookKey;
use engine::views::l4updates::L4UpdatesKey;
use engine::views::mids::MidsKey;
use engine::views::registry::Key;
use engine::views::statuses::StatusesKey;
use engine::views::tpsl::TpslKey;
use engine::views::trades::TradesKey;
use engine::views::{Numbering, ViewError};
use futures_util::{Stream, StreamExt as _};
use proto::encoded::{Encoded, market_streaming_server};
use proto::v3 as pb;
use tonic::{Request, Response, Status};

use crate::access::{Access, StreamGuard};
use crate::grpc::admission::GrpcAccess as _;
use crate::grpc::flow::{Measured, Slot, Supervisor, Watched};
use crate::grpc::relay::{RelaySource, view_status};
use crate::grpc::render;
use crate::host::engine::{Command, EngineStatus};
use crate::info::InfoFeed;
use crate::info::streams::TypedStream;

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
    commands: Sender<Command>,
    status: Arc<EngineStatus>,
    stale_after: Option<Duration>,
    access: Option<Access>,
    info: Option<InfoFeed>,
    flow: Supervisor,
}

impl MarketService {
    /// A service subscribing through `commands`.
    pub fn new(commands: Sender<Command>, status: Arc<EngineStatus>) -> Self {
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
    /// see [`crate::grpc::flow`]).
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
            .watch("market", kind.name(), Some(kind.on_lag()), guard);
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

/// Rejects blank and `*` entries of a coin or user list.
fn entries(field: &str, values: &[String]) -> Result<(), Status> {
    crate::bounded_list(field, values).map_err(Status::invalid_argument)?;
    for value in values {
        if value.trim().is_empty() {
            return Err(Status::invalid_argument(format!(
                "{field}: blank entry {}",
                crate::quoted(value)
            )));
        }
        if value == "*" {
            return Err(Status::invalid_argument(format!(
                "{field}: \"*\" is not a value; leave the list empty for all"
            )));
        }
    }
    Ok(())
}

/// A required single coin.
fn one_coin(coin: &str) -> Result<String, Status> {
    if coin.trim().is_empty() {
        return Err(Status::invalid_argument("coin: required"));
    }
    entries("coin", &[coin.to_owned()])?;
    Ok(coin.to_owned())
}

fn set(values: &[String]) -> BTreeSet<String> {
    values.iter().cloned().collect()
}

/// A fills key of `filter` within the scope `coins`.
fn fills(filter: FillsFilter, coins: &[String]) -> Key {
    Key::Fills(FillsKey {
        filter,
        coins: set(coins),
    })
}

/// A required address (user or builder), lowercased; see [`crate::address`].
fn address(field: &str, value: &str) -> Result<String, Status> {
    crate::address(field, value).map_err(Status::invalid_argument)
}

/// A scope list of addresses (empty = all): each entry checked, lowercased,
/// duplicates merged.
fn addresses(field: &str, values: &[String]) -> Result<BTreeSet<String>, Status> {
    entries(field, values)?;
    values.iter().map(|value| address(field, value)).collect()
}

#[tonic::async_trait]
impl market_streaming_server::MarketStreaming for MarketService {
    type StreamL2BookStream = MarketStream;
    type StreamBboStream = MarketStream;
    type StreamL2BookDiffStream = MarketStream;
    type StreamL4BookStream = MarketStream;
    type StreamL4OrderUpdatesStream = MarketStream;
    type StreamTpslUpdatesStream = MarketStream;
    type StreamTradesStream = MarketStream;
    type StreamAllFillsStream = MarketStream;
    type StreamUserFillsStream = MarketStream;
    type StreamBuilderFillsStream = MarketStream;
    type StreamLiquidationFillsStream = MarketStream;
    type StreamCandleStream = MarketStream;
    type StreamAllMidsStream = MarketStream;
    type StreamActiveAssetCtxStream = MarketStream;
    type StreamOrderUpdatesStream = MarketStream;

    async fn stream_l2_book(
        &self,
        request: Request<pb::L2BookRequest>,
    ) -> Result<Response<Self::StreamL2BookStream>, Status> {
        let guard = self.admit(&request)?;
        let r = request.into_inner();
        let key = Key::L2Book(L2BookKey {
            coin: one_coin(&r.coin)?,
            n_levels: r.n_levels,
            n_sig_figs: r.n_sig_figs,
            mantissa: r.mantissa,
            strict: r.strict.unwrap_or(false),
        });
        self.respond(guard, key).await
    }

    async fn stream_bbo(
        &self,
        request: Request<pb::BboRequest>,
    ) -> Result<Response<Self::StreamBboStream>, Status> {
        let guard = self.admit(&request)?;
        let r = request.into_inner();
        entries("coins", &r.coins)?;
        let key = Key::Bbo(BboKey {
            coins: set(&r.coins),
        });
        self.respond(guard, key).await
    }

    async fn stream_l2_book_diff(
        &self,
        request: Request<pb::L2BookDiffRequest>,
    ) -> Result<Response<Self::StreamL2BookDiffStream>, Status> {
        let guard = self.admit(&request)?;
        let r = request.into_inner();
        entries("coins", &r.coins)?;
        let key = Key::L2Diff(L2DiffKey {
            coins: set(&r.coins),
            n_levels: r.n_levels,
            n_sig_figs: r.n_sig_figs,
            mantissa: r.mantissa,
        });
        self.respond(guard, key).await
    }

    async fn stream_l4_book(
        &self,
        request: Request<pb::L4BookRequest>,
    ) -> Result<Response<Self::StreamL4BookStream>, Status> {
        let guard = self.admit(&request)?;
        let r = request.into_inner();
        // Only outcome coins have a sibling to mirror; other coins share one
        // key whatever the flag says.
        let key = Key::L4Book(L4BookKey::new(one_coin(&r.coin)?, r.mirror));
        self.respond(guard, key).await
    }

    async fn stream_l4_order_updates(
        &self,
        request: Request<pb::L4OrderUpdatesRequest>,
    ) -> Result<Response<Self::StreamL4OrderUpdatesStream>, Status> {
        let guard = self.admit(&request)?;
        let r = request.into_inner();
        entries("coins", &r.coins)?;
        let key = Key::L4Updates(L4UpdatesKey {
            coins: set(&r.coins),
            users: addresses("users", &r.users)?,
        });
        self.respond(guard, key).await
    }

    async fn stream_tpsl_updates(
        &self,
        request: Request<pb::TpslUpdatesRequest>,
    ) -> Result<Response<Self::StreamTpslUpdatesStream>, Status> {
        let guard = self.admit(&request)?;
        let r = request.into_inner();
        entries("coins", &r.coins)?;
        let key = Key::Tpsl(TpslKey {
            coins: set(&r.coins),
            users: addresses("users", &r.users)?,
        });
        self.respond(guard, key).await
    }

    async fn stream_trades(
        &self,
        request: Request<pb::TradesRequest>,
    ) -> Result<Response<Self::StreamTradesStream>, Status> {
        let guard = self.admit(&request)?;
        let r = request.into_inner();
        entries("coins", &r.coins)?;
        let key = Key::Trades(TradesKey {
            coins: set(&r.coins),
        });
        self.respond(guard, key).await
    }

    async fn stream_all_fills(
        &self,
        request: Request<pb::AllFillsRequest>,
    ) -> Result<Response<Self::StreamAllFillsStream>, Status> {
        let guard = self.admit(&request)?;
        let r = request.into_inner();
        entries("coins", &r.coins)?;
        let key = fills(FillsFilter::All, &r.coins);
        self.respond(guard, key).await
    }

    async fn stream_user_fills(
        &self,
        request: Request<pb::UserFillsRequest>,
    ) -> Result<Response<Self::StreamUserFillsStream>, Status> {
        let guard = self.admit(&request)?;
        let r = request.into_inner();
        let user = address("user", &r.user)?;
        entries("coins", &r.coins)?;
        let key = fills(FillsFilter::User(user), &r.coins);
        self.respond(guard, key).await
    }

    async fn stream_builder_fills(
        &self,
        request: Request<pb::BuilderFillsRequest>,
    ) -> Result<Response<Self::StreamBuilderFillsStream>, Status> {
        let guard = self.admit(&request)?;
        let r = request.into_inner();
        let builder = address("builder", &r.builder)?;
        entries("coins", &r.coins)?;
        let key = fills(FillsFilter::Builder(builder), &r.coins);
        self.respond(guard, key).await
    }

    async fn stream_liquidation_fills(
        &self,
        request: Request<pb::LiquidationFillsRequest>,
    ) -> Result<Response<Self::StreamLiquidationFillsStream>, Status> {
        let guard = self.admit(&request)?;
        let r = request.into_inner();
        entries("coins", &r.coins)?;
        let key = fills(
            FillsFilter::Liquidations(addresses("liquidated_users", &r.liquidated_users)?),
            &r.coins,
        );
        self.respond(guard, key).await
    }

    async fn stream_candle(
        &self,
        request: Request<pb::CandleRequest>,
    ) -> Result<Response<Self::StreamCandleStream>, Status> {
        let guard = self.admit(&request)?;
        let r = request.into_inner();
        let coin = one_coin(&r.coin)?;
        if r.interval.trim().is_empty() {
            return Err(Status::invalid_argument(format!(
                "interval: required; one of {}",
                Interval::ALL.map(Interval::as_str).join(" ")
            )));
        }
        let interval =
            Interval::parse(&r.interval).map_err(|error| view_status(ViewError::Candle(error)))?;
        let key = Key::Candles(CandleKey { coin, interval });
        self.respond(guard, key).await
    }

    async fn stream_all_mids(
        &self,
        request: Request<pb::AllMidsRequest>,
    ) -> Result<Response<Self::StreamAllMidsStream>, Status> {
        let guard = self.admit(&request)?;
        if let Some(info) = &self.info {
            let slot = self.flow.watch("market", "all_mids", None, guard);
            return Ok(Response::new(typed(
                slot,
                crate::info::streams::all_mids(info),
            )));
        }
        // Without an Info source: book mids of the default exchange's perps.
        let key = Key::Mids(MidsKey {
            coins: BTreeSet::new(),
            perps_only: true,
            dex: None,
        });
        self.respond(guard, key).await
    }

    async fn stream_order_updates(
        &self,
        request: Request<pb::OrderUpdatesRequest>,
    ) -> Result<Response<Self::StreamOrderUpdatesStream>, Status> {
        let guard = self.admit(&request)?;
        let r = request.into_inner();
        let users = addresses("users", &r.users)?;
        let key = StatusesKey::new(&users.into_iter().collect::<Vec<_>>()).map_err(view_status)?;
        self.respond(guard, Key::Statuses(key)).await
    }

    async fn stream_active_asset_ctx(
        &self,
        request: Request<pb::ActiveAssetCtxRequest>,
    ) -> Result<Response<Self::StreamActiveAssetCtxStream>, Status> {
        let guard = self.admit(&request)?;
        let coin = one_coin(&request.into_inner().coin)?;
        let Some(info) = &self.info else {
            return Err(Status::failed_precondition(
                "StreamActiveAssetCtx needs an Info source: start l1gate with --info-url \
                 (L1GATE_INFO_URL, info_url)",
            ));
        };
        let stream = crate::info::streams::active_asset_ctx(info, coin).await?;
        let slot = self.flow.watch("market", "active_asset_ctx", None, guard);
        Ok(Response::new(typed(slot, stream)))
    }
}

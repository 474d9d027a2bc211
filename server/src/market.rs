//! The `MarketStreaming` gRPC service: a thin edge over the engine thread.
//! Each RPC validates its request, turns it into a view [`Key`], subscribes
//! through the engine thread, sends the opening frame(s), then relays the
//! key's ring.
//!
//! Lagging (see [`engine::hub`]): when a subscriber falls a whole ring
//! behind, an incremental view (trades, fills family, L2 diff, L4 book, L4
//! order updates, TP/SL) ends with `ABORTED`; a snapshot view (L2 book, BBO,
//! all mids) re-opens at the engine thread, sends the current state and
//! carries on from there, so the newest state supersedes what was dropped.
//!
//! Sequences: frames are built once per key and shared, so they cannot carry
//! a subscriber's own `sequence`. The edge stamps it: each frame a
//! subscriber receives is cloned once and gets `sequence` (L4 order updates,
//! TP/SL, fills family: 1 on the first frame, +1 per frame) or, for L2 diffs,
//! per-coin `seq` / `prev_seq` counted for this subscriber. tonic encodes
//! every stream's messages itself, so a shared pre-encoded frame would not
//! save the encode; the clone is the price of the stamp.

pub mod convert;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::mpsc;

use engine::hub::{Receiver, Recv};
use engine::views::ViewError;
use engine::views::tpsl::TpslError;
use futures_util::Stream;
use proto::v3 as pb;
use tokio::sync::Notify;
use tonic::{Request, Response, Status};

use crate::engine_thread::{
    self, Batch, Command, EngineStatus, FillsKey, Frame, Key, Opened, SubscribeError,
};
use crate::info::InfoFeed;

/// A server stream of one message type.
pub type MarketStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The `MarketStreaming` service.
#[derive(Debug, Clone)]
pub struct MarketService {
    commands: mpsc::Sender<Command>,
    status: Arc<EngineStatus>,
    info: Option<InfoFeed>,
}

impl MarketService {
    /// A service subscribing through `commands`.
    pub fn new(commands: mpsc::Sender<Command>, status: Arc<EngineStatus>) -> Self {
        Self {
            commands,
            status,
            info: None,
        }
    }

    /// Serves StreamAllMids and StreamActiveAssetCtx from an Info source's
    /// poller (`None`: book mids, and no asset contexts).
    #[must_use]
    pub fn with_info(mut self, info: Option<InfoFeed>) -> Self {
        self.info = info;
        self
    }

    /// The engine thread's status.
    pub fn status(&self) -> &Arc<EngineStatus> {
        &self.status
    }

    async fn stream<T: Message>(&self, key: Key, on_lag: OnLag) -> Result<MarketStream<T>, Status> {
        let opened = engine_thread::subscribe(&self.commands, key.clone())
            .await
            .map_err(status_of)?;
        let mut relay = Relay::<T> {
            commands: self.commands.clone(),
            key,
            on_lag,
            notify: Arc::new(Notify::new()),
            receiver: None,
            pending: VecDeque::new(),
            stamp: Stamp::default(),
            done: false,
        };
        relay.take(opened);
        let stream = futures_util::stream::unfold(relay, |mut relay| async move {
            let item = relay.next().await?;
            Some((item, relay))
        });
        Ok(Box::pin(stream))
    }
}

/// What a lag does to a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnLag {
    /// Incremental view: end with ABORTED.
    Abort,
    /// Snapshot view: send the current state again and carry on.
    Reopen,
}

/// Per-subscriber numbering stamped onto shared frames.
#[derive(Debug, Default)]
struct Stamp {
    /// The last `sequence` sent.
    sequence: u64,
    /// The last `seq` sent per coin (L2 diffs).
    seqs: BTreeMap<String, u64>,
}

/// A message one RPC streams.
trait Message: Clone + Send + Sync + 'static {
    /// This message, if `frame` is one.
    fn of(frame: &Frame) -> Option<&Self>;
    /// Stamps this subscriber's numbering.
    fn stamp(&mut self, _stamp: &mut Stamp) {}
}

macro_rules! plain_message {
    ($ty:ty, $variant:ident) => {
        impl Message for $ty {
            fn of(frame: &Frame) -> Option<&Self> {
                match frame {
                    Frame::$variant(message) => Some(message),
                    _ => None,
                }
            }
        }
    };
}

macro_rules! sequenced_message {
    ($ty:ty, $variant:ident) => {
        impl Message for $ty {
            fn of(frame: &Frame) -> Option<&Self> {
                match frame {
                    Frame::$variant(message) => Some(message),
                    _ => None,
                }
            }

            fn stamp(&mut self, stamp: &mut Stamp) {
                stamp.sequence += 1;
                self.sequence = stamp.sequence;
            }
        }
    };
}

plain_message!(pb::BboUpdate, Bbo);
plain_message!(pb::L2BookUpdate, L2Book);
plain_message!(pb::L4BookUpdate, L4Book);
plain_message!(pb::TradesUpdate, Trades);
plain_message!(pb::AllMidsUpdate, Mids);
sequenced_message!(pb::L4OrderUpdate, L4Updates);
sequenced_message!(pb::TpslUpdate, Tpsl);
sequenced_message!(pb::FillsUpdate, Fills);

impl Message for pb::L2BookDiffUpdate {
    fn of(frame: &Frame) -> Option<&Self> {
        match frame {
            Frame::L2Diff(message) => Some(message),
            _ => None,
        }
    }

    fn stamp(&mut self, stamp: &mut Stamp) {
        for diff in &mut self.diffs {
            let last = stamp.seqs.entry(diff.coin.clone()).or_insert(0);
            diff.prev_seq = if diff.snapshot { 0 } else { *last };
            *last += 1;
            diff.seq = *last;
        }
    }
}

/// One subscriber's relay from its key's ring to its gRPC stream.
struct Relay<T> {
    commands: mpsc::Sender<Command>,
    key: Key,
    on_lag: OnLag,
    notify: Arc<Notify>,
    receiver: Option<Receiver<Batch>>,
    pending: VecDeque<T>,
    stamp: Stamp,
    done: bool,
}

impl<T: Message> Relay<T> {
    fn take(&mut self, opened: Opened) {
        let Opened {
            opening,
            mut receiver,
        } = opened;
        let notify = Arc::clone(&self.notify);
        receiver.set_notify(Arc::new(move || notify.notify_one()));
        self.receiver = Some(receiver);
        self.queue(&opening);
    }

    fn queue(&mut self, batch: &Batch) {
        for frame in batch {
            if let Some(message) = T::of(frame) {
                let mut message = message.clone();
                message.stamp(&mut self.stamp);
                self.pending.push_back(message);
            }
        }
    }

    async fn next(&mut self) -> Option<Result<T, Status>> {
        loop {
            if self.done {
                return None;
            }
            if let Some(message) = self.pending.pop_front() {
                return Some(Ok(message));
            }
            let Some(receiver) = self.receiver.as_mut() else {
                self.done = true;
                return None;
            };
            match receiver.recv() {
                Recv::Frame(batch) => self.queue(&batch),
                Recv::Empty => self.notify.notified().await,
                Recv::Lagged { missed } => match self.on_lag {
                    OnLag::Abort => {
                        self.done = true;
                        return Some(Err(Status::aborted(format!(
                            "subscriber too slow: {missed} blocks of frames were dropped; resubscribe"
                        ))));
                    }
                    OnLag::Reopen => {
                        // Release the old cursor before taking a new one.
                        self.receiver = None;
                        match engine_thread::subscribe(&self.commands, self.key.clone()).await {
                            Ok(opened) => self.take(opened),
                            Err(error) => {
                                self.done = true;
                                return Some(Err(status_of(error)));
                            }
                        }
                    }
                },
                Recv::Closed => {
                    self.done = true;
                    return Some(Err(Status::unavailable("the market engine stopped")));
                }
            }
        }
    }
}

/// The status a refused subscription ends with.
fn status_of(error: SubscribeError) -> Status {
    match error {
        SubscribeError::NotReady | SubscribeError::Stopped => {
            Status::unavailable(error.to_string())
        }
        SubscribeError::UnknownCoin(coin) => {
            Status::invalid_argument(format!("coins: unknown coin {coin:?}"))
        }
        SubscribeError::View(ViewError::CoinCount { count, .. }) => Status::invalid_argument(
            format!("coins: 1 to 20 distinct coins are required, got {count}"),
        ),
        SubscribeError::View(ViewError::MissingCoin { .. }) => {
            Status::invalid_argument("coin: required")
        }
        SubscribeError::View(ViewError::L2(error)) => Status::invalid_argument(error.to_string()),
        SubscribeError::Tpsl(TpslError::NotPerp { coin }) => {
            Status::invalid_argument(format!("coins: {coin:?} is not a perp coin"))
        }
    }
}

/// Rejects blank and `*` entries of a coin or user list.
fn entries(field: &str, values: &[String]) -> Result<(), Status> {
    for value in values {
        if value.trim().is_empty() {
            return Err(Status::invalid_argument(format!(
                "{field}: blank entry {value:?}"
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

fn lower_set(values: &[String]) -> BTreeSet<String> {
    values.iter().map(|v| v.to_ascii_lowercase()).collect()
}

/// A required address (user or builder).
fn address(field: &str, value: &str) -> Result<String, Status> {
    if value.trim().is_empty() {
        return Err(Status::invalid_argument(format!("{field}: required")));
    }
    Ok(value.to_ascii_lowercase())
}

#[tonic::async_trait]
impl pb::market_streaming_server::MarketStreaming for MarketService {
    type StreamL2BookStream = MarketStream<pb::L2BookUpdate>;
    type StreamBboStream = MarketStream<pb::BboUpdate>;
    type StreamL2BookDiffStream = MarketStream<pb::L2BookDiffUpdate>;
    type StreamL4BookStream = MarketStream<pb::L4BookUpdate>;
    type StreamL4OrderUpdatesStream = MarketStream<pb::L4OrderUpdate>;
    type StreamTpslUpdatesStream = MarketStream<pb::TpslUpdate>;
    type StreamTradesStream = MarketStream<pb::TradesUpdate>;
    type StreamAllFillsStream = MarketStream<pb::FillsUpdate>;
    type StreamUserFillsStream = MarketStream<pb::FillsUpdate>;
    type StreamBuilderFillsStream = MarketStream<pb::FillsUpdate>;
    type StreamLiquidationFillsStream = MarketStream<pb::FillsUpdate>;
    type StreamCandleStream = MarketStream<pb::CandleUpdate>;
    type StreamAllMidsStream = MarketStream<pb::AllMidsUpdate>;
    type StreamActiveAssetCtxStream = MarketStream<pb::ActiveAssetCtxUpdate>;

    async fn stream_l2_book(
        &self,
        request: Request<pb::L2BookRequest>,
    ) -> Result<Response<Self::StreamL2BookStream>, Status> {
        let r = request.into_inner();
        let key = Key::L2Book(
            one_coin(&r.coin)?,
            r.n_levels,
            r.n_sig_figs,
            r.mantissa,
            r.strict.unwrap_or(false),
        );
        Ok(Response::new(self.stream(key, OnLag::Reopen).await?))
    }

    async fn stream_bbo(
        &self,
        request: Request<pb::BboRequest>,
    ) -> Result<Response<Self::StreamBboStream>, Status> {
        let r = request.into_inner();
        entries("coins", &r.coins)?;
        let key = Key::Bbo(set(&r.coins));
        Ok(Response::new(self.stream(key, OnLag::Reopen).await?))
    }

    async fn stream_l2_book_diff(
        &self,
        request: Request<pb::L2BookDiffRequest>,
    ) -> Result<Response<Self::StreamL2BookDiffStream>, Status> {
        let r = request.into_inner();
        entries("coins", &r.coins)?;
        let key = Key::L2Diff(set(&r.coins), r.n_levels, r.n_sig_figs, r.mantissa);
        Ok(Response::new(self.stream(key, OnLag::Abort).await?))
    }

    async fn stream_l4_book(
        &self,
        request: Request<pb::L4BookRequest>,
    ) -> Result<Response<Self::StreamL4BookStream>, Status> {
        let r = request.into_inner();
        let key = Key::L4Book(one_coin(&r.coin)?);
        Ok(Response::new(self.stream(key, OnLag::Abort).await?))
    }

    async fn stream_l4_order_updates(
        &self,
        request: Request<pb::L4OrderUpdatesRequest>,
    ) -> Result<Response<Self::StreamL4OrderUpdatesStream>, Status> {
        let r = request.into_inner();
        entries("coins", &r.coins)?;
        entries("users", &r.users)?;
        let key = Key::L4Updates(set(&r.coins), lower_set(&r.users));
        Ok(Response::new(self.stream(key, OnLag::Abort).await?))
    }

    async fn stream_tpsl_updates(
        &self,
        request: Request<pb::TpslUpdatesRequest>,
    ) -> Result<Response<Self::StreamTpslUpdatesStream>, Status> {
        let r = request.into_inner();
        entries("coins", &r.coins)?;
        entries("users", &r.users)?;
        let key = Key::Tpsl(set(&r.coins), lower_set(&r.users));
        Ok(Response::new(self.stream(key, OnLag::Abort).await?))
    }

    async fn stream_trades(
        &self,
        request: Request<pb::TradesRequest>,
    ) -> Result<Response<Self::StreamTradesStream>, Status> {
        let r = request.into_inner();
        entries("coins", &r.coins)?;
        let key = Key::Trades(set(&r.coins));
        Ok(Response::new(self.stream(key, OnLag::Abort).await?))
    }

    async fn stream_all_fills(
        &self,
        request: Request<pb::AllFillsRequest>,
    ) -> Result<Response<Self::StreamAllFillsStream>, Status> {
        let r = request.into_inner();
        entries("coins", &r.coins)?;
        let key = Key::Fills(FillsKey::All, set(&r.coins));
        Ok(Response::new(self.stream(key, OnLag::Abort).await?))
    }

    async fn stream_user_fills(
        &self,
        request: Request<pb::UserFillsRequest>,
    ) -> Result<Response<Self::StreamUserFillsStream>, Status> {
        let r = request.into_inner();
        let user = address("user", &r.user)?;
        entries("coins", &r.coins)?;
        let key = Key::Fills(FillsKey::User(user), set(&r.coins));
        Ok(Response::new(self.stream(key, OnLag::Abort).await?))
    }

    async fn stream_builder_fills(
        &self,
        request: Request<pb::BuilderFillsRequest>,
    ) -> Result<Response<Self::StreamBuilderFillsStream>, Status> {
        let r = request.into_inner();
        let builder = address("builder", &r.builder)?;
        entries("coins", &r.coins)?;
        let key = Key::Fills(FillsKey::Builder(builder), set(&r.coins));
        Ok(Response::new(self.stream(key, OnLag::Abort).await?))
    }

    async fn stream_liquidation_fills(
        &self,
        request: Request<pb::LiquidationFillsRequest>,
    ) -> Result<Response<Self::StreamLiquidationFillsStream>, Status> {
        let r = request.into_inner();
        entries("coins", &r.coins)?;
        entries("liquidated_users", &r.liquidated_users)?;
        let key = Key::Fills(
            FillsKey::Liquidations(lower_set(&r.liquidated_users)),
            set(&r.coins),
        );
        Ok(Response::new(self.stream(key, OnLag::Abort).await?))
    }

    async fn stream_candle(
        &self,
        _request: Request<pb::CandleRequest>,
    ) -> Result<Response<Self::StreamCandleStream>, Status> {
        Err(Status::unimplemented("StreamCandle is not implemented yet"))
    }

    async fn stream_all_mids(
        &self,
        _request: Request<pb::AllMidsRequest>,
    ) -> Result<Response<Self::StreamAllMidsStream>, Status> {
        if let Some(info) = &self.info {
            return Ok(Response::new(crate::info::streams::all_mids(info)));
        }
        let key = Key::Mids(BTreeSet::new());
        let book = self.stream(key, OnLag::Reopen).await?;
        Ok(Response::new(crate::info::streams::perp_book_mids(book)))
    }

    async fn stream_active_asset_ctx(
        &self,
        request: Request<pb::ActiveAssetCtxRequest>,
    ) -> Result<Response<Self::StreamActiveAssetCtxStream>, Status> {
        let coin = one_coin(&request.into_inner().coin)?;
        let Some(info) = &self.info else {
            return Err(Status::failed_precondition(
                "StreamActiveAssetCtx needs an Info source: start l1gate with --info-url \
                 (L1GATE_INFO_URL, info_url)",
            ));
        };
        let stream = crate::info::streams::active_asset_ctx(info, coin).await?;
        Ok(Response::new(stream))
    }
}

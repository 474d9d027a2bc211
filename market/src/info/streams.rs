//! The two Info-derived `MarketStreaming` RPCs over the poller's state.
//! (Without an Info source `StreamAllMids` serves book mids of the perps
//! through the engine thread: the mids view with `perps_only`.)
//!
//! - `StreamAllMids` (Info source): the default exchange's full perp mid
//!   map, at once when known, then again whenever any mid changes; `time`
//!   is when l1gate made the map available.
//! - `StreamActiveAssetCtx`: one perp of the Info source's universe; its
//!   context at once when known, then again whenever it changes.
//!
//! Neither ends because the source is down: an outage is an absence of
//! frames, and the next change after recovery is sent as usual.

use std::sync::Arc;

use futures_util::StreamExt as _;
use proto::v3 as pb;
use tokio::sync::watch;
use tonic::Status;

use engine::coin;
use futures_util::Stream;

use super::poller::{CtxState, InfoFeed};

/// A stream of one message type, before encoding.
pub type TypedStream<T> = std::pin::Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// `StreamAllMids` from the Info source.
pub fn all_mids(feed: &InfoFeed) -> TypedStream<pb::AllMidsUpdate> {
    let frames = tokio_stream::wrappers::WatchStream::new(feed.watch_mids()).filter_map(
        |state| async move {
            state.map(|state| {
                Ok(pb::AllMidsUpdate {
                    time: state.time_ms,
                    mids: state
                        .mids
                        .iter()
                        .map(|(c, p)| (c.clone(), p.clone()))
                        .collect(),
                })
            })
        },
    );
    Box::pin(frames)
}

/// `StreamActiveAssetCtx` of `coin` (already checked non-blank).
///
/// # Errors
/// `INVALID_ARGUMENT` naming the coin when it is not a perp of the source's
/// universe; `UNAVAILABLE` when the source has not answered
/// `metaAndAssetCtxs` within one poll timeout (so the coin cannot be
/// checked).
pub async fn active_asset_ctx(
    feed: &InfoFeed,
    coin: String,
) -> Result<TypedStream<pb::ActiveAssetCtxUpdate>, Status> {
    if !coin::is_default_perp(&coin) {
        return Err(Status::invalid_argument(format!(
            "coin: {} is not a perp of the default exchange",
            common::quoted(&coin)
        )));
    }
    let mut receiver = feed.watch_ctxs();
    let first = tokio::time::timeout(feed.poll_timeout(), async {
        receiver
            .wait_for(Option::is_some)
            .await
            .map(|state| state.clone())
    })
    .await;
    let known = match first {
        Ok(Ok(state)) => state,
        Ok(Err(_)) => return Err(Status::unavailable("the Info poller stopped")),
        Err(_) => {
            let why = feed
                .ctxs_failure()
                .map_or_else(String::new, |error| format!(": {error}"));
            return Err(Status::unavailable(format!(
                "the Info source has not answered metaAndAssetCtxs yet{why}; retry shortly"
            )));
        }
    };
    if !known
        .as_ref()
        .is_some_and(|state| state.universe.contains(&coin))
    {
        return Err(Status::invalid_argument(format!(
            "coin: unknown coin {} (not in the Info source's perp universe)",
            common::quoted(&coin)
        )));
    }
    // `wait_for` marked the state just read as seen: the first frame is
    // built from it, later ones from each change.
    let relay = CtxRelay {
        receiver,
        coin,
        last_sent: None,
        pending: known,
    };
    let frames = futures_util::stream::unfold(relay, |mut relay| async move {
        let frame = relay.next().await?;
        Some((Ok(frame), relay))
    });
    Ok(Box::pin(frames))
}

/// One subscriber's walk over context states.
struct CtxRelay {
    receiver: watch::Receiver<Option<Arc<CtxState>>>,
    coin: String,
    /// The context last sent.
    last_sent: Option<pb::PerpAssetCtx>,
    /// A state not yet looked at.
    pending: Option<Arc<CtxState>>,
}

impl CtxRelay {
    async fn next(&mut self) -> Option<pb::ActiveAssetCtxUpdate> {
        loop {
            if let Some(state) = self.pending.take()
                && let Some(entry) = state.ctxs.get(&self.coin)
                && self
                    .last_sent
                    .as_ref()
                    .is_none_or(|sent| *sent != entry.ctx)
            {
                self.last_sent = Some(entry.ctx.clone());
                return Some(pb::ActiveAssetCtxUpdate {
                    coin: self.coin.clone(),
                    time: entry.time_ms,
                    ctx: Some(entry.ctx.clone()),
                });
            }
            // The poller lives as long as the server; if it is gone the
            // stream ends quietly with the server.
            self.receiver.changed().await.ok()?;
            self.pending.clone_from(&self.receiver.borrow_and_update());
        }
    }
}

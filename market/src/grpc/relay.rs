//! One market subscriber's relay from its view key's ring to its transport,
//! shared by the edges that stream views (gRPC `MarketStreaming`, the
//! exchange's WebSocket API): each renders batches its own way and hands
//! the messages to its transport; the relay keeps what is common.
//!
//! - Subscribing through the engine thread, the opening frame(s) first.
//! - Waking on the key's signal, registered before the ring is read so no
//!   wake-up is lost.
//! - Lag ([`edge::flow`]): a batch over `market_max_lag_ms` behind
//!   the newest block (that has also waited that long since it was
//!   published), or a lapped ring, ends an incremental view with ABORTED
//!   and re-opens a snapshot view on the newest state.
//! - Staleness: with a bound, a quiet view is healthy but a stalled engine
//!   ends the stream with UNAVAILABLE.
//!
//! The edge tells the relay when its transport took a message through the
//! stream's [`Slot`] (`Watched` for gRPC bodies, [`Slot::took`] otherwise).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use engine::hub::{Receiver, Recv};
use engine::market::Position;
use engine::views::OnLag;
use engine::views::registry::{Batch, Key};
use tonic::Status;

use crate::views::request::view_status;
use edge::flow::{self, EndReason, Slot};
use host::engine::{Commands, EngineStatus, Opened, SubscribeError, subscribe};
use host::wakeups::Signal;

/// Renders one batch into a subscriber's messages (numbering them, for
/// views that carry numbers).
pub type Render<M> = Box<dyn FnMut(&Batch) -> Vec<M> + Send>;

/// Where a relay subscribes and how it judges lag and staleness.
#[derive(Debug, Clone)]
pub struct RelaySource {
    /// The engine thread's commands.
    pub commands: Commands,
    /// The engine thread's status.
    pub status: Arc<EngineStatus>,
    /// `market_stale_after_ms` (None = never stale).
    pub stale_after: Option<Duration>,
    /// `market_max_lag_ms` (None = only a lapped ring is a lag).
    pub max_lag: Option<Duration>,
}

impl RelaySource {
    /// Subscribes `key` for a stream supervised through `slot`, rendering
    /// with `render`; the opening frames are queued at once.
    ///
    /// # Errors
    /// The status a refused subscription gets (stale data, not ready,
    /// unknown coin, a request outside the view's contract).
    pub async fn open<M>(
        &self,
        key: Key,
        slot: Arc<Slot>,
        render: Render<M>,
    ) -> Result<Relay<M>, Status> {
        if let Some(status) = stale(&self.status, self.stale_after) {
            return Err(status);
        }
        let opened = subscribe(&self.commands, &self.status, key.clone())
            .await
            .map_err(status_of)?;
        let mut relay = Relay {
            source: self.clone(),
            on_lag: key.kind().on_lag(),
            key,
            slot,
            signal: Arc::clone(&opened.signal),
            pending: VecDeque::new(),
            render,
            done: false,
        };
        relay.take(opened);
        Ok(relay)
    }
}

/// One subscriber's relay. See the module docs.
pub struct Relay<M> {
    source: RelaySource,
    key: Key,
    on_lag: OnLag,
    /// The stream's supervised state; holds the ring receiver.
    slot: Arc<Slot>,
    /// Woken after each publish to the ring.
    signal: Arc<Signal>,
    /// Messages not taken yet, with the block they come from and when it
    /// was published (Unix ms).
    pending: VecDeque<(M, Position, i64)>,
    render: Render<M>,
    done: bool,
}

impl<M> Relay<M> {
    /// The stream's slot.
    pub fn slot(&self) -> &Arc<Slot> {
        &self.slot
    }

    fn take(&mut self, opened: Opened) {
        let Opened {
            opening,
            receiver,
            signal,
        } = opened;
        self.signal = signal;
        self.slot.set_receiver(Some(receiver));
        self.queue(&opening);
    }

    fn queue(&mut self, batch: &Batch) {
        let at = batch.position();
        let made = batch.made_ms().unwrap_or_else(common::unix_now_ms);
        let messages = (self.render)(batch);
        self.pending
            .extend(messages.into_iter().map(|message| (message, at, made)));
        self.show_front();
    }

    /// Tells the supervisor what the oldest queued message is.
    fn show_front(&self) {
        self.slot
            .set_front(self.pending.front().map(|(_, at, made)| (*made, at.time)));
    }

    /// How far (ms of block time) `batch` is behind the newest folded
    /// block, when that is over the bound and the batch has also waited
    /// that long since it was published (a burst of old blocks the node
    /// wrote at once is not a slow subscriber).
    fn lagging(&self, batch: &Batch) -> Option<i64> {
        let bound = i64::try_from(self.source.max_lag?.as_millis()).unwrap_or(i64::MAX);
        let behind = self
            .source
            .status
            .block_time_ms()
            .saturating_sub(batch.position().time);
        let waited = common::unix_now_ms().saturating_sub(batch.made_ms()?);
        (behind > bound && waited > bound).then_some(behind)
    }

    /// A snapshot view that fell behind: drops what is queued and re-opens
    /// on the newest state.
    async fn reopen(&mut self) -> Result<(), Status> {
        self.slot.set_receiver(None);
        self.pending.clear();
        self.show_front();
        let opened = subscribe(&self.source.commands, &self.source.status, self.key.clone())
            .await
            .map_err(status_of)?;
        self.take(opened);
        Ok(())
    }

    /// Ends an incremental view that fell behind.
    fn abort(&mut self, status: Status) {
        self.done = true;
        self.slot.end(EndReason::Lag, status);
    }

    /// The next message with the block it comes from; `None` once the
    /// stream was ended (its status is in the slot) or an `Err` when it
    /// ends here.
    pub async fn next(&mut self) -> Option<Result<(M, Position), Status>> {
        loop {
            // An ended stream's status is delivered by its edge.
            if self.done || self.slot.is_ended() {
                return None;
            }
            if let Some((message, at, _)) = self.pending.pop_front() {
                self.slot.note_block(at.block_number, at.time);
                self.show_front();
                return Some(Ok((message, at)));
            }
            let signal = Arc::clone(&self.signal);
            // Registered before the ring is read: no wake-up is lost.
            let woken = signal.listen();
            let Some(recv) = self.slot.with_receiver(Receiver::recv) else {
                // The sweeper let go of a stuck snapshot view's receiver.
                if let Err(status) = self.reopen().await {
                    self.done = true;
                    return Some(Err(status));
                }
                continue;
            };
            match recv {
                Recv::Frame(batch) => match (self.lagging(&batch), self.on_lag) {
                    (None, _) => self.queue(&batch),
                    (Some(behind), OnLag::Abort) => {
                        let bound = self.source.max_lag.map_or(0, |b| b.as_millis());
                        self.abort(flow::lag_status(
                            behind,
                            i64::try_from(bound).unwrap_or(i64::MAX),
                            self.slot.last_block(),
                        ));
                    }
                    (Some(_), OnLag::SkipToNewest) => {
                        self.slot.count_lag_skip();
                        if let Err(status) = self.reopen().await {
                            self.done = true;
                            return Some(Err(status));
                        }
                    }
                },
                Recv::Empty => {
                    // A stream ended meanwhile (its key revoked, say) gives
                    // its status at once, however quiet its view.
                    let slot = &self.slot;
                    let woken = async move {
                        tokio::select! {
                            () = woken => {}
                            () = slot.cancelled() => {}
                        }
                    };
                    let Some(bound) = self.source.stale_after else {
                        woken.await;
                        continue;
                    };
                    // A quiet view is healthy; a stalled engine is not.
                    if tokio::time::timeout(bound, woken).await.is_err()
                        && let Some(status) = stale(&self.source.status, Some(bound))
                    {
                        self.done = true;
                        return Some(Err(status));
                    }
                }
                Recv::Lagged { missed } => match self.on_lag {
                    OnLag::Abort => {
                        let resume = self.slot.last_block().map_or_else(String::new, |b| {
                            format!("; last block sent {b}, resubscribe to continue after it")
                        });
                        self.abort(Status::aborted(format!(
                            "subscriber too slow: {missed} blocks of frames were dropped \
                             (the view's ring of market_ring_capacity blocks was lapped){resume}"
                        )));
                    }
                    OnLag::SkipToNewest => {
                        self.slot.count_lag_skip();
                        if let Err(status) = self.reopen().await {
                            self.done = true;
                            return Some(Err(status));
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

/// UNAVAILABLE when the newest folded block is older than `bound`.
pub fn stale(status: &EngineStatus, bound: Option<Duration>) -> Option<Status> {
    let bound = bound?;
    if !status.ready() {
        // Subscribing answers NotReady; nothing to judge yet.
        return None;
    }
    let age_ms = common::unix_now_ms().saturating_sub(status.block_time_ms());
    let bound_ms = i64::try_from(bound.as_millis()).unwrap_or(i64::MAX);
    (age_ms > bound_ms).then(|| {
        Status::unavailable(format!(
            "market data is stale: the newest block ({}) is {:.1} s old, over the {:.1} s bound \
             (market_stale_after_ms; 0 turns the check off)",
            status.height(),
            age_ms as f64 / 1000.0,
            bound.as_secs_f64()
        ))
    })
}

/// The status a refused subscription ends with.
pub fn status_of(error: SubscribeError) -> Status {
    match error {
        SubscribeError::NotReady | SubscribeError::Stopped => {
            Status::unavailable(error.to_string())
        }
        SubscribeError::Busy(_) => Status::resource_exhausted(error.to_string()),
        SubscribeError::UnknownCoin(coin) => {
            Status::invalid_argument(format!("coins: unknown coin {}", common::quoted(&coin)))
        }
        SubscribeError::View(error) => view_status(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_engine_is_resource_exhausted_and_a_stopped_one_unavailable() {
        let busy = status_of(SubscribeError::Busy(1));
        assert_eq!(busy.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            status_of(SubscribeError::Stopped).code(),
            tonic::Code::Unavailable
        );
    }
}

//! Supervision of server streams: every stream of both gRPC services is
//! watched where its transport takes messages, and a subscriber that cannot
//! keep up is ended instead of holding buffers, ring slots and its account's
//! stream slot for as long as its connection lives.
//!
//! - **Stalled transport.** A stream whose transport has had something to
//!   take for `send_timeout_ms` and took nothing (the HTTP/2 stream window
//!   or the socket is full because the client reads nothing) ends with
//!   DEADLINE_EXCEEDED.
//! - **Lag in time** (market streams). A stream whose oldest frame not yet
//!   taken by its transport is more than `market_max_lag_ms` behind the
//!   newest folded block — and has waited that long since the engine
//!   published it — is lagging: an incremental view ends with ABORTED; a
//!   snapshot view drops what is queued and re-opens on the newest state.
//!
//! What "not yet taken" means: the relay's queue of encoded messages, then
//! the frames waiting in the view's ring (market streams), or the records
//! the reader task has queued (raw feed). A message counts as taken when
//! the transport asks for it; what the client's own HTTP/2 receive window
//! then holds is the client's to read, and the server cannot see into it —
//! a client with a large window hides that much lag.
//!
//! When a stream is ended here, what it holds in the server is released at
//! once: the account's stream slot, its ring receiver (so a key nobody reads
//! is dropped once it has gone unread for a second) and, for the raw feed,
//! its reader task. The ending status is delivered when the transport next
//! asks for a message (a client that never reads again sees it when it
//! resumes, after what the transport had already buffered; HTTP/2 gives the
//! server no way to discard that). It is the status the end logged and
//! counted, whatever the stream's producer meets once it is ended (its ring
//! receiver let go of, the engine stopping, a quiet feed) and however much
//! the client's HTTP/2 window held: [`Watched`] takes it from the slot in the
//! same step that finishes the stream. What the server keeps for such a
//! stream until the client resets it or the connection closes is the HTTP/2
//! stream's send buffer.
//!
//! - **Keys no longer admitted.** When the keys file's reload changes the
//!   keys in force, when a rotated key's grace period ends, and when a key
//!   reaches its byte quota ([`Access::recheck_due`]), every stream is
//!   re-checked: one whose key was revoked (or removed) ends with
//!   UNAUTHENTICATED, one whose key was rotated and whose grace period
//!   ended with UNAUTHENTICATED saying so, one whose key's allow-list no
//!   longer admits its source address with PERMISSION_DENIED, and one
//!   whose key's byte quota is used up with RESOURCE_EXHAUSTED naming the
//!   quota and when it resets.
//! - **Byte quota.** The stream whose message reaches its key's byte quota
//!   delivers that message and then ends with RESOURCE_EXHAUSTED at once.
//!
//! Each end is counted (`l1gate_streams_ended_total{service, view,
//! reason}`) and logged once with the key id.
//!
//! A stream's [`Slot`] is shared by its body ([`Watched`]), its producer
//! (the market relay or the raw-feed reader task) and the sweeper task
//! ([`Supervisor::spawn`]), which looks at every slot a few times per bound.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use engine::hub::Receiver;
use engine::views::OnLag;
use engine::views::registry::Batch;
use futures_util::Stream;
use parking_lot::Mutex;
use tonic::Status;

use access::denial::Denial;
use access::{Access, StreamGuard};
use common::metrics::Metrics;

/// How streams are supervised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowSettings {
    /// A stream whose transport takes nothing for this long ends.
    pub send_timeout: Duration,
    /// A market stream this far behind the newest block is lagging (`None`:
    /// only a lapped ring counts).
    pub market_max_lag: Option<Duration>,
}

/// Why a stream was ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// The transport took nothing for `send_timeout_ms`.
    Stall,
    /// The stream fell too far behind (time, ring or bytes).
    Lag,
    /// Its key was revoked or removed from the keys file.
    Revoked,
    /// Its key's allow-list no longer admits the stream's source address.
    Forbidden,
    /// Its key was rotated and the grace period ended.
    Rotated,
    /// Its key's byte quota for the period is used up.
    Quota,
    /// The server is shutting down (or restarting).
    Shutdown,
}

impl EndReason {
    /// Why a stream whose key is no longer admitted ends.
    pub fn of_denial(denial: &Denial) -> Self {
        match denial {
            Denial::Forbidden { .. } => EndReason::Forbidden,
            Denial::RotatedKey { .. } => EndReason::Rotated,
            Denial::QuotaExhausted { .. } => EndReason::Quota,
            _ => EndReason::Revoked,
        }
    }

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            EndReason::Stall => "stall",
            EndReason::Lag => "lag",
            EndReason::Revoked => "revoked",
            EndReason::Forbidden => "forbidden",
            EndReason::Rotated => "rotated",
            EndReason::Quota => "quota",
            EndReason::Shutdown => "shutdown",
        }
    }
}

/// The time of the newest folded block, Unix ms, as the market engine
/// tells it (a market stream's lag is measured against it).
pub type NewestBlock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The supervisor: every live slot, and the counters of ended streams.
#[derive(Debug, Clone)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    settings: FlowSettings,
    metrics: Arc<Metrics>,
    slots: Mutex<Vec<Weak<Slot>>>,
    /// Set (under `slots`' lock) once every stream was ended for a shutdown:
    /// a stream opened after that, on a connection the server had not closed
    /// yet, is ended as it is watched.
    shutting_down: AtomicBool,
}

impl Supervisor {
    /// A supervisor whose slots nobody sweeps (ends come only from the
    /// streams' producers): for a service not wired to a server's sweeper.
    pub fn unswept() -> Self {
        Self {
            inner: Arc::new(Inner {
                settings: FlowSettings {
                    send_timeout: Duration::from_secs(10),
                    market_max_lag: None,
                },
                metrics: Arc::new(Metrics::default()),
                slots: Mutex::new(Vec::new()),
                shutting_down: AtomicBool::new(false),
            }),
        }
    }

    /// A supervisor counting into `metrics`, and its sweeper task (on the
    /// current runtime). With `access`, the sweeper also re-checks every
    /// stream's key, source and byte quota when the keys in force change or
    /// [`Access::recheck_due`] says so, and ends the streams they no longer
    /// admit.
    pub fn spawn(
        settings: FlowSettings,
        metrics: Arc<Metrics>,
        newest_block_ms: Option<NewestBlock>,
        access: Option<Access>,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let supervisor = Self {
            inner: Arc::new(Inner {
                settings,
                metrics,
                slots: Mutex::new(Vec::new()),
                shutting_down: AtomicBool::new(false),
            }),
        };
        let sweeper = supervisor.clone();
        let every = sweep_interval(settings);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut keys = access.as_ref().map(|a| a.auth().changes());
            loop {
                tick.tick().await;
                if let (Some(access), Some(keys)) = (&access, &mut keys) {
                    let changed = keys.has_changed().unwrap_or(false);
                    if changed {
                        keys.mark_unchanged();
                    }
                    // Asked every tick: it also notes that it looked.
                    let due = access.recheck_due();
                    if changed || due {
                        sweeper.recheck(access);
                    }
                }
                let newest_ms = newest_block_ms.as_ref().map(|newest| newest());
                sweeper.sweep(common::unix_now_ms(), newest_ms);
            }
        });
        (supervisor, task)
    }

    /// Every open supervised stream: (service, view, key id).
    pub fn open_streams(&self) -> Vec<(&'static str, &'static str, String)> {
        self.live()
            .iter()
            .filter(|slot| !slot.is_ended())
            .map(|slot| (slot.service, slot.view, slot.key_id.clone()))
            .collect()
    }

    /// The settings.
    pub fn settings(&self) -> FlowSettings {
        self.inner.settings
    }

    /// A slot for a new stream of `service` / `view`, holding `guard` (the
    /// account's stream slot) until the stream ends.
    ///
    /// While the server is shutting down a new stream is refused with the
    /// shutdown's UNAVAILABLE, before anything is sent: a client that
    /// reconnects in the moment between the stop and the listener closing
    /// sees a refused call to retry, not a stream that opens and ends.
    pub fn watch(
        &self,
        service: &'static str,
        view: &'static str,
        on_lag: Option<OnLag>,
        guard: Option<StreamGuard>,
    ) -> Result<Arc<Slot>, Status> {
        if self.inner.shutting_down.load(Ordering::Relaxed) {
            return Err(shutdown_status());
        }
        let slot = Arc::new(Slot {
            service,
            view,
            on_lag,
            key_id: guard
                .as_ref()
                .map_or_else(|| "-".to_owned(), |g| g.key_id().to_owned()),
            handed_ms: AtomicI64::new(common::unix_now_ms()),
            front_made_ms: AtomicI64::new(0),
            front_block_ms: AtomicI64::new(0),
            unsent: AtomicU64::new(0),
            unsent_since_ms: AtomicI64::new(0),
            handed_block: AtomicU64::new(0),
            handed_block_ms: AtomicI64::new(0),
            ended: AtomicBool::new(false),
            cancel: tokio::sync::Notify::new(),
            held: Mutex::new(Held {
                guard,
                receiver: None,
                skipped: None,
                status: None,
            }),
            supervisor: Arc::downgrade(&self.inner),
        });
        let shutting_down = {
            let mut slots = self.inner.slots.lock();
            slots.push(Arc::downgrade(&slot));
            self.inner.shutting_down.load(Ordering::Relaxed)
        };
        // A stop that began while the slot was made ends it at once.
        if shutting_down {
            slot.end(EndReason::Shutdown, shutdown_status());
        }
        Ok(slot)
    }

    /// One look at every slot (the sweeper's tick) at `now_ms`, with the
    /// newest folded block's time; drops the slots of streams that are
    /// gone.
    pub fn sweep(&self, now_ms: i64, newest_ms: Option<i64>) {
        let live = self.live();
        let settings = self.inner.settings;
        for slot in live {
            slot.inspect(now_ms, settings, newest_ms);
        }
    }

    /// Ends every stream whose key, source or quota `access` no longer
    /// admits: UNAUTHENTICATED for a revoked key or a rotated one past its
    /// grace period, PERMISSION_DENIED for a source off the key's
    /// allow-list, RESOURCE_EXHAUSTED for a used-up byte quota.
    pub fn recheck(&self, access: &Access) {
        for slot in self.live() {
            let verdict = slot.held.lock().guard.as_ref().map(|g| access.recheck(g));
            let Some(Err(denial)) = verdict else {
                continue;
            };
            let ended = |status: fn(String) -> Status| {
                status(format!("stream ended: {}", denial.message()))
            };
            let reason = EndReason::of_denial(&denial);
            let status = match reason {
                EndReason::Forbidden => ended(Status::permission_denied),
                EndReason::Rotated => ended(Status::unauthenticated),
                EndReason::Quota => ended(Status::resource_exhausted),
                _ => Status::unauthenticated(format!(
                    "stream ended: API key {} was revoked or removed from the keys file",
                    slot.key_id
                )),
            };
            slot.end(reason, status);
        }
    }

    /// Ends every open stream with UNAVAILABLE saying that the server is
    /// shutting down: a client reconnects and resumes (a raw-feed stream
    /// from its last cursor, a market stream from a fresh opening).
    /// Streams asked for from then on are refused ([`Supervisor::watch`]).
    pub fn end_all_for_shutdown(&self) {
        self.inner.shutting_down.store(true, Ordering::Relaxed);
        for slot in self.live() {
            slot.end(EndReason::Shutdown, shutdown_status());
        }
    }

    /// The slots of streams not dropped yet (forgetting the others).
    fn live(&self) -> Vec<Arc<Slot>> {
        let mut slots = self.inner.slots.lock();
        slots.retain(|slot| slot.strong_count() > 0);
        slots.iter().filter_map(Weak::upgrade).collect()
    }

    /// Open slots (streams not dropped yet), for tests and metrics.
    pub fn watched(&self) -> usize {
        self.inner
            .slots
            .lock()
            .iter()
            .filter(|slot| slot.strong_count() > 0)
            .count()
    }
}

/// What a stream ended by a shutdown answers: UNAVAILABLE, reconnect and resume.
fn shutdown_status() -> Status {
    Status::unavailable(
        "the server is shutting down (a restart, say): reconnect in a few seconds and resume",
    )
}

/// How often the sweeper looks: a few times per bound, within 10–250 ms.
fn sweep_interval(settings: FlowSettings) -> Duration {
    let bound = settings
        .market_max_lag
        .map_or(settings.send_timeout, |lag| lag.min(settings.send_timeout));
    (bound / 8).clamp(Duration::from_millis(10), Duration::from_millis(250))
}

/// What a stream holds that an end releases.
struct Held {
    guard: Option<StreamGuard>,
    /// The market relay's ring receiver.
    receiver: Option<Receiver<Batch>>,
    /// A snapshot view whose receiver the sweeper let go of for a lag: what
    /// was waiting then (when made, its block time), until the relay
    /// re-opens. Still waiting for the transport, so still timed for a
    /// stall.
    skipped: Option<(i64, i64)>,
    /// The status the stream ends with, once decided.
    status: Option<Status>,
}

/// One stream's shared state. See the module docs.
pub struct Slot {
    service: &'static str,
    view: &'static str,
    /// How a market view takes a lag (`None`: the raw feed).
    on_lag: Option<OnLag>,
    key_id: String,
    /// When the transport last took a message (Unix ms).
    handed_ms: AtomicI64,
    /// The market relay's oldest queued message: when its frames were
    /// published and their block time (Unix ms; 0 = the queue is empty).
    front_made_ms: AtomicI64,
    front_block_ms: AtomicI64,
    /// Raw feed: records queued for the transport, and since when the
    /// queue has not been empty (Unix ms).
    unsent: AtomicU64,
    unsent_since_ms: AtomicI64,
    /// Block number and block time (Unix ms) of the last message taken.
    handed_block: AtomicU64,
    handed_block_ms: AtomicI64,
    ended: AtomicBool,
    /// Woken when the stream is ended (a producer task stops).
    cancel: tokio::sync::Notify,
    held: Mutex<Held>,
    supervisor: Weak<Inner>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("service", &self.service)
            .field("view", &self.view)
            .field("ended", &self.ended.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Slot {
    /// Whether the stream was ended (by the sweeper or its producer).
    pub fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Completes when the stream is ended.
    pub async fn cancelled(&self) {
        let woken = self.cancel.notified();
        if self.is_ended() {
            return;
        }
        woken.await;
    }

    /// The last block the transport took, if any.
    pub fn last_block(&self) -> Option<u64> {
        match self.handed_block.load(Ordering::Acquire) {
            0 => None,
            block => Some(block),
        }
    }

    /// Notes the block of the message about to be handed to the transport.
    pub fn note_block(&self, block: u64, block_time_ms: i64) {
        self.handed_block.store(block, Ordering::Release);
        self.handed_block_ms.store(block_time_ms, Ordering::Release);
    }

    /// The market relay's queue front changed: when its oldest message's
    /// frames were published and their block time (`None`: empty).
    pub fn set_front(&self, front: Option<(i64, i64)>) {
        let (made, block) = front.unwrap_or((0, 0));
        self.front_block_ms.store(block, Ordering::Release);
        self.front_made_ms.store(made, Ordering::Release);
    }

    /// The transport asked for another message of a stream that hands its
    /// messages over only when asked (the Transaction Stream relay): the
    /// one handed before counts as taken. See [`Pulled`].
    pub fn asked_again(&self) {
        let _ = self
            .unsent
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// The raw feed's reader task queued one record for the transport.
    pub fn queued_record(&self) {
        if self.unsent.fetch_add(1, Ordering::AcqRel) == 0 {
            self.unsent_since_ms
                .store(common::unix_now_ms(), Ordering::Release);
        }
    }

    /// Runs `f` on the ring receiver, if the stream holds one.
    pub fn with_receiver<R>(&self, f: impl FnOnce(&mut Receiver<Batch>) -> R) -> Option<R> {
        self.held.lock().receiver.as_mut().map(f)
    }

    /// Hands the stream a (new) ring receiver; refused once it is ended.
    pub fn set_receiver(&self, receiver: Option<Receiver<Batch>>) {
        let mut held = self.held.lock();
        if !self.is_ended() {
            held.receiver = receiver;
            held.skipped = None;
        }
    }

    /// Counts a lagging snapshot view re-opened on the newest state.
    pub fn count_lag_skip(&self) {
        if let Some(supervisor) = self.supervisor.upgrade() {
            supervisor.metrics.lag_skip(self.view);
        }
    }

    /// Counts `bytes` sent on the stream (block time when known) under the
    /// account's usage; the refusal to end with once the key's byte quota
    /// is used up.
    fn sent(&self, bytes: usize, block_time_ms: Option<i64>) -> Option<Denial> {
        self.held
            .lock()
            .guard
            .as_ref()
            .and_then(|guard| guard.sent_within_quota(bytes, block_time_ms).err())
    }

    /// Ends the stream with `status` for `reason`: releases what it holds,
    /// stops its producer, counts and logs it. Only the first end counts.
    pub fn end(&self, reason: EndReason, status: Status) {
        let message = status.message().to_owned();
        let (guard, receiver) = {
            let mut held = self.held.lock();
            if self.ended.swap(true, Ordering::AcqRel) {
                return;
            }
            held.status = Some(status);
            (held.guard.take(), held.receiver.take())
        };
        drop(receiver);
        drop(guard);
        self.cancel.notify_waiters();
        if let Some(supervisor) = self.supervisor.upgrade() {
            supervisor
                .metrics
                .stream_ended(self.service, self.view, reason.label());
        }
        match reason {
            EndReason::Stall | EndReason::Lag => tracing::warn!(
                key_id = %self.key_id,
                service = self.service,
                view = self.view,
                reason = reason.label(),
                %message,
                "stream ended: subscriber too slow"
            ),
            EndReason::Revoked | EndReason::Forbidden | EndReason::Rotated => tracing::info!(
                key_id = %self.key_id,
                service = self.service,
                view = self.view,
                reason = reason.label(),
                "stream ended: its key is no longer admitted"
            ),
            EndReason::Quota => tracing::info!(
                key_id = %self.key_id,
                service = self.service,
                view = self.view,
                reason = reason.label(),
                "stream ended: its key's byte quota is used up"
            ),
            EndReason::Shutdown => tracing::debug!(
                key_id = %self.key_id,
                service = self.service,
                view = self.view,
                "stream ended: the server is shutting down"
            ),
        }
    }

    /// The transport took a message that carries `measured`: counts its
    /// bytes under the account's usage and notes its block and when. Edges
    /// whose bodies are not [`Watched`] call it themselves.
    ///
    /// The message that uses up the key's byte quota is the stream's last:
    /// the stream is ended with RESOURCE_EXHAUSTED naming the quota.
    pub fn took(&self, measured: Measured) {
        let exhausted = self.sent(measured.bytes, measured.block_time_ms);
        if let (Some(block), Some(time)) = (measured.block, measured.block_time_ms) {
            self.note_block(block, time);
        }
        self.handed_ms
            .store(common::unix_now_ms(), Ordering::Release);
        if let Some(denial) = exhausted {
            self.end(
                EndReason::Quota,
                Status::resource_exhausted(format!("stream ended: {}", denial.message())),
            );
        }
    }

    /// The status the stream was ended with, once (later calls: `None`).
    pub fn take_status(&self) -> Option<Status> {
        self.held.lock().status.take()
    }

    /// Ends the stream quietly because it finished (its producer is done or
    /// the client went away): releases what it holds.
    pub fn finish(&self) {
        let (guard, receiver) = {
            let mut held = self.held.lock();
            self.ended.store(true, Ordering::Release);
            (held.guard.take(), held.receiver.take())
        };
        drop(receiver);
        drop(guard);
        self.cancel.notify_waiters();
    }

    /// Finishes the stream as [`Slot::finish`] does and says what it ends
    /// with: the status it was ended with ([`Slot::end`], the one logged
    /// and counted) if it was, else `status`, its producer's own end. One
    /// step with `end`: a stream ended at the same moment ends with the
    /// status logged, or is neither ended there nor logged.
    pub fn finish_with(&self, status: Option<Status>) -> Option<Status> {
        let (recorded, guard, receiver) = {
            let mut held = self.held.lock();
            self.ended.store(true, Ordering::Release);
            (held.status.take(), held.guard.take(), held.receiver.take())
        };
        drop(receiver);
        drop(guard);
        self.cancel.notify_waiters();
        recorded.or(status)
    }

    /// The oldest thing waiting for the transport: when it was made and
    /// its block time (0 when unknown), or `None` when nothing waits.
    fn oldest_unsent(&self, now_ms: i64) -> Option<(i64, i64)> {
        let made = self.front_made_ms.load(Ordering::Acquire);
        if made != 0 {
            return Some((made, self.front_block_ms.load(Ordering::Acquire)));
        }
        if self.unsent.load(Ordering::Acquire) > 0 {
            return Some((self.unsent_since_ms.load(Ordering::Acquire), 0));
        }
        let mut held = self.held.lock();
        match &mut held.receiver {
            Some(receiver) => receiver
                .peek()
                .map(|batch| (batch.made_ms().unwrap_or(now_ms), batch.position().time)),
            None => held.skipped,
        }
    }

    /// The sweeper's look at this stream.
    fn inspect(&self, now_ms: i64, settings: FlowSettings, newest_ms: Option<i64>) {
        if self.is_ended() {
            return;
        }
        let Some((made_ms, block_ms)) = self.oldest_unsent(now_ms) else {
            // Nothing waits for the transport: neither stuck nor behind.
            return;
        };
        // Stuck since the later of: when it had something to take, when it
        // last took something.
        let handed = self.handed_ms.load(Ordering::Acquire);
        let stuck = now_ms.saturating_sub(made_ms.max(handed));
        let timeout = millis(settings.send_timeout);
        if stuck >= timeout {
            self.end(
                EndReason::Stall,
                Status::deadline_exceeded(format!(
                    "subscriber too slow: the connection took nothing for {timeout} ms \
                     (send_timeout_ms){}; resubscribe and consume faster",
                    self.resume()
                )),
            );
            return;
        }
        let (Some(on_lag), Some(bound), Some(newest_ms)) =
            (self.on_lag, settings.market_max_lag, newest_ms)
        else {
            return;
        };
        let bound = millis(bound);
        let behind = newest_ms.saturating_sub(block_ms);
        let waited = now_ms.saturating_sub(made_ms);
        if behind <= bound || waited <= bound {
            return;
        }
        match on_lag {
            OnLag::Abort => self.end(EndReason::Lag, lag_status(behind, bound, self.last_block())),
            // Once: the relay re-opens on the newest state when asked next.
            // Until then the stream still has something to send: a transport
            // that goes on taking nothing ends it with a stall.
            OnLag::SkipToNewest => {
                let skipped = {
                    let mut held = self.held.lock();
                    let had = held.receiver.take().is_some();
                    if had {
                        held.skipped = Some((made_ms, block_ms));
                    }
                    had
                };
                if skipped {
                    self.count_lag_skip();
                }
            }
        }
    }

    /// Where the subscriber goes on from: the last block its connection
    /// took, and for the raw feed (whose requests take a position) the
    /// position to reconnect from.
    fn resume(&self) -> String {
        match (self.last_block(), self.on_lag) {
            (None, Some(_)) => String::new(),
            (Some(block), Some(_)) => format!("; last block sent {block}"),
            (last_block, None) => resume_from(last_block),
        }
    }
}

/// What a raw-feed stream ended early says about where to go on from: the
/// last block its connection took and the position to reconnect from.
pub fn resume_from(last_block: Option<u64>) -> String {
    last_block.map_or_else(
        || "; no record was sent".to_owned(),
        |block| {
            format!(
                "; last block sent {block}, reconnect from block_number {}",
                block + 1
            )
        },
    )
}

/// Milliseconds of `duration`, saturating.
fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// The status of a market stream ended for lagging `behind` ms.
pub fn lag_status(behind: i64, bound: i64, last_block: Option<u64>) -> Status {
    let resume = last_block.map_or_else(String::new, |block| {
        format!("; last block sent {block}, resubscribe to continue after it")
    });
    Status::aborted(format!(
        "subscriber too slow: {:.1} s behind the newest block, over the {:.1} s bound \
         (market_max_lag_ms){resume}",
        behind as f64 / 1000.0,
        bound as f64 / 1000.0,
    ))
}

/// What one message carries, for the account's usage and the slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Measured {
    /// Payload bytes.
    pub bytes: usize,
    /// Its block number, when the message says.
    pub block: Option<u64>,
    /// Its block time (Unix ms), when the message says.
    pub block_time_ms: Option<i64>,
}

/// A response body under supervision: notes when the transport takes a
/// message or waits for one, counts what is sent, and ends with the slot's
/// status once the stream was ended.
pub struct Watched<S, T> {
    inner: S,
    slot: Arc<Slot>,
    measure: fn(&T) -> Measured,
    done: bool,
}

impl<S, T> Watched<S, T> {
    /// Watches `inner` through `slot`; `measure` says what each message
    /// carries.
    pub fn new(inner: S, slot: Arc<Slot>, measure: fn(&T) -> Measured) -> Self {
        Self {
            inner,
            slot,
            measure,
            done: false,
        }
    }
}

impl<S, T> Stream for Watched<S, T>
where
    S: Stream<Item = Result<T, Status>> + Unpin,
{
    type Item = Result<T, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        if this.slot.is_ended() {
            this.done = true;
            return Poll::Ready(this.slot.finish_with(None).map(Err));
        }
        match Pin::new(&mut this.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(message))) => {
                this.slot.took((this.measure)(&message));
                // A raw-feed record leaves the reader task's queue.
                let _ = this
                    .slot
                    .unsent
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
                Poll::Ready(Some(Ok(message)))
            }
            // The producer stopped, on its own or because the stream was
            // ended while it was being polled (its ring receiver let go of,
            // say): a stream that was ended ends with the status logged.
            Poll::Ready(Some(Err(status))) => {
                this.done = true;
                Poll::Ready(this.slot.finish_with(Some(status)).map(Err))
            }
            Poll::Ready(None) => {
                this.done = true;
                Poll::Ready(this.slot.finish_with(None).map(Err))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S, T> Drop for Watched<S, T> {
    fn drop(&mut self) {
        // The client went away (or the stream ended): free the slot now.
        self.slot.finish();
    }
}

/// A stream whose producer is pulled only when the transport asks (the
/// Transaction Stream relay reads its upstream that way), made visible to
/// the stall check: from the moment a message is handed over until the
/// transport asks for the next, the stream counts as having something the
/// transport has not taken. A transport that asks for nothing for
/// `send_timeout_ms` (the client's HTTP/2 window is full because it reads
/// nothing) ends the stream with DEADLINE_EXCEEDED, as the raw feed's and
/// market streams' are; a stream waiting on a quiet upstream is being
/// asked, so it is not stalled. Wrap a [`Watched`] in it.
pub struct Pulled<S> {
    inner: S,
    slot: Arc<Slot>,
    handed: bool,
}

impl<S> Pulled<S> {
    /// `inner` (a [`Watched`] of `slot`) under the stall check.
    pub fn new(inner: S, slot: Arc<Slot>) -> Self {
        Self {
            inner,
            slot,
            handed: false,
        }
    }
}

impl<S, T> Stream for Pulled<S>
where
    S: Stream<Item = Result<T, Status>> + Unpin,
{
    type Item = Result<T, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.handed {
            this.handed = false;
            this.slot.asked_again();
        }
        let next = Pin::new(&mut this.inner).poll_next(cx);
        if let Poll::Ready(Some(Ok(_))) = &next {
            this.slot.queued_record();
            this.handed = true;
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_asked_for_after_the_shutdown_began_is_refused_before_it_opens() {
        let flow = Supervisor::unswept();
        let before = flow.watch("market", "bbo", None, None).unwrap();
        assert!(!before.is_ended());
        flow.end_all_for_shutdown();
        assert!(before.is_ended());
        let status = before.finish_with(None).expect("the shutdown's status");
        assert_eq!(status.code(), tonic::Code::Unavailable);
        // A call that reached the server before its listener closed: refused
        // with the same status, nothing opened.
        let status = flow
            .watch("market", "bbo", None, None)
            .expect_err("a stream opened during the shutdown");
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert!(status.message().contains("shutting down"), "{status:?}");
        assert_eq!(flow.watched(), 1, "a refused stream holds no slot");
    }
}

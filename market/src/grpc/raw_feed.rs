//! The raw feed gRPC service `venue_l1_gateway.v3.VenueL1Gateway`: node
//! files served record by record, byte-exact, from a start position or the
//! live tail, with server-side filters.
//!
//! Rules (from the interface contract):
//! - a set position is the inclusive start; unset = the live tail; an
//!   explicitly set zero (or negative) value is INVALID_ARGUMENT;
//! - a filter on a field the feed does not advertise is INVALID_ARGUMENT
//!   naming the field; streams skip records with no matching event, unary
//!   gets select first and filter after (events may be empty);
//! - a stream with no new record in its feed for the idle timeout ends with
//!   UNAVAILABLE (order-book snapshots excepted);
//! - a stream with a start position holds one of the configured replay
//!   permits until it has caught up with the tail; none free =
//!   RESOURCE_EXHAUSTED (filtered and unfiltered share them);
//! - a live subscriber that falls more than `max_lag_bytes` behind, or takes
//!   nothing for `send_timeout`, ends with DEADLINE_EXCEEDED naming the last
//!   block it was sent, so it can resume from there.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use feeds::{Cursor, Feed, FeedError, Source, Start};
use futures_util::{Stream, StreamExt as _};
use parking_lot::Mutex;
use proto::venue_l1_gateway_server::VenueL1Gateway;
use proto::{
    FeedInfo, GetRequest, ListFeedsRequest, ListFeedsResponse, Position, PositionKind, Record,
    StreamRequest, position,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::{Instant, timeout_at};
use tonic::{Request, Response, Status};

use access::Access;
use edge::admission::GrpcAccess as _;
use edge::flow::{self, EndReason, Measured, Slot, Supervisor, Watched};
use edge::live::LiveFeeds;

/// Limits of the raw feed service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RawFeedSettings {
    /// No new record for this long ends a stream with UNAVAILABLE.
    pub idle_timeout: Duration,
    /// Concurrent historical replays.
    pub max_replays: usize,
    /// Live lag that ends a stream with DEADLINE_EXCEEDED.
    pub max_lag_bytes: u64,
    /// A subscriber that takes nothing for this long is cut off.
    pub send_timeout: Duration,
    /// Backup poll interval of the node files (change notifications wake
    /// readers at once).
    pub poll_interval: Duration,
}

impl Default for RawFeedSettings {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(30),
            max_replays: 16,
            max_lag_bytes: 256 << 20,
            send_timeout: Duration::from_secs(10),
            poll_interval: Duration::from_secs(1),
        }
    }
}

/// Records per read from a feed before yielding to the runtime.
const READ_BATCH: usize = 256;
/// Records buffered per subscriber between the reader task and the client.
const SUBSCRIBER_BUFFER: usize = 128;

/// A stream of records as tonic wants it.
pub type RecordStream = Pin<Box<dyn Stream<Item = Result<Record, Status>> + Send + 'static>>;

/// The `VenueL1Gateway` implementation.
#[derive(Clone)]
pub struct RawFeedService {
    live: Arc<LiveFeeds>,
    settings: RawFeedSettings,
    replays: Arc<Semaphore>,
    access: Option<Access>,
    flow: Supervisor,
}

impl RawFeedService {
    /// A service over the given feeds.
    pub fn new(live: Arc<LiveFeeds>, settings: RawFeedSettings) -> Self {
        Self {
            live,
            replays: Arc::new(Semaphore::new(settings.max_replays)),
            settings,
            access: None,
            flow: Supervisor::unswept(),
        }
    }

    /// Supervises every stream through `flow` (a subscriber that stops
    /// taking records is ended; see [`edge::flow`]).
    #[must_use]
    pub fn with_flow(mut self, flow: Supervisor) -> Self {
        self.flow = flow;
        self
    }

    /// Applies the callers' rate limits and usage accounting: unary calls
    /// take a unit of the account's request rate, streams hold one of its
    /// stream slots until the response stream is dropped. Requests must
    /// have passed [`GrpcAccess::intercept`](edge::admission::GrpcAccess::intercept).
    #[must_use]
    pub fn with_access(mut self, access: Access) -> Self {
        self.access = Some(access);
        self
    }

    fn admit_unary<T>(&self, request: &Request<T>) -> Result<(), Status> {
        self.access
            .as_ref()
            .map_or(Ok(()), |access| access.grpc_unary(request))
    }

    fn admit_stream(
        &self,
        source: Source,
        request: &Request<StreamRequest>,
    ) -> Result<Response<RecordStream>, Status> {
        let guard = match &self.access {
            Some(access) => Some(access.grpc_stream(request)?.for_feed(source.feed_id())),
            None => None,
        };
        let slot = self.flow.watch("raw_feed", source.feed_id(), None, guard)?;
        let records = self.stream(source, request.get_ref(), &slot)?;
        Ok(Response::new(Box::pin(Watched::new(
            records,
            slot,
            |record: &Record| Measured {
                bytes: record.data.len(),
                block: record.block_number.and_then(|n| u64::try_from(n).ok()),
                block_time_ms: record.timestamp,
            },
        ))))
    }

    fn feed(&self, source: Source) -> Result<Feed, Status> {
        self.live
            .feed(source)
            .ok_or_else(|| Status::internal(format!("{}: not a line feed", source.feed_id())))
    }

    /// The records of a stream request, read by a task that stops when
    /// `slot` is ended.
    fn stream(
        &self,
        source: Source,
        request: &StreamRequest,
        slot: &Arc<Slot>,
    ) -> Result<RecordStream, Status> {
        let start = parse_position(source, request.position.as_ref())?;
        let filter = compile_filter(source, request.filter.as_ref())?;
        if source == Source::OrderbookSnapshots {
            return Ok(self.snapshot_stream(start, Arc::clone(slot)));
        }
        let permit = match start {
            Some(_) => Some(self.replays.clone().try_acquire_owned().map_err(|_| {
                Status::resource_exhausted(format!(
                    "replay capacity in use ({} concurrent historical replays); retry with backoff",
                    self.settings.max_replays
                ))
            })?),
            None => None,
        };
        let feed = self.feed(source)?;
        let cursor = feed
            .seek(start.unwrap_or(Start::Tail))
            .map_err(|e| feed_status(source, &e))?;
        let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
        let closing = Arc::new(Mutex::new(None));
        // By-block files and replica blocks hold one line per block: an
        // equal block number is a duplicate there, not in streaming files.
        let one_line_per_block = source == Source::Blocks
            || feed
                .source_dir_name()
                .is_some_and(|dir| dir.ends_with("_by_block"));
        let pump = Pump {
            source,
            order: Order {
                last_block: None,
                one_line_per_block,
                metrics: self.access.as_ref().map(|a| Arc::clone(a.metrics())),
            },
            feed,
            live: self.live.clone(),
            cursor,
            filter,
            permit,
            settings: self.settings,
            tx,
            closing: closing.clone(),
            slot: Arc::clone(slot),
        };
        tokio::spawn(pump.run());
        Ok(with_closing_status(rx, closing))
    }

    fn snapshot_stream(&self, start: Option<Start>, watch: Arc<Slot>) -> RecordStream {
        let (tx, rx) = mpsc::channel(4);
        let closing = Arc::new(Mutex::new(None));
        let live = self.live.clone();
        let send_timeout = self.settings.send_timeout;
        let slot = closing.clone();
        tokio::spawn(async move {
            let mut changes = live.subscribe(Source::OrderbookSnapshots);
            let mut last_height: Option<u64> = None;
            let from_ms = match start {
                Some(Start::Timestamp(ms)) => Some(ms),
                _ => None,
            };
            loop {
                let pending = {
                    let snapshots = live.snapshots();
                    let files = snapshots.list();
                    match (last_height, from_ms) {
                        (Some(height), _) => {
                            files.into_iter().filter(|f| f.height > height).collect()
                        }
                        (None, Some(ms)) => {
                            files.into_iter().filter(|f| f.timestamp_ms >= ms).collect()
                        }
                        (None, None) => files.into_iter().last().into_iter().collect::<Vec<_>>(),
                    }
                };
                for file in pending {
                    let data = match live.snapshots().read(&file) {
                        Ok(data) => data,
                        Err(error) => {
                            *slot.lock() =
                                Some(Status::internal(format!("orderbook_snapshots: {error}")));
                            return;
                        }
                    };
                    last_height = Some(file.height);
                    let record = Record {
                        block_number: i64::try_from(file.height).ok(),
                        timestamp: Some(file.timestamp_ms),
                        data,
                    };
                    watch.queued_record();
                    let sent = tokio::select! {
                        sent = tx.send_timeout(Ok(record), send_timeout) => sent,
                        () = watch.cancelled() => return,
                    };
                    match sent {
                        Ok(()) => {}
                        Err(mpsc::error::SendTimeoutError::Timeout(_)) => {
                            watch.end(
                                EndReason::Stall,
                                too_slow(Source::OrderbookSnapshots, watch.last_block()),
                            );
                            return;
                        }
                        Err(mpsc::error::SendTimeoutError::Closed(_)) => return,
                    }
                }
                if last_height.is_none() && from_ms.is_none() {
                    // No snapshot yet: the first one written is the latest.
                    last_height = Some(0);
                }
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { return },
                    () = tx.closed() => return,
                    () = watch.cancelled() => return,
                }
            }
        });
        with_closing_status(rx, closing)
    }

    async fn get(
        &self,
        source: Source,
        request: &GetRequest,
        deadline: Option<Duration>,
    ) -> Result<Response<Record>, Status> {
        let start = parse_position(source, request.position.as_ref())?;
        let filter = compile_filter(source, request.filter.as_ref())?;
        let wait = deadline.map_or(self.settings.idle_timeout, |d| {
            d.min(self.settings.idle_timeout)
        });
        let until = Instant::now() + wait;
        if source == Source::OrderbookSnapshots {
            return self.get_snapshot(start, until).await.map(Response::new);
        }
        let feed = self.feed(source)?;
        let mut changes = self.live.subscribe(source);
        let mut cursor = feed
            .seek(start.unwrap_or(Start::Tail))
            .map_err(|e| feed_status(source, &e))?;
        loop {
            let mut batch = feed
                .read(&mut cursor, 1)
                .map_err(|e| feed_status(source, &e))?;
            if let Some(record) = batch.pop() {
                let data = match &filter {
                    Some(filter) => {
                        filter
                            .apply_bytes(&record.data)
                            .map_err(|e| Status::internal(format!("{}: {e}", source.feed_id())))?
                            .line
                    }
                    None => record.data,
                };
                return Ok(Response::new(Record {
                    block_number: record.block_number.and_then(|n| i64::try_from(n).ok()),
                    timestamp: record.timestamp_ms,
                    data,
                }));
            }
            if timeout_at(until, changes.changed()).await.is_err() {
                return Err(Status::unavailable(format!(
                    "{}: no record at or after the position within {} ms",
                    source.feed_id(),
                    wait.as_millis()
                )));
            }
        }
    }

    async fn get_snapshot(&self, start: Option<Start>, until: Instant) -> Result<Record, Status> {
        let mut changes = self.live.subscribe(Source::OrderbookSnapshots);
        loop {
            let found = {
                let snapshots = self.live.snapshots();
                match start {
                    Some(Start::Timestamp(ms)) => snapshots.first_at_or_after(ms),
                    _ => snapshots.latest(),
                }
            };
            if let Some(file) = found {
                let data = self
                    .live
                    .snapshots()
                    .read(&file)
                    .map_err(|e| Status::internal(format!("orderbook_snapshots: {e}")))?;
                return Ok(Record {
                    block_number: i64::try_from(file.height).ok(),
                    timestamp: Some(file.timestamp_ms),
                    data,
                });
            }
            if timeout_at(until, changes.changed()).await.is_err() {
                return Err(Status::unavailable(
                    "orderbook_snapshots: no snapshot at or after the position was written before the timeout",
                ));
            }
        }
    }
}

/// What a raw-feed stream sends of the lines it reads: only records with a
/// block number, never one at or before the last block sent (at, for
/// one-line-per-block files); skips and gaps are counted and logged at most
/// every 10 s per feed.
struct Order {
    last_block: Option<u64>,
    one_line_per_block: bool,
    metrics: Option<Arc<common::metrics::Metrics>>,
}

impl Order {
    /// Whether to send a record of `block` (`None`: the line did not
    /// decode).
    fn admits(&mut self, source: Source, block: Option<u64>) -> bool {
        let verdict = match (block, self.last_block) {
            (None, _) => Err("undecodable"),
            (Some(n), Some(last)) if n < last => Err("backwards"),
            (Some(n), Some(last)) if n == last && self.one_line_per_block => Err("duplicate"),
            (Some(n), Some(last)) if self.one_line_per_block && n > last + 1 => Ok(Some("gap")),
            _ => Ok(None),
        };
        let (admitted, anomaly) = match verdict {
            Ok(anomaly) => (true, anomaly),
            Err(reason) => (false, Some(reason)),
        };
        if let Some(reason) = anomaly {
            if let Some(metrics) = &self.metrics {
                metrics.raw_feed_skip(source.feed_id(), reason);
            }
            let what = format!("raw feed {} {reason}", source.feed_id());
            if common::metrics::warn_allowed(&what, Duration::from_secs(10)) {
                tracing::warn!(
                    feed = source.feed_id(),
                    reason,
                    block = ?block,
                    last_block = ?self.last_block,
                    "raw feed: node line out of order or undecodable (skipped unless a gap); \
                     further ones are counted in l1gate_raw_feed_anomalies_total"
                );
            }
        }
        if admitted {
            self.last_block = block;
        }
        admitted
    }
}

/// Moves records from a feed to one subscriber.
struct Pump {
    source: Source,
    order: Order,
    feed: Feed,
    live: Arc<LiveFeeds>,
    cursor: Cursor,
    filter: Option<feeds::EventFilter>,
    permit: Option<OwnedSemaphorePermit>,
    settings: RawFeedSettings,
    tx: mpsc::Sender<Result<Record, Status>>,
    closing: Arc<Mutex<Option<Status>>>,
    /// The stream's supervision: ended by the sweeper when its transport
    /// stalls; this task ends it when it falls behind.
    slot: Arc<Slot>,
}

impl Pump {
    async fn run(mut self) {
        let slot = Arc::clone(&self.slot);
        let result = tokio::select! {
            result = self.pump() => result,
            () = slot.cancelled() => Ok(()),
        };
        match result {
            Ok(()) => {}
            Err(Ended::TooSlow(reason, status)) => slot.end(reason, status),
            Err(Ended::Failed(status)) => *self.closing.lock() = Some(status),
        }
    }

    async fn pump(&mut self) -> Result<(), Ended> {
        let mut changes = self.live.subscribe(self.source);
        let mut last_activity = Instant::now();
        let shrinks = self.feed.shrinks();
        let replacements = self.feed.replacements();
        loop {
            // A file of this feed was rewritten under the stream: what it
            // would read next is not what the node wrote after what it sent.
            if self.feed.shrinks() != shrinks {
                return Err(Ended::Failed(Status::data_loss(format!(
                    "{}: a node file shrank under the stream (rewritten or truncated; the \
                     node only appends){}",
                    self.source.feed_id(),
                    flow::resume_from(self.order.last_block)
                ))));
            }
            // A file of this feed was replaced under its name (renamed over,
            // rotated): the stream's place in the old file says nothing of
            // the new one; a resumed stream positions by block.
            if self.feed.replacements() != replacements {
                return Err(Ended::Failed(Status::data_loss(format!(
                    "{}: a node file was replaced under the stream (another file under the \
                     same name){}",
                    self.source.feed_id(),
                    flow::resume_from(self.order.last_block)
                ))));
            }
            let batch = match self.feed.read(&mut self.cursor, READ_BATCH) {
                Ok(batch) => batch,
                // A damaged compressed file: what the stream sent before the
                // damage stands; a resumed stream goes on after it.
                Err(damage @ FeedError::Damaged { .. }) => {
                    return Err(Ended::Failed(Status::data_loss(format!(
                        "{}: {damage}{}",
                        self.source.feed_id(),
                        flow::resume_from(self.order.last_block)
                    ))));
                }
                Err(error) => return Err(Ended::Failed(feed_status(self.source, &error))),
            };
            if batch.is_empty() {
                // Caught up with the tail: this is a live subscriber now.
                self.permit = None;
                tokio::select! {
                    changed = timeout_at(last_activity + self.settings.idle_timeout, changes.changed()) => match changed {
                        Ok(Ok(())) => continue,
                        Ok(Err(_)) => return Ok(()),
                        Err(_) => return Err(Ended::Failed(Status::unavailable(format!(
                            "{}: no new records for {} ms",
                            self.source.feed_id(),
                            self.settings.idle_timeout.as_millis()
                        )))),
                    },
                    () = self.tx.closed() => return Ok(()),
                }
            }
            last_activity = Instant::now();
            if self.permit.is_none() && self.feed.lag(&self.cursor) > self.settings.max_lag_bytes {
                return Err(Ended::TooSlow(
                    EndReason::Lag,
                    too_slow(self.source, self.slot.last_block()),
                ));
            }
            for record in batch {
                // Filtering is CPU work between sends: give the runtime a
                // chance to run the task writing to the network, so matches
                // reach the client as they are found rather than in bursts.
                tokio::task::coop::consume_budget().await;
                if !self.order.admits(self.source, record.block_number) {
                    continue;
                }
                let data = match &self.filter {
                    None => record.data,
                    Some(filter) => {
                        let filtered = filter.apply_bytes(&record.data).map_err(|e| {
                            Status::internal(format!("{}: {e}", self.source.feed_id()))
                        })?;
                        if filtered.matched == 0 {
                            continue;
                        }
                        filtered.line
                    }
                };
                let out = Record {
                    block_number: record.block_number.and_then(|n| i64::try_from(n).ok()),
                    timestamp: record.timestamp_ms,
                    data,
                };
                // Counted before it can be taken, so a take never comes
                // first.
                self.slot.queued_record();
                match self
                    .tx
                    .send_timeout(Ok(out), self.settings.send_timeout)
                    .await
                {
                    Ok(()) => {}
                    Err(mpsc::error::SendTimeoutError::Timeout(_)) => {
                        return Err(Ended::TooSlow(
                            EndReason::Stall,
                            too_slow(self.source, self.slot.last_block()),
                        ));
                    }
                    Err(mpsc::error::SendTimeoutError::Closed(_)) => return Ok(()),
                }
            }
        }
    }
}

/// Why a reader task stopped early.
enum Ended {
    /// The subscriber fell behind or stopped taking records.
    TooSlow(EndReason, Status),
    /// The files could not be read, or the feed went quiet.
    Failed(Status),
}

impl From<Status> for Ended {
    fn from(status: Status) -> Self {
        Ended::Failed(status)
    }
}

fn too_slow(source: Source, last_block: Option<u64>) -> Status {
    Status::deadline_exceeded(format!(
        "{}: subscriber too slow, fell behind the live tail{}",
        source.feed_id(),
        flow::resume_from(last_block)
    ))
}

/// Turns the receiver into a stream that, once the sender is gone, yields the
/// closing status left in `closing` (if any).
fn with_closing_status(
    rx: mpsc::Receiver<Result<Record, Status>>,
    closing: Arc<Mutex<Option<Status>>>,
) -> RecordStream {
    let records = tokio_stream::wrappers::ReceiverStream::new(rx);
    let tail = futures_util::stream::once(async move { closing.lock().take() })
        .filter_map(|status| async move { status.map(Err) });
    Box::pin(records.chain(tail))
}

/// Validates a request position for a feed.
///
/// # Errors
/// INVALID_ARGUMENT for a zero or negative value, or a kind the feed does
/// not support.
pub fn parse_position(
    source: Source,
    position: Option<&Position>,
) -> Result<Option<Start>, Status> {
    let Some(kind) = position.and_then(|p| p.kind.as_ref()) else {
        return Ok(None);
    };
    match *kind {
        position::Kind::Timestamp(ms) if ms <= 0 => Err(Status::invalid_argument(format!(
            "position.timestamp must be a positive Unix millisecond time, got {ms}"
        ))),
        position::Kind::BlockNumber(n) if n <= 0 => Err(Status::invalid_argument(format!(
            "position.block_number must be positive, got {n}"
        ))),
        position::Kind::BlockNumber(_) if source == Source::OrderbookSnapshots => {
            Err(Status::invalid_argument(
                "position.block_number: orderbook_snapshots supports timestamp positioning only",
            ))
        }
        position::Kind::Timestamp(ms) => Ok(Some(Start::Timestamp(ms))),
        position::Kind::BlockNumber(n) => Ok(Some(Start::BlockNumber(n.unsigned_abs()))),
    }
}

/// Most fields one filter may constrain (a feed advertises two).
const MAX_FILTER_FIELDS: usize = 8;

/// Compiles a request filter for a feed; `None` when there is no constraint.
///
/// # Errors
/// INVALID_ARGUMENT naming the field when it is not advertised by the feed,
/// is empty, repeats, or has no values.
pub fn compile_filter(
    source: Source,
    filter: Option<&proto::Filter>,
) -> Result<Option<feeds::EventFilter>, Status> {
    let Some(filter) = filter.filter(|f| !f.fields.is_empty()) else {
        return Ok(None);
    };
    if filter.fields.len() > MAX_FILTER_FIELDS {
        return Err(Status::invalid_argument(format!(
            "filter: at most {MAX_FILTER_FIELDS} fields, got {}",
            filter.fields.len()
        )));
    }
    let mut constraints = Vec::with_capacity(filter.fields.len());
    for field in &filter.fields {
        let name = format!("filter field {}", common::quoted(&field.field));
        common::bounded_list(&name, &field.values).map_err(Status::invalid_argument)?;
        if !matches!(
            proto::FilterOp::try_from(field.op),
            Ok(proto::FilterOp::Unspecified | proto::FilterOp::In)
        ) {
            return Err(Status::invalid_argument(format!(
                "filter field {}: unknown op {}",
                common::quoted(&field.field),
                field.op
            )));
        }
        constraints.push((field.field.clone(), field.values.clone()));
    }
    feeds::EventFilter::new(source, &constraints)
        .map(Some)
        .map_err(|e| Status::invalid_argument(common::bounded(e.to_string())))
}

fn feed_status(source: Source, error: &FeedError) -> Status {
    tracing::error!(feed = source.feed_id(), %error, "feed read failed");
    Status::internal(format!("{}: {error}", source.feed_id()))
}

/// Reads the client's `grpc-timeout` request header (`<digits><unit>`).
pub fn grpc_deadline<T>(request: &Request<T>) -> Option<Duration> {
    let text = request.metadata().get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    let value: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(value.saturating_mul(3600)),
        "M" => Duration::from_secs(value.saturating_mul(60)),
        "S" => Duration::from_secs(value),
        "m" => Duration::from_millis(value),
        "u" => Duration::from_micros(value),
        "n" => Duration::from_nanos(value),
        _ => return None,
    })
}

fn feed_info(live: &LiveFeeds, source: Source) -> FeedInfo {
    FeedInfo {
        id: source.feed_id().to_owned(),
        source: live.source_name(source),
        position_kinds: source
            .position_kinds()
            .iter()
            .map(|kind| match kind {
                feeds::PositionKind::Timestamp => PositionKind::Timestamp as i32,
                feeds::PositionKind::BlockNumber => PositionKind::BlockNumber as i32,
            })
            .collect(),
        filter_fields: source
            .filter_fields()
            .iter()
            .map(|f| (*f).to_owned())
            .collect(),
    }
}

/// Expands to the `VenueL1Gateway` impl: every RPC delegates to the generic
/// stream / get handlers with its source. (Generated as a whole so that
/// `async_trait` sees the expanded methods.)
macro_rules! gateway_impl {
    (streams: [$(($stream:ident, $stream_source:expr)),* $(,)?], gets: [$(($get:ident, $get_source:expr)),* $(,)?] $(,)?) => {
        #[tonic::async_trait]
        impl VenueL1Gateway for RawFeedService {
            type StreamBlocksStream = RecordStream;
            type StreamFillsStream = RecordStream;
            type StreamRawBookDiffsStream = RecordStream;
            type StreamOrderStatusesStream = RecordStream;
            type StreamMiscEventsStream = RecordStream;
            type StreamTwapStatusesStream = RecordStream;
            type StreamOrderbookSnapshotsStream = RecordStream;

            async fn list_feeds(&self, request: Request<ListFeedsRequest>) -> Result<Response<ListFeedsResponse>, Status> {
                self.admit_unary(&request)?;
                let feeds = Source::ALL.iter().map(|&s| feed_info(&self.live, s)).collect();
                Ok(Response::new(ListFeedsResponse { feeds }))
            }

            $(
                async fn $stream(&self, request: Request<StreamRequest>) -> Result<Response<RecordStream>, Status> {
                    self.admit_stream($stream_source, &request)
                }
            )*

            $(
                async fn $get(&self, request: Request<GetRequest>) -> Result<Response<Record>, Status> {
                    self.admit_unary(&request)?;
                    let deadline = grpc_deadline(&request);
                    self.get($get_source, request.get_ref(), deadline).await
                }
            )*
        }
    };
}

gateway_impl! {
    streams: [
        (stream_blocks, Source::Blocks),
        (stream_fills, Source::Fills),
        (stream_raw_book_diffs, Source::RawBookDiffs),
        (stream_order_statuses, Source::OrderStatuses),
        (stream_misc_events, Source::MiscEvents),
        (stream_twap_statuses, Source::TwapStatuses),
        (stream_orderbook_snapshots, Source::OrderbookSnapshots),
    ],
    gets: [
        (get_block, Source::Blocks),
        (get_fills, Source::Fills),
        (get_raw_book_diffs, Source::RawBookDiffs),
        (get_order_statuses, Source::OrderStatuses),
        (get_misc_events, Source::MiscEvents),
        (get_twap_statuses, Source::TwapStatuses),
        (get_orderbook_snapshot, Source::OrderbookSnapshots),
    ],
}

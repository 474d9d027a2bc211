//! The node host's publisher (`l1gate serve --publish nats://…`): every
//! record the server reads from the node's files is appended to the feed's
//! JetStream stream, in order, exactly once.
//!
//! # Exactly once, in order
//!
//! One task per feed reads the feed as a raw-feed stream would (the same
//! lines: undecodable, backwards and, in one-line-per-block files,
//! repeated lines are left out) and publishes each record with:
//! - `Nats-Expected-Last-Sequence`: the stream sequence it must follow.
//!   JetStream refuses the message when anything else was appended in
//!   between (a second publisher, a retry after a lost ack), so the stream
//!   can hold no duplicate and no reordering, whatever the duplicate
//!   window;
//! - `Nats-Msg-Id` `<feed>:<block>:<index>`: a publish retried within the
//!   duplicate window is acknowledged as a duplicate instead of stored.
//!
//! Publishes are pipelined (at most [`MAX_IN_FLIGHT`] records or
//! [`MAX_IN_FLIGHT_BYTES`] unacknowledged) and each acknowledgement is
//! checked against the sequence it should have got. Any failure or refusal
//! abandons the pipeline and resynchronises: the task asks JetStream for
//! the stream's last message, reads its headers (block and line index),
//! seeks the node's files to that block, skips what the stream already
//! holds and goes on from the next record. A restart does the same, so it
//! resumes exactly where the stream ends. An empty stream starts at the
//! first record younger than `publish_max_age`.
//!
//! # Never in the serving path
//!
//! The tasks share the files with the server's readers (the mappings are
//! shared, nothing is copied) and wait only on the bus: a slow or absent
//! bus delays publishing, never serving. Connecting is retried with backoff
//! (1 s doubling to 30 s) while the server serves; the client reconnects by
//! itself after an outage, and each feed resynchronises then.

use std::collections::VecDeque;
use std::future::IntoFuture as _;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream::{self, context::PublishErrorKind, stream};
use feeds::{Source, Start};
use futures_util::FutureExt as _;
use tokio::task::JoinSet;

use crate::settings::PublishSettings;
use crate::status::{BusStatus, FeedState, Role};
use crate::subjects::{
    BUS_FEEDS, HEADER_ENCODING, Placement, encode_payload, stream_name, subject,
};
use edge::backoff::Backoff;
use edge::live::LiveFeeds;

/// Records per read from the files.
const READ_BATCH: usize = 256;
/// Unacknowledged records per feed at most.
pub const MAX_IN_FLIGHT: usize = 512;
/// Unacknowledged payload bytes per feed at most.
pub const MAX_IN_FLIGHT_BYTES: usize = 32 << 20;
/// How long a publish waits for its acknowledgement, and a stream lookup
/// for its answer.
const ACK_TIMEOUT: Duration = Duration::from_secs(10);
/// First wait after a failure; doubled (with jitter) up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Below this server `max_payload` the publisher warns at connect: a busy
/// block's order statuses come close to 1 MB.
const RECOMMENDED_MAX_PAYLOAD: usize = 8 << 20;

type AckFuture =
    Pin<Box<dyn Future<Output = Result<jetstream::publish::PublishAck, PublishError>> + Send>>;
type PublishError = jetstream::context::PublishError;

/// Starts publishing every line feed of `live` to the bus; the returned
/// task (abort it to stop) owns the per-feed tasks.
pub fn spawn(
    settings: PublishSettings,
    tls: edge::upstream::UpstreamTls,
    live: Arc<LiveFeeds>,
    checkpoints: std::path::PathBuf,
) -> (Arc<BusStatus>, tokio::task::JoinHandle<()>) {
    let status = BusStatus::new(Role::Publisher, &settings.url);
    let task = tokio::spawn(run(settings, tls, live, checkpoints, status.clone()));
    (status, task)
}

async fn run(
    settings: PublishSettings,
    tls: edge::upstream::UpstreamTls,
    live: Arc<LiveFeeds>,
    checkpoints: std::path::PathBuf,
    status: Arc<BusStatus>,
) {
    let url = &settings.url;
    let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
    let mut attempts = 0u32;
    let client = loop {
        match url.connect("l1gate publisher", &tls).await {
            Ok(client) => break client,
            Err(error) => {
                attempts += 1;
                status.set_error(Some(error.to_string()));
                if attempts == 1 {
                    tracing::error!(
                        %error,
                        "bus: cannot connect; serving the node anyway and retrying with backoff \
                         (up to every {} s); publishing starts where the streams end",
                        MAX_BACKOFF.as_secs()
                    );
                } else if common::metrics::warn_allowed("bus connect", Duration::from_secs(60)) {
                    tracing::warn!(%error, attempts, "bus: still cannot connect; retrying");
                }
                tokio::time::sleep(backoff.next_wait()).await;
            }
        }
    };
    status.set_error(None);
    let max_payload = client.server_info().max_payload;
    tracing::info!(url = %url, max_payload, "bus: connected; publishing");
    if max_payload < RECOMMENDED_MAX_PAYLOAD {
        tracing::warn!(
            url = %url,
            max_payload,
            "bus: the server's max_payload is below 8 MiB; a record larger than it stops its \
             feed's publishing until max_payload is raised (set `max_payload: 8MB` in the \
             nats-server configuration)"
        );
    }
    status.set_client(client.clone());
    let mut context = jetstream::new(client);
    context.set_timeout(ACK_TIMEOUT);
    let mut tasks = JoinSet::new();
    tasks.spawn(crate::checkpoints::upload(
        context.clone(),
        settings.clone(),
        checkpoints,
        status.clone(),
    ));
    for source in BUS_FEEDS {
        let (Some(feed), Some(state)) = (live.feed(source), status.feed(source)) else {
            continue;
        };
        let publisher = FeedPublisher {
            source,
            feed,
            live: live.clone(),
            context: context.clone(),
            settings: settings.clone(),
            state,
        };
        tasks.spawn(publisher.run());
    }
    while tasks.join_next().await.is_some() {}
}

/// Publishes one feed.
struct FeedPublisher {
    source: Source,
    feed: feeds::Feed,
    live: Arc<LiveFeeds>,
    context: jetstream::Context,
    settings: PublishSettings,
    state: Arc<FeedState>,
}

/// One published record awaiting its acknowledgement.
struct InFlight {
    ack: AckFuture,
    placement: Placement,
    sequence: u64,
    bytes: usize,
}

/// Why a publishing session ended.
enum Stop {
    /// The stream moved under us (another publisher, a retried publish):
    /// look up its end again at once.
    Resync(String),
    /// The bus or the files failed: look again after a backoff.
    Failed(String),
}

impl FeedPublisher {
    fn state(&self) -> &FeedState {
        &self.state
    }

    async fn run(self) {
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        loop {
            let stop = self.session(&mut backoff).await;
            self.state().resyncs.fetch_add(1, Ordering::AcqRel);
            let feed = self.source.feed_id();
            match stop {
                Stop::Resync(why) => {
                    tracing::info!(feed, why, "bus: the stream moved; resuming from its end");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Stop::Failed(why) => {
                    let wait = backoff.next_wait();
                    if common::metrics::warn_allowed(
                        &format!("bus publish {feed}"),
                        Duration::from_secs(10),
                    ) {
                        tracing::warn!(
                            feed,
                            url = %self.settings.url,
                            error = %self.settings.url.redact(&why),
                            retry_in_ms = wait.as_millis() as u64,
                            "bus: publishing stopped; resuming from the stream's end"
                        );
                    }
                    self.state().set_error(Some(self.settings.url.redact(&why)));
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// Creates the stream, or brings an existing one's retention in line
    /// with the settings (keeping whatever else the operator set).
    async fn ensure_stream(&self) -> Result<stream::Stream, String> {
        let name = stream_name(self.source);
        let max_bytes = match self.settings.max_bytes {
            0 => -1,
            bytes => i64::try_from(bytes).unwrap_or(i64::MAX),
        };
        if let Ok(mut existing) = self.context.get_stream(&name).await {
            let info = existing.info().await.map_err(|e| format!("{name}: {e}"))?;
            let mut config = info.config.clone();
            if config.max_age == self.settings.max_age
                && config.max_bytes == max_bytes
                && config.duplicate_window == self.settings.duplicate_window
            {
                return Ok(existing);
            }
            config.max_age = self.settings.max_age;
            config.max_bytes = max_bytes;
            config.duplicate_window = self.settings.duplicate_window;
            self.context
                .update_stream(config)
                .await
                .map_err(|e| format!("updating the retention of stream {name}: {e}"))?;
            return Ok(existing);
        }
        let config = stream::Config {
            name: name.clone(),
            description: Some(format!(
                "l1gate {}: one node record per message, in order",
                self.source.feed_id()
            )),
            subjects: vec![subject(self.source)],
            storage: stream::StorageType::File,
            retention: stream::RetentionPolicy::Limits,
            discard: stream::DiscardPolicy::Old,
            max_age: self.settings.max_age,
            max_bytes,
            max_messages: -1,
            max_messages_per_subject: -1,
            max_message_size: -1,
            max_consumers: -1,
            duplicate_window: self.settings.duplicate_window,
            num_replicas: 1,
            ..stream::Config::default()
        };
        self.context.create_stream(config).await.map_err(|e| {
            let hint = if e.to_string().contains("10047") {
                " (JetStream reserves publish_max_bytes for each of the six streams: lower \
                 publish_max_bytes, or give the server more storage with max_file_store)"
            } else {
                ""
            };
            format!("creating stream {name}: {e}{hint}")
        })
    }

    /// The stream's last sequence and the placement of its last message
    /// (`None` when it holds none).
    async fn stream_end(stream: &stream::Stream) -> Result<(u64, Option<Placement>), String> {
        let info = stream.get_info().await.map_err(|e| e.to_string())?;
        let last = info.state.last_sequence;
        if info.state.messages == 0 || last == 0 {
            return Ok((last, None));
        }
        let message = stream
            .get_raw_message(last)
            .await
            .map_err(|e| format!("reading message {last}: {e}"))?;
        let placement = Placement::from_headers(Some(&message.headers))
            .map_err(|e| format!("message {last} is not an l1gate record: {e}"))?;
        Ok((last, Some(placement)))
    }

    async fn session(&self, backoff: &mut Backoff) -> Stop {
        let stream = match self.ensure_stream().await {
            Ok(stream) => stream,
            Err(error) => return Stop::Failed(error),
        };
        let (mut expected, end) = match Self::stream_end(&stream).await {
            Ok(end) => end,
            Err(error) => return Stop::Failed(error),
        };
        // Subscribed before the first read: no growth is missed.
        let mut changes = self.live.subscribe(self.source);
        let start = if let Some(placement) = &end {
            Start::BlockNumber(placement.block)
        } else {
            let age = i64::try_from(self.settings.max_age.as_millis()).unwrap_or(i64::MAX);
            Start::Timestamp(common::unix_now_ms().saturating_sub(age).max(1))
        };
        let mut cursor = match self.feed.seek(start) {
            Ok(cursor) => cursor,
            Err(error) => return Stop::Failed(error.to_string()),
        };
        if let Some(placement) = &end {
            tracing::info!(
                feed = self.source.feed_id(),
                stream_sequence = expected,
                block = placement.block,
                index = placement.index,
                "bus: resuming after the stream's last record"
            );
        }
        let skip_through = end.map(|p| (p.block, p.index));
        let mut position = Position::default();
        let mut in_flight: VecDeque<InFlight> = VecDeque::new();
        let mut in_flight_bytes = 0usize;
        let subject = subject(self.source);
        loop {
            let batch = match self.feed.read(&mut cursor, READ_BATCH) {
                Ok(batch) => batch,
                Err(error) => return Stop::Failed(error.to_string()),
            };
            if batch.is_empty() {
                self.state().lag_bytes.store(
                    self.feed.lag(&cursor) + in_flight_bytes as u64,
                    Ordering::Release,
                );
                // Caught up with the files: take acknowledgements as they
                // come, and read again on growth.
                let Some(front) = in_flight.front_mut() else {
                    if changes.changed().await.is_err() {
                        return Stop::Failed("the feed closed".to_owned());
                    }
                    continue;
                };
                tokio::select! {
                    acked = &mut front.ack => {
                        let Some(done) = in_flight.pop_front() else { continue };
                        in_flight_bytes -= done.bytes;
                        if let Err(stop) = self.acknowledged(acked, &done) {
                            return stop;
                        }
                        backoff.reset();
                    }
                    changed = changes.changed() => if changed.is_err() {
                        return Stop::Failed("the feed closed".to_owned());
                    },
                }
                continue;
            }
            let one_line_per_block = self.source == Source::Blocks
                || self
                    .feed
                    .source_dir_name()
                    .is_some_and(|dir| dir.ends_with("_by_block"));
            let source_dir = self.feed.source_dir_name();
            for record in batch {
                let Some(index) = position.admit(record.block_number, one_line_per_block) else {
                    self.state().rejected.fetch_add(1, Ordering::AcqRel);
                    continue;
                };
                let Some(block) = record.block_number else {
                    continue;
                };
                if skip_through.is_some_and(|through| (block, index) <= through) {
                    continue;
                }
                let placement = Placement {
                    block,
                    time_ms: record.timestamp_ms,
                    index,
                    source_dir: source_dir.clone(),
                };
                let line_bytes = record.data.len();
                let (payload, compressed) = encode_payload(record.data);
                let bytes = payload.len();
                let mut headers = placement.headers(self.source);
                if compressed {
                    headers.insert(HEADER_ENCODING, "zstd");
                }
                let message = jetstream::message::PublishMessage::build()
                    .payload(payload)
                    .headers(headers)
                    .expected_last_sequence(expected);
                let ack = match self.context.send_publish(subject.clone(), message).await {
                    Ok(ack) => ack,
                    Err(error) if error.kind() == PublishErrorKind::MaxPayloadExceeded => {
                        return Stop::Failed(format!(
                            "the record of block {block} is {bytes} bytes on the bus \
                             ({line_bytes} bytes of line, compressed), over the server's \
                             max_payload: raise max_payload in the nats-server configuration \
                             (publishing this feed waits until then)"
                        ));
                    }
                    Err(error) => return Stop::Failed(format!("publish: {error}")),
                };
                expected += 1;
                in_flight.push_back(InFlight {
                    ack: ack.into_future(),
                    placement,
                    sequence: expected,
                    bytes,
                });
                in_flight_bytes += bytes;
                // Backpressure: wait for the oldest acknowledgement while
                // the pipeline is full.
                while in_flight.len() >= MAX_IN_FLIGHT || in_flight_bytes >= MAX_IN_FLIGHT_BYTES {
                    let Some(done) = in_flight.pop_front() else {
                        break;
                    };
                    in_flight_bytes -= done.bytes;
                    let mut done = done;
                    let acked = (&mut done.ack).await;
                    if let Err(stop) = self.acknowledged(acked, &done) {
                        return stop;
                    }
                    backoff.reset();
                }
                // Take the acknowledgements already here without waiting.
                while let Some(front) = in_flight.front_mut() {
                    let Some(acked) = (&mut front.ack).now_or_never() else {
                        break;
                    };
                    let Some(done) = in_flight.pop_front() else {
                        break;
                    };
                    in_flight_bytes -= done.bytes;
                    if let Err(stop) = self.acknowledged(acked, &done) {
                        return stop;
                    }
                }
            }
            self.state().lag_bytes.store(
                self.feed.lag(&cursor) + in_flight_bytes as u64,
                Ordering::Release,
            );
        }
    }

    /// Checks one acknowledgement and notes the record as published.
    fn acknowledged(
        &self,
        acked: Result<jetstream::publish::PublishAck, PublishError>,
        done: &InFlight,
    ) -> Result<(), Stop> {
        let block = done.placement.block;
        match acked {
            Ok(ack) if ack.duplicate => Err(Stop::Resync(format!(
                "block {block} was already in the stream (sequence {}): another publisher",
                ack.sequence
            ))),
            Ok(ack) if ack.sequence != done.sequence => Err(Stop::Resync(format!(
                "block {block} got sequence {} instead of {}",
                ack.sequence, done.sequence
            ))),
            Ok(ack) => {
                let state = self.state();
                state.moved(block, done.placement.time_ms, ack.sequence, done.bytes);
                state.set_error(None);
                Ok(())
            }
            Err(error) if error.kind() == PublishErrorKind::WrongLastSequence => {
                Err(Stop::Resync(format!(
                    "block {block}: the stream's last sequence is not {} (another publisher \
                     appended)",
                    done.sequence - 1
                )))
            }
            Err(error) => Err(Stop::Failed(format!("block {block}: {error}"))),
        }
    }
}

/// The line-by-line admission of a raw-feed stream, and each record's index
/// within its block.
#[derive(Debug, Default)]
struct Position {
    last: Option<(u64, u32)>,
}

impl Position {
    /// The record's index within its block, or `None` when a raw-feed
    /// stream would not send it (undecodable, backwards, or a repeated
    /// block in one-line-per-block files).
    fn admit(&mut self, block: Option<u64>, one_line_per_block: bool) -> Option<u32> {
        let block = block?;
        let index = match self.last {
            Some((last, _)) if block < last => return None,
            Some((last, _)) if block == last && one_line_per_block => return None,
            Some((last, index)) if block == last => index.saturating_add(1),
            _ => 0,
        };
        self.last = Some((block, index));
        Some(index)
    }
}

#[cfg(test)]
mod tests {
    use super::Position;

    #[test]
    fn records_are_admitted_as_a_raw_feed_stream_sends_them_and_indexed_in_their_block() {
        let mut by_block = Position::default();
        let got: Vec<Option<u32>> = [Some(5), Some(6), Some(6), None, Some(4), Some(8)]
            .into_iter()
            .map(|b| by_block.admit(b, true))
            .collect();
        assert_eq!(got, [Some(0), Some(0), None, None, None, Some(0)]);
        let mut streaming = Position::default();
        let got: Vec<Option<u32>> = [Some(5), Some(5), Some(5), Some(6), Some(5), Some(6)]
            .into_iter()
            .map(|b| streaming.admit(b, false))
            .collect();
        assert_eq!(got, [Some(0), Some(1), Some(2), Some(0), None, Some(1)]);
    }
}

//! Market-streaming subscribers as the fan-out and soak harnesses drive them: streams
//! opened with a codec that decodes each frame's block number only, readers that tally
//! what they receive per measured window, reference streams to check them against, streams
//! that stop reading, and the server-side counters the harnesses read.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use proto::v3 as pb;
use tokio::task::JoinHandle;
use tonic::Streaming;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

use crate::live::{self, AppendLog};
use crate::server::{ServerProcess, metric_sum};
use crate::sys::CpuTime;

/// Longest wait for every stream of a run to receive its opening frame.
pub const OPEN_WAIT: Duration = Duration::from_secs(180);
/// Longest wait for the server to end slow or stalled streams.
pub const END_WAIT: Duration = Duration::from_secs(90);

/// `StreamBbo`'s path.
pub const BBO: &str = "/venue_l1_gateway.v3.MarketStreaming/StreamBbo";
/// `StreamL2Book`'s path.
pub const L2_BOOK: &str = "/venue_l1_gateway.v3.MarketStreaming/StreamL2Book";

/// Any market frame, decoded for its block number only (field 3 of every update message).
#[derive(Clone, PartialEq, prost::Message)]
pub struct BlockOnly {
    /// The frame's block number.
    #[prost(int64, tag = "3")]
    pub block_number: i64,
}

/// Opens a server stream at `path`, decoding block numbers only.
pub async fn open<R>(
    channel: Channel,
    path: &'static str,
    request: tonic::Request<R>,
) -> Result<Streaming<BlockOnly>, tonic::Status>
where
    R: prost::Message + Send + Sync + 'static,
{
    open_accepting(channel, path, request, None).await
}

/// [`open`], telling the server the client accepts `accept` (a server that sends compressed
/// frames then sends them so).
pub async fn open_accepting<R>(
    channel: Channel,
    path: &'static str,
    request: tonic::Request<R>,
    accept: Option<tonic::codec::CompressionEncoding>,
) -> Result<Streaming<BlockOnly>, tonic::Status>
where
    R: prost::Message + Send + Sync + 'static,
{
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(256 << 20);
    if let Some(encoding) = accept {
        grpc = grpc.accept_compressed(encoding);
    }
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let codec = tonic_prost::ProstCodec::<R, BlockOnly>::default();
    Ok(grpc
        .server_streaming(request, PathAndQuery::from_static(path), codec)
        .await?
        .into_inner())
}

impl Shared {
    /// Nothing opened yet, no window measured; latencies against `log`.
    pub fn new(log: Arc<AppendLog>) -> Arc<Self> {
        Arc::new(Self {
            log,
            opened: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            window: AtomicU16::new(0),
        })
    }
}

/// What the stream tasks share.
pub struct Shared {
    /// When each block was written.
    pub log: Arc<AppendLog>,
    /// Streams that received their opening frame.
    pub opened: AtomicUsize,
    /// Streams that failed before their opening frame.
    pub refused: AtomicUsize,
    /// The window being measured: 0 none, else its number (1, 2, …).
    pub window: AtomicU16,
}

/// What one stream received in one measured window.
#[derive(Default, Clone)]
pub struct Window {
    /// Block numbers received, in order.
    pub blocks: Vec<u64>,
    /// Append → receive latency of each frame after the opening one, µs.
    pub latencies_us: Vec<u32>,
}

/// One stream's record.
#[derive(Default)]
pub struct Tally {
    /// The coin's index in the harness's list.
    pub coin: usize,
    /// Indexed by window number − 1.
    pub windows: Vec<Window>,
    /// Every block received after the opening frame (the reference streams only).
    pub all: Option<Vec<u64>>,
    /// How the stream ended, if it did.
    pub failure: Option<String>,
}

/// A stream's tally, shared with its task.
pub type TallyCell = Arc<parking_lot::Mutex<Tally>>;

/// Reads a stream until it ends, recording into `tally`.
pub async fn reader(
    stream: Result<Streaming<BlockOnly>, tonic::Status>,
    shared: Arc<Shared>,
    tally: TallyCell,
) {
    let fail = |what: String| {
        shared.refused.fetch_add(1, Ordering::AcqRel);
        tally.lock().failure = Some(what);
    };
    let mut stream = match stream {
        Ok(stream) => stream,
        Err(status) => return fail(format!("open: {:?}", status.code())),
    };
    let opening = match stream.message().await {
        Ok(Some(first)) => u64::try_from(first.block_number).unwrap_or(0),
        other => {
            return fail(format!(
                "no opening frame: {:?}",
                other.err().map(|s| s.code())
            ));
        }
    };
    shared.opened.fetch_add(1, Ordering::AcqRel);
    loop {
        match stream.message().await {
            Ok(Some(frame)) => {
                let block = u64::try_from(frame.block_number).unwrap_or(0);
                note(&shared, &tally, opening, block, Instant::now());
            }
            Ok(None) => {
                tally.lock().failure = Some("ended".into());
                return;
            }
            Err(status) => {
                tally.lock().failure = Some(format!("{:?}", status.code()));
                return;
            }
        }
    }
}

/// Records one frame of `block` received at `now` by a stream that opened at `opening`.
fn note(shared: &Shared, tally: &TallyCell, opening: u64, block: u64, now: Instant) {
    let window = usize::from(shared.window.load(Ordering::Acquire));
    let mut tally = tally.lock();
    if let Some(all) = &mut tally.all {
        all.push(block);
    }
    if window > 0 {
        if tally.windows.len() < window {
            tally.windows.resize_with(window, Window::default);
        }
        let w = &mut tally.windows[window - 1];
        w.blocks.push(block);
        if block > opening
            && let Some(latency) = shared.log.since_folded(block, now)
        {
            w.latencies_us
                .push(u32::try_from(latency.as_micros()).unwrap_or(u32::MAX));
        }
    }
}

/// The exchange's WebSocket channels the fan-out harness subscribes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WsChannel {
    /// `bbo`.
    Bbo,
    /// `l2Book`.
    L2Book,
}

impl WsChannel {
    /// The channel's name.
    pub fn name(self) -> &'static str {
        match self {
            WsChannel::Bbo => "bbo",
            WsChannel::L2Book => "l2Book",
        }
    }

    fn subscribe(self, coin: &str) -> String {
        serde_json::json!({
            "method": "subscribe",
            "subscription": {"type": self.name(), "coin": coin},
        })
        .to_string()
    }
}

/// The block time in a WebSocket message's `data` (its first `"time":` number): the only
/// thing the harness reads of it.
pub fn message_time(text: &str) -> Option<i64> {
    let at = memchr::memmem::find(text.as_bytes(), b"\"time\":")? + 7;
    let digits = text[at..].bytes().take_while(u8::is_ascii_digit).count();
    text[at..at + digits].parse().ok()
}

/// One WebSocket connection subscribed to `channel` of `coin`, read until it ends, recording
/// into `tally` (each message's block found by its time in the append log).
pub async fn ws_reader(
    url: String,
    channel: WsChannel,
    coin: String,
    shared: Arc<Shared>,
    tally: TallyCell,
) {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
    let fail = |what: String| {
        shared.refused.fetch_add(1, Ordering::AcqRel);
        tally.lock().failure = Some(what);
    };
    let config = WebSocketConfig::default()
        .read_buffer_size(4 * 1024)
        .write_buffer_size(0);
    let mut socket =
        match tokio_tungstenite::connect_async_with_config(url, Some(config), true).await {
            Ok((socket, _)) => socket,
            Err(error) => return fail(format!("connect: {error}")),
        };
    if socket
        .send(Message::Text(channel.subscribe(&coin).into()))
        .await
        .is_err()
    {
        return fail("subscribe: the connection closed".into());
    }
    let mut opening = None;
    while let Some(message) = socket.next().await {
        match message {
            Ok(Message::Text(text)) => {
                let now = Instant::now();
                let Some(time) = message_time(&text) else {
                    if text.contains("\"channel\":\"error\"") {
                        let what = text.to_string();
                        return fail(what);
                    }
                    continue;
                };
                // Blocks written before the run (the warm-up) are not in the log.
                let block = shared.log.block_at(time).unwrap_or(0);
                match opening {
                    None => {
                        opening = Some(block);
                        shared.opened.fetch_add(1, Ordering::AcqRel);
                    }
                    Some(opened) => note(&shared, &tally, opened, block, now),
                }
            }
            Ok(Message::Close(frame)) => {
                let what =
                    frame.map_or_else(|| "closed".to_owned(), |f| format!("closed {}", f.code));
                if opening.is_none() {
                    return fail(what);
                }
                tally.lock().failure = Some(what);
                return;
            }
            Ok(_) => {}
            Err(error) => {
                if opening.is_none() {
                    return fail(error.to_string());
                }
                tally.lock().failure = Some(error.to_string());
                return;
            }
        }
    }
    tally.lock().failure = Some("ended".into());
}

/// The request a reading stream opens with.
enum Opening {
    Bbo(tonic::Request<pb::BboRequest>),
    L2Book(tonic::Request<pb::L2BookRequest>),
}

/// A set of reading streams.
pub struct Readers {
    /// The reading tasks.
    pub tasks: Vec<JoinHandle<()>>,
    /// Their tallies, in the same order.
    pub tallies: Vec<TallyCell>,
}

impl Readers {
    /// Opens one `StreamBbo` per entry of `coins` (indexes into `names`), spread over
    /// `channels`, and waits for every opening frame.
    pub async fn open_bbo(
        server: &ServerProcess,
        shared: &Arc<Shared>,
        channels: &[Channel],
        names: &[String],
        coins: impl Iterator<Item = usize>,
        reference: bool,
    ) -> anyhow::Result<(Self, f64)> {
        Self::open_grpc(server, shared, channels, names, coins, reference, BBO).await
    }

    /// As [`Readers::open_bbo`], for `StreamBbo` ([`BBO`]) or `StreamL2Book` ([`L2_BOOK`],
    /// default depth).
    pub async fn open_grpc(
        server: &ServerProcess,
        shared: &Arc<Shared>,
        channels: &[Channel],
        names: &[String],
        coins: impl Iterator<Item = usize>,
        reference: bool,
        path: &'static str,
    ) -> anyhow::Result<(Self, f64)> {
        let started = Instant::now();
        let before = shared.opened.load(Ordering::Acquire) + shared.refused.load(Ordering::Acquire);
        let mut readers = Readers {
            tasks: Vec::new(),
            tallies: Vec::new(),
        };
        for (i, coin) in coins.enumerate() {
            let tally = Arc::new(parking_lot::Mutex::new(Tally {
                coin,
                all: reference.then(Vec::new),
                ..Tally::default()
            }));
            let channel = channels[spread(i, channels.len())].clone();
            let (shared, cell) = (Arc::clone(shared), Arc::clone(&tally));
            let coin_name = names[coin].clone();
            let request = if path == L2_BOOK {
                Opening::L2Book(server.request(pb::L2BookRequest {
                    coin: coin_name,
                    ..pb::L2BookRequest::default()
                })?)
            } else {
                Opening::Bbo(server.request(pb::BboRequest {
                    coins: vec![coin_name],
                })?)
            };
            readers.tasks.push(tokio::spawn(async move {
                let stream = match request {
                    Opening::L2Book(request) => open(channel, L2_BOOK, request).await,
                    Opening::Bbo(request) => open(channel, BBO, request).await,
                };
                reader(stream, shared, cell).await;
            }));
            readers.tallies.push(tally);
        }
        let want = before + readers.tasks.len();
        wait_opened(shared, want, started).await?;
        Ok((readers, started.elapsed().as_secs_f64()))
    }

    /// Opens one WebSocket connection per entry of `coins` (indexes into `names`) to the
    /// server's `/{key}/ws`, each subscribed to `channel` of its coin, and waits for every
    /// opening message.
    pub async fn open_ws(
        server: &ServerProcess,
        shared: &Arc<Shared>,
        channel: WsChannel,
        names: &[String],
        coins: impl Iterator<Item = usize>,
    ) -> anyhow::Result<(Self, f64)> {
        let started = Instant::now();
        let before = shared.opened.load(Ordering::Acquire) + shared.refused.load(Ordering::Acquire);
        let url = format!("ws://{}/{}/ws", server.http_addr, server.keys.key);
        let mut readers = Readers {
            tasks: Vec::new(),
            tallies: Vec::new(),
        };
        for coin in coins {
            let tally = Arc::new(parking_lot::Mutex::new(Tally {
                coin,
                ..Tally::default()
            }));
            let (shared, cell, url, name) = (
                Arc::clone(shared),
                Arc::clone(&tally),
                url.clone(),
                names[coin].clone(),
            );
            readers.tasks.push(tokio::spawn(async move {
                ws_reader(url, channel, name, shared, cell).await;
            }));
            readers.tallies.push(tally);
            // Connect at a pace the accept loop takes without a backlog overflow.
            if readers.tasks.len().is_multiple_of(200) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let want = before + readers.tasks.len();
        wait_opened(shared, want, started).await?;
        Ok((readers, started.elapsed().as_secs_f64()))
    }

    /// Ends every stream (the client resets them).
    pub fn close(self) -> Vec<TallyCell> {
        for task in &self.tasks {
            task.abort();
        }
        self.tallies
    }
}

/// A connection for stream `i` of `n`: a fixed pseudo-random spread, so that a connection
/// carries streams of many coins (round-robin would give every connection the same few coins
/// when the counts share factors).
pub fn spread(i: usize, n: usize) -> usize {
    let mut x = (i as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    (x % n.max(1) as u64) as usize
}

/// Waits until `want` streams have opened or been refused.
///
/// # Errors
/// When that takes longer than [`OPEN_WAIT`].
pub async fn wait_opened(shared: &Shared, want: usize, started: Instant) -> anyhow::Result<()> {
    while shared.opened.load(Ordering::Acquire) + shared.refused.load(Ordering::Acquire) < want {
        if started.elapsed() > OPEN_WAIT {
            bail!(
                "only {} streams opened within {OPEN_WAIT:?}",
                shared.opened.load(Ordering::Acquire)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Opens `n` streams that read their opening frame and then nothing until `resume`, after
/// which each reads until its stream ends and reports how.
pub async fn open_stalled<R>(
    shared: &Arc<Shared>,
    channels: &[Channel],
    path: &'static str,
    mut request: impl FnMut(usize) -> anyhow::Result<tonic::Request<R>>,
    n: usize,
    resume: &tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Vec<JoinHandle<String>>>
where
    R: prost::Message + Send + Sync + 'static,
{
    let started = Instant::now();
    let before = shared.opened.load(Ordering::Acquire) + shared.refused.load(Ordering::Acquire);
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let request = request(i)?;
        let channel = channels[i % channels.len()].clone();
        let (shared, mut resume) = (Arc::clone(shared), resume.clone());
        tasks.push(tokio::spawn(async move {
            let mut stream = match open(channel, path, request).await {
                Ok(stream) => stream,
                Err(status) => {
                    shared.refused.fetch_add(1, Ordering::AcqRel);
                    return format!("open: {:?}", status.code());
                }
            };
            if !matches!(stream.message().await, Ok(Some(_))) {
                shared.refused.fetch_add(1, Ordering::AcqRel);
                return "no opening frame".into();
            }
            shared.opened.fetch_add(1, Ordering::AcqRel);
            if resume.wait_for(|go| *go).await.is_err() {
                return "harness stopped".into();
            }
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            loop {
                match tokio::time::timeout_at(deadline, stream.message()).await {
                    Err(_) => return "still open 30 s after reading again".into(),
                    Ok(Ok(Some(_))) => {}
                    Ok(Ok(None)) => return "ended without a status".into(),
                    Ok(Err(status)) => return format!("{:?}", status.code()),
                }
            }
        }));
    }
    wait_opened(shared, before + n, started).await?;
    Ok(tasks)
}

/// `l1gate_streams_ended_total` of the market service for `reason`.
pub fn ended(server: &ServerProcess, reason: &str) -> anyhow::Result<u64> {
    let text = server.metrics()?;
    let label = format!("reason=\"{reason}\"");
    Ok(metric_sum(
        &text,
        "l1gate_streams_ended_total",
        &["service=\"market\"", &label],
    ) as u64)
}

/// The server's count of write calls on its gRPC sockets.
pub fn write_calls(server: &ServerProcess) -> anyhow::Result<u64> {
    Ok(metric_sum(&server.metrics()?, "l1gate_grpc_socket_writes_total", &[]) as u64)
}

/// Server and harness CPU and server write calls across a window.
pub struct Costs {
    /// The server's CPU time.
    pub server: CpuTime,
    /// This process's CPU time.
    pub harness: CpuTime,
    /// The server's gRPC socket writes.
    pub writes: u64,
    /// When read.
    pub at: Instant,
}

impl Costs {
    /// Reads the counters now.
    ///
    /// # Errors
    /// When `/proc` or `/metrics` cannot be read.
    pub fn read(server: &ServerProcess) -> anyhow::Result<Self> {
        Ok(Self {
            server: CpuTime::of_process(server.pid())?,
            harness: CpuTime::of_process(std::process::id())?,
            writes: write_calls(server)?,
            at: Instant::now(),
        })
    }

    /// (server cores, harness cores, server write calls) since `self`.
    pub fn since(&self, server: &ServerProcess) -> anyhow::Result<(f64, f64, u64)> {
        let now = Self::read(server)?;
        let secs = now.at.duration_since(self.at).as_secs_f64();
        Ok((
            now.server.since(&self.server).best_s() / secs,
            now.harness.since(&self.harness).best_s() / secs,
            now.writes.saturating_sub(self.writes),
        ))
    }
}

/// The fast streams' totals over one window.
pub struct Totals {
    /// Frames the streams received.
    pub frames: u64,
    /// Frames of the reference streams in the window.
    pub reference: u64,
    /// Frames the reference streams say the streams should have received.
    pub required: u64,
    /// Blocks of the reference a stream did not receive.
    pub missing: u64,
    /// Blocks a stream received that the reference did not (or twice).
    pub extra: u64,
    /// Latencies, µs.
    pub histogram: hdrhistogram::Histogram<u64>,
    /// How streams ended, for those that did.
    pub failures: Vec<String>,
}

/// Tallies window `window` of `fast` against the reference streams' blocks.
pub fn tally_window(
    fast: &[TallyCell],
    reference: &[TallyCell],
    window: usize,
) -> anyhow::Result<Totals> {
    // Per coin: every block the reference saw, and those it saw in this window.
    let mut all = BTreeMap::new();
    let mut in_window = BTreeMap::new();
    for cell in reference {
        let tally = cell.lock();
        all.insert(tally.coin, tally.all.clone().unwrap_or_default());
        in_window.insert(
            tally.coin,
            tally
                .windows
                .get(window)
                .map_or(0, |w| w.blocks.len() as u64),
        );
    }
    let mut histogram = live::histogram()?;
    let (mut frames, mut required, mut missing, mut extra) = (0, 0, 0, 0);
    let mut failures = Vec::new();
    let mut shown = 0;
    for cell in fast {
        let tally = cell.lock();
        failures.extend(tally.failure.clone());
        required += in_window.get(&tally.coin).copied().unwrap_or(0);
        let Some(w) = tally.windows.get(window) else {
            continue;
        };
        frames += w.blocks.len() as u64;
        for &us in &w.latencies_us {
            live::record(&mut histogram, Duration::from_micros(u64::from(us)));
        }
        let (Some(&first), Some(&last)) = (w.blocks.first(), w.blocks.last()) else {
            continue;
        };
        let expected: Vec<u64> = all
            .get(&tally.coin)
            .map(|blocks| {
                blocks
                    .iter()
                    .copied()
                    .filter(|b| (first..=last).contains(b))
                    .collect()
            })
            .unwrap_or_default();
        let (m, x) = difference(&expected, &w.blocks);
        if m + x > 0 && shown < 5 {
            shown += 1;
            eprintln!(
                "fanout: a stream of coin #{} differs from its reference over blocks {first}..={last}: {m} missing, {x} extra; got {:?}, reference {:?}",
                tally.coin,
                tail(&w.blocks),
                tail(&expected),
            );
        }
        missing += m;
        extra += x;
    }
    Ok(Totals {
        frames,
        reference: in_window.values().sum(),
        required,
        missing,
        extra,
        histogram,
        failures,
    })
}

/// The last blocks of a list, for a diagnostic line.
pub fn tail(blocks: &[u64]) -> &[u64] {
    &blocks[blocks.len().saturating_sub(12)..]
}

/// (blocks of `expected` absent from `got`, blocks of `got` beyond those of `expected`), as
/// multisets: a duplicate counts as extra.
pub fn difference(expected: &[u64], got: &[u64]) -> (u64, u64) {
    let mut counts: BTreeMap<u64, i64> = BTreeMap::new();
    for &b in expected {
        *counts.entry(b).or_default() += 1;
    }
    for &b in got {
        *counts.entry(b).or_default() -= 1;
    }
    counts.values().fold((0, 0), |(m, x), &c| {
        if c > 0 {
            (m + c.unsigned_abs(), x)
        } else {
            (m, x + c.unsigned_abs())
        }
    })
}

/// Waits until the server has counted `want` more stream ends for `reason` than `base`,
/// sampling the server's RSS; returns (seconds waited or `None` on time-out, peak RSS KiB).
pub async fn wait_ended(
    server: &ServerProcess,
    reason: &str,
    base: u64,
    want: usize,
    started: Instant,
) -> anyhow::Result<(Option<f64>, u64)> {
    let mut peak = server.rss_kib()?;
    loop {
        peak = peak.max(server.rss_kib()?);
        if ended(server, reason)? >= base + want as u64 {
            return Ok((Some(started.elapsed().as_secs_f64()), peak));
        }
        if started.elapsed() > END_WAIT {
            return Ok((None, peak));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `n× what` per distinct outcome, or "none".
pub fn summarize(outcomes: &[String]) -> String {
    if outcomes.is_empty() {
        return "none".into();
    }
    let mut counts = BTreeMap::<&str, usize>::new();
    for outcome in outcomes {
        *counts.entry(outcome.as_str()).or_default() += 1;
    }
    counts
        .iter()
        .map(|(what, n)| format!("{n}× {what}"))
        .collect::<Vec<_>>()
        .join(", ")
}

//! Restarts of the real `l1gate serve` process under clients that reconnect
//! on their own, on every edge: the exchange's WebSocket API, gRPC market
//! streams and the raw feed.
//!
//! The server runs as a child process on fixed ports and one state
//! directory while a node directory keeps growing. It is stopped twice and
//! started again at once on the same ports each time: first with SIGTERM
//! (a graceful stop: exit status 0, WebSocket close 1001 and gRPC
//! UNAVAILABLE saying the server is shutting down, a last engine
//! checkpoint that the restart resumes from), then with SIGKILL; a last
//! SIGTERM ends the run. Each kind of
//! client runs once per reconnect policy — at once in a tight loop, every
//! 100 ms, exponential backoff from 50 ms to 1.6 s — each in a task of its
//! own. After every start each client must be served again: every
//! WebSocket subscription acknowledged and none refused (a subscription
//! sent while the restarted engine is still catching up with the node's
//! files is held until it has, not refused as invalid: the policy that
//! reconnects at once sends its subscriptions then), the market streams
//! re-opened with fresh frames, and the raw feed resumed from its cursor
//! with no record twice and none missing against the node's files.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use proto::market_streaming_client::MarketStreamingClient;
use proto::v3 as pb;
use proto::venue_l1_gateway_client::VenueL1GatewayClient;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

use super::harness::{block_number, free_port, with_key};
use super::market_live::live_node;
use super::market_views::{actors, files_named};

const L1GATE: &str = env!("CARGO_BIN_EXE_l1gate");

/// Deadline for anything awaited: a hang, never a measure of speed.
const WAIT: Duration = Duration::from_secs(60);
/// Longest a connection attempt may take before it counts as failed.
const CONNECT_WAIT: Duration = Duration::from_secs(10);
/// Longest a subscription call may wait for its answer: the server holds
/// one for at most `ready_wait_ms` (5 s) while it catches up.
const CALL_WAIT: Duration = Duration::from_secs(15);

/// Blocks the simulator writes: the first `INITIAL` before the first start,
/// then one every `EVERY`, longer than the test runs.
const BLOCKS: u64 = 4_300;
// Enough to cross the 5-minute boundary after the first block (the
// simulator writes a block every 68 ms of block time).
const INITIAL: u64 = 3_700;
const EVERY: Duration = Duration::from_millis(50);

// ---------------------------------------------------------------- server

/// `l1gate serve` as a child process, started again on the same ports and
/// state directory; its log (every run's) goes to one file.
struct ServeProcess {
    child: Option<tokio::process::Child>,
    data: PathBuf,
    keys_file: PathBuf,
    state_dir: PathBuf,
    log: PathBuf,
    /// Where the current (or last) run's lines start in the log.
    run_starts_at: u64,
    grpc: SocketAddr,
    http: SocketAddr,
    /// `--candle-history-start`, ISO-8601.
    history_start: String,
}

impl ServeProcess {
    /// Starts the server (again).
    fn spawn(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        self.run_starts_at = log.metadata().unwrap().len();
        let mut command = tokio::process::Command::new(L1GATE);
        command
            .arg("serve")
            .arg("--data")
            .arg(&self.data)
            .arg("--keys-file")
            .arg(&self.keys_file)
            .arg("--state-dir")
            .arg(&self.state_dir)
            .args(["--grpc-addr", &self.grpc.to_string()])
            .args(["--http-addr", &self.http.to_string()])
            // The simulator's block times are months old.
            .args(["--market-stale-after-ms", "0"])
            .args(["--candle-history-start", &self.history_start])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("L1GATE_") || name == "RUST_LOG" {
                command.env_remove(name);
            }
        }
        self.child = Some(command.spawn().unwrap());
    }

    /// Stops the server as an operator does (SIGTERM) and waits for it.
    async fn terminate(&mut self) -> ExitStatus {
        let pid = self.child.as_ref().unwrap().id().unwrap();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -TERM {pid}");
        self.wait("after SIGTERM").await
    }

    /// Kills the server (SIGKILL) and waits for it.
    async fn kill(&mut self) -> ExitStatus {
        self.child.as_mut().unwrap().start_kill().unwrap();
        self.wait("after SIGKILL").await
    }

    async fn wait(&mut self, what: &str) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        match tokio::time::timeout(WAIT, child.wait()).await {
            Ok(status) => status.unwrap(),
            Err(_) => {
                let _ = child.start_kill();
                panic!(
                    "the server did not exit within {WAIT:?} {what}; log:\n{}",
                    self.log_tail()
                );
            }
        }
    }

    /// The log lines of the current (or last) run.
    fn run_log(&self) -> String {
        let bytes = std::fs::read(&self.log).unwrap_or_default();
        let start = (self.run_starts_at as usize).min(bytes.len());
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }

    /// The last lines of the log, for failure messages.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Block numbers of the engine checkpoints in the state directory.
    fn checkpoints(&self) -> Vec<u64> {
        let Ok(entries) = std::fs::read_dir(self.state_dir.join("checkpoints")) else {
            return Vec::new();
        };
        let mut blocks: Vec<u64> = entries
            .filter_map(|entry| {
                let name = entry.ok()?.file_name().to_string_lossy().into_owned();
                name.strip_prefix("checkpoint-")?
                    .strip_suffix(".ckpt")?
                    .parse()
                    .ok()
            })
            .collect();
        blocks.sort_unstable();
        blocks
    }
}

// ---------------------------------------------------------------- journal

/// How a client retries: the wait before each connection attempt after a
/// lost connection or a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    /// At once, in a tight loop.
    Immediately,
    /// Every 100 ms.
    Every100Ms,
    /// 50 ms, doubling after each failure up to 1.6 s.
    Backoff,
}

impl Policy {
    const ALL: [Policy; 3] = [Policy::Immediately, Policy::Every100Ms, Policy::Backoff];

    fn name(self) -> &'static str {
        match self {
            Policy::Immediately => "immediately",
            Policy::Every100Ms => "every-100ms",
            Policy::Backoff => "backoff",
        }
    }

    /// The wait before an attempt that follows `failures` failed ones.
    fn delay(self, failures: u32) -> Duration {
        match self {
            Policy::Immediately => Duration::ZERO,
            Policy::Every100Ms => Duration::from_millis(100),
            Policy::Backoff => {
                Duration::from_millis(50 << failures.min(5)).min(Duration::from_millis(1_600))
            }
        }
    }
}

/// How a session ended.
#[derive(Debug, Clone)]
enum End {
    /// The server closed the WebSocket: code and reason.
    Close(u16, String),
    /// The server ended the gRPC stream with a status.
    Status(Code, String),
    /// The connection broke (a reset, a transport error).
    Broken(String),
    /// The test stopped the client.
    Stopped,
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Close(code, reason) => write!(f, "close {code} {reason:?}"),
            End::Status(code, message) => write!(f, "status {code:?} {message:?}"),
            End::Broken(why) => write!(f, "broken: {why}"),
            End::Stopped => f.write_str("stopped by the test"),
        }
    }
}

impl End {
    /// The end a graceful stop gives: close 1001 or UNAVAILABLE, each saying
    /// that the server is shutting down.
    fn is_shutdown(&self) -> bool {
        match self {
            End::Close(code, reason) => *code == 1001 && reason.contains("shutting down"),
            End::Status(code, message) => {
                *code == Code::Unavailable && message.contains("shutting down")
            }
            End::Broken(_) | End::Stopped => false,
        }
    }
}

/// One connection of a client, from its opening (the upgrade, or the
/// stream call answered) to its end.
#[derive(Debug)]
struct Session {
    opened: Instant,
    /// When it had all it waits for: every acknowledgement, fresh data.
    healthy: Option<Instant>,
    ended: Option<(Instant, End)>,
}

/// What one client saw.
#[derive(Debug, Default)]
struct Journal {
    sessions: Vec<Session>,
    /// Connection attempts that failed before a session opened.
    failed_attempts: u32,
    /// Refusals from a server that answered (an HTTP status on the upgrade,
    /// a gRPC status on the call, no answer within [`CALL_WAIT`]), with
    /// when they came.
    refusals: Vec<(Instant, String)>,
    /// What must never happen: an `error` message, a numbering gap, a
    /// duplicate record, a book going back in time.
    faults: Vec<String>,
    /// Raw feed: every record taken, in order.
    records: Vec<proto::Record>,
    /// Snapshot views: the newest block number (gRPC) or block time
    /// (WebSocket `l2Book`) seen, over every session.
    newest: i64,
}

/// What a client reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// One WebSocket connection subscribed to every channel served without
    /// an Info source.
    WebSocket,
    /// `StreamBbo` for BTC.
    Bbo,
    /// `StreamL2Book` for BTC.
    L2Book,
    /// `StreamL4OrderUpdates` for BTC (numbered frames).
    L4Updates,
    /// The raw `fills` feed, resumed from its cursor.
    RawFills,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::WebSocket,
        Kind::Bbo,
        Kind::L2Book,
        Kind::L4Updates,
        Kind::RawFills,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::WebSocket => "ws",
            Kind::Bbo => "StreamBbo",
            Kind::L2Book => "StreamL2Book",
            Kind::L4Updates => "StreamL4OrderUpdates",
            Kind::RawFills => "raw fills",
        }
    }
}

/// What every client shares.
struct Context {
    grpc: SocketAddr,
    http: SocketAddr,
    /// The account followed by the user channels.
    user: String,
    /// The first block of the node's files: where the raw client starts.
    first_block: i64,
    stop: CancellationToken,
}

/// One client: a kind, a policy, its key and what it saw.
struct Client {
    kind: Kind,
    policy: Policy,
    key: String,
    journal: Mutex<Journal>,
}

/// Whether a connection attempt opened a session.
enum Attempt {
    Failed,
    Session,
}

impl Client {
    fn name(&self) -> String {
        format!("{} ({})", self.kind.name(), self.policy.name())
    }

    fn with<T>(&self, f: impl FnOnce(&mut Journal) -> T) -> T {
        f(&mut self.journal.lock().unwrap())
    }

    fn open_session(&self) -> usize {
        self.with(|journal| {
            journal.sessions.push(Session {
                opened: Instant::now(),
                healthy: None,
                ended: None,
            });
            journal.sessions.len() - 1
        })
    }

    fn healthy(&self, session: usize) {
        self.with(|journal| {
            journal.sessions[session]
                .healthy
                .get_or_insert_with(Instant::now);
        });
    }

    fn end(&self, session: usize, end: End) {
        self.with(|journal| journal.sessions[session].ended = Some((Instant::now(), end)));
    }

    fn fault(&self, what: String) {
        let name = self.name();
        self.with(|journal| journal.faults.push(format!("{name}: {what}")));
    }

    fn refused(&self, what: String) {
        self.with(|journal| journal.refusals.push((Instant::now(), what)));
    }

    /// The retry loop: a session, then the policy's wait, until stopped.
    async fn run(self: Arc<Self>, context: Arc<Context>) {
        let mut failures = 0;
        loop {
            let delay = self.policy.delay(failures);
            tokio::select! {
                () = context.stop.cancelled() => return,
                () = tokio::time::sleep(delay), if !delay.is_zero() => {}
                () = tokio::task::yield_now(), if delay.is_zero() => {}
            }
            let attempt = match self.kind {
                Kind::WebSocket => self.websocket(&context).await,
                Kind::Bbo | Kind::L2Book | Kind::L4Updates => self.market(&context).await,
                Kind::RawFills => self.raw(&context).await,
            };
            match attempt {
                Attempt::Failed => {
                    failures = failures.saturating_add(1);
                    self.with(|journal| journal.failed_attempts += 1);
                }
                Attempt::Session => failures = 0,
            }
        }
    }

    // ------------------------------------------------------------ WebSocket

    async fn websocket(&self, context: &Context) -> Attempt {
        let url = format!("ws://{}/{}/ws", context.http, self.key);
        let mut socket =
            match tokio::time::timeout(CONNECT_WAIT, tokio_tungstenite::connect_async(url)).await {
                Ok(Ok((socket, _))) => socket,
                Ok(Err(tungstenite::Error::Http(response))) => {
                    self.refused(format!("upgrade answered {}", response.status()));
                    return Attempt::Failed;
                }
                Ok(Err(_)) => return Attempt::Failed,
                Err(_) => {
                    self.refused(format!("no upgrade within {CONNECT_WAIT:?}"));
                    return Attempt::Failed;
                }
            };
        let session = self.open_session();
        // Every subscription again, at once, as an SDK does on reconnect.
        let subscriptions = ws_subscriptions(&context.user);
        for subscription in &subscriptions {
            let text = Message::Text(subscription.to_string().into());
            if let Err(error) = socket.send(text).await {
                self.end(session, End::Broken(error.to_string()));
                return Attempt::Session;
            }
        }
        let mut acknowledged: Vec<Value> = Vec::new();
        // Messages per channel; an `l4Book` update (after the opening
        // snapshot) also counts as `l4Book Updates`.
        let mut channels: BTreeMap<String, usize> = BTreeMap::new();
        loop {
            let message = tokio::select! {
                message = socket.next() => message,
                () = context.stop.cancelled() => {
                    self.end(session, End::Stopped);
                    let _ = socket.close(None).await;
                    return Attempt::Session;
                }
            };
            let text = match message {
                Some(Ok(Message::Text(text))) => text,
                Some(Ok(Message::Close(frame))) => {
                    let (code, reason) = frame.map_or((1005, String::new()), |frame| {
                        (u16::from(frame.code), frame.reason.to_string())
                    });
                    self.end(session, End::Close(code, reason));
                    let _ = socket.close(None).await;
                    return Attempt::Session;
                }
                Some(Ok(_)) => continue,
                Some(Err(error)) => {
                    self.end(session, End::Broken(error.to_string()));
                    return Attempt::Session;
                }
                None => {
                    self.end(session, End::Broken("the stream ended".into()));
                    return Attempt::Session;
                }
            };
            let message: Value = serde_json::from_str(&text).unwrap();
            match message["channel"].as_str().unwrap_or_default() {
                "subscriptionResponse" => {
                    let data = message["data"].clone();
                    if !subscriptions.contains(&data) || acknowledged.contains(&data) {
                        self.fault(format!("an acknowledgement of what was not sent: {text}"));
                    }
                    acknowledged.push(data);
                }
                // The reason of a close for shutdown comes first as an error.
                "error" if text.contains("shutting down") => {}
                "error" => self.fault(format!("session {session}: {text}")),
                channel => {
                    if channel == "l2Book" {
                        let time = message["data"]["time"].as_i64().unwrap();
                        self.not_older(session, time, "l2Book time");
                    }
                    if channel == "l4Book" && message["data"].get("Updates").is_some() {
                        *channels.entry("l4Book Updates".into()).or_default() += 1;
                    }
                    *channels.entry(channel.to_owned()).or_default() += 1;
                }
            }
            let count = |channel: &str| channels.get(channel).copied().unwrap_or(0);
            if acknowledged.len() == subscriptions.len()
                && WS_DATA.iter().all(|&channel| count(channel) > 0)
                // Live blocks after the openings.
                && count("l2Book") >= 2
                && count("l4Book Updates") > 0
            {
                self.healthy(session);
            }
        }
    }

    /// Records `value` as the newest seen, a fault when it is older than
    /// one seen before (in this session or an earlier one).
    fn not_older(&self, session: usize, value: i64, what: &str) {
        let newest = self.with(|journal| {
            let newest = journal.newest;
            journal.newest = newest.max(value);
            newest
        });
        if value < newest {
            self.fault(format!(
                "session {session}: {what} {value} is older than {newest}, seen before"
            ));
        }
    }

    // ------------------------------------------------------------ gRPC

    async fn channel(&self, addr: SocketAddr) -> Option<Channel> {
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_timeout(CONNECT_WAIT);
        tokio::time::timeout(CONNECT_WAIT, endpoint.connect())
            .await
            .ok()?
            .ok()
    }

    /// A failed stream call: a refusal when the server answered it.
    fn call_failed(&self, call: Result<tonic::Status, tokio::time::error::Elapsed>) -> Attempt {
        match call {
            Ok(status) if is_from_server(&status) => {
                self.refused(format!("{:?}: {}", status.code(), status.message()));
            }
            Ok(_) => {}
            Err(_) => self.refused(format!("no answer within {CALL_WAIT:?}")),
        }
        Attempt::Failed
    }

    async fn market(&self, context: &Context) -> Attempt {
        let Some(channel) = self.channel(context.grpc).await else {
            return Attempt::Failed;
        };
        let mut client = MarketStreamingClient::new(channel).max_decoding_message_size(256 << 20);
        let key = &self.key;
        let coins = vec!["BTC".to_owned()];
        let call = tokio::time::timeout(CALL_WAIT, async {
            Ok::<_, tonic::Status>(match self.kind {
                Kind::Bbo => MarketStream::Bbo(
                    client
                        .stream_bbo(with_key(pb::BboRequest { coins }, key))
                        .await?
                        .into_inner(),
                ),
                Kind::L2Book => MarketStream::L2Book(
                    client
                        .stream_l2_book(with_key(
                            pb::L2BookRequest {
                                coin: "BTC".into(),
                                ..pb::L2BookRequest::default()
                            },
                            key,
                        ))
                        .await?
                        .into_inner(),
                ),
                _ => MarketStream::L4Updates(
                    client
                        .stream_l4_order_updates(with_key(
                            pb::L4OrderUpdatesRequest {
                                coins,
                                users: Vec::new(),
                            },
                            key,
                        ))
                        .await?
                        .into_inner(),
                ),
            })
        })
        .await;
        let mut stream = match call {
            Ok(Ok(stream)) => stream,
            Ok(Err(status)) => return self.call_failed(Ok(status)),
            Err(elapsed) => return self.call_failed(Err(elapsed)),
        };
        let session = self.open_session();
        let mut frames: u64 = 0;
        let mut last_block = i64::MIN;
        loop {
            let frame = tokio::select! {
                frame = stream.next() => frame,
                () = context.stop.cancelled() => {
                    self.end(session, End::Stopped);
                    return Attempt::Session;
                }
            };
            let frame = match frame {
                Ok(Some(frame)) => frame,
                Ok(None) => {
                    self.end(session, End::Broken("ended without a status".into()));
                    return Attempt::Session;
                }
                Err(status) => {
                    self.end(session, end_of(&status));
                    return Attempt::Session;
                }
            };
            frames += 1;
            match frame.sequence {
                // Numbered: a snapshot numbered 1, then +1 per frame, each
                // of a later block.
                Some(sequence) => {
                    if sequence != frames || frame.snapshot != (frames == 1) {
                        self.fault(format!(
                            "session {session}: frame {frames} has sequence {sequence}, \
                             snapshot {}",
                            frame.snapshot
                        ));
                    }
                    if frame.block_number <= last_block {
                        self.fault(format!(
                            "session {session}: block {} after {last_block}",
                            frame.block_number
                        ));
                    }
                }
                // Snapshot views: never an older state than seen before,
                // not even from the restarted server.
                None => self.not_older(session, frame.block_number, "block"),
            }
            last_block = frame.block_number;
            let wanted = if self.kind == Kind::Bbo { 1 } else { 2 };
            if frames >= wanted {
                self.healthy(session);
            }
        }
    }

    async fn raw(&self, context: &Context) -> Attempt {
        let Some(channel) = self.channel(context.grpc).await else {
            return Attempt::Failed;
        };
        let mut client = VenueL1GatewayClient::new(channel).max_decoding_message_size(256 << 20);
        // The cursor: the block after the last record taken.
        let from = self.with(|journal| {
            journal
                .records
                .last()
                .map_or(context.first_block, |record| {
                    record.block_number.unwrap() + 1
                })
        });
        let request = proto::StreamRequest {
            position: Some(proto::Position {
                kind: Some(proto::position::Kind::BlockNumber(from)),
            }),
            filter: None,
        };
        let call =
            tokio::time::timeout(CALL_WAIT, client.stream_fills(with_key(request, &self.key)))
                .await;
        let mut stream = match call {
            Ok(Ok(response)) => response.into_inner(),
            Ok(Err(status)) => return self.call_failed(Ok(status)),
            Err(elapsed) => return self.call_failed(Err(elapsed)),
        };
        let session = self.open_session();
        loop {
            let record = tokio::select! {
                record = stream.message() => record,
                () = context.stop.cancelled() => {
                    self.end(session, End::Stopped);
                    return Attempt::Session;
                }
            };
            match record {
                Ok(Some(record)) => {
                    let block = record.block_number.unwrap();
                    let previous = self.with(|journal| {
                        let previous = journal.records.last().and_then(|r| r.block_number);
                        journal.records.push(record);
                        previous
                    });
                    if previous.is_some_and(|previous| block <= previous) {
                        self.fault(format!(
                            "session {session}: block {block} after {previous:?} (a duplicate)"
                        ));
                    }
                    if previous.is_none() && block != context.first_block {
                        self.fault(format!(
                            "session {session}: the first record is of block {block}, not \
                             {}",
                            context.first_block
                        ));
                    }
                    self.healthy(session);
                }
                Ok(None) => {
                    self.end(session, End::Broken("ended without a status".into()));
                    return Attempt::Session;
                }
                Err(status) => {
                    self.end(session, end_of(&status));
                    return Attempt::Session;
                }
            }
        }
    }
}

/// Whether a status was sent by the server (not made by the client's
/// transport from a reset or a refused connection).
fn is_from_server(status: &tonic::Status) -> bool {
    std::error::Error::source(status).is_none()
}

fn end_of(status: &tonic::Status) -> End {
    if is_from_server(status) {
        End::Status(status.code(), status.message().to_owned())
    } else {
        End::Broken(format!("{:?}: {}", status.code(), status.message()))
    }
}

/// A market stream of any of the kinds, its frames reduced to what the
/// checks read.
enum MarketStream {
    Bbo(tonic::Streaming<pb::BboUpdate>),
    L2Book(tonic::Streaming<pb::L2BookUpdate>),
    L4Updates(tonic::Streaming<pb::L4OrderUpdate>),
}

struct Frame {
    block_number: i64,
    /// Numbered views only.
    sequence: Option<u64>,
    snapshot: bool,
}

impl MarketStream {
    async fn next(&mut self) -> Result<Option<Frame>, tonic::Status> {
        Ok(match self {
            MarketStream::Bbo(stream) => stream.message().await?.map(|frame| Frame {
                block_number: frame.block_number,
                sequence: None,
                snapshot: false,
            }),
            MarketStream::L2Book(stream) => stream.message().await?.map(|frame| Frame {
                block_number: frame.block_number,
                sequence: None,
                snapshot: false,
            }),
            MarketStream::L4Updates(stream) => stream.message().await?.map(|frame| Frame {
                block_number: frame.block_number,
                sequence: Some(frame.sequence),
                snapshot: frame.snapshot,
            }),
        })
    }
}

/// The channels that carry data right after subscribing (an opening state)
/// or every block: each must deliver again after a restart (and `l2Book`
/// and `l4Book` a live block's message besides their opening).
const WS_DATA: [&str; 5] = ["l2Book", "bbo", "allMids", "l4Book", "userFills"];

/// A subscription to every channel the server serves without an Info
/// source, for BTC and `user`.
fn ws_subscriptions(user: &str) -> Vec<Value> {
    [
        json!({"type": "l2Book", "coin": "BTC"}),
        json!({"type": "bbo", "coin": "BTC"}),
        json!({"type": "trades", "coin": "BTC"}),
        json!({"type": "candle", "coin": "BTC", "interval": "1m"}),
        json!({"type": "allMids"}),
        json!({"type": "userFills", "user": user}),
        json!({"type": "userEvents", "user": user}),
        json!({"type": "userTwapSliceFills", "user": user}),
        json!({"type": "orderUpdates", "user": user}),
        json!({"type": "l4Book", "coin": "BTC"}),
    ]
    .into_iter()
    .map(|subscription| json!({"method": "subscribe", "subscription": subscription}))
    .collect()
}

// ---------------------------------------------------------------- checks

/// Every client and what it saw, for failure messages.
fn summary(clients: &[Arc<Client>], origin: Instant) -> String {
    let at = |instant: Instant| format!("{:.2}s", (instant - origin).as_secs_f64());
    let mut out = String::new();
    for client in clients {
        client.with(|journal| {
            out.push_str(&format!(
                "{}: {} failed attempts, {} records, refusals {:?}\n",
                client.name(),
                journal.failed_attempts,
                journal.records.len(),
                journal
                    .refusals
                    .iter()
                    .map(|(when, what)| format!("{} {what}", at(*when)))
                    .collect::<Vec<_>>()
            ));
            for session in &journal.sessions {
                let healthy = session.healthy.map_or_else(|| "never".into(), at);
                let ended = session.ended.as_ref().map_or_else(
                    || "not yet".into(),
                    |(when, end)| format!("{} {end}", at(*when)),
                );
                out.push_str(&format!(
                    "    opened {}, served {healthy}, ended {ended}\n",
                    at(session.opened)
                ));
            }
        });
    }
    out
}

/// Fails on any fault, and on any refusal after `since` (when only the
/// server started then can have answered).
fn assert_no_fault(clients: &[Arc<Client>], since: Instant, what: &str, origin: Instant) {
    let mut faults = Vec::new();
    for client in clients {
        client.with(|journal| {
            faults.extend(journal.faults.iter().cloned());
            faults.extend(
                journal
                    .refusals
                    .iter()
                    .filter(|(when, _)| *when >= since)
                    .map(|(_, refusal)| format!("{}: refused {what}: {refusal}", client.name())),
            );
        });
    }
    assert!(
        faults.is_empty(),
        "{what}:\n{}\n\n{}",
        faults.join("\n"),
        summary(clients, origin)
    );
}

/// Waits until every client was served again by the server started at
/// `since`, failing on any fault meanwhile.
async fn served_again(clients: &[Arc<Client>], since: Instant, what: &str, server: &ServeProcess) {
    let origin = since;
    let deadline = Instant::now() + WAIT;
    loop {
        assert_no_fault(clients, since, what, origin);
        let pending: Vec<String> = clients
            .iter()
            .filter(|client| {
                client.with(|journal| {
                    !journal
                        .sessions
                        .iter()
                        .any(|session| session.healthy.is_some_and(|at| at >= since))
                })
            })
            .map(|client| client.name())
            .collect();
        if pending.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not served again within {WAIT:?}: {pending:?}\n\n{}\nserver log:\n{}",
            summary(clients, origin),
            server.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the session each client had open at `stopping` ended, and
/// checks that it ended as a graceful stop ends it.
async fn ended_by_shutdown(clients: &[Arc<Client>], stopping: Instant) {
    let deadline = Instant::now() + WAIT;
    loop {
        let mut open = Vec::new();
        let mut wrong = Vec::new();
        for client in clients {
            client.with(|journal| {
                let session = journal
                    .sessions
                    .iter()
                    .rfind(|session| session.opened < stopping)
                    .expect("a session before the stop");
                match &session.ended {
                    None => open.push(client.name()),
                    Some((_, end)) if !end.is_shutdown() => {
                        wrong.push(format!("{}: {end}", client.name()));
                    }
                    Some(_) => {}
                }
            });
        }
        assert!(
            wrong.is_empty(),
            "a graceful stop must end WebSocket connections with 1001 and gRPC streams with \
             UNAVAILABLE saying that the server is shutting down; got:\n{}\n\n{}",
            wrong.join("\n"),
            summary(clients, stopping)
        );
        if open.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still open {WAIT:?} after the server exited: {open:?}\n\n{}",
            summary(clients, stopping)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The lines of the node's fills files by block.
fn fills_lines(data: &Path) -> BTreeMap<u64, Vec<u8>> {
    let mut lines = BTreeMap::new();
    for path in files_named(data, "node_fills_by_block") {
        for line in std::fs::read(&path).unwrap().split(|&b| b == b'\n') {
            if !line.is_empty() {
                let previous = lines.insert(block_number(line), line.to_vec());
                assert!(previous.is_none(), "block {} twice", block_number(line));
            }
        }
    }
    lines
}

// ---------------------------------------------------------------- the test

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_of_every_edge_ride_through_a_graceful_and_a_hard_restart() {
    let node = live_node(BLOCKS, INITIAL, EVERY);
    let dir = tempfile::tempdir().unwrap();
    let keys_file = dir.path().join("keys.toml");
    let mut keys = access::keys::KeysFile::default();
    // An account per policy: each opens five streams at once.
    let keys_by_policy: Vec<(Policy, String)> = Policy::ALL
        .iter()
        .map(|&policy| (policy, keys.add_key(policy.name(), 0).unwrap().0))
        .collect();
    keys.save(&keys_file).unwrap();
    // The candle history starts at the last `5m` boundary the blocks written
    // at once reach: the store then holds the bucket open at a stop whole,
    // and a restart can go on from the checkpoint the stop takes.
    let fills = fills_lines(node.dir.path());
    let time_of = |line: &[u8]| {
        let envelope: serde_json::Value = serde_json::from_slice(line).unwrap();
        feeds::time::parse_node_time_ms(envelope["block_time"].as_str().unwrap().as_bytes())
            .unwrap()
    };
    let first_ms = time_of(fills.values().next().unwrap());
    let boundary = {
        let last_ms = time_of(fills.values().next_back().unwrap());
        last_ms - last_ms.rem_euclid(300_000)
    };
    assert!(
        boundary > first_ms,
        "the blocks written at once must cross a 5-minute boundary: raise INITIAL"
    );
    let mut server = ServeProcess {
        child: None,
        history_start: feeds::time::format_iso8601_ms(boundary),
        data: node.dir.path().to_owned(),
        keys_file,
        state_dir: dir.path().join("state"),
        log: dir.path().join("serve.log"),
        run_starts_at: 0,
        grpc: format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        http: format!("127.0.0.1:{}", free_port()).parse().unwrap(),
    };
    let context = Arc::new(Context {
        grpc: server.grpc,
        http: server.http,
        user: actors(node.dir.path()).user,
        first_block: *fills.keys().next().unwrap() as i64,
        stop: CancellationToken::new(),
    });
    // The clients start first: the first start is raced too.
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    for (policy, key) in &keys_by_policy {
        for kind in Kind::ALL {
            let client = Arc::new(Client {
                kind,
                policy: *policy,
                key: key.clone(),
                journal: Mutex::default(),
            });
            tasks.push(tokio::spawn(client.clone().run(context.clone())));
            clients.push(client);
        }
    }
    let origin = Instant::now();

    server.spawn();
    served_again(&clients, origin, "the first start", &server).await;

    // A graceful stop: the clients are told, the engine writes a last
    // checkpoint, exit status 0.
    let newest_folded = clients
        .iter()
        .filter(|client| client.kind == Kind::L2Book)
        .map(|client| client.with(|journal| journal.newest))
        .max()
        .unwrap();
    let stopping = Instant::now();
    let status = server.terminate().await;
    assert!(
        status.success(),
        "SIGTERM: exit {status}; log:\n{}",
        server.log_tail()
    );
    let drained = stopping.elapsed();
    ended_by_shutdown(&clients, stopping).await;
    let checkpoints = server.checkpoints();
    assert!(
        checkpoints
            .last()
            .is_some_and(|&block| block as i64 >= newest_folded),
        "after SIGTERM, a last checkpoint at or past block {newest_folded} (folded before the \
         stop): {checkpoints:?}"
    );
    let restarted = Instant::now();
    server.spawn();
    served_again(
        &clients,
        restarted,
        "after the restart that followed SIGTERM",
        &server,
    )
    .await;
    // Checked at the end, after every client check.
    let resumed_log = server.run_log();

    // A hard stop: nothing is told, the restart is all the same.
    let killing = Instant::now();
    let status = server.kill().await;
    assert!(!status.success(), "SIGKILL: exit {status}");
    let restarted = Instant::now();
    server.spawn();
    served_again(
        &clients,
        restarted,
        "after the restart that followed SIGKILL",
        &server,
    )
    .await;
    assert!(!node.finished(), "the node wrote all along");

    // A last graceful stop, after a hard one.
    let stopping_again = Instant::now();
    let status = server.terminate().await;
    assert!(
        status.success(),
        "second SIGTERM: exit {status}; log:\n{}",
        server.log_tail()
    );
    ended_by_shutdown(&clients, stopping_again).await;
    context.stop.cancel();
    for task in tasks {
        // Every client task returns at once when stopped; one that does not
        // is a failure with the run's summary, not a hang.
        tokio::time::timeout(WAIT, task)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "a client did not stop within {WAIT:?}\n\n{}",
                    summary(&clients, origin)
                )
            })
            .unwrap();
    }
    assert_no_fault(&clients, Instant::now(), "at the end", origin);

    // One session per run, each served; the one open at SIGKILL ended then.
    // (The summary is made before a journal is locked: made inside, it
    // would lock that journal again and hang instead of failing.)
    let seen = summary(&clients, origin);
    for client in &clients {
        client.with(|journal| {
            assert_eq!(
                journal.sessions.len(),
                3,
                "{}: one session per server run\n\n{seen}",
                client.name(),
            );
            let killed = &journal.sessions[1];
            assert!(
                killed.ended.as_ref().is_some_and(|(at, _)| *at >= killing),
                "{}: the second session ended before SIGKILL: {killed:?}",
                client.name()
            );
        });
    }

    // The raw feed over the whole run: the node's lines from the first
    // block on, each once, none missing, byte-exact.
    let fills = fills_lines(node.dir.path());
    for client in clients
        .iter()
        .filter(|client| client.kind == Kind::RawFills)
    {
        client.with(|journal| {
            let got: Vec<u64> = journal
                .records
                .iter()
                .map(|record| record.block_number.unwrap() as u64)
                .collect();
            let last = *got.last().unwrap();
            let want: Vec<u64> = fills
                .range(context.first_block as u64..=last)
                .map(|(block, _)| *block)
                .collect();
            assert_eq!(got, want, "{}: blocks received", client.name());
            for record in &journal.records {
                let block = record.block_number.unwrap() as u64;
                assert_eq!(
                    record.data.as_ref(),
                    fills[&block].as_slice(),
                    "{}: block {block} differs from the node's line",
                    client.name()
                );
            }
        });
    }
    // The restart after the graceful stop resumes from the checkpoint that
    // stop wrote, not from the node's files all over again: that is what
    // the last checkpoint is written for.
    let stop_checkpoint = *checkpoints.last().unwrap();
    let wanted = format!("block={stop_checkpoint} ");
    assert!(
        resumed_log.lines().any(|line| {
            line.contains("engine: resuming from checkpoint") && line.contains(&wanted)
        }),
        "the restart after SIGTERM did not resume from the checkpoint the stop wrote (block \
         {stop_checkpoint}); its log says:\n{}",
        resumed_log
            .lines()
            .filter(|line| line.contains("checkpoint") || line.contains("candle store"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!(
        "restart test: SIGTERM drained and exited in {drained:?}; whole run {:?}\n{}",
        origin.elapsed(),
        summary(&clients, origin)
    );
}

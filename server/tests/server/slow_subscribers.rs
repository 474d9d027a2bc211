//! Slow subscribers on both gRPC services: a reader that falls behind, or
//! whose connection takes nothing, is ended within its bound, its stream
//! slot is freed, the end is counted in `/metrics`, and a fast reader of the
//! same view misses nothing. A stalled reader that reads again gets what
//! its connection had buffered, then the status the server logged.

use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use edge::flow::{EndReason, Measured, Supervisor, Watched};
use futures_util::StreamExt as _;
use proto::StreamRequest;
use proto::market_streaming_client::MarketStreamingClient;
use proto::v3 as pb;
use proto::venue_l1_gateway_client::VenueL1GatewayClient;
use tonic::transport::Channel;
use tonic::{Code, Status};

use super::access_support::{http_get, sample};
use super::harness::{TestServer, block_number, end_status, from_block, next};
use super::market_live::{client, live_node, ready};

const WAIT: Duration = Duration::from_secs(30);

/// A channel whose HTTP/2 windows one frame fills: a reader that stops
/// reading stops the server's sends at once instead of after a large
/// client-side buffer (which the server cannot see into).
async fn tight_channel(server: &TestServer) -> Channel {
    Channel::from_shared(format!("http://{}", server.running.grpc_addr))
        .unwrap()
        .initial_stream_window_size(Some(1024))
        .initial_connection_window_size(Some(1024))
        .connect()
        .await
        .unwrap()
}

/// The server's `/metrics` text.
pub async fn metrics(server: &TestServer) -> String {
    let reply = http_get(server.running.http_addr, "/metrics", None).await;
    assert_eq!(reply.status, 200);
    reply.text
}

/// How long until `series` counts `n`, polled every 20 ms for up to `WAIT`.
async fn until_counted(server: &TestServer, series: &str, n: u64) -> Duration {
    let started = Instant::now();
    loop {
        let text = metrics(server).await;
        if sample(&text, series) >= n {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < WAIT,
            "{series} never reached {n}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_market_reader_behind_the_lag_bound_is_aborted_and_a_fast_one_misses_nothing() {
    const MAX_LAG_MS: u64 = 1_000;
    let node = live_node(6000, 50, Duration::from_millis(10));
    let server = TestServer::start(node.dir.path(), |args| {
        args.market_max_lag_ms = Some(MAX_LAG_MS);
    })
    .await;
    ready(&server).await;
    let request = pb::L4OrderUpdatesRequest::default;
    let mut fast = client(&server)
        .await
        .stream_l4_order_updates(server.req(request()))
        .await
        .unwrap()
        .into_inner();
    let mut slow = MarketStreamingClient::new(tight_channel(&server).await)
        .stream_l4_order_updates(server.req(request()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next(&mut slow, WAIT).await.unwrap().sequence, 1);

    // The slow reader takes two frames a second while about a hundred
    // blocks a second arrive; the fast one keeps up.
    let fast_reader = tokio::spawn(async move {
        let mut last_block = 0;
        for expected in 1..=300 {
            let update = next(&mut fast, WAIT).await.unwrap();
            assert_eq!(update.sequence, expected, "the fast subscriber saw a gap");
            assert!(update.block_number > last_block, "a block came twice");
            last_block = update.block_number;
        }
        fast
    });
    let series = "l1gate_streams_ended_total{service=\"market\",view=\"l4updates\",reason=\"lag\"}";
    let slow_reader = tokio::spawn(async move {
        let mut sequence = 1;
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            match next(&mut slow, WAIT).await {
                Ok(update) => {
                    sequence += 1;
                    assert_eq!(
                        update.sequence, sequence,
                        "frames before the end stay in step"
                    );
                }
                Err(status) => return status,
            }
        }
    });
    let ended_after = until_counted(&server, series, 1).await;
    assert!(
        ended_after <= Duration::from_millis(MAX_LAG_MS + 1_000),
        "ended {ended_after:?} after the reader slowed down"
    );
    let status = slow_reader.await.unwrap();
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
    assert!(
        status.message().contains("behind the newest block"),
        "{}",
        status.message()
    );
    // The fast reader read on, in step, through all of it.
    let mut fast = fast_reader.await.unwrap();
    next(&mut fast, WAIT).await.unwrap();
    assert!(!node.finished(), "the node stopped before the test ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_market_reader_that_takes_nothing_is_ended_and_its_slot_freed() {
    const SEND_TIMEOUT_MS: u64 = 1_000;
    let node = live_node(6000, 50, Duration::from_millis(10));
    let server = TestServer::start(node.dir.path(), |args| {
        args.send_timeout_ms = Some(SEND_TIMEOUT_MS);
        args.market_max_lag_ms = Some(0);
        args.max_streams = Some(1);
    })
    .await;
    ready(&server).await;
    let mut stalled = MarketStreamingClient::new(tight_channel(&server).await)
        .stream_l4_order_updates(server.req(pb::L4OrderUpdatesRequest::default()))
        .await
        .unwrap()
        .into_inner();
    next(&mut stalled, WAIT).await.unwrap();
    let series =
        "l1gate_streams_ended_total{service=\"market\",view=\"l4updates\",reason=\"stall\"}";
    let ended_after = until_counted(&server, series, 1).await;
    assert!(
        ended_after <= Duration::from_millis(SEND_TIMEOUT_MS + 1_000),
        "ended {ended_after:?} after the reader stopped"
    );
    // The account's one stream slot is free again.
    let mut other = client(&server)
        .await
        .stream_bbo(server.req(pb::BboRequest {
            coins: vec!["BTC".into()],
        }))
        .await
        .unwrap()
        .into_inner();
    next(&mut other, WAIT).await.unwrap();
    // Reading again: what the transport had taken, then the end.
    let status = end_status(&mut stalled, WAIT).await;
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        status.message().contains("took nothing"),
        "{}",
        status.message()
    );
    assert!(
        status.message().contains("send_timeout_ms"),
        "{}",
        status.message()
    );
}

/// A snapshot view that takes nothing first lags (its receiver is let go
/// of, to re-open on the newest state when it reads again); it must still
/// be ended once its transport has taken nothing for `send_timeout_ms`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_reader_that_takes_nothing_is_ended_after_its_lag_skip() {
    const SEND_TIMEOUT_MS: u64 = 2_000;
    let node = live_node(6000, 50, Duration::from_millis(10));
    let server = TestServer::start(node.dir.path(), |args| {
        args.send_timeout_ms = Some(SEND_TIMEOUT_MS);
        args.market_max_lag_ms = Some(300);
        args.max_streams = Some(1);
    })
    .await;
    ready(&server).await;
    let mut stalled = MarketStreamingClient::new(tight_channel(&server).await)
        .stream_bbo(server.req(pb::BboRequest {
            coins: vec!["BTC".into(), "ETH".into()],
        }))
        .await
        .unwrap()
        .into_inner();
    next(&mut stalled, WAIT).await.unwrap();
    let stopped = Instant::now();
    until_counted(&server, "l1gate_market_lag_skips_total{view=\"bbo\"}", 1).await;
    until_counted(
        &server,
        "l1gate_streams_ended_total{service=\"market\",view=\"bbo\",reason=\"stall\"}",
        1,
    )
    .await;
    let ended_after = stopped.elapsed();
    assert!(
        ended_after <= Duration::from_millis(SEND_TIMEOUT_MS + 1_000),
        "ended {ended_after:?} after the reader stopped"
    );
    let status = end_status(&mut stalled, WAIT).await;
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_feed_reader_that_takes_nothing_is_ended_and_its_slot_freed() {
    const SEND_TIMEOUT_MS: u64 = 1_000;
    let node = live_node(6000, 50, Duration::from_millis(10));
    let server = TestServer::start(node.dir.path(), |args| {
        args.send_timeout_ms = Some(SEND_TIMEOUT_MS);
        args.max_streams = Some(1);
    })
    .await;
    ready(&server).await;
    let mut stalled = VenueL1GatewayClient::new(tight_channel(&server).await)
        .stream_order_statuses(server.req(StreamRequest::default()))
        .await
        .unwrap()
        .into_inner();
    let mut last_taken = block_number(&next(&mut stalled, WAIT).await.unwrap().data);
    let series =
        "l1gate_streams_ended_total{service=\"raw_feed\",view=\"order_statuses\",reason=\"stall\"}";
    let ended_after = until_counted(&server, series, 1).await;
    assert!(
        ended_after <= Duration::from_millis(SEND_TIMEOUT_MS + 1_000),
        "ended {ended_after:?} after the reader stopped"
    );
    let mut other = server
        .client()
        .await
        .stream_fills(server.req(from_block(1)))
        .await
        .unwrap()
        .into_inner();
    next(&mut other, WAIT).await.unwrap();
    // What the connection took before the end still arrives, then the
    // status names where to reconnect from.
    let status = loop {
        match next(&mut stalled, WAIT).await {
            Ok(record) => last_taken = block_number(&record.data),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    let message = status.message();
    assert!(message.contains("too slow"), "{message}");
    assert!(
        message.contains(&format!("reconnect from block_number {}", last_taken + 1)),
        "{message}"
    );
}

/// A channel whose HTTP/2 stream and connection windows hold `window`
/// bytes: what a reader that stops reading leaves buffered for it.
async fn windowed_channel(server: &TestServer, window: u32) -> Channel {
    Channel::from_shared(format!("http://{}", server.running.grpc_addr))
        .unwrap()
        .initial_stream_window_size(Some(window))
        .initial_connection_window_size(Some(window))
        .connect()
        .await
        .unwrap()
}

/// Reads a stream on to its end: the messages it still had, then the
/// status it ended with.
async fn read_on<T>(stream: &mut tonic::Streaming<T>) -> (Vec<T>, Status) {
    let mut read = Vec::new();
    loop {
        match next(stream, WAIT).await {
            Ok(message) => read.push(message),
            Err(status) => return (read, status),
        }
    }
}

/// The status message the server logs when it ends a market stream whose
/// connection took nothing, the last block sent being `last_block`.
fn stalled_market_message(send_timeout_ms: u64, last_block: i64) -> String {
    format!(
        "subscriber too slow: the connection took nothing for {send_timeout_ms} ms \
         (send_timeout_ms); last block sent {last_block}; resubscribe and consume faster"
    )
}

/// A reader that stops reading until the server has ended its stream as
/// stalled, then reads on, gets every message its connection had buffered
/// and then the status the server logged: DEADLINE_EXCEEDED naming the
/// last block it was sent, which is the last block it reads. Incremental
/// (L4 order updates, in step) and snapshot (BBO) views alike, and whatever
/// the reader's HTTP/2 window held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_market_reader_reads_what_was_buffered_then_the_logged_status() {
    const SEND_TIMEOUT_MS: u64 = 1_000;
    let node = live_node(6000, 50, Duration::from_millis(10));
    let server = TestServer::start(node.dir.path(), |args| {
        args.send_timeout_ms = Some(SEND_TIMEOUT_MS);
        // Only the stall ends these streams.
        args.market_max_lag_ms = Some(0);
    })
    .await;
    ready(&server).await;
    // Windows of one frame and of HTTP/2's default 64 KiB for L4 updates.
    // BBO frames are tens of bytes: tonic's HTTP/2 client itself closes a
    // connection holding more than about a hundred such frames unread
    // ("too many small DATA frames"), so its reader gets the one-frame
    // window.
    let mut l4 = Vec::new();
    for window in [1024, 64 << 10] {
        let mut stream = MarketStreamingClient::new(windowed_channel(&server, window).await)
            .max_decoding_message_size(256 << 20)
            .stream_l4_order_updates(server.req(pb::L4OrderUpdatesRequest::default()))
            .await
            .unwrap()
            .into_inner();
        let opening = next(&mut stream, WAIT).await.unwrap();
        assert_eq!(opening.sequence, 1);
        l4.push((window, opening, stream));
    }
    let mut bbo = MarketStreamingClient::new(windowed_channel(&server, 1024).await)
        .stream_bbo(server.req(pb::BboRequest {
            coins: vec!["BTC".into(), "ETH".into()],
        }))
        .await
        .unwrap()
        .into_inner();
    let bbo_opening = next(&mut bbo, WAIT).await.unwrap();

    // Nothing is read until the server has ended all three as stalled.
    until_counted(
        &server,
        "l1gate_streams_ended_total{service=\"market\",view=\"l4updates\",reason=\"stall\"}",
        2,
    )
    .await;
    until_counted(
        &server,
        "l1gate_streams_ended_total{service=\"market\",view=\"bbo\",reason=\"stall\"}",
        1,
    )
    .await;

    for (window, opening, mut stream) in l4 {
        let (read, status) = read_on(&mut stream).await;
        for (expected, update) in (2..).zip(&read) {
            assert_eq!(
                update.sequence, expected,
                "window {window}: a buffered frame was lost"
            );
        }
        let last_block = read.last().unwrap_or(&opening).block_number;
        assert_eq!(
            status.code(),
            Code::DeadlineExceeded,
            "window {window}, after {} frames: {status:?}",
            read.len()
        );
        assert_eq!(
            status.message(),
            stalled_market_message(SEND_TIMEOUT_MS, last_block),
            "window {window}"
        );
    }
    let (read, status) = read_on(&mut bbo).await;
    let mut last_block = bbo_opening.block_number;
    for update in &read {
        assert!(update.block_number >= last_block, "BBO went back in time");
        last_block = update.block_number;
    }
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert_eq!(
        status.message(),
        stalled_market_message(SEND_TIMEOUT_MS, last_block)
    );
}

/// The same rule where a supervised body picks its last status: a stream
/// the sweeper ends while its producer is being polled (on a server, from
/// another thread) ends with the status the sweeper logged, whatever the
/// producer then yields. A market relay whose ring receiver the end let go
/// of, or whose engine stopped meanwhile, yields UNAVAILABLE or stops; a
/// stream nobody ended keeps its producer's own status.
#[tokio::test]
async fn a_stream_ended_while_its_producer_is_polled_ends_with_the_logged_status() {
    let flow = Supervisor::unswept();
    let stalled = || Status::deadline_exceeded(stalled_market_message(1_000, 7));
    for producer_end in [Some(Status::unavailable("the market engine stopped")), None] {
        let slot = flow.watch("market", "l4updates", None, None).unwrap();
        let sweeper = Arc::clone(&slot);
        let mut producer_end = Some(producer_end);
        let producer = futures_util::stream::poll_fn(move |_| {
            sweeper.end(EndReason::Stall, stalled());
            Poll::Ready(producer_end.take().flatten().map(Err::<(), _>))
        });
        let mut body = Watched::new(producer, slot, |()| Measured::default());
        let status = body.next().await.unwrap().unwrap_err();
        assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
        assert_eq!(status.message(), stalled().message());
        assert!(body.next().await.is_none(), "a second end");
    }
    let slot = flow.watch("market", "l4updates", None, None).unwrap();
    let producer = futures_util::stream::iter([Err::<(), _>(Status::unavailable("stale"))]);
    let mut body = Watched::new(producer, slot, |()| Measured::default());
    let status = body.next().await.unwrap().unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (Code::Unavailable, "stale")
    );
}

/// A reader process that stopped (SIGSTOP) while its kernel still takes
/// bytes holds a light stream as long as the socket buffers last. The
/// server PINGs a connection that sent nothing for `keepalive_ms` and
/// closes it when nothing answers within as long again: the stopped
/// client's `StreamBbo` ends within about twice the setting. The client is
/// grpcio (pinned, in the tests' Python environment) in a process of its
/// own; the test stops and kills it by its PID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_grpc_reader_process_is_let_go_within_the_keepalive_bound() {
    let python = super::python::venv_named(super::python::APTOS_VENV, &super::python::APTOS_CLIENT);
    let server = keepalive_server().await;
    let request = prost::Message::encode_to_vec(&pb::BboRequest {
        coins: vec!["BTC".into()],
    });
    let hex: String = request.iter().map(|b| format!("{b:02x}")).collect();
    let script = r#"import sys, time, grpc
addr, key, request = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3])
channel = grpc.insecure_channel(addr)
call = channel.unary_stream(
    "/venue_l1_gateway.v3.MarketStreaming/StreamBbo",
    request_serializer=lambda b: b,
    response_deserializer=lambda b: b,
)
# Kept: a response iterator let go of cancels its call.
stream = call(request, metadata=[("x-api-key", key)])
next(stream)
print("opened", flush=True)
while True:
    time.sleep(60)
"#;
    let args = [
        server.running.grpc_addr.to_string(),
        server.key.clone(),
        hex,
    ];
    stop_and_wait(&server, &python, script, &args).await;
}

/// The same over the exchange's WebSocket API: a stopped reader of `bbo`
/// answers no WebSocket Ping, and the server closes its connection (4005)
/// within about twice `keepalive_ms`. The client is the `websocket-client`
/// package the exchange's Python SDK uses (pinned with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_websocket_reader_process_is_let_go_within_the_keepalive_bound() {
    let python = super::python::venv(&[super::python::HYPERLIQUID_SDK]);
    let server = keepalive_server().await;
    let script = r#"import sys, time, websocket
ws = websocket.create_connection(sys.argv[1])
ws.send('{"method":"subscribe","subscription":{"type":"bbo","coin":"BTC"}}')
ws.recv()
ws.recv()
print("opened", flush=True)
while True:
    time.sleep(60)
"#;
    let args = [format!(
        "ws://{}/{}/ws",
        server.running.http_addr, server.key
    )];
    stop_and_wait(&server, &python, script, &args).await;
}

/// Keepalive of the tests: half a second.
const KEEPALIVE_MS: u64 = 500;

async fn keepalive_server() -> TestServer {
    let server = TestServer::start(&super::harness::real("btc-985148182"), |a| {
        a.keepalive_ms = Some(KEEPALIVE_MS);
    })
    .await;
    ready(&server).await;
    server
}

/// Runs `script` with `python` and `args` as a reader process, waits for it
/// to print `opened` (its stream open), stops it (SIGSTOP) and waits for the
/// server to end its stream: within twice the keepalive and some slack.
async fn stop_and_wait(
    server: &TestServer,
    python: &std::path::Path,
    script: &str,
    args: &[String],
) {
    use std::io::BufRead as _;
    let script_dir = tempfile::tempdir().unwrap();
    let path = script_dir.path().join("reader.py");
    std::fs::write(&path, script).unwrap();
    let mut child = Reader(
        std::process::Command::new(python)
            .arg(&path)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the reader"),
    );
    let pid = child.0.id().to_string();
    let mut out = std::io::BufReader::new(child.0.stdout.take().unwrap());
    let opened = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        out.read_line(&mut line).map(|_| line)
    });
    let line = tokio::time::timeout(Duration::from_secs(60), opened)
        .await
        .expect("the reader opened its stream in time")
        .unwrap()
        .unwrap();
    assert_eq!(line.trim(), "opened");
    let series = "l1gate_account_open_streams{account=\"tests\"}";
    assert_eq!(sample(&metrics(server).await, series), 1);
    let stop = std::process::Command::new("kill")
        .args(["-STOP", "--", &pid])
        .status()
        .unwrap();
    assert!(stop.success());
    let stopped = Instant::now();
    while sample(&metrics(server).await, series) != 0 {
        assert!(
            stopped.elapsed() < Duration::from_millis(KEEPALIVE_MS * 2 + 5_000),
            "the stopped reader's stream still open after {:?}",
            stopped.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(child);
}

/// A reader process this test started, killed (by its PID) and reaped
/// when the test ends, passing or failing.
struct Reader(std::process::Child);

impl Drop for Reader {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

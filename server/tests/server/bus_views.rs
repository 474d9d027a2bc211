//! An edge's market against the node host's, over a real NATS JetStream
//! server: an edge started while the node writes begins from the engine
//! checkpoint the publisher put on the bus, and from then on every market
//! view it streams equals the node host's stream of the same subscription,
//! frame for frame (over gRPC and the exchange's WebSocket API), and its
//! candle history (primed from the bus before the
//! checkpoint) answers Info's `candleSnapshot` as the node host does. The
//! checkpoint it copied replays with `l1gate replay --checkpoint`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prost_reflect::DescriptorPool;
use proto::market_streaming_client::MarketStreamingClient;
use proto::v3 as pb;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::bus::{Edge, GrowingNode, Nats, publisher};
use super::harness::TestServer;
use super::market_views::{actors, collect, json, without};
use super::standin::{HttpReply, post_json};

const WAIT: Duration = Duration::from_secs(60);

/// Where a frame sits: its block (or, for mids, its time).
fn position(frame: &Value) -> i64 {
    frame
        .get("block_number")
        .or_else(|| frame.get("snapshot").and_then(|s| s.get("block_number")))
        .or_else(|| frame.get("diff").and_then(|d| d.get("block_number")))
        .or_else(|| frame.get("time"))
        .and_then(Value::as_i64)
        .unwrap_or_else(|| panic!("no position in {frame}"))
}

/// Numbering a subscriber's own frames carry: not part of the comparison.
const NUMBERING: [&str; 3] = ["sequence", "seq", "prev_seq"];

/// Every block-derived view, subscribed the same way on `addr`.
async fn subscribe_all(
    addr: std::net::SocketAddr,
    key: &str,
    user: &str,
    builder: &str,
    done: &Arc<AtomicBool>,
) -> Vec<(&'static str, JoinHandle<Vec<Value>>)> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = MarketStreamingClient::new(channel).max_decoding_message_size(256 << 20);
    let pool = Arc::new(DescriptorPool::decode(proto::FILE_DESCRIPTOR_SET).unwrap());
    let coins = vec!["BTC".to_owned(), "ETH".to_owned()];
    let mut views = Vec::new();
    macro_rules! open {
        ($name:literal, $rpc:ident, $message:literal, $request:expr) => {{
            let mut request = tonic::Request::new($request);
            request
                .metadata_mut()
                .insert("x-api-key", key.parse().unwrap());
            let stream = client.$rpc(request).await.unwrap().into_inner();
            let frames = collect(stream, done.clone());
            let pool = pool.clone();
            views.push((
                $name,
                tokio::spawn(async move {
                    frames
                        .await
                        .unwrap()
                        .iter()
                        .map(|m| without(json(&pool, $message, m), &NUMBERING))
                        .collect()
                }),
            ));
        }};
    }
    open!(
        "bbo",
        stream_bbo,
        "BboUpdate",
        pb::BboRequest {
            coins: coins.clone()
        }
    );
    open!(
        "l2book",
        stream_l2_book,
        "L2BookUpdate",
        pb::L2BookRequest {
            coin: "BTC".into(),
            n_levels: Some(5),
            ..pb::L2BookRequest::default()
        }
    );
    open!(
        "l2diff",
        stream_l2_book_diff,
        "L2BookDiffUpdate",
        pb::L2BookDiffRequest {
            coins: coins.clone(),
            n_levels: Some(5),
            ..pb::L2BookDiffRequest::default()
        }
    );
    open!(
        "l4book",
        stream_l4_book,
        "L4BookUpdate",
        pb::L4BookRequest {
            coin: "ETH".into(),
            ..pb::L4BookRequest::default()
        }
    );
    open!(
        "l4updates",
        stream_l4_order_updates,
        "L4OrderUpdate",
        pb::L4OrderUpdatesRequest {
            coins: vec!["BTC".into()],
            ..pb::L4OrderUpdatesRequest::default()
        }
    );
    open!(
        "tpsl",
        stream_tpsl_updates,
        "TpslUpdate",
        pb::TpslUpdatesRequest::default()
    );
    open!(
        "trades",
        stream_trades,
        "TradesUpdate",
        pb::TradesRequest {
            coins: coins.clone()
        }
    );
    open!(
        "all fills",
        stream_all_fills,
        "FillsUpdate",
        pb::AllFillsRequest::default()
    );
    open!(
        "user fills",
        stream_user_fills,
        "FillsUpdate",
        pb::UserFillsRequest {
            user: user.to_owned(),
            ..pb::UserFillsRequest::default()
        }
    );
    open!(
        "builder fills",
        stream_builder_fills,
        "FillsUpdate",
        pb::BuilderFillsRequest {
            builder: builder.to_owned(),
            ..pb::BuilderFillsRequest::default()
        }
    );
    open!(
        "liquidation fills",
        stream_liquidation_fills,
        "FillsUpdate",
        pb::LiquidationFillsRequest::default()
    );
    open!(
        "order updates",
        stream_order_updates,
        "OrderStatusesUpdate",
        pb::OrderUpdatesRequest {
            users: vec![user.to_owned()]
        }
    );
    open!(
        "mids",
        stream_all_mids,
        "AllMidsUpdate",
        pb::AllMidsRequest {}
    );
    open!(
        "candles",
        stream_candle,
        "CandleUpdate",
        pb::CandleRequest {
            coin: "BTC".into(),
            interval: "1s".into(),
        }
    );
    views
}

/// The exchange's WebSocket API on `addr`: an `l2Book` and a `trades`
/// subscription, every message collected (per channel) until `done` is set
/// and the socket is quiet.
async fn ws_collect(
    addr: std::net::SocketAddr,
    key: &str,
    done: &Arc<AtomicBool>,
) -> JoinHandle<Vec<(String, Value)>> {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;
    let (mut socket, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/{key}/ws"))
        .await
        .unwrap();
    for subscription in [
        json!({"type": "l2Book", "coin": "ETH", "nLevels": 5}),
        json!({"type": "trades", "coin": "ETH"}),
    ] {
        let message = json!({"method": "subscribe", "subscription": subscription});
        socket
            .send(Message::Text(message.to_string().into()))
            .await
            .unwrap();
    }
    let done = done.clone();
    tokio::spawn(async move {
        let mut out = Vec::new();
        loop {
            match tokio::time::timeout(Duration::from_millis(300), socket.next()).await {
                Ok(Some(Ok(Message::Text(text)))) => {
                    let message: Value = serde_json::from_str(&text).unwrap();
                    let channel = message["channel"].as_str().unwrap().to_owned();
                    if channel != "subscriptionResponse" {
                        out.push((channel, message["data"].clone()));
                    }
                }
                Ok(Some(Ok(_))) => {}
                Ok(other) => panic!("the WebSocket ended: {other:?}"),
                Err(_) if done.load(Ordering::SeqCst) => return out,
                Err(_) => {}
            }
        }
    })
}

/// A WebSocket message's block time (`trades`: its first trade's).
fn ws_time(data: &Value) -> i64 {
    data.get("time")
        .or_else(|| data.get(0).and_then(|trade| trade.get("time")))
        .and_then(Value::as_i64)
        .unwrap_or_else(|| panic!("no time in {data}"))
}

/// The same Info request (`body`) answered by the node host and by the
/// edge, with the host's key.
async fn info_of_both(host: &TestServer, edge: &Edge, body: &str) -> (HttpReply, HttpReply) {
    let key = Some(host.key.as_str());
    let from_host = post_json(host.running.http_addr, "/info", key, body).await;
    let from_edge = post_json(edge.running.server.http_addr, "/info", key, body).await;
    (from_host, from_edge)
}

/// Waits until the node wrote everything and both engines folded it all;
/// the last block.
async fn settled(node: &GrowingNode, heights: &[&dyn Fn() -> u64]) -> u64 {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut last = (Vec::new(), std::time::Instant::now());
    loop {
        let now: Vec<u64> = heights.iter().map(|height| height()).collect();
        if now != last.0 {
            last = (now.clone(), std::time::Instant::now());
        } else if node.finished()
            && last.1.elapsed() > Duration::from_millis(800)
            && now.windows(2).all(|pair| pair[0] == pair[1])
        {
            return now[0];
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the engines did not settle: heights {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edges_market_views_candles_and_info_equal_the_node_hosts() {
    let nats = Nats::start();
    let node = GrowingNode::start(420, 150, Duration::from_millis(25));
    let host = publisher(node.path(), &nats.url()).await;
    // An operator's key, for the status page.
    let mut keys = access::keys::KeysFile::load(&host.keys_file).unwrap();
    let (admin, _) = keys.add_key("ops", 0).unwrap();
    keys.set_role("ops", access::keys::Role::Admin).unwrap();
    keys.save(&host.keys_file).unwrap();
    let edge = Edge::start(&nats.url(), &host.keys_file).await.unwrap();
    // It started from a checkpoint of the publisher's, taken while the
    // node was still writing: at the earliest the one taken on catching up
    // with the initial 150 blocks, at their last (first + 149).
    let started = edge.running.started_from;
    let first = node.first_block();
    assert!(
        started >= first + 149,
        "edge started from block {started}, the node's first is {first}"
    );
    let bus: Value = serde_json::from_str(
        &super::access_support::http_get(edge.running.server.http_addr, "/healthz", None)
            .await
            .text,
    )
    .unwrap();
    assert_eq!(bus["bus"]["checkpoint"]["block"], started, "{bus:#}");
    // The operator status page shows the bus among the upstreams.
    let status = super::access_support::http_get(
        edge.running.server.http_addr,
        "/status.json",
        Some(&admin),
    )
    .await;
    assert_eq!(status.status, 200, "{}", status.text);
    let status: Value = serde_json::from_str(&status.text).unwrap();
    let row = status["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["name"] == "bus (edge)")
        .unwrap_or_else(|| panic!("no bus row: {status:#}"))
        .clone();
    assert_eq!(row["status"], "ok", "{row}");
    assert!(
        row["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("checkpoint at block {started}")),
        "{row}"
    );

    // Both engines past their start (the edge's folds its copy after the
    // checkpoint first).
    for engine in [&host.running.engine, &edge.running.server.engine] {
        let deadline = tokio::time::Instant::now() + WAIT;
        while !engine.status().ready() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "an engine never caught up"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let acts = actors(node.path());
    let done = Arc::new(AtomicBool::new(false));
    let on_host = subscribe_all(
        host.running.grpc_addr,
        &host.key,
        &acts.user,
        &acts.builder,
        &done,
    )
    .await;
    let on_edge = subscribe_all(
        edge.running.server.grpc_addr,
        &host.key,
        &acts.user,
        &acts.builder,
        &done,
    )
    .await;
    let ws_on_host = ws_collect(host.running.http_addr, &host.key, &done).await;
    let ws_on_edge = ws_collect(edge.running.server.http_addr, &host.key, &done).await;
    let host_engine = host.running.engine.status().clone();
    let edge_engine = edge.running.server.engine.status().clone();
    let last = settled(&node, &[&|| host_engine.height(), &|| edge_engine.height()]).await;
    assert!(
        last > started + 100,
        "too few blocks after the edge started"
    );
    done.store(true, Ordering::SeqCst);

    let mut compared = 0;
    for ((view, host_frames), (_, edge_frames)) in on_host.into_iter().zip(on_edge) {
        let host_frames = host_frames.await.unwrap();
        let edge_frames = edge_frames.await.unwrap();
        // From the first block both subscriptions had opened by on.
        let opened = |frames: &[Value]| frames.first().map_or(i64::MAX, position);
        let from = opened(&host_frames).max(opened(&edge_frames));
        let mut host_frames: Vec<Value> = host_frames
            .into_iter()
            .filter(|f| position(f) > from)
            .collect();
        let mut edge_frames: Vec<Value> = edge_frames
            .into_iter()
            .filter(|f| position(f) > from)
            .collect();
        if view == "candles" {
            // Throttled by when each subscription opened: the final states
            // of closed buckets are what both must agree on.
            host_frames.retain(|f| f["closed"] == true);
            edge_frames.retain(|f| f["closed"] == true);
        }
        assert_eq!(
            edge_frames.len(),
            host_frames.len(),
            "{view}: frame count on the edge vs the node host after {from}"
        );
        for (index, (got, want)) in edge_frames.iter().zip(&host_frames).enumerate() {
            assert_eq!(got, want, "{view}: frame {index} differs");
        }
        if !host_frames.is_empty() {
            compared += 1;
        }
    }
    // Liquidations and builder fills may be rare in a short run; the rest
    // always have frames.
    assert!(
        compared >= 11,
        "only {compared} views had frames to compare"
    );

    // The exchange's WebSocket API on the edge: the same messages.
    let (ws_host, ws_edge) = (ws_on_host.await.unwrap(), ws_on_edge.await.unwrap());
    for channel in ["l2Book", "trades"] {
        let of = |messages: &[(String, Value)]| -> Vec<Value> {
            messages
                .iter()
                .filter(|(c, _)| c == channel)
                .map(|(_, data)| data.clone())
                .collect()
        };
        let (on_host, on_edge) = (of(&ws_host), of(&ws_edge));
        let opened = |messages: &[Value]| messages.first().map_or(i64::MAX, ws_time);
        let from = opened(&on_host).max(opened(&on_edge));
        let after = |messages: Vec<Value>| -> Vec<Value> {
            messages.into_iter().filter(|m| ws_time(m) > from).collect()
        };
        let (on_host, on_edge) = (after(on_host), after(on_edge));
        // Trades come in only some blocks: fewer messages, but some.
        let least = if channel == "trades" { 3 } else { 10 };
        assert!(
            on_host.len() >= least,
            "{channel}: {} messages",
            on_host.len()
        );
        assert_eq!(on_edge, on_host, "{channel} over the WebSocket API");
    }

    // Candle history: the edge's store, primed from the bus up to its
    // checkpoint and fed by its engine after it, answers as the host's.
    for candles in [&host.running.candles, &edge.running.server.candles] {
        let deadline = tokio::time::Instant::now() + WAIT;
        while !matches!(candles.progress(), (block, _, true, _) if block >= last) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "candle store behind: {:?}",
                candles.progress()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let checkpoint = edge
        .state
        .path()
        .join("bus-checkpoints")
        .join(engine::checkpoint::file::file_name(started));
    let checkpoint_time =
        engine::checkpoint::file::Header::decode(&std::fs::read(&checkpoint).unwrap(), &checkpoint)
            .unwrap()
            .time_ms;
    // The coin traded most before the checkpoint: its candles there are the
    // edge's primed history.
    let mut early: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for path in super::market_views::files_named(node.path(), "node_fills") {
        for line in std::fs::read(&path).unwrap().split(|&b| b == b'\n') {
            if line.is_empty() {
                continue;
            }
            let envelope: Value = serde_json::from_slice(line).unwrap();
            if feeds::envelope::decode(line).unwrap().block_time_ms >= checkpoint_time - 2_000 {
                continue;
            }
            for event in envelope["events"].as_array().unwrap() {
                *early
                    .entry(event[1]["coin"].as_str().unwrap().to_owned())
                    .or_default() += 1;
            }
        }
    }
    let coin = early
        .into_iter()
        .max_by_key(|(_, fills)| *fills)
        .map(|(coin, _)| coin)
        .expect("no fills in the blocks before the checkpoint");
    for interval in ["1s", "1m", "5m"] {
        let body = json!({"type": "candleSnapshot",
                          "req": {"coin": coin, "interval": interval, "startTime": 0}})
        .to_string();
        let (from_host, from_edge) = info_of_both(&host, &edge, &body).await;
        assert_eq!(from_host.status, 200, "{}", from_host.text);
        assert_eq!(from_edge.status, 200, "{}", from_edge.text);
        if interval == "1s" {
            // A short run: 1s buckets only are sure to have closed, some of
            // them before the checkpoint.
            let candles: Value = serde_json::from_str(&from_host.text).unwrap();
            let closes: Vec<i64> = candles
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["T"].as_i64().unwrap())
                .collect();
            assert!(
                closes.iter().any(|&close| close < checkpoint_time),
                "{coin}: no candle before the checkpoint at {checkpoint_time}: {candles}"
            );
        }
        assert_eq!(
            from_edge.text, from_host.text,
            "{coin} {interval} candle history"
        );
    }
    // Books through Info too.
    let body = json!({"type": "l2Book", "coin": "ETH"}).to_string();
    let (from_host, from_edge) = info_of_both(&host, &edge, &body).await;
    assert_eq!(from_edge.status, 200, "{}", from_edge.text);
    assert_eq!(from_edge.text, from_host.text, "l2Book through Info");

    // The checkpoint the edge copied replays from the command line: the
    // fold goes on after its block exactly as a replay from the start.
    let replay = |extra: &[&std::ffi::OsStr]| -> Vec<Value> {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_l1gate"))
            .args([
                "replay",
                "--view",
                "l2book",
                "--coins",
                "ETH",
                "--n-levels",
                "5",
            ])
            .arg("--data")
            .arg(node.path())
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
            .split(|&b| b == b'\n')
            .filter(|line| !line.is_empty())
            .map(|line| serde_json::from_slice(line).unwrap())
            // After the first block: a replay opens with the book's state
            // there, changed or not.
            .filter(|frame| position(frame) > i64::try_from(started + 1).unwrap())
            .collect()
    };
    let resumed = replay(&["--checkpoint".as_ref(), checkpoint.as_os_str()]);
    let whole = replay(&[]);
    assert!(resumed.len() > 50, "{} frames", resumed.len());
    let differ = resumed.iter().zip(&whole).position(|(a, b)| a != b);
    assert!(
        differ.is_none() && resumed.len() == whole.len(),
        "replay --checkpoint vs from the start: {} vs {} frames; first difference at {differ:?}: \
         {:?} vs {:?}",
        resumed.len(),
        whole.len(),
        differ.map(|i| &resumed[i]),
        differ.map(|i| &whole[i]),
    );
}

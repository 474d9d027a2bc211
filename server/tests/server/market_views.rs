//! Every block-derived MarketStreaming view end to end against a live node
//! directory, checked frame by frame against `l1gate replay` of the same
//! blocks (the same fold code): the opening state equals replay's state at
//! the opening block, and every later frame equals replay's frame for that
//! block. Plus lagging subscribers, subscribe-during-flow continuity and the
//! staleness and configuration statuses.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use engine::replay::{ReplayOptions, ViewKind};
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};
use proto::market_streaming_client::MarketStreamingClient;
use proto::v3 as pb;
use serde_json::Value;
use tonic::Code;
use tonic::transport::Channel;

use super::harness::{TestServer, next};
use super::market_live::{client, live_node, ready};

const WAIT: Duration = Duration::from_secs(30);
const BLOCKS: u64 = 300;
const INITIAL: u64 = 60;

/// A received message as `l1gate replay` prints it: proto field names,
/// every field, enum names, 64-bit integers as numbers; nulls dropped.
pub fn json<M: Message>(pool: &DescriptorPool, name: &str, message: &M) -> Value {
    let desc = pool
        .get_message_by_name(&format!("venue_l1_gateway.v3.{name}"))
        .unwrap();
    let dynamic = DynamicMessage::decode(desc, message.encode_to_vec().as_slice()).unwrap();
    let options = SerializeOptions::new()
        .stringify_64_bit_integers(false)
        .use_proto_field_name(true)
        .skip_default_fields(false);
    clean(
        dynamic
            .serialize_with_options(serde_json::value::Serializer, &options)
            .unwrap(),
    )
}

/// Drops null members, recursively.
fn clean(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, clean(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(clean).collect()),
        other => other,
    }
}

/// Removes `keys` from an object (and from each entry of its `diffs`).
pub fn without(mut value: Value, keys: &[&str]) -> Value {
    if let Some(map) = value.as_object_mut() {
        for key in keys {
            map.remove(*key);
        }
        if let Some(Value::Array(diffs)) = map.get_mut("diffs") {
            for diff in diffs {
                if let Some(entry) = diff.as_object_mut() {
                    for key in keys {
                        entry.remove(*key);
                    }
                }
            }
        }
    }
    value
}

pub fn replay(dir: &Path, view: ViewKind, tune: impl FnOnce(&mut ReplayOptions)) -> Vec<Value> {
    let mut opts = ReplayOptions::new(dir, view);
    tune(&mut opts);
    let mut out = Vec::new();
    engine::replay::run(&opts, &mut out, &mut |_| {}).unwrap();
    out.split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_slice(line).unwrap())
        .collect()
}

fn block_of(value: &Value) -> i64 {
    value
        .get("block_number")
        .or_else(|| value.get("snapshot").and_then(|s| s.get("block_number")))
        .or_else(|| value.get("diff").and_then(|d| d.get("block_number")))
        .and_then(Value::as_i64)
        .unwrap_or_else(|| panic!("no block number in {value}"))
}

/// Replay's frames of the blocks after `after`, up to `last`.
fn after(frames: &[Value], after: i64, last: i64) -> Vec<Value> {
    frames
        .iter()
        .filter(|f| block_of(f) > after && block_of(f) <= last)
        .cloned()
        .collect()
}

fn assert_frames_equal(view: &str, live: &[Value], expected: &[Value]) {
    assert_eq!(
        live.len(),
        expected.len(),
        "{view}: {} live frames vs {} replayed",
        live.len(),
        expected.len()
    );
    for (index, (got, want)) in live.iter().zip(expected).enumerate() {
        assert_eq!(got, want, "{view}: frame {index} differs");
    }
}

/// Collects a stream's messages until `done` is set and the stream is quiet.
pub fn collect<M: Send + 'static>(
    mut stream: tonic::Streaming<M>,
    done: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<M>> {
    tokio::spawn(async move {
        let mut out = Vec::new();
        loop {
            match tokio::time::timeout(Duration::from_millis(300), stream.message()).await {
                Ok(Ok(Some(message))) => out.push(message),
                Ok(Ok(None)) => panic!("stream ended without a status"),
                Ok(Err(status)) => panic!("stream failed: {status:?}"),
                Err(_) if done.load(Ordering::SeqCst) => return out,
                Err(_) => {}
            }
        }
    })
}

/// Addresses worth filtering on in the data the live node will write: the
/// busiest user, a builder and whether liquidations happen.
pub struct Actors {
    pub user: String,
    pub builder: String,
}

pub fn actors(dir: &Path) -> Actors {
    let mut users: BTreeMap<String, usize> = BTreeMap::new();
    let mut builders: BTreeMap<String, usize> = BTreeMap::new();
    for path in files_named(dir, "node_fills") {
        for line in std::fs::read(&path).unwrap().split(|&b| b == b'\n') {
            if line.is_empty() {
                continue;
            }
            let envelope: Value = serde_json::from_slice(line).unwrap();
            for event in envelope["events"].as_array().unwrap() {
                *users
                    .entry(event[0].as_str().unwrap().to_owned())
                    .or_default() += 1;
                if let Some(builder) = event[1].get("builder").and_then(Value::as_str) {
                    *builders.entry(builder.to_owned()).or_default() += 1;
                }
            }
        }
    }
    let busiest = |map: BTreeMap<String, usize>| {
        map.into_iter()
            .max_by_key(|(_, n)| *n)
            .map(|(address, _)| address)
            .unwrap()
    };
    Actors {
        user: busiest(users),
        builder: busiest(builders),
    }
}

pub fn files_named(dir: &Path, part: &str) -> Vec<std::path::PathBuf> {
    super::market_live::files(dir)
        .into_iter()
        .filter(|path| path.to_string_lossy().contains(part))
        .collect()
}

/// Waits until the writer appended every block and the engine folded it.
pub async fn settled(server: &TestServer, node: &super::market_live::LiveNode) -> i64 {
    let status = server.running.engine.status().clone();
    let mut last = (0, std::time::Instant::now());
    loop {
        let height = status.height();
        if height != last.0 {
            last = (height, std::time::Instant::now());
        } else if node.finished() && last.1.elapsed() > Duration::from_millis(600) {
            return i64::try_from(height).unwrap();
        }
        assert!(
            last.1.elapsed() < WAIT,
            "the engine stopped folding at {height}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An order book of keyed entries rebuilt from diffs (L4 updates, TP/SL).
fn rebuild(
    book: &mut BTreeMap<u64, Value>,
    frame: &Value,
    kinds: [&str; 3],
    update_replaces: bool,
) {
    let [add, update, remove] = kinds;
    for diff in frame["diffs"].as_array().unwrap() {
        let oid = diff["oid"].as_u64().unwrap();
        let entry = without(diff.clone(), &["diff_type", "reason"]);
        match diff["diff_type"].as_str().unwrap() {
            kind if kind == add => {
                book.insert(oid, entry);
            }
            kind if kind == update => {
                if update_replaces {
                    book.insert(oid, entry);
                } else {
                    let resting = book.get_mut(&oid).unwrap();
                    resting["sz"] = diff["sz"].clone();
                }
            }
            kind if kind == remove => {
                book.remove(&oid);
            }
            other => panic!("unexpected diff type {other}"),
        }
    }
}

fn keyed(frame: &Value) -> BTreeMap<u64, Value> {
    frame["diffs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["oid"].as_u64().unwrap(),
                without(d.clone(), &["diff_type", "reason"]),
            )
        })
        .collect()
}

fn levels_of(frame: &Value) -> Value {
    serde_json::json!({"bids": frame["bids"], "asks": frame["asks"]})
}

/// Checks `sequence` is 1, 2, 3, … across a subscriber's frames.
fn assert_sequenced(view: &str, sequences: impl Iterator<Item = u64>) {
    for (index, sequence) in sequences.enumerate() {
        assert_eq!(sequence, index as u64 + 1, "{view}: sequence gap");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)]
async fn every_view_matches_replay_of_the_same_blocks() {
    let node = live_node(BLOCKS, INITIAL, Duration::from_millis(15));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let acts = actors(node.dir.path());
    let pool = DescriptorPool::decode(proto::FILE_DESCRIPTOR_SET).unwrap();
    let mut c = client(&server).await;
    let done = Arc::new(AtomicBool::new(false));
    let coins = vec!["BTC".to_owned(), "ETH".to_owned()];

    macro_rules! open {
        ($rpc:ident, $request:expr) => {
            collect(
                c.$rpc(server.req($request)).await.unwrap().into_inner(),
                done.clone(),
            )
        };
    }
    let bbo = open!(
        stream_bbo,
        pb::BboRequest {
            coins: coins.clone()
        }
    );
    let l2book = open!(
        stream_l2_book,
        pb::L2BookRequest {
            coin: "BTC".into(),
            n_levels: Some(5),
            ..pb::L2BookRequest::default()
        }
    );
    let l2diff = open!(
        stream_l2_book_diff,
        pb::L2BookDiffRequest {
            coins: coins.clone(),
            n_levels: Some(5),
            ..pb::L2BookDiffRequest::default()
        }
    );
    let l4book = open!(
        stream_l4_book,
        pb::L4BookRequest {
            coin: "ETH".into(),
            ..pb::L4BookRequest::default()
        }
    );
    let l4updates = open!(
        stream_l4_order_updates,
        pb::L4OrderUpdatesRequest {
            coins: vec!["BTC".into()],
            ..pb::L4OrderUpdatesRequest::default()
        }
    );
    let tpsl = open!(stream_tpsl_updates, pb::TpslUpdatesRequest::default());
    let trades = open!(
        stream_trades,
        pb::TradesRequest {
            coins: coins.clone()
        }
    );
    let all_fills = open!(stream_all_fills, pb::AllFillsRequest::default());
    let user_fills = open!(
        stream_user_fills,
        pb::UserFillsRequest {
            // Mixed case: matched case-insensitively.
            user: acts.user.to_uppercase().replacen("0X", "0x", 1),
            ..pb::UserFillsRequest::default()
        }
    );
    let builder_fills = open!(
        stream_builder_fills,
        pb::BuilderFillsRequest {
            builder: acts.builder.clone(),
            ..pb::BuilderFillsRequest::default()
        }
    );
    let liquidations = open!(
        stream_liquidation_fills,
        pb::LiquidationFillsRequest::default()
    );
    let candles = open!(
        stream_candle,
        pb::CandleRequest {
            coin: "BTC".into(),
            interval: "1s".into(),
        }
    );

    let last = settled(&server, &node).await;
    done.store(true, Ordering::SeqCst);
    let dir = node.dir.path();

    // BBO: the opening frames are replay's newest state per coin at the
    // opening block; later frames are replay's frames.
    let live: Vec<Value> = bbo
        .await
        .unwrap()
        .iter()
        .map(|m| json(&pool, "BboUpdate", m))
        .collect();
    let opened = block_of(&live[0]);
    let expected = replay(dir, ViewKind::Bbo, |o| o.selection.coins.clone_from(&coins));
    for coin in &coins {
        let opening = live
            .iter()
            .take_while(|f| block_of(f) == opened)
            .find(|f| f["coin"] == coin.as_str())
            .unwrap();
        let state = expected
            .iter()
            .rfind(|f| f["coin"] == coin.as_str() && block_of(f) <= opened)
            .unwrap();
        assert_eq!(
            without(opening.clone(), &["time", "block_number"]),
            without(state.clone(), &["time", "block_number"]),
            "bbo: opening of {coin}"
        );
    }
    let live_after: Vec<Value> = live
        .iter()
        .filter(|f| block_of(f) > opened)
        .cloned()
        .collect();
    assert!(!live_after.is_empty(), "bbo: no frame after the opening");
    assert_frames_equal("bbo", &live_after, &after(&expected, opened, last));

    // L2 book.
    let live: Vec<Value> = l2book
        .await
        .unwrap()
        .iter()
        .map(|m| json(&pool, "L2BookUpdate", m))
        .collect();
    let opened = block_of(&live[0]);
    let expected = replay(dir, ViewKind::L2Book, |o| {
        o.selection.coins = vec!["BTC".into()];
        o.selection.n_levels = Some(5);
    });
    let state = expected.iter().rfind(|f| block_of(f) <= opened).unwrap();
    assert_eq!(levels_of(&live[0]), levels_of(state), "l2book: opening");
    assert!(live.len() > 1, "l2book: no frame after the opening");
    assert_frames_equal("l2book", &live[1..], &after(&expected, opened, last));
    let final_btc = levels_of(expected.last().unwrap());

    // L2 diffs: the same changes as replay, numbered per coin for this
    // subscriber, and the chain rebuilds replay's final book.
    let messages = l2diff.await.unwrap();
    let mut seqs: BTreeMap<String, u64> = BTreeMap::new();
    for message in &messages {
        for diff in &message.diffs {
            let seq = seqs.entry(diff.coin.clone()).or_insert(0);
            assert_eq!(diff.prev_seq, *seq, "l2diff: prev_seq of {}", diff.coin);
            assert_eq!(diff.snapshot, *seq == 0);
            *seq += 1;
            assert_eq!(diff.seq, *seq, "l2diff: seq of {}", diff.coin);
        }
    }
    let live: Vec<Value> = messages
        .iter()
        .map(|m| without(json(&pool, "L2BookDiffUpdate", m), &["seq", "prev_seq"]))
        .collect();
    let opened = block_of(&live[0]);
    let expected: Vec<Value> = replay(dir, ViewKind::L2Diff, |o| {
        o.selection.coins.clone_from(&coins);
        o.selection.n_levels = Some(5);
    })
    .into_iter()
    .map(|f| without(f, &["seq", "prev_seq"]))
    .collect();
    assert_frames_equal("l2diff", &live[1..], &after(&expected, opened, last));
    let mut book: BTreeMap<(String, &str, String), Value> = BTreeMap::new();
    for frame in &live {
        for diff in frame["diffs"].as_array().unwrap() {
            let coin = diff["coin"].as_str().unwrap().to_owned();
            if diff["snapshot"] == true {
                book.retain(|(c, ..), _| *c != coin);
            }
            for side in ["bids", "asks"] {
                for level in diff[side].as_array().unwrap() {
                    let px = level["px"].as_str().unwrap().to_owned();
                    if level["sz"] == "0.0" {
                        book.remove(&(coin.clone(), side, px));
                    } else {
                        book.insert((coin.clone(), side, px), level.clone());
                    }
                }
            }
        }
    }
    let rebuilt_side = |side: &str| {
        let mut levels: Vec<&Value> = book
            .iter()
            .filter(|((c, s, _), _)| c == "BTC" && *s == side)
            .map(|(_, level)| level)
            .collect();
        levels.sort_by(|a, b| {
            let pa: f64 = a["px"].as_str().unwrap().parse().unwrap();
            let pb: f64 = b["px"].as_str().unwrap().parse().unwrap();
            if side == "bids" {
                pb.total_cmp(&pa)
            } else {
                pa.total_cmp(&pb)
            }
        });
        Value::Array(levels.into_iter().cloned().collect())
    };
    assert_eq!(
        serde_json::json!({"bids": rebuilt_side("bids"), "asks": rebuilt_side("asks")}),
        final_btc,
        "l2diff: the chain does not rebuild the final BTC book"
    );

    // L4 book: a snapshot at the opening block, then replay's per-block
    // diffs with the node's events byte for byte.
    let messages = l4book.await.unwrap();
    let Some(pb::l4_book_update::Update::Snapshot(snapshot)) = &messages[0].update else {
        panic!("l4book: the first frame is not a snapshot");
    };
    let opened = snapshot.block_number;
    let live: Vec<Value> = messages[1..]
        .iter()
        .map(|m| {
            let Some(pb::l4_book_update::Update::Diff(diff)) = &m.update else {
                panic!("l4book: a second snapshot");
            };
            serde_json::json!({"diff": {
                "time": diff.time,
                "block_number": diff.block_number,
                "data": serde_json::from_slice::<Value>(&diff.data).unwrap(),
            }})
        })
        .collect();
    let expected = replay(dir, ViewKind::L4Book, |o| {
        o.selection.coins = vec!["ETH".into()]
    });
    assert!(!live.is_empty(), "l4book: no diff");
    assert_frames_equal("l4book", &live, &after(&expected, opened, last));

    // L4 order updates: the opening snapshot is replay's book at the opening
    // block; later frames are replay's, numbered 1, 2, 3, …
    let messages = l4updates.await.unwrap();
    assert_sequenced("l4updates", messages.iter().map(|m| m.sequence));
    let live: Vec<Value> = messages
        .iter()
        .map(|m| without(json(&pool, "L4OrderUpdate", m), &["sequence"]))
        .collect();
    let opened = block_of(&live[0]);
    let expected: Vec<Value> = replay(dir, ViewKind::L4Updates, |o| {
        o.selection.coins = vec!["BTC".into()]
    })
    .into_iter()
    .map(|f| without(f, &["sequence"]))
    .collect();
    let kinds = [
        "L4_ORDER_DIFF_TYPE_NEW",
        "L4_ORDER_DIFF_TYPE_UPDATE",
        "L4_ORDER_DIFF_TYPE_REMOVE",
    ];
    let mut state = BTreeMap::new();
    for frame in expected.iter().filter(|f| block_of(f) <= opened) {
        rebuild(&mut state, frame, kinds, false);
    }
    assert_eq!(keyed(&live[0]), state, "l4updates: opening snapshot");
    assert_frames_equal("l4updates", &live[1..], &after(&expected, opened, last));

    // TP/SL, every perp.
    let messages = tpsl.await.unwrap();
    assert_sequenced("tpsl", messages.iter().map(|m| m.sequence));
    let live: Vec<Value> = messages
        .iter()
        .map(|m| without(json(&pool, "TpslUpdate", m), &["sequence"]))
        .collect();
    let opened = block_of(&live[0]);
    let expected: Vec<Value> = replay(dir, ViewKind::Tpsl, |_| {})
        .into_iter()
        .map(|f| without(f, &["sequence"]))
        .collect();
    let kinds = [
        "TPSL_DIFF_TYPE_ADD",
        "TPSL_DIFF_TYPE_UPDATE",
        "TPSL_DIFF_TYPE_REMOVE",
    ];
    let mut state = BTreeMap::new();
    for frame in expected.iter().filter(|f| block_of(f) <= opened) {
        rebuild(&mut state, frame, kinds, true);
    }
    assert_eq!(keyed(&live[0]), state, "tpsl: opening snapshot");
    assert!(live.len() > 1, "tpsl: no frame after the opening");
    assert_frames_equal("tpsl", &live[1..], &after(&expected, opened, last));

    // Live-only views: what arrived is exactly replay's frames from the
    // first one received to the end.
    let suffix = |view: &str, live: &[Value], expected: &[Value]| {
        assert!(!live.is_empty(), "{view}: nothing arrived");
        let first = expected
            .iter()
            .position(|f| *f == live[0])
            .unwrap_or_else(|| panic!("{view}: first live frame not in replay"));
        let tail: Vec<Value> = expected[first..]
            .iter()
            .filter(|f| block_of(f) <= last)
            .cloned()
            .collect();
        assert_frames_equal(view, live, &tail);
    };
    let live: Vec<Value> = trades
        .await
        .unwrap()
        .iter()
        .map(|m| json(&pool, "TradesUpdate", m))
        .collect();
    suffix(
        "trades",
        &live,
        &replay(dir, ViewKind::Trades, |o| {
            o.selection.coins.clone_from(&coins)
        }),
    );

    let fills = |messages: Vec<pb::FillsUpdate>, view: &str| {
        assert_sequenced(view, messages.iter().map(|m| m.sequence));
        messages
            .iter()
            .map(|m| without(json(&pool, "FillsUpdate", m), &["sequence"]))
            .collect::<Vec<Value>>()
    };
    let strip = |frames: Vec<Value>| {
        frames
            .into_iter()
            .map(|f| without(f, &["sequence"]))
            .collect::<Vec<Value>>()
    };
    let all = strip(replay(dir, ViewKind::Fills, |_| {}));
    suffix(
        "all fills",
        &fills(all_fills.await.unwrap(), "all fills"),
        &all,
    );
    suffix(
        "user fills",
        &fills(user_fills.await.unwrap(), "user fills"),
        &strip(replay(dir, ViewKind::Fills, |o| {
            o.selection.users = vec![acts.user.clone()]
        })),
    );
    suffix(
        "builder fills",
        &fills(builder_fills.await.unwrap(), "builder fills"),
        &strip(replay(dir, ViewKind::Fills, |o| {
            o.selection.builder = Some(acts.builder.clone());
        })),
    );
    // Liquidation fills: replay has no liquidation selector; the test
    // filters every fill itself.
    let live = fills(liquidations.await.unwrap(), "liquidation fills");
    let mut expected_liquidations = Vec::new();
    for frame in &all {
        let kept: Vec<Value> = frame["fills"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|fill| fill.get("liquidation").is_some_and(|l| !l.is_null()))
            .cloned()
            .collect();
        if !kept.is_empty() {
            let mut frame = frame.clone();
            frame["fills"] = Value::Array(kept);
            expected_liquidations.push(frame);
        }
    }
    if live.is_empty() {
        assert!(
            after(&expected_liquidations, block_of(&all[0]), last).is_empty()
                || block_of(expected_liquidations.last().unwrap())
                    <= i64::try_from(INITIAL).unwrap(),
            "liquidation fills: none arrived though replay has some"
        );
    } else {
        suffix("liquidation fills", &live, &expected_liquidations);
    }

    // Candles: throttling depends on when a subscription opened, so compare
    // the final states of closed buckets, which do not.
    let live: Vec<Value> = candles
        .await
        .unwrap()
        .iter()
        .map(|m| json(&pool, "CandleUpdate", m))
        .collect();
    let closed_live: Vec<Value> = live
        .iter()
        .filter(|f| f["closed"] == true)
        .cloned()
        .collect();
    assert!(!closed_live.is_empty(), "candles: no bucket closed");
    let expected: Vec<Value> = replay(dir, ViewKind::Candles, |o| {
        o.selection.coins = vec!["BTC".into()];
        o.selection.interval = Some("1s".into());
    })
    .into_iter()
    .filter(|f| f["closed"] == true)
    .collect();
    suffix("closed candles", &closed_live, &expected);
    let mut open_times: Vec<i64> = live
        .iter()
        .map(|f| f["open_time"].as_i64().unwrap())
        .collect();
    let sorted = {
        let mut s = open_times.clone();
        s.sort_unstable();
        s
    };
    assert_eq!(open_times, sorted, "candles: a bucket went back in time");
    open_times.dedup();
}

/// A client whose HTTP/2 windows are tiny, so a reader that stops reading
/// stops the server's relay quickly.
async fn tight_client(server: &TestServer) -> MarketStreamingClient<Channel> {
    let channel = Channel::from_shared(format!("http://{}", server.running.grpc_addr))
        .unwrap()
        .initial_stream_window_size(Some(1024))
        .initial_connection_window_size(Some(1024))
        .connect()
        .await
        .unwrap();
    MarketStreamingClient::new(channel)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_incremental_subscriber_is_aborted_and_a_fast_one_misses_nothing() {
    let node = live_node(3000, 50, Duration::from_millis(5));
    let server = TestServer::start(node.dir.path(), |args| {
        // Room for a fast reader on a busy machine; the slow one stalls for
        // far more than this many blocks.
        args.market_ring_capacity = Some(256);
    })
    .await;
    ready(&server).await;
    let request = || pb::L4OrderUpdatesRequest::default();
    let mut fast = client(&server)
        .await
        .stream_l4_order_updates(server.req(request()))
        .await
        .unwrap()
        .into_inner();
    let mut slow_client = tight_client(&server).await;
    let mut slow = slow_client
        .stream_l4_order_updates(server.req(request()))
        .await
        .unwrap()
        .into_inner();
    let opening = next(&mut slow, WAIT).await.unwrap();
    assert_eq!(opening.sequence, 1);

    // The fast reader keeps up while the slow one reads nothing.
    let mut expected = 1;
    let mut last_block = 0;
    let status = server.running.engine.status().clone();
    let stalled_at = status.height();
    while status.height() < stalled_at + 600 {
        let update = next(&mut fast, WAIT).await.unwrap();
        assert_eq!(update.sequence, expected, "the fast subscriber saw a gap");
        assert!(update.block_number > last_block);
        last_block = update.block_number;
        expected += 1;
    }
    assert!(expected > 20, "too few frames to make the slow reader lag");
    assert!(
        !node.finished(),
        "the node stopped before the slow reader lagged"
    );

    // The slow reader gets what was in flight, then ABORTED naming the lag.
    let mut sequence = 1;
    let status = loop {
        match next(&mut slow, WAIT).await {
            Ok(update) => {
                sequence += 1;
                assert_eq!(update.sequence, sequence, "frames before the abort gap");
            }
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
    assert!(status.message().contains("too slow"), "{status:?}");
    assert!(sequence < expected, "the slow reader was not behind");

    // The fast reader is unaffected and still in step.
    let update = next(&mut fast, WAIT).await.unwrap();
    assert_eq!(update.sequence, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_snapshot_subscriber_skips_to_the_newest_state() {
    let node = live_node(3000, 50, Duration::from_millis(5));
    let server = TestServer::start(node.dir.path(), |args| {
        args.market_ring_capacity = Some(2);
    })
    .await;
    ready(&server).await;
    let mut slow_client = tight_client(&server).await;
    let mut slow = slow_client
        .stream_l2_book(server.req(pb::L2BookRequest {
            coin: "BTC".into(),
            n_levels: Some(0),
            ..pb::L2BookRequest::default()
        }))
        .await
        .unwrap()
        .into_inner();
    let opening = next(&mut slow, WAIT).await.unwrap();
    // Read nothing while the node writes on, far past the ring.
    let status = server.running.engine.status().clone();
    let started = std::time::Instant::now();
    while i64::try_from(status.height()).unwrap() < opening.block_number + 300 {
        assert!(started.elapsed() < WAIT, "the node did not move on");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let height = i64::try_from(status.height()).unwrap();
    // Reading again: no error, and the stream reaches the newest state.
    let mut last = opening.block_number;
    loop {
        let frame = next(&mut slow, WAIT).await.unwrap();
        assert!(frame.block_number >= last, "went back in time");
        last = frame.block_number;
        if last >= height {
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribing_during_the_flow_never_gaps_or_repeats_l2_diffs() {
    let node = live_node(3000, 50, Duration::from_millis(5));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let mut c = client(&server).await;
    let mut sessions = Vec::new();
    for _ in 0..8 {
        let mut stream = c
            .stream_l2_book_diff(server.req(pb::L2BookDiffRequest {
                coins: vec!["BTC".into()],
                n_levels: Some(3),
                ..pb::L2BookDiffRequest::default()
            }))
            .await
            .unwrap()
            .into_inner();
        let mut frames = vec![next(&mut stream, WAIT).await.unwrap()];
        for _ in 0..3 {
            frames.push(next(&mut stream, WAIT).await.unwrap());
        }
        sessions.push(frames);
    }
    drop(c);
    let last = settled(&server, &node).await;
    let expected: Vec<Value> = replay(node.dir.path(), ViewKind::L2Diff, |o| {
        o.selection.coins = vec!["BTC".into()];
        o.selection.n_levels = Some(3);
    });
    let pool = DescriptorPool::decode(proto::FILE_DESCRIPTOR_SET).unwrap();
    for frames in sessions {
        let opened = frames[0].block_number;
        assert!(frames[0].diffs[0].snapshot);
        let received = frames.last().unwrap().block_number;
        let live: Vec<Value> = frames[1..]
            .iter()
            .map(|m| without(json(&pool, "L2BookDiffUpdate", m), &["seq", "prev_seq"]))
            .collect();
        let want: Vec<Value> = after(&expected, opened, received.min(last))
            .into_iter()
            .map(|f| without(f, &["seq", "prev_seq"]))
            .collect();
        assert_frames_equal("l2diff session", &live, &want);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_data_and_disabled_candles_are_refused_with_their_reasons() {
    // The simulator's blocks are dated in the past: with the default bound
    // they are stale.
    let node = live_node(80, 80, Duration::from_millis(10));
    let server = TestServer::start(node.dir.path(), |args| {
        args.market_stale_after_ms = Some(30_000);
        args.candle_streaming = Some(false);
    })
    .await;
    ready(&server).await;
    let mut c = client(&server).await;
    let status = c
        .stream_bbo(server.req(pb::BboRequest {
            coins: vec!["BTC".into()],
        }))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("stale"), "{status:?}");
    drop(server);

    let server = TestServer::start(node.dir.path(), |args| {
        args.candle_streaming = Some(false);
    })
    .await;
    ready(&server).await;
    let mut c = client(&server).await;
    let status = c
        .stream_candle(server.req(pb::CandleRequest {
            coin: "BTC".into(),
            interval: "1m".into(),
        }))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(
        status.message().contains("candle streaming is disabled"),
        "{status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_validation_error_names_its_cause() {
    let node = live_node(80, 80, Duration::from_millis(10));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let mut c = client(&server).await;
    let bad_user = "0x12".to_owned();
    let good_user = format!("0x{}", "ab".repeat(20));
    let mut failures: Vec<(String, tonic::Status)> = Vec::new();
    macro_rules! case {
        ($rpc:ident, $request:expr, $message:expr) => {
            match c.$rpc(server.req($request)).await {
                Ok(_) => panic!("{} accepted: {}", stringify!($rpc), $message),
                Err(status) => failures.push(($message.to_owned(), status)),
            }
        };
    }
    case!(
        stream_l2_book,
        pb::L2BookRequest::default(),
        "coin: required"
    );
    case!(
        stream_l2_book,
        pb::L2BookRequest {
            coin: "BTC".into(),
            n_sig_figs: Some(5),
            mantissa: Some(3),
            ..pb::L2BookRequest::default()
        },
        "mantissa"
    );
    case!(
        stream_l2_book,
        pb::L2BookRequest {
            coin: "BTC".into(),
            n_sig_figs: Some(1),
            ..pb::L2BookRequest::default()
        },
        "n_sig_figs must be 2 to 5, got 1"
    );
    case!(
        stream_l2_book,
        pb::L2BookRequest {
            coin: "btc".into(),
            ..pb::L2BookRequest::default()
        },
        "coins: unknown coin \"btc\""
    );
    case!(
        stream_l2_book_diff,
        pb::L2BookDiffRequest::default(),
        "coins: 1 to 20 distinct coins are required, got 0"
    );
    case!(
        stream_l2_book_diff,
        pb::L2BookDiffRequest {
            coins: vec!["BTC".into(), String::new()],
            ..pb::L2BookDiffRequest::default()
        },
        "coins: blank entry"
    );
    case!(
        stream_l4_book,
        pb::L4BookRequest {
            coin: "*".into(),
            ..pb::L4BookRequest::default()
        },
        "coin: \"*\""
    );
    case!(
        stream_l4_order_updates,
        pb::L4OrderUpdatesRequest {
            users: vec![bad_user.clone()],
            ..pb::L4OrderUpdatesRequest::default()
        },
        "users: \"0x12\" is not an address"
    );
    case!(
        stream_l4_order_updates,
        pb::L4OrderUpdatesRequest {
            coins: vec!["NOPE".into()],
            ..pb::L4OrderUpdatesRequest::default()
        },
        "coins: unknown coin \"NOPE\""
    );
    case!(
        stream_tpsl_updates,
        pb::TpslUpdatesRequest {
            users: vec![good_user.clone(), "*".into()],
            ..pb::TpslUpdatesRequest::default()
        },
        "users: \"*\""
    );
    case!(
        stream_tpsl_updates,
        pb::TpslUpdatesRequest {
            coins: vec!["@107".into()],
            ..pb::TpslUpdatesRequest::default()
        },
        "coins: \"@107\" is not a perp coin"
    );
    case!(
        stream_trades,
        pb::TradesRequest::default(),
        "coins: 1 to 20 distinct coins are required, got 0"
    );
    case!(
        stream_user_fills,
        pb::UserFillsRequest {
            user: "alice".into(),
            ..pb::UserFillsRequest::default()
        },
        "user: \"alice\" is not an address"
    );
    case!(
        stream_builder_fills,
        pb::BuilderFillsRequest::default(),
        "builder: required"
    );
    case!(
        stream_liquidation_fills,
        pb::LiquidationFillsRequest {
            liquidated_users: vec![" ".into()],
            ..pb::LiquidationFillsRequest::default()
        },
        "liquidated_users: blank entry"
    );
    case!(
        stream_all_fills,
        pb::AllFillsRequest {
            coins: vec!["*".into()],
        },
        "coins: \"*\""
    );
    case!(
        stream_candle,
        pb::CandleRequest {
            coin: "BTC".into(),
            interval: "2m".into(),
        },
        "interval: unknown interval \"2m\""
    );
    case!(
        stream_candle,
        pb::CandleRequest {
            coin: "BTC".into(),
            interval: String::new(),
        },
        "interval: required"
    );
    case!(
        stream_candle,
        pb::CandleRequest {
            coin: String::new(),
            interval: "1m".into(),
        },
        "coin: required"
    );
    for (message, status) in failures {
        assert_eq!(
            status.code(),
            Code::InvalidArgument,
            "{message}: {status:?}"
        );
        assert!(
            status.message().contains(&message),
            "{status:?} does not name {message:?}"
        );
    }
    // Duplicates are merged before counting; valid addresses pass in any case.
    let twenty: Vec<String> = (0..20).map(|_| "BTC".to_owned()).collect();
    c.stream_bbo(server.req(pb::BboRequest { coins: twenty }))
        .await
        .unwrap();
    c.stream_l4_order_updates(server.req(pb::L4OrderUpdatesRequest {
        users: vec![good_user.to_uppercase().replacen("0X", "0x", 1)],
        ..pb::L4OrderUpdatesRequest::default()
    }))
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coalesce_window_thins_l2_frames_and_diffs_still_rebuild_the_book() {
    let node = live_node(400, 50, Duration::from_millis(10));
    let server = TestServer::start(node.dir.path(), |args| {
        args.l2_coalesce_ms = Some(1_000);
    })
    .await;
    ready(&server).await;
    let mut c = client(&server).await;
    let done = Arc::new(AtomicBool::new(false));
    let book = collect(
        c.stream_l2_book(server.req(pb::L2BookRequest {
            coin: "BTC".into(),
            n_levels: Some(4),
            ..pb::L2BookRequest::default()
        }))
        .await
        .unwrap()
        .into_inner(),
        done.clone(),
    );
    let diffs = collect(
        c.stream_l2_book_diff(server.req(pb::L2BookDiffRequest {
            coins: vec!["BTC".into()],
            n_levels: Some(4),
            ..pb::L2BookDiffRequest::default()
        }))
        .await
        .unwrap()
        .into_inner(),
        done.clone(),
    );
    settled(&server, &node).await;
    done.store(true, Ordering::SeqCst);
    let book = book.await.unwrap();
    let diffs = diffs.await.unwrap();
    // After the opening snapshot: one frame per second of block time at
    // most, so block numbers skip.
    assert!(book.len() > 2, "too few frames: {}", book.len());
    for pair in book[1..].windows(2) {
        assert!(pair[1].time - pair[0].time >= 1_000, "{pair:?}");
        assert!(pair[1].block_number > pair[0].block_number + 1);
    }
    // Merged diffs still chain and rebuild the last book sent.
    let mut levels: BTreeMap<(bool, String), String> = BTreeMap::new();
    let mut seq = 0;
    for update in &diffs {
        for diff in &update.diffs {
            assert_eq!(diff.prev_seq, seq);
            seq += 1;
            assert_eq!(diff.seq, seq);
            if diff.snapshot {
                levels.clear();
            }
            for (is_bid, side) in [(true, &diff.bids), (false, &diff.asks)] {
                for level in side {
                    if level.sz == "0.0" {
                        levels.remove(&(is_bid, level.px.clone()));
                    } else {
                        levels.insert((is_bid, level.px.clone()), level.sz.clone());
                    }
                }
            }
        }
    }
    let expected = replay(node.dir.path(), ViewKind::L2Book, |o| {
        o.selection.coins = vec!["BTC".into()];
        o.selection.n_levels = Some(4);
    });
    // The last window's changes wait for a block after its end, which never
    // comes once the node stops: compare at the last merged frame's block.
    let sent = diffs.last().unwrap().block_number;
    let last = expected.iter().rfind(|f| block_of(f) <= sent).unwrap();
    let mut want: BTreeMap<(bool, String), String> = BTreeMap::new();
    for (is_bid, side) in [(true, "bids"), (false, "asks")] {
        for level in last[side].as_array().unwrap() {
            want.insert(
                (is_bid, level["px"].as_str().unwrap().to_owned()),
                level["sz"].as_str().unwrap().to_owned(),
            );
        }
    }
    assert_eq!(levels, want, "merged diffs do not rebuild the final book");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_updates_are_the_accounts_status_events_byte_for_byte() {
    let node = live_node(BLOCKS, INITIAL, Duration::from_millis(15));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let user = actors(node.dir.path()).user;
    let mut c = client(&server).await;
    let done = Arc::new(AtomicBool::new(false));
    let stream = c
        .stream_order_updates(server.req(pb::OrderUpdatesRequest {
            // Mixed case: matched case-insensitively.
            users: vec![user.to_uppercase().replacen("0X", "0x", 1)],
        }))
        .await
        .unwrap()
        .into_inner();
    let collected = collect(stream, done.clone());
    let last = settled(&server, &node).await;
    done.store(true, Ordering::SeqCst);
    let messages = collected.await.unwrap();
    assert_sequenced("order updates", messages.iter().map(|m| m.sequence));
    // Each status is the node's bytes: exactly a substring of its line.
    let mut lines: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    for path in files_named(node.dir.path(), "node_order_statuses") {
        for line in std::fs::read(&path).unwrap().split(|&b| b == b'\n') {
            if !line.is_empty() {
                let number = feeds::envelope::decode(line).unwrap().block_number;
                lines.insert(number, line.to_vec());
            }
        }
    }
    for message in &messages {
        let line = &lines[&u64::try_from(message.block_number).unwrap()];
        for status in &message.statuses {
            assert!(
                memchr::memmem::find(line, status).is_some(),
                "a status that is not the node's bytes"
            );
        }
    }
    // And they are all of the account's statuses, block by block.
    let live: Vec<(i64, Vec<Value>)> = messages
        .iter()
        .map(|m| {
            (
                m.block_number,
                m.statuses
                    .iter()
                    .map(|s| serde_json::from_slice(s).unwrap())
                    .collect(),
            )
        })
        .collect();
    assert!(!live.is_empty(), "order updates: nothing arrived");
    let expected: Vec<(i64, Vec<Value>)> = super::ws_streams::statuses_of(node.dir.path(), &user)
        .into_iter()
        .map(|(number, _, events)| (i64::try_from(number).unwrap(), events))
        .filter(|(number, _)| *number >= live[0].0 && *number <= last)
        .collect();
    assert_eq!(live, expected);
    // A request without an account is refused, naming the field.
    let refused = c
        .stream_order_updates(server.req(pb::OrderUpdatesRequest::default()))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.message().contains("users"), "{refused:?}");
}

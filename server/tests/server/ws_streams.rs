//! The WebSocket channels against `l1gate replay` of the same blocks: a
//! live node directory grows while one connection holds a subscription of
//! every engine-fed channel, and each channel's messages are replay's
//! frames in the exchange's shapes (mapped here, field by field, from
//! replay's output).

use std::collections::BTreeMap;
use std::time::Duration;

use engine::replay::ViewKind;
use serde_json::{Value, json};

use super::harness::TestServer;
use super::market_live::{live_node, ready};
use super::market_views::{actors, files_named, replay, settled};
use super::ws_api::{connect, recv, send};

const BLOCKS: u64 = 300;
const INITIAL: u64 = 60;

fn field(value: &Value, name: &str) -> Value {
    value.get(name).cloned().unwrap_or(Value::Null)
}

/// Replay's fill as the exchange's `WsFill`.
fn ws_fill(fill: &Value) -> Value {
    let mut out = json!({
        "coin": fill["coin"],
        "px": fill["px"],
        "sz": fill["sz"],
        "side": fill["side"],
        "time": fill["time"],
        "startPosition": fill["start_position"],
        "dir": fill["dir"],
        "closedPnl": fill["closed_pnl"],
        "hash": fill["hash"],
        "oid": fill["oid"],
        "crossed": fill["crossed"],
        "fee": fill["fee"],
        "tid": fill["tid"],
        "feeToken": fill["fee_token"],
        "twapId": field(fill, "twap_id"),
    });
    if let Some(cloid) = fill.get("cloid") {
        out["cloid"] = cloid.clone();
    }
    if let Some(fee) = fill.get("builder_fee") {
        out["builderFee"] = fee.clone();
    }
    if let Some(liquidation) = fill.get("liquidation") {
        let mut object = json!({
            "markPx": liquidation["mark_px"],
            "method": liquidation["method"],
        });
        if let Some(user) = liquidation.get("liquidated_user") {
            object["liquidatedUser"] = user.clone();
        }
        out["liquidation"] = object;
    }
    out
}

/// `user`'s order status events per block, straight from the node's files:
/// (block number, block time ms, events), blocks without any left out.
pub fn statuses_of(dir: &std::path::Path, user: &str) -> Vec<(u64, i64, Vec<Value>)> {
    let mut blocks = Vec::new();
    for path in files_named(dir, "node_order_statuses") {
        for line in std::fs::read(&path).unwrap().split(|&b| b == b'\n') {
            if line.is_empty() {
                continue;
            }
            let envelope = feeds::envelope::decode(line).unwrap();
            let value: Value = serde_json::from_slice(line).unwrap();
            let events: Vec<Value> = value["events"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|event| event["user"].as_str().unwrap().eq_ignore_ascii_case(user))
                .cloned()
                .collect();
            if !events.is_empty() {
                blocks.push((envelope.block_number, envelope.block_time_ms, events));
            }
        }
    }
    blocks.sort_by_key(|(number, ..)| *number);
    blocks
}

/// A replayed mids frame's map narrowed to the default exchange (no `dex:`
/// prefix), as `allMids` without a `dex` gives it.
pub fn default_dex_mids(frame: &Value) -> Value {
    Value::Object(
        frame["mids"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(coin, _)| !coin.contains(':'))
            .map(|(coin, px)| (coin.clone(), px.clone()))
            .collect(),
    )
}

/// The exchange's `WsOrder` of a node status event.
fn ws_order(event: &Value, time: i64) -> Value {
    let order = &event["order"];
    let mut basic = json!({
        "coin": order["coin"], "side": order["side"], "limitPx": order["limitPx"],
        "sz": order["sz"], "oid": order["oid"], "timestamp": order["timestamp"],
        "origSz": order["origSz"],
    });
    if !order["cloid"].is_null() {
        basic["cloid"] = order["cloid"].clone();
    }
    json!({"order": basic, "status": event["status"], "statusTimestamp": time})
}

/// `live` is exactly `expected` from the position of `live[0]` on.
fn assert_suffix(channel: &str, live: &[Value], expected: &[Value]) {
    assert!(!live.is_empty(), "{channel}: nothing arrived");
    let first = expected
        .iter()
        .position(|frame| *frame == live[0])
        .unwrap_or_else(|| panic!("{channel}: first message not in replay: {}", live[0]));
    assert_eq!(
        live.len(),
        expected.len() - first,
        "{channel}: {} messages vs {} replayed",
        live.len(),
        expected.len() - first
    );
    for (index, (got, want)) in live.iter().zip(&expected[first..]).enumerate() {
        assert_eq!(got, want, "{channel}: message {index} differs");
    }
}

/// Snapshot channels: the opening message is replay's state at its time;
/// every later one is replay's frame after it.
fn assert_snapshots(channel: &str, live: &[Value], expected: &[Value], state: fn(&Value) -> Value) {
    assert!(live.len() > 1, "{channel}: nothing after the opening");
    let opened = live[0]["time"].as_i64().unwrap();
    let at_opening = expected
        .iter()
        .rfind(|frame| frame["time"].as_i64().unwrap() <= opened)
        .unwrap_or_else(|| panic!("{channel}: no replayed state at {opened}"));
    assert_eq!(state(&live[0]), state(at_opening), "{channel}: opening");
    let later: Vec<Value> = expected
        .iter()
        .filter(|frame| frame["time"].as_i64().unwrap() > opened)
        .cloned()
        .collect();
    assert_eq!(live.len() - 1, later.len(), "{channel}: message count");
    for (index, (got, want)) in live[1..].iter().zip(&later).enumerate() {
        assert_eq!(got, want, "{channel}: message {} differs", index + 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_carry_replays_frames_in_the_exchanges_shapes() {
    let node = live_node(BLOCKS, INITIAL, Duration::from_millis(15));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let dir = node.dir.path().to_owned();
    let acts = actors(&dir);
    let mut socket = connect(&server).await;
    let subscriptions = [
        json!({"type":"trades","coin":"BTC"}),
        json!({"type":"bbo","coin":"BTC"}),
        json!({"type":"l2Book","coin":"BTC","nLevels":5}),
        json!({"type":"candle","coin":"BTC","interval":"1s"}),
        json!({"type":"allMids"}),
        // Mixed case: matched case-insensitively.
        json!({"type":"userFills","user":acts.user.to_uppercase().replacen("0X", "0x", 1)}),
        json!({"type":"userEvents","user":acts.user}),
        json!({"type":"l4Book","coin":"ETH"}),
        json!({"type":"orderUpdates","user":acts.user}),
        json!({"type":"openOrders","user":acts.user}),
    ];
    let mut by_channel: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for subscription in &subscriptions {
        let message = json!({"method":"subscribe","subscription":subscription});
        send(&mut socket, message.clone()).await;
        // Frames of earlier subscriptions may come first.
        loop {
            let got = recv(&mut socket).await.unwrap();
            if got["channel"] == "subscriptionResponse" {
                assert_eq!(got["data"], message);
                break;
            }
            let channel = got["channel"].as_str().unwrap().to_owned();
            by_channel
                .entry(channel)
                .or_default()
                .push(got["data"].clone());
        }
    }
    let collector = tokio::spawn(async move {
        let mut out = by_channel;
        loop {
            match tokio::time::timeout(Duration::from_secs(3), recv(&mut socket)).await {
                Ok(Ok(message)) => {
                    let channel = message["channel"].as_str().unwrap().to_owned();
                    out.entry(channel)
                        .or_default()
                        .push(message["data"].clone());
                }
                Ok(Err(closed)) => panic!("closed: {closed:?}"),
                Err(_) => return out,
            }
        }
    });
    settled(&server, &node).await;
    let live = collector.await.unwrap();
    check_channels(
        &dir,
        &acts.user,
        5,
        &live,
        &[
            "trades",
            "bbo",
            "l2Book",
            "candle",
            "allMids",
            "userFills",
            "userEvents",
            "orderUpdates",
            "l4Book",
            "openOrders",
        ],
    );
}

/// Checks the messages `live` received per channel against replay of the
/// node directory `dir` (and its files), for each of `channels` (each must
/// have messages); `user` is the account of the user channels, `n_levels`
/// the `l2Book` depth subscribed.
pub fn check_channels(
    dir: &std::path::Path,
    user: &str,
    n_levels: u32,
    live: &BTreeMap<String, Vec<Value>>,
    channels: &[&str],
) {
    let dir = dir.to_owned();
    let channel = |name: &str| {
        let messages = live.get(name).cloned().unwrap_or_default();
        assert!(!messages.is_empty(), "{name}: no message");
        messages
    };
    if channels.contains(&"trades") {
        // Trades: one message per block, the block's trades.
        let expected: Vec<Value> = replay(&dir, ViewKind::Trades, |o| {
            o.selection.coins = vec!["BTC".into()]
        })
        .iter()
        .map(|frame| frame["trades"].clone())
        .collect();
        assert_suffix("trades", &channel("trades"), &expected);
    }
    if channels.contains(&"bbo") {
        // BBO.
        let expected: Vec<Value> = replay(&dir, ViewKind::Bbo, |o| {
            o.selection.coins = vec!["BTC".into()]
        })
        .iter()
        .map(|frame| {
            json!({"coin": frame["coin"], "time": frame["time"],
                   "bbo": [field(frame, "bid"), field(frame, "ask")]})
        })
        .collect();
        assert_snapshots("bbo", &channel("bbo"), &expected, |m| m["bbo"].clone());
    }
    if channels.contains(&"l2Book") {
        // L2 book, 5 levels.
        let expected: Vec<Value> = replay(&dir, ViewKind::L2Book, |o| {
            o.selection.coins = vec!["BTC".into()];
            o.selection.n_levels = Some(n_levels);
        })
        .iter()
        .map(|frame| {
            json!({"coin": frame["coin"], "time": frame["time"],
                   "levels": [frame["bids"], frame["asks"]]})
        })
        .collect();
        assert_snapshots("l2Book", &channel("l2Book"), &expected, |m| {
            m["levels"].clone()
        });
    }
    if channels.contains(&"candle") {
        // Candles (1s): how often a live bucket is re-sent depends on when
        // the subscription opened (throttling), so compare the final state
        // of every bucket that closed: each bucket's last message before a
        // later bucket's.
        let expected: BTreeMap<i64, Value> = replay(&dir, ViewKind::Candles, |o| {
            o.selection.coins = vec!["BTC".into()];
            o.selection.interval = Some("1s".into());
        })
        .iter()
        .filter(|frame| frame["closed"] == true)
        .map(|frame| {
            let t = frame["open_time"].as_i64().unwrap();
            let data = json!({"t": t, "T": frame["close_time"], "s": frame["coin"],
                   "i": frame["interval"], "o": frame["open"], "c": frame["close"],
                   "h": frame["high"], "l": frame["low"], "v": frame["volume"],
                   "n": frame["trades_count"]});
            (t, data)
        })
        .collect();
        let mut finals: BTreeMap<i64, Value> = BTreeMap::new();
        let mut previous = i64::MIN;
        for message in channel("candle") {
            let t = message["t"].as_i64().unwrap();
            assert!(t >= previous, "candle: a bucket went back in time");
            previous = t;
            finals.insert(t, message);
        }
        finals.remove(&previous);
        assert!(!finals.is_empty(), "candle: no bucket closed");
        for (t, message) in &finals {
            assert_eq!(Some(message), expected.get(t), "candle: bucket {t}");
        }
    }
    if channels.contains(&"allMids") {
        // All mids of the default exchange: the same successive maps.
        let distinct = |maps: Vec<Value>| {
            let mut out: Vec<Value> = Vec::new();
            for map in maps {
                if out.last() != Some(&map) {
                    out.push(map);
                }
            }
            out
        };
        let expected = distinct(
            replay(&dir, ViewKind::Mids, |_| {})
                .iter()
                .map(|frame| json!({ "mids": default_dex_mids(frame) }))
                .collect(),
        );
        assert_suffix("allMids", &distinct(channel("allMids")), &expected);
    }
    if channels.contains(&"userFills") {
        // The busiest account's fills: a snapshot message holding none, then
        // replay's fills per block, in both channels.
        let user_fills = channel("userFills");
        assert_eq!(user_fills[0]["isSnapshot"], true, "{}", user_fills[0]);
        assert_eq!(user_fills[0]["fills"], json!([]));
        let replayed = replay(&dir, ViewKind::Fills, |o| {
            o.selection.users = vec![user.to_owned()]
        });
        let expected: Vec<Value> = replayed
            .iter()
            .map(|frame| {
                let fills: Vec<Value> = frame["fills"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(ws_fill)
                    .collect();
                json!({"user": frame["fills"][0]["user"], "fills": fills, "isSnapshot": false})
            })
            .collect();
        assert_suffix("userFills", &user_fills[1..], &expected);
        if channels.contains(&"userEvents") {
            let expected: Vec<Value> = expected
                .iter()
                .map(|data| json!({"fills": data["fills"]}))
                .collect();
            assert_suffix("userEvents", &channel("userEvents"), &expected);
        }
    }
    if channels.contains(&"orderUpdates") {
        // Order updates: the account's status events of each block, from the
        // node's files.
        let expected: Vec<Value> = statuses_of(&dir, user)
            .iter()
            .map(|(_, time, events)| {
                Value::Array(events.iter().map(|e| ws_order(e, *time)).collect())
            })
            .collect();
        assert_suffix("orderUpdates", &channel("orderUpdates"), &expected);
    }
    if channels.contains(&"l4Book") {
        // L4 book: a snapshot, then replay's events per block after it.
        let l4 = channel("l4Book");
        let height = l4[0]["Snapshot"]["height"]
            .as_u64()
            .expect("a snapshot first");
        assert_eq!(l4[0]["Snapshot"]["coin"], "ETH");
        let expected: Vec<Value> = replay(&dir, ViewKind::L4Book, |o| {
            o.selection.coins = vec!["ETH".into()]
        })
        .iter()
        .filter_map(|frame| {
            let diff = frame.get("diff")?;
            (diff["block_number"].as_u64()? > height).then(|| {
                let mut events = diff["data"].as_object().unwrap().clone();
                events.insert("time".into(), diff["time"].clone());
                events.insert("height".into(), diff["block_number"].clone());
                json!({ "Updates": events })
            })
        })
        .collect();
        assert!(l4.len() > 1, "l4Book: no update");
        assert_eq!(&l4[1..], &expected[..], "l4Book: updates");
    }
    if channels.contains(&"openOrders") {
        // Open orders: the account's whole list, then each changed list, as
        // replay's frames of the same account list them from the snapshot on
        // (the opening's block is not in the message: it is where the rest
        // lines up).
        let live = channel("openOrders");
        let expected: Vec<Value> = replay(&dir, ViewKind::OpenOrders, |o| {
            o.selection.users = vec![user.to_owned()];
        })
        .iter()
        .map(|frame| json!({"dex": frame["dex"], "user": frame["user"], "orders": frame["orders"]}))
        .collect();
        assert!(live.len() > 1, "openOrders: no change after the opening");
        assert!(
            (0..expected.len()).any(|first| expected[first..] == live[..]),
            "openOrders: {} messages are not the end of replay's {}",
            live.len(),
            expected.len()
        );
    }
}

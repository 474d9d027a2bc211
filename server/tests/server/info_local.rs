//! Info types answered from l1gate's own state (no Info source): `l2Book`
//! and `allMids` from the books, `openOrders` / `frontendOpenOrders` from the
//! resting orders, `candleSnapshot` from the candles; each checked against
//! another way of reading the same blocks.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use engine::market::candles::Interval;
use engine::replay::ViewKind;
use fixtures::SimConfig;
use proto::v3 as pb;
use serde_json::{Value, json};

use super::candles::{
    ALL_INTERVALS, Http, INTERVALS, append_hours, assert_candle, candle_path, channel_candle,
    expected_candles_in, header, simulated_hours, snapshot_entry, unlimited, wait_for_writer,
};
use super::harness::TestServer;
use super::market_live::{client, live_node, ready};
use super::market_views::{actors, replay};
use super::standin::post_json;
use super::ws_api::{connect, recv, send};

async fn info(server: &TestServer, body: Value) -> (u16, Value) {
    let reply = post_json(
        server.running.http_addr,
        "/info",
        Some(&server.key),
        &body.to_string(),
    )
    .await;
    (reply.status, reply.json())
}

/// Waits until the candle writer has read every block the engine folded.
async fn candles_caught_up(server: &TestServer) {
    let height = server.running.engine.status().height();
    for _ in 0..600 {
        let (block, _, caught_up, _) = server.running.candles.progress();
        if caught_up && block >= height {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the candle writer never caught up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn book_and_order_types_are_answered_from_the_books() {
    let node = live_node(120, 120, Duration::from_millis(1));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let dir = node.dir.path();

    // l2Book: the L2 view's state at the last block, 20 levels.
    let (status, book) = info(&server, json!({"type":"l2Book","coin":"BTC"})).await;
    assert_eq!(status, 200, "{book}");
    let last = replay(dir, ViewKind::L2Book, |o| {
        o.selection.coins = vec!["BTC".into()];
    })
    .pop()
    .unwrap();
    assert_eq!(book["coin"], "BTC");
    assert_eq!(book["levels"], json!([last["bids"], last["asks"]]));
    assert!(book["levels"][0].as_array().unwrap().len() <= 20);
    // Aggregated: the same parameters as the channel.
    let (status, coarse) = info(&server, json!({"type":"l2Book","coin":"BTC","nSigFigs":2})).await;
    assert_eq!(status, 200, "{coarse}");
    assert_ne!(coarse["levels"], book["levels"]);
    let (status, refused) = info(&server, json!({"type":"l2Book","coin":"NOPE"})).await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("unknown coin")
    );
    let (status, refused) = info(&server, json!({"type":"l2Book"})).await;
    assert_eq!(status, 400);
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("coin: required")
    );

    // allMids: replay's last map, default exchange only.
    let (status, mids) = info(&server, json!({"type":"allMids"})).await;
    assert_eq!(status, 200, "{mids}");
    let last = replay(dir, ViewKind::Mids, |_| {}).pop().unwrap();
    assert_eq!(mids, super::ws_streams::default_dex_mids(&last));

    // openOrders: the account's resting orders, as the L4 order updates
    // stream's opening snapshot lists them.
    let user = actors(dir).user;
    let mut market = client(&server).await;
    let mut updates = market
        .stream_l4_order_updates(server.req(pb::L4OrderUpdatesRequest {
            users: vec![user.clone()],
            ..pb::L4OrderUpdatesRequest::default()
        }))
        .await
        .unwrap()
        .into_inner();
    let snapshot = updates.message().await.unwrap().unwrap();
    assert!(snapshot.snapshot);
    // The default exchange's coins (no `dex:` prefix).
    let expected: BTreeSet<(String, u64, String, String)> = snapshot
        .diffs
        .iter()
        .filter(|d| !d.coin.contains(':'))
        .map(|d| (d.coin.clone(), d.oid, d.px.clone(), d.sz.clone()))
        .collect();
    assert!(!expected.is_empty(), "the busiest account rests no order");
    let mut orig_sizes: BTreeMap<&str, BTreeMap<u64, Value>> = BTreeMap::new();
    let mut frontend = Value::Null;
    for kind in ["openOrders", "frontendOpenOrders"] {
        let (status, orders) = info(&server, json!({"type":kind,"user":user})).await;
        assert_eq!(status, 200, "{orders}");
        let orders = orders.as_array().unwrap();
        let got: BTreeSet<(String, u64, String, String)> = orders
            .iter()
            .map(|o| {
                (
                    o["coin"].as_str().unwrap().to_owned(),
                    o["oid"].as_u64().unwrap(),
                    o["limitPx"].as_str().unwrap().to_owned(),
                    o["sz"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        assert_eq!(got, expected, "{kind}");
        let times: Vec<i64> = orders
            .iter()
            .map(|o| o["timestamp"].as_i64().unwrap())
            .collect();
        assert!(
            times.windows(2).all(|w| w[0] >= w[1]),
            "{kind}: newest first"
        );
        orig_sizes.insert(
            kind,
            orders
                .iter()
                .map(|o| (o["oid"].as_u64().unwrap(), o["origSz"].clone()))
                .collect(),
        );
        if kind == "openOrders" {
            // The exchange's `openOrders` fields, `cloid` only when set.
            for order in orders {
                let mut fields: Vec<&str> = order
                    .as_object()
                    .unwrap()
                    .keys()
                    .map(String::as_str)
                    .filter(|field| *field != "cloid")
                    .collect();
                fields.sort_unstable();
                assert_eq!(
                    fields,
                    [
                        "coin",
                        "limitPx",
                        "oid",
                        "origSz",
                        "side",
                        "sz",
                        "timestamp"
                    ],
                    "{order}"
                );
                assert!(order.get("cloid").is_none_or(Value::is_string), "{order}");
                assert!(order["origSz"].is_string(), "{order}");
            }
        }
        if kind == "frontendOpenOrders" {
            frontend = Value::Array(orders.clone());
            for order in orders {
                for field in [
                    "origSz",
                    "orderType",
                    "tif",
                    "triggerPx",
                    "children",
                    "cloid",
                ] {
                    assert!(order.get(field).is_some(), "{kind}: {field} in {order}");
                }
            }
        }
    }
    assert_eq!(
        orig_sizes["openOrders"], orig_sizes["frontendOpenOrders"],
        "openOrders and frontendOpenOrders agree on origSz"
    );
    let (status, refused) = info(&server, json!({"type":"openOrders","user":"bob"})).await;
    assert_eq!(status, 400);
    assert!(refused["message"].as_str().unwrap().contains("user:"));

    // The open orders streams open with the same list: the WebSocket
    // `openOrders` subscription as the exchange sends it, `StreamOpenOrders`
    // as orders of the L4 message.
    let mut socket = connect(&server).await;
    let subscription = json!({"type":"openOrders","user":user});
    send(
        &mut socket,
        json!({"method":"subscribe","subscription":subscription}),
    )
    .await;
    let mut opening = Value::Null;
    while opening.is_null() {
        let message = recv(&mut socket).await.unwrap();
        if message["channel"] == "openOrders" {
            opening = message["data"].clone();
        }
    }
    assert_eq!(
        opening,
        json!({"dex":"","user":user.to_lowercase(),"orders":frontend})
    );
    let mut stream = market
        .stream_open_orders(server.req(pb::OpenOrdersRequest {
            user: user.to_uppercase().replacen("0X", "0x", 1),
            dex: String::new(),
        }))
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(first.sequence, 1);
    assert_eq!(first.user, user.to_lowercase());
    let listed: Vec<(String, u64, String)> = first
        .orders
        .iter()
        .map(|o| (o.coin.clone(), o.oid, o.sz.clone()))
        .collect();
    let answered: Vec<(String, u64, String)> = frontend
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let text = |field: &str| o[field].as_str().unwrap().to_owned();
            (text("coin"), o["oid"].as_u64().unwrap(), text("sz"))
        })
        .collect();
    assert_eq!(listed, answered);
    // Refused, naming the field.
    for (request, field) in [
        (
            pb::OpenOrdersRequest {
                user: "bob".into(),
                dex: String::new(),
            },
            "user:",
        ),
        (
            pb::OpenOrdersRequest {
                user: user.clone(),
                dex: "no such/dex".into(),
            },
            "dex:",
        ),
    ] {
        let status = market
            .stream_open_orders(server.req(request))
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains(field), "{}", status.message());
    }
    let bad =
        json!({"method":"subscribe","subscription":{"type":"openOrders","user":user,"dex":7}});
    send(&mut socket, bad).await;
    loop {
        let message = recv(&mut socket).await.unwrap();
        if message["channel"] == "error" {
            assert!(
                message["data"]
                    .as_str()
                    .unwrap()
                    .contains("dex: must be a string"),
                "{message}"
            );
            break;
        }
    }
}

/// Checks, for every interval, that the buckets the server serves for
/// BTC are those of `lines` (the node's fills files so far) with the rule
/// for the bucket the files begin in: while open it is served on every
/// interface as the engine holds it (the trades from the files' first
/// block on), once closed on none. Returns the intervals whose bucket the
/// files begin in was served.
async fn the_first_bucket_follows_the_rule(
    server: &TestServer,
    lines: &[Vec<u8>],
) -> Vec<&'static str> {
    let (_, first_block_ms) = header(&lines[0]);
    let (_, last_block_ms) = header(lines.last().unwrap());
    let expected = expected_candles_in(lines, &ALL_INTERVALS);
    let mut socket = super::ws_api::connect(server).await;
    let mut http = Http::connect(server.running.http_addr).await;
    let mut served_partial = Vec::new();
    for interval in ALL_INTERVALS {
        let next_open = |open: i64| Interval::parse(interval).unwrap().next_open(open);
        let want: Vec<Value> = expected
            .iter()
            .filter(|((coin, i, open), _)| {
                coin == "BTC"
                    && *i == interval
                    && (*open >= first_block_ms || next_open(*open) > last_block_ms)
            })
            .map(|((coin, i, open), want)| snapshot_entry(coin, i, *open, want))
            .collect();
        let (status, got) = info(
            server,
            json!({"type":"candleSnapshot","req":{"coin":"BTC","interval":interval,"startTime":0}}),
        )
        .await;
        assert_eq!(status, 200, "{got}");
        assert_eq!(got, Value::Array(want.clone()), "{interval}");
        if want
            .first()
            .is_some_and(|first| first["t"].as_i64().unwrap() < first_block_ms)
        {
            served_partial.push(interval);
        }
        // The channel opens with the bucket the engine holds open.
        if let Some(newest) = want.last()
            && newest["T"].as_i64().unwrap() >= last_block_ms
        {
            assert_eq!(
                &channel_candle(&mut socket, "BTC", interval).await,
                newest,
                "{interval}"
            );
        }
        // The one-candle lookup of the bucket the files begin in: its
        // state so far (not final) while open, else outside the data held.
        if let Some(&(_, length)) = INTERVALS.iter().find(|(i, _)| *i == interval) {
            let open = first_block_ms - first_block_ms.rem_euclid(length);
            let reply = http
                .get(&candle_path(&server.key, "BTC", interval, open), None)
                .await;
            match expected.get(&("BTC".to_owned(), interval, open)) {
                Some(want) if open + length > last_block_ms => {
                    assert_candle(&reply, "BTC", interval, open, want);
                    assert_eq!(reply.cache_control.as_deref(), Some("no-store"));
                }
                _ => {
                    assert_eq!(reply.status, 404, "{interval}: {}", reply.body);
                    assert_eq!(reply.body["error"], "not_covered", "{}", reply.body);
                }
            }
        }
    }
    served_partial
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_book_answer_is_the_newest_state_while_a_channel_holds_the_book() {
    // A block every 30 ms: the channel's opening is shared with Info for a
    // while, and frames are published after it meanwhile.
    let node = live_node(400, 20, Duration::from_millis(30));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let mut socket = super::ws_api::connect(&server).await;
    let subscription = json!({"type":"l2Book","coin":"BTC"});
    super::ws_api::send(
        &mut socket,
        json!({"method":"subscribe","subscription":subscription}),
    )
    .await;
    let mut times = Vec::new();
    while times.len() < 3 {
        let message = super::ws_api::on_channel(&mut socket, "l2Book").await;
        times.push(message["data"]["time"].as_i64().unwrap());
    }
    assert!(times[2] > times[0], "{times:?}");
    let (status, book) = info(&server, json!({"type":"l2Book","coin":"BTC"})).await;
    assert_eq!(status, 200, "{book}");
    assert!(
        book["time"].as_i64().unwrap() >= times[2],
        "Info answered the book at {} after the channel sent {times:?}",
        book["time"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bucket_the_files_begin_in_is_served_while_open_as_the_channel_serves_it() {
    // Fills from 17:39:13, mid-bucket in every interval.
    let hours = simulated_hours(1_800, SimConfig::small(5).start_time_ms);
    let lines: Vec<Vec<u8>> = hours.iter().map(|(_, line)| line.clone()).collect();
    let (_, first_block_ms) = header(&lines[0]);
    let at = |ms: i64| lines.partition_point(|line| header(line).1 < ms);
    let minute = first_block_ms - first_block_ms.rem_euclid(60_000);
    let node = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().join("state");
    let tune = |args: &mut l1gate::config::ServeArgs| {
        unlimited(args);
        args.state_dir = Some(state_dir.clone());
    };

    // Ten seconds of blocks: every bucket but the first 1s ones is the one
    // the files begin in, still open.
    let ends = [
        at(first_block_ms + 10_000),
        at(minute + 90_000),
        lines.len(),
    ];
    assert!(header(lines.last().unwrap()).1 > minute + 110_000);
    append_hours(node.path(), &hours[..ends[0]]);
    let server = TestServer::start(node.path(), tune).await;
    wait_for_writer(&server, header(&lines[ends[0] - 1]).0).await;
    let served = the_first_bucket_follows_the_rule(&server, &lines[..ends[0]]).await;
    assert_eq!(served, &ALL_INTERVALS[1..]);
    drop(server);

    // Restarted after the 1m and 5m buckets the files begin in closed
    // (never stored, no longer served), twice: the fold starts again at the
    // files' first block (first with the store's watermark in the 5m bucket
    // the files begin in, then in the next one), so the 3m bucket and the
    // longer ones are held, and served, as before.
    let longer: Vec<&str> = ALL_INTERVALS
        .iter()
        .copied()
        .filter(|i| !["1s", "1m", "5m"].contains(i))
        .collect();
    append_hours(node.path(), &hours[ends[0]..ends[1]]);
    let server = TestServer::start(node.path(), tune).await;
    wait_for_writer(&server, header(&lines[ends[1] - 1]).0).await;
    let served = the_first_bucket_follows_the_rule(&server, &lines[..ends[1]]).await;
    assert_eq!(served, longer);
    drop(server);
    append_hours(node.path(), &hours[ends[1]..]);
    let server = TestServer::start(node.path(), tune).await;
    wait_for_writer(&server, header(lines.last().unwrap()).0).await;
    let served = the_first_bucket_follows_the_rule(&server, &lines).await;
    assert_eq!(served, longer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candle_snapshots_are_the_candles_of_the_range() {
    let node = live_node(6_000, 6_000, Duration::from_millis(1));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    candles_caught_up(&server).await;
    // Each bucket's last state in replay's candle frames.
    let mut expected: BTreeMap<i64, Value> = BTreeMap::new();
    for frame in replay(node.dir.path(), ViewKind::Candles, |o| {
        o.selection.coins = vec!["BTC".into()];
        o.selection.interval = Some("1m".into());
    }) {
        let t = frame["open_time"].as_i64().unwrap();
        expected.insert(
            t,
            json!({"t": t, "T": frame["close_time"], "s": "BTC", "i": "1m",
                   "o": frame["open"], "c": frame["close"], "h": frame["high"],
                   "l": frame["low"], "v": frame["volume"], "n": frame["trades_count"]}),
        );
    }
    // The files start inside the first bucket: the candles cover only the
    // buckets from the next one on (as /v1/candles does).
    let first = *expected.keys().next().unwrap();
    expected.remove(&first);
    assert!(expected.len() >= 2, "too few buckets: {}", expected.len());
    let last = *expected.keys().last().unwrap();
    let (status, candles) = info(
        &server,
        json!({"type":"candleSnapshot","req":{"coin":"BTC","interval":"1m",
               "startTime": first, "endTime": last + 59_999}}),
    )
    .await;
    assert_eq!(status, 200, "{candles}");
    assert_eq!(
        candles,
        Value::Array(expected.values().cloned().collect::<Vec<_>>())
    );
    // A range inside: only its buckets.
    let (_, inner) = info(
        &server,
        json!({"type":"candleSnapshot","req":{"coin":"BTC","interval":"1m",
               "startTime": last, "endTime": last}}),
    )
    .await;
    assert_eq!(inner, json!([expected[&last]]));
    // An interval the store does not keep is built from the stored buckets
    // inside it: the engine's own 3m candles, bucket for bucket; a bucket
    // reaching back before the coverage is left out.
    let mut expected_3m: BTreeMap<i64, Value> = BTreeMap::new();
    for frame in replay(node.dir.path(), ViewKind::Candles, |o| {
        o.selection.coins = vec!["BTC".into()];
        o.selection.interval = Some("3m".into());
    }) {
        let t = frame["open_time"].as_i64().unwrap();
        expected_3m.insert(
            t,
            json!({"t": t, "T": frame["close_time"], "s": "BTC", "i": "3m",
                   "o": frame["open"], "c": frame["close"], "h": frame["high"],
                   "l": frame["low"], "v": frame["volume"], "n": frame["trades_count"]}),
        );
    }
    let partial = *expected_3m.keys().next().unwrap();
    expected_3m.remove(&partial);
    // The bucket still open at the end: replay's frames of it are throttled,
    // so its last one may be older than the end of the data.
    let open_bucket = *expected_3m.keys().last().unwrap();
    expected_3m.remove(&open_bucket);
    assert!(!expected_3m.is_empty());
    let (_, built) = info(
        &server,
        json!({"type":"candleSnapshot","req":{"coin":"BTC","interval":"3m",
               "startTime": 0}}),
    )
    .await;
    let built = built.as_array().unwrap();
    assert_eq!(built.len(), expected_3m.len() + 1, "{built:?}");
    assert_eq!(
        &built[..expected_3m.len()],
        &expected_3m.values().cloned().collect::<Vec<_>>()[..]
    );
    assert_eq!(built.last().unwrap()["t"], open_bucket);
    // The only hour began before the files and is still open: served as
    // the engine holds it (the trades from the files' first block on), as
    // the `candle` channel opens with it.
    let (_, hours) = info(
        &server,
        json!({"type":"candleSnapshot","req":{"coin":"BTC","interval":"1h","startTime": 0}}),
    )
    .await;
    let mut socket = super::ws_api::connect(&server).await;
    let channel = channel_candle(&mut socket, "BTC", "1h").await;
    assert_eq!(hours, json!([channel]));
    assert!(channel["t"].as_i64().unwrap() < first, "{channel}");
    for (body, field) in [
        (json!({"type":"candleSnapshot"}), "req:"),
        (
            json!({"type":"candleSnapshot","req":{"coin":"BTC","interval":"7m","startTime":0}}),
            "req.interval",
        ),
        (
            json!({"type":"candleSnapshot","req":{"coin":"BTC","interval":"1m"}}),
            "req.startTime",
        ),
    ] {
        let (status, refused) = info(&server, body).await;
        assert_eq!(status, 400, "{refused}");
        assert!(
            refused["message"].as_str().unwrap().contains(field),
            "{refused}"
        );
    }
}

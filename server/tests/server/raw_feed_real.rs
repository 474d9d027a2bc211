//! The raw feed over the real mainnet captures in `../shared/data/real`:
//! byte-exact replay, positioning and filters checked against independent
//! computations over the same files.

use std::collections::HashSet;
use std::time::Duration;

use proto::venue_l1_gateway_client::VenueL1GatewayClient;
use proto::{
    FieldFilter, Filter, GetRequest, ListFeedsRequest, Position, PositionKind, Record,
    StreamRequest, position,
};
use serde_json::Value;
use tonic::transport::Channel;

use super::harness::{
    TestServer, block_number, block_time_ms, next, nothing_within, real, real_lines,
};

const WAIT: Duration = Duration::from_secs(10);
const FIRST: i64 = 985_148_182;
const LAST: i64 = 985_148_232;

fn at_block(n: i64) -> Option<Position> {
    Some(Position {
        kind: Some(position::Kind::BlockNumber(n)),
    })
}

fn at_time(ms: i64) -> Option<Position> {
    Some(Position {
        kind: Some(position::Kind::Timestamp(ms)),
    })
}

fn filter(fields: &[(&str, &[&str])]) -> Option<Filter> {
    Some(Filter {
        fields: fields
            .iter()
            .map(|(field, values)| FieldFilter {
                field: (*field).to_owned(),
                op: 0,
                values: values.iter().map(|v| (*v).to_owned()).collect(),
            })
            .collect(),
    })
}

async fn collect(stream: &mut tonic::Streaming<Record>, count: usize) -> Vec<Record> {
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push(next(stream, WAIT).await.unwrap());
    }
    out
}

#[tokio::test]
async fn streams_replay_every_line_byte_identical_in_order() {
    streams_every_line(&real("btc-985148182")).await;
}

#[tokio::test]
async fn compressed_hours_stream_and_position_as_the_plain_files() {
    // The capture's hour files compressed as the exchange's archive is.
    let packed = super::compressed_files::compressed_copy(
        &real("btc-985148182"),
        super::compressed_files::Tool::Lz4,
    );
    streams_every_line(packed.path()).await;
    positions_land(packed.path()).await;
}

async fn streams_every_line(data: &std::path::Path) {
    let server = TestServer::start(data, |_| {}).await;
    let mut client = server.client().await;
    for (dir, rpc) in [
        ("node_fills_by_block", "fills"),
        ("node_raw_book_diffs_by_block", "raw_book_diffs"),
        ("node_order_statuses_by_block", "order_statuses"),
    ] {
        let lines = real_lines("btc-985148182", dir);
        assert_eq!(lines.len(), 51);
        let request = server.req(StreamRequest {
            position: at_block(FIRST),
            filter: None,
        });
        let mut stream = open_stream(&mut client, rpc, request).await;
        let records = collect(&mut stream, 51).await;
        for (record, line) in records.iter().zip(&lines) {
            assert_eq!(record.data.as_ref(), line.as_slice(), "{rpc}: bytes differ");
            assert_eq!(record.block_number, Some(block_number(line) as i64));
            assert_eq!(record.timestamp, Some(block_time_ms(line)));
        }
        nothing_within(&mut stream, Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn positions_land_on_the_right_line() {
    positions_land(&real("btc-985148182")).await;
}

async fn positions_land(data: &std::path::Path) {
    let server = TestServer::start(data, |_| {}).await;
    let mut client = server.client().await;
    let lines = real_lines("btc-985148182", "node_fills_by_block");
    let cases = [
        ("first block", at_block(FIRST), 0),
        ("middle block", at_block(FIRST + 25), 25),
        ("last block", at_block(LAST), 50),
        ("before the first block", at_block(1), 0),
        ("first time", at_time(block_time_ms(&lines[0])), 0),
        ("middle time", at_time(block_time_ms(&lines[30])), 30),
        (
            "just after a block's time",
            at_time(block_time_ms(&lines[30]) + 1),
            31,
        ),
        ("last time", at_time(block_time_ms(&lines[50])), 50),
        ("before the first time", at_time(1_000), 0),
    ];
    for (name, position, index) in cases {
        let mut stream = client
            .stream_fills(server.req(StreamRequest {
                position,
                filter: None,
            }))
            .await
            .unwrap()
            .into_inner();
        let record = next(&mut stream, WAIT).await.unwrap();
        assert_eq!(
            record.data.as_ref(),
            lines[index].as_slice(),
            "stream, {name}"
        );
        let got = client
            .get_fills(server.req(GetRequest {
                position,
                filter: None,
            }))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(got.data.as_ref(), lines[index].as_slice(), "get, {name}");
    }
    for position in [at_block(LAST + 1), at_time(block_time_ms(&lines[50]) + 1)] {
        let mut stream = client
            .stream_fills(server.req(StreamRequest {
                position,
                filter: None,
            }))
            .await
            .unwrap()
            .into_inner();
        nothing_within(&mut stream, Duration::from_millis(300)).await;
    }
}

/// Events of a line as JSON values, with their exact bytes.
fn events(line: &[u8]) -> Vec<(Value, Vec<u8>)> {
    let env = feeds::envelope::decode(line).unwrap();
    env.events()
        .map(|span| {
            let bytes = line[span.unwrap()].to_vec();
            (serde_json::from_slice(&bytes).unwrap(), bytes)
        })
        .collect()
}

fn user_and_coin(source: &str, event: &Value) -> (String, String) {
    match source {
        "fills" => (
            event[0].as_str().unwrap().to_owned(),
            event[1]["coin"].as_str().unwrap().to_owned(),
        ),
        "order_statuses" => (
            event["user"].as_str().unwrap().to_owned(),
            event["order"]["coin"].as_str().unwrap().to_owned(),
        ),
        _ => (
            event["user"].as_str().unwrap().to_owned(),
            event["coin"].as_str().unwrap().to_owned(),
        ),
    }
}

/// What a filtered stream must deliver, computed with serde_json: per line
/// with at least one match, the matching events' bytes.
fn expected(
    lines: &[Vec<u8>],
    source: &str,
    users: Option<&[&str]>,
    coins: Option<&[&str]>,
) -> Vec<(u64, Vec<Vec<u8>>)> {
    let users: Option<HashSet<String>> =
        users.map(|u| u.iter().map(|s| s.to_lowercase()).collect());
    lines
        .iter()
        .filter_map(|line| {
            let kept: Vec<Vec<u8>> = events(line)
                .into_iter()
                .filter(|(value, _)| {
                    let (user, coin) = user_and_coin(source, value);
                    users
                        .as_ref()
                        .is_none_or(|set| set.contains(&user.to_lowercase()))
                        && coins.is_none_or(|set| set.contains(&coin.as_str()))
                })
                .map(|(_, bytes)| bytes)
                .collect();
            (!kept.is_empty()).then(|| (block_number(line), kept))
        })
        .collect()
}

/// Opens the stream RPC of one of the three feeds the captures hold.
async fn open_stream(
    client: &mut VenueL1GatewayClient<Channel>,
    feed: &str,
    request: tonic::Request<StreamRequest>,
) -> tonic::Streaming<Record> {
    match feed {
        "fills" => client.stream_fills(request).await,
        "raw_book_diffs" => client.stream_raw_book_diffs(request).await,
        "order_statuses" => client.stream_order_statuses(request).await,
        other => panic!("no stream for feed {other}"),
    }
    .unwrap()
    .into_inner()
}

async fn filtered_stream(
    server: &TestServer,
    source: &str,
    from: i64,
    filter: Option<Filter>,
    count: usize,
) -> Vec<Record> {
    let mut client = server.client().await;
    let request = server.req(StreamRequest {
        position: at_block(from),
        filter,
    });
    let mut stream = open_stream(&mut client, source, request).await;
    let records = collect(&mut stream, count).await;
    nothing_within(&mut stream, Duration::from_millis(300)).await;
    records
}

fn assert_filtered(records: &[Record], expected: &[(u64, Vec<Vec<u8>>)], originals: &[Vec<u8>]) {
    assert_eq!(records.len(), expected.len());
    for (record, (block, kept)) in records.iter().zip(expected) {
        assert_eq!(record.block_number, Some(*block as i64));
        let got: Vec<Vec<u8>> = events(&record.data).into_iter().map(|(_, b)| b).collect();
        assert_eq!(&got, kept, "block {block}: kept events differ");
        // The envelope around the events is the source's, byte for byte.
        let original = originals
            .iter()
            .find(|l| block_number(l) == *block)
            .unwrap();
        let head = &original[..feeds::envelope::decode(original).unwrap().events.start];
        assert!(record.data.starts_with(head));
        assert!(record.data.ends_with(b"]}"));
        serde_json::from_slice::<Value>(&record.data).unwrap();
    }
}

#[tokio::test]
async fn coin_and_user_filters_keep_exactly_the_matching_events() {
    let server = TestServer::start(&real("btc-985148182"), |_| {}).await;
    for (source, dir) in [
        ("fills", "node_fills_by_block"),
        ("raw_book_diffs", "node_raw_book_diffs_by_block"),
        ("order_statuses", "node_order_statuses_by_block"),
    ] {
        let lines = real_lines("btc-985148182", dir);
        let want = expected(&lines, source, None, Some(&["BTC"]));
        let got = filtered_stream(
            &server,
            source,
            FIRST,
            filter(&[("coins", &["BTC"])]),
            want.len(),
        )
        .await;
        assert_filtered(&got, &want, &lines);

        // Two users, one written in upper case, taken from the data itself.
        let mut users: Vec<String> = lines
            .iter()
            .flat_map(|l| events(l))
            .map(|(v, _)| user_and_coin(source, &v).0)
            .collect();
        users.sort();
        users.dedup();
        let picked = [
            users[0].to_uppercase().replace("0X", "0x"),
            users[users.len() / 2].clone(),
        ];
        let picked: Vec<&str> = picked.iter().map(String::as_str).collect();
        let want = expected(&lines, source, Some(&picked), None);
        assert!(!want.is_empty());
        let got = filtered_stream(
            &server,
            source,
            FIRST,
            filter(&[("users", &picked), ("coins", &["BTC", "ETH"])]),
            want.len(),
        )
        .await;
        assert_filtered(&got, &want, &lines);
    }
}

#[tokio::test]
async fn filters_on_unfiltered_fills_across_market_kinds() {
    let server = TestServer::start(&real("fills-unfiltered"), |_| {}).await;
    let lines = real_lines("fills-unfiltered", "node_fills_by_block");
    let first = block_number(&lines[0]) as i64;
    let coins: HashSet<String> = lines
        .iter()
        .flat_map(|l| events(l))
        .map(|(v, _)| user_and_coin("fills", &v).1)
        .collect();
    let spot = coins.iter().find(|c| c.starts_with('@')).unwrap().clone();
    let builder = coins.iter().find(|c| c.contains(':')).unwrap().clone();
    for coin in [spot.as_str(), builder.as_str(), "PURR/USDC"] {
        let want = expected(&lines, "fills", None, Some(&[coin]));
        if coin == "PURR/USDC" && want.is_empty() {
            continue;
        }
        assert!(!want.is_empty(), "{coin} has fills");
        let got = filtered_stream(
            &server,
            "fills",
            first,
            filter(&[("coins", &[coin])]),
            want.len(),
        )
        .await;
        assert_filtered(&got, &want, &lines);
    }
    let user = user_and_coin("fills", &events(&lines[0])[0].0).0;
    let mixed: String = user
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if i % 2 == 0 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect::<String>()
        .replacen("0X", "0x", 1);
    let want = expected(&lines, "fills", Some(&[&user]), None);
    let got = filtered_stream(
        &server,
        "fills",
        first,
        filter(&[("users", &[&mixed])]),
        want.len(),
    )
    .await;
    assert_filtered(&got, &want, &lines);
}

#[tokio::test]
async fn unary_get_selects_then_filters() {
    let server = TestServer::start(&real("btc-985148182"), |_| {}).await;
    let mut client = server.client().await;
    let lines = real_lines("btc-985148182", "node_fills_by_block");
    // A block whose fills line has no event for this coin: the record is
    // still returned, with an empty events array.
    let got = client
        .get_fills(server.req(GetRequest {
            position: at_block(FIRST),
            filter: filter(&[("coins", &["ETH"])]),
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.block_number, Some(FIRST));
    let value: Value = serde_json::from_slice(&got.data).unwrap();
    assert_eq!(value["events"], Value::Array(vec![]));
    assert_eq!(value["block_number"], Value::from(FIRST));
    // Everything around the (now empty) events array is the source's bytes.
    let head = &lines[0][..feeds::envelope::decode(&lines[0]).unwrap().events.start];
    assert!(got.data.starts_with(head));
    assert_eq!(&got.data[head.len()..], b"[]}");
}

#[tokio::test]
async fn list_feeds_advertises_every_feed() {
    let server = TestServer::start(&real("btc-985148182"), |_| {}).await;
    let mut client = server.client().await;
    let feeds = client
        .list_feeds(server.req(ListFeedsRequest {}))
        .await
        .unwrap()
        .into_inner()
        .feeds;
    let ids: Vec<&str> = feeds.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "blocks",
            "fills",
            "raw_book_diffs",
            "order_statuses",
            "misc_events",
            "twap_statuses",
            "orderbook_snapshots"
        ]
    );
    let fills = &feeds[1];
    assert_eq!(fills.source, "node_fills_by_block");
    assert_eq!(fills.filter_fields, ["users", "coins"]);
    assert_eq!(
        fills.position_kinds,
        [
            PositionKind::BlockNumber as i32,
            PositionKind::Timestamp as i32
        ]
    );
    let snapshots = &feeds[6];
    assert_eq!(snapshots.position_kinds, [PositionKind::Timestamp as i32]);
    assert!(snapshots.filter_fields.is_empty());
    assert!(
        feeds[4].filter_fields.is_empty(),
        "misc_events is not filterable"
    );
}

#[tokio::test]
async fn orderbook_snapshot_is_served_whole() {
    let server = TestServer::start(&real("btc-985148182"), |_| {}).await;
    let mut client = server.client().await;
    let file = std::fs::read(real("btc-985148182").join("l4_snapshot_985148181.json")).unwrap();
    let got = client
        .get_orderbook_snapshot(server.req(GetRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.block_number, Some(985_148_181));
    assert_eq!(got.data.len(), file.len());
    assert!(got.data == file, "snapshot bytes differ");
    let mut stream = client
        .stream_orderbook_snapshots(server.req(StreamRequest::default()))
        .await
        .unwrap()
        .into_inner();
    let first = next(&mut stream, WAIT).await.unwrap();
    assert_eq!(first.block_number, Some(985_148_181));
    nothing_within(&mut stream, Duration::from_millis(300)).await;
}

//! The raw feed's live tail over a node directory that a test writer grows
//! while clients stream: lines written in pieces, hour rollover, sources that
//! appear after the server started, and the timing-driven statuses.

use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use proto::{GetRequest, Position, StreamRequest, position};
use tonic::Code;

use super::harness::{TestServer, block_number, next, nothing_within};

const WAIT: Duration = Duration::from_secs(30);
const BASE_MS: i64 = 1_777_582_003_304; // 2026-04-30T20:46:43.304

fn line(block: u64) -> String {
    let ms = BASE_MS + (block as i64) * 70;
    let time = feeds::time::format_node_time(ms * 1_000_000);
    format!(
        "{{\"local_time\":\"{time}\",\"block_time\":\"{time}\",\"block_number\":{block},\"events\":[[\"0x00000000000000000000000000000000000000{:02x}\",{{\"coin\":\"BTC\",\"px\":\"1.0\",\"sz\":\"1.0\",\"side\":\"B\",\"time\":{ms},\"tid\":{block}}}]]}}\n",
        block % 256
    )
}

fn hour_file(root: &Path, source: &str, hour: u32) -> PathBuf {
    let dir = root.join("hl/data").join(source).join("hourly/20260430");
    fs::create_dir_all(&dir).unwrap();
    dir.join(hour.to_string())
}

fn append(path: &Path, text: &str) {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file.flush().unwrap();
}

fn blocks(records: &[proto::Record]) -> Vec<u64> {
    records.iter().map(|r| block_number(&r.data)).collect()
}

#[tokio::test]
async fn live_tail_delivers_every_line_once_across_rollover_and_new_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let hour20 = hour_file(root, "node_fills_by_block", 20);
    for block in 1..=5 {
        append(&hour20, &line(block));
    }
    let server = TestServer::start(root, |a| a.poll_interval_ms = Some(2)).await;
    let mut client = server.client().await;
    let mut tail = client
        .stream_fills(server.req(StreamRequest::default()))
        .await
        .unwrap()
        .into_inner();
    let mut history = client
        .stream_fills(server.req(StreamRequest {
            position: Some(Position {
                kind: Some(position::Kind::BlockNumber(3)),
            }),
            filter: None,
        }))
        .await
        .unwrap()
        .into_inner();
    // A raw-diffs feed that does not exist yet when the server starts.
    let mut late = client
        .stream_raw_book_diffs(server.req(StreamRequest::default()))
        .await
        .unwrap()
        .into_inner();
    tokio::time::sleep(Duration::from_millis(100)).await;

    let writer = tokio::task::spawn_blocking({
        let root = root.to_owned();
        move || {
            let hour20 = hour_file(&root, "node_fills_by_block", 20);
            for block in 6..=10 {
                append(&hour20, &line(block));
                std::thread::sleep(Duration::from_millis(5));
            }
            // A line written in two halves with a pause between them.
            let text = line(11);
            let (a, b) = text.split_at(text.len() / 2);
            append(&hour20, a);
            std::thread::sleep(Duration::from_millis(150));
            append(&hour20, b);
            // Hour rollover: the next hour's file starts.
            let hour21 = hour_file(&root, "node_fills_by_block", 21);
            for block in 12..=20 {
                append(&hour21, &line(block));
                std::thread::sleep(Duration::from_millis(3));
            }
            // A new source appears after the server started.
            let diffs = hour_file(&root, "node_raw_book_diffs_by_block", 21);
            for block in 100..=102 {
                append(&diffs, &line(block));
            }
        }
    });

    let mut got_tail = Vec::new();
    for _ in 6..=20 {
        got_tail.push(next(&mut tail, WAIT).await.unwrap());
    }
    assert_eq!(blocks(&got_tail), (6..=20).collect::<Vec<_>>());
    let mut got_history = Vec::new();
    for _ in 3..=20 {
        got_history.push(next(&mut history, WAIT).await.unwrap());
    }
    assert_eq!(blocks(&got_history), (3..=20).collect::<Vec<_>>());
    let mut got_late = Vec::new();
    for _ in 100..=102 {
        got_late.push(next(&mut late, WAIT).await.unwrap());
    }
    assert_eq!(blocks(&got_late), vec![100, 101, 102]);
    writer.await.unwrap();
    // The half-written line arrived whole, exactly as written.
    let eleven = got_tail
        .iter()
        .find(|r| block_number(&r.data) == 11)
        .unwrap();
    assert_eq!(eleven.data.as_ref(), line(11).trim_end().as_bytes());
    nothing_within(&mut tail, Duration::from_millis(200)).await;
}

#[tokio::test]
async fn get_with_unset_position_waits_for_the_next_record() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_owned();
    let hour = hour_file(&root, "node_fills_by_block", 20);
    append(&hour, &line(1));
    let server = TestServer::start(&root, |a| a.poll_interval_ms = Some(2)).await;
    let mut client = server.client().await;
    // The request's arrival at the server cannot be observed from here, so
    // keep writing new blocks until the get answers: whatever it returns
    // must be one of them, never block 1, which existed before the call.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut block = 2;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && block < 600 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                append(&hour, &line(block));
                block += 1;
            }
            block
        }
    });
    let got = client
        .get_fills(server.req(GetRequest::default()))
        .await
        .unwrap()
        .into_inner();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.await.unwrap();
    let block = got.block_number.unwrap();
    assert!(block >= 2 && (block as u64) < written, "got block {block}");
    assert_eq!(got.data.as_ref(), line(block as u64).trim_end().as_bytes());
}

#[tokio::test]
async fn a_quiet_live_stream_ends_unavailable_after_the_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    append(&hour_file(dir.path(), "node_fills_by_block", 20), &line(1));
    let server = TestServer::start(dir.path(), |a| a.idle_timeout_ms = Some(300)).await;
    let mut client = server.client().await;
    let mut stream = client
        .stream_fills(server.req(StreamRequest::default()))
        .await
        .unwrap()
        .into_inner();
    let status = next(&mut stream, WAIT).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert!(
        status.message().contains("no new records"),
        "{}",
        status.message()
    );
    // A unary get with unset position is bounded the same way.
    let status = client
        .get_fills(server.req(GetRequest::default()))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
}

fn big_feed(root: &Path, count: u64) {
    let mut text = String::new();
    for block in 1..=count {
        text.push_str(&line(block));
    }
    append(&hour_file(root, "node_fills_by_block", 20), &text);
}

#[tokio::test]
async fn replay_capacity_is_shared_and_exhaustion_is_resource_exhausted() {
    let dir = tempfile::tempdir().unwrap();
    big_feed(dir.path(), 50_000);
    let server = TestServer::start(dir.path(), |a| a.max_replays = Some(1)).await;
    let mut client = server.client().await;
    let from = || StreamRequest {
        position: Some(Position {
            kind: Some(position::Kind::BlockNumber(1)),
        }),
        filter: None,
    };
    // Opened and never read: it stays behind the tail holding the permit.
    let _held = client
        .stream_fills(server.req(from()))
        .await
        .unwrap()
        .into_inner();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut filtered = from();
    filtered.filter = Some(proto::Filter {
        fields: vec![proto::FieldFilter {
            field: "coins".into(),
            op: 0,
            values: vec!["BTC".into()],
        }],
    });
    let status = client.stream_fills(server.req(filtered)).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(status.message().contains("replay"), "{}", status.message());
    // The live tail needs no replay permit.
    assert!(
        client
            .stream_fills(server.req(StreamRequest::default()))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn a_subscriber_that_stops_reading_ends_deadline_exceeded() {
    let dir = tempfile::tempdir().unwrap();
    big_feed(dir.path(), 50_000);
    let server = TestServer::start(dir.path(), |a| a.send_timeout_ms = Some(300)).await;
    let mut client = server.client().await;
    let mut stream = client
        .stream_fills(server.req(StreamRequest {
            position: Some(Position {
                kind: Some(position::Kind::BlockNumber(1)),
            }),
            filter: None,
        }))
        .await
        .unwrap()
        .into_inner();
    // Stop reading long enough for the server's send to time out.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let mut delivered = 0u64;
    let status = loop {
        match next(&mut stream, WAIT).await {
            Ok(record) => {
                delivered += 1;
                assert_eq!(
                    block_number(&record.data),
                    delivered,
                    "records stay in order"
                );
            }
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert!(delivered < 50_000);
    assert!(
        status
            .message()
            .contains(&format!("reconnect from block_number {}", delivered + 1)),
        "{}",
        status.message()
    );
}

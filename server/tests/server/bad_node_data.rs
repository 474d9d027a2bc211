//! Node files with bad lines: garbage, an envelope without a block number,
//! a duplicated line, a line that is not UTF-8, and a line cut to its
//! header's block number (`local_time` gone) written before its block's real
//! line. Only whole envelopes are taken for a block: the raw feed sends each
//! block once, from its real line; the engine folds the rest; everything
//! dropped is counted in `/metrics`; `replay` reports it and, with
//! `--fail-on-bad-data`, fails.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::access_support::sample;
use super::harness::{TestServer, block_number, from_block, next, real};
use super::market_live::ready;

const FILLS: &str = "hl/data/node_fills_by_block/hourly/20260505/17";
const LAST_BLOCK: u64 = 985_148_232;

/// What [`damaged_copy`] did to the fills file.
struct Damage {
    /// Lines left whole.
    good: usize,
    /// The block whose only line is not UTF-8.
    not_utf8: u64,
    /// The block whose real line follows a copy without `local_time`.
    imitated: u64,
}

/// A copy of the real capture with bad lines in its fills file.
fn damaged_copy(dir: &Path) -> Damage {
    let source = real("btc-985148182");
    for entry in walk(&source) {
        let to = dir.join(entry.strip_prefix(&source).unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&entry, &to).unwrap();
    }
    let path = dir.join(FILLS);
    let text = std::fs::read(&path).unwrap();
    let mut lines: Vec<Vec<u8>> = text
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    // An event whose coin is not UTF-8 (the header still decodes).
    let with_fill = lines
        .iter()
        .position(|l| l.windows(12).any(|w| w == b"\"coin\":\"BTC\""))
        .expect("a BTC fill");
    let at = lines[with_fill]
        .windows(12)
        .position(|w| w == b"\"coin\":\"BTC\"")
        .unwrap()
        + 8;
    lines[with_fill][at] = 0xff;
    let not_utf8 = block_number(&lines[with_fill]);
    // Block 30's line, cut to its header: `local_time` gone.
    let real = String::from_utf8(lines[30].clone()).unwrap();
    let cut_from = real.find(r#""local_time":""#).unwrap();
    let cut_to = cut_from + real[cut_from..].find(',').unwrap() + 1;
    let imitation = format!("{}{}", &real[..cut_from], &real[cut_to..]);
    let imitated = block_number(real.as_bytes());
    lines.insert(30, imitation.into_bytes());
    let good = lines.len() - 2;
    let duplicate = lines[20].clone();
    lines.insert(21, duplicate);
    lines.insert(
        10,
        br#"{"local_time":"2026-05-05T17:00:00.000","block_time":"2026-05-05T17:00:00.000","events":[]}"#
            .to_vec(),
    );
    lines.insert(5, b"this is not a node line".to_vec());
    let mut out = lines.join(&b'\n');
    out.push(b'\n');
    std::fs::write(&path, out).unwrap();
    Damage {
        good,
        not_utf8,
        imitated,
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lines_are_skipped_counted_and_never_sent_without_a_block() {
    let dir = tempfile::tempdir().unwrap();
    let damage = damaged_copy(dir.path());
    let server = TestServer::start(dir.path(), |_| {}).await;
    ready(&server).await;
    let mut fills = server
        .client()
        .await
        .stream_fills(server.req(from_block(1)))
        .await
        .unwrap()
        .into_inner();
    let mut blocks = Vec::new();
    while blocks.last() != Some(&LAST_BLOCK) {
        let record = next(&mut fills, Duration::from_secs(30)).await.unwrap();
        let number = u64::try_from(record.block_number.expect("every record has a block")).unwrap();
        assert_eq!(number, block_number(&record.data), "the record's own line");
        assert!(
            record.data.starts_with(br#"{"local_time":""#),
            "block {number} sent from a whole line"
        );
        blocks.push(number);
    }
    assert_eq!(blocks.len(), damage.good, "each good line once: {blocks:?}");
    assert!(blocks.contains(&damage.imitated), "{blocks:?}");
    assert!(!blocks.contains(&damage.not_utf8), "{blocks:?}");
    assert!(
        blocks
            .windows(2)
            .all(|w| w[1] == w[0] + 1 || (w[0] + 2 == w[1] && w[0] + 1 == damage.not_utf8)),
        "in order, no duplicate, only the line that is not UTF-8 missing: {blocks:?}"
    );
    let metrics = super::slow_subscribers::metrics(&server).await;
    for (series, want) in [
        (
            "l1gate_raw_feed_anomalies_total{feed=\"fills\",reason=\"undecodable\"}",
            4,
        ),
        (
            "l1gate_raw_feed_anomalies_total{feed=\"fills\",reason=\"duplicate\"}",
            1,
        ),
    ] {
        assert_eq!(sample(&metrics, series), want, "{series}\n{metrics}");
    }
    for (series, at_least) in [
        (
            "l1gate_engine_lines_dropped_total{reason=\"not_an_envelope\"}",
            4,
        ),
        ("l1gate_engine_lines_dropped_total{reason=\"duplicate\"}", 1),
    ] {
        assert!(
            sample(&metrics, series) >= at_least,
            "{series} under {at_least}\n{metrics}"
        );
    }
}

#[test]
fn replay_reports_bad_data_and_fails_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    damaged_copy(dir.path());
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_l1gate"))
            .args(["replay", "--view", "trades", "--coins", "BTC", "--data"])
            .arg(dir.path())
            .args(extra)
            .output()
            .unwrap()
    };
    let lenient = run(&[]);
    assert!(lenient.status.success(), "{lenient:?}");
    let summary = String::from_utf8_lossy(&lenient.stderr).into_owned();
    assert!(
        summary.contains("5 lines dropped (4 not envelopes, 1 duplicates"),
        "{summary}"
    );
    let strict = run(&["--fail-on-bad-data"]);
    assert!(!strict.status.success(), "{strict:?}");
    let error = String::from_utf8_lossy(&strict.stderr).into_owned();
    assert!(error.contains("--fail-on-bad-data"), "{error}");
}

/// A server over a copy of the real capture, and a fills stream that has
/// read the whole file and waits at its end.
async fn serving_a_copy() -> (
    tempfile::TempDir,
    TestServer,
    proto::venue_l1_gateway_client::VenueL1GatewayClient<tonic::transport::Channel>,
    tonic::Streaming<proto::Record>,
) {
    let dir = tempfile::tempdir().unwrap();
    let source = real("btc-985148182");
    for entry in walk(&source) {
        let to = dir.path().join(entry.strip_prefix(&source).unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&entry, &to).unwrap();
    }
    let server = TestServer::start(dir.path(), |_| {}).await;
    ready(&server).await;
    let mut client = server.client().await;
    let mut fills = client
        .stream_fills(server.req(from_block(1)))
        .await
        .unwrap()
        .into_inner();
    loop {
        let record = next(&mut fills, Duration::from_secs(30)).await.unwrap();
        if record.block_number == Some(i64::try_from(LAST_BLOCK).unwrap()) {
            break;
        }
    }
    (dir, server, client, fills)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_file_that_shrinks_does_not_take_the_server_down() {
    let (dir, server, mut client, mut fills) = serving_a_copy().await;
    // Rewritten shorter, as no node would.
    std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join(FILLS))
        .unwrap()
        .set_len(1_000)
        .unwrap();
    let status = next(&mut fills, Duration::from_secs(30)).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::DataLoss, "{status:?}");
    assert!(
        status
            .message()
            .contains(&format!("last block sent {LAST_BLOCK}")),
        "{}",
        status.message()
    );
    // Still serving: counted, and a new stream reads the file as it is now.
    let metrics = super::slow_subscribers::metrics(&server).await;
    assert!(
        sample(&metrics, "l1gate_feed_files_shrunk_total{feed=\"fills\"}") >= 1,
        "{metrics}"
    );
    let mut again = client
        .stream_raw_book_diffs(server.req(from_block(1)))
        .await
        .unwrap()
        .into_inner();
    next(&mut again, Duration::from_secs(30)).await.unwrap();
}

/// The node's fills file replaced under its name — written elsewhere with
/// three more blocks and renamed over it, as copy tools and log shippers do:
/// a stream waiting at the old file's end ends with `DATA_LOSS` naming the
/// last block it sent, the new blocks are served (a positioned get finds
/// them), and the replacement is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_file_replaced_under_its_name_is_followed() {
    let (dir, server, mut client, mut fills) = serving_a_copy().await;
    // The same lines and three blocks more (the last block's line again
    // under the next numbers), staged beside it and renamed over it.
    let path = dir.path().join(FILLS);
    let mut text = std::fs::read_to_string(&path).unwrap();
    let last = text.lines().last().unwrap().to_owned();
    for block in LAST_BLOCK + 1..=LAST_BLOCK + 3 {
        text.push_str(&last.replace(
            &format!("\"block_number\":{LAST_BLOCK}"),
            &format!("\"block_number\":{block}"),
        ));
        text.push('\n');
    }
    let staged = path.with_extension("staged");
    std::fs::write(&staged, text).unwrap();
    std::fs::rename(&staged, &path).unwrap();
    let status = next(&mut fills, Duration::from_secs(30)).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::DataLoss, "{status:?}");
    assert!(
        status.message().contains("replaced")
            && status
                .message()
                .contains(&format!("last block sent {LAST_BLOCK}")),
        "{}",
        status.message()
    );
    let wanted = i64::try_from(LAST_BLOCK + 2).unwrap();
    let got = client
        .get_fills(server.req(proto::GetRequest {
            position: Some(proto::Position {
                kind: Some(proto::position::Kind::BlockNumber(wanted)),
            }),
            filter: None,
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.block_number, Some(wanted));
    let metrics = super::slow_subscribers::metrics(&server).await;
    assert_eq!(
        sample(&metrics, "l1gate_feed_files_replaced_total{feed=\"fills\"}"),
        1,
        "{metrics}"
    );
}

//! Candle lookups end to end over loopback HTTP: every market form and
//! interval against an independent calculation from the fills files,
//! restarts on the same store (with backfill of what was written while the
//! server was down, a server killed mid-commit, and Info's `candleSnapshot`
//! of the buckets open at a restart), damaged chunks rebuilt from the
//! node's files, the 400/401/404 answers, and `/healthz` freshness.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use engine::market::candles::Interval;
use http_body_util::{BodyExt as _, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::Value;

use super::harness::{TestServer, real};

pub const INTERVALS: [(&str, i64); 3] = [("1s", 1_000), ("1m", 60_000), ("5m", 300_000)];

// ---------------------------------------------------------------------------
// The independent calculation: serde_json over the fills lines, pairing by
// (coin, tid) within a block, bucketing by fill time, exact integer sums.

/// An exact decimal `units / 10^scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dec {
    units: i128,
    scale: u32,
}

fn dec(text: &str) -> Dec {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = format!("{int}{frac}");
    Dec {
        units: digits.parse().unwrap(),
        scale: frac.len() as u32,
    }
}

fn rescale(d: Dec, scale: u32) -> i128 {
    d.units * 10i128.pow(scale - d.scale)
}

fn add(a: Dec, b: Dec) -> Dec {
    let scale = a.scale.max(b.scale);
    Dec {
        units: rescale(a, scale) + rescale(b, scale),
        scale,
    }
}

fn cmp(a: Dec, b: Dec) -> std::cmp::Ordering {
    let scale = a.scale.max(b.scale);
    rescale(a, scale).cmp(&rescale(b, scale))
}

/// Trailing zeros trimmed, at least one decimal.
pub fn canonical(d: Dec) -> String {
    let (mut units, mut scale) = (d.units, d.scale);
    while scale > 1 && units % 10 == 0 {
        units /= 10;
        scale -= 1;
    }
    if scale == 0 {
        return format!("{units}.0");
    }
    let factor = 10i128.pow(scale);
    format!(
        "{}.{:0width$}",
        units / factor,
        units % factor,
        width = scale as usize
    )
}

#[derive(Debug, Clone)]
pub struct Expected {
    open: String,
    high: (Dec, String),
    low: (Dec, String),
    close: String,
    volume: Dec,
    notional: Dec,
    trades: u64,
    max_px_scale: u32,
}

impl Expected {
    /// Σpx·sz / Σsz rounded half up to (finest price scale + 4) decimals.
    fn vwap(&self) -> String {
        let scale = (self.max_px_scale + 4).min(18);
        // q = notional / volume * 10^scale
        let num = self.notional.units * 10i128.pow(self.volume.scale + scale);
        let den = self.volume.units * 10i128.pow(self.notional.scale);
        let q = (2 * num + den) / (2 * den);
        canonical(Dec { units: q, scale })
    }
}

struct Trade {
    coin: String,
    px: String,
    sz: String,
    time: i64,
}

/// The trades of one block's fills, in order of their first fill.
fn block_trades(events: &[Value]) -> Vec<Trade> {
    let mut groups: Vec<((String, u64), Vec<&Value>)> = Vec::new();
    for event in events {
        let fill = &event[1];
        let dir = fill["dir"].as_str().unwrap_or("");
        let tid = fill["tid"].as_u64().unwrap();
        if tid == 0
            || matches!(
                dir,
                "Spot Dust Conversion" | "Split Outcome" | "Merge Outcome"
            )
        {
            continue;
        }
        let key = (fill["coin"].as_str().unwrap().to_owned(), tid);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, fills)) => fills.push(fill),
            None => groups.push((key, vec![fill])),
        }
    }
    groups
        .into_iter()
        .filter_map(|((coin, _), fills)| {
            let [a, b] = fills.as_slice() else {
                return None;
            };
            let opposite = a["side"] != b["side"];
            let same = dec(a["px"].as_str()?) == dec(b["px"].as_str()?)
                && dec(a["sz"].as_str()?) == dec(b["sz"].as_str()?);
            (opposite && same).then(|| Trade {
                coin,
                px: a["px"].as_str().unwrap().to_owned(),
                sz: a["sz"].as_str().unwrap().to_owned(),
                time: a["time"].as_i64().unwrap(),
            })
        })
        .collect()
}

pub type Key = (String, &'static str, i64);

/// Whether a coin name has one market form.
type MarketForm = fn(&str) -> bool;

/// Every candle of the given fills lines: (coin, interval, open) → values.
/// Consecutive lines of one block (the node's streaming mode) are paired
/// together.
pub fn expected_candles(lines: &[Vec<u8>]) -> BTreeMap<Key, Expected> {
    let names: Vec<&'static str> = INTERVALS.iter().map(|(name, _)| *name).collect();
    expected_candles_in(lines, &names)
}

/// [`expected_candles`] in the named intervals (any of the exchange's
/// fifteen, and `1s`; the buckets' edges are the engine's, the values
/// this file's own).
pub fn expected_candles_in(
    lines: &[Vec<u8>],
    intervals: &[&'static str],
) -> BTreeMap<Key, Expected> {
    let mut blocks: Vec<(u64, Vec<Value>)> = Vec::new();
    for line in lines {
        let envelope: Value = serde_json::from_slice(line).unwrap();
        let number = envelope["block_number"].as_u64().unwrap();
        let events = envelope["events"].as_array().unwrap().clone();
        match blocks.last_mut() {
            Some((last, all)) if *last == number => all.extend(events),
            _ => blocks.push((number, events)),
        }
    }
    let mut out: BTreeMap<Key, Expected> = BTreeMap::new();
    for (_, events) in &blocks {
        for trade in block_trades(events) {
            let (px, sz) = (dec(&trade.px), dec(&trade.sz));
            let notional = Dec {
                units: px.units * sz.units,
                scale: px.scale + sz.scale,
            };
            for &name in intervals {
                let open = Interval::parse(name).unwrap().bucket_open(trade.time);
                out.entry((trade.coin.clone(), name, open))
                    .and_modify(|c| {
                        if cmp(px, c.high.0).is_gt() {
                            c.high = (px, trade.px.clone());
                        }
                        if cmp(px, c.low.0).is_lt() {
                            c.low = (px, trade.px.clone());
                        }
                        c.close.clone_from(&trade.px);
                        c.volume = add(c.volume, sz);
                        c.notional = add(c.notional, notional);
                        c.trades += 1;
                        c.max_px_scale = c.max_px_scale.max(px.scale);
                    })
                    .or_insert_with(|| Expected {
                        open: trade.px.clone(),
                        high: (px, trade.px.clone()),
                        low: (px, trade.px.clone()),
                        close: trade.px.clone(),
                        volume: sz,
                        notional,
                        trades: 1,
                        max_px_scale: px.scale,
                    });
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// HTTP over one keep-alive connection.

pub struct Http {
    sender: SendRequest<Empty<Bytes>>,
}

pub struct Reply {
    pub status: u16,
    pub cache_control: Option<String>,
    pub body: Value,
}

impl Http {
    pub async fn connect(addr: std::net::SocketAddr) -> Self {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        Self { sender }
    }

    pub async fn get(&mut self, path: &str, header_key: Option<&str>) -> Reply {
        let mut request = hyper::Request::get(path).header("host", "l1gate.test");
        if let Some(key) = header_key {
            request = request.header("X-Api-Key", key);
        }
        self.sender.ready().await.unwrap();
        let response = self
            .sender
            .send_request(request.body(Empty::new()).unwrap())
            .await
            .unwrap();
        let status = response.status().as_u16();
        let cache_control = response
            .headers()
            .get("cache-control")
            .map(|v| v.to_str().unwrap().to_owned());
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&bytes)));
        Reply {
            status,
            cache_control,
            body,
        }
    }
}

/// Percent-encodes a query value (everything but unreserved characters).
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

pub fn iso(ms: i64) -> String {
    feeds::time::format_iso8601_ms(ms)
}

pub fn candle_path(key: &str, market: &str, interval: &str, open: i64) -> String {
    format!(
        "/{key}/v1/candles?market={}&interval={interval}&time={}",
        encode(market),
        encode(&iso(open))
    )
}

/// Waits until the candle writer has folded `last_block` and read to the end.
pub async fn wait_for_writer(server: &TestServer, last_block: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let (block, _, caught_up, error) = server.running.candles.progress();
        assert_eq!(error, None);
        if caught_up && block >= last_block {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "candle writer stuck at block {block} (want {last_block})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn assert_candle(reply: &Reply, market: &str, interval: &str, open: i64, want: &Expected) {
    assert_eq!(
        reply.status,
        200,
        "{market} {interval} {}: {}",
        iso(open),
        reply.body
    );
    let got = &reply.body;
    let what = format!("{market} {interval} {}", iso(open));
    assert_eq!(got["market"], market, "{what}");
    assert_eq!(got["interval"], interval, "{what}");
    assert_eq!(got["bucket_start"], iso(open), "{what}");
    assert_eq!(got["open"], want.open.as_str(), "{what}");
    assert_eq!(got["high"], want.high.1.as_str(), "{what}");
    assert_eq!(got["low"], want.low.1.as_str(), "{what}");
    assert_eq!(got["close"], want.close.as_str(), "{what}");
    assert_eq!(got["volume"], canonical(want.volume).as_str(), "{what}");
    assert_eq!(got["vwap"], want.vwap().as_str(), "{what}");
    assert_eq!(got["trades_count"], want.trades, "{what}");
    assert_eq!(got.as_object().unwrap().len(), 10, "{what}: {got}");
}

pub fn lines_of(path: &Path) -> Vec<Vec<u8>> {
    std::fs::read(path)
        .unwrap()
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

fn fills_file(folder: &Path) -> PathBuf {
    let mut files = Vec::new();
    for dir in ["node_fills_by_block", "node_fills_streaming"] {
        let dir = folder.join("hl/data").join(dir);
        if dir.is_dir() {
            collect_files(&dir, &mut files);
        }
    }
    assert_eq!(files.len(), 1, "{files:?}");
    files.pop().unwrap()
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_files(&path, out);
        } else {
            out.push(path);
        }
    }
}

pub fn header(line: &[u8]) -> (u64, i64) {
    let env = feeds::envelope::decode(line).unwrap();
    (env.block_number, env.block_time_ms)
}

/// These tests send hundreds of lookups in a burst.
pub fn unlimited(args: &mut l1gate::config::ServeArgs) {
    args.requests_per_second = Some(1_000_000);
    args.request_burst = Some(1_000_000);
}

// ---------------------------------------------------------------------------

#[tokio::test]
async fn every_market_form_and_interval_matches_an_independent_calculation() {
    let data = real("fills-unfiltered");
    let lines = lines_of(&fills_file(&data));
    let (last_block, _) = header(lines.last().unwrap());
    let (_, coverage) = header(&lines[0]);
    let expected = expected_candles(&lines);

    let server = TestServer::start(&data, unlimited).await;
    wait_for_writer(&server, last_block).await;
    let mut http = Http::connect(server.running.http_addr).await;

    // Every market form the node writes is in this capture, each with
    // candles of every interval in the covered range.
    let forms: [(&str, MarketForm); 4] = [
        ("perp", |c| c.bytes().all(|b| b.is_ascii_alphanumeric())),
        ("spot @index", |c| c.starts_with('@')),
        ("canonical pair", |c| c.contains('/')),
        ("builder perp", |c| c.contains(':')),
    ];
    for (form, is_form) in forms {
        for (interval, _) in INTERVALS {
            assert!(
                expected
                    .keys()
                    .any(|(c, i, open)| is_form(c) && *i == interval && *open >= coverage),
                "no {form} {interval} candle to check"
            );
        }
    }
    let mut checked = 0;
    for ((market, interval, open), want) in &expected {
        let path = candle_path(&server.key, market, interval, *open);
        let reply = http.get(&path, None).await;
        if *open < coverage {
            // The bucket began before the first block on disk: partial.
            assert_eq!(reply.status, 404, "{}", reply.body);
            assert_eq!(reply.body["error"], "not_covered", "{}", reply.body);
            continue;
        }
        assert_candle(&reply, market, interval, *open, want);
        checked += 1;
    }
    assert!(checked > 50, "only {checked} candles checked");

    // The header form answers the same, and closed buckets are cacheable
    // while the open one (still receiving trades) is not.
    let ((market, interval, open), want) = expected
        .iter()
        .find(|((c, i, _), _)| c == "@230" && *i == "1s")
        .unwrap();
    let path = format!(
        "/v1/candles?market={}&interval={interval}&time={}",
        encode(market),
        iso(*open)
    );
    let reply = http.get(&path, Some(&server.key)).await;
    assert_candle(&reply, market, interval, *open, want);
    assert_eq!(reply.cache_control.as_deref(), Some("public, max-age=3600"));
    let (_, last_time) = header(lines.last().unwrap());
    let current_5m = last_time - last_time.rem_euclid(300_000);
    let reply = http
        .get(&candle_path(&server.key, "@230", "5m", current_5m), None)
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.cache_control.as_deref(), Some("no-store"));

    // A resolver maps other names (spotMeta's `@0` for the canonical pair).
    server
        .running
        .candles
        .set_resolver(std::sync::Arc::new(|name: &str| {
            (name == "@0").then(|| "PURR/USDC".to_owned())
        }));
    let (key, want) = expected
        .iter()
        .find(|((c, i, open), _)| c == "PURR/USDC" && *i == "1m" && *open >= coverage)
        .unwrap();
    let reply = http
        .get(&candle_path(&server.key, "@0", "1m", key.2), None)
        .await;
    assert_candle(&reply, "@0", "1m", key.2, want);
}

#[tokio::test]
async fn bad_parameters_missing_buckets_and_wrong_keys() {
    let data = real("fills-unfiltered");
    let lines = lines_of(&fills_file(&data));
    let (last_block, last_time) = header(lines.last().unwrap());
    let (_, first_time) = header(&lines[0]);
    let expected = expected_candles(&lines);
    let server = TestServer::start(&data, unlimited).await;
    wait_for_writer(&server, last_block).await;
    let mut http = Http::connect(server.running.http_addr).await;
    let key = server.key.clone();
    let base = format!("/{key}/v1/candles");
    let minute = first_time - first_time.rem_euclid(60_000) + 60_000;
    let t = iso(minute);

    for (query, parameter) in [
        (format!("interval=1m&time={t}"), "market"),
        (format!("market=&interval=1m&time={t}"), "market"),
        (format!("market=%40abc&interval=1m&time={t}"), "market"),
        (format!("market=xyz%3A&interval=1m&time={t}"), "market"),
        (format!("market=BT%20C&interval=1m&time={t}"), "market"),
        (format!("market=AAVE&time={t}"), "interval"),
        (format!("market=AAVE&interval=1h&time={t}"), "interval"),
        (format!("market=AAVE&interval=1M&time={t}"), "interval"),
        ("market=AAVE&interval=1m".to_owned(), "time"),
        ("market=AAVE&interval=1m&time=yesterday".to_owned(), "time"),
        (
            "market=AAVE&interval=1m&time=2026-02-30T00:00:00Z".to_owned(),
            "time",
        ),
        (
            "market=AAVE&interval=1m&time=2026-03-15T00:01:00".to_owned(),
            "time",
        ),
        (format!("market=AAVE&interval=1m&time={t}&time={t}"), "time"),
        (
            format!("market=AAVE&interval=1m&time={}", iso(minute + 30_000)),
            "time",
        ),
    ] {
        let reply = http.get(&format!("{base}?{query}"), None).await;
        assert_eq!(reply.status, 400, "{query}: {}", reply.body);
        assert_eq!(reply.body["error"], "invalid_parameter", "{query}");
        assert_eq!(
            reply.body["parameter"], parameter,
            "{query}: {}",
            reply.body
        );
        assert!(
            reply.body["message"].as_str().unwrap().contains(parameter),
            "{query}: {}",
            reply.body
        );
    }
    // A time inside a bucket names the bucket that holds it.
    let reply = http
        .get(
            &format!(
                "{base}?market=AAVE&interval=1m&time={}",
                iso(minute + 30_000)
            ),
            None,
        )
        .await;
    assert!(
        reply.body["message"].as_str().unwrap().contains(&t),
        "{}",
        reply.body
    );
    // An offset is converted; a zero fraction is fine.
    let offset = format!("{}.000+01:00", &iso(minute + 3_600_000)[..19]);
    let reply = http
        .get(
            &format!("{base}?market=@230&interval=1m&time={}", encode(&offset)),
            None,
        )
        .await;
    let want = &expected[&("@230".to_owned(), "1m", minute)];
    assert_candle(&reply, "@230", "1m", minute, want);
    // `+` is taken literally, so an unencoded offset works too.
    let reply = http
        .get(
            &format!("{base}?market=@230&interval=1m&time={offset}"),
            None,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);

    // A complete bucket without trades: 404 saying candles are sparse.
    let quiet = (0..)
        .map(|i| first_time - first_time.rem_euclid(1_000) + 1_000 * (i + 1))
        .take_while(|open| open + 1_000 <= last_time)
        .find(|open| !expected.contains_key(&("AAVE".to_owned(), "1s", *open)))
        .unwrap();
    let reply = http
        .get(&candle_path(&key, "AAVE", "1s", quiet), None)
        .await;
    assert_eq!(reply.status, 404, "{}", reply.body);
    assert_eq!(reply.body["error"], "no_candle");
    assert!(
        reply.body["message"]
            .as_str()
            .unwrap()
            .contains("no trades")
    );

    let reply = http
        .get(
            &format!("{base}?market=AAVE&interval=1m&time=2025-07-27T07:59:00Z"),
            None,
        )
        .await;
    assert_eq!(reply.status, 404, "{}", reply.body);
    assert_eq!(reply.body["error"], "before_history_start");
    assert!(
        reply.body["message"]
            .as_str()
            .unwrap()
            .contains("2025-07-27T08:00:00Z")
    );

    let now = common::unix_now_ms();
    let future = now - now.rem_euclid(60_000) + 3_600_000;
    let reply = http
        .get(&candle_path(&key, "AAVE", "1m", future), None)
        .await;
    assert_eq!(reply.status, 404, "{}", reply.body);
    assert_eq!(reply.body["error"], "future_bucket");

    let reply = http
        .get(&candle_path(&key, "NOPE", "1m", minute), None)
        .await;
    assert_eq!(reply.status, 404, "{}", reply.body);
    assert_eq!(reply.body["error"], "unknown_market");

    let wrong = "l1g_0000000000000000000000000000000000000000000000000000000000000000";
    let reply = http
        .get(&candle_path(wrong, "AAVE", "1m", minute), None)
        .await;
    assert_eq!(reply.status, 401, "{}", reply.body);
    let reply = http
        .get(
            &format!("/v1/candles?market=AAVE&interval=1m&time={t}"),
            Some(wrong),
        )
        .await;
    assert_eq!(reply.status, 401, "{}", reply.body);
    let reply = http
        .get(
            &format!("/v1/candles?market=AAVE&interval=1m&time={t}"),
            None,
        )
        .await;
    assert_eq!(reply.status, 401, "{}", reply.body);
    assert_eq!(reply.body["error"], "missing_key");

    let metrics = reqwest_metrics(&mut http).await;
    for (status, at_least) in [(200, 2), (400, 15), (404, 4)] {
        let series = format!("l1gate_candle_lookups_total{{status=\"{status}\"}}");
        let n = super::access_support::sample(&metrics, &series);
        assert!(n >= at_least, "{series} = {n}\n{metrics}");
    }
    // Refused keys never reach the lookup.
    assert_eq!(
        super::access_support::sample(&metrics, "l1gate_candle_lookups_total{status=\"401\"}"),
        0
    );
}

async fn reqwest_metrics(http: &mut Http) -> String {
    let request = hyper::Request::get("/metrics")
        .header("host", "l1gate.test")
        .body(Empty::new())
        .unwrap();
    http.sender.ready().await.unwrap();
    let response = http.sender.send_request(request).await.unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// Simulated node output: the fills lines of `blocks` blocks.
pub fn simulated_fills(
    blocks: u64,
    mode: fixtures::OutputMode,
) -> (tempfile::TempDir, PathBuf, Vec<Vec<u8>>) {
    let source = tempfile::tempdir().unwrap();
    let mut cfg = fixtures::SimConfig::small(5);
    cfg.mode = mode;
    cfg.snapshot_every = None;
    let run = fixtures::RunOptions {
        blocks: Some(blocks),
        no_replica_cmds: true,
        ..fixtures::RunOptions::default()
    };
    fixtures::generate(&cfg, source.path(), &run, &mut |_| {}).unwrap();
    let file = fills_file(source.path());
    let relative = file.strip_prefix(source.path()).unwrap().to_owned();
    let lines = lines_of(&file);
    (source, relative, lines)
}

/// Simulated fills of `blocks` blocks from a starting state at
/// `start_time_ms`, by block, in as many hourly files as they reach: each
/// line with its file's path in the node directory.
pub fn simulated_hours(blocks: u64, start_time_ms: i64) -> Vec<(PathBuf, Vec<u8>)> {
    let source = tempfile::tempdir().unwrap();
    let mut cfg = fixtures::SimConfig::small(5);
    cfg.mode = fixtures::OutputMode::ByBlock;
    cfg.snapshot_every = None;
    cfg.start_time_ms = start_time_ms;
    let run = fixtures::RunOptions {
        blocks: Some(blocks),
        no_replica_cmds: true,
        ..fixtures::RunOptions::default()
    };
    fixtures::generate(&cfg, source.path(), &run, &mut |_| {}).unwrap();
    let mut files = Vec::new();
    collect_files(
        &source.path().join("hl/data/node_fills_by_block"),
        &mut files,
    );
    let mut lines: Vec<(PathBuf, Vec<u8>)> = files
        .iter()
        .flat_map(|file| {
            let relative = file.strip_prefix(source.path()).unwrap().to_owned();
            lines_of(file)
                .into_iter()
                .map(move |line| (relative.clone(), line))
        })
        .collect();
    lines.sort_by_key(|(_, line)| header(line).0);
    lines
}

/// Appends `lines` to their files under `node`.
pub fn append_hours(node: &Path, lines: &[(PathBuf, Vec<u8>)]) {
    for (path, line) in lines {
        write_lines(&node.join(path), std::slice::from_ref(line), true);
    }
}

pub fn write_lines(path: &Path, lines: &[Vec<u8>], append: bool) {
    use std::io::Write as _;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(append)
        .write(true)
        .truncate(!append)
        .open(path)
        .unwrap();
    for line in lines {
        file.write_all(line).unwrap();
        file.write_all(b"\n").unwrap();
    }
}

pub async fn check_all(
    server: &TestServer,
    expected: &BTreeMap<Key, Expected>,
    coverage: i64,
) -> usize {
    let mut http = Http::connect(server.running.http_addr).await;
    let mut checked = 0;
    for ((market, interval, open), want) in expected {
        if *open < coverage {
            continue;
        }
        let reply = http
            .get(&candle_path(&server.key, market, interval, *open), None)
            .await;
        assert_candle(&reply, market, interval, *open, want);
        checked += 1;
    }
    checked
}

#[tokio::test]
async fn live_tail_then_restarts_serve_the_same_candles_backfill_what_was_missed_and_refuse_a_second_writer()
 {
    // About 3.4 minutes of block time from 17:39:13: 1m buckets close, the
    // 17:40 5m bucket stays open across the restart.
    let (_source, relative, lines) = simulated_fills(3_000, fixtures::OutputMode::ByBlock);
    let node = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().join("state");
    let tune = |args: &mut l1gate::config::ServeArgs| {
        unlimited(args);
        args.state_dir = Some(state_dir.clone());
    };
    let fills = node.path().join(&relative);
    let (_, coverage) = header(&lines[0]);
    let split = 1_500;
    for (market, _) in [("BTC", 0), ("PURR/USDC", 0), ("@107", 0)] {
        assert!(
            expected_candles(&lines)
                .keys()
                .any(|(c, i, _)| c == market && *i == "1m"),
            "the simulation has no {market} trades"
        );
    }

    // First run: a third on disk at start, the next sixth appended while it
    // runs (followed live).
    write_lines(&fills, &lines[..1_000], false);
    let server = TestServer::start(node.path(), tune).await;
    wait_for_writer(&server, header(&lines[999]).0).await;
    write_lines(&fills, &lines[1_000..split], true);
    let first = expected_candles(&lines[..split]);
    wait_for_writer(&server, header(&lines[split - 1]).0).await;
    let checked = check_all(&server, &first, coverage).await;
    assert!(checked > 50, "{checked}");
    let stored_first = server.running.candles.store().candles();
    drop(server);

    // Written while the server was down: backfilled on start.
    write_lines(&fills, &lines[split..], true);
    let all = expected_candles(&lines);
    let server = TestServer::start(node.path(), tune).await;
    wait_for_writer(&server, header(lines.last().unwrap()).0).await;
    let checked_all = check_all(&server, &all, coverage).await;
    assert!(checked_all > checked, "{checked_all} vs {checked}");
    drop(server);

    // Every closed bucket was stored exactly once: the store holds as many
    // candles as there are buckets that ended by the last block.
    let (_, last_time) = header(lines.last().unwrap());
    let closed = all
        .keys()
        .filter(|(_, interval, open)| {
            let length = INTERVALS.iter().find(|(i, _)| i == interval).unwrap().1;
            *open >= coverage && open + length <= last_time
        })
        .count() as u64;
    {
        let (store, _) = host::candles::store::CandleStore::open(&state_dir, 0).unwrap();
        assert_eq!(store.reader().candles(), closed);
        assert!(closed > stored_first);
    }

    // The store is one process's: a second opener is refused while it runs.
    let server = TestServer::start(node.path(), tune).await;
    let error = host::candles::store::CandleStore::open(&state_dir, 0).unwrap_err();
    assert!(error.to_string().contains("in use"), "{error}");
    drop(server);
}

#[test]
fn a_server_killed_mid_commit_restarts_with_every_candle() {
    // `l1gate serve` as a process of its own, killed (SIGKILL, by the PID
    // this test started) while its candle writer commits, three times:
    // the store opens each time, and the last run serves every candle.
    let (_source, relative, lines) = simulated_fills(3_000, fixtures::OutputMode::ByBlock);
    let node = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let fills = node.path().join(&relative);
    write_lines(&fills, &lines, false);
    let keys = state.path().join("keys.toml");
    let mut stored = Vec::new();
    for wait_ms in [150, 400, 900] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_l1gate"))
            .arg("serve")
            .arg("--data")
            .arg(node.path())
            .arg("--state-dir")
            .arg(state.path().join("state"))
            .arg("--keys-file")
            .arg(&keys)
            .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(wait_ms));
        child.kill().unwrap();
        child.wait().unwrap();
        let (store, _) =
            host::candles::store::CandleStore::open(&state.path().join("state"), 0).unwrap();
        stored.push(store.reader().candles());
    }
    assert!(stored.windows(2).all(|w| w[0] <= w[1]), "{stored:?}");
    let (_, coverage) = header(&lines[0]);
    let all = expected_candles(&lines);
    let state_dir = state.path().join("state");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let server = TestServer::start(node.path(), |args| {
            unlimited(args);
            args.state_dir = Some(state_dir.clone());
        })
        .await;
        wait_for_writer(&server, header(lines.last().unwrap()).0).await;
        assert!(check_all(&server, &all, coverage).await > 50);
    });
}

/// The candle as Info's `candleSnapshot` and the `candle` channel give it.
pub fn snapshot_entry(coin: &str, interval: &str, open: i64, want: &Expected) -> Value {
    serde_json::json!({
        "t": open,
        "T": Interval::parse(interval).unwrap().close_time(open),
        "s": coin,
        "i": interval,
        "o": want.open,
        "c": want.close,
        "h": want.high.1,
        "l": want.low.1,
        "v": canonical(want.volume),
        "n": want.trades,
    })
}

/// Info's `candleSnapshot` of `coin`'s `interval` from `start_ms` to now.
pub async fn candle_snapshot(
    server: &TestServer,
    coin: &str,
    interval: &str,
    start_ms: i64,
) -> Value {
    let body = serde_json::json!({"type": "candleSnapshot",
        "req": {"coin": coin, "interval": interval, "startTime": start_ms}});
    let reply = super::standin::post_json(
        server.running.http_addr,
        "/info",
        Some(&server.key),
        &body.to_string(),
    )
    .await;
    assert_eq!(reply.status, 200, "{coin} {interval}: {}", reply.json());
    reply.json()
}

/// The current bucket of `coin`'s `interval` as the `candle` channel opens
/// with it.
pub async fn channel_candle(
    socket: &mut super::ws_api::Socket,
    coin: &str,
    interval: &str,
) -> Value {
    super::ws_api::send(
        socket,
        serde_json::json!({"method": "subscribe",
            "subscription": {"type": "candle", "coin": coin, "interval": interval}}),
    )
    .await;
    loop {
        let message = super::ws_api::on_channel(socket, "candle").await;
        if message["data"]["i"] == interval && message["data"]["s"] == coin {
            return message["data"].clone();
        }
    }
}

/// Every interval `candleSnapshot` answers.
pub const ALL_INTERVALS: [&str; 15] = [
    "1s", "1m", "3m", "5m", "15m", "30m", "1h", "2h", "4h", "8h", "12h", "1d", "3d", "1w", "1M",
];

/// Every candle of `lines` from `from_ms` on, in every interval, is what
/// `candleSnapshot` answers; the newest of each, when the engine holds it
/// open and whole (it opened at or after `engine_from_ms`, where the
/// engine's fold of trades began), is what the `candle` channel opens with.
async fn snapshots_match(
    server: &TestServer,
    lines: &[Vec<u8>],
    from_ms: i64,
    engine_from_ms: i64,
) {
    let expected = expected_candles_in(lines, &ALL_INTERVALS);
    let (_, last_block_ms) = header(lines.last().unwrap());
    let coins: std::collections::BTreeSet<&str> =
        expected.keys().map(|(coin, ..)| coin.as_str()).collect();
    let mut socket = super::ws_api::connect(server).await;
    for interval in ALL_INTERVALS {
        for &coin in &coins {
            let want: Vec<Value> = expected
                .iter()
                .filter(|((c, i, open), _)| c == coin && *i == interval && *open >= from_ms)
                .map(|((c, i, open), want)| snapshot_entry(c, i, *open, want))
                .collect();
            let got = candle_snapshot(server, coin, interval, from_ms).await;
            assert_eq!(got, Value::Array(want), "{coin} {interval}");
        }
        // The channel opens with the bucket the engine holds open, if it
        // has trades.
        let got = candle_snapshot(server, "BTC", interval, from_ms).await;
        let newest = got.as_array().unwrap().last().unwrap().clone();
        let open = newest["T"].as_i64().unwrap() >= last_block_ms;
        assert!(open || interval == "1s", "BTC {interval}: {newest}");
        if open && newest["t"].as_i64().unwrap() >= engine_from_ms {
            assert_eq!(
                channel_candle(&mut socket, "BTC", interval).await,
                newest,
                "BTC {interval}: the channel's bucket"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_serves_the_buckets_open_at_it_in_candle_snapshots_as_the_channel_does() {
    // Fills from 2025-12-31T23:59:50Z, candles from 2026-01-01T00:00:00Z:
    // a bucket open of every interval, so every bucket from it on is
    // whole. The first run stops near 00:05:30 (the watermark T); the
    // restart folds again from the 5m bucket holding T, 00:05, and the 3m
    // bucket from 00:03 and every bucket of 15m or longer opened before it.
    const HISTORY_START: i64 = 1_767_225_600_000;
    let hours = simulated_hours(7_500, HISTORY_START - 10_000);
    let lines: Vec<Vec<u8>> = hours.iter().map(|(_, line)| line.clone()).collect();
    let at = |ms: i64| lines.partition_point(|line| header(line).1 < ms);
    let (first_end, second_end) = (at(HISTORY_START + 330_000), at(HISTORY_START + 350_000));
    assert!(header(lines.last().unwrap()).1 > HISTORY_START + 420_000);
    let node = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().join("state");
    let tune = |args: &mut l1gate::config::ServeArgs| {
        unlimited(args);
        args.state_dir = Some(state_dir.clone());
        args.candle_history_start = Some("2026-01-01T00:00:00Z".into());
    };
    append_hours(node.path(), &hours[..first_end]);
    let server = TestServer::start(node.path(), tune).await;
    wait_for_writer(&server, header(&lines[first_end - 1]).0).await;
    drop(server);
    let watermark = {
        let (store, _) = host::candles::store::CandleStore::open(&state_dir, 0).unwrap();
        store.reader().watermark().unwrap().block_time_ms
    };
    assert!(
        (HISTORY_START + 300_000..HISTORY_START + 330_000).contains(&watermark),
        "{}",
        iso(watermark)
    );

    // Restarted over the store, the buckets open at T still open: each is
    // served whole, and as the channel holds it where the engine's fold
    // (from a minute before the 5m bucket holding T) holds it whole.
    let engine_from = Interval::Minute5.bucket_open(watermark) - 60_000;
    append_hours(node.path(), &hours[first_end..second_end]);
    let server = TestServer::start(node.path(), tune).await;
    wait_for_writer(&server, header(&lines[second_end - 1]).0).await;
    snapshots_match(&server, &lines[..second_end], HISTORY_START, engine_from).await;

    // And once they closed (the 3m bucket from 00:03, the 1m from 00:05)
    // and were stored.
    append_hours(node.path(), &hours[second_end..]);
    wait_for_writer(&server, header(lines.last().unwrap()).0).await;
    snapshots_match(&server, &lines, HISTORY_START, engine_from).await;
    // The lookups of the stored intervals agree.
    let stored = expected_candles(&lines);
    assert!(check_all(&server, &stored, HISTORY_START).await > 50);
}

#[tokio::test]
async fn streaming_mode_files_give_the_same_candles() {
    // The node's streaming layout: a block's fills may span several lines
    // and blocks without fills have none.
    let (source, _, lines) = simulated_fills(1_500, fixtures::OutputMode::Streaming);
    assert!(
        lines
            .windows(2)
            .any(|pair| header(&pair[0]).0 == header(&pair[1]).0),
        "no block spans two lines"
    );
    let (_, coverage) = header(&lines[0]);
    let expected = expected_candles(&lines);
    let server = TestServer::start(source.path(), unlimited).await;
    // The last block completes once the writer's grace for it has passed.
    wait_for_writer(&server, header(lines.last().unwrap()).0).await;
    let checked = check_all(&server, &expected, coverage).await;
    assert!(checked > 50, "{checked}");
}

#[tokio::test]
async fn healthz_reports_data_age_and_is_503_when_stale() {
    // A months-old capture: stale by the default 30 s bound.
    let data = real("fills-unfiltered");
    let (last_block, last_time) = header(lines_of(&fills_file(&data)).last().unwrap());
    let server = TestServer::start(&data, unlimited).await;
    let mut http = Http::connect(server.running.http_addr).await;
    let reply = http.get("/healthz", None).await;
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert_eq!(reply.body["status"], "stale");
    assert_eq!(reply.body["max_data_age_ms"], 30_000);
    let fills = &reply.body["freshness"]["fills"];
    assert_eq!(fills["block_number"], last_block);
    assert_eq!(fills["block_time"], iso(last_time));
    assert!(fills["age_ms"].as_i64().unwrap() > 30_000);
    assert_eq!(reply.body["freshness"]["blocks"], Value::Null);
    assert_eq!(reply.body["feeds"]["fills"], "node_fills_by_block");
    drop(server);

    // The same data within a generous bound is healthy.
    let server = TestServer::start(&real("fills-unfiltered"), |args| {
        args.max_data_age_ms = Some(10 * 365 * 86_400_000);
    })
    .await;
    let mut http = Http::connect(server.running.http_addr).await;
    let reply = http.get("/healthz", None).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["status"], "ok");
    drop(server);

    // Fresh data (block times of a moment ago) is healthy by default.
    let node = tempfile::tempdir().unwrap();
    let mut cfg = fixtures::SimConfig::small(3);
    cfg.mode = fixtures::OutputMode::ByBlock;
    cfg.snapshot_every = None;
    cfg.start_time_ms = common::unix_now_ms() - 2_000;
    let run = fixtures::RunOptions {
        blocks: Some(20),
        no_replica_cmds: true,
        ..fixtures::RunOptions::default()
    };
    fixtures::generate(&cfg, node.path(), &run, &mut |_| {}).unwrap();
    let server = TestServer::start(node.path(), |_| {}).await;
    let mut http = Http::connect(server.running.http_addr).await;
    let reply = http.get("/healthz", None).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let age = reply.body["newest_age_ms"].as_i64().unwrap();
    assert!(age < 30_000, "{age}");
    assert!(reply.body["candles"].is_object(), "{}", reply.body);
}

/// Flips one byte in the middle of each of the store's first `n` chunks
/// (found in the file by their bytes, read through the storage engine).
pub fn damage_chunks(state_dir: &Path, n: usize) -> usize {
    use redb::{ReadableDatabase as _, ReadableTable as _};
    let path = state_dir.join(host::candles::store::FILE_NAME);
    let values: Vec<Vec<u8>> = {
        let db = redb::Database::builder().open_read_only(&path).unwrap();
        let txn = db.begin_read().unwrap();
        let table = txn
            .open_table(redb::TableDefinition::<[u8; 13], &[u8]>::new("chunks"))
            .unwrap();
        table
            .iter()
            .unwrap()
            .map(|entry| entry.unwrap().1.value().to_vec())
            .filter(|value| value.len() >= 24)
            .take(n)
            .collect()
    };
    let mut bytes = std::fs::read(&path).unwrap();
    let mut damaged = 0;
    for value in &values {
        if let Some(at) = bytes
            .windows(value.len())
            .position(|w| w == value.as_slice())
        {
            bytes[at + value.len() / 2] ^= 0x20;
            damaged += 1;
        }
    }
    std::fs::write(&path, &bytes).unwrap();
    damaged
}

#[tokio::test]
async fn damaged_candles_are_rebuilt_from_the_node_files_still_on_disk() {
    let (_source, relative, lines) = simulated_fills(3_000, fixtures::OutputMode::ByBlock);
    let node = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().join("state");
    let tune = |args: &mut l1gate::config::ServeArgs| {
        unlimited(args);
        args.state_dir = Some(state_dir.clone());
    };
    let fills = node.path().join(&relative);
    let (_, coverage) = header(&lines[0]);
    write_lines(&fills, &lines, false);
    let all = expected_candles(&lines);
    let server = TestServer::start(node.path(), tune).await;
    wait_for_writer(&server, header(lines.last().unwrap()).0).await;
    drop(server);
    let stored = {
        let (store, _) = host::candles::store::CandleStore::open(&state_dir, 0).unwrap();
        store.reader().candles()
    };

    // Damage in 10 chunks: lookups into them say so (not "no trades"),
    // then the server rebuilds them from the fills before it serves.
    assert_eq!(damage_chunks(&state_dir, 10), 10);
    {
        let (mut store, _) = host::candles::store::CandleStore::open(&state_dir, 0).unwrap();
        let damaged = store.verify_from(0).unwrap();
        assert_eq!(damaged.len(), 10, "{damaged:?}");
    }
    let server = TestServer::start(node.path(), tune).await;
    wait_for_writer(&server, header(lines.last().unwrap()).0).await;
    assert_eq!(server.running.candles.store().candles(), stored);
    // What stays damaged lies before the files (and the coverage) begin:
    // no candle ever stored there.
    for chunk in server.running.candles.store().damaged_chunks() {
        let first = chunk
            .interval
            .next_open(chunk.interval.bucket_open(coverage - 1));
        assert!(chunk.to_ms <= first, "{chunk:?}");
    }
    let checked = check_all(&server, &all, coverage).await;
    assert!(checked > 50, "{checked}");
    drop(server);

    // Once the node's files no longer reach back to a damaged chunk, it
    // stays damaged, and lookups into it say so; nothing else is lost.
    assert_eq!(damage_chunks(&state_dir, 3), 3);
    let (_, files_from) = header(&lines[2_000]);
    write_lines(&fills, &lines[2_000..], false);
    let server = TestServer::start(node.path(), tune).await;
    wait_for_writer(&server, header(lines.last().unwrap()).0).await;
    let still = server.running.candles.store().damaged_chunks();
    assert!(
        !still.is_empty(),
        "the first chunks lie before the files' new start"
    );
    let mut http = Http::connect(server.running.http_addr).await;
    let (mut served, mut refused) = (0, 0);
    for ((market, interval, open), want) in &all {
        let length = INTERVALS.iter().find(|(i, _)| i == interval).unwrap().1;
        if open + length > files_from || *open < coverage {
            continue;
        }
        let reply = http
            .get(&candle_path(&server.key, market, interval, *open), None)
            .await;
        if reply.status == 200 {
            assert_candle(&reply, market, interval, *open, want);
            served += 1;
        } else {
            assert_eq!(reply.status, 503, "{}", reply.body);
            assert_eq!(reply.body["error"], "damaged", "{}", reply.body);
            refused += 1;
        }
    }
    assert!(
        served > 50 && refused > 0,
        "{served} served, {refused} refused"
    );
}

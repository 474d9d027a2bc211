//! Criterion benches of the engine's per-line, per-block and per-book work:
//!
//! - `line_decode`: one `node_order_statuses` line and one `node_raw_book_diffs` line of a
//!   mainnet-scale simulator block (hundreds of events each): `envelope` = envelope decode and
//!   iteration over the event spans, `typed` = that plus the typed decode of every event
//!   (bytes and events per second);
//! - `fold`: `Engine::apply` of mainnet-scale simulator blocks, starting from the simulator's
//!   full L4 snapshot. Each iteration folds the next block of the run; when the run is
//!   exhausted the engine is rebuilt from the snapshot outside the timed region. The throughput
//!   is the run's mean block (bytes of node lines, events = statuses + diffs + fills);
//! - `fold/mainnet_block_3_watched`: the same with three users' orders kept for Info
//!   `openOrders` (`Books::orders_of`): what watching costs the fold;
//!   `fold/mainnet_block_1024_idle_watched` with 1,024 accounts asked about that rest
//!   nothing (the bound of accounts Info keeps): what the watch's filter costs every order
//!   change;
//! - `open_orders`: the resting orders of the account with the most, from the mainnet-scale
//!   snapshot's books: `walk` reads every order of every book (the first question about a
//!   user), `kept` takes the orders the books keep for a user asked about before (shared:
//!   a look per book, what the engine thread does for each Info question); `render_plain` and
//!   `render_frontend` write the `openOrders` and `frontendOpenOrders` answers' JSON from the
//!   kept orders (off the engine thread, once per block), `render_frontend_serde` the same
//!   text through serde_json as the reference;
//! - `l2_aggregate`: `book::l2::aggregate` at full depth of a deep book — the real BTC snapshot
//!   in `../shared/data/real/btc-985148182` when present, else the simulator's deepest book —
//!   for every parameter set (`n_sig_figs` none/5/4/3/2, mantissa 2/5 at five figures); the
//!   throughput is the book's resting orders.
//!
//! `cargo bench -p benches --bench engine`

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use engine::align::{AlignMode, Aligner};
use engine::block::Block;
use engine::book::l2::{L2Params, aggregate};
use engine::book::l4::L4Book;
use engine::event::{decode_book_diff, decode_order_status};
use engine::fold::Engine;
use engine::snapshot::{self, L4Snapshot};
use feeds::{Feed, Start, envelope};
use fixtures::{RunOptions, SimConfig, generate};

/// Simulated blocks folded by the `fold` bench (a few tens of MB at mainnet scale).
const SIM_BLOCKS: u64 = 40;

/// The simulator run every bench reads: its starting snapshot and the blocks after it.
struct Corpus {
    start: L4Snapshot,
    blocks: Vec<Block>,
}

fn corpus() -> Result<Corpus> {
    let dir = tempfile::tempdir()?;
    let run = RunOptions {
        blocks: Some(SIM_BLOCKS),
        no_replica_cmds: true,
        ..RunOptions::default()
    };
    generate(&SimConfig::mainnet(7, 1.0), dir.path(), &run, &mut |_| {})?;
    // The lowest height under `l4_snapshots/` (read directly: a fresh file is listed by
    // `feeds::Snapshots` only once it has settled).
    let mut files: Vec<_> = std::fs::read_dir(dir.path().join("l4_snapshots"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let first = files.first().context("no snapshot")?;
    let start = snapshot::parse(&std::fs::read(first)?)?;
    let mut sources = Vec::new();
    let mut records = Vec::new();
    for source in feeds::Source::EVENT_STREAMS {
        let feed = Feed::open(dir.path(), source)?;
        if feed.source_dir_name().is_none() {
            continue;
        }
        let mut cursor = feed.seek(Start::BlockNumber(start.height + 1))?;
        sources.push(source);
        records.push((source, feed.read(&mut cursor, usize::MAX)?));
    }
    let mut aligner = Aligner::new(AlignMode::ByBlock, &sources, i64::MAX);
    for (source, read) in records {
        for record in read {
            aligner.push_line(source, record.data, 0);
        }
    }
    let mut blocks = Vec::new();
    while let Some(block) = aligner.pop(0) {
        blocks.push(block);
    }
    while let Some(block) = aligner.finish() {
        blocks.push(block);
    }
    blocks.retain(|b| b.number > start.height);
    anyhow::ensure!(!blocks.is_empty(), "no blocks after the snapshot");
    Ok(Corpus { start, blocks })
}

fn block_bytes(block: &Block) -> u64 {
    let l = &block.lines;
    l.order_statuses
        .iter()
        .chain(&l.raw_book_diffs)
        .chain(&l.fills)
        .chain(&l.misc_events)
        .chain(&l.twap_statuses)
        .map(|line| line.len() as u64)
        .sum()
}

fn event_count(line: &[u8]) -> u64 {
    envelope::decode(line).map_or(0, |env| env.events().flatten().count() as u64)
}

fn line_decode(c: &mut Criterion, corpus: &Corpus) {
    let longest = |lines: fn(&Block) -> &Vec<bytes::Bytes>| {
        corpus
            .blocks
            .iter()
            .filter_map(|b| lines(b).first())
            .max_by_key(|l| l.len())
            .cloned()
            .unwrap_or_default()
    };
    let status = longest(|b| &b.lines.order_statuses);
    let diff = longest(|b| &b.lines.raw_book_diffs);
    let mut group = c.benchmark_group("line_decode");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (name, line) in [("status", &status), ("diff", &diff)] {
        group.throughput(Throughput::ElementsAndBytes {
            elements: event_count(line),
            bytes: line.len() as u64,
        });
        group.bench_function(format!("{name}/envelope"), |b| {
            b.iter(|| {
                envelope::decode(black_box(line)).map_or(0, |env| {
                    env.events()
                        .filter_map(Result::ok)
                        .map(|s| s.len())
                        .sum::<usize>()
                })
            });
        });
        group.bench_function(format!("{name}/typed"), |b| {
            b.iter(|| {
                let line: &[u8] = black_box(line);
                let Ok(env) = envelope::decode(line) else {
                    return 0;
                };
                let mut ok = 0usize;
                for span in env.events().filter_map(Result::ok) {
                    let raw = &line[span];
                    ok += if name == "status" {
                        usize::from(decode_order_status(raw).is_ok())
                    } else {
                        usize::from(decode_book_diff(raw).is_ok())
                    };
                }
                ok
            });
        });
    }
    group.finish();
}

fn fold(c: &mut Criterion, corpus: &Corpus) {
    let blocks = &corpus.blocks;
    let n = blocks.len() as u64;
    let bytes: u64 = blocks.iter().map(block_bytes).sum();
    let events: u64 = {
        let mut engine = Engine::from_snapshot(corpus.start.clone());
        blocks.iter().map(|b| engine.apply(b).events as u64).sum()
    };
    let mut group = c.benchmark_group("fold");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    group.throughput(Throughput::ElementsAndBytes {
        elements: events / n,
        bytes: bytes / n,
    });
    for (name, watched, idle) in [
        ("mainnet_block", 0, 0),
        ("mainnet_block_3_watched", 3, 0),
        ("mainnet_block_1024_idle_watched", 0, 1_024),
    ] {
        let start = || {
            let mut engine = Engine::from_snapshot(corpus.start.clone());
            for user in busiest_users(&corpus.start, watched) {
                engine.orders_of(&user);
            }
            // Accounts asked about that rest nothing: what the watch's
            // filter costs every order change once it holds many.
            for n in 0..idle {
                engine.orders_of(&format!("0x{:040x}", n * 7_919 + 1));
            }
            engine
        };
        let mut engine = start();
        let mut next = 0usize;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    if next == blocks.len() {
                        engine = start();
                        next = 0;
                    }
                    let started = Instant::now();
                    black_box(engine.apply(&blocks[next]));
                    total += started.elapsed();
                    next += 1;
                }
                total
            });
        });
    }
    group.finish();
}

/// The `n` accounts with the most resting orders in `snapshot`.
fn busiest_users(snapshot: &L4Snapshot, n: usize) -> Vec<String> {
    let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (_, book) in snapshot.books.iter() {
        for order in book.orders() {
            *counts.entry(order.user.as_str()).or_default() += 1;
        }
    }
    let mut users: Vec<(&str, usize)> = counts.into_iter().collect();
    users.sort_by_key(|(user, count)| (std::cmp::Reverse(*count), *user));
    users
        .into_iter()
        .take(n)
        .map(|(user, _)| user.to_owned())
        .collect()
}

fn open_orders(c: &mut Criterion, corpus: &Corpus) {
    let Some(user) = busiest_users(&corpus.start, 1).pop() else {
        return;
    };
    let mut engine = Engine::from_snapshot(corpus.start.clone());
    let orders = engine
        .orders_of(&user)
        .iter()
        .map(|(_, orders)| orders.len() as u64)
        .sum();
    let mut group = c.benchmark_group("open_orders");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(orders));
    group.bench_function("walk", |b| {
        b.iter(|| {
            engine
                .books()
                .iter()
                .flat_map(|(coin, book)| {
                    book.orders()
                        .filter(|o| o.user.as_str().eq_ignore_ascii_case(&user))
                        .map(move |o| (coin, o.oid))
                })
                .count()
        });
    });
    group.bench_function("kept", |b| {
        b.iter(|| engine.orders_of(black_box(&user)).len());
    });
    let kept = engine.orders_of(&user);
    for (name, frontend) in [("render_plain", false), ("render_frontend", true)] {
        group.bench_function(name, |b| {
            b.iter(|| market::info::open_orders::render(black_box(&kept), frontend).len());
        });
    }
    // The reference: the same `frontendOpenOrders` text through serde_json (the WebSocket
    // view's serialisation), the orders sorted as shared copies.
    group.bench_function("render_frontend_serde", |b| {
        b.iter(|| {
            let all = engine::views::open_orders::newest_first(black_box(&kept));
            serde_json::to_vec(&all)
                .map(|text| text.len())
                .unwrap_or_default()
        });
    });
    group.finish();
}

/// The real BTC book when the capture is present, else the simulator's deepest book.
fn deep_book(corpus: &Corpus) -> (String, L4Book) {
    let real = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/real/btc-985148182/l4_snapshot_985148181.json");
    if let Ok(bytes) = std::fs::read(&real)
        && let Ok(parsed) = snapshot::parse(&bytes)
        && let Some(book) = parsed.books.get("BTC")
    {
        return ("real_btc".to_owned(), book.clone());
    }
    corpus
        .start
        .books
        .iter()
        .max_by_key(|(_, book)| book.len())
        .map(|(coin, book)| (format!("sim_{coin}"), book.clone()))
        .unwrap_or_default()
}

fn l2_aggregate(c: &mut Criterion, corpus: &Corpus) {
    let (name, book) = deep_book(corpus);
    let sets: [(&str, Option<u32>, Option<u64>); 7] = [
        ("exact", None, None),
        ("sig5", Some(5), None),
        ("sig5_m2", Some(5), Some(2)),
        ("sig5_m5", Some(5), Some(5)),
        ("sig4", Some(4), None),
        ("sig3", Some(3), None),
        ("sig2", Some(2), None),
    ];
    let mut group = c.benchmark_group(format!("l2_aggregate/{name}"));
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(book.len() as u64));
    for (label, figs, mantissa) in sets {
        let Ok(params) = L2Params::new(Some(0), figs, mantissa) else {
            continue;
        };
        group.bench_function(label, |b| {
            b.iter(|| aggregate("BTC", black_box(&book), black_box(&params)));
        });
    }
    group.finish();
}

fn benches(c: &mut Criterion) {
    let corpus = match corpus() {
        Ok(corpus) => corpus,
        Err(error) => panic!("engine benches: cannot build the simulator corpus: {error:#}"),
    };
    line_decode(c, &corpus);
    fold(c, &corpus);
    open_orders(c, &corpus);
    l2_aggregate(c, &corpus);
}

criterion_group!(engine_benches, benches);
criterion_main!(engine_benches);

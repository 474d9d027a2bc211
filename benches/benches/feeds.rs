//! Criterion benches of the per-record work on the raw feed path, in bytes per second of
//! node lines:
//!
//! - `decode`: `feeds::envelope::decode` of each line and iteration over its event spans;
//! - `filter_coins` / `filter_users`: `EventFilter::apply` (what a filtered replay does to
//!   every record) with `coins = [BTC]` and `users = [the most active user of the corpus]`.
//!
//! Corpora: order statuses, raw book diffs and fills from a short mainnet-scale simulator run
//! generated at bench start (`sim`), and the real mainnet capture in
//! `../shared/data/real/btc-985148182` (`real`, skipped when absent; a BTC-only capture, so
//! `coins = [BTC]` keeps every event there).
//!
//! `cargo bench -p benches --bench feeds`

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use feeds::{EventFilter, Feed, Source, Start, envelope};
use fixtures::{RunOptions, SimConfig, generate};

/// Simulated blocks in the `sim` corpus (a few MB of order statuses at mainnet scale).
const SIM_BLOCKS: u64 = 20;
/// Feeds benched.
const SOURCES: [Source; 3] = [Source::OrderStatuses, Source::RawBookDiffs, Source::Fills];

/// The lines of one feed from one data directory.
struct Corpus {
    name: String,
    source: Source,
    lines: Vec<bytes::Bytes>,
    bytes: u64,
}

fn load(origin: &str, dir: &Path) -> Vec<Corpus> {
    let mut out = Vec::new();
    for source in SOURCES {
        let Ok(feed) = Feed::open(dir, source) else {
            continue;
        };
        let Ok(mut cursor) = feed.seek(Start::BlockNumber(0)) else {
            continue;
        };
        let lines: Vec<bytes::Bytes> = feed
            .read(&mut cursor, usize::MAX)
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.data)
            .collect();
        if lines.is_empty() {
            continue;
        }
        let bytes = lines.iter().map(|l| l.len() as u64).sum();
        out.push(Corpus {
            name: format!("{origin}/{}", source.feed_id()),
            source,
            lines,
            bytes,
        });
    }
    out
}

fn corpora() -> (Vec<Corpus>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let cfg = SimConfig {
        snapshot_every: None,
        ..SimConfig::mainnet(1, 1.0)
    };
    let run = RunOptions {
        blocks: Some(SIM_BLOCKS),
        no_replica_cmds: true,
        ..RunOptions::default()
    };
    generate(&cfg, dir.path(), &run, &mut |_| {}).unwrap_or_else(|e| panic!("simulator: {e}"));
    let mut all = load("sim", dir.path());
    let real: PathBuf =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/real/btc-985148182");
    if real.is_dir() {
        all.extend(load("real", &real));
    } else {
        eprintln!("{}: absent, real corpora skipped", real.display());
    }
    (all, dir)
}

fn decode_and_iterate(line: &[u8]) -> usize {
    let env = envelope::decode(line).unwrap_or_else(|e| panic!("decode: {e}"));
    let mut n = env.block_number as usize;
    for span in env.events() {
        n = n.wrapping_add(span.unwrap_or_else(|e| panic!("events: {e}")).end);
    }
    n
}

fn bench_feeds(c: &mut Criterion) {
    let (corpora, _dir) = corpora();
    let mut group = c.benchmark_group("decode");
    for corpus in &corpora {
        group.throughput(Throughput::Bytes(corpus.bytes));
        group.bench_function(&corpus.name, |b| {
            b.iter(|| {
                corpus.lines.iter().fold(0usize, |acc, l| {
                    acc.wrapping_add(decode_and_iterate(black_box(l)))
                })
            });
        });
    }
    group.finish();

    for (group_name, field) in [("filter_coins", "coins"), ("filter_users", "users")] {
        let mut group = c.benchmark_group(group_name);
        for corpus in &corpora {
            let value = if field == "coins" {
                Some("BTC".to_owned())
            } else {
                benches::most_active_user(
                    corpus.lines.iter().map(|l| &l[..]),
                    corpus.source == Source::Fills,
                )
            };
            let Some(value) = value else {
                continue;
            };
            let filter = EventFilter::new(corpus.source, &[(field, [value.as_str()])])
                .unwrap_or_else(|e| panic!("filter: {e}"));
            group.throughput(Throughput::Bytes(corpus.bytes));
            group.bench_function(&corpus.name, |b| {
                b.iter(|| {
                    corpus.lines.iter().fold(0usize, |acc, l| {
                        let out = filter
                            .apply(black_box(l))
                            .unwrap_or_else(|e| panic!("filter: {e}"));
                        acc.wrapping_add(out.matched).wrapping_add(out.line.len())
                    })
                });
            });
        }
        group.finish();
    }
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_feeds
}
criterion_main!(benches);

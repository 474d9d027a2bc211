//! Criterion benches of the candle chunk codec (`host::candles::chunk`),
//! over one hour of `1s` candles of a busy market shaped like the
//! simulator's BTC (prices on the 1.0 tick of five significant figures,
//! sizes of up to five decimals as the node prints them, a third of the
//! seconds with one trade):
//!
//! - `candle_chunk_get`: one `Chunk::get` of a random second, on a chunk
//!   with every second (`full`) and on one with two seconds in three
//!   (`bitmap`: a bit test, two popcounts and the row), the lookup's cost
//!   inside a chunk (target: about 1 µs or less);
//! - `candle_chunk_parse`: `Chunk::parse` (version, CRC-32 over the chunk,
//!   layout), which a lookup pays once per chunk it reads, and `parse_get`,
//!   both together;
//! - `candle_chunk_iter`: decoding every candle of the full chunk, per
//!   candle;
//! - `candle_chunk_encode`: `encode` of the full chunk, per candle.
//!
//! `cargo bench -p benches --bench candle_chunks`

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use engine::market::candles::{Amount, Interval};
use engine::num::Px;
use host::candles::chunk::{Chunk, ChunkCandle, encode};

/// 2025-07-27T08:00:00Z, an hour boundary.
const HOUR: i64 = 1_753_603_200_000;

/// A small deterministic generator (xorshift64*).
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn price(units: i64) -> Px {
    // The node's text: "81307.0", one decimal.
    Px::new(units * 10, 1).unwrap_or_else(|e| panic!("{e}"))
}

/// A size as the node prints it: at most five decimals, trailing zeros
/// dropped, at least one decimal.
fn size(units: i64) -> (i64, u8) {
    let (mut units, mut scale) = (units, 5);
    while scale > 1 && units % 10 == 0 {
        units /= 10;
        scale -= 1;
    }
    (units, scale)
}

/// One hour of `1s` candles, on the seconds `keep` selects.
fn busy_hour(keep: impl Fn(i64) -> bool) -> Vec<ChunkCandle> {
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    let mut last = 81_307_i64;
    let mut candles = Vec::new();
    for second in 0..3_600 {
        let trades = if random.below(3) == 0 {
            1
        } else {
            2 + random.below(40)
        };
        let mut candle: Option<ChunkCandle> = None;
        for _ in 0..trades {
            last += random.below(5) as i64 - 2;
            let px = price(last);
            let (units, scale) = size(1 + random.below(200_000) as i64);
            let sz = Px::new(units, scale).unwrap_or_else(|e| panic!("{e}"));
            let (notional, notional_scale) = px.mul_wide(sz);
            let volume = Amount::new(i128::from(sz.units()), sz.scale());
            let notional = Amount::new(notional, notional_scale);
            candle = Some(match candle {
                None => ChunkCandle {
                    open_time: HOUR + second * 1_000,
                    trades_count: 1,
                    open: px,
                    high: px,
                    low: px,
                    close: px,
                    volume,
                    notional,
                    price_scale: px.scale(),
                },
                Some(c) => ChunkCandle {
                    trades_count: c.trades_count + 1,
                    high: c.high.max(px),
                    low: c.low.min(px),
                    close: px,
                    volume: c.volume.checked_add(volume).unwrap_or(c.volume),
                    notional: c.notional.checked_add(notional).unwrap_or(c.notional),
                    ..c
                },
            });
        }
        if keep(second) {
            candles.extend(candle);
        }
    }
    candles
}

fn encoded(candles: &[ChunkCandle]) -> Vec<u8> {
    encode(Interval::Second1, HOUR, candles).unwrap_or_else(|e| panic!("{e}"))
}

fn parse(bytes: &[u8]) -> Chunk<'_> {
    Chunk::parse(bytes).unwrap_or_else(|e| panic!("{e}"))
}

/// Open times to look up, in a random order.
fn probes(candles: &[ChunkCandle]) -> Vec<i64> {
    let mut random = Random(7);
    (0..4_096)
        .map(|_| candles[random.below(candles.len() as u64) as usize].open_time)
        .collect()
}

fn bench_get(c: &mut Criterion) {
    let mut group = c.benchmark_group("candle_chunk_get");
    group.throughput(Throughput::Elements(1));
    let full = busy_hour(|_| true);
    let bitmap = busy_hour(|second| second % 3 != 0);
    for (name, candles) in [("full", &full), ("bitmap", &bitmap)] {
        let bytes = encoded(candles);
        eprintln!(
            "candle_chunks: {name}: {} candles, {} bytes, {:.2} bytes/candle",
            candles.len(),
            bytes.len(),
            bytes.len() as f64 / candles.len() as f64
        );
        let chunk = parse(&bytes);
        let probes = probes(candles);
        let mut at = 0;
        group.bench_function(BenchmarkId::new("get", name), |b| {
            b.iter(|| {
                at = (at + 1) % probes.len();
                black_box(chunk.get(black_box(probes[at])))
            });
        });
        group.bench_function(BenchmarkId::new("parse_get", name), |b| {
            b.iter(|| {
                at = (at + 1) % probes.len();
                black_box(parse(black_box(&bytes)).get(probes[at]))
            });
        });
    }
    group.finish();

    let mut group = c.benchmark_group("candle_chunk_parse");
    group.throughput(Throughput::Elements(1));
    let bytes = encoded(&full);
    group.bench_function("full", |b| b.iter(|| black_box(parse(black_box(&bytes)))));
    group.finish();
}

fn bench_iter_encode(c: &mut Criterion) {
    let full = busy_hour(|_| true);
    let bytes = encoded(&full);
    let chunk = parse(&bytes);

    let mut group = c.benchmark_group("candle_chunk_iter");
    group.throughput(Throughput::Elements(full.len() as u64));
    group.bench_function("full", |b| {
        b.iter(|| black_box(chunk.iter().fold(0, |n, c| n + c.trades_count)));
    });
    group.finish();

    let mut group = c.benchmark_group("candle_chunk_encode");
    group.throughput(Throughput::Elements(full.len() as u64));
    group.bench_function("full", |b| b.iter(|| black_box(encoded(black_box(&full)))));
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_get, bench_iter_encode
}
criterion_main!(benches);

//! Criterion benches of the fan-out hub (`engine::hub`), in frames per second:
//!
//! - `hub_publish`: one `Hub::publish` with 0 / 100 / 10,000 idle receivers (subscribed, never
//!   reading), first without a wake-up (`idle/N`: the ring alone), then with the server's one
//!   wake-up per ring (`woken/N`: the ring plus queueing the ring's signal for the dispatcher
//!   task, `host::wakeups`), whose cost to the writer must not grow with N;
//! - `hub_publish_contended`: one publish while another thread calls `recv` in a loop, the
//!   case a lock shared by writer and readers would slow down;
//! - `hub_round_trip`: one publish and the `recv` of that frame by 1 / 100 receivers (frames
//!   delivered per second).
//!
//! `cargo bench -p benches --bench hub && cargo run --release -p benches -- criterion_report`

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use engine::hub::{Hub, Receiver, Recv};
use host::wakeups::{Signal, Wakeups};

/// Frames a ring retains: the server's default `market_ring_capacity`.
const CAPACITY: usize = 1024;
/// Receiver counts of `hub_publish`.
const IDLE: [usize; 3] = [0, 100, 10_000];

/// A frame about the size of a small batch handle.
type Frame = [u64; 4];

fn bench_publish(c: &mut Criterion) {
    let mut group = c.benchmark_group("hub_publish");
    group.throughput(Throughput::Elements(1));
    // The dispatcher task runs on its own runtime thread, as in the server.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("a runtime: {e}"));
    let (wakeups, _dispatcher) = runtime.block_on(async { Wakeups::spawn() });
    for woken in [false, true] {
        for receivers in IDLE {
            let hub = if woken {
                Hub::<Frame>::with_wake(CAPACITY, wakeups.hook(Arc::new(Signal::default())))
            } else {
                Hub::<Frame>::with_capacity(CAPACITY)
            };
            let idle: Vec<Receiver<Frame>> = (0..receivers).map(|_| hub.subscribe()).collect();
            let name = if woken { "woken" } else { "idle" };
            let mut n = 0u64;
            group.bench_function(BenchmarkId::new(name, receivers), |b| {
                b.iter(|| {
                    n += 1;
                    hub.publish(black_box([n; 4]));
                });
            });
            drop(idle);
        }
    }
    group.finish();
}

fn bench_contended(c: &mut Criterion) {
    let mut group = c.benchmark_group("hub_publish_contended");
    group.throughput(Throughput::Elements(1));
    let hub = Hub::<Frame>::with_capacity(CAPACITY);
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let mut receiver = hub.subscribe();
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut frames = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if let Recv::Frame(frame) = receiver.recv() {
                    frames += black_box(frame)[0] & 1;
                }
            }
            frames
        })
    };
    let mut n = 0u64;
    group.bench_function("1 spinning reader", |b| {
        b.iter(|| {
            n += 1;
            hub.publish(black_box([n; 4]));
        });
    });
    stop.store(true, Ordering::Relaxed);
    black_box(reader.join().unwrap_or_default());
    group.finish();
}

fn bench_round_trip(c: &mut Criterion) {
    let mut group = c.benchmark_group("hub_round_trip");
    for receivers in [1usize, 100] {
        group.throughput(Throughput::Elements(receivers as u64));
        let hub = Hub::<Frame>::with_capacity(CAPACITY);
        let mut readers: Vec<Receiver<Frame>> = (0..receivers).map(|_| hub.subscribe()).collect();
        let mut n = 0u64;
        group.bench_function(BenchmarkId::new("publish+recv", receivers), |b| {
            b.iter(|| {
                n += 1;
                hub.publish([n; 4]);
                for reader in &mut readers {
                    match reader.recv() {
                        Recv::Frame(frame) => {
                            black_box(frame);
                        }
                        other => panic!("expected the frame just published, got {other:?}"),
                    }
                }
            });
        });
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_publish, bench_contended, bench_round_trip
}
criterion_main!(benches);

//! The hub's documented semantics, one test per sentence of its module doc.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

use engine::hub::{Hub, Recv};
use rstest::rstest;

fn frame<T: Copy>(recv: Recv<T>) -> T {
    match recv {
        Recv::Frame(frame) => *frame,
        other => panic!("expected a frame, got {}", describe(&other)),
    }
}

fn describe<T>(recv: &Recv<T>) -> String {
    match recv {
        Recv::Frame(_) => "a frame".into(),
        Recv::Empty => "empty".into(),
        Recv::Lagged { missed } => format!("lagged by {missed}"),
        Recv::Closed => "closed".into(),
    }
}

#[rstest]
#[case::zero_is_one(0, 1)]
#[case::one(1, 1)]
#[case::three_rounds_up(3, 4)]
#[case::power_kept(64, 64)]
#[case::just_above(65, 128)]
fn capacity_is_rounded_up_to_a_power_of_two(#[case] asked: usize, #[case] capacity: usize) {
    let hub = Hub::<u32>::with_capacity(asked);
    assert_eq!(hub.capacity(), capacity);
}

#[test]
fn the_ring_retains_exactly_capacity_frames() {
    let hub = Hub::with_capacity(8);
    let mut reader = hub.subscribe();
    for n in 0..8u32 {
        hub.publish(n);
    }
    // Full but nothing overwritten yet: every frame is readable.
    for n in 0..8 {
        assert_eq!(frame(reader.recv()), n);
    }
    assert_eq!(reader.recv(), Recv::Empty);
}

#[test]
fn a_full_ring_overwrites_the_oldest_frame() {
    let hub = Hub::with_capacity(4);
    let mut reader = hub.subscribe();
    for n in 0..5u32 {
        hub.publish(n);
    }
    // Frame 0 was replaced by frame 4; 1..=4 remain.
    assert_eq!(reader.recv(), Recv::Lagged { missed: 1 });
    assert_eq!(
        (0..4).map(|_| frame(reader.recv())).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
}

#[test]
fn a_new_receiver_sees_only_frames_published_after_it() {
    let hub = Hub::with_capacity(4);
    hub.publish(1u32);
    let mut reader = hub.subscribe();
    assert_eq!(reader.recv(), Recv::Empty);
    hub.publish(2);
    assert_eq!(frame(reader.recv()), 2);
}

#[rstest]
#[case::one_over(4, 5, 1)]
#[case::twice_around(4, 12, 8)]
#[case::far_behind(8, 1000, 992)]
fn lagged_counts_exactly_the_frames_lost(
    #[case] capacity: usize,
    #[case] published: u64,
    #[case] missed: u64,
) {
    let hub = Hub::with_capacity(capacity);
    let mut reader = hub.subscribe();
    for n in 0..published {
        hub.publish(n);
    }
    assert_eq!(reader.pending(), published);
    assert_eq!(reader.recv(), Recv::Lagged { missed });
}

#[test]
fn after_a_lag_the_reader_continues_from_the_oldest_retained_frame() {
    let hub = Hub::with_capacity(4);
    let mut reader = hub.subscribe();
    assert_eq!(
        frame({
            hub.publish(0u64);
            reader.recv()
        }),
        0
    );
    for n in 1..=10 {
        hub.publish(n);
    }
    assert_eq!(reader.recv(), Recv::Lagged { missed: 6 });
    for n in 7..=10 {
        assert_eq!(frame(reader.recv()), n);
    }
    assert_eq!(reader.recv(), Recv::Empty);
    // It is a normal reader again.
    hub.publish(11);
    assert_eq!(frame(reader.recv()), 11);
}

#[test]
fn a_stalled_reader_never_holds_back_the_writer_or_a_fast_reader() {
    let hub = Hub::with_capacity(16);
    let mut stalled = hub.subscribe();
    let mut fast = hub.subscribe();
    let total = 10_000u64;
    for n in 0..total {
        hub.publish(n);
        assert_eq!(frame(fast.recv()), n);
    }
    assert_eq!(hub.published(), total);
    assert_eq!(stalled.recv(), Recv::Lagged { missed: total - 16 });
    assert_eq!(frame(stalled.recv()), total - 16);
}

#[test]
fn a_fast_reader_on_another_thread_sees_every_frame_while_another_stalls() {
    let total = 5_000u64;
    let hub = Hub::with_capacity(8192);
    let stalled = hub.subscribe();
    let mut fast = hub.subscribe();
    let signal = Arc::new((Mutex::new(false), Condvar::new()));
    {
        let signal = Arc::clone(&signal);
        fast.set_notify(Arc::new(move || {
            let (flag, cv) = &*signal;
            *flag.lock().unwrap() = true;
            cv.notify_one();
        }));
    }
    let reader = thread::spawn(move || {
        let mut seen = Vec::new();
        loop {
            match fast.recv() {
                Recv::Frame(f) => seen.push(*f),
                Recv::Empty => {
                    let (flag, cv) = &*signal;
                    let mut woken = flag.lock().unwrap();
                    while !*woken {
                        woken = cv.wait_timeout(woken, Duration::from_millis(50)).unwrap().0;
                    }
                    *woken = false;
                }
                Recv::Closed => return seen,
                Recv::Lagged { missed } => panic!("fast reader lagged by {missed}"),
            }
        }
    });
    for n in 0..total {
        hub.publish(n);
    }
    drop(hub);
    let seen = reader.join().unwrap();
    assert_eq!(seen, (0..total).collect::<Vec<_>>());
    drop(stalled);
}

#[test]
fn frames_are_shared_not_copied() {
    let hub = Hub::with_capacity(4);
    let mut a = hub.subscribe();
    let mut b = hub.subscribe();
    hub.publish(String::from("frame"));
    let (Recv::Frame(x), Recv::Frame(y)) = (a.recv(), b.recv()) else {
        panic!("both readers get the frame");
    };
    assert!(Arc::ptr_eq(&x, &y));
}

#[test]
fn hooks_run_after_each_publish_and_on_close_and_stop_with_the_receiver() {
    let hub = Hub::with_capacity(4);
    let calls = Arc::new(AtomicUsize::new(0));
    let mut reader = hub.subscribe();
    let mut other = hub.subscribe();
    {
        let calls = Arc::clone(&calls);
        reader.set_notify(Arc::new(move || {
            calls.fetch_add(1, Ordering::SeqCst);
        }));
    }
    hub.publish(1u8);
    hub.publish(2);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // Replacing the hook does not double the calls.
    {
        let calls = Arc::clone(&calls);
        reader.set_notify(Arc::new(move || {
            calls.fetch_add(10, Ordering::SeqCst);
        }));
    }
    hub.publish(3);
    assert_eq!(calls.load(Ordering::SeqCst), 12);
    drop(reader);
    hub.publish(4);
    assert_eq!(calls.load(Ordering::SeqCst), 12);
    let calls_on_close = Arc::new(AtomicUsize::new(0));
    {
        let calls = Arc::clone(&calls_on_close);
        other.set_notify(Arc::new(move || {
            calls.fetch_add(1, Ordering::SeqCst);
        }));
    }
    drop(hub);
    assert_eq!(calls_on_close.load(Ordering::SeqCst), 1);
}

#[test]
fn a_closed_hub_drains_retained_frames_before_reporting_closed() {
    let hub = Hub::with_capacity(4);
    let mut reader = hub.subscribe();
    hub.publish(1u8);
    drop(hub);
    assert_eq!(frame(reader.recv()), 1);
    assert_eq!(reader.recv(), Recv::Closed);
}

#[test]
fn receiver_count_follows_subscribe_and_drop() {
    let hub = Hub::<u8>::with_capacity(2);
    assert_eq!(hub.receiver_count(), 0);
    let a = hub.subscribe();
    let b = hub.subscribe();
    assert_eq!(hub.receiver_count(), 2);
    drop(a);
    assert_eq!(hub.receiver_count(), 1);
    drop(b);
    assert_eq!(hub.receiver_count(), 0);
}

#[test]
fn a_hook_may_use_the_hub_because_it_runs_holding_no_lock_of_it() {
    // A hook that drops a receiver (which unregisters its hook) and reads
    // the writer's counters would deadlock if the writer held a hub lock
    // while calling it.
    let hub = Arc::new(Hub::with_capacity(4));
    let mut reader = hub.subscribe();
    let victim = Arc::new(Mutex::new(Some(hub.subscribe())));
    let seen = Arc::new(AtomicUsize::new(0));
    {
        let (victim, seen, hub) = (Arc::clone(&victim), Arc::clone(&seen), Arc::downgrade(&hub));
        reader.set_notify(Arc::new(move || {
            drop(victim.lock().unwrap().take());
            if let Some(hub) = hub.upgrade() {
                seen.store(hub.receiver_count(), Ordering::SeqCst);
            }
        }));
    }
    hub.publish(1u8);
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    assert_eq!(frame(reader.recv()), 1);
}

/// Waits on a hook-driven flag. The bound only turns a lost wake-up into a
/// failure instead of a hang; a wake-up normally comes within microseconds.
fn park(signal: &(Mutex<bool>, Condvar)) {
    let (flag, cv) = signal;
    let woken = flag.lock().unwrap();
    let (mut woken, timeout) = cv
        .wait_timeout_while(woken, Duration::from_secs(30), |woken| !*woken)
        .unwrap();
    assert!(
        !timeout.timed_out(),
        "lost wake-up: parked 30 s after Empty"
    );
    *woken = false;
}

#[test]
fn stress_many_readers_on_threads_keep_order_and_exact_lag_accounting() {
    // Every reader, fast or slow, parked or spinning, sees frames in order,
    // and each frame is either read or counted in exactly one `missed`.
    let total = 100_000u64;
    let readers = 8;
    let hub = Hub::with_capacity(64);
    let mut handles = Vec::new();
    for index in 0..readers {
        let mut receiver = hub.subscribe();
        let signal = Arc::new((Mutex::new(false), Condvar::new()));
        let parks = index % 2 == 0;
        if parks {
            let signal = Arc::clone(&signal);
            receiver.set_notify(Arc::new(move || {
                let (flag, cv) = &*signal;
                *flag.lock().unwrap() = true;
                cv.notify_one();
            }));
        }
        handles.push(thread::spawn(move || {
            let (mut read, mut missed, mut lags) = (0u64, 0u64, 0u64);
            loop {
                match receiver.recv() {
                    Recv::Frame(frame) => {
                        assert_eq!(*frame, read + missed, "reader {index}: out of order");
                        read += 1;
                        // Odd readers dawdle now and then, so they lag.
                        if index % 4 == 3 && read % 64 == 0 {
                            thread::yield_now();
                            thread::sleep(Duration::from_micros(200));
                        }
                    }
                    Recv::Lagged { missed: lost } => {
                        assert!(lost > 0, "reader {index}: a lag of zero frames");
                        missed += lost;
                        lags += 1;
                    }
                    Recv::Empty if parks => park(&signal),
                    Recv::Empty => thread::yield_now(),
                    Recv::Closed => return (read, missed, lags),
                }
            }
        }));
    }
    for n in 0..total {
        hub.publish(n);
    }
    assert_eq!(hub.receiver_count(), readers);
    drop(hub);
    for (index, handle) in handles.into_iter().enumerate() {
        let (read, missed, lags) = handle.join().unwrap();
        assert_eq!(
            read + missed,
            total,
            "reader {index}: frames unaccounted for"
        );
        assert!(
            lags <= missed,
            "reader {index}: {lags} lags for {missed} frames"
        );
    }
}

#[test]
fn stress_receivers_come_and_go_while_the_writer_publishes() {
    // Subscribing, registering hooks and dropping receivers on other
    // threads never disturbs the writer or a steady reader.
    let total = 20_000u64;
    let hub = Arc::new(Hub::with_capacity(total.next_power_of_two() as usize));
    let mut steady = hub.subscribe();
    let stop = Arc::new(AtomicBool::new(false));
    let churn: Vec<_> = (0..2)
        .map(|_| {
            let (hub, stop) = (Arc::downgrade(&hub), Arc::clone(&stop));
            thread::spawn(move || {
                let mut rounds = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let Some(hub) = hub.upgrade() else { break };
                    let mut receiver = hub.subscribe();
                    drop(hub);
                    receiver.set_notify(Arc::new(|| {}));
                    if let Recv::Frame(frame) = receiver.recv() {
                        assert!(*frame < total);
                    }
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    for n in 0..total {
        hub.publish(n);
    }
    for n in 0..total {
        assert_eq!(frame(steady.recv()), n);
    }
    stop.store(true, Ordering::SeqCst);
    for handle in churn {
        assert!(handle.join().unwrap() > 0);
    }
    assert_eq!(hub.receiver_count(), 1);
    drop(hub);
    assert_eq!(steady.recv(), Recv::Closed);
}

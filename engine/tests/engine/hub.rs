//! The hub's documented semantics, one test per sentence of its module doc.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

use engine::hub::{Hub, Recv};
use rstest::rstest;

/// What a server's readers wait on: the hub's one wake-up bumps a
/// generation and wakes every waiter; a reader notes the generation before
/// it reads and waits for it to move.
#[derive(Default)]
struct Event {
    generation: std::sync::atomic::AtomicU64,
    lock: Mutex<()>,
    moved: Condvar,
}

impl Event {
    fn listen(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    fn signal(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        let _held = self.lock.lock().unwrap();
        self.moved.notify_all();
    }

    /// Waits for the generation to move past `seen`. The bound only turns a
    /// lost wake-up into a failure instead of a hang; a wake-up normally
    /// comes within microseconds.
    fn wait(&self, seen: u64) {
        let held = self.lock.lock().unwrap();
        let (_held, timeout) = self
            .moved
            .wait_timeout_while(held, Duration::from_secs(30), |()| {
                self.generation.load(Ordering::SeqCst) == seen
            })
            .unwrap();
        assert!(
            !timeout.timed_out(),
            "lost wake-up: waited 30 s after Empty"
        );
    }
}

/// A hub whose wake-up signals a shared event.
fn woken_hub<T>(capacity: usize) -> (Hub<T>, Arc<Event>) {
    let event = Arc::new(Event::default());
    let signal = Arc::clone(&event);
    (
        Hub::with_wake(capacity, Arc::new(move || signal.signal())),
        event,
    )
}

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

#[test]
fn a_receiver_made_at_a_retained_frame_reads_from_it_and_none_outside_the_ring() {
    let hub = Hub::with_capacity(4);
    hub.publish(0u32);
    let at = hub.published();
    for n in 1..4 {
        hub.publish(n);
    }
    let mut reader = hub.subscribe_at(at).expect("frame 1 is retained");
    assert_eq!(hub.receiver_count(), 1);
    assert_eq!(
        (0..3).map(|_| frame(reader.recv())).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(reader.recv(), Recv::Empty);
    // At the head: like `subscribe`.
    let mut now = hub.subscribe_at(hub.published()).unwrap();
    assert_eq!(now.recv(), Recv::Empty);
    // Ahead of the hub, or overwritten: none.
    assert!(hub.subscribe_at(hub.published() + 1).is_none());
    hub.publish(4);
    hub.publish(5);
    assert!(hub.subscribe_at(at).is_none(), "frame 1 was overwritten");
    assert!(hub.subscribe_at(at + 1).is_some(), "frame 2 is the oldest");
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
    let (hub, event) = woken_hub(8192);
    let stalled = hub.subscribe();
    let mut fast = hub.subscribe();
    let reader = thread::spawn(move || {
        let mut seen = Vec::new();
        loop {
            let generation = event.listen();
            match fast.recv() {
                Recv::Frame(f) => seen.push(*f),
                Recv::Empty => event.wait(generation),
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
fn peek_shows_the_next_frame_without_taking_it() {
    let hub = Hub::with_capacity(2);
    let mut reader = hub.subscribe();
    assert!(reader.peek().is_none(), "caught up");
    hub.publish(1u8);
    hub.publish(2);
    assert_eq!(reader.peek().as_deref(), Some(&1));
    assert_eq!(reader.peek().as_deref(), Some(&1), "not taken");
    assert_eq!(frame(reader.recv()), 1);
    assert_eq!(reader.peek().as_deref(), Some(&2));
    hub.publish(3);
    hub.publish(4);
    assert!(reader.peek().is_none(), "lapped: recv reports the lag");
    assert_eq!(reader.recv(), Recv::Lagged { missed: 1 });
    assert_eq!(reader.peek().as_deref(), Some(&3));
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
fn the_wake_up_runs_once_per_publish_and_at_the_close_whatever_the_readers() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let hub = Hub::with_wake(
        4,
        Arc::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        }),
    );
    hub.publish(1u8);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "no reader");
    let readers: Vec<_> = (0..100).map(|_| hub.subscribe()).collect();
    hub.publish(2);
    hub.publish(3);
    assert_eq!(calls.load(Ordering::SeqCst), 3, "a hundred readers");
    drop(readers);
    drop(hub);
    assert_eq!(calls.load(Ordering::SeqCst), 4, "the close");
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
    // A hook that drops a receiver, subscribes and reads the writer's
    // counters would deadlock if the writer held a hub lock while calling
    // it.
    let victim: Arc<Mutex<Option<engine::hub::Receiver<u8>>>> = Arc::new(Mutex::new(None));
    let seen = Arc::new(AtomicUsize::new(0));
    let hub = Arc::new_cyclic(|weak: &std::sync::Weak<Hub<u8>>| {
        let (victim, seen, hub) = (Arc::clone(&victim), Arc::clone(&seen), weak.clone());
        Hub::with_wake(
            4,
            Arc::new(move || {
                drop(victim.lock().unwrap().take());
                if let Some(hub) = hub.upgrade() {
                    drop(hub.subscribe());
                    seen.store(hub.receiver_count(), Ordering::SeqCst);
                }
            }),
        )
    });
    let mut reader = hub.subscribe();
    *victim.lock().unwrap() = Some(hub.subscribe());
    hub.publish(1u8);
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    assert_eq!(frame(reader.recv()), 1);
}

#[test]
fn stress_many_readers_on_threads_keep_order_and_exact_lag_accounting() {
    // Every reader, fast or slow, parked or spinning, sees frames in order,
    // and each frame is either read or counted in exactly one `missed`.
    let total = 100_000u64;
    let readers = 8;
    let (hub, event) = woken_hub(64);
    let mut handles = Vec::new();
    for index in 0..readers {
        let mut receiver = hub.subscribe();
        let event = Arc::clone(&event);
        let parks = index % 2 == 0;
        handles.push(thread::spawn(move || {
            let (mut read, mut missed, mut lags) = (0u64, 0u64, 0u64);
            loop {
                let generation = event.listen();
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
                    Recv::Empty if parks => event.wait(generation),
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
    // Subscribing and dropping receivers on other threads never disturbs
    // the writer or a steady reader.
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

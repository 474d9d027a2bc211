//! The fan-out hub: one bounded ring of frames per view key, written by the
//! engine thread and read by any number of subscribers, each at its own
//! pace.
//!
//! # Capacity
//!
//! A hub retains at most [`Hub::capacity`] frames. The capacity is a power
//! of two: [`Hub::with_capacity`] rounds the requested size up to the next
//! power of two (and a request of 0 to 1).
//!
//! # Overwrite rule
//!
//! The ring is overwrite-oldest: [`Hub::publish`] never waits and never
//! fails. Once the ring is full, each new frame replaces the oldest retained
//! one. A reader that has not read a frame by then loses it. The writer
//! never waits for a reader, and one slow reader never delays the writer or
//! any other reader: [`Receiver::recv`] takes no lock, and nothing a reader
//! does can make [`Hub::publish`] wait.
//!
//! # Frames are shared
//!
//! Frames are stored as `Arc<T>`: a frame read by N subscribers is built
//! (and, at the edge, can be encoded) once and shared, never copied per
//! reader.
//!
//! # Reading and lagging
//!
//! [`Hub::subscribe`] returns a [`Receiver`] positioned right after the last
//! published frame: it sees every frame published from then on, in order.
//! [`Receiver::recv`] returns
//!
//! - [`Recv::Frame`] with the next frame,
//! - [`Recv::Empty`] when the reader has read everything published so far,
//! - [`Recv::Lagged`] `{ missed }` when frames the reader had not read yet
//!   were overwritten: `missed` is how many frames it lost. The reader then
//!   continues from the oldest retained frame, which the next `recv`
//!   returns (if the writer overwrites that one too first, the next `recv`
//!   reports that as one more `Lagged`: every frame is either read or
//!   counted in exactly one `missed`),
//! - [`Recv::Closed`] once the hub was dropped and every retained frame was
//!   read.
//!
//! The gRPC edge decides what a lag means for a stream: an incremental view
//! (trades, fills, L2 diff, L4, TP/SL), whose frames only make sense as an
//! unbroken chain, ends the stream with `ABORTED`; a snapshot view (L2 book,
//! BBO, candle, mids) re-sends the current state and carries on.
//!
//! # Waking readers
//!
//! The hub knows nothing about async runtimes, and a publish costs the
//! writer the same whatever the number of readers: a hub made with
//! [`Hub::with_wake`] calls its one hook right after each [`Hub::publish`]
//! (and once when the hub is dropped), on the writer's thread, holding no
//! lock of the hub. The hook should only signal an event that every reader
//! of the hub waits on (the server hands the wake-up to a task that
//! notifies them all) and return.
//!
//! A frame is readable before the hook runs. So no wake-up is lost when a
//! reader registers its interest in the event *before* calling `recv`: if
//! that `recv` answers [`Recv::Empty`], the hook's signal for the next frame
//! (or for the close) comes after the registration, and the reader may park
//! until it arrives.
//!
//! # Example
//!
//! ```
//! use engine::hub::{Hub, Recv};
//!
//! let hub = Hub::with_capacity(4);
//! let mut slow = hub.subscribe();
//! let mut fast = hub.subscribe();
//! for frame in 1..=6 {
//!     hub.publish(frame);
//!     // The fast reader keeps up and sees every frame.
//!     assert!(matches!(fast.recv(), Recv::Frame(f) if *f == frame));
//! }
//! // The slow reader read nothing; frames 1 and 2 were overwritten.
//! assert_eq!(slow.recv(), Recv::Lagged { missed: 2 });
//! // It continues from the oldest retained frame.
//! for frame in 3..=6 {
//!     assert!(matches!(slow.recv(), Recv::Frame(f) if *f == frame));
//! }
//! assert_eq!(slow.recv(), Recv::Empty);
//! drop(hub);
//! assert_eq!(slow.recv(), Recv::Closed);
//! ```

// # How the ring works
//
// Frame number `n` (counting from 0) lives in slot `n & mask`. Each slot is
// an `ArcSwapOption` holding an `Entry { seq: n, frame }`: a reader loads
// the entry in one atomic step and so sees the frame together with the
// number it was written for, never a half-replaced slot. `ArcSwap` also
// makes reclamation sound without any `unsafe` here: a reader holding a
// loaded entry keeps it alive, and the writer replacing the slot never
// frees memory a reader is still looking at.
//
// `head` counts the frames published. The writer (one at a time, serialised
// by `Hub::writer`, a lock no reader takes) stores the entry, then bumps
// `head` with `Release`; a reader loads `head` with `Acquire`, so every slot
// below the `head` it saw holds that frame or a newer one. If the entry it
// then loads carries a newer number, the frame was overwritten in between,
// and the reader reports the loss computed from what it saw.
//
// The wake hook runs after `head` is stored. A reader that registered with
// the event before its `recv` either sees the new `head` there, or its
// registration precedes the hook's signal, which then wakes it.

use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwapOption;

use self::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use self::sync::{Mutex, MutexGuard};

/// The synchronisation primitives, swapped for loom's in the loom model
/// tests so that every interleaving of them is explored.
mod sync {
    #[cfg(all(loom, test))]
    pub(super) use loom::sync::{Arc, Mutex, MutexGuard, atomic};
    #[cfg(not(all(loom, test)))]
    pub(super) use std::sync::{Arc, Mutex, MutexGuard, atomic};
}

/// The wake-up hook a hub's writer runs after each publish and at the
/// close.
pub type Wake = Arc<dyn Fn() + Send + Sync>;

/// What [`Receiver::recv`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recv<T> {
    /// The next frame.
    Frame(Arc<T>),
    /// Nothing new yet.
    Empty,
    /// `missed` frames were overwritten before the reader read them; the
    /// next `recv` returns the oldest retained frame.
    Lagged {
        /// Frames lost by this reader.
        missed: u64,
    },
    /// The hub is gone and every retained frame was read.
    Closed,
}

/// One slot's content: a frame and the number it was published as.
struct Entry<T> {
    seq: u64,
    frame: Arc<T>,
}

/// Keeps a hot atomic on its own cache line (two, for adjacent-line
/// prefetching), so readers polling `head` do not share a line with
/// counters that subscribers write.
#[repr(align(128))]
struct Padded<A>(A);

struct Shared<T> {
    mask: u64,
    slots: Box<[ArcSwapOption<Entry<T>>]>,
    /// Frames published so far (= number of the next frame).
    head: Padded<AtomicU64>,
    closed: AtomicBool,
    receivers: AtomicUsize,
}

fn lock<G>(mutex: &Mutex<G>) -> MutexGuard<'_, G> {
    // Nothing panics while holding these locks; recover the data anyway.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<T> Shared<T> {
    fn capacity(&self) -> u64 {
        self.mask + 1
    }

    fn slot(&self, seq: u64) -> &ArcSwapOption<Entry<T>> {
        &self.slots[(seq & self.mask) as usize]
    }
}

/// The writing half: owned by the engine thread. Dropping it closes the
/// hub.
pub struct Hub<T> {
    shared: sync::Arc<Shared<T>>,
    /// Serialises writers (there is normally one); never taken by readers.
    writer: Mutex<()>,
    wake: Option<Wake>,
}

impl<T> fmt::Debug for Hub<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hub")
            .field("capacity", &self.shared.capacity())
            .field("published", &self.published())
            .field("receivers", &self.receiver_count())
            .finish_non_exhaustive()
    }
}

impl<T> Hub<T> {
    /// A hub retaining `capacity` frames, rounded up to a power of two,
    /// whose readers poll (no wake-up).
    pub fn with_capacity(capacity: usize) -> Self {
        Self::make(capacity, None)
    }

    /// A hub retaining `capacity` frames whose writer runs `wake` after
    /// every publish and at the close (see "Waking readers").
    pub fn with_wake(capacity: usize, wake: Wake) -> Self {
        Self::make(capacity, Some(wake))
    }

    fn make(capacity: usize, wake: Option<Wake>) -> Self {
        let capacity = capacity.max(1).next_power_of_two();
        Self {
            shared: sync::Arc::new(Shared {
                mask: capacity as u64 - 1,
                slots: (0..capacity).map(|_| ArcSwapOption::empty()).collect(),
                head: Padded(AtomicU64::new(0)),
                closed: AtomicBool::new(false),
                receivers: AtomicUsize::new(0),
            }),
            writer: Mutex::new(()),
            wake,
        }
    }

    /// How many frames the ring retains (a power of two).
    pub fn capacity(&self) -> usize {
        self.shared.capacity() as usize
    }

    /// Frames published so far.
    pub fn published(&self) -> u64 {
        self.shared.head.0.load(Ordering::Acquire)
    }

    /// Live receivers.
    pub fn receiver_count(&self) -> usize {
        self.shared.receivers.load(Ordering::Acquire)
    }

    /// A receiver that sees every frame published from now on.
    pub fn subscribe(&self) -> Receiver<T> {
        self.shared.receivers.fetch_add(1, Ordering::AcqRel);
        Receiver {
            shared: sync::Arc::clone(&self.shared),
            next: self.shared.head.0.load(Ordering::Acquire),
        }
    }

    /// A receiver whose next frame is frame number `seq` (the [`Hub::published`]
    /// count at some earlier moment): it first reads the frames published
    /// since then. `None` when `seq` is ahead of the hub or its frame is no
    /// longer retained. Called by the writer, nothing can overwrite those
    /// frames before the receiver exists; called by another thread while
    /// the writer publishes, they may be overwritten meanwhile, and the
    /// receiver then reads [`Recv::Lagged`] like any slow reader.
    pub fn subscribe_at(&self, seq: u64) -> Option<Receiver<T>> {
        let head = self.shared.head.0.load(Ordering::Acquire);
        if seq > head || seq < head.saturating_sub(self.shared.capacity()) {
            return None;
        }
        self.shared.receivers.fetch_add(1, Ordering::AcqRel);
        Some(Receiver {
            shared: sync::Arc::clone(&self.shared),
            next: seq,
        })
    }

    /// Publishes one frame, overwriting the oldest when full, then runs the
    /// wake-up hook.
    pub fn publish(&self, frame: T) {
        self.publish_shared(Arc::new(frame));
    }

    /// Publishes an already shared frame.
    pub fn publish_shared(&self, frame: Arc<T>) {
        let shared = &*self.shared;
        {
            let _writer = lock(&self.writer);
            // Only writers store `head`, and they hold `writer`.
            let seq = shared.head.0.load(Ordering::Relaxed);
            shared.slot(seq).store(Some(Arc::new(Entry { seq, frame })));
            shared.head.0.store(seq + 1, Ordering::Release);
        }
        if let Some(wake) = &self.wake {
            wake();
        }
    }
}

impl<T> Drop for Hub<T> {
    fn drop(&mut self) {
        {
            let _writer = lock(&self.writer);
            self.shared.closed.store(true, Ordering::Release);
        }
        if let Some(wake) = &self.wake {
            wake();
        }
    }
}

/// The reading half: one per subscriber, with its own cursor.
pub struct Receiver<T> {
    shared: sync::Arc<Shared<T>>,
    /// Number of the next frame this reader wants.
    next: u64,
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver")
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl<T> Receiver<T> {
    /// The next frame, or why there is none (see the module docs). Takes no
    /// lock and never waits.
    pub fn recv(&mut self) -> Recv<T> {
        let shared = &*self.shared;
        let mut head = shared.head.0.load(Ordering::Acquire);
        if self.next >= head {
            if !shared.closed.load(Ordering::Acquire) {
                return Recv::Empty;
            }
            // Closing comes after the last publish: this `head` is final.
            head = shared.head.0.load(Ordering::Acquire);
            if self.next >= head {
                return Recv::Closed;
            }
        }
        let capacity = shared.capacity();
        let oldest = head.saturating_sub(capacity);
        if self.next < oldest {
            return self.skip_to(oldest);
        }
        let newer = {
            let entry = shared.slot(self.next).load();
            match entry.as_deref() {
                Some(entry) if entry.seq == self.next => {
                    self.next += 1;
                    return Recv::Frame(Arc::clone(&entry.frame));
                }
                Some(entry) if entry.seq > self.next => entry.seq,
                // Unreachable: the `Acquire` load of `head` made the entry
                // for every frame below it visible. Nothing was lost, so
                // report nothing new rather than a loss.
                _ => return Recv::Empty,
            }
        };
        // Overwritten since `head` was loaded: frame `newer` is written, so
        // every frame up to `newer - capacity` is gone, and maybe more.
        let head = shared.head.0.load(Ordering::Acquire).max(newer + 1);
        self.skip_to(head - capacity)
    }

    /// The next frame `recv` would return, without taking it: `None` when
    /// the reader is caught up, or lagged (the next `recv` says how far).
    /// Takes no lock and never waits.
    pub fn peek(&self) -> Option<Arc<T>> {
        let shared = &*self.shared;
        let head = shared.head.0.load(Ordering::Acquire);
        if self.next >= head || self.next < head.saturating_sub(shared.capacity()) {
            return None;
        }
        let entry = shared.slot(self.next).load();
        match entry.as_deref() {
            Some(entry) if entry.seq == self.next => Some(Arc::clone(&entry.frame)),
            // Overwritten since `head` was loaded: lagged.
            _ => None,
        }
    }

    fn skip_to(&mut self, oldest: u64) -> Recv<T> {
        let missed = oldest - self.next;
        self.next = oldest;
        Recv::Lagged { missed }
    }

    /// Frames published but not read yet (may exceed the capacity when the
    /// reader lagged).
    pub fn pending(&self) -> u64 {
        self.shared
            .head
            .0
            .load(Ordering::Acquire)
            .saturating_sub(self.next)
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.shared.receivers.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Model tests: every interleaving (up to the preemption bound) of a writer
/// publishing while readers read, wait on the hub's wake-up and go away.
/// Run with `RUSTFLAGS="--cfg loom" cargo test -p engine --lib --release hub`.
#[cfg(all(loom, test))]
mod loom_tests {
    use super::{Hub, Receiver, Recv};
    use loom::sync::atomic::{AtomicU64, Ordering};
    use loom::sync::{Condvar, Mutex};
    use std::sync::Arc;

    /// A frame whose two halves must always agree: a reader seeing a frame
    /// from a freed or half-written slot would break the pairing.
    #[derive(Debug)]
    struct Frame {
        seq: u64,
        check: u64,
    }

    impl Frame {
        fn new(seq: u64) -> Self {
            Self {
                seq,
                check: seq ^ 0x5a5a_5a5a,
            }
        }
    }

    /// The event every reader of a hub waits on, as the server's is: the
    /// hook bumps a generation and wakes every waiter; a reader notes the
    /// generation before it reads and waits for it to move.
    #[derive(Default)]
    struct Event {
        generation: AtomicU64,
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

        fn wait(&self, seen: u64) {
            let mut held = self.lock.lock().unwrap();
            while self.generation.load(Ordering::SeqCst) == seen {
                held = self.moved.wait(held).unwrap();
            }
        }
    }

    /// Explores `test` with at most `preemptions` forced thread switches
    /// per execution (`LOOM_MAX_PREEMPTIONS` overrides), which keeps each
    /// model to seconds.
    fn model(preemptions: usize, test: impl Fn() + Sync + Send + 'static) {
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(preemptions);
        }
        builder.check(test);
    }

    /// A hub whose wake-up signals a shared event.
    fn hub(capacity: usize) -> (Hub<Frame>, Arc<Event>) {
        let event = Arc::new(Event::default());
        let signal = Arc::clone(&event);
        (
            Hub::with_wake(capacity, Arc::new(move || signal.signal())),
            event,
        )
    }

    /// Reads until `Closed`, waiting on the event after `Empty`, checking
    /// that frames come whole and in order and that every frame is either
    /// read or counted as missed exactly once. Returns (read, missed).
    fn drain(receiver: &mut Receiver<Frame>, event: &Event) -> (u64, u64) {
        let (mut read, mut missed) = (0, 0);
        loop {
            let seen = event.listen();
            match receiver.recv() {
                Recv::Frame(frame) => {
                    assert_eq!(frame.check, frame.seq ^ 0x5a5a_5a5a, "torn frame");
                    assert_eq!(frame.seq, read + missed, "out of order");
                    read += 1;
                }
                Recv::Lagged { missed: lost } => {
                    assert!(lost > 0, "a lag of zero frames");
                    missed += lost;
                }
                // A lost wake-up leaves this waiting forever: loom reports
                // the deadlock.
                Recv::Empty => event.wait(seen),
                Recv::Closed => return (read, missed),
            }
        }
    }

    #[test]
    fn a_reader_racing_the_writer_sees_whole_frames_in_order_and_exact_lags() {
        model(3, || {
            let (hub, event) = hub(2);
            let mut receiver = hub.subscribe();
            let writer = loom::thread::spawn(move || {
                for seq in 0..3 {
                    hub.publish(Frame::new(seq));
                }
            });
            let (read, missed) = drain(&mut receiver, &event);
            writer.join().unwrap();
            assert_eq!(read + missed, 3);
            // The ring keeps 2: at most one frame can be lost.
            assert!(read >= 2, "read {read}, missed {missed}");
            assert_eq!(receiver.pending(), 0);
        });
    }

    #[test]
    fn the_wake_up_of_the_last_publish_is_never_lost() {
        // No close follows the publish while the reader waits, so nothing
        // but the publish's own wake-up can end its wait.
        model(3, || {
            let (hub, event) = hub(2);
            let mut receiver = hub.subscribe();
            let reader = loom::thread::spawn(move || {
                loop {
                    let seen = event.listen();
                    match receiver.recv() {
                        Recv::Frame(frame) => return frame.seq,
                        Recv::Empty => event.wait(seen),
                        other => panic!("unexpected {other:?}"),
                    }
                }
            });
            hub.publish(Frame::new(0));
            assert_eq!(reader.join().unwrap(), 0);
            drop(hub);
        });
    }

    #[test]
    fn two_readers_each_get_every_frame_and_the_close_from_one_wake_up() {
        // Three threads: two switches already cover every order of the
        // readers' loads against the two publishes and the close.
        model(2, || {
            let (hub, event) = hub(4);
            let mut first = hub.subscribe();
            let mut second = hub.subscribe();
            let second_event = Arc::clone(&event);
            let reader = loom::thread::spawn(move || drain(&mut second, &second_event));
            let writer = loom::thread::spawn(move || {
                hub.publish(Frame::new(0));
                hub.publish(Frame::new(1));
            });
            assert_eq!(drain(&mut first, &event), (2, 0));
            assert_eq!(reader.join().unwrap(), (2, 0));
            writer.join().unwrap();
        });
    }

    #[test]
    fn a_reader_subscribing_during_a_publish_misses_no_wake_up() {
        model(3, || {
            let (hub, event) = hub(2);
            let hub = Arc::new(hub);
            let subscriber = Arc::clone(&hub);
            let reader_event = Arc::clone(&event);
            let reader = loom::thread::spawn(move || {
                let mut receiver = subscriber.subscribe();
                drop(subscriber);
                let seen = reader_event.listen();
                // Subscribed after or before the publish: it sees the frame
                // or waits for the next wake-up (the close).
                match receiver.recv() {
                    Recv::Frame(_) | Recv::Closed => {}
                    Recv::Empty => reader_event.wait(seen),
                    Recv::Lagged { .. } => panic!("nothing was overwritten"),
                }
            });
            hub.publish(Frame::new(0));
            // The close wakes the reader if it is still waiting.
            while Arc::strong_count(&hub) > 1 {
                loom::thread::yield_now();
            }
            drop(hub);
            reader.join().unwrap();
        });
    }

    #[test]
    fn a_receiver_dropped_during_a_publish_leaves_the_others_intact() {
        model(3, || {
            let (hub, event) = hub(2);
            let mut kept = hub.subscribe();
            let gone = hub.subscribe();
            let dropper = loom::thread::spawn(move || drop(gone));
            hub.publish(Frame::new(0));
            dropper.join().unwrap();
            assert_eq!(hub.receiver_count(), 1);
            drop(hub);
            assert_eq!(drain(&mut kept, &event), (1, 0));
        });
    }
}

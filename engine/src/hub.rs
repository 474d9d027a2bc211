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
//! The hub knows nothing about async runtimes. A reader registers a hook
//! with [`Receiver::set_notify`]; the writer calls every registered hook
//! right after each [`Hub::publish`] (and once when the hub is dropped), on
//! the writer's thread, holding no lock of the hub. A hook should only
//! signal (for example notify a `tokio::sync::Notify`, which keeps a permit
//! for a reader that is not waiting yet) and return.
//!
//! No wake-up is lost: once `set_notify` has returned, a `recv` that
//! answers [`Recv::Empty`] is followed by a call of the hook for the next
//! frame published (or for the close), so a reader may park after `Empty`
//! until its hook fires.
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
// Hooks live in `registry`, locked only by `set_notify`, receiver drop and
// (when the set of hooks changed) the writer. Every change bumps
// `hooks_version` with a read-modify-write; after each publish the writer
// does a read-modify-write on it too, and copies the hooks again when the
// version moved. Read-modify-writes on one atomic are totally ordered, so
// either the writer's comes after a registration (it sees the new hook and
// calls it), or the registration's comes after the writer's (it acquires
// the writer's `head`, so the registering reader's next `recv` already sees
// the frame). Either way no wake-up is lost.

use std::collections::BTreeMap;
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

/// A wake-up hook run by the writer after each publish.
pub type Notify = Arc<dyn Fn() + Send + Sync>;

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

/// The registered hooks, by receiver.
struct Registry {
    next_id: u64,
    hooks: BTreeMap<u64, Notify>,
}

/// What only the writer touches.
struct Writer {
    /// The `hooks_version` that `hooks` was copied at.
    version: u64,
    hooks: Arc<[Notify]>,
}

struct Shared<T> {
    mask: u64,
    slots: Box<[ArcSwapOption<Entry<T>>]>,
    /// Frames published so far (= number of the next frame).
    head: Padded<AtomicU64>,
    closed: AtomicBool,
    receivers: AtomicUsize,
    /// Bumped on every change of `registry`.
    hooks_version: Padded<AtomicU64>,
    registry: Mutex<Registry>,
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

    /// The hooks to call after a publish (or the close) the caller has just
    /// made visible, refreshed when the registry changed.
    fn hooks(&self, writer: &mut Writer) -> Arc<[Notify]> {
        // A read-modify-write, not a load: see "How the ring works".
        let version = self.hooks_version.0.fetch_add(0, Ordering::AcqRel);
        if version != writer.version {
            let fresh: Arc<[Notify]> = {
                let registry = lock(&self.registry);
                // Every bump happens under the registry lock, so this is
                // the version of exactly the hooks copied here.
                writer.version = self.hooks_version.0.load(Ordering::Relaxed);
                registry.hooks.values().cloned().collect()
            };
            // The stale copy is dropped here, outside the registry lock.
            writer.hooks = fresh;
        }
        Arc::clone(&writer.hooks)
    }
}

fn wake(hooks: &[Notify]) {
    for hook in hooks {
        hook();
    }
}

/// The writing half: owned by the engine thread. Dropping it closes the
/// hub.
pub struct Hub<T> {
    shared: sync::Arc<Shared<T>>,
    /// Serialises writers (there is normally one); never taken by readers.
    writer: Mutex<Writer>,
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
    /// A hub retaining `capacity` frames, rounded up to a power of two.
    pub fn with_capacity(capacity: usize) -> Self {
        let capacity = capacity.max(1).next_power_of_two();
        Self {
            shared: sync::Arc::new(Shared {
                mask: capacity as u64 - 1,
                slots: (0..capacity).map(|_| ArcSwapOption::empty()).collect(),
                head: Padded(AtomicU64::new(0)),
                closed: AtomicBool::new(false),
                receivers: AtomicUsize::new(0),
                hooks_version: Padded(AtomicU64::new(0)),
                registry: Mutex::new(Registry {
                    next_id: 0,
                    hooks: BTreeMap::new(),
                }),
            }),
            writer: Mutex::new(Writer {
                version: 0,
                hooks: Arc::new([]),
            }),
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
            hook: None,
        }
    }

    /// Publishes one frame, overwriting the oldest when full, then runs the
    /// receivers' wake-up hooks.
    pub fn publish(&self, frame: T) {
        self.publish_shared(Arc::new(frame));
    }

    /// Publishes an already shared frame.
    pub fn publish_shared(&self, frame: Arc<T>) {
        let shared = &*self.shared;
        let hooks = {
            let mut writer = lock(&self.writer);
            // Only writers store `head`, and they hold `writer`.
            let seq = shared.head.0.load(Ordering::Relaxed);
            shared.slot(seq).store(Some(Arc::new(Entry { seq, frame })));
            shared.head.0.store(seq + 1, Ordering::Release);
            shared.hooks(&mut writer)
        };
        wake(&hooks);
    }
}

impl<T> Drop for Hub<T> {
    fn drop(&mut self) {
        let shared = &*self.shared;
        let hooks = {
            let mut writer = lock(&self.writer);
            shared.closed.store(true, Ordering::Release);
            shared.hooks(&mut writer)
        };
        wake(&hooks);
    }
}

/// The reading half: one per subscriber, with its own cursor.
pub struct Receiver<T> {
    shared: sync::Arc<Shared<T>>,
    /// Number of the next frame this reader wants.
    next: u64,
    hook: Option<u64>,
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

    /// Registers `hook`, replacing this receiver's previous one; the writer
    /// calls it after every publish and when the hub closes.
    pub fn set_notify(&mut self, hook: Notify) {
        let mut registry = lock(&self.shared.registry);
        let id = if let Some(id) = self.hook {
            id
        } else {
            registry.next_id += 1;
            registry.next_id
        };
        // The replaced hook (if any) is dropped after the lock is released.
        let replaced = registry.hooks.insert(id, hook);
        self.shared.hooks_version.0.fetch_add(1, Ordering::AcqRel);
        drop(registry);
        drop(replaced);
        self.hook = Some(id);
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        if let Some(id) = self.hook {
            let mut registry = lock(&self.shared.registry);
            let removed = registry.hooks.remove(&id);
            self.shared.hooks_version.0.fetch_add(1, Ordering::AcqRel);
            drop(registry);
            drop(removed);
        }
        self.shared.receivers.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Model tests: every interleaving (up to the preemption bound) of a writer
/// publishing while readers read, register hooks and go away. Run with
/// `RUSTFLAGS="--cfg loom" cargo test -p engine --lib --release hub`.
#[cfg(all(loom, test))]
mod loom_tests {
    use super::{Hub, Receiver, Recv};
    use loom::sync::Notify as Park;
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

    /// A receiver whose hook unparks its reader.
    fn parked(hub: &Hub<Frame>) -> (Receiver<Frame>, Arc<Park>) {
        let mut receiver = hub.subscribe();
        let park = Arc::new(Park::new());
        let unpark = Arc::clone(&park);
        receiver.set_notify(Arc::new(move || unpark.notify()));
        (receiver, park)
    }

    /// Reads until `Closed`, parking on `Empty`, checking that frames come
    /// whole and in order and that every frame is either read or counted as
    /// missed exactly once. Returns (frames read, frames missed).
    fn drain(receiver: &mut Receiver<Frame>, park: &Park) -> (u64, u64) {
        let (mut read, mut missed) = (0, 0);
        loop {
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
                // A lost wake-up leaves this parked forever: loom reports
                // the deadlock.
                Recv::Empty => park.wait(),
                Recv::Closed => return (read, missed),
            }
        }
    }

    #[test]
    fn a_reader_racing_the_writer_sees_whole_frames_in_order_and_exact_lags() {
        model(3, || {
            let hub = Hub::with_capacity(2);
            let (mut receiver, park) = parked(&hub);
            let writer = loom::thread::spawn(move || {
                for seq in 0..3 {
                    hub.publish(Frame::new(seq));
                }
            });
            let (read, missed) = drain(&mut receiver, &park);
            writer.join().unwrap();
            assert_eq!(read + missed, 3);
            // The ring keeps 2: at most one frame can be lost.
            assert!(read >= 2, "read {read}, missed {missed}");
            assert_eq!(receiver.pending(), 0);
        });
    }

    #[test]
    fn two_readers_each_get_every_frame_and_the_close() {
        // Three threads: two switches already cover every order of the
        // readers' loads against the two publishes and the close.
        model(2, || {
            let hub = Hub::with_capacity(4);
            let (mut first, first_park) = parked(&hub);
            let (mut second, second_park) = parked(&hub);
            let reader = loom::thread::spawn(move || drain(&mut second, &second_park));
            let writer = loom::thread::spawn(move || {
                hub.publish(Frame::new(0));
                hub.publish(Frame::new(1));
            });
            assert_eq!(drain(&mut first, &first_park), (2, 0));
            assert_eq!(reader.join().unwrap(), (2, 0));
            writer.join().unwrap();
        });
    }

    #[test]
    fn a_hook_registered_during_a_publish_is_never_missed() {
        model(3, || {
            let hub = Hub::with_capacity(2);
            let mut receiver = hub.subscribe();
            let reader = loom::thread::spawn(move || {
                let park = Arc::new(Park::new());
                let unpark = Arc::clone(&park);
                receiver.set_notify(Arc::new(move || unpark.notify()));
                drain(&mut receiver, &park)
            });
            hub.publish(Frame::new(0));
            drop(hub);
            assert_eq!(reader.join().unwrap(), (1, 0));
        });
    }

    #[test]
    fn a_receiver_dropped_during_a_publish_leaves_the_others_intact() {
        model(3, || {
            let hub = Hub::with_capacity(2);
            let (mut kept, park) = parked(&hub);
            let (gone, _gone_park) = parked(&hub);
            let dropper = loom::thread::spawn(move || drop(gone));
            hub.publish(Frame::new(0));
            dropper.join().unwrap();
            assert_eq!(hub.receiver_count(), 1);
            drop(hub);
            assert_eq!(drain(&mut kept, &park), (1, 0));
        });
    }
}

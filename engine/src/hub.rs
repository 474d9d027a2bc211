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
//! any other reader.
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
//!   returns,
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
//! the writer's thread, outside the ring's lock. A hook should only signal
//! (for example notify a `tokio::sync::Notify`) and return.
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

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

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

struct Ring<T> {
    /// Slot `seq & mask` holds frame number `seq`.
    slots: Vec<Option<Arc<T>>>,
    /// Number of the next frame to publish (= frames published so far).
    tail: u64,
    closed: bool,
    receivers: usize,
}

struct Shared<T> {
    mask: u64,
    ring: Mutex<Ring<T>>,
    hooks: Mutex<Vec<(u64, Notify)>>,
    next_hook_id: Mutex<u64>,
}

fn lock<G>(mutex: &Mutex<G>) -> MutexGuard<'_, G> {
    // Nothing panics while holding these locks; recover the data anyway.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<T> Shared<T> {
    fn capacity(&self) -> u64 {
        self.mask + 1
    }

    fn wake(&self) {
        for (_, hook) in lock(&self.hooks).iter() {
            hook();
        }
    }
}

/// The writing half: owned by the engine thread. Dropping it closes the
/// hub.
pub struct Hub<T> {
    shared: Arc<Shared<T>>,
}

impl<T> fmt::Debug for Hub<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ring = lock(&self.shared.ring);
        f.debug_struct("Hub")
            .field("capacity", &self.shared.capacity())
            .field("published", &ring.tail)
            .field("receivers", &ring.receivers)
            .finish()
    }
}

impl<T> Hub<T> {
    /// A hub retaining `capacity` frames, rounded up to a power of two.
    pub fn with_capacity(capacity: usize) -> Self {
        let capacity = capacity.max(1).next_power_of_two();
        let mut slots = Vec::with_capacity(capacity);
        slots.resize_with(capacity, || None);
        Self {
            shared: Arc::new(Shared {
                mask: capacity as u64 - 1,
                ring: Mutex::new(Ring {
                    slots,
                    tail: 0,
                    closed: false,
                    receivers: 0,
                }),
                hooks: Mutex::new(Vec::new()),
                next_hook_id: Mutex::new(0),
            }),
        }
    }

    /// How many frames the ring retains (a power of two).
    pub fn capacity(&self) -> usize {
        self.shared.capacity() as usize
    }

    /// Frames published so far.
    pub fn published(&self) -> u64 {
        lock(&self.shared.ring).tail
    }

    /// Live receivers.
    pub fn receiver_count(&self) -> usize {
        lock(&self.shared.ring).receivers
    }

    /// A receiver that sees every frame published from now on.
    pub fn subscribe(&self) -> Receiver<T> {
        let mut ring = lock(&self.shared.ring);
        ring.receivers += 1;
        Receiver {
            shared: Arc::clone(&self.shared),
            next: ring.tail,
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
        {
            let mut ring = lock(&self.shared.ring);
            let slot = (ring.tail & self.shared.mask) as usize;
            ring.slots[slot] = Some(frame);
            ring.tail += 1;
        }
        self.shared.wake();
    }
}

impl<T> Drop for Hub<T> {
    fn drop(&mut self) {
        lock(&self.shared.ring).closed = true;
        self.shared.wake();
    }
}

/// The reading half: one per subscriber, with its own cursor.
pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
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
    /// The next frame, or why there is none (see the module docs).
    pub fn recv(&mut self) -> Recv<T> {
        let ring = lock(&self.shared.ring);
        let oldest = ring.tail.saturating_sub(self.shared.capacity());
        if self.next < oldest {
            let missed = oldest - self.next;
            self.next = oldest;
            return Recv::Lagged { missed };
        }
        if self.next == ring.tail {
            return if ring.closed {
                Recv::Closed
            } else {
                Recv::Empty
            };
        }
        let slot = (self.next & self.shared.mask) as usize;
        match &ring.slots[slot] {
            Some(frame) => {
                self.next += 1;
                Recv::Frame(Arc::clone(frame))
            }
            // Unreachable by construction: every slot below `tail` and at or
            // above `oldest` was written. Report it as nothing to read.
            None => Recv::Empty,
        }
    }

    /// Frames published but not read yet (may exceed the capacity when the
    /// reader lagged).
    pub fn pending(&self) -> u64 {
        lock(&self.shared.ring).tail - self.next
    }

    /// Registers `hook`, replacing this receiver's previous one; the writer
    /// calls it after every publish and when the hub closes.
    pub fn set_notify(&mut self, hook: Notify) {
        let mut hooks = lock(&self.shared.hooks);
        if let Some(id) = self.hook {
            hooks.retain(|(other, _)| *other != id);
        }
        let id = {
            let mut next = lock(&self.shared.next_hook_id);
            *next += 1;
            *next
        };
        hooks.push((id, hook));
        self.hook = Some(id);
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        if let Some(id) = self.hook {
            lock(&self.shared.hooks).retain(|(other, _)| *other != id);
        }
        let mut ring = lock(&self.shared.ring);
        ring.receivers = ring.receivers.saturating_sub(1);
    }
}

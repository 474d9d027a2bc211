//! Wake-ups from the engine thread to the streams reading its rings, at a
//! cost to the engine thread that does not grow with the number of
//! streams.
//!
//! Each view key's ring ([`engine::hub::Hub`]) has one [`Signal`] that all
//! of its streams wait on. After a publish, the ring's wake-up hook
//! ([`Wakeups::hook`]) queues the signal for the dispatcher task — an
//! atomic swap and, once per signal until the dispatcher takes it, a
//! channel send — and returns; the dispatcher, on the runtime, wakes every
//! stream waiting on it. A signal already queued is not queued again, so a
//! burst of publishes costs the dispatcher one wake-up round.
//!
//! A stream registers with the signal ([`Signal::listen`]) before it reads
//! its ring, and waits on the registration when the ring is empty: the
//! dispatcher's wake-up for the next frame comes after the registration,
//! so none is lost (the hub's module docs give the argument; its loom
//! models check it).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{Notify, mpsc};

/// The event every stream of one ring waits on.
#[derive(Debug, Default)]
pub struct Signal {
    streams: Notify,
    /// Queued for the dispatcher and not taken yet.
    queued: AtomicBool,
}

impl Signal {
    /// Registers for the next wake-up: call before reading the ring, await
    /// after it answered empty.
    pub fn listen(&self) -> tokio::sync::futures::Notified<'_> {
        self.streams.notified()
    }
}

/// The dispatcher's inbox.
#[derive(Debug, Clone)]
pub struct Wakeups {
    queue: mpsc::UnboundedSender<Arc<Signal>>,
}

impl Wakeups {
    /// Starts the dispatcher task on the current runtime.
    pub fn spawn() -> (Self, tokio::task::JoinHandle<()>) {
        let (queue, mut inbox) = mpsc::unbounded_channel::<Arc<Signal>>();
        let task = tokio::spawn(async move {
            while let Some(signal) = inbox.recv().await {
                // Taken before the wake-up, with a read-modify-write: a
                // publish after this queues the signal again, and one whose
                // swap this reads is visible to every stream woken here.
                signal.queued.swap(false, Ordering::AcqRel);
                signal.streams.notify_waiters();
            }
        });
        (Self { queue }, task)
    }

    /// A ring's wake-up hook: queues `signal` for the dispatcher unless it
    /// is queued already. Never blocks.
    pub fn hook(&self, signal: Arc<Signal>) -> engine::hub::Wake {
        let queue = self.queue.clone();
        Arc::new(move || {
            if !signal.queued.swap(true, Ordering::AcqRel) {
                // The dispatcher is gone only when the server is stopping.
                let _ = queue.send(Arc::clone(&signal));
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use engine::hub::{Hub, Recv};

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_stream_of_a_ring_wakes_from_one_hook_call() {
        let (wakeups, _task) = Wakeups::spawn();
        let signal = Arc::new(Signal::default());
        let hub = Hub::with_wake(8, wakeups.hook(Arc::clone(&signal)));
        let readers: Vec<_> = (0..50)
            .map(|_| {
                let mut receiver = hub.subscribe();
                let signal = Arc::clone(&signal);
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    loop {
                        let woken = signal.listen();
                        match receiver.recv() {
                            Recv::Frame(frame) => got.push(*frame),
                            Recv::Empty => woken.await,
                            Recv::Closed => return got,
                            Recv::Lagged { missed } => panic!("lagged by {missed}"),
                        }
                    }
                })
            })
            .collect();
        for n in 0..5u32 {
            hub.publish(n);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        drop(hub);
        for reader in readers {
            let got = tokio::time::timeout(Duration::from_secs(10), reader)
                .await
                .expect("a lost wake-up")
                .unwrap();
            assert_eq!(got, [0, 1, 2, 3, 4]);
        }
    }
}

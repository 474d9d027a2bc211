//! One write for many streams' frames: the gRPC edge's sockets gather what
//! HTTP/2 writes and hand it to the kernel once per scheduler round.
//!
//! Why: every subscriber of a connection runs as its own task, and each
//! task's frame wakes the connection task. The runtime runs a task woken
//! this way right after its waker, so without help the connection encodes
//! and writes one frame per wake: a block that has a frame for each of a
//! hundred streams of one connection costs a hundred system calls (the
//! fan-out benchmark measured 1.1 frames per write with 10,000 streams).
//!
//! How: [`BatchedWrites`] accepts writes into a buffer. On a flush it wakes
//! its own task and answers `Pending`; the runtime puts a task that woke
//! itself behind every task already queued, so the other subscribers of the
//! block hand their frames to HTTP/2 first. When the connection is polled
//! again, HTTP/2 adds those frames to the buffer and flushes again: the batch
//! is written with one call (a batch that grew may wait up to
//! [`MAX_DEFERRALS`] rounds, never past [`BUFFER_LIMIT`]). A runtime's local
//! queue holds 256 tasks, so the wake-ups of a block with thousands of
//! frames still take several writes per connection. An idle runtime polls
//! the task again at once: a deferral costs a scheduling round, not a
//! timer.
//!
//! Write calls and bytes are counted (`l1gate_grpc_socket_writes_total`,
//! `l1gate_grpc_socket_write_bytes_total`).
//!
//! Back-pressure is unchanged: past [`BUFFER_LIMIT`] bytes a write first
//! drains the buffer into the socket and waits for it like an unbuffered
//! write would. Errors of the socket surface on the next write or flush.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

use access::connections::ConnectionGuard;
use common::metrics::SocketWrites;

/// Bytes gathered before a write waits for the socket.
pub const BUFFER_LIMIT: usize = 256 << 10;

/// Scheduler rounds a batch may wait for more frames before it is written.
/// One: in the fan-out benchmark (10,000 streams, 100 connections) a single
/// round took the writes from 1.0 to 3.0 frames each and the server's CPU
/// down by a third; letting a growing batch wait up to eight rounds gave no
/// more (3.0 frames per write, the same CPU): the wake-ups of a block reach
/// a connection over several passes of the runtime's queues anyway.
pub const MAX_DEFERRALS: u8 = 1;

/// A socket whose writes leave in batches. See the module docs.
#[derive(Debug)]
pub struct BatchedWrites<S> {
    inner: S,
    buffer: Vec<u8>,
    /// Bytes of `buffer` already written to `inner`.
    written: usize,
    /// The buffer's length when its flush was last deferred.
    deferred_at: Option<usize>,
    /// How many times the current batch's flush was deferred.
    deferrals: u8,
    counters: Arc<SocketWrites>,
    /// The connection's place under the connection limits, freed when the
    /// connection ends.
    admitted: Option<ConnectionGuard>,
}

impl<S> BatchedWrites<S> {
    /// Wraps `inner`, counting its writes in `counters`.
    pub fn new(inner: S, counters: Arc<SocketWrites>) -> Self {
        Self {
            inner,
            buffer: Vec::new(),
            written: 0,
            deferred_at: None,
            deferrals: 0,
            counters,
            admitted: None,
        }
    }

    /// Holds `guard` for as long as the connection lives.
    #[must_use]
    pub fn admitted(mut self, guard: ConnectionGuard) -> Self {
        self.admitted = Some(guard);
        self
    }
}

impl<S: AsyncWrite + Unpin> BatchedWrites<S> {
    /// Writes the whole buffer to the socket.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.buffer.len() {
            match Pin::new(&mut self.inner).poll_write(cx, &self.buffer[self.written..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => {
                    self.written += n;
                    self.counters.calls.fetch_add(1, Ordering::Relaxed);
                    self.counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
                }
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return Poll::Pending,
            }
        }
        self.buffer.clear();
        self.written = 0;
        self.deferred_at = None;
        self.deferrals = 0;
        // A large burst does not keep its buffer for the connection's life.
        if self.buffer.capacity() > BUFFER_LIMIT * 2 {
            self.buffer = Vec::new();
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for BatchedWrites<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for BatchedWrites<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.buffer.len() >= BUFFER_LIMIT {
            std::task::ready!(this.drain(cx))?;
        }
        let n = data
            .len()
            .min(BUFFER_LIMIT.saturating_sub(this.buffer.len()).max(1));
        this.buffer.extend_from_slice(&data[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let len = this.buffer.len();
        if len > this.written
            && this.deferred_at != Some(len)
            && this.deferrals < MAX_DEFERRALS
            && len < BUFFER_LIMIT
        {
            // Let the tasks queued behind this one add their frames first;
            // again while the batch grew over the last round.
            this.deferred_at = Some(len);
            this.deferrals += 1;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        std::task::ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        std::task::ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

impl<S: Connected> Connected for BatchedWrites<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::task::{Wake, Waker};

    use super::*;

    /// A socket that records each write call; `accept` bytes per call at
    /// most, `Pending` when zero.
    #[derive(Default)]
    struct Recorder {
        writes: Vec<Vec<u8>>,
        accept: Option<usize>,
        fail: bool,
        flushes: usize,
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            if self.fail {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            }
            let n = self.accept.map_or(data.len(), |a| a.min(data.len()));
            if n == 0 {
                return Poll::Pending;
            }
            self.writes.push(data[..n].to_vec());
            Poll::Ready(Ok(n))
        }

        fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.flushes += 1;
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[derive(Default)]
    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn context() -> (Arc<CountingWaker>, Waker) {
        let counter = Arc::new(CountingWaker::default());
        (Arc::clone(&counter), Waker::from(counter))
    }

    fn write(io: &mut BatchedWrites<Recorder>, cx: &mut Context<'_>, data: &[u8]) -> usize {
        match Pin::new(io).poll_write(cx, data) {
            Poll::Ready(Ok(n)) => n,
            other => panic!("write answered {other:?}"),
        }
    }

    #[test]
    fn frames_written_before_the_deferred_flush_leave_in_one_write() {
        let (woken, waker) = context();
        let mut cx = Context::from_waker(&waker);
        let mut io = BatchedWrites::new(Recorder::default(), Arc::default());
        assert_eq!(write(&mut io, &mut cx, b"frame one;"), 10);
        // The first flush yields once, waking its own task.
        assert!(Pin::new(&mut io).poll_flush(&mut cx).is_pending());
        assert_eq!(woken.0.load(Ordering::SeqCst), 1);
        assert!(io.inner.writes.is_empty());
        // Meanwhile other streams' frames arrive; the next flush writes the
        // batch (after more rounds while it grows, if MAX_DEFERRALS allows).
        write(&mut io, &mut cx, b"frame two;");
        write(&mut io, &mut cx, b"frame three");
        let mut rounds = 1;
        let flushed = loop {
            match Pin::new(&mut io).poll_flush(&mut cx) {
                Poll::Pending => rounds += 1,
                Poll::Ready(result) => break result,
            }
        };
        assert!(flushed.is_ok());
        assert!(rounds <= MAX_DEFERRALS, "{rounds} rounds");
        assert_eq!(
            io.inner.writes,
            vec![b"frame one;frame two;frame three".to_vec()]
        );
        assert_eq!(io.inner.flushes, 1);
        assert_eq!(io.counters.calls.load(Ordering::Relaxed), 1);
        assert_eq!(io.counters.bytes.load(Ordering::Relaxed), 31);
        // The next batch defers again.
        write(&mut io, &mut cx, b"next");
        assert!(Pin::new(&mut io).poll_flush(&mut cx).is_pending());
        while Pin::new(&mut io).poll_flush(&mut cx).is_pending() {}
        assert_eq!(io.inner.writes.len(), 2);
    }

    #[test]
    fn a_batch_that_keeps_growing_is_written_after_the_last_deferral() {
        let (woken, waker) = context();
        let mut cx = Context::from_waker(&waker);
        let mut io = BatchedWrites::new(Recorder::default(), Arc::default());
        for round in 0..MAX_DEFERRALS {
            write(&mut io, &mut cx, b"more");
            assert!(
                Pin::new(&mut io).poll_flush(&mut cx).is_pending(),
                "round {round}"
            );
        }
        write(&mut io, &mut cx, b"more");
        assert!(Pin::new(&mut io).poll_flush(&mut cx).is_ready());
        assert_eq!(woken.0.load(Ordering::SeqCst), usize::from(MAX_DEFERRALS));
        assert_eq!(
            io.inner.writes.concat().len(),
            4 * (usize::from(MAX_DEFERRALS) + 1)
        );
    }

    #[test]
    fn an_empty_buffer_flushes_at_once() {
        let (woken, waker) = context();
        let mut cx = Context::from_waker(&waker);
        let mut io = BatchedWrites::new(Recorder::default(), Arc::default());
        assert!(Pin::new(&mut io).poll_flush(&mut cx).is_ready());
        assert_eq!(woken.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_full_buffer_waits_for_the_socket_and_loses_nothing() {
        let (_, waker) = context();
        let mut cx = Context::from_waker(&waker);
        let mut io = BatchedWrites::new(
            Recorder {
                accept: Some(0),
                ..Recorder::default()
            },
            Arc::default(),
        );
        let chunk = vec![7u8; 64 << 10];
        let mut accepted = 0;
        while let Poll::Ready(Ok(n)) = Pin::new(&mut io).poll_write(&mut cx, &chunk) {
            accepted += n;
            assert!(accepted <= BUFFER_LIMIT, "buffered past the limit");
        }
        assert_eq!(accepted, BUFFER_LIMIT);
        // The socket takes 1000 bytes a call from now on.
        io.inner.accept = Some(1000);
        assert!(matches!(
            Pin::new(&mut io).poll_write(&mut cx, b"tail"),
            Poll::Ready(Ok(4))
        ));
        while Pin::new(&mut io).poll_flush(&mut cx).is_pending() {}
        let sent: Vec<u8> = io.inner.writes.concat();
        assert_eq!(sent.len(), BUFFER_LIMIT + 4);
        assert!(sent[..BUFFER_LIMIT].iter().all(|&b| b == 7));
        assert_eq!(&sent[BUFFER_LIMIT..], b"tail");
    }

    #[test]
    fn a_socket_error_surfaces_on_flush_and_shutdown() {
        let (_, waker) = context();
        let mut cx = Context::from_waker(&waker);
        let mut io = BatchedWrites::new(
            Recorder {
                fail: true,
                ..Recorder::default()
            },
            Arc::default(),
        );
        write(&mut io, &mut cx, b"lost");
        assert!(Pin::new(&mut io).poll_flush(&mut cx).is_pending());
        assert!(matches!(
            Pin::new(&mut io).poll_flush(&mut cx),
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::BrokenPipe
        ));
        assert!(matches!(
            Pin::new(&mut io).poll_shutdown(&mut cx),
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::BrokenPipe
        ));
    }
}

//! The machine's floor under a live path: the shortest chain from a line appended to a file to a
//! sleeping thread holding that line, with no l1gate code in it.
//!
//! A reader thread blocks on an inotify descriptor watching the file; the append wakes it, it
//! reads the new bytes and writes them to a loopback TCP connection (`TCP_NODELAY`); a receiver
//! thread blocked on the other end wakes and takes them. That is two thread wake-ups, a file
//! read and a loopback send — fewer steps than any server can take between a node's append and a
//! subscriber's frame (l1gate adds the watcher's own thread, the engine's fold, the runtime's
//! tasks and HTTP/2 framing on both sides). Measured beside the server in the latency harness,
//! it tells what the machine itself costs: on a virtual machine whose wake-ups are slow, this
//! floor is a large share of any append → frame budget.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use hdrhistogram::Histogram;
use rustix::fs::inotify;

/// What the floor measured.
#[derive(Debug)]
pub struct Floor {
    /// Append → received, µs, for the appends that were timed.
    pub histogram: Histogram<u64>,
    /// Appends received before the writer had read the clock after writing them (it was
    /// descheduled in between): not timed.
    pub early: u64,
}

impl Floor {
    /// Appends made, timed or not.
    pub fn appends(&self) -> u64 {
        self.histogram.len() + self.early
    }
}

/// Appends `appends` numbered lines to a file under `dir`, one per `interval`, and times each
/// from the end of its write to its receipt on the far side of the chain (module docs).
///
/// # Errors
/// A file, inotify or socket call failing, or a line lost on the way.
pub fn measure(dir: &Path, appends: u32, interval: Duration) -> anyhow::Result<Floor> {
    let path = dir.join("floor.log");
    let mut out = File::create(&path).with_context(|| format!("create {}", path.display()))?;
    let watch = inotify::init(inotify::CreateFlags::CLOEXEC).context("inotify_init1")?;
    inotify::add_watch(&watch, &path, inotify::WatchFlags::MODIFY).context("inotify_add_watch")?;
    let watch = File::from(watch);
    let input = OpenOptions::new().read(true).open(&path)?;
    let listener = TcpListener::bind("127.0.0.1:0").context("bind loopback")?;
    let mut send = TcpStream::connect(listener.local_addr()?).context("connect loopback")?;
    send.set_nodelay(true)?;
    let (recv, _) = listener.accept().context("accept loopback")?;

    let reader = std::thread::Builder::new()
        .name("floor-reader".into())
        .spawn(move || forward(watch, input, &mut send, appends))?;
    let receiver = std::thread::Builder::new()
        .name("floor-receiver".into())
        .spawn(move || receive(recv, appends))?;

    let mut written = Vec::with_capacity(appends as usize);
    let mut due = Instant::now() + interval;
    for k in 1..=appends {
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        due += interval;
        out.write_all(format!("{k}\n").as_bytes())?;
        written.push(Instant::now());
    }
    let forwarded = join(reader, "reader")?;
    let received = join(receiver, "receiver")?;
    if forwarded != u64::from(appends) {
        bail!("the reader forwarded {forwarded} of {appends} lines");
    }
    let mut histogram = Histogram::new_with_bounds(1, 60_000_000, 3)?;
    let mut early = 0;
    for (at, got) in written.iter().zip(&received) {
        match got.checked_duration_since(*at) {
            Some(latency) => {
                let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
                histogram.record(us.max(1))?;
            }
            None => early += 1,
        }
    }
    Ok(Floor { histogram, early })
}

/// The reader: each notification, everything new in the file goes to the socket. Returns the
/// lines forwarded.
fn forward(
    mut watch: File,
    mut input: File,
    send: &mut TcpStream,
    appends: u32,
) -> anyhow::Result<u64> {
    let mut events = [0_u8; 4096];
    let mut data = [0_u8; 4096];
    let mut lines = 0_u64;
    while lines < u64::from(appends) {
        // Blocks until the file changes; the events themselves are not needed.
        if watch.read(&mut events)? == 0 {
            bail!("inotify descriptor closed");
        }
        loop {
            let n = input.read(&mut data)?;
            if n == 0 {
                break;
            }
            send.write_all(&data[..n])?;
            lines += memchr::memchr_iter(b'\n', &data[..n]).count() as u64;
        }
    }
    Ok(lines)
}

/// The receiver: the instant each numbered line arrived, in order.
fn receive(mut recv: TcpStream, appends: u32) -> anyhow::Result<Vec<Instant>> {
    let mut at = vec![None; appends as usize];
    let mut buf = [0_u8; 4096];
    let mut partial = Vec::new();
    let mut seen = 0;
    while seen < appends {
        let n = recv.read(&mut buf)?;
        if n == 0 {
            bail!("loopback closed after {seen} of {appends} lines");
        }
        let now = Instant::now();
        partial.extend_from_slice(&buf[..n]);
        while let Some(end) = memchr::memchr(b'\n', &partial) {
            let k: usize = std::str::from_utf8(&partial[..end])?
                .parse()
                .context("floor line")?;
            let slot = at
                .get_mut(k.wrapping_sub(1))
                .with_context(|| format!("line {k} out of range"))?;
            *slot = Some(now);
            partial.drain(..=end);
            seen += 1;
        }
    }
    at.into_iter()
        .enumerate()
        .map(|(k, t)| t.with_context(|| format!("line {} never arrived", k + 1)))
        .collect()
}

fn join<T>(handle: std::thread::JoinHandle<anyhow::Result<T>>, name: &str) -> anyhow::Result<T> {
    handle
        .join()
        .map_err(|_| anyhow::anyhow!("floor {name} thread panicked"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_append_is_received_and_timed_once() {
        let dir = tempfile::tempdir().unwrap();
        let floor = measure(dir.path(), 20, Duration::from_millis(2)).unwrap();
        assert_eq!(floor.appends(), 20);
        assert!(!floor.histogram.is_empty());
    }
}

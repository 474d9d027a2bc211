//! One place for a reader thread to sleep until the node writes or another
//! thread has something for it, with a single wake-up between the write
//! and the reader.
//!
//! [`Watcher`](crate::Watcher) runs on a thread of its own: a write wakes
//! that thread, which then wakes the reader — two wake-ups, each tens of
//! microseconds on a virtual machine, before the reader looks at the file.
//! A [`FileWait`] lets the reader wait on the kernel's notifications
//! itself: on Linux it holds an inotify instance watching the newest file
//! of each source the reader reads ([`FileWait::watch`]), and it waits on
//! that and on a [`Bell`] at once (`poll(2)`). Everything else that must
//! wake the reader — a command queued for it, files that came or went, a
//! stop — rings the bell after saying what it wants elsewhere (a channel,
//! a flag).
//!
//! As with the watcher, a notification is a hint: the reader re-stats and
//! re-lists on its own schedule too, so a lost one delays, never loses,
//! data. Off Linux no file is watched here ([`FileWait::watches_writes`]
//! is `false`) and the watcher's thread rings the bell for writes as well.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::time::Duration;

use crate::source::{Source, SourceSet};

/// A wake-up another thread can give a [`FileWait`]: a non-blocking pipe,
/// readable while rung. Ringing a rung bell does nothing more; the waiting
/// side empties it before it looks at what it was rung for, so a ring that
/// comes after the look stays for the next wait.
#[derive(Debug)]
pub struct Bell {
    read: OwnedFd,
    write: OwnedFd,
}

impl Bell {
    /// A new, silent bell.
    ///
    /// # Errors
    /// When the OS gives no pipe (descriptors exhausted).
    pub fn new() -> std::io::Result<Self> {
        let (read, write) = rustix::pipe::pipe()?;
        for fd in [&read, &write] {
            rustix::fs::fcntl_setfl(fd, rustix::fs::OFlags::NONBLOCK)?;
            rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)?;
        }
        Ok(Self { read, write })
    }

    /// Wakes the waiting thread (or its next wait). Never blocks: a full
    /// pipe is a bell rung already.
    pub fn ring(&self) {
        let _ = rustix::io::write(&self.write, &[1]);
    }

    /// Empties the pipe; whether it was rung.
    fn silence(&self) -> bool {
        let mut rung = false;
        let mut buffer = [0u8; 64];
        while let Ok(n) = rustix::io::read(&self.read, &mut buffer) {
            if n == 0 {
                break;
            }
            rung = true;
        }
        rung
    }
}

/// What a [`FileWait::wait`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Woke {
    /// The bell was rung: look at whatever rings it.
    pub rung: bool,
    /// Sources whose watched newest file was written to.
    pub written: SourceSet,
    /// The kernel dropped notifications (its queue overflowed): any file
    /// may have been written to or have come or gone; look at them all.
    pub overflowed: bool,
}

/// A thread's wait for its [`Bell`] and for writes to the files it watches.
#[derive(Debug)]
pub struct FileWait {
    bell: std::sync::Arc<Bell>,
    #[cfg(target_os = "linux")]
    inotify: Option<Inotify>,
}

impl FileWait {
    /// A wait on `bell`, watching no file yet. On Linux, an inotify instance
    /// is made for [`FileWait::watch`]; when the OS refuses one (the
    /// per-user instance limit), writes are not watched here and
    /// [`FileWait::watches_writes`] says so.
    pub fn new(bell: std::sync::Arc<Bell>) -> Self {
        Self {
            bell,
            #[cfg(target_os = "linux")]
            inotify: Inotify::new().ok(),
        }
    }

    /// Whether writes to the watched files wake this wait (else whoever
    /// rings the bell must ring it for writes too).
    pub fn watches_writes(&self) -> bool {
        #[cfg(target_os = "linux")]
        return self.inotify.is_some();
        #[cfg(not(target_os = "linux"))]
        false
    }

    /// Watches exactly `files` (each source's newest file) for writes,
    /// dropping the watches of files no longer listed. Returns `true` when
    /// a file is watched now that was not before: writes to it between its
    /// listing and now woke nobody, so the caller looks at it once more.
    /// A file that cannot be watched (gone already) is left to the next
    /// listing.
    pub fn watch(&mut self, files: &[(Source, PathBuf)]) -> bool {
        #[cfg(target_os = "linux")]
        if let Some(inotify) = &mut self.inotify {
            return inotify.watch(files);
        }
        let _ = files;
        false
    }

    /// Sleeps until the bell rings, a watched file is written to, or
    /// `timeout` passes; empties both before returning, so that what rang
    /// is looked at after this returns.
    pub fn wait(&mut self, timeout: Duration) -> Woke {
        use rustix::event::{PollFd, PollFlags, Timespec};
        let timeout = Timespec {
            tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        // Without inotify the bell is simply polled twice.
        #[cfg(target_os = "linux")]
        let files = self
            .inotify
            .as_ref()
            .map_or(&self.bell.read, |inotify| &inotify.fd);
        #[cfg(not(target_os = "linux"))]
        let files = &self.bell.read;
        let mut fds = [
            PollFd::new(&self.bell.read, PollFlags::IN),
            PollFd::new(files, PollFlags::IN),
        ];
        // EINTR (a signal) is a wake-up like a timeout: the caller looks
        // and waits again.
        let _ = rustix::event::poll(&mut fds, Some(&timeout));
        let mut woke = Woke {
            rung: self.bell.silence(),
            ..Woke::default()
        };
        #[cfg(target_os = "linux")]
        if let Some(inotify) = &mut self.inotify {
            inotify.read(&mut woke);
        }
        woke
    }
}

#[cfg(target_os = "linux")]
#[derive(Debug)]
struct Inotify {
    fd: OwnedFd,
    /// Watch descriptor → the source whose newest file it watches.
    watches: Vec<(i32, Source)>,
}

#[cfg(target_os = "linux")]
impl Inotify {
    fn new() -> std::io::Result<Self> {
        use rustix::fs::inotify::{CreateFlags, init};
        Ok(Self {
            fd: init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?,
            watches: Vec::new(),
        })
    }

    fn watch(&mut self, files: &[(Source, PathBuf)]) -> bool {
        use rustix::fs::inotify::{WatchFlags, add_watch, remove_watch};
        let mut added = false;
        let mut kept = Vec::with_capacity(files.len());
        for (source, path) in files {
            // The same file watched again gives back its descriptor; a file
            // replaced under the same name gets a new one.
            let Ok(wd) = add_watch(&self.fd, path.as_path(), WatchFlags::MODIFY) else {
                continue;
            };
            added |= !self.watches.iter().any(|(held, _)| *held == wd);
            kept.push((wd, *source));
        }
        for (wd, _) in &self.watches {
            if !kept.iter().any(|(held, _)| held == wd) {
                let _ = remove_watch(&self.fd, *wd);
            }
        }
        self.watches = kept;
        added
    }

    fn read(&mut self, woke: &mut Woke) {
        use rustix::fs::inotify::{ReadFlags, Reader};
        let mut buffer = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = Reader::new(self.fd.as_fd(), &mut buffer);
        while let Ok(event) = reader.next() {
            let flags = event.events();
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                woke.overflowed = true;
                continue;
            }
            let wd = event.wd();
            if flags.contains(ReadFlags::IGNORED) {
                // The file is gone (or its watch removed): the next listing
                // watches its successor.
                self.watches.retain(|(held, _)| *held != wd);
                continue;
            }
            if let Some((_, source)) = self.watches.iter().find(|(held, _)| *held == wd) {
                woke.written = woke.written.with(*source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;

    /// Long enough that a wait that ends for a reason ends long before it.
    const LONG: Duration = Duration::from_secs(20);

    fn append(path: &std::path::Path, bytes: &[u8]) {
        let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        file.write_all(bytes).unwrap();
    }

    #[test]
    fn a_ring_before_the_wait_ends_it_at_once_and_is_heard_once() {
        let bell = Arc::new(Bell::new().unwrap());
        let mut wait = FileWait::new(Arc::clone(&bell));
        bell.ring();
        bell.ring();
        let started = Instant::now();
        let woke = wait.wait(LONG);
        assert!(woke.rung);
        assert!(started.elapsed() < LONG / 2);
        // Both rings were heard by that wait: the next one times out.
        let woke = wait.wait(Duration::from_millis(20));
        assert_eq!(woke, Woke::default());
    }

    #[test]
    fn a_ring_from_another_thread_wakes_a_sleeping_wait() {
        let bell = Arc::new(Bell::new().unwrap());
        let mut wait = FileWait::new(Arc::clone(&bell));
        let ringer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            bell.ring();
        });
        let woke = wait.wait(LONG);
        assert!(woke.rung);
        ringer.join().unwrap();
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_write_to_a_watched_file_wakes_the_wait_naming_its_source() {
        let dir = tempfile::tempdir().unwrap();
        let statuses = dir.path().join("statuses");
        let diffs = dir.path().join("diffs");
        let other = dir.path().join("other");
        for path in [&statuses, &diffs, &other] {
            std::fs::write(path, b"").unwrap();
        }
        let mut wait = FileWait::new(Arc::new(Bell::new().unwrap()));
        assert!(wait.watches_writes());
        let files = [
            (Source::OrderStatuses, statuses.clone()),
            (Source::RawBookDiffs, diffs.clone()),
        ];
        assert!(wait.watch(&files), "new watches");
        assert!(!wait.watch(&files), "the same files: nothing new");
        // An unwatched file's write wakes nothing.
        append(&other, b"x\n");
        assert_eq!(wait.wait(Duration::from_millis(50)), Woke::default());
        let writer = std::thread::spawn({
            let diffs = diffs.clone();
            move || {
                std::thread::sleep(Duration::from_millis(50));
                append(&diffs, b"{}\n");
            }
        });
        let woke = wait.wait(LONG);
        writer.join().unwrap();
        assert!(!woke.rung);
        assert_eq!(woke.written, SourceSet::of(&[Source::RawBookDiffs]));
        // Dropped from the list: its writes no longer wake the wait.
        assert!(!wait.watch(&files[..1]));
        append(&diffs, b"{}\n");
        assert_eq!(wait.wait(Duration::from_millis(50)), Woke::default());
        append(&statuses, b"{}\n");
        assert_eq!(
            wait.wait(LONG).written,
            SourceSet::of(&[Source::OrderStatuses])
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_file_replaced_under_its_name_is_watched_anew() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fills");
        std::fs::write(&path, b"").unwrap();
        let mut wait = FileWait::new(Arc::new(Bell::new().unwrap()));
        let files = [(Source::Fills, path.clone())];
        assert!(wait.watch(&files));
        let replacement = dir.path().join("fills.new");
        std::fs::write(&replacement, b"").unwrap();
        std::fs::rename(&replacement, &path).unwrap();
        // The old file's watch ends with it; the listing that follows a
        // rename watches the new file, and says it is new.
        let _ = wait.wait(Duration::from_millis(20));
        assert!(wait.watch(&files));
        append(&path, b"{}\n");
        assert_eq!(wait.wait(LONG).written, SourceSet::of(&[Source::Fills]));
    }
}

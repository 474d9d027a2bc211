//! A guard against SIGBUS from the node's mapped files.
//!
//! Reading a page of a file mapping that the file no longer backs (it was
//! truncated) or that the disk cannot read raises SIGBUS, which would end
//! the process. Every mapping this crate makes is registered here; a SIGBUS
//! at an address inside one of them is answered by replacing the mapping
//! from the faulting page to its end with private zero pages, and the read
//! is retried: it sees zeros instead of killing the server. The feed's
//! refresh then notices the shrink (or the reader an undecodable line) and
//! reports it. A SIGBUS anywhere else gets the default action, as before.
//!
//! The handler only reads the registry (atomics) and calls `mmap`, a single
//! system call with no locks or allocation.

use std::sync::Once;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Mappings guarded at once; more are mapped unguarded (counted).
const SLOTS: usize = 4096;

/// A slot being filled in.
const CLAIMED: usize = usize::MAX;

/// `(start, len)` of each guarded mapping; start 0 = a free slot,
/// [`CLAIMED`] = one being filled in.
static STARTS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static LENS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
/// Faults answered with zero pages since start.
static FAULTS: AtomicU64 = AtomicU64::new(0);
/// Mappings left unguarded because every slot was taken.
static UNGUARDED: AtomicU64 = AtomicU64::new(0);
static INSTALL: Once = Once::new();

/// Faults in the node's mapped files answered with zero pages so far.
pub fn faults() -> u64 {
    FAULTS.load(Ordering::Relaxed)
}

/// Mappings that could not be guarded (the registry was full).
pub fn unguarded() -> u64 {
    UNGUARDED.load(Ordering::Relaxed)
}

/// A registered mapping; unregisters on drop (before the mapping is
/// unmapped, so drop it first).
#[derive(Debug)]
pub(crate) struct Guarded {
    slot: Option<usize>,
}

/// Registers `[start, start + len)`, installing the handler on first use.
pub(crate) fn guard(start: usize, len: usize) -> Guarded {
    INSTALL.call_once(install);
    if start == 0 || len == 0 {
        return Guarded { slot: None };
    }
    for (i, slot) in STARTS.iter().enumerate() {
        // Claim the slot (CLAIMED: the handler skips it), then its length,
        // then publish the start: a handler that sees the start sees its
        // length.
        if slot
            .compare_exchange(0, CLAIMED, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            LENS[i].store(len, Ordering::Release);
            slot.store(start, Ordering::Release);
            return Guarded { slot: Some(i) };
        }
    }
    UNGUARDED.fetch_add(1, Ordering::Relaxed);
    Guarded { slot: None }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            STARTS[i].store(0, Ordering::Release);
        }
    }
}

#[allow(unsafe_code)]
fn install() {
    // SAFETY: `sigaction` with a zeroed struct, an empty mask and the
    // SA_SIGINFO handler below is the documented way to install a handler;
    // nothing else in this process installs one for SIGBUS.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&raw mut action.sa_mask);
        libc::sigaction(libc::SIGBUS, &raw const action, std::ptr::null_mut());
    }
}

#[allow(unsafe_code)]
extern "C" fn on_sigbus(
    _signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler;
    // `si_addr` is the faulting address for SIGBUS.
    let addr = unsafe { (*info).si_addr() } as usize;
    for i in 0..SLOTS {
        let start = STARTS[i].load(Ordering::Acquire);
        if start == 0 || start == CLAIMED || addr < start {
            continue;
        }
        let len = LENS[i].load(Ordering::Acquire);
        // The slot was not freed and filled again meanwhile.
        if STARTS[i].load(Ordering::Acquire) != start {
            continue;
        }
        let end = start.saturating_add(len);
        if addr >= end {
            continue;
        }
        // SAFETY: `sysconf` is async-signal-safe.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let from = addr / page * page;
        // SAFETY: `[from, end)` lies inside a registered read-only mapping
        // that is still alive (it unregisters before it is unmapped); the
        // pages are replaced by private zero pages with the same protection,
        // so the faulting read succeeds when retried, and the mapping's
        // munmap later releases them with the rest. mmap is one system call.
        let done = unsafe {
            libc::mmap(
                from as *mut libc::c_void,
                end - from,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if done != libc::MAP_FAILED {
            FAULTS.fetch_add(1, Ordering::Relaxed);
            return;
        }
        break;
    }
    // Not ours (or the repair failed): the default action, at once.
    // SAFETY: resetting the disposition and re-raising are async-signal-safe.
    unsafe {
        libc::signal(libc::SIGBUS, libc::SIG_DFL);
        libc::raise(libc::SIGBUS);
    }
}

//! What the harnesses read from `/proc`: a process's memory counters, the CPU time of a process
//! or of one of its threads, and the machine's load.

use std::path::Path;

/// A `kB` field (`VmRSS`, `VmHWM`, …) of a `/proc/PID/status` text, in KiB.
pub fn status_field_kib(status: &str, field: &str) -> Option<u64> {
    status_field(status, field)
}

/// The first number of a field of a `/proc/PID/status` text (`VmRSS` in KiB,
/// `voluntary_ctxt_switches`, …).
pub fn status_field(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Clock ticks per second of the `utime`/`stime` fields of `/proc/…/stat` (`USER_HZ`, which
/// Linux fixes at 100 for user space on every common architecture; `getconf CLK_TCK`).
pub const USER_HZ: u64 = 100;

/// CPU time used so far by a process or a thread, as `/proc` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTime {
    /// `utime + stime` of `/proc/…/stat`, in clock ticks of 1/[`USER_HZ`] s (for a process:
    /// every thread's, exited ones included).
    pub ticks: u64,
    /// Time on a CPU from `/proc/…/schedstat`, in ns (for a process: the sum over its live
    /// threads); `None` when the kernel does not report it.
    pub run_ns: Option<u64>,
    /// `voluntary_ctxt_switches` of `/proc/…/status` (a thread's sleeps: its wake-ups); for a
    /// process, the main thread's only.
    pub wakeups: u64,
}

impl CpuTime {
    /// The CPU time of one task directory: `/proc/PID` or `/proc/PID/task/TID`, or
    /// `/proc/thread-self` for the calling thread.
    ///
    /// # Errors
    /// When `stat` or `status` cannot be read or parsed.
    pub fn of_task(dir: &Path) -> std::io::Result<CpuTime> {
        let stat = std::fs::read_to_string(dir.join("stat"))?;
        let status = std::fs::read_to_string(dir.join("status"))?;
        let invalid = |what: &str| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: {what}", dir.display()),
            )
        };
        let ticks = stat_cpu_ticks(&stat).ok_or_else(|| invalid("no utime/stime in stat"))?;
        let run_ns = std::fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|s| schedstat_run_ns(&s));
        Ok(CpuTime {
            ticks,
            run_ns,
            wakeups: status_field(&status, "voluntary_ctxt_switches").unwrap_or(0),
        })
    }

    /// The calling thread's CPU time. The kernel brings a thread's run time up to date when the
    /// thread is switched out (or at a tick), so a running thread reading its own `schedstat`
    /// would see it up to a tick old: this sleeps 1 ms first, and the figure is exact as of
    /// that switch.
    ///
    /// # Errors
    /// As [`CpuTime::of_task`].
    pub fn this_thread() -> std::io::Result<CpuTime> {
        std::thread::sleep(std::time::Duration::from_millis(1));
        Self::of_task(Path::new("/proc/thread-self"))
    }

    /// Thread `tid` of process `pid`.
    ///
    /// # Errors
    /// As [`CpuTime::of_task`] (also when the thread has exited).
    pub fn of_thread(pid: u32, tid: u32) -> std::io::Result<CpuTime> {
        Self::of_task(
            &Path::new("/proc")
                .join(pid.to_string())
                .join("task")
                .join(tid.to_string()),
        )
    }

    /// Process `pid`: `utime + stime` of every thread (exited ones included), `schedstat` run
    /// time summed over the live threads.
    ///
    /// # Errors
    /// As [`CpuTime::of_task`] for the process directory.
    pub fn of_process(pid: u32) -> std::io::Result<CpuTime> {
        let dir = Path::new("/proc").join(pid.to_string());
        let mut total = Self::of_task(&dir)?;
        let mut run_ns = Some(0u64);
        for entry in std::fs::read_dir(dir.join("task"))? {
            let ns = std::fs::read_to_string(entry?.path().join("schedstat"))
                .ok()
                .and_then(|s| schedstat_run_ns(&s));
            run_ns = run_ns.zip(ns).map(|(a, b)| a + b);
        }
        total.run_ns = run_ns;
        Ok(total)
    }

    /// What was used from `earlier` to `self`: (seconds by `utime + stime`, seconds by
    /// `schedstat` when both have it, wake-ups).
    pub fn since(&self, earlier: &CpuTime) -> CpuDelta {
        CpuDelta {
            ticks_s: self.ticks.saturating_sub(earlier.ticks) as f64 / USER_HZ as f64,
            run_s: self
                .run_ns
                .zip(earlier.run_ns)
                .map(|(a, b)| a.saturating_sub(b) as f64 / 1e9),
            wakeups: self.wakeups.saturating_sub(earlier.wakeups),
        }
    }
}

/// CPU time used between two [`CpuTime`] readings.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CpuDelta {
    /// By `utime + stime`, seconds (a multiple of 1/[`USER_HZ`]).
    pub ticks_s: f64,
    /// By `schedstat`, seconds (ns resolution), when reported.
    pub run_s: Option<f64>,
    /// Voluntary context switches.
    pub wakeups: u64,
}

impl CpuDelta {
    /// The most precise figure: `schedstat` when reported, else `utime + stime`.
    pub fn best_s(&self) -> f64 {
        self.run_s.unwrap_or(self.ticks_s)
    }
}

/// `utime + stime` (fields 14 and 15) of a `/proc/…/stat` text, in clock ticks. The fields are
/// counted after the command name's closing parenthesis (the name may hold spaces).
pub fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The machine's CPU time so far, from the first line of `/proc/stat`, in clock ticks of
/// 1/[`USER_HZ`] s summed over every CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineTicks {
    /// All but `idle` and `iowait`.
    pub busy: u64,
    /// Of `busy`, the time a hypervisor ran something else while this machine's CPUs had work
    /// (`steal`): on a shared virtual machine, a window with much of it measured a slower
    /// machine.
    pub steal: u64,
    /// Every state.
    pub all: u64,
}

impl MachineTicks {
    /// The counters now.
    ///
    /// # Errors
    /// When `/proc/stat` cannot be read or its `cpu` line parsed.
    pub fn now() -> std::io::Result<MachineTicks> {
        let stat = std::fs::read_to_string("/proc/stat")?;
        Self::of(&stat).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "/proc/stat: no `cpu` line of numbers",
            )
        })
    }

    /// The counters of a `/proc/stat` text.
    pub fn of(stat: &str) -> Option<MachineTicks> {
        let fields = stat.lines().next()?.strip_prefix("cpu ")?;
        let ticks: Vec<u64> = fields
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        // user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is
        // counted in user and nice already.
        let all: u64 = ticks.iter().take(8).sum();
        let idle = ticks.get(3)? + ticks.get(4).copied().unwrap_or(0);
        Some(MachineTicks {
            busy: all.saturating_sub(idle),
            steal: ticks.get(7).copied().unwrap_or(0),
            all,
        })
    }
}

/// The first field of a `/proc/…/schedstat` text: time spent on a CPU, ns.
pub fn schedstat_run_ns(schedstat: &str) -> Option<u64> {
    schedstat.split_whitespace().next()?.parse().ok()
}

/// The id of the first thread of process `pid` whose name (`/proc/PID/task/TID/comm`) is
/// `name`.
///
/// # Errors
/// When the process's task directory cannot be listed.
pub fn thread_named(pid: u32, name: &str) -> std::io::Result<Option<u32>> {
    let dir = Path::new("/proc").join(pid.to_string()).join("task");
    let mut found = None;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == name
            && let Some(tid) = entry
                .file_name()
                .to_str()
                .and_then(|t| t.parse::<u32>().ok())
        {
            found = Some(found.map_or(tid, |f: u32| f.min(tid)));
        }
    }
    Ok(found)
}

/// Resident memory of a process, from `/proc/PID/status` (`/proc/self/status` for `None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rss {
    /// `VmRSS`: resident now, KiB.
    pub rss_kib: u64,
    /// `VmHWM`: the peak resident size so far, KiB.
    pub hwm_kib: u64,
}

impl Rss {
    /// Reads the counters of process `pid` (this process for `None`).
    ///
    /// # Errors
    /// When the status file cannot be read or lacks either field.
    pub fn of(pid: Option<u32>) -> std::io::Result<Rss> {
        let path = pid.map_or_else(
            || "/proc/self/status".to_owned(),
            |pid| format!("/proc/{pid}/status"),
        );
        let text = std::fs::read_to_string(&path)?;
        let field = |name: &str| {
            status_field_kib(&text, name).ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{path}: no {name} field"),
                )
            })
        };
        Ok(Rss {
            rss_kib: field("VmRSS")?,
            hwm_kib: field("VmHWM")?,
        })
    }
}

/// The 1, 5 and 15 minute load averages from `/proc/loadavg`, as written there.
pub fn loadavg() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let fields: Vec<&str> = text.split_whitespace().take(3).collect();
    (fields.len() == 3).then(|| fields.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_from_proc_status_text() {
        let status = "Name:\tl1gate\nVmPeak:\t  900 kB\nVmRSS:\t  123456 kB\nThreads:\t4\n";
        assert_eq!(status_field_kib(status, "VmRSS"), Some(123_456));
        assert_eq!(status_field_kib("Name:\tx\n", "VmRSS"), None);
    }

    #[test]
    fn status_fields_are_read_in_kib() {
        let status = "Name:\tl1gate\nVmPeak:\t  900 kB\nVmHWM:\t  200000 kB\nVmRSS:\t  123456 kB\n";
        assert_eq!(status_field_kib(status, "VmRSS"), Some(123_456));
        assert_eq!(status_field_kib(status, "VmHWM"), Some(200_000));
        assert_eq!(status_field_kib(status, "VmSwap"), None);
        assert_eq!(status_field_kib("VmRSSX:\t1 kB\n", "VmRSS"), None);
    }

    #[test]
    fn cpu_fields_are_read_after_the_command_name() {
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194304 10 0 0 0 7 5 0 0 20 0 3 0 100 1 1";
        assert_eq!(stat_cpu_ticks(stat), Some(12));
        assert_eq!(stat_cpu_ticks("42 (x) S 1"), None);
        assert_eq!(
            schedstat_run_ns("146954354 9561717 351\n"),
            Some(146_954_354)
        );
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(status_field(status, "voluntary_ctxt_switches"), Some(17));
    }

    #[test]
    fn the_machines_busy_time_leaves_out_idle_and_iowait() {
        let stat = "cpu  100 5 50 800 40 3 2 0 7 0\ncpu0 50 2 25 400 20 1 1 0 0 0\nintr 1 2\n";
        // 100 + 5 + 50 + 3 + 2 + 0 busy of 1000 (guest time is inside user already).
        let ticks = |busy, steal, all| Some(MachineTicks { busy, steal, all });
        assert_eq!(MachineTicks::of(stat), ticks(160, 0, 1000));
        let stolen = "cpu  100 5 50 800 40 3 2 30 7 0\n";
        assert_eq!(MachineTicks::of(stolen), ticks(190, 30, 1030));
        assert_eq!(
            MachineTicks::of("cpu  1 2 3 4\n"),
            ticks(6, 0, 10),
            "before steal"
        );
        assert_eq!(MachineTicks::of("cpu0 1 2 3 4\n"), None);
        assert_eq!(MachineTicks::of("cpu  1 x 3 4\n"), None);
        let now = MachineTicks::now().unwrap();
        assert!(now.steal <= now.busy && now.busy <= now.all && now.all > 0);
    }

    #[test]
    fn this_thread_and_process_have_cpu_time() {
        let me = CpuTime::this_thread().unwrap();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let later = CpuTime::this_thread().unwrap();
        let used = later.since(&me);
        assert!(used.best_s() >= 0.0 && used.ticks_s >= 0.0, "{used:?}");
        let pid = std::process::id();
        assert!(CpuTime::of_process(pid).unwrap().ticks >= later.ticks);
        assert_eq!(thread_named(pid, "no such thread name").unwrap(), None);
    }

    #[test]
    fn this_process_has_a_resident_size() {
        let rss = Rss::of(None).unwrap();
        assert!(rss.rss_kib > 0 && rss.hwm_kib >= rss.rss_kib, "{rss:?}");
        assert!(loadavg().is_some_and(|l| l.split(' ').count() == 3));
    }
}

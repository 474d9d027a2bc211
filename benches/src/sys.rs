//! What the harnesses read from `/proc`: a process's memory counters and the machine's load.

/// A `kB` field (`VmRSS`, `VmHWM`, …) of a `/proc/PID/status` text, in KiB.
pub fn status_field_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
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
    fn status_fields_are_read_in_kib() {
        let status = "Name:\tl1gate\nVmPeak:\t  900 kB\nVmHWM:\t  200000 kB\nVmRSS:\t  123456 kB\n";
        assert_eq!(status_field_kib(status, "VmRSS"), Some(123_456));
        assert_eq!(status_field_kib(status, "VmHWM"), Some(200_000));
        assert_eq!(status_field_kib(status, "VmSwap"), None);
        assert_eq!(status_field_kib("VmRSSX:\t1 kB\n", "VmRSS"), None);
    }

    #[test]
    fn this_process_has_a_resident_size() {
        let rss = Rss::of(None).unwrap();
        assert!(rss.rss_kib > 0 && rss.hwm_kib >= rss.rss_kib, "{rss:?}");
        assert!(loadavg().is_some_and(|l| l.split(' ').count() == 3));
    }
}

//! Shared pieces of the l1gate benchmark harnesses: the machine description and the
//! section writer for `benches/BENCHMARKS.md`.
//!
//! Each harness owns one section of `BENCHMARKS.md`, delimited by
//! `<!-- NAME:begin -->` and `<!-- NAME:end -->`, and rewrites only that section; text outside
//! the markers (the header, other harnesses' sections) is kept byte for byte.
//!
//! [`live`] holds what the live harnesses (`fanout`, `latency`) share: a paced simulator
//! writer and the server in a child process. [`summary`] is how a harness hands its headline
//! figures to the `report` binary, [`plot`] draws the report's SVG charts, [`sys`] reads
//! memory counters and load from `/proc`, and [`cargo`] builds the sibling binaries a harness
//! starts.

pub mod cargo;
pub mod data;
pub mod floor;
pub mod live;
pub mod load;
pub mod plot;
pub mod server;
pub mod streams;
pub mod summary;
pub mod sys;
pub mod tls;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// Path of `benches/BENCHMARKS.md` in this checkout.
pub fn benchmarks_md() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("BENCHMARKS.md")
}

/// The machine and build a measurement ran on.
#[derive(Debug, Clone)]
pub struct Machine {
    /// CPU model from `/proc/cpuinfo`.
    pub cpu: String,
    /// Logical cores available to this process.
    pub cores: usize,
    /// Total memory from `/proc/meminfo`, in GiB.
    pub memory_gib: f64,
    /// `rustc --version` of the compiler that built this binary.
    pub rustc: String,
    /// Cargo profile of this binary.
    pub profile: String,
    /// UTC date and time of the run.
    pub date: String,
    /// `git rev-parse --short HEAD`, with the dirty paths if any.
    pub commit: String,
}

impl Machine {
    /// Describes the current machine, build and checkout.
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or_else(|| "unknown".to_owned(), |(_, v)| v.trim().to_owned());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_gib = meminfo
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / (1024.0 * 1024.0));
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
            memory_gib,
            rustc: env!("BENCHES_RUSTC_VERSION").to_owned(),
            profile: env!("BENCHES_PROFILE").to_owned(),
            date: utc_now(),
            commit: git_commit(),
        }
    }

    /// The machine as a Markdown bullet list.
    pub fn markdown(&self, command: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "- Date: {}", self.date);
        let _ = writeln!(
            s,
            "- Machine: {}, {} cores, {:.0} GiB memory",
            self.cpu, self.cores, self.memory_gib
        );
        let _ = writeln!(s, "- Compiler: {}, profile {}", self.rustc, self.profile);
        let _ = writeln!(s, "- Commit: {}", self.commit);
        let _ = writeln!(s, "- Command: `{command}`");
        s
    }
}

/// A comma-separated list of counts given to `flag` (e.g. `--streams 1000,4000`); zeros are
/// left out, so `0` asks for none.
///
/// # Errors
/// When an entry is not a count, naming the flag.
pub fn counts(text: &str, flag: &str) -> anyhow::Result<Vec<usize>> {
    text.split(',')
        .map(|n| n.trim().parse::<usize>())
        .filter(|n| n != &Ok(0))
        .collect::<Result<_, _>>()
        .map_err(|error| {
            anyhow::anyhow!("{flag}: a comma-separated list of counts (0: none): {error}")
        })
}

/// The median of `samples` (the upper one of an even count; zero for none).
pub fn median_duration(samples: &[std::time::Duration]) -> std::time::Duration {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

/// The command line that reproduces this run: `cargo run --release -p benches --` and this
/// process's arguments (the subcommand and its options).
pub fn cargo_command() -> String {
    let mut s = "cargo run --release -p benches --".to_owned();
    for a in std::env::args().skip(1) {
        s.push(' ');
        s.push_str(&a);
    }
    s
}

/// The arguments after the subcommand's name, as given (for a harness's history row).
pub fn harness_args() -> Vec<String> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let names = if argv.first().map(String::as_str) == Some("load") {
        2
    } else {
        1
    };
    argv.into_iter().skip(names).collect()
}

/// This executable re-run as the child `name` of a harness (`bench child NAME …`): a load
/// process, a stand-in upstream or a generator that must not share the harness's threads.
///
/// # Errors
/// When this executable's path cannot be read.
pub fn child(name: &str) -> std::io::Result<std::process::Command> {
    let mut command = std::process::Command::new(std::env::current_exe()?);
    command.args(["child", name]);
    Ok(command)
}

/// Paths whose changes can alter what the harnesses measure (the crates they link, the lock
/// file and the build profiles); uncommitted changes elsewhere are not reported.
const MEASURED: [&str; 8] = [
    "engine/",
    "benches/",
    "feeds/",
    "proto/",
    "server/",
    "fixtures/",
    "Cargo.toml",
    "Cargo.lock",
];

fn git_commit() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let run = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
    };
    let Some(head) = run(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".to_owned();
    };
    let head = head.trim().to_owned();
    let dirty: Vec<String> = run(&["status", "--porcelain", "--untracked-files=no"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.get(3..))
        .filter(|p| !p.ends_with("BENCHMARKS.md"))
        .filter(|p| MEASURED.iter().any(|m| p.starts_with(m)))
        .map(str::to_owned)
        .collect();
    if dirty.is_empty() {
        head
    } else {
        format!("{head} (uncommitted changes: {})", dirty.join(", "))
    }
}

/// Percent-encodes a query-string value: unreserved bytes stay, every other
/// byte becomes `%XX`.
pub fn query_escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Current UTC time as `YYYY-MM-DD HH:MM UTC`.
pub fn utc_now() -> String {
    utc(SystemTime::now())
}

/// A time as `YYYY-MM-DD HH:MM UTC`.
pub fn utc(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (year, month, day) = feeds::time::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rem / 3_600,
        rem % 3_600 / 60
    )
}

/// The most frequent user in `lines`, to drive a `users` filter that matches: the value after
/// `"user":"` (order statuses, book diffs), or the first string of a `["0x…", {…}]` fill event
/// when `fills` is set. Ties go to the smallest address, so the choice is deterministic.
pub fn most_active_user<'a>(
    lines: impl IntoIterator<Item = &'a [u8]>,
    fills: bool,
) -> Option<String> {
    let needle: &[u8] = if fills { b"[\"0x" } else { b"\"user\":\"" };
    let skip = if fills { 2 } else { needle.len() };
    let finder = memchr::memmem::Finder::new(needle);
    let mut counts: HashMap<&[u8], usize> = HashMap::new();
    for data in lines {
        for at in finder.find_iter(data) {
            let start = at + skip;
            if let Some(len) = memchr::memchr(b'"', &data[start..]) {
                *counts.entry(&data[start..start + len]).or_default() += 1;
            }
        }
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)))
        .map(|(user, _)| String::from_utf8_lossy(user).into_owned())
}

const HEADER: &str = "# l1gate benchmarks\n";

/// Replaces the section `name` of the Markdown file at `path` with `body` (creating the file,
/// or appending the section, when absent). Everything outside the section's markers is kept.
///
/// # Errors
/// When the file cannot be read or written, or has a begin marker without its end marker.
pub fn write_section(path: &Path, name: &str, body: &str) -> std::io::Result<()> {
    let begin = format!("<!-- {name}:begin -->");
    let end = format!("<!-- {name}:end -->");
    let old = match std::fs::read_to_string(path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => HEADER.to_owned(),
        Err(e) => return Err(e),
    };
    let section = format!("{begin}\n{}\n{end}", body.trim_end());
    let new = match (old.find(&begin), old.find(&end)) {
        (Some(b), Some(e)) if e > b => {
            format!("{}{section}{}", &old[..b], &old[e + end.len()..])
        }
        (None, None) => format!("{}\n\n{section}\n", old.trim_end()),
        _ => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: unbalanced markers for section {name}", path.display()),
            ));
        }
    };
    let tmp = path.with_extension("md.tmp");
    std::fs::write(&tmp, new)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_replaced_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("B.md");
        write_section(&path, "a", "one").unwrap();
        write_section(&path, "b", "two").unwrap();
        write_section(&path, "a", "three\n").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "# l1gate benchmarks\n\n<!-- a:begin -->\nthree\n<!-- a:end -->\n\n<!-- b:begin -->\ntwo\n<!-- b:end -->\n"
        );
    }

    #[test]
    fn most_active_user_counts_events() {
        let a: &[u8] = br#"{"events":[{"user":"0xb"},{"user":"0xa"},{"user":"0xb"}]}"#;
        assert_eq!(most_active_user([a], false).as_deref(), Some("0xb"));
        let f: &[u8] = br#"{"events":[["0xc",{"coin":"BTC"}],["0xd",{}],["0xc",{}]]}"#;
        assert_eq!(most_active_user([f], true).as_deref(), Some("0xc"));
    }

    #[test]
    fn utc_date_is_well_formed() {
        let d = utc_now();
        assert_eq!(d.len(), "2026-01-01 00:00 UTC".len());
        assert!(d.starts_with("20"));
        let t = UNIX_EPOCH + std::time::Duration::from_secs(1_778_002_752);
        assert_eq!(utc(t), "2026-05-05 17:39 UTC");
    }
}

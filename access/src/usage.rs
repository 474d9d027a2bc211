//! Per-key usage of the current quota period: admitted requests and bytes
//! sent to the client, counted against the key's quota (see
//! [`crate::quota`]), and kept across restarts in
//! `state_dir/usage.json`.
//!
//! - **Counting.** Each key has one [`KeyMeter`] of atomics. A request takes
//!   one unit with a compare-and-swap against the request cap (so a burst of
//!   concurrent requests never overshoots it) and gives it back when a later
//!   check refuses it; bytes are added with one `fetch_add` per message sent
//!   and compared with the byte cap — no lock, no clock read on that path.
//! - **Periods.** A key's usage belongs to the UTC calendar day or month of
//!   its quota (a key without a quota: the month). When a period ends the
//!   counts start again from zero: noticed by the next request, by a message
//!   that finds the byte cap reached, and by the server's once-a-second tick,
//!   whichever comes first. Changing a key's quota to another period starts
//!   its count afresh.
//! - **Persistence.** [`Meters::save`] writes every key's period and counts
//!   to a temporary file beside `usage.json` and renames it over (a reader
//!   never sees half a file); the server does so every few seconds when
//!   something changed, and at shutdown. [`Meters::load`] reads it back at
//!   start: counts of a period that has ended since are dropped. A damaged
//!   file is reported and set aside as `usage.json.damaged`, and counting
//!   starts from zero.
//!
//! File format (JSON):
//!
//! ```json
//! {"version": 1, "saved_ms": 1779000000000,
//!  "keys": {"k_3f9a1c2b7d4e": {"period": "day", "period_start_ms": 1778976000000,
//!                              "requests": 1200, "bytes": 734003200}}}
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::denial::Denial;
use crate::quota::{Period, Quota, QuotaKind};

/// Name of the usage file in `state_dir`.
pub const USAGE_FILE: &str = "usage.json";

/// The period of a key without a quota.
pub const DEFAULT_PERIOD: Period = Period::Month;

/// No cap.
const UNCAPPED: u64 = u64::MAX;

fn period_code(period: Period) -> u8 {
    match period {
        Period::Day => 0,
        Period::Month => 1,
    }
}

fn period_of(code: u8) -> Period {
    if code == 0 {
        Period::Day
    } else {
        Period::Month
    }
}

/// One key's usage in its current period. See the module docs.
#[derive(Debug)]
pub struct KeyMeter {
    key_id: String,
    requests: AtomicU64,
    bytes: AtomicU64,
    period: AtomicU8,
    period_start_ms: AtomicI64,
    period_end_ms: AtomicI64,
    request_limit: AtomicU64,
    byte_limit: AtomicU64,
    /// Taken only to start a new period (or change it).
    rolling: Mutex<()>,
    /// Shared by every meter: set when a byte cap is reached.
    reached: Arc<AtomicBool>,
    clock: Clock,
}

/// What a meter holds at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MeterReading {
    /// Admitted requests this period.
    pub requests: u64,
    /// Bytes sent to the client this period.
    pub bytes: u64,
    /// The period.
    pub period: Period,
    /// Its start, Unix ms.
    pub period_start_ms: i64,
    /// Its end (the next reset), Unix ms.
    pub period_end_ms: i64,
}

impl KeyMeter {
    fn new(
        key_id: &str,
        period: Period,
        now_ms: i64,
        reached: Arc<AtomicBool>,
        clock: Clock,
    ) -> Self {
        let (start, end) = period.bounds(now_ms);
        Self {
            key_id: key_id.to_owned(),
            requests: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            period: AtomicU8::new(period_code(period)),
            period_start_ms: AtomicI64::new(start),
            period_end_ms: AtomicI64::new(end),
            request_limit: AtomicU64::new(UNCAPPED),
            byte_limit: AtomicU64::new(UNCAPPED),
            rolling: Mutex::new(()),
            reached,
            clock,
        }
    }

    /// The key's id.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    fn period(&self) -> Period {
        period_of(self.period.load(Ordering::Acquire))
    }

    /// Takes the key's quota as the keys file now states it, and starts a
    /// new period if the one counted has ended (or the quota's period
    /// differs).
    pub fn configure(&self, quota: Option<Quota>, now_ms: i64) {
        let cap = |value: Option<u64>| value.unwrap_or(UNCAPPED);
        let (requests, bytes) =
            quota.map_or((UNCAPPED, UNCAPPED), |q| (cap(q.requests), cap(q.bytes)));
        if self.request_limit.load(Ordering::Relaxed) != requests {
            self.request_limit.store(requests, Ordering::Release);
        }
        if self.byte_limit.load(Ordering::Relaxed) != bytes {
            self.byte_limit.store(bytes, Ordering::Release);
        }
        let period = quota.map_or(DEFAULT_PERIOD, |q| q.period);
        if period == self.period() {
            self.roll(now_ms);
        } else {
            self.start_period(period, now_ms);
        }
    }

    /// Starts the period holding `now_ms` if the counted one has ended
    /// (or lies ahead: a clock set back); whether it did.
    pub fn roll(&self, now_ms: i64) -> bool {
        let inside = |meter: &Self| {
            meter.period_start_ms.load(Ordering::Acquire) <= now_ms
                && now_ms < meter.period_end_ms.load(Ordering::Acquire)
        };
        if inside(self) {
            return false;
        }
        self.start_period(self.period(), now_ms)
    }

    /// Moves to the `period` holding `now_ms`, from zero unless it is the
    /// one counted already; whether the counts were reset.
    fn start_period(&self, period: Period, now_ms: i64) -> bool {
        let _rolling = self.rolling.lock();
        let (start, end) = period.bounds(now_ms);
        let same = self.period() == period && self.period_start_ms.load(Ordering::Acquire) == start;
        if same {
            return false;
        }
        self.requests.store(0, Ordering::Release);
        self.bytes.store(0, Ordering::Release);
        self.period.store(period_code(period), Ordering::Release);
        self.period_start_ms.store(start, Ordering::Release);
        self.period_end_ms.store(end, Ordering::Release);
        true
    }

    /// Takes one request of the quota.
    ///
    /// # Errors
    /// The cap that is used up: the byte cap (nothing more may be sent)
    /// or the request cap.
    pub fn take_request(&self) -> Result<(), QuotaKind> {
        if self.bytes_reached() {
            return Err(QuotaKind::Bytes);
        }
        let limit = self.request_limit.load(Ordering::Acquire);
        self.requests
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used < limit).then_some(used + 1)
            })
            .map(|_| ())
            .map_err(|_| QuotaKind::Requests)
    }

    /// Gives back a request taken by [`KeyMeter::take_request`] that a
    /// later check refused.
    pub fn give_back_request(&self) {
        let _ = self
            .requests
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_sub(1)
            });
    }

    /// Whether the byte cap is reached.
    pub fn bytes_reached(&self) -> bool {
        self.bytes.load(Ordering::Acquire) >= self.byte_limit.load(Ordering::Acquire)
    }

    /// Counts `bytes` sent to the client; whether the byte cap is now
    /// reached (the stream that sent them should end).
    pub fn add_bytes(&self, bytes: u64) -> bool {
        let before = self.bytes.fetch_add(bytes, Ordering::AcqRel);
        let after = before.saturating_add(bytes);
        let limit = self.byte_limit.load(Ordering::Acquire);
        if after < limit {
            return false;
        }
        // Rare: the cap is reached, unless the period just ended (then the
        // bytes count in the new one).
        let (before, after) = if self.roll(self.clock.now_ms()) {
            let before = self.bytes.fetch_add(bytes, Ordering::AcqRel);
            (before, before.saturating_add(bytes))
        } else {
            (before, after)
        };
        if after < limit {
            return false;
        }
        if before < limit {
            // This message reached it: open streams of the key are looked at.
            self.reached.store(true, Ordering::Release);
        }
        true
    }

    /// The refusal for `kind` used up, naming the cap and its reset.
    pub fn exhausted(&self, kind: QuotaKind, now_ms: i64) -> Denial {
        let limit = match kind {
            QuotaKind::Requests => self.request_limit.load(Ordering::Acquire),
            QuotaKind::Bytes => self.byte_limit.load(Ordering::Acquire),
        };
        let resets_at_ms = self.period_end_ms.load(Ordering::Acquire);
        let wait = u64::try_from(resets_at_ms.saturating_sub(now_ms)).unwrap_or(0);
        Denial::QuotaExhausted {
            key_id: self.key_id.clone(),
            kind,
            limit,
            period: self.period(),
            resets_at_ms,
            retry_after: Duration::from_millis(wait),
        }
    }

    /// What it holds now.
    pub fn reading(&self) -> MeterReading {
        MeterReading {
            requests: self.requests.load(Ordering::Acquire),
            bytes: self.bytes.load(Ordering::Acquire),
            period: self.period(),
            period_start_ms: self.period_start_ms.load(Ordering::Acquire),
            period_end_ms: self.period_end_ms.load(Ordering::Acquire),
        }
    }
}

/// One key's entry in the usage file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedKey {
    /// The period counted.
    pub period: Period,
    /// Its start, Unix ms.
    pub period_start_ms: i64,
    /// Admitted requests in it.
    pub requests: u64,
    /// Bytes sent in it.
    pub bytes: u64,
}

/// The usage file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedUsage {
    /// Format version, 1.
    pub version: u32,
    /// When it was written, Unix ms.
    pub saved_ms: i64,
    /// Every key's usage.
    pub keys: BTreeMap<String, SavedKey>,
}

/// Every key's meter. See the module docs.
#[derive(Debug)]
pub struct Meters {
    by_key: RwLock<HashMap<String, Arc<KeyMeter>>>,
    reached: Arc<AtomicBool>,
    clock: Clock,
    /// What the last save wrote (and serialises saves).
    saved: Mutex<Option<BTreeMap<String, SavedKey>>>,
}

impl Meters {
    /// No usage yet, judged by `clock`.
    pub fn new(clock: Clock) -> Self {
        Self {
            by_key: RwLock::new(HashMap::new()),
            reached: Arc::new(AtomicBool::new(false)),
            clock,
            saved: Mutex::new(None),
        }
    }

    /// The clock periods are judged by.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The meter of `key_id`, configured with its `quota` as of `now_ms`.
    pub fn meter(&self, key_id: &str, quota: Option<Quota>, now_ms: i64) -> Arc<KeyMeter> {
        let found = self.by_key.read().get(key_id).cloned();
        let meter = found.unwrap_or_else(|| {
            let period = quota.map_or(DEFAULT_PERIOD, |q| q.period);
            Arc::clone(
                self.by_key
                    .write()
                    .entry(key_id.to_owned())
                    .or_insert_with(|| {
                        Arc::new(KeyMeter::new(
                            key_id,
                            period,
                            now_ms,
                            Arc::clone(&self.reached),
                            self.clock.clone(),
                        ))
                    }),
            )
        });
        meter.configure(quota, now_ms);
        meter
    }

    /// The meter of `key_id`, if it has one.
    pub fn existing(&self, key_id: &str) -> Option<Arc<KeyMeter>> {
        self.by_key.read().get(key_id).cloned()
    }

    /// Every meter.
    pub fn all(&self) -> Vec<Arc<KeyMeter>> {
        self.by_key.read().values().cloned().collect()
    }

    /// Whether a byte cap was reached since the last call.
    pub fn take_reached(&self) -> bool {
        self.reached.swap(false, Ordering::AcqRel)
    }

    /// Takes the counts of a usage file, as of `now_ms`: those of a period
    /// that has ended are dropped.
    pub fn restore(&self, saved: &SavedUsage, now_ms: i64) {
        let mut meters = self.by_key.write();
        for (key_id, key) in &saved.keys {
            let (start, _) = key.period.bounds(now_ms);
            if start != key.period_start_ms {
                continue;
            }
            let meter = KeyMeter::new(
                key_id,
                key.period,
                now_ms,
                Arc::clone(&self.reached),
                self.clock.clone(),
            );
            meter.requests.store(key.requests, Ordering::Release);
            meter.bytes.store(key.bytes, Ordering::Release);
            meters.insert(key_id.clone(), Arc::new(meter));
        }
    }

    /// Every key's usage as the file holds it.
    fn snapshot(&self) -> BTreeMap<String, SavedKey> {
        self.by_key
            .read()
            .iter()
            .map(|(key_id, meter)| {
                let reading = meter.reading();
                (
                    key_id.clone(),
                    SavedKey {
                        period: reading.period,
                        period_start_ms: reading.period_start_ms,
                        requests: reading.requests,
                        bytes: reading.bytes,
                    },
                )
            })
            .collect()
    }

    /// Writes the usage to `path` atomically if it changed since the last
    /// save; whether it wrote.
    ///
    /// # Errors
    /// When the file cannot be written (the last good one stays).
    pub fn save(&self, path: &Path) -> std::io::Result<bool> {
        let mut saved = self.saved.lock();
        let keys = self.snapshot();
        if saved.as_ref() == Some(&keys) {
            return Ok(false);
        }
        let file = SavedUsage {
            version: 1,
            saved_ms: self.clock.now_ms(),
            keys,
        };
        let text = serde_json::to_vec_pretty(&file).map_err(std::io::Error::other)?;
        write_atomically(path, &text)?;
        *saved = Some(file.keys);
        Ok(true)
    }

    /// Reads a usage file; `Ok(None)` when there is none.
    ///
    /// # Errors
    /// What is wrong with a file that cannot be read or is not a usage
    /// file of a known version.
    pub fn load(path: &Path) -> Result<Option<SavedUsage>, String> {
        let text = match fs::read(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let saved: SavedUsage = serde_json::from_slice(&text)
            .map_err(|e| format!("{}: not a usage file: {e}", path.display()))?;
        if saved.version != 1 {
            return Err(format!(
                "{}: version {} is not one this server reads (1)",
                path.display(),
                saved.version
            ));
        }
        Ok(Some(saved))
    }

    /// Reads the usage file at `path` into the meters as of the clock's
    /// now. A damaged file is logged, kept aside as `usage.json.damaged`,
    /// and otherwise ignored: usage starts from zero.
    pub fn restore_from(&self, path: &Path) {
        match Self::load(path) {
            Ok(Some(saved)) => {
                self.restore(&saved, self.clock.now_ms());
                tracing::info!(path = %path.display(), keys = saved.keys.len(), "key usage restored");
            }
            Ok(None) => {}
            Err(problem) => {
                let aside = sibling(path, "damaged");
                let kept = fs::rename(path, &aside).is_ok();
                tracing::error!(
                    %problem,
                    kept_as = %if kept { aside.display().to_string() } else { "-".to_owned() },
                    "key usage file damaged: ignored, usage counts start from zero"
                );
            }
        }
    }
}

/// `path` with `.suffix` appended to its file name.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(suffix);
    path.with_file_name(name)
}

/// Writes `bytes` to a temporary file beside `path` (its own name: no other
/// writer renames it) and renames it over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir)?;
    }
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let tmp = sibling(path, &format!("{}.{n}.tmp", std::process::id()));
    let written = (|| {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    if let Err(error) = written.and_then(|()| fs::rename(&tmp, path)) {
        let _ = fs::remove_file(&tmp);
        return Err(error);
    }
    Ok(())
}

/// Counts an HTTP response body toward its key's byte quota.
#[derive(Debug, Clone)]
pub struct ResponseBytes(pub(crate) Arc<KeyMeter>);

impl ResponseBytes {
    /// Counts `bytes` sent to the client.
    pub fn sent(&self, bytes: u64) {
        if bytes > 0 {
            self.0.add_bytes(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> i64 {
        feeds::time::parse_iso8601_ms(text).unwrap()
    }

    fn daily(requests: Option<u64>, bytes: Option<u64>) -> Option<Quota> {
        let quota = Quota {
            period: Period::Day,
            requests,
            bytes,
        };
        quota.problem().is_none().then_some(quota)
    }

    #[test]
    fn requests_stop_at_the_cap_and_refusals_give_theirs_back() {
        let clock = Clock::manual(ms("2026-05-05T12:00:00Z"));
        let meters = Meters::new(clock.clone());
        let meter = meters.meter("k_a", daily(Some(2), None), clock.now_ms());
        assert_eq!(meter.take_request(), Ok(()));
        assert_eq!(meter.take_request(), Ok(()));
        assert_eq!(meter.take_request(), Err(QuotaKind::Requests));
        meter.give_back_request();
        assert_eq!(meter.take_request(), Ok(()));
        let Denial::QuotaExhausted {
            resets_at_ms,
            retry_after,
            limit,
            ..
        } = meter.exhausted(QuotaKind::Requests, clock.now_ms())
        else {
            panic!("a quota denial");
        };
        assert_eq!(resets_at_ms, ms("2026-05-06T00:00:00Z"));
        assert_eq!(retry_after, Duration::from_secs(12 * 3_600));
        assert_eq!(limit, 2);
    }

    #[test]
    fn the_byte_cap_is_reached_once_and_signalled() {
        let clock = Clock::manual(ms("2026-05-05T12:00:00Z"));
        let meters = Meters::new(clock.clone());
        let meter = meters.meter("k_a", daily(None, Some(100)), clock.now_ms());
        assert!(!meter.add_bytes(60));
        assert!(!meters.take_reached());
        assert!(
            meter.add_bytes(60),
            "the message crossing the cap reaches it"
        );
        assert!(meters.take_reached());
        assert!(meter.add_bytes(1));
        assert!(!meters.take_reached(), "signalled once, when crossed");
        assert_eq!(meter.take_request(), Err(QuotaKind::Bytes));
    }

    #[test]
    fn usage_starts_from_zero_at_the_period_boundary() {
        let clock = Clock::manual(ms("2026-05-05T23:59:59Z"));
        let meters = Meters::new(clock.clone());
        let meter = meters.meter("k_a", daily(Some(1), Some(10)), clock.now_ms());
        meter.take_request().unwrap();
        assert!(meter.add_bytes(10));
        clock.advance(Duration::from_secs(1));
        // A message sent after the boundary counts in the new day.
        assert!(!meter.add_bytes(5));
        assert_eq!(meter.reading().bytes, 5);
        assert_eq!(meter.reading().requests, 0);
        assert_eq!(meter.reading().period_start_ms, ms("2026-05-06T00:00:00Z"));
        assert_eq!(meter.take_request(), Ok(()));
        // Another period restarts the count; the same one keeps it.
        let monthly = Some(Quota {
            period: Period::Month,
            requests: Some(5),
            bytes: None,
        });
        meter.configure(monthly, clock.now_ms());
        assert_eq!(meter.reading().requests, 0);
        meter.take_request().unwrap();
        meter.configure(monthly, clock.now_ms());
        assert_eq!(meter.reading().requests, 1);
        assert_eq!(meter.reading().period_end_ms, ms("2026-06-01T00:00:00Z"));
    }

    #[test]
    fn usage_is_saved_and_restored_within_its_period_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state").join(USAGE_FILE);
        let clock = Clock::manual(ms("2026-05-05T12:00:00Z"));
        let meters = Meters::new(clock.clone());
        let meter = meters.meter("k_a", daily(Some(10), None), clock.now_ms());
        meter.take_request().unwrap();
        meter.add_bytes(42);
        assert!(meters.save(&path).unwrap());
        assert!(!meters.save(&path).unwrap(), "nothing changed: not written");
        let leftovers = fs::read_dir(path.parent().unwrap()).unwrap().count();
        assert_eq!(leftovers, 1, "no temporary file is left");

        let again = Meters::new(clock.clone());
        again.restore_from(&path);
        let reading = again
            .meter("k_a", daily(Some(10), None), clock.now_ms())
            .reading();
        assert_eq!((reading.requests, reading.bytes), (1, 42));

        // The next day: the saved day's counts are dropped.
        clock.advance(Duration::from_secs(86_400));
        let later = Meters::new(clock.clone());
        later.restore_from(&path);
        let reading = later
            .meter("k_a", daily(Some(10), None), clock.now_ms())
            .reading();
        assert_eq!((reading.requests, reading.bytes), (0, 0));
    }

    #[test]
    fn a_damaged_usage_file_is_set_aside_and_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(USAGE_FILE);
        for damage in [
            &b"{\"version\": 1, \"keys\": {"[..],
            b"\xff\x00",
            b"{\"version\": 9, \"saved_ms\": 0, \"keys\": {}}",
        ] {
            fs::write(&path, damage).unwrap();
            assert!(Meters::load(&path).is_err());
            let meters = Meters::new(Clock::manual(0));
            meters.restore_from(&path);
            assert!(meters.all().is_empty());
            assert!(!path.exists());
            assert!(dir.path().join("usage.json.damaged").exists());
        }
        assert_eq!(Meters::load(&path), Ok(None));
    }
}

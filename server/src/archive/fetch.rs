//! `l1gate archive fetch`: the plan, the downloads, progress and the
//! summary.
//!
//! 1. **List.** One ListObjectsV2 per day of the range (spill-over hours
//!    included), `prefix=<dataset>/hourly/YYYYMMDD/`, every page.
//! 2. **Plan** ([`Plan::new`]). Each wanted hour the bucket has is already
//!    complete here (a file of the listed size at its key under DIR:
//!    skipped), partly here (a `<file>.part` shorter than the object:
//!    resumed from its length), or to fetch whole. Hours the bucket does not
//!    have are gaps. The plan is printed (stdout) before anything is
//!    downloaded: files and bytes to transfer, what is already complete, the
//!    gaps; `--dry-run` stops there, having written nothing.
//! 3. **Download.** Up to `--concurrency` transfers at once. Each GETs its
//!    object into `<file>.part` (with `Range: bytes=N-` to continue one),
//!    checks that it holds exactly the listed size, and renames it into
//!    place, so a file at its final name is always whole. A transient
//!    failure (connection, 5xx, 429, `SlowDown`, a body cut short or
//!    stalled) is retried with backoff, resuming from what the `.part`
//!    holds; a 404 marks the hour missing; anything else fails that file.
//!    Progress goes to stderr (files, bytes, rate, ETA: four times a second
//!    on a terminal, rewriting one line, else a line every five seconds),
//!    then a summary to stdout. A run with a failed file ends with
//!    [`ArchiveError::Incomplete`]; gaps in the bucket do not fail it.
//!
//! Hour files in the archive are written once; a `.part` is assumed to be
//! the start of the object of the same key. An object whose size changed
//! since it was listed fails its file ([`ArchiveError::Changed`]), and the
//! next run plans it anew.

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::{StreamExt as _, TryStreamExt as _};
use http_body_util::BodyExt as _;
use hyper::StatusCode;
use tokio::io::AsyncWriteExt as _;

use super::command::{ArchiveError, FetchArgs, known_region};
use super::credentials;
use super::dataset::Dataset;
use super::hours::{Hour, HourRange};
use super::s3::{self, Client, Endpoint, Object, S3Error};

/// Runs `archive fetch` with `env` as the environment.
///
/// # Errors
/// [`ArchiveError`]: see [`super::run`].
pub fn run(args: &FetchArgs, env: &dyn Fn(&str) -> Option<String>) -> Result<(), ArchiveError> {
    let range = HourRange::new(args.from, args.to).ok_or_else(|| ArchiveError::EmptyRange {
        from: feeds::time::format_iso8601_ms(args.from),
        to: feeds::time::format_iso8601_ms(args.to),
    })?;
    let credentials = credentials::resolve(args.profile.as_deref(), env)?;
    let region = region(
        args.region.as_deref(),
        &args.bucket,
        env,
        credentials.profile_region.as_deref(),
    )?;
    let endpoint = match &args.endpoint {
        Some(url) => Endpoint::parse(url).map_err(|why| ArchiveError::Endpoint {
            endpoint: url.clone(),
            why,
        })?,
        None => Endpoint::aws(&region),
    };
    let client = Client::new(endpoint, &args.bucket, &region, credentials)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| ArchiveError::Runtime(e.to_string()))?;
    runtime.block_on(fetch(args, range, &client))
}

/// The region requests are signed for: `--region`, else `AWS_REGION`, else
/// `AWS_DEFAULT_REGION`, else the bucket's known region, else the profile's.
///
/// # Errors
/// [`ArchiveError::UnknownRegion`] when none of these gives one.
pub fn region(
    flag: Option<&str>,
    bucket: &str,
    env: &dyn Fn(&str) -> Option<String>,
    profile_region: Option<&str>,
) -> Result<String, ArchiveError> {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    flag.map(str::to_owned)
        .or_else(|| set("AWS_REGION"))
        .or_else(|| set("AWS_DEFAULT_REGION"))
        .or_else(|| known_region(bucket).map(str::to_owned))
        .or_else(|| profile_region.map(str::to_owned))
        .ok_or_else(|| ArchiveError::UnknownRegion {
            bucket: bucket.to_owned(),
        })
}

async fn fetch(args: &FetchArgs, range: HourRange, client: &Client) -> Result<(), ArchiveError> {
    let dataset = args.dataset;
    let concurrency = usize::from(args.concurrency.max(1));
    let mut days: Vec<Hour> = Vec::new();
    for hour in range.with_spill_over() {
        if days.last().is_none_or(|d| d.day() != hour.day()) {
            days.push(hour);
        }
    }
    let listed: Vec<Vec<Object>> = futures_util::stream::iter(days)
        .map(|day| async move { client.list(&day.day_prefix(dataset)).await })
        .buffered(concurrency)
        .try_collect()
        .await?;
    let listed: Vec<Object> = listed.into_iter().flatten().collect();
    let plan = Plan::new(dataset, range, &listed, &args.out)?;
    print!("{}", plan.render(client, &args.out));
    if args.dry_run {
        println!("dry run: nothing downloaded, nothing written");
        return Ok(());
    }
    let outcome = download(client, &plan, concurrency).await;
    print!("{}", outcome.render(&plan));
    if outcome.failed > 0 {
        return Err(ArchiveError::Incomplete {
            bucket: client.bucket().to_owned(),
            dataset: dataset.to_string(),
            failed: outcome.failed,
            total: plan.transfers.len(),
        });
    }
    Ok(())
}

/// One hour file to download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    /// The hour.
    pub hour: Hour,
    /// Its key in the bucket.
    pub key: String,
    /// Its size, as listed.
    pub size: u64,
    /// Where it goes: DIR/key.
    pub path: PathBuf,
    /// The file it is written to first: `<path>.part`.
    pub part: PathBuf,
    /// Bytes of it the `.part` already holds.
    pub have: u64,
}

impl Transfer {
    /// Bytes still to transfer.
    pub fn remaining(&self) -> u64 {
        self.size - self.have
    }
}

/// What a run will do, from the listing and the files already here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The dataset.
    pub dataset: Dataset,
    /// The range asked for (the spill-over hours are around it).
    pub range: HourRange,
    /// Hour files to download (or to finish).
    pub transfers: Vec<Transfer>,
    /// Hour files already complete here, with their sizes.
    pub complete: Vec<(Hour, u64)>,
    /// Wanted hours the bucket does not have.
    pub missing: Vec<Hour>,
}

impl Plan {
    /// The plan for the hours of `range` (spill-over included) of
    /// `dataset`, given the objects `listed` and the files under `out`.
    /// Listed keys that are no wanted hour are ignored.
    ///
    /// # Errors
    /// [`ArchiveError::File`] when a file under `out` cannot be looked at.
    pub fn new(
        dataset: Dataset,
        range: HourRange,
        listed: &[Object],
        out: &Path,
    ) -> Result<Self, ArchiveError> {
        let wanted: Vec<Hour> = range.with_spill_over().collect();
        let by_hour: BTreeMap<Hour, &Object> = listed
            .iter()
            .filter_map(|object| {
                let hour = Hour::from_key(dataset, &object.key)?;
                wanted.contains(&hour).then_some((hour, object))
            })
            .collect();
        let mut plan = Self {
            dataset,
            range,
            transfers: Vec::new(),
            complete: Vec::new(),
            missing: Vec::new(),
        };
        for hour in wanted {
            let Some(object) = by_hour.get(&hour) else {
                plan.missing.push(hour);
                continue;
            };
            let path = out.join(&object.key);
            let part = part_path(&path);
            if file_size(&path)? == Some(object.size) {
                plan.complete.push((hour, object.size));
                continue;
            }
            let have = file_size(&part)?
                .filter(|&len| len <= object.size)
                .unwrap_or(0);
            plan.transfers.push(Transfer {
                hour,
                key: object.key.clone(),
                size: object.size,
                path,
                part,
                have,
            });
        }
        Ok(plan)
    }

    /// Bytes the transfers will move.
    pub fn bytes_to_transfer(&self) -> u64 {
        self.transfers.iter().map(Transfer::remaining).sum()
    }

    /// The hours as a list, spill-over ones marked.
    fn hours_list(&self, hours: &[Hour]) -> String {
        if hours.is_empty() {
            return "none".to_owned();
        }
        hours
            .iter()
            .map(|&hour| {
                if self.range.is_spill_over(hour) {
                    format!("{hour} (spill-over)")
                } else {
                    hour.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The plan as printed before downloading.
    pub fn render(&self, client: &Client, out: &Path) -> String {
        let resumed = self.transfers.iter().filter(|t| t.have > 0).count();
        let complete_bytes: u64 = self.complete.iter().map(|(_, size)| size).sum();
        let bytes = self.bytes_to_transfer();
        let before = Hour(self.range.first.0 - 1);
        format!(
            "s3://{bucket}/{dataset} ({region}, {endpoint}): {from} to {to}, {hours}, and the \
             spill-over hours {before} and {after}\n\
             to fetch: {files}, {bytes} bytes ({human}){resumed}\n\
             already complete in {out}: {complete}, {complete_bytes} bytes\n\
             missing in the bucket: {missing}\n\
             requester pays: your AWS account is billed for the bytes transferred\n",
            bucket = client.bucket(),
            dataset = self.dataset,
            region = client.region(),
            endpoint = client.endpoint_url(),
            from = feeds::time::format_iso8601_ms(self.range.first.start_ms()),
            to = feeds::time::format_iso8601_ms(self.range.end.start_ms()),
            hours = counted(self.range.len(), "hour"),
            after = self.range.end,
            files = counted(self.transfers.len(), "hour file"),
            human = human_bytes(bytes),
            resumed = if resumed > 0 {
                format!(", {resumed} of them resumed from .part files")
            } else {
                String::new()
            },
            out = out.display(),
            complete = counted(self.complete.len(), "hour file"),
            missing = self.hours_list(&self.missing),
        )
    }
}

/// `<path>.part`.
fn part_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".part");
    PathBuf::from(name)
}

/// The size of the file at `path`, `None` when there is none.
fn file_size(path: &Path) -> Result<Option<u64>, ArchiveError> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => Ok(Some(meta.len())),
        Ok(_) => Err(ArchiveError::File {
            path: path.to_owned(),
            message: "not a regular file".to_owned(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ArchiveError::file(path, &e)),
    }
}

/// Counters the transfers share with the progress reporter.
struct Progress {
    files_total: usize,
    bytes_total: AtomicU64,
    files_done: AtomicUsize,
    bytes_done: AtomicU64,
    started: Instant,
}

impl Progress {
    fn line(&self) -> String {
        let done = self.bytes_done.load(Ordering::Relaxed);
        let total = self.bytes_total.load(Ordering::Relaxed).max(done);
        let secs = self.started.elapsed().as_secs_f64();
        let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
        let eta = if rate > 0.0 {
            common::duration_text((total - done) as f64 / rate)
        } else {
            "–".to_owned()
        };
        format!(
            "{}/{} files, {}/{}, {}/s, ETA {eta}",
            self.files_done.load(Ordering::Relaxed),
            self.files_total,
            human_bytes(done),
            human_bytes(total),
            human_bytes(rate as u64),
        )
    }
}

/// How the downloads went.
#[derive(Debug, Default)]
struct Outcome {
    fetched: usize,
    bytes: u64,
    /// Listed but gone when fetched (404).
    vanished: Vec<Hour>,
    failed: usize,
    elapsed: Duration,
}

impl Outcome {
    fn render(&self, plan: &Plan) -> String {
        let mut missing = plan.missing.clone();
        missing.extend(&self.vanished);
        missing.sort_unstable();
        let secs = self.elapsed.as_secs_f64();
        format!(
            "fetched {}, {} bytes ({}) in {secs:.1} s ({}/s); {} already complete; missing in \
             the bucket: {}; failed: {}\n",
            counted(self.fetched, "hour file"),
            self.bytes,
            human_bytes(self.bytes),
            human_bytes(if secs > 0.0 {
                (self.bytes as f64 / secs) as u64
            } else {
                0
            }),
            plan.complete.len(),
            plan.hours_list(&missing),
            self.failed
        )
    }
}

/// What became of one transfer.
enum Fetched {
    Done,
    Vanished,
}

async fn download(client: &Client, plan: &Plan, concurrency: usize) -> Outcome {
    let progress = Arc::new(Progress {
        files_total: plan.transfers.len(),
        bytes_total: AtomicU64::new(plan.bytes_to_transfer()),
        files_done: AtomicUsize::new(0),
        bytes_done: AtomicU64::new(0),
        started: Instant::now(),
    });
    let terminal = std::io::stderr().is_terminal();
    let reporter = tokio::spawn(report(Arc::clone(&progress), terminal));
    let results: Vec<(Hour, Result<Fetched, ArchiveError>)> =
        futures_util::stream::iter(&plan.transfers)
            .map(|transfer| {
                let progress = &progress;
                async move {
                    let result = fetch_file(client, transfer, progress, terminal).await;
                    if let Err(error) = &result {
                        eprintln!("{}failed: {error}", clear_line(terminal));
                    }
                    (transfer.hour, result)
                }
            })
            .buffer_unordered(concurrency)
            .collect()
            .await;
    reporter.abort();
    if terminal && !plan.transfers.is_empty() {
        eprintln!("{}{}", clear_line(true), progress.line());
    }
    let mut outcome = Outcome {
        bytes: progress.bytes_done.load(Ordering::Relaxed),
        elapsed: progress.started.elapsed(),
        ..Outcome::default()
    };
    for (hour, result) in results {
        match result {
            Ok(Fetched::Done) => outcome.fetched += 1,
            Ok(Fetched::Vanished) => outcome.vanished.push(hour),
            Err(_) => outcome.failed += 1,
        }
    }
    outcome
}

/// `\r` and erase-line on a terminal, so a message replaces the progress
/// line; nothing otherwise.
fn clear_line(terminal: bool) -> &'static str {
    if terminal { "\r\x1b[K" } else { "" }
}

async fn report(progress: Arc<Progress>, terminal: bool) {
    let every = if terminal {
        Duration::from_millis(250)
    } else {
        Duration::from_secs(5)
    };
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        ticker.tick().await;
        if terminal {
            eprint!("{}{}", clear_line(true), progress.line());
        } else {
            eprintln!("{}", progress.line());
        }
    }
}

/// Downloads one hour file, retrying transient failures; renames the
/// `.part` into place when it holds the whole object.
async fn fetch_file(
    client: &Client,
    transfer: &Transfer,
    progress: &Progress,
    terminal: bool,
) -> Result<Fetched, ArchiveError> {
    if let Some(parent) = transfer.path.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| ArchiveError::file(parent, &e))?;
    }
    let mut tried = 1;
    loop {
        match fetch_attempt(client, transfer, progress).await {
            Ok(()) => break,
            Err(ArchiveError::S3(S3Error::NotFound { .. })) => return Ok(Fetched::Vanished),
            Err(ArchiveError::S3(error)) if error.is_transient() && tried < s3::ATTEMPTS => {
                let wait = s3::backoff(tried);
                eprintln!(
                    "{}{error}; trying again in {:.1} s ({tried} of {} attempts failed)",
                    clear_line(terminal),
                    wait.as_secs_f64(),
                    s3::ATTEMPTS
                );
                tokio::time::sleep(wait).await;
                tried += 1;
            }
            Err(error) => return Err(error),
        }
    }
    tokio::fs::rename(&transfer.part, &transfer.path)
        .await
        .map_err(|e| ArchiveError::file(&transfer.path, &e))?;
    progress.files_done.fetch_add(1, Ordering::Relaxed);
    Ok(Fetched::Done)
}

/// One GET of the rest of the object into its `.part`.
async fn fetch_attempt(
    client: &Client,
    transfer: &Transfer,
    progress: &Progress,
) -> Result<(), ArchiveError> {
    let part = &transfer.part;
    let have = match tokio::fs::metadata(part).await {
        Ok(meta) => meta.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(ArchiveError::file(part, &e)),
    };
    // Longer than the object: not its start; begin again.
    let have = if have > transfer.size { 0 } else { have };
    if have == transfer.size {
        // Whole already (or an empty object): make sure the file exists.
        tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(part)
            .await
            .map_err(|e| ArchiveError::file(part, &e))?;
        return Ok(());
    }
    let response = client.get(&transfer.key, have).await?;
    let changed = |now: u64| ArchiveError::Changed {
        bucket: client.bucket().to_owned(),
        key: transfer.key.clone(),
        listed: transfer.size,
        now,
    };
    let start = if response.status() == StatusCode::PARTIAL_CONTENT {
        let range = response
            .headers()
            .get(hyper::header::CONTENT_RANGE)
            .and_then(|v| v.to_str().ok())
            .and_then(content_range);
        match range {
            Some((_, total)) if total != transfer.size => return Err(changed(total)),
            Some((start, _)) if start == have => start,
            _ => {
                return Err(client
                    .transport(
                        &transfer.key,
                        format!(
                            "asked for bytes {have}- and got a range that does not start there"
                        ),
                    )
                    .into());
            }
        }
    } else {
        if let Some(length) = response
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            && length != transfer.size
        {
            return Err(changed(length));
        }
        // The whole object again: what the `.part` held is sent anew.
        progress.bytes_total.fetch_add(have, Ordering::Relaxed);
        0
    };
    let file = tokio::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(start > 0)
        .truncate(start == 0)
        .open(part)
        .await
        .map_err(|e| ArchiveError::file(part, &e))?;
    let mut out = tokio::io::BufWriter::with_capacity(1 << 20, file);
    let mut body = response.into_body();
    let mut written = start;
    let received: Result<(), ArchiveError> = async {
        loop {
            let frame = match tokio::time::timeout(s3::IDLE_TIMEOUT, body.frame()).await {
                Err(_) => {
                    return Err(client
                        .transport(
                            &transfer.key,
                            format!("no data for {} s", s3::IDLE_TIMEOUT.as_secs()),
                        )
                        .into());
                }
                Ok(None) => return Ok(()),
                Ok(Some(Err(e))) => {
                    return Err(client
                        .transport(
                            &transfer.key,
                            format!("reading the body: {}", s3::error_chain(&e)),
                        )
                        .into());
                }
                Ok(Some(Ok(frame))) => frame,
            };
            if let Ok(data) = frame.into_data() {
                out.write_all(&data)
                    .await
                    .map_err(|e| ArchiveError::file(part, &e))?;
                written += data.len() as u64;
                progress
                    .bytes_done
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
            }
        }
    }
    .await;
    // What arrived stays in the `.part` for the next attempt, even after a
    // failure.
    out.flush()
        .await
        .map_err(|e| ArchiveError::file(part, &e))?;
    received?;
    out.get_ref()
        .sync_all()
        .await
        .map_err(|e| ArchiveError::file(part, &e))?;
    if written != transfer.size {
        return Err(client
            .transport(
                &transfer.key,
                format!("the body ended after {written} of {} bytes", transfer.size),
            )
            .into());
    }
    Ok(())
}

/// `bytes START-END/TOTAL` as (START, TOTAL).
fn content_range(value: &str) -> Option<(u64, u64)> {
    let (range, total) = value.strip_prefix("bytes ")?.split_once('/')?;
    let (start, _end) = range.split_once('-')?;
    Some((start.trim().parse().ok()?, total.trim().parse().ok()?))
}

/// `1 hour file`, `3 hour files`.
fn counted(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// Bytes in decimal units: `950 B`, `12.3 kB`, `4.5 MB`, `1.2 GB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["kB", "MB", "GB", "TB"];
    if bytes < 1_000 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1_000.0;
    let mut unit = 0;
    while value >= 1_000.0 && unit + 1 < UNITS.len() {
        value /= 1_000.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::archive::hours::parse_time;

    fn range(from: &str, to: &str) -> HourRange {
        HourRange::new(parse_time(from).unwrap(), parse_time(to).unwrap()).unwrap()
    }

    fn object(key: &str, size: u64) -> Object {
        Object {
            key: key.to_owned(),
            size,
        }
    }

    #[test]
    fn the_plan_adds_spill_over_hours_skips_complete_files_and_names_gaps() {
        let out = tempfile::tempdir().unwrap();
        let day = out.path().join("node_fills_by_block/hourly/20250727");
        std::fs::create_dir_all(&day).unwrap();
        // 22 is complete, 23 half there, 21 (a spill-over hour) missing from
        // the bucket; 2 and the misc key are not wanted.
        std::fs::write(day.join("22.lz4"), [0u8; 10]).unwrap();
        std::fs::write(day.join("23.lz4.part"), [0u8; 4]).unwrap();
        let listed = [
            object("node_fills_by_block/hourly/20250727/20.lz4", 5),
            object("node_fills_by_block/hourly/20250727/22.lz4", 10),
            object("node_fills_by_block/hourly/20250727/23.lz4", 12),
            object("node_fills_by_block/hourly/20250727/notes.txt", 1),
            object("node_fills_by_block/hourly/20250728/0.lz4", 7),
            object("node_fills_by_block/hourly/20250728/1.lz4", 8),
            object("node_fills_by_block/hourly/20250728/2.lz4", 9),
        ];
        let plan = Plan::new(
            Dataset::NodeFillsByBlock,
            range("2025-07-27T22:00:00Z", "2025-07-28T01:00:00Z"),
            &listed,
            out.path(),
        )
        .unwrap();
        let hour = |text: &str| Hour::containing(parse_time(text).unwrap());
        assert_eq!(plan.complete, [(hour("2025-07-27T22:00:00Z"), 10)]);
        assert_eq!(plan.missing, [hour("2025-07-27T21:00:00Z")]);
        let fetched: Vec<(String, u64, u64)> = plan
            .transfers
            .iter()
            .map(|t| (t.hour.to_string(), t.size, t.have))
            .collect();
        assert_eq!(
            fetched,
            [
                ("20250727/23".to_owned(), 12, 4),
                ("20250728/0".to_owned(), 7, 0),
                ("20250728/1".to_owned(), 8, 0),
            ]
        );
        assert_eq!(plan.bytes_to_transfer(), 8 + 7 + 8);
        assert_eq!(plan.transfers[0].path, day.join("23.lz4"));
        assert_eq!(plan.transfers[0].part, day.join("23.lz4.part"));
        assert_eq!(plan.hours_list(&plan.missing), "20250727/21 (spill-over)");
    }

    #[test]
    fn a_part_longer_than_the_object_starts_over_and_a_wrong_size_is_fetched_again() {
        let out = tempfile::tempdir().unwrap();
        let day = out.path().join("node_trades/hourly/20250401");
        std::fs::create_dir_all(&day).unwrap();
        std::fs::write(day.join("3.lz4.part"), [0u8; 50]).unwrap();
        std::fs::write(day.join("4.lz4"), [0u8; 3]).unwrap();
        let listed = [
            object("node_trades/hourly/20250401/3.lz4", 20),
            object("node_trades/hourly/20250401/4.lz4", 30),
        ];
        let plan = Plan::new(
            Dataset::NodeTrades,
            range("2025-04-01T04:00:00Z", "2025-04-01T04:30:00Z"),
            &listed,
            out.path(),
        )
        .unwrap();
        let haves: Vec<u64> = plan.transfers.iter().map(|t| t.have).collect();
        assert_eq!(haves, [0, 0]);
        assert_eq!(plan.bytes_to_transfer(), 50);
        assert_eq!(plan.missing.len(), 1, "hour 5, the spill-over after");
    }

    #[test]
    fn the_region_comes_from_the_flag_the_environment_the_bucket_or_the_profile() {
        let env: HashMap<&str, &str> = HashMap::new();
        let none = |name: &str| env.get(name).map(|v| (*v).to_owned());
        assert_eq!(
            region(None, "hl-mainnet-node-data", &none, Some("eu-west-1")).unwrap(),
            "ap-northeast-1"
        );
        assert_eq!(
            region(Some("us-west-2"), "hl-mainnet-node-data", &none, None).unwrap(),
            "us-west-2"
        );
        assert_eq!(
            region(None, "mine", &none, Some("eu-west-1")).unwrap(),
            "eu-west-1"
        );
        assert_eq!(
            region(None, "mine", &none, None),
            Err(ArchiveError::UnknownRegion {
                bucket: "mine".into()
            })
        );
        let env = HashMap::from([("AWS_DEFAULT_REGION", "eu-central-1")]);
        let default = |name: &str| env.get(name).map(|v| (*v).to_owned());
        assert_eq!(
            region(None, "hyperliquid-archive", &default, None).unwrap(),
            "eu-central-1"
        );
        let env = HashMap::from([
            ("AWS_DEFAULT_REGION", "eu-central-1"),
            ("AWS_REGION", "sa-east-1"),
        ]);
        let both = |name: &str| env.get(name).map(|v| (*v).to_owned());
        assert_eq!(region(None, "mine", &both, None).unwrap(), "sa-east-1");
    }

    #[test]
    fn content_ranges_and_sizes_read_as_people_read_them() {
        assert_eq!(content_range("bytes 100-199/200"), Some((100, 200)));
        assert_eq!(content_range("bytes */200"), None);
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(12_345), "12.3 kB");
        assert_eq!(human_bytes(37_000_000), "37.0 MB");
        assert_eq!(human_bytes(1_600_000_000), "1.6 GB");
        assert_eq!(common::duration_text(42.4), "42 s");
        assert_eq!(common::duration_text(185.0), "3 min 05 s");
        assert_eq!(common::duration_text(7_620.0), "2 h 07 min");
    }
}

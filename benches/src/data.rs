//! Data the harnesses read: files under a directory, read once into the page cache, and hours
//! of simulated fills compressed as the exchange's archive is (made once and reused).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, bail};
use feeds::Source;

/// Blocks per hour at mainnet pace (14.8 a second).
pub const BLOCKS_PER_HOUR: u64 = 53_280;

/// Every file under `dir` (recursively), sorted.
///
/// # Errors
/// A directory that cannot be listed.
pub fn files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
        for entry in std::fs::read_dir(dir).with_context(|| format!("list {}", dir.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                walk(&path, out)?;
            } else {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, &mut out)?;
    out.sort();
    Ok(out)
}

/// Reads every file under `dir` once (into the page cache).
///
/// # Errors
/// A file that cannot be read.
pub fn warm(dir: &Path) -> anyhow::Result<()> {
    for path in files(dir)? {
        let mut file = std::fs::File::open(&path)?;
        std::io::copy(&mut file, &mut std::io::sink())?;
    }
    Ok(())
}

/// Hours of simulated archive fills on disk.
#[derive(Debug, Clone)]
pub struct Hours {
    /// The archive directory (`node_fills_by_block/hourly/YYYYMMDD/H.lz4` under it).
    pub dir: PathBuf,
    /// Blocks in the hours.
    pub blocks: u64,
    /// Fills in them.
    pub fills: u64,
    /// Bytes of fill lines, decompressed.
    pub decompressed: u64,
    /// Bytes of the `.lz4` files.
    pub compressed: u64,
    /// Seconds it took to make them (`None`: reused).
    pub generated_s: Option<f64>,
}

/// Makes (or reuses, under `target/bench-data/`) `hours` hours of simulated mainnet-scale
/// fills (`SimConfig::mainnet(seed, scale)`, only the fills rendered), cut into hour files by
/// block time and compressed with the `lz4` tool as the exchange's archive is.
///
/// # Errors
/// File errors, or the `lz4` tool missing or failing.
pub fn archive_hours(seed: u64, scale: f64, hours: u64) -> anyhow::Result<Hours> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/bench-data")
        .join(format!("archive-fills-seed{seed}-scale{scale}-{hours}h"));
    let done = root.join("done.json");
    if let Ok(text) = std::fs::read_to_string(&done) {
        let v: serde_json::Value = serde_json::from_str(&text)?;
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        return Ok(Hours {
            dir: root.clone(),
            blocks: n("blocks"),
            fills: n("fills"),
            decompressed: n("decompressed"),
            compressed: n("compressed"),
            generated_s: None,
        });
    }
    let _ = std::fs::remove_dir_all(&root);
    let started = Instant::now();
    let mut cfg = fixtures::SimConfig::mainnet(seed, scale);
    cfg.snapshot_every = None;
    let mut sim = fixtures::Simulator::new(&cfg);
    let blocks = hours * BLOCKS_PER_HOUR;
    let (mut fills, mut decompressed) = (0u64, 0u64);
    let mut current: Option<(PathBuf, std::io::BufWriter<std::fs::File>)> = None;
    let mut line = Vec::with_capacity(64 * 1024);
    let mut plain_files = Vec::new();
    eprintln!("simulating {blocks} blocks at scale {scale} (fills only)…");
    for n in 0..blocks {
        let block = sim.next_block();
        fills += block.fills.len() as u64;
        line.clear();
        fixtures::by_block_line(&block, Source::Fills, &mut line);
        decompressed += line.len() as u64;
        let iso = feeds::time::format_iso8601_ms(block.time_ms());
        let date: String = iso[..10].chars().filter(char::is_ascii_digit).collect();
        let hour: u32 = iso[11..13].parse()?;
        let path = root
            .join("node_fills_by_block/hourly")
            .join(&date)
            .join(hour.to_string());
        if current.as_ref().is_none_or(|(p, _)| *p != path) {
            if let Some((_, mut w)) = current.take() {
                std::io::Write::flush(&mut w)?;
            }
            std::fs::create_dir_all(path.parent().context("hour dir")?)?;
            let file = std::fs::File::create(&path)?;
            plain_files.push(path.clone());
            current = Some((path, std::io::BufWriter::with_capacity(1 << 20, file)));
        }
        if let Some((_, w)) = current.as_mut() {
            std::io::Write::write_all(w, &line)?;
        }
        if n % 200_000 == 0 && n > 0 {
            eprintln!("  {n} blocks, {:.0} s", started.elapsed().as_secs_f64());
        }
    }
    if let Some((_, mut w)) = current.take() {
        std::io::Write::flush(&mut w)?;
    }
    let mut compressed = 0u64;
    for plain in &plain_files {
        let packed = plain.with_file_name(format!(
            "{}.lz4",
            plain.file_name().and_then(|n| n.to_str()).unwrap_or("0")
        ));
        let status = Command::new("lz4")
            .args(["-q", "-f"])
            .arg(plain)
            .arg(&packed)
            .status()
            .context(
                "the `lz4` tool (Debian package lz4) compresses the hours as the archive is",
            )?;
        if !status.success() {
            bail!("lz4 failed on {}", plain.display());
        }
        std::fs::remove_file(plain)?;
        compressed += std::fs::metadata(&packed)?.len();
    }
    std::fs::write(
        &done,
        serde_json::json!({
            "blocks": blocks, "fills": fills, "decompressed": decompressed, "compressed": compressed,
        })
        .to_string(),
    )?;
    Ok(Hours {
        dir: root,
        blocks,
        fills,
        decompressed,
        compressed,
        generated_s: Some(started.elapsed().as_secs_f64()),
    })
}

/// The `.lz4` hour files under `dir`, sorted.
///
/// # Errors
/// A directory that cannot be listed.
pub fn hour_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    Ok(files(dir)?
        .into_iter()
        .filter(|path| path.extension().is_some_and(|e| e == "lz4"))
        .collect())
}

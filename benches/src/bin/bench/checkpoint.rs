//! Engine checkpoints: loading the full book from a checkpoint beside loading the same book
//! from the node's JSON L4 snapshot, in the same run, and what taking a checkpoint costs the
//! engine thread (and the writer thread beside it).
//!
//! `cargo run --release -p benches -- checkpoint [--scale X] [--blocks N] [--runs R]
//! [--seed S] [--no-write]`
//!
//! Two books:
//!
//! - the real mainnet capture `shared/data/real/btc-985148182`: the node's L4 snapshot of every
//!   BTC order at 985148181 (51,351 orders, 19 MB), the largest real snapshot there; its
//!   checkpoint is of the market loaded from it (the same book);
//! - a mainnet-size book: the simulator (`SimConfig::mainnet(seed, scale)`, by-block layout)
//!   writes its starting snapshot, `--blocks` blocks (default 200) and a second snapshot
//!   after them. The market folds the blocks from the first snapshot with every part (books,
//!   trades, fills, TP/SL, candles), its books are checked equal to the second snapshot's, and
//!   the checkpoint is of that market: the JSON reference is the second snapshot, the same
//!   book.
//!
//! For each, `--runs` times (default 5) interleaved, from the page cache:
//!
//! - JSON: `fs::read` of the snapshot, `engine::snapshot::parse`, `Market::from_snapshot`;
//! - checkpoint: `engine::checkpoint::load` (map the file, checksum, rkyv validation, rebuild
//!   the market), and apart, on the file's bytes in memory, the checksum and validation alone
//!   (`checkpoint::file::validate`) and the whole decode (the rebuild is the difference);
//! - taking one: `Checkpointer::take_now` (what the engine thread pays: each book copied and
//!   serialised in turn, the bytes handed to the writer thread), the writer's writing (until the
//!   header) and its fsync + rename, timed on its thread; beside it `engine::checkpoint::capture`,
//!   the copy of the whole state alone.
//!
//! Medians with the range in brackets. Prints the tables and rewrites the `checkpoint` section
//! of `benches/BENCHMARKS.md`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use benches::median_duration as median;
use engine::checkpoint::{self, CheckpointPolicy, Checkpointer, capture};
use engine::market::{Market, Needs};
use engine::source::{BlockSource, SourceOptions};
use feeds::Feed;

/// The brief's target for loading the mainnet-size book from a checkpoint.
const TARGET_MS: f64 = 200.0;

#[derive(Debug, clap::Args)]
#[command(
    about = "Loading the full book from a checkpoint beside its JSON L4 snapshot",
    args_override_self = true
)]
pub(crate) struct Args {
    /// Activity and book depth of the simulated book as a fraction of mainnet.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Blocks the simulator writes between its two snapshots.
    #[arg(long, default_value_t = 200)]
    blocks: u64,
    /// Interleaved runs of each measure (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Simulator seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print only; leave `benches/BENCHMARKS.md` as it is.
    #[arg(long)]
    no_write: bool,
}

/// Timings of one book.
struct Book {
    name: String,
    orders: usize,
    coins: usize,
    json_mb: f64,
    checkpoint_mb: f64,
    tracked_triggers: usize,
    live_candles: usize,
    json_load: Vec<Duration>,
    checkpoint_load: Vec<Duration>,
    validate: Vec<Duration>,
    decode: Vec<Duration>,
    capture: Vec<Duration>,
    take: Vec<Duration>,
    serialize: Vec<Duration>,
    write: Vec<Duration>,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    if !(args.scale.is_finite() && args.scale > 0.0) {
        bail!("--scale must be positive");
    }
    if args.runs == 0 || args.blocks == 0 {
        bail!("--runs and --blocks must be at least 1");
    }
    let machine = benches::Machine::detect();
    let command = benches::cargo_command();
    let load_at_start = benches::sys::loadavg().unwrap_or_else(|| "unknown".to_owned());
    let work = tempfile::Builder::new()
        .prefix("l1gate-checkpoint-")
        .tempdir()?;

    let real_snapshot = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/real/btc-985148182/l4_snapshot_985148181.json");
    let real = if real_snapshot.is_file() {
        let market = load_json(&real_snapshot)?;
        Some(measure(
            "real BTC, node snapshot at 985148181",
            &market,
            &real_snapshot,
            &work.path().join("real"),
            args.runs,
        )?)
    } else {
        eprintln!(
            "checkpoint: {} not found; the real book is skipped",
            real_snapshot.display()
        );
        None
    };

    let (market, snapshot, sim_line) = simulated(args, &work.path().join("node"))?;
    let sim = measure(
        &format!("simulator, mainnet scale {}", args.scale),
        &market,
        &snapshot,
        &work.path().join("sim"),
        args.runs,
    )?;
    drop(market);

    let books: Vec<Book> = real.into_iter().chain([sim]).collect();
    let load = (
        load_at_start,
        benches::sys::loadavg().unwrap_or_else(|| "unknown".to_owned()),
    );
    let body = render(args, &machine, &command, &load, &sim_line, &books);
    println!("{body}");
    if !args.no_write {
        let path = benches::benchmarks_md();
        benches::write_section(&path, "checkpoint", &body)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!(
            "checkpoint: wrote the checkpoint section of {}",
            path.display()
        );
    }
    if let Some(full) = books.last() {
        benches::summary::emit(&Summary {
            orders: full.orders as u64,
            coins: full.coins as u64,
            json_mb: full.json_mb,
            checkpoint_mb: full.checkpoint_mb,
            json_load_ms: ms(median(&full.json_load)),
            checkpoint_load_ms: ms(median(&full.checkpoint_load)),
            take_ms: ms(median(&full.take)),
        })?;
    }
    Ok(())
}

/// The headline figures the `report` binary reads (see `benches::summary`): the full book's.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Summary {
    /// Resting orders in the book.
    pub(crate) orders: u64,
    /// Coins in the book.
    pub(crate) coins: u64,
    /// The node's JSON snapshot of the book, MB.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) json_mb: f64,
    /// The engine checkpoint of the same book, MB.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) checkpoint_mb: f64,
    /// Median read + parse + `Market::from_snapshot` of the JSON snapshot, ms.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) json_load_ms: f64,
    /// Median load of the checkpoint, ms.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) checkpoint_load_ms: f64,
    /// Median cost of taking one to the engine thread, ms.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) take_ms: f64,
}

/// Read, parse and load a node snapshot into a market with every part.
fn load_json(path: &Path) -> anyhow::Result<Market> {
    let bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    let snapshot =
        engine::snapshot::parse(&bytes).with_context(|| format!("parse {}", path.display()))?;
    Ok(Market::from_snapshot(snapshot, Needs::ALL))
}

/// Generates the simulator's book and folds it; the market, the snapshot of the same book,
/// and a line describing the data.
fn simulated(args: &Args, data: &Path) -> anyhow::Result<(Market, PathBuf, String)> {
    let mut cfg = fixtures::SimConfig::mainnet(args.seed, args.scale);
    cfg.mode = fixtures::OutputMode::ByBlock;
    cfg.snapshot_every = Some(args.blocks);
    let run = fixtures::RunOptions {
        blocks: Some(args.blocks),
        no_replica_cmds: true,
        ..fixtures::RunOptions::default()
    };
    eprintln!(
        "checkpoint: generating the simulator's book and {} blocks",
        args.blocks
    );
    let summary = fixtures::generate(&cfg, data, &run, &mut |_| {})?;
    let [first, last] = summary.snapshots.as_slice() else {
        bail!(
            "the simulator wrote {} snapshots, not 2",
            summary.snapshots.len()
        );
    };
    let mut market = load_json(first)?;
    let feeds = Needs::ALL
        .sources()
        .into_iter()
        .map(|source| Feed::open(data, source))
        .collect::<Result<Vec<_>, _>>()?;
    let start = market.height().map_or(0, |h| h + 1);
    let mut source = BlockSource::new(feeds, SourceOptions::from_block(start))?;
    loop {
        let at_end = source.read(0)? == 0;
        while let Some(block) = source.next_block(at_end) {
            market.apply(&block);
        }
        if at_end {
            break;
        }
    }
    let truth = engine::snapshot::parse(&std::fs::read(last)?)?;
    if market.height() != Some(truth.height) || market.books() != &truth.books {
        bail!(
            "the folded books differ from the simulator's snapshot at {}",
            truth.height
        );
    }
    let line = format!(
        "simulator `SimConfig::mainnet(seed {}, scale {})`, by-block: its starting snapshot, {} blocks ({} MB of node lines) folded with every part (books, trades, fills, TP/SL, candles), and its snapshot after them (books checked equal to the fold's)",
        args.seed,
        args.scale,
        summary.blocks,
        summary.bytes / 1_000_000
    );
    Ok((market, last.clone(), line))
}

fn measure(
    name: &str,
    market: &Market,
    snapshot: &Path,
    dir: &Path,
    runs: usize,
) -> anyhow::Result<Book> {
    eprintln!("checkpoint: {name}: writing the checkpoint");
    let mut checkpointer = Checkpointer::new(
        dir,
        CheckpointPolicy {
            every_blocks: 0,
            every_ms: 0,
            keep: 1,
        },
        market.height(),
        0,
    );
    let mut book = Book {
        name: name.to_owned(),
        orders: market.books().order_count(),
        coins: market.books().len(),
        json_mb: std::fs::metadata(snapshot)?.len() as f64 / 1e6,
        checkpoint_mb: 0.0,
        tracked_triggers: market.tpsl().orders().count(),
        live_candles: market.candles().live_candles().count(),
        json_load: Vec::new(),
        checkpoint_load: Vec::new(),
        validate: Vec::new(),
        decode: Vec::new(),
        capture: Vec::new(),
        take: Vec::new(),
        serialize: Vec::new(),
        write: Vec::new(),
    };
    let mut path = None;
    for _ in 0..runs {
        let started = Instant::now();
        let state = capture(market);
        book.capture.push(started.elapsed());
        drop(state);
        let progress = checkpointer.take_now(market, 0);
        if let Some(taken) = progress.taken {
            book.take.push(taken.cost);
        }
        let finished = checkpointer
            .finish()
            .context("no checkpoint was being written")?
            .context("writing the checkpoint")?;
        book.serialize.push(finished.written.serialize);
        book.write.push(finished.written.write);
        book.checkpoint_mb = finished.written.bytes as f64 / 1e6;
        path = Some(finished.written.path);
    }
    let path = path.context("no checkpoint written")?;
    // The file's bytes, aligned as a mapping is (encoding is deterministic).
    let aligned = checkpoint::file::encode(&capture(market))?;
    if aligned[..] != std::fs::read(&path)?[..] {
        bail!("{name}: the checkpoint written differs from the state's encoding");
    }
    eprintln!("checkpoint: {name}: loading {runs} times each way");
    for run in 0..runs {
        let started = Instant::now();
        let from_json = load_json(snapshot)?;
        book.json_load.push(started.elapsed());
        let started = Instant::now();
        let loaded = checkpoint::load(&path, Needs::ALL)?;
        book.checkpoint_load.push(started.elapsed());
        if run == 0
            && (loaded.market.books() != from_json.books()
                || loaded.market.books() != market.books())
        {
            bail!("{name}: the checkpoint's books differ from the snapshot's");
        }
        drop((from_json, loaded));
        let started = Instant::now();
        checkpoint::file::validate(&aligned, &path)?;
        book.validate.push(started.elapsed());
        let started = Instant::now();
        let decoded = checkpoint::file::decode(&aligned, Needs::ALL, &path)?;
        book.decode.push(started.elapsed());
        drop(decoded);
    }
    Ok(book)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn spread(samples: &[Duration]) -> String {
    let min = samples.iter().min().copied().unwrap_or_default();
    let max = samples.iter().max().copied().unwrap_or_default();
    format!("{:.1} [{:.1}–{:.1}]", ms(median(samples)), ms(min), ms(max))
}

fn render(
    args: &Args,
    machine: &benches::Machine,
    command: &str,
    load: &(String, String),
    sim_line: &str,
    books: &[Book],
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## Engine checkpoints: load and write (`checkpoint`)\n");
    s.push_str(&machine.markdown(command));
    let _ = writeln!(
        s,
        "- Load average (1/5/15 min): {} at the start, {} at the end (every process of the machine; other builds share it)",
        load.0, load.1
    );
    let _ = writeln!(
        s,
        "- Data: the real mainnet capture `btc-985148182` (the node's L4 snapshot of every BTC order at 985148181, the largest real snapshot in `shared/data/real/`), and a mainnet-size book: {sim_line}. Each checkpoint holds the same book as the JSON snapshot it is compared with."
    );
    let _ = writeln!(
        s,
        "- {} runs of each, interleaved, files in the page cache; median [min–max] in ms. MB = 10^6 bytes. JSON load = `fs::read` + `engine::snapshot::parse` + `Market::from_snapshot`; checkpoint load = `engine::checkpoint::load`: map the file, CRC-32 of the body, rkyv validation (`bytecheck`), rebuild the market (books level by level, TP/SL, candles, counts).\n",
        args.runs
    );
    let _ = writeln!(
        s,
        "| book | resting orders | coins | JSON MB | checkpoint MB | JSON load ms | checkpoint load ms | × faster |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for b in books {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1} | {:.1} | {} | {} | {:.1}× |",
            b.name,
            b.orders,
            b.coins,
            b.json_mb,
            b.checkpoint_mb,
            spread(&b.json_load),
            spread(&b.checkpoint_load),
            ms(median(&b.json_load)) / ms(median(&b.checkpoint_load)),
        );
    }
    let _ = writeln!(
        s,
        "\nWhere a checkpoint load goes (the file's bytes already in memory): checksum + validation = `checkpoint::file::validate`; rebuild = `checkpoint::file::decode` (which validates again) less that.\n"
    );
    let _ = writeln!(
        s,
        "| book | checksum + validation ms | decode ms | rebuild ms (difference) | TP/SL orders | live candles |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|");
    for b in books {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1} | {} | {} |",
            b.name,
            spread(&b.validate),
            spread(&b.decode),
            ms(median(&b.decode)) - ms(median(&b.validate)),
            b.tracked_triggers,
            b.live_candles,
        );
    }
    let _ = writeln!(
        s,
        "\nTaking a checkpoint (`Checkpointer::take_now`): the engine thread copies each book into the archived types and serialises it (rkyv) at once, handing the bytes to the writer thread in 1 MiB pieces (it waits when four are waiting), so no copy of the whole state is held; the writer thread writes them, then fsyncs and renames. Beside it, the copy of the whole state alone (`engine::checkpoint::capture`), which a checkpoint no longer holds.\n"
    );
    let _ = writeln!(
        s,
        "| book | whole copy alone (`capture`) ms | engine thread: copy + serialise, book by book ms | writer: pieces written ms | writer: fsync + rename ms |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|");
    for b in books {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            b.name,
            spread(&b.capture),
            spread(&b.take),
            spread(&b.serialize),
            spread(&b.write),
        );
    }
    if let Some(full) = books.last() {
        let load = ms(median(&full.checkpoint_load));
        let _ = writeln!(
            s,
            "\nTarget: the mainnet-size book ({} orders) loads from a checkpoint in ≤ {TARGET_MS:.0} ms. This run: {load:.1} ms — {} (JSON snapshot of the same book: {:.1} ms). Taking a checkpoint cost the engine thread {:.1} ms, once per checkpoint (every {} blocks or {} s by default).",
            full.orders,
            if load <= TARGET_MS { "met" } else { "not met" },
            ms(median(&full.json_load)),
            ms(median(&full.take)),
            CheckpointPolicy::DEFAULT_EVERY_BLOCKS,
            CheckpointPolicy::DEFAULT_EVERY_MS / 1000,
        );
    }
    s
}

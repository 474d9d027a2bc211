//! Engine checkpoints: a market archived and restored is the same market —
//! the same state, and the same frames for every view from the block after
//! it as a fold that never stopped, over the real mainnet captures and the
//! simulator's output in both layouts; a damaged, truncated or
//! other-version checkpoint is refused with an error naming the file, and
//! the next older one (or the snapshot) is used; no bytes make loading
//! panic; the format is pinned.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use engine::checkpoint::file::{self, HEADER_LEN};
use engine::checkpoint::state::{
    BookState, CandleState, CandlesState, CheckpointState, CoinSeriesState, DecimalState,
    LevelState, OrderState, PositionState, SeriesState, TpslState, TradesState,
};
use engine::checkpoint::{
    Bounds, CheckpointError, CheckpointPolicy, Checkpointer, FORMAT_VERSION, PassedOver, capture,
};
use engine::market::{Market, Needs};
use engine::replay::{ReplayOptions, ViewKind, run};
use engine::snapshot;
use engine::source::{BlockSource, SourceOptions};
use feeds::{Feed, Snapshots};
use fixtures::{OutputMode, RunOptions, SimConfig};
use proptest::prelude::*;
use rstest::rstest;
use sha2::{Digest as _, Sha256};

use crate::common::real;

/// Folds the node files of `dir` with every part from `snapshot` (or from
/// empty books) through block `through`, comparing the books with any newer
/// snapshot on the way, as `l1gate replay` does.
fn fold_through(dir: &Path, snapshot: Option<&Path>, through: u64) -> Market {
    let needs = Needs::ALL;
    let feeds = feeds_of(dir);
    let mut market = match snapshot {
        Some(path) => Market::from_snapshot(
            snapshot::parse(&std::fs::read(path).unwrap()).unwrap(),
            needs,
        ),
        None => Market::new(needs),
    };
    let start = market.height().map_or(0, |h| h + 1);
    let listed = Snapshots::open_at_rest(dir).unwrap();
    let later: Vec<_> = listed
        .list()
        .into_iter()
        .filter(|file| file.height >= start)
        .collect();
    let mut source = BlockSource::new(
        feeds,
        SourceOptions {
            to_block: Some(through),
            ..SourceOptions::from_block(start)
        },
    )
    .unwrap();
    each_block(&mut source, |block| {
        if market.apply(block).skipped {
            return;
        }
        if let Some(file) = later.iter().find(|file| file.height == block.number) {
            let newer = snapshot::parse(&listed.read(file).unwrap()).unwrap();
            market.check_snapshot(&newer).unwrap();
        }
    });
    assert_eq!(market.height(), Some(through), "the files reach {through}");
    market
}

/// Every feed the whole market reads, over `dir`.
fn feeds_of(dir: &Path) -> Vec<Feed> {
    Needs::ALL
        .sources()
        .into_iter()
        .map(|source| Feed::open(dir, source).unwrap())
        .collect()
}

/// Hands every block `source` yields to `each`, the last ones included.
fn each_block(source: &mut BlockSource, mut each: impl FnMut(&engine::block::Block)) {
    loop {
        let at_end = source.read(0).unwrap() == 0;
        while let Some(block) = source.next_block(at_end) {
            each(&block);
        }
        if at_end {
            break;
        }
    }
}

/// A data set, the snapshot its folds start from, and the block the
/// checkpoint is taken after.
struct Case {
    dir: PathBuf,
    snapshot: Option<PathBuf>,
    at: u64,
    checkpoint: PathBuf,
}

/// The simulator's small profile, seed 11, 300 blocks, in `mode`.
fn simulated(mode: OutputMode) -> PathBuf {
    let name = match mode {
        OutputMode::Streaming => "checkpoint-sim-streaming",
        _ => "checkpoint-sim-by-block",
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = SimConfig::small(11);
    config.mode = mode;
    let run = RunOptions {
        blocks: Some(300),
        no_replica_cmds: true,
        ..RunOptions::default()
    };
    fixtures::generate(&config, &dir, &run, &mut |_| {}).unwrap();
    dir
}

fn first_block(dir: &Path) -> u64 {
    BlockSource::new(feeds_of(dir), SourceOptions::from_block(0))
        .unwrap()
        .first_block()
        .unwrap()
        .unwrap()
}

/// Folds `dir` through `first + offset` from its earliest snapshot and
/// writes a checkpoint of that market under `name`.
fn case(name: &str, dir: PathBuf, offset: u64) -> Case {
    let snapshot = Snapshots::open_at_rest(&dir)
        .unwrap()
        .list()
        .first()
        .map(|file| file.path.clone());
    let at = first_block(&dir) + offset;
    let market = fold_through(&dir, snapshot.as_deref(), at);
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("checkpoints-{name}"));
    let _ = std::fs::remove_dir_all(&out);
    let written = file::write(&out, &capture(&market)).unwrap();
    assert_eq!(written.block_number, at);
    Case {
        dir,
        snapshot,
        at,
        checkpoint: written.path,
    }
}

fn real_btc() -> &'static Case {
    static CASE: OnceLock<Case> = OnceLock::new();
    CASE.get_or_init(|| case("real-btc", real("btc-985148182"), 20))
}

fn real_unsnapshotted() -> &'static Case {
    static CASE: OnceLock<Case> = OnceLock::new();
    CASE.get_or_init(|| case("real-unsnapshotted", real("btc-978995377"), 15))
}

fn sim_by_block() -> &'static Case {
    static CASE: OnceLock<Case> = OnceLock::new();
    CASE.get_or_init(|| case("sim-by-block", simulated(OutputMode::ByBlock), 170))
}

fn sim_streaming() -> &'static Case {
    static CASE: OnceLock<Case> = OnceLock::new();
    CASE.get_or_init(|| case("sim-streaming", simulated(OutputMode::Streaming), 140))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Data {
    RealBtc,
    RealUnsnapshotted,
    Sim,
    SimStreaming,
}

impl Data {
    fn case(self) -> &'static Case {
        match self {
            Data::RealBtc => real_btc(),
            Data::RealUnsnapshotted => real_unsnapshotted(),
            Data::Sim => sim_by_block(),
            Data::SimStreaming => sim_streaming(),
        }
    }
}

const USER: &str = "0x17C3C8FDBCB7D1B240CE08965E09B1FC91CBA868";
const SIM_COINS: [&str; 6] = ["BTC", "ETH", "@107", "xyz:NVDA", "#1890", "PURR/USDC"];

/// A replay selection: coins, then the view's extras.
fn select(view: ViewKind, coins: &[&str], tune: impl FnOnce(&mut ReplayOptions)) -> Selected {
    let mut opts = ReplayOptions::new(PathBuf::new(), view);
    opts.selection.coins = coins.iter().map(|&c| c.to_owned()).collect();
    tune(&mut opts);
    Selected(opts)
}

#[derive(Debug)]
struct Selected(ReplayOptions);

fn plain(view: ViewKind, coins: &[&str]) -> Selected {
    select(view, coins, |_| {})
}

fn aggregated(view: ViewKind, coins: &[&str]) -> Selected {
    select(view, coins, |opts| {
        opts.selection.n_levels = Some(0);
        opts.selection.n_sig_figs = Some(5);
        opts.selection.mantissa = Some(2);
        opts.selection.strict = true;
    })
}

fn candles(coins: &[&str], interval: &str) -> Selected {
    select(ViewKind::Candles, coins, |opts| {
        opts.selection.interval = Some(interval.to_owned());
    })
}

fn of_user(view: ViewKind, coins: &[&str]) -> Selected {
    select(view, coins, |opts| {
        opts.selection.users = vec![USER.to_owned()];
    })
}

fn replay(opts: &ReplayOptions) -> (Vec<u8>, engine::replay::ReplaySummary) {
    let mut out = Vec::new();
    let summary = run(opts, &mut out, &mut |_| {}).unwrap();
    (out, summary)
}

#[rstest]
#[case::real_l2book(Data::RealBtc, plain(ViewKind::L2Book, &["BTC"]))]
#[case::real_l2book_aggregated(Data::RealBtc, aggregated(ViewKind::L2Book, &["BTC"]))]
#[case::real_bbo(Data::RealBtc, plain(ViewKind::Bbo, &["BTC"]))]
#[case::real_l2diff(Data::RealBtc, aggregated(ViewKind::L2Diff, &["BTC"]))]
#[case::real_l4book(Data::RealBtc, plain(ViewKind::L4Book, &["BTC"]))]
#[case::real_l4updates(Data::RealBtc, plain(ViewKind::L4Updates, &["BTC"]))]
#[case::real_tpsl(Data::RealBtc, plain(ViewKind::Tpsl, &[]))]
#[case::real_trades(Data::RealBtc, plain(ViewKind::Trades, &["BTC"]))]
#[case::real_fills(Data::RealBtc, plain(ViewKind::Fills, &[]))]
#[case::real_candles(Data::RealBtc, candles(&["BTC"], "1s"))]
#[case::real_mids(Data::RealBtc, plain(ViewKind::Mids, &[]))]
#[case::real_user_fills(Data::RealBtc, of_user(ViewKind::Fills, &[]))]
#[case::real_user_l4updates(Data::RealBtc, of_user(ViewKind::L4Updates, &["BTC"]))]
#[case::unsnapshotted_bbo(Data::RealUnsnapshotted, plain(ViewKind::Bbo, &["BTC"]))]
#[case::unsnapshotted_l4updates(Data::RealUnsnapshotted, plain(ViewKind::L4Updates, &[]))]
#[case::unsnapshotted_tpsl(Data::RealUnsnapshotted, plain(ViewKind::Tpsl, &["BTC"]))]
#[case::unsnapshotted_candles(Data::RealUnsnapshotted, candles(&["BTC"], "1m"))]
#[case::sim_l2book(Data::Sim, plain(ViewKind::L2Book, &SIM_COINS))]
#[case::sim_bbo(Data::Sim, plain(ViewKind::Bbo, &SIM_COINS))]
#[case::sim_l2diff(Data::Sim, plain(ViewKind::L2Diff, &SIM_COINS))]
#[case::sim_l4book(Data::Sim, plain(ViewKind::L4Book, &["ETH", "#1890"]))]
#[case::sim_l4updates(Data::Sim, plain(ViewKind::L4Updates, &[]))]
#[case::sim_tpsl(Data::Sim, plain(ViewKind::Tpsl, &[]))]
#[case::sim_trades(Data::Sim, plain(ViewKind::Trades, &SIM_COINS))]
#[case::sim_fills(Data::Sim, plain(ViewKind::Fills, &[]))]
#[case::sim_candles_1s(Data::Sim, candles(&SIM_COINS, "1s"))]
#[case::sim_candles_1m(Data::Sim, candles(&["BTC", "ETH"], "1m"))]
#[case::sim_mids(Data::Sim, plain(ViewKind::Mids, &[]))]
#[case::streaming_bbo(Data::SimStreaming, plain(ViewKind::Bbo, &SIM_COINS))]
#[case::streaming_l4updates(Data::SimStreaming, plain(ViewKind::L4Updates, &[]))]
#[case::streaming_tpsl(Data::SimStreaming, plain(ViewKind::Tpsl, &[]))]
#[case::streaming_candles(Data::SimStreaming, candles(&["BTC", "ETH"], "1s"))]
fn resuming_from_a_checkpoint_gives_the_frames_of_an_uninterrupted_fold(
    #[case] data: Data,
    #[case] selected: Selected,
) {
    let case = data.case();
    let mut uninterrupted = selected.0.clone();
    uninterrupted.data_dir.clone_from(&case.dir);
    uninterrupted.snapshot.clone_from(&case.snapshot);
    uninterrupted.from_block = Some(case.at + 1);
    let mut resumed = selected.0;
    resumed.data_dir.clone_from(&case.dir);
    resumed.checkpoint = Some(case.checkpoint.clone());
    let (expected, whole) = replay(&uninterrupted);
    let (actual, summary) = replay(&resumed);
    assert_eq!(summary.checkpoint_block, Some(case.at));
    assert_eq!(summary.first_block, Some(case.at + 1));
    assert_eq!(summary.first_block, whole.first_block);
    assert_eq!(summary.last_block, whole.last_block);
    assert!(whole.frames > 0, "{whole}");
    assert_eq!(summary.frames, whole.frames);
    if actual != expected {
        let lines = |bytes: &[u8]| -> Vec<String> {
            String::from_utf8_lossy(bytes)
                .lines()
                .map(str::to_owned)
                .collect()
        };
        let (a, e) = (lines(&actual), lines(&expected));
        let at = a
            .iter()
            .zip(&e)
            .position(|(a, e)| a != e)
            .unwrap_or(a.len().min(e.len()));
        panic!(
            "frames differ at line {at}\n resumed:       {}\n uninterrupted: {}",
            a.get(at).map_or("(none)", String::as_str),
            e.get(at).map_or("(none)", String::as_str),
        );
    }
}

#[rstest]
#[case::real(Data::RealBtc)]
#[case::unsnapshotted(Data::RealUnsnapshotted)]
#[case::sim(Data::Sim)]
#[case::streaming(Data::SimStreaming)]
fn a_restored_market_captures_to_the_same_state_and_bytes(#[case] data: Data) {
    let case = data.case();
    let bytes = std::fs::read(&case.checkpoint).unwrap();
    let loaded = file::load(&case.checkpoint, Needs::ALL).unwrap();
    assert_eq!(loaded.block_number, case.at);
    assert_eq!(loaded.bytes, bytes.len() as u64);
    let again = capture(&loaded.market);
    assert_eq!(again.block_number(), case.at);
    let encoded = file::encode(&again).unwrap();
    assert!(
        encoded[..] == bytes[..],
        "the same state archives to the same bytes"
    );
    // Field by field too: the archive deserialises to what was captured.
    let (_, archived) = file::validate(&bytes, &case.checkpoint).unwrap();
    let state: CheckpointState =
        rkyv::deserialize::<CheckpointState, rkyv::rancor::Error>(archived).unwrap();
    assert_eq!(state, again);
    // And the market itself: books, TP/SL, candles, trade counts.
    let original = fold_through(&case.dir, case.snapshot.as_deref(), case.at);
    assert_eq!(loaded.market.books(), original.books());
    assert_eq!(loaded.market.position(), original.position());
    assert_eq!(loaded.market.universe(), original.universe());
    assert_eq!(loaded.market.unknown_ids(), original.unknown_ids());
    assert_eq!(loaded.market.trades().counts(), original.trades().counts());
    let orders = |market: &Market| {
        market
            .tpsl()
            .orders()
            .map(|o| o.order())
            .collect::<Vec<_>>()
    };
    assert_eq!(orders(&loaded.market), orders(&original));
    let live = |market: &Market| market.candles().live_candles().cloned().collect::<Vec<_>>();
    assert_eq!(live(&loaded.market), live(&original));
    assert_eq!(capture(&original), again);
}

#[test]
fn the_real_btc_checkpoint_holds_the_whole_book_and_history() {
    let case = real_btc();
    let loaded = file::load(&case.checkpoint, Needs::ALL).unwrap();
    let state = capture(&loaded.market);
    // 51,351 orders in the snapshot at 985148181, moved by 20 blocks.
    assert!(state.order_count() > 50_000, "{}", state.order_count());
    assert_eq!(state.books.len(), 1);
    assert!(state.texts.len() > 5_000, "owners are stored once each");
    assert!(
        state.books[0]
            .orders
            .iter()
            .any(|o| o.cloid != u32::MAX || o.flags & 8 != 0),
        "client order ids survive"
    );
    assert!(!state.trades.counts.is_empty());
}

// ---------------------------------------------------------------------------
// Refusals and the fallback
// ---------------------------------------------------------------------------

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("checkpoint-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The sim checkpoint's bytes (a few hundred KB).
fn sim_bytes() -> Vec<u8> {
    std::fs::read(&sim_by_block().checkpoint).unwrap()
}

/// Rewrites the body's checksum (and length) so that damage reaches rkyv's
/// validation and the state's rules.
fn reseal(bytes: &mut [u8]) {
    if bytes.len() < HEADER_LEN {
        return;
    }
    let body_len = (bytes.len() - HEADER_LEN) as u64;
    bytes[32..40].copy_from_slice(&body_len.to_le_bytes());
    let crc = crc32fast::hash(&bytes[HEADER_LEN..]);
    bytes[40..44].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn damaged_truncated_and_other_version_checkpoints_are_refused_naming_the_file() {
    let dir = scratch("refused");
    let good = sim_bytes();
    let path = dir.join(file::file_name(sim_by_block().at));
    let load = |bytes: &[u8]| {
        std::fs::write(&path, bytes).unwrap();
        file::load(&path, Needs::ALL).map(|_| ()).unwrap_err()
    };
    let named = |error: &CheckpointError| {
        let text = error.to_string();
        assert!(text.contains(&*path.to_string_lossy()), "{text}");
        text
    };

    let mut flipped = good.clone();
    let middle = HEADER_LEN + (good.len() - HEADER_LEN) / 2;
    flipped[middle] ^= 0x10;
    let error = load(&flipped);
    assert_eq!(error, CheckpointError::Checksum { path: path.clone() });
    assert!(named(&error).contains("damaged: checksum mismatch"));

    let error = load(&good[..good.len() - 100]);
    assert!(matches!(error, CheckpointError::Length { .. }), "{error}");
    assert!(named(&error).contains("truncated"));
    let error = load(&good[..HEADER_LEN / 2]);
    assert!(matches!(error, CheckpointError::Length { .. }), "{error}");
    let error = load(&[]);
    assert!(
        matches!(error, CheckpointError::NotACheckpoint { .. }),
        "{error}"
    );

    let mut older = good.clone();
    older[8..12].copy_from_slice(&(FORMAT_VERSION - 1).to_le_bytes());
    let error = load(&older);
    assert_eq!(
        error,
        CheckpointError::Version {
            path: path.clone(),
            found: FORMAT_VERSION - 1,
            supported: FORMAT_VERSION
        }
    );
    assert!(named(&error).contains(&format!("format version {}", FORMAT_VERSION - 1)));

    let error = load(br#"[985148181,[["BTC",[[],[]]]]]"#);
    assert!(
        matches!(error, CheckpointError::NotACheckpoint { .. }),
        "{error}"
    );
    assert!(named(&error).contains("not an l1gate checkpoint"));

    // Damage behind a valid checksum: rkyv's validation.
    let mut garbled = good.clone();
    let len = garbled.len();
    for byte in &mut garbled[len - 64..] {
        *byte = 0xFF;
    }
    reseal(&mut garbled);
    let error = load(&garbled);
    assert!(matches!(error, CheckpointError::Damaged { .. }), "{error}");
    assert!(named(&error).contains("invalid archive"), "{error}");

    // A checkpoint of fewer parts than the run folds.
    let mut books_only = capture(
        &file::load(&sim_by_block().checkpoint, Needs::ALL)
            .unwrap()
            .market,
    );
    books_only.needs = 1;
    let error = load(&file::encode(&books_only).unwrap());
    assert!(matches!(error, CheckpointError::Needs { .. }), "{error}");
    assert!(named(&error).contains("holds books, this run needs books, trades"));
    assert!(file::decode(&file::encode(&books_only).unwrap(), Needs::BOOKS, &path).is_ok());
}

#[test]
fn the_newest_usable_checkpoint_is_loaded_and_the_others_say_why_not() {
    let dir = scratch("fallback");
    let case = sim_by_block();
    let good = sim_bytes();
    let at = case.at;
    // An older good one, the real one, and a newer damaged one.
    let older_state = capture(&fold_through(&case.dir, case.snapshot.as_deref(), at - 50));
    file::write(&dir, &older_state).unwrap();
    std::fs::write(dir.join(file::file_name(at)), &good).unwrap();
    let mut damaged = good.clone();
    damaged[HEADER_LEN + 10] ^= 1;
    std::fs::write(dir.join(file::file_name(at + 20)), &damaged).unwrap();
    let mut other_version = good.clone();
    other_version[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    std::fs::write(dir.join(file::file_name(at + 30)), &other_version).unwrap();
    std::fs::write(dir.join("notes.txt"), b"not a checkpoint name").unwrap();

    let choice = file::newest_usable(&dir, Needs::ALL, Bounds::default()).unwrap();
    let loaded = choice.loaded.expect("the undamaged one loads");
    assert_eq!(loaded.block_number, at);
    let why: Vec<(u64, String)> = choice
        .passed_over
        .iter()
        .map(|(file, why)| (file.block_number, why.to_string()))
        .collect();
    assert_eq!(why.len(), 2, "{why:?}");
    assert_eq!(why[0].0, at + 30);
    assert!(why[0].1.contains("format version"), "{why:?}");
    assert_eq!(why[1].0, at + 20);
    assert!(why[1].1.contains("checksum mismatch"), "{why:?}");

    // Bounds: not newer than a snapshot, past the start, files pruned.
    let choice = file::newest_usable(
        &dir,
        Needs::ALL,
        Bounds {
            below: Some(at),
            ..Bounds::default()
        },
    )
    .unwrap();
    assert_eq!(choice.loaded.map(|l| l.block_number), Some(at - 50));
    assert!(matches!(
        choice.passed_over.last(),
        Some((_, PassedOver::TooLate { start })) if *start == at
    ));
    // Past the start, but where the candle store continues from it.
    let carried = |carried_at| {
        file::newest_usable(
            &dir,
            Needs::ALL,
            Bounds {
                below: Some(at - 60),
                carried_at: Some(carried_at),
                ..Bounds::default()
            },
        )
        .unwrap()
        .loaded
        .map(|l| l.block_number)
    };
    assert_eq!(carried(at), Some(at));
    assert_eq!(carried(at - 50), Some(at - 50));
    assert_eq!(
        carried(at + 1),
        None,
        "only the block the store continues from"
    );
    let choice = file::newest_usable(
        &dir,
        Needs::ALL,
        Bounds {
            above: Some(at),
            below: Some(at + 1),
            ..Bounds::default()
        },
    )
    .unwrap();
    assert!(choice.loaded.is_none(), "nothing newer than the snapshot");
    assert!(matches!(
        choice.passed_over.last(),
        Some((_, PassedOver::NotNewer { snapshot })) if *snapshot == at
    ));
    let choice = file::newest_usable(
        &dir,
        Needs::ALL,
        Bounds {
            below: Some(at + 1),
            files_from: Some(at + 5),
            ..Bounds::default()
        },
    )
    .unwrap();
    assert!(
        choice.loaded.is_none(),
        "the files start after the checkpoint"
    );
    assert!(
        choice
            .passed_over
            .last()
            .unwrap()
            .1
            .to_string()
            .contains("no longer reach back")
    );
    // No directory: nothing to load, no error.
    let choice = file::newest_usable(&dir.join("absent"), Needs::ALL, Bounds::default()).unwrap();
    assert!(choice.loaded.is_none() && choice.passed_over.is_empty());
}

#[test]
fn a_replay_from_a_damaged_checkpoint_fails_naming_it() {
    let dir = scratch("replay-damaged");
    let path = dir.join(file::file_name(1));
    std::fs::write(&path, b"L1GCKPT\0garbage").unwrap();
    let mut opts = ReplayOptions::new(real("btc-985148182"), ViewKind::Bbo);
    opts.selection.coins = vec!["BTC".into()];
    opts.checkpoint = Some(path.clone());
    let error = run(&opts, &mut Vec::new(), &mut |_| {}).unwrap_err();
    assert!(
        error.to_string().contains(&*path.to_string_lossy()),
        "{error}"
    );
}

// ---------------------------------------------------------------------------
// Hostile bytes
// ---------------------------------------------------------------------------

/// A small valid checkpoint: the sim's, from a market of a few books.
fn small_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let case = sim_by_block();
        let mut state = capture(&file::load(&case.checkpoint, Needs::ALL).unwrap().market);
        state.books.truncate(3);
        for book in &mut state.books {
            let keep = book.levels.iter().take(4).map(|l| l.orders as usize).sum();
            book.levels.truncate(4);
            book.orders.truncate(keep);
        }
        file::encode(&state).unwrap().to_vec()
    })
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = small_bytes();
    let path = Path::new("small.ckpt");
    assert!(file::decode(bytes, Needs::ALL, path).is_ok());
    for len in (0..bytes.len()).step_by(7).chain([bytes.len() - 1]) {
        let mut cut = bytes[..len].to_vec();
        assert!(
            file::decode(&cut, Needs::ALL, path).is_err(),
            "cut at {len}"
        );
        reseal(&mut cut);
        // Resealed, the cut reaches rkyv's validation: still an error.
        assert!(
            file::decode(&cut, Needs::ALL, path).is_err(),
            "resealed cut at {len}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Bytes flipped in the body, resealed so that they pass the checksum:
    /// loading gives a market or an error, never a panic.
    #[test]
    fn flipped_bytes_behind_a_valid_checksum_never_panic(
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..8),
    ) {
        let mut bytes = small_bytes().to_vec();
        let body = bytes.len() - HEADER_LEN;
        for (at, mask) in flips {
            bytes[HEADER_LEN + at.index(body)] ^= mask;
        }
        reseal(&mut bytes);
        let _ = file::decode(&bytes, Needs::ALL, Path::new("flipped.ckpt"));
    }

    /// Random bytes after a valid header.
    #[test]
    fn random_bodies_never_panic(body in prop::collection::vec(any::<u8>(), 0..2048)) {
        let mut bytes = small_bytes()[..HEADER_LEN].to_vec();
        bytes.extend_from_slice(&body);
        reseal(&mut bytes);
        prop_assert!(file::decode(&bytes, Needs::ALL, Path::new("random.ckpt")).is_err());
    }
}

/// An edit of a valid state.
type Edit = Box<dyn FnOnce(&mut CheckpointState)>;

/// A state whose archive is well formed but breaks the state's rules.
fn broken(expected: &str, edit: impl FnOnce(&mut CheckpointState)) -> String {
    let mut state = tiny_state();
    edit(&mut state);
    let bytes = file::encode(&state).unwrap();
    match file::decode(&bytes, Needs::ALL, Path::new("broken.ckpt")) {
        Err(CheckpointError::Damaged { reason, .. }) => reason,
        Err(other) => panic!("{expected}: refused otherwise: {other}"),
        Ok(_) => panic!("{expected}: not refused"),
    }
}

#[test]
fn a_well_formed_archive_that_breaks_the_state_rules_is_refused() {
    assert!(
        file::decode(
            &file::encode(&tiny_state()).unwrap(),
            Needs::ALL,
            Path::new("t")
        )
        .is_ok()
    );
    let cases: Vec<(&str, Edit)> = vec![
        (
            "scale 19 above 18",
            Box::new(|s| s.books[0].orders[0].scales[1] = 19),
        ),
        (
            "owner text 99 out of range",
            Box::new(|s| s.books[0].orders[0].user = 99),
        ),
        (
            "order flags",
            Box::new(|s| s.books[0].orders[0].flags = 0x40),
        ),
        (
            "out of book order",
            Box::new(|s| s.books[0].levels[1].bid = true),
        ),
        ("empty level", Box::new(|s| s.books[0].levels[0].orders = 0)),
        (
            "repeated or off its level",
            Box::new(|s| s.books[0].orders[1].oid = 1),
        ),
        (
            "repeated or off its level",
            Box::new(|s| s.books[0].orders[1].limit_px += 1),
        ),
        (
            "more orders than its levels hold",
            Box::new(|s| {
                let extra = s.books[0].orders[0];
                s.books[0].orders.push(extra);
            }),
        ),
        (
            "fewer orders than its levels hold",
            Box::new(|s| {
                s.books[0].orders.pop();
            }),
        ),
        (
            "out of order",
            Box::new(|s| {
                let again = s.books[0].clone();
                s.books.push(again);
            }),
        ),
        ("height", Box::new(|s| s.books_height = Some(u64::MAX))),
        ("blocks folded", Box::new(|s| s.blocks_folded = u64::MAX)),
        (
            "candle interval code",
            Box::new(|s| s.candles.intervals.push(40)),
        ),
        (
            "off the interval's boundaries",
            Box::new(|s| {
                if let Some(live) = s.candles.series[0].series[1].live.as_mut() {
                    live.open_time += 1;
                }
            }),
        ),
        (
            "off the interval's boundaries",
            Box::new(|s| {
                if let Some(live) = s.candles.series[0].series[1].live.as_mut() {
                    live.open_time = i64::MAX - 10;
                }
            }),
        ),
        (
            "candle sum scale",
            Box::new(|s| {
                if let Some(live) = s.candles.series[0].series[1].live.as_mut() {
                    live.volume.scale = 200;
                }
            }),
        ),
        (
            "candle series for",
            Box::new(|s| {
                s.candles.series[0].series.pop();
            }),
        ),
        (
            "changed after the last fold",
            Box::new(|s| s.candles.series[0].series[0].changed_at = 99),
        ),
        ("unknown needs bits", Box::new(|s| s.needs = 0xFF)),
    ];
    for (expected, edit) in cases {
        let reason = broken(expected, edit);
        assert!(
            reason.contains(expected),
            "expected {expected:?} in {reason:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// The format, pinned
// ---------------------------------------------------------------------------

fn decimal(units: i64, scale: u8) -> DecimalState {
    DecimalState { units, scale }
}

/// A small hand-built state touching every archived type.
fn tiny_state() -> CheckpointState {
    let order = |oid: u64, px: i64, user: u32| OrderState {
        oid,
        timestamp: 1_777_582_003_304,
        limit_px: px,
        sz: 25,
        trigger_px: 0,
        orig_sz: 25,
        user,
        trigger_condition: 1,
        order_type: 2,
        tif: 3,
        cloid: u32::MAX,
        cloid_bytes: [0; 16],
        scales: [1, 2, 1, 2],
        flags: 0,
    };
    let mut ask = order(3, 813_080, 4);
    ask.flags = 8 | 4;
    ask.cloid_bytes = [0xAB; 16];
    ask.tif = u32::MAX;
    let candle = CandleState {
        open_time: 1_777_999_140_000,
        next_open: 1_777_999_200_000,
        open: decimal(813_070, 1),
        high: decimal(813_080, 1),
        low: decimal(813_070, 1),
        close: decimal(813_080, 1),
        volume: engine::checkpoint::state::AmountState {
            units: 50,
            scale: 2,
        },
        notional: engine::checkpoint::state::AmountState {
            units: 40_653_750,
            scale: 3,
        },
        trades_count: 2,
        price_scale: 1,
        block_number: 985_148_190,
        time: 1_777_999_153_000,
    };
    let mut series: Vec<SeriesState> = (0..15)
        .map(|_| SeriesState {
            live: None,
            floor: 0,
            changed_at: 0,
        })
        .collect();
    series[1] = SeriesState {
        live: Some(candle),
        floor: 1_777_999_140_000,
        changed_at: 4,
    };
    CheckpointState {
        needs: 31,
        height: Some(985_148_200),
        time_ms: 1_777_999_153_650,
        books_height: Some(985_148_200),
        books_time_ms: 1_777_999_153_650,
        blocks_folded: 19,
        events_seen: 4_321,
        book_coins: None,
        unknown_ids: vec![engine::checkpoint::state::UnknownIdsState {
            coin: "BTC".into(),
            unknown_oid: 1,
            missing_status: 0,
        }],
        pending_resets: vec![],
        // In order of first use, as a capture numbers them.
        texts: vec![
            "0x0000000000000000000000000000000000000001".into(),
            "N/A".into(),
            "Limit".into(),
            "Gtc".into(),
            "0x0000000000000000000000000000000000000002".into(),
        ],
        books: vec![BookState {
            coin: "BTC".into(),
            levels: vec![
                LevelState {
                    bid: true,
                    px: decimal(813_070, 1),
                    total: Some(decimal(50, 2)),
                    orders: 2,
                },
                LevelState {
                    bid: false,
                    px: decimal(813_080, 1),
                    total: None,
                    orders: 1,
                },
            ],
            orders: vec![order(1, 813_070, 0), order(2, 813_070, 4), ask],
        }],
        universe: vec!["BTC".into(), "ETH".into()],
        trades: TradesState {
            position: PositionState {
                block_number: 985_148_200,
                time: 1_777_999_153_650,
            },
            counts: vec![engine::checkpoint::state::CoinCountsState {
                coin: "BTC".into(),
                counts: [2, 0, 0, 0, 1, 0, 0, 0, 0],
            }],
        },
        fills: PositionState {
            block_number: 985_148_200,
            time: 1_777_999_153_650,
        },
        tpsl: TpslState {
            position: PositionState {
                block_number: 985_148_200,
                time: 1_777_999_153_650,
            },
            max_oid: 9,
            orders: vec![engine::checkpoint::state::TriggerOrderState {
                coin: "BTC".into(),
                user: "0xAbc".into(),
                oid: 9,
                bid: false,
                trigger_px: decimal(76_717, 0),
                limit_px: decimal(690_450, 1),
                orig_sz: decimal(0, 1),
                trigger_condition: "Price above 76717".into(),
                order_type: "Take Profit Market".into(),
                is_position_tpsl: true,
                reduce_only: true,
                timestamp: 1_777_582_003_640,
                cloid: Some("client-7".into()),
                sz: decimal(5, 1),
            }],
            // Sixteen parts of accounts in the usual form, then the others.
            positions: (0..17)
                .map(|part| {
                    if part == 16 {
                        vec![engine::checkpoint::state::PositionEntryState {
                            user: "0xabc".into(),
                            coin: "BTC".into(),
                            position: decimal(-5, 1),
                        }]
                    } else {
                        Vec::new()
                    }
                })
                .collect(),
            position_mismatches: 1,
        },
        candles: CandlesState {
            intervals: (0..15).collect(),
            position: PositionState {
                block_number: 985_148_200,
                time: 1_777_999_153_650,
            },
            folds: 19,
            late_trades: 0,
            series: vec![CoinSeriesState {
                coin: "BTC".into(),
                series,
            }],
        },
    }
}

/// The SHA-256 of [`tiny_state`]'s checkpoint. If this test fails, the
/// archive format changed: bump `FORMAT_VERSION` (older checkpoints are then
/// refused instead of misread) and pin the new digest.
const PINNED: &str = "0a7e426c72c76265a7f081ddb4e6930f848e00e9ec05e85cb10edeb2f7470dd1";

#[test]
fn the_archive_format_is_pinned() {
    let bytes = file::encode(&tiny_state()).unwrap();
    let mut digest = String::new();
    for byte in Sha256::digest(&bytes) {
        let _ = write!(digest, "{byte:02x}");
    }
    assert_eq!(
        (FORMAT_VERSION, digest.as_str()),
        (3, PINNED),
        "the archive format changed: bump FORMAT_VERSION and pin the new digest"
    );
    // What it holds comes back whole.
    let market = file::decode(&bytes, Needs::ALL, Path::new("tiny.ckpt")).unwrap();
    assert_eq!(capture(&market), tiny_state());
    let book = market.books().get("BTC").unwrap();
    let ask = book.get(3).unwrap();
    assert_eq!(
        ask.cloid.as_ref().map(ToString::to_string).as_deref(),
        Some("0xabababababababababababababababab")
    );
    assert_eq!(ask.terms.tif, None);
    assert_eq!(
        book.best_bid().unwrap().total_sz().unwrap().to_string(),
        "0.5"
    );
    assert_eq!(
        market
            .tpsl()
            .positions()
            .position("0xABC", "BTC")
            .to_string(),
        "-0.5"
    );
    let candle = market
        .candles()
        .live("BTC", engine::market::candles::Interval::Minute1)
        .unwrap();
    assert_eq!(candle.vwap().unwrap().to_string(), "81307.5");
}

// ---------------------------------------------------------------------------
// Writing while folding
// ---------------------------------------------------------------------------

#[test]
fn the_checkpointer_writes_every_n_blocks_keeps_the_newest_and_leaves_no_temporary_file() {
    let dir = scratch("writer");
    let case = sim_by_block();
    let policy = CheckpointPolicy {
        every_blocks: 40,
        every_ms: 0,
        keep: 2,
    };
    let mut market = Market::from_snapshot(
        snapshot::parse(&std::fs::read(case.snapshot.as_ref().unwrap()).unwrap()).unwrap(),
        Needs::ALL,
    );
    let mut checkpointer = Checkpointer::new(&dir, policy, market.height(), 0);
    let feeds = feeds_of(&case.dir);
    let start = market.height().unwrap() + 1;
    let mut source = BlockSource::new(feeds, SourceOptions::from_block(start)).unwrap();
    let mut taken = Vec::new();
    let mut written = Vec::new();
    loop {
        let at_end = source.read(0).unwrap() == 0;
        while let Some(block) = source.next_block(at_end) {
            market.apply(&block);
            let progress = checkpointer.after_block(&market, 0);
            if let Some(done) = progress.finished {
                written.push(done.unwrap().written.block_number);
            }
            if let Some(t) = progress.taken {
                taken.push(t.block_number);
                // Waited for at once: how many are taken then does not
                // depend on how fast a loaded machine writes (a due one
                // waits for the write before it to end).
                if let Some(done) = checkpointer.finish() {
                    written.push(done.unwrap().written.block_number);
                }
            }
        }
        if at_end {
            break;
        }
    }
    if let Some(done) = checkpointer.finish() {
        written.push(done.unwrap().written.block_number);
    }
    assert!(taken.len() >= 5, "{taken:?}");
    assert_eq!(taken, written);
    for pair in taken.windows(2) {
        assert!(pair[1] - pair[0] >= 40, "{taken:?}");
    }
    let listed: Vec<u64> = file::list(&dir)
        .unwrap()
        .iter()
        .map(|f| f.block_number)
        .collect();
    assert_eq!(listed, taken[taken.len() - 2..], "the newest two kept");
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| Path::new(n).extension().is_none_or(|e| e != "tmp")),
        "{names:?}"
    );
    // The newest resumes exactly where the fold was.
    let newest = file::load(
        &dir.join(file::file_name(*taken.last().unwrap())),
        Needs::ALL,
    )
    .unwrap();
    assert_eq!(newest.block_number, *taken.last().unwrap());
}

#[test]
fn a_checkpoint_is_due_by_count_or_by_time_once_a_block_was_folded() {
    let case = sim_by_block();
    let market = file::load(&case.checkpoint, Needs::ALL).unwrap().market;
    let at = market.height();
    let policy = CheckpointPolicy {
        every_blocks: 10,
        every_ms: 1_000,
        keep: 1,
    };
    let dir = scratch("due");
    let fresh = Checkpointer::new(&dir, policy, at, 5_000);
    assert!(!fresh.due(&market, 5_500), "no block since, no time passed");
    assert!(
        !fresh.due(&market, 60_000),
        "time passed but no block since"
    );
    let behind = Checkpointer::new(&dir, policy, at.map(|h| h - 3), 5_000);
    assert!(!behind.due(&market, 5_999));
    assert!(
        behind.due(&market, 6_000),
        "a block since and the time bound passed"
    );
    let far = Checkpointer::new(&dir, policy, at.map(|h| h - 10), 5_000);
    assert!(far.due(&market, 5_000), "ten blocks since");
    let off = Checkpointer::new(
        &dir,
        CheckpointPolicy {
            every_blocks: 0,
            every_ms: 0,
            keep: 1,
        },
        at.map(|h| h - 1_000),
        0,
    );
    assert!(!off.due(&market, i64::MAX), "off");
    // From empty books: nothing is due until counted from the first block
    // folded (not from block 0), however high its number.
    let mut empty = Checkpointer::new(&dir, policy, None, 5_000);
    assert!(!empty.due(&market, 5_000), "nothing folded yet");
    let progress = empty.after_block(&market, 5_000);
    assert!(
        progress.taken.is_none(),
        "the first block folded is no reason"
    );
    assert!(
        !empty.due(&market, 60_000),
        "counted from the first block: none since, as for a fresh one"
    );
    assert!(CheckpointPolicy::default().enabled());
}

/// A checkpoint directory that cannot be written (a full disk, a path that
/// is not a directory) fails each checkpoint due, says why, and keeps no
/// state that stops the next: once it can be written again, the next due
/// checkpoint is written and loads — a restart then resumes from it, not
/// from the start of the files.
#[test]
fn checkpoints_resume_once_their_directory_can_be_written_again() {
    let blocks = crate::common::by_block_blocks(&real("btc-985148182"));
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("checkpoints");
    // Not a directory: every write under it fails.
    std::fs::write(&dir, b"in the way").unwrap();
    let mut market = Market::new(Needs::ALL);
    let policy = CheckpointPolicy {
        every_blocks: 5,
        every_ms: 0,
        keep: 2,
    };
    let mut checkpointer = Checkpointer::new(&dir, policy, None, 0);
    let mut outcomes = Vec::new();
    let (failing, recovered) = blocks.split_at(blocks.len() / 2);
    for block in failing {
        market.apply(block);
        outcomes.extend(checkpointer.after_block(&market, 0).finished);
    }
    outcomes.extend(checkpointer.finish());
    assert!(!outcomes.is_empty(), "checkpoints were due");
    assert!(outcomes.iter().all(Result::is_err), "{outcomes:?}");
    std::fs::remove_file(&dir).unwrap();
    let mut written = Vec::new();
    for block in recovered {
        market.apply(block);
        written.extend(checkpointer.after_block(&market, 0).finished);
    }
    written.extend(checkpointer.finish());
    let last = written
        .into_iter()
        .filter_map(Result::ok)
        .next_back()
        .expect("a checkpoint written once the directory can be");
    let loaded = engine::checkpoint::load(&last.written.path, Needs::ALL).unwrap();
    assert_eq!(loaded.market.height(), Some(last.written.block_number));
    assert!(last.written.block_number > failing.last().unwrap().number);
}

#[test]
fn a_checkpoint_streamed_into_its_file_has_the_bytes_of_one_encoded_whole() {
    let dir = real("btc-985148182");
    let snapshot = Snapshots::open_at_rest(&dir)
        .unwrap()
        .list()
        .first()
        .map(|file| file.path.clone());
    let market = fold_through(&dir, snapshot.as_deref(), first_block(&dir) + 5);
    let state = capture(&market);
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("checkpoints-streamed");
    let _ = std::fs::remove_dir_all(&out);
    let written = file::write(&out, &state).unwrap();
    let on_disk = std::fs::read(&written.path).unwrap();
    assert_eq!(written.bytes, on_disk.len() as u64);
    let whole = file::encode(&state).unwrap();
    assert!(
        on_disk.as_slice() == whole.as_slice(),
        "the streamed file differs from the encoded bytes ({} vs {} bytes)",
        on_disk.len(),
        whole.len()
    );
}

/// What the checkpointer takes — the state serialised book by book as it
/// is read, never copied whole — is the archive of what `capture` copies:
/// it validates, deserialises to the captured state, restores the same
/// market, and has the same bytes.
#[rstest]
#[case::real(Data::RealBtc)]
#[case::unsnapshotted(Data::RealUnsnapshotted)]
#[case::sim(Data::Sim)]
#[case::streaming(Data::SimStreaming)]
fn a_checkpoint_taken_book_by_book_archives_the_captured_state(#[case] data: Data) {
    let case = data.case();
    let market = file::load(&case.checkpoint, Needs::ALL).unwrap().market;
    let dir = scratch(&format!("book-by-book-{data:?}"));
    let mut checkpointer = Checkpointer::new(&dir, CheckpointPolicy::default(), None, 0);
    let progress = checkpointer.take_now(&market, 0);
    let taken = progress.taken.expect("taken");
    let captured = capture(&market);
    assert_eq!(taken.block_number, case.at);
    assert_eq!(taken.orders, captured.order_count());
    if data == Data::RealBtc {
        // A book deeper than the parts (4,096 orders) a deep book's orders
        // are archived in.
        let deepest = captured.books.iter().map(|book| book.orders.len()).max();
        assert!(deepest > Some(4096), "deepest book: {deepest:?} orders");
    }
    if data == Data::Sim {
        // Positions, which the checkpoint archives borrowed from the live
        // table.
        let positions: usize = captured.tpsl.positions.iter().map(Vec::len).sum();
        assert!(positions > 100, "{positions}");
        // Trigger orders, archived from the tracker's table likewise.
        assert!(
            captured.tpsl.orders.len() > 10,
            "{}",
            captured.tpsl.orders.len()
        );
    }
    let finished = checkpointer.finish().expect("written").unwrap();
    let bytes = std::fs::read(&finished.written.path).unwrap();
    assert_eq!(finished.written.bytes, bytes.len() as u64);
    let (header, archived) = file::validate(&bytes, &finished.written.path).unwrap();
    assert_eq!(header.block_number, case.at);
    let state: CheckpointState =
        rkyv::deserialize::<CheckpointState, rkyv::rancor::Error>(archived).unwrap();
    assert_eq!(state, captured);
    let loaded = file::load(&finished.written.path, Needs::ALL).unwrap();
    assert_eq!(capture(&loaded.market), captured);
    // Byte for byte the archive of the whole copy: the parts in rkyv's
    // order, the same padding.
    assert!(
        bytes[..] == file::encode(&captured).unwrap()[..],
        "the streamed checkpoint differs from the encoded capture"
    );
}

//! Golden checks of every replay view's frames: over the real captures and
//! over two simulator runs (by-block and streaming layouts), each case's
//! output must stay byte-identical. A case is pinned by its frame count,
//! byte count and SHA-256 in `tests/golden/views/<case>.digest` (the L4
//! snapshots make some outputs megabytes long); on a mismatch the actual
//! output is written under the test's target directory for a diff.
//!
//! Regenerate after an intended output change with:
//! `L1GATE_REGEN_GOLDEN=1 cargo test -p engine --test engine golden::`

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use engine::replay::{ReplayOptions, ViewKind, run};
use fixtures::{OutputMode, RunOptions, SimConfig};
use rstest::rstest;
use sha2::{Digest as _, Sha256};

use crate::common::real;

const DIGESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/views");

/// Where a case's node files come from.
#[derive(Debug, Clone, Copy)]
enum Data {
    /// `shared/data/real/<name>`.
    Real(&'static str),
    /// The small simulator profile, seed 7, 300 blocks, in this layout.
    Sim(OutputMode),
}

impl Data {
    fn dir(self) -> PathBuf {
        match self {
            Data::Real(name) => real(name),
            Data::Sim(mode) => simulated(mode).to_path_buf(),
        }
    }
}

/// The simulator's output for `mode`, written once per test run.
fn simulated(mode: OutputMode) -> &'static Path {
    static BY_BLOCK: OnceLock<PathBuf> = OnceLock::new();
    static STREAMING: OnceLock<PathBuf> = OnceLock::new();
    let (cell, name) = match mode {
        OutputMode::Streaming => (&STREAMING, "golden-sim-streaming"),
        _ => (&BY_BLOCK, "golden-sim-by-block"),
    };
    cell.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
        let _ = std::fs::remove_dir_all(&dir);
        let mut config = SimConfig::small(7);
        config.mode = mode;
        let run = RunOptions {
            blocks: Some(300),
            no_replica_cmds: true,
            ..RunOptions::default()
        };
        fixtures::generate(&config, &dir, &run, &mut |_| {}).unwrap();
        dir
    })
}

fn options(data: Data, view: ViewKind, coins: &[&str]) -> ReplayOptions {
    let mut opts = ReplayOptions::new(data.dir(), view);
    opts.selection.coins = coins.iter().map(|&c| c.to_owned()).collect();
    opts
}

fn aggregated(mut opts: ReplayOptions) -> ReplayOptions {
    opts.selection.n_levels = Some(0);
    opts.selection.n_sig_figs = Some(5);
    opts.selection.mantissa = Some(2);
    opts.selection.strict = true;
    opts
}

fn interval(mut opts: ReplayOptions, interval: &str) -> ReplayOptions {
    opts.selection.interval = Some(interval.to_owned());
    opts
}

fn users(mut opts: ReplayOptions, users: &[&str]) -> ReplayOptions {
    opts.selection.users = users.iter().map(|&u| u.to_owned()).collect();
    opts
}

const BTC: Data = Data::Real("btc-985148182");
const BTC_NO_SNAPSHOT: Data = Data::Real("btc-978995377");
/// The account with the most fills in `btc-985148182`.
const USER: &str = "0x17C3C8FDBCB7D1B240CE08965E09B1FC91CBA868";
const SIM: Data = Data::Sim(OutputMode::ByBlock);
const SIM_STREAMING: Data = Data::Sim(OutputMode::Streaming);
/// The accounts with the most fills in the small simulator run.
const SIM_USERS: [&str; 2] = [
    "0x033a73442af14878a8ea4e5d449d17ed43e2a720",
    "0x8c94a36d0b42d86e47b21790e0c52c023dbb64b0",
];
const SIM_COINS: [&str; 6] = ["BTC", "ETH", "@107", "xyz:NVDA", "#1890", "PURR/USDC"];

#[rstest]
#[case::real_l2book("real_l2book", options(BTC, ViewKind::L2Book, &["BTC"]))]
#[case::real_l2book_aggregated("real_l2book_aggregated", aggregated(options(BTC, ViewKind::L2Book, &["BTC"])))]
#[case::real_bbo("real_bbo", options(BTC, ViewKind::Bbo, &["BTC"]))]
#[case::real_l2diff("real_l2diff", options(BTC, ViewKind::L2Diff, &["BTC"]))]
#[case::real_l2diff_aggregated("real_l2diff_aggregated", aggregated(options(BTC, ViewKind::L2Diff, &["BTC"])))]
#[case::real_l4book("real_l4book", options(BTC, ViewKind::L4Book, &["BTC"]))]
#[case::real_l4updates("real_l4updates", options(BTC, ViewKind::L4Updates, &["BTC"]))]
#[case::real_tpsl("real_tpsl", options(BTC, ViewKind::Tpsl, &[]))]
#[case::real_trades("real_trades", options(BTC, ViewKind::Trades, &["BTC"]))]
#[case::real_fills("real_fills", options(BTC, ViewKind::Fills, &[]))]
#[case::real_candles("real_candles", interval(options(BTC, ViewKind::Candles, &["BTC"]), "1s"))]
#[case::real_mids("real_mids", options(BTC, ViewKind::Mids, &[]))]
#[case::real_user_fills("real_user_fills", users(options(BTC, ViewKind::Fills, &[]), &[USER]))]
#[case::real_open_orders("real_open_orders", users(options(BTC, ViewKind::OpenOrders, &[]), &[USER]))]
#[case::real_user_l4updates("real_user_l4updates", users(options(BTC, ViewKind::L4Updates, &["BTC"]), &[USER]))]
#[case::unsnapshotted_bbo("unsnapshotted_bbo", options(BTC_NO_SNAPSHOT, ViewKind::Bbo, &["BTC"]))]
#[case::unsnapshotted_l2diff("unsnapshotted_l2diff", options(BTC_NO_SNAPSHOT, ViewKind::L2Diff, &["BTC"]))]
#[case::unsnapshotted_l4book("unsnapshotted_l4book", options(BTC_NO_SNAPSHOT, ViewKind::L4Book, &["BTC"]))]
#[case::unsnapshotted_l4updates("unsnapshotted_l4updates", options(BTC_NO_SNAPSHOT, ViewKind::L4Updates, &[]))]
#[case::unsnapshotted_tpsl("unsnapshotted_tpsl", options(BTC_NO_SNAPSHOT, ViewKind::Tpsl, &["BTC"]))]
#[case::unsnapshotted_trades("unsnapshotted_trades", options(BTC_NO_SNAPSHOT, ViewKind::Trades, &["BTC"]))]
#[case::unsnapshotted_fills("unsnapshotted_fills", options(BTC_NO_SNAPSHOT, ViewKind::Fills, &["BTC"]))]
#[case::unsnapshotted_candles("unsnapshotted_candles", interval(options(BTC_NO_SNAPSHOT, ViewKind::Candles, &["BTC"]), "1m"))]
#[case::sim_l2book("sim_l2book", options(SIM, ViewKind::L2Book, &SIM_COINS))]
#[case::sim_l2book_aggregated("sim_l2book_aggregated", aggregated(options(SIM, ViewKind::L2Book, &["BTC", "ETH"])))]
#[case::sim_bbo("sim_bbo", options(SIM, ViewKind::Bbo, &SIM_COINS))]
#[case::sim_l2diff("sim_l2diff", options(SIM, ViewKind::L2Diff, &SIM_COINS))]
#[case::sim_l4book("sim_l4book", options(SIM, ViewKind::L4Book, &["ETH", "#1890"]))]
#[case::sim_l4updates("sim_l4updates", options(SIM, ViewKind::L4Updates, &[]))]
#[case::sim_tpsl("sim_tpsl", options(SIM, ViewKind::Tpsl, &[]))]
#[case::sim_trades("sim_trades", options(SIM, ViewKind::Trades, &SIM_COINS))]
#[case::sim_fills("sim_fills", options(SIM, ViewKind::Fills, &[]))]
#[case::sim_candles("sim_candles", interval(options(SIM, ViewKind::Candles, &SIM_COINS), "5m"))]
#[case::sim_mids("sim_mids", options(SIM, ViewKind::Mids, &[]))]
#[case::sim_open_orders("sim_open_orders", users(options(SIM, ViewKind::OpenOrders, &[]), &[SIM_USERS[0], SIM_USERS[1]]))]
#[case::streaming_bbo("streaming_bbo", options(SIM_STREAMING, ViewKind::Bbo, &SIM_COINS))]
#[case::streaming_l4updates("streaming_l4updates", options(SIM_STREAMING, ViewKind::L4Updates, &[]))]
#[case::streaming_tpsl("streaming_tpsl", options(SIM_STREAMING, ViewKind::Tpsl, &[]))]
#[case::streaming_trades("streaming_trades", options(SIM_STREAMING, ViewKind::Trades, &SIM_COINS))]
#[case::streaming_candles("streaming_candles", interval(options(SIM_STREAMING, ViewKind::Candles, &["BTC", "ETH"]), "1m"))]
fn frames_match_the_golden_digest(#[case] name: &str, #[case] opts: ReplayOptions) {
    let mut out = Vec::new();
    let summary = run(&opts, &mut out, &mut |_| {}).unwrap();
    assert!(summary.frames > 0, "{name}: no frame: {summary}");
    let digest = digest_of(&out, summary.frames);
    let path = Path::new(DIGESTS).join(format!("{name}.digest"));
    if std::env::var_os("L1GATE_REGEN_GOLDEN").is_some() {
        std::fs::create_dir_all(DIGESTS).unwrap();
        std::fs::write(&path, &digest).unwrap();
    }
    let pinned = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (regenerate: see the module doc)", path.display()));
    if pinned != digest {
        let actual = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("golden-{name}.jsonl"));
        std::fs::write(&actual, &out).unwrap();
        panic!(
            "{name}: frames changed\n pinned: {pinned} actual: {digest} output: {}",
            actual.display()
        );
    }
}

/// `frames bytes sha256`, one line.
fn digest_of(out: &[u8], frames: u64) -> String {
    let mut text = format!("{frames} {} ", out.len());
    for byte in Sha256::digest(out) {
        let _ = write!(text, "{byte:02x}");
    }
    text.push('\n');
    text
}
